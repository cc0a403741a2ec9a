package gate

import (
	"context"
	"net/netip"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/dnsanswer"
	"github.com/lockhttp/lockhttp/internal/judge"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/secrets"
)

// DNSConfig is the configuration of the DNS answerer on the transparent address addr: each
// source's container as [sources] names it (an unknown source is REFUSED; with no policy yet,
// or an audit that cannot be written, every query gets SERVFAIL), and a record of each answered
// query in the audit. Its records are the gate's own answers: past -audit-summarize-after a
// second per container, one summary (docs/audit.md).
func (g *Gate) DNSConfig(addr netip.Addr) dnsanswer.Config {
	return dnsanswer.Config{Addr: addr, Logger: g.log, Now: g.now,
		Status: func(src netip.Addr) dnsanswer.Status {
			pol := g.pol.Load()
			if pol == nil || g.audit.Healthy() != nil {
				return dnsanswer.Failing
			}
			if _, ok := judge.Source(pol, &judge.Request{Source: src}); !ok {
				return dnsanswer.Unknown
			}
			return dnsanswer.Known
		},
		Record: g.recordDNS,
	}
}

// recordDNS writes the record of one answered DNS query.
func (g *Gate) recordDNS(q dnsanswer.Query) {
	pol := g.pol.Load()
	rec := &audit.Record{Time: g.now(), Event: "dns", ID: g.newID(), Method: q.Type}
	var d *secrets.Detector
	if in := g.insp.Load(); in != nil && pol != nil {
		d = in.Secrets
	}
	rec.URL = recordHost(d, q.Name) // a label can carry a credential: the record masks it
	var dec policy.Decision
	switch {
	case pol == nil:
		dec = judge.DecisionNoPolicy
	default:
		rec.Policy = pol.Version
		res, ok := judge.Source(pol, &judge.Request{Source: q.Source})
		rec.Container = res.Container
		switch {
		case !ok:
			dec = res.Decision
		case q.RCode == "SERVFAIL":
			dec = judge.DecisionNoAudit
		case q.Answered():
			dec = judge.DecisionDNS
		default:
			dec = judge.DecisionDNSRefused
		}
	}
	rec.Verdict, rec.Code, rec.Rule, rec.Reason = dec.Verdict.String(), string(dec.Code), dec.Rule, dec.Reason
	switch {
	case q.Addr.IsValid():
		rec.Detail = "answered " + q.Type + " " + q.Addr.String()
	case q.Answered():
		rec.Detail = "answered no address (NODATA)"
	default:
		rec.Detail = "answered " + q.RCode
	}
	if q.TCP {
		rec.Detail += " over TCP"
	}
	ctx, cancel := context.WithTimeout(context.Background(), auditWait)
	defer cancel()
	if err := g.audit.Write(ctx, rec); err != nil {
		g.log.Error("audit write failed", logID, rec.ID, "err", err)
	}
	g.logRecord(rec)
}
