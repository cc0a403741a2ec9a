package gate

import (
	"strings"
	"time"

	"github.com/lockhttp/lockhttp/internal/judge"
	"github.com/lockhttp/lockhttp/internal/metrics"
	"github.com/lockhttp/lockhttp/internal/policy"
)

// The gate's metrics (Config.Metrics): one count per finished request, at the one place every
// request is finished (exchange.fill), resolved once per connection and key so that a
// keep-alive connection counts its requests with an atomic add and no lookup.

// connCounts is the counters a connection's last request was counted on, and their key.
type connCounts struct {
	key metrics.RequestKey
	c   *metrics.Requests
}

// count counts the finished request of ex: its key (container, kind, verdict, code) and bytes.
func (g *Gate) count(ex *exchange) {
	m := g.cfg.Metrics
	if m == nil {
		return
	}
	r := &ex.rec
	k := metrics.RequestKey{Container: r.Container, Kind: r.Event, Verdict: r.Verdict, Code: r.Code}
	var c *metrics.Requests
	ci := ex.ci
	if ci != nil {
		if last := ci.counts.Load(); last != nil && last.key == k {
			c = last.c
		}
	}
	if c == nil {
		c = m.Requests(k)
		if ci != nil {
			ci.counts.Store(&connCounts{key: k, c: c})
		}
	}
	c.Add(r.BytesIn, r.BytesOut)
	if r.Code == string(policy.CodeBudget) {
		m.BudgetRefused(r.Container, strings.TrimPrefix(r.Rule, "budget:"))
	}
}

// decide is judge.Decide, timed for lockhttp_gate_decision_duration_seconds.
func (g *Gate) decide(e *judge.Env, v *judge.Request, kind string) judge.Result {
	m := g.cfg.Metrics
	if m == nil {
		return judge.Decide(e, v)
	}
	start := time.Now()
	res := judge.Decide(e, v)
	m.Decided(kind, time.Since(start))
	return res
}

// MetricsState is what the gate's gauges read at each scrape.
func (g *Gate) MetricsState() metrics.GateState {
	return metrics.GateState{
		Tunnels: func() int {
			g.mu.Lock()
			defer g.mu.Unlock()
			return len(g.tunnels)
		},
		Connections: func() int {
			if cl := g.conns.Load(); cl != nil {
				return cl.Counts().Held
			}
			return 0
		},
		HeldBytes: func() int64 {
			g.held.mu.Lock()
			defer g.held.mu.Unlock()
			return g.held.total
		},
	}
}
