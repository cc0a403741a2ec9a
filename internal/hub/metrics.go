package hub

import (
	"strings"
	"time"

	"github.com/lockhttp/lockhttp/internal/metrics"
)

// closed counts t's outcome (its status now) for the metrics; facade is who decided ("" for an
// expiry).
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
	ctx, cancel := h.ctx()
	defer cancel()
	st, err := h.store.Counts(ctx, h.now(), h.window())
	if err != nil {
		h.log.Error("hub: reading the counts for the metrics failed", "err", err)
		return metrics.HubState{Pending: map[string]int{}}
	}
	return st
}
