package hub

import (
	"fmt"
	"time"
)

// maxCutReport bounds one ticket's count of cut requests in a report: the gate journals at most
// as many held requests at once.
const maxCutReport = 1 << 16

// checkHoldings refuses counts no gate reports.
func checkHoldings(s Holdings) error {
	for id, n := range s.Held {
		if n < 0 {
			return fmt.Errorf("ticket %q: a negative count (%d) of held requests", id, n)
		}
	}
	for id, n := range s.Cut {
		if n < 1 || n > maxCutReport {
			return fmt.Errorf("ticket %q: a count of cut requests (%d) not from 1 to %d", id, n, maxCutReport)
		}
	}
	return nil
}

// SetHoldings sets the count of held requests (Holders) of every pending ticket to what the gate
// holds on it (zero for a ticket it does not name), except where a call of the gate is on its
// way (Asking, Busy), and counts the requests a kill of the gate cut (Cut). Each ticket whose
// count changed is published. It returns how many changed.
func (h *Hub) SetHoldings(s Holdings) int { return h.SetHoldingsAs("", s) }

// SetHoldingsAs is SetHoldings for the gate named gate: what other gates hold stands.
func (h *Hub) SetHoldingsAs(gate string, s Holdings) int {
	ctx, cancel := h.ctx()
	defer cancel()
	changed, err := h.store.SetHoldings(ctx, gate, s, h.now())
	if err != nil {
		h.log.Error("hub: the gate's report of what it holds was not kept; its next one tries again", "err", err)
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range changed {
		t := &changed[i]
		h.log.Info("hub: held requests recounted", "id", t.ID, "now", t.Holders)
		h.publish(Event{Type: "ticket", Ticket: h.copyTicket(t)})
	}
	return len(changed)
}

// waitingText is Ticket.Waiting for t: on a pending ticket no request is held on, that none is,
// why, and what approving it does; on an approved ticket that released none, what the approval
// stands for and until when.
func (h *Hub) waitingText(t *Ticket) string {
	switch {
	case t.Kind == KindRule:
		return ""
	case t.Status == Pending && t.Holders == 0:
		return "Nothing is waiting on this ticket now (" + goneWords(t.Gone) + "). Approving it lets one identical retry of the request through within " +
			words(h.window()) + " of the approval; no request goes out unless the agent sends it again."
	case t.Status == Approved && t.Decision != nil && t.Decision.Released == 0:
		return "Nothing was waiting on this ticket when it was approved (" + goneWords(t.Gone) + "): the approval lets one identical retry of the request through until " +
			t.Decision.At.Add(h.window()).UTC().Format("15:04:05 UTC") + " (" + words(h.window()) + "), once."
	}
	return ""
}

// goneWords says why no request is held on a ticket, for a person.
func goneWords(gone string) string {
	switch gone {
	case GoneRestart:
		return "the gate restarted while its request was held: the request was cut, and its record in the gate's audit says so"
	case GoneLeft:
		return "the hold ended: the agent was told to retry (E_PENDING), or its client went away"
	}
	return "no request is held on it"
}

// words is a duration for a person: "10 minutes", "90 seconds".
func words(d time.Duration) string {
	switch {
	case d%time.Hour == 0 && d >= time.Hour:
		return plural(int(d/time.Hour), "hour")
	case d%time.Minute == 0 && d >= time.Minute:
		return plural(int(d/time.Minute), "minute")
	}
	return plural(int(d.Round(time.Second)/time.Second), "second")
}

func plural(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return fmt.Sprintf("%d %ss", n, unit)
}

// leave is Leave (LeaveCut when cut) from gate, then the ticket's new count published, so that
// every facade shows it.
func (h *Hub) leave(gate, id string, cut bool) {
	t, ok := h.leaveAs(gate, id, cut)
	if !ok || t.Status != Pending {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.publish(Event{Type: "ticket", Ticket: h.copyTicket(&t)})
}
