package gate

import (
	"context"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/judge"
	"github.com/lockhttp/lockhttp/internal/policy"
)

// intend writes ex's intent record (audit.Intent) into the audit file before the request's
// first byte goes to its origin: a gate killed while the request is out leaves its record, which
// its outcome's record completes once the answer is in. It waits for the write, not an fsync
// (Auditor.Append: a killed gate loses nothing the kernel has), sharing it with the other
// requests' records (group commit). When the record cannot be written, nothing goes out: it
// returns the refusal (E_NO_AUDIT), for the caller to record and answer.
func (g *Gate) intend(ctx context.Context, ex *exchange) (policy.Decision, bool) {
	rec := audit.Intent(&ex.rec, g.now())
	err := g.audit.Append(ctx, &rec)
	if err == nil {
		return policy.Decision{}, true
	}
	g.log.Error("audit write failed: the request is refused rather than sent without its intent record", logID, ex.rec.ID, "err", err)
	return judge.NoAudit(err), false
}
