package doctor

import (
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/signer"
	"github.com/lockhttp/lockhttp/internal/signerapi"
)

func TestAssessIntermediates(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) string { return now.Add(d).Format(time.RFC3339) }
	good := func() *signerapi.IntermediateHealth {
		return &signerapi.IntermediateHealth{Subject: "CN=lockhttp intermediate spiffe://lockhttp/signer/n1", SHA256: "ab12cd34ef56ab12",
			NotAfter: at(3 * time.Hour), Renewed: at(-5 * time.Hour), Next: at(time.Hour)}
	}
	for _, tc := range []struct {
		name  string
		edit  func(*signerapi.IntermediateHealth) *signerapi.IntermediateHealth
		level Level
		check string
		want  string
	}{
		{"the chain", nil, OK, "chain", `leaf <- intermediate "CN=lockhttp intermediate spiffe://lockhttp/signer/n1" (sha256 ab12cd34ef56, expires 2026-12-01T15:00:00Z (in 3h0m0s)) <- root "CN=lockhttp root CA"`},
		{"the last renewal", nil, OK, "intermediate", "last renewal 2026-12-01T07:00:00Z (5h0m0s ago); next request to the root 2026-12-01T13:00:00Z (in 1h0m0s)"},
		{"renewals failing", func(h *signerapi.IntermediateHealth) *signerapi.IntermediateHealth {
			h.Error, h.Failed = "root signer at https://10.0.0.1:3140: connection refused", at(-time.Minute)
			return h
		}, Warn, "intermediate", "the last renewal failed 2026-12-01T11:59:00Z (1m0s ago): root signer at https://10.0.0.1:3140: connection refused; the node signs with its current intermediate until 2026-12-01T15:00:00Z (in 3h0m0s), then refuses"},
		{"expired", func(h *signerapi.IntermediateHealth) *signerapi.IntermediateHealth {
			h.NotAfter, h.Error = at(-time.Second), "connection refused"
			return h
		}, Error, "intermediate", "holds no valid intermediate (the last expired 2026-12-01T11:59:59Z (1s ago); last request to the root: connection refused): every decrypted host is refused with E_NO_SIGNER; fix:"},
		{"never got one", func(h *signerapi.IntermediateHealth) *signerapi.IntermediateHealth {
			return &signerapi.IntermediateHealth{Error: "403 Forbidden", Failed: at(0)}
		}, Error, "intermediate", "(it never got one; last request to the root: 403 Forbidden)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			im := good()
			if tc.edit != nil {
				im = tc.edit(im)
			}
			f := &Facts{Now: now, Signer: &SignerFacts{Health: &signer.Health{CASubject: "CN=lockhttp root CA", CASHA256: "ffee", Role: "node", Intermediate: im}}}
			r := &Report{}
			assessIntermediates(r, f)
			for _, l := range r.Find(tc.check) {
				if l.Level == tc.level && strings.Contains(l.Text, tc.want) {
					return
				}
			}
			t.Errorf("no %s %s line saying %q in\n%+v", tc.level, tc.check, tc.want, r.Lines)
		})
	}
	// A signer holding its own CA shows no chain.
	r := &Report{}
	assessIntermediates(r, &Facts{Now: now, Signer: &SignerFacts{Health: &signer.Health{CASHA256: "ffee"}}})
	if len(r.Find("chain"))+len(r.Find("intermediate")) != 0 {
		t.Errorf("a single CA's signer: %+v", r)
	}
}
