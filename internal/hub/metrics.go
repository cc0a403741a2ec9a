package hub

import (
	"strings"
	"time"

	"github.com/lockhttp/lockhttp/internal/metrics"
)

// closed counts t's outcome (its status now) for the metrics; facade is who decided ("" for an
// expiry). The caller holds mu.
func (h *Hub) closed(t *Ticket, facade string, now time.Time) {
	outcome := metrics.OutcomeExpired
	switch t.Status {
	case Approved:
		outcome = metrics.OutcomeApproved
	case Denied:
		outcome = metrics.OutcomeDenied
	}
	h.cfg.Metrics.Closed(t.Container, outcome, facade, now.Sub(t.Created))
}

// facadeName is the facade part of a decision's "by" ("phone" of "phone:pixel-7"): a label of
// bounded values, never the person's name.
func facadeName(by string) string {
	f, _, _ := strings.Cut(by, ":")
	switch f {
	case "terminal", "cli", "phone", "notify":
		return f
	}
	return "other"
}

// MetricsState is what the hub's gauges read at each scrape: the pending tickets of each
// container (0 for one whose tickets of the last day are all closed), the approvals that still let a request through, the CONNECT grants open.
func (h *Hub) MetricsState() metrics.HubState {
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	st := metrics.HubState{Pending: map[string]int{}}
	for _, t := range h.tickets {
		st.Pending[t.Container] += 0 // a container with tickets of the last day shows 0, not nothing
		switch {
		case t.Status == Pending:
			st.Pending[t.Container]++
		case t.Status == Approved && t.Uses > 0 && t.Decision != nil && now.Sub(t.Decision.At) < h.window():
			st.Authorisations++
		}
	}
	for _, until := range h.grants {
		if now.Before(until) {
			st.Grants++
		}
	}
	return st
}
