package hub

import (
	"fmt"
)

// Holdings is what the gate holds on the hub's tickets, as it reports it (POST
// /v1/gate/holdings) when its event stream connects and every few seconds after: the hub sets
// its counts by it, so that a Leave or a Claim that never arrived (the hub stalled, the answer of
// an Ask was lost, the gate restarted, the hub restarted) does not leave a count standing.
type Holdings struct {
	// Held is, for each ticket the gate holds requests on, how many.
	Held map[string]int `json:"held"`
	// Asking are the fingerprints of the asks on their way: the tickets they create or join are
	// left as the hub counts them.
	Asking []string `json:"asking,omitempty"`
	// Busy are the tickets with a claim or a leave on its way, left as the hub counts them.
	Busy []string `json:"busy,omitempty"`
}

// check refuses counts no gate reports.
func (s Holdings) check() error {
	for id, n := range s.Held {
		if n < 0 {
			return fmt.Errorf("ticket %q: a negative count (%d) of held requests", id, n)
		}
	}
	return nil
}

// SetHoldings sets the count of held requests (Holders) of every pending ticket to what the gate
// holds on it (zero for a ticket it does not name), except where a call of the gate is on its
// way (Asking, Busy). Each ticket whose count changed is published. It returns how many changed.
func (h *Hub) SetHoldings(s Holdings) int {
	asking := make(map[string]bool, len(s.Asking))
	for _, fp := range s.Asking {
		asking[fp] = true
	}
	busy := make(map[string]bool, len(s.Busy))
	for _, id := range s.Busy {
		busy[id] = true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	changed := 0
	for _, t := range h.tickets {
		if t.Status != Pending || busy[t.ID] || asking[t.Fingerprint] {
			continue
		}
		want := max(0, s.Held[t.ID])
		if t.Holders == want {
			continue
		}
		h.log.Info("hub: held requests recounted", "id", t.ID, "was", t.Holders, "now", want)
		t.Holders = want
		changed++
		h.changed()
		h.publish(Event{Type: "ticket", Ticket: copyTicket(t)})
	}
	return changed
}

// leave is Leave, then the ticket's new count published, so that every facade shows it.
func (h *Hub) leave(id string) {
	h.Leave(id)
	h.mu.Lock()
	defer h.mu.Unlock()
	if t, ok := h.tickets[id]; ok && t.Status == Pending {
		h.publish(Event{Type: "ticket", Ticket: copyTicket(t)})
	}
}
