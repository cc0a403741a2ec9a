package hub

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func holders(t *testing.T, h *Hub, id string) int {
	t.Helper()
	got, ok := h.Get(id)
	if !ok {
		t.Fatalf("no ticket %s", id)
	}
	return got.Holders
}

// The gate's report sets the counts of pending tickets, except where a call of the gate is on its
// way; decided tickets keep theirs.
func TestSetHoldings(t *testing.T) {
	tests := []struct {
		name string
		s    func(a, b, c Ticket) Holdings
		want [3]int // holders of a, b, c after
		n    int    // changed
	}{
		{name: "the gate holds what the hub counts", s: func(a, b, c Ticket) Holdings {
			return Holdings{Held: map[string]int{a.ID: 2, b.ID: 1}}
		}, want: [3]int{2, 1, 5}},
		{name: "lost leaves", s: func(a, b, c Ticket) Holdings {
			return Holdings{Held: map[string]int{a.ID: 1}}
		}, want: [3]int{1, 0, 5}, n: 2},
		{name: "a restarted gate holds nothing", s: func(a, b, c Ticket) Holdings { return Holdings{} }, want: [3]int{0, 0, 5}, n: 2},
		{name: "a restarted hub counts again", s: func(a, b, c Ticket) Holdings {
			return Holdings{Held: map[string]int{a.ID: 4, b.ID: 3}}
		}, want: [3]int{4, 3, 5}, n: 2},
		{name: "an ask on its way leaves its ticket alone", s: func(a, b, c Ticket) Holdings {
			return Holdings{Asking: []string{a.Fingerprint}}
		}, want: [3]int{2, 0, 5}, n: 1},
		{name: "a leave on its way leaves its ticket alone", s: func(a, b, c Ticket) Holdings {
			return Holdings{Held: map[string]int{a.ID: 1}, Busy: []string{b.ID}}
		}, want: [3]int{1, 1, 5}, n: 1},
		{name: "unknown tickets are ignored", s: func(a, b, c Ticket) Holdings {
			return Holdings{Held: map[string]int{a.ID: 2, b.ID: 1, "t000000000000": 9}}
		}, want: [3]int{2, 1, 5}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := newHub(t, "")
			a, _ := h.Ask(ask("fp1:a"))
			h.Ask(ask("fp1:a"))
			b, _ := h.Ask(ask("fp1:b"))
			c, _ := h.Ask(ask("fp1:c"))
			for range 4 {
				h.Ask(ask("fp1:c"))
			}
			if _, err := h.Decide(c.Ticket.ID, "fp1:c", false, "cli:root", "no"); err != nil {
				t.Fatal(err)
			}
			events, cancel := h.Subscribe()
			defer cancel()
			n := h.SetHoldings(tc.s(a.Ticket, b.Ticket, c.Ticket))
			got := [3]int{holders(t, h, a.Ticket.ID), holders(t, h, b.Ticket.ID), holders(t, h, c.Ticket.ID)}
			if got != tc.want || n != tc.n {
				t.Fatalf("holders %v, %d changed; want %v, %d", got, n, tc.want, tc.n)
			}
			if len(events) != tc.n {
				t.Fatalf("%d events for %d changes", len(events), tc.n)
			}
			for range tc.n {
				if ev := <-events; ev.Type != "ticket" || ev.Ticket == nil {
					t.Fatalf("event %+v", ev)
				}
			}
		})
	}
}

// A request that stops waiting is published with its ticket's new count: the phone's list and
// the terminal show it at once.
func TestLeaveIsPublished(t *testing.T) {
	h, _ := newHub(t, "")
	a, _ := h.Ask(ask("fp1:a"))
	h.Ask(ask("fp1:a"))
	events, cancel := h.Subscribe()
	defer cancel()
	srv := httptest.NewServer(h.GateHandler("gate-token-0123"))
	defer srv.Close()
	post(t, srv.URL+"/v1/gate/leave", "gate-token-0123", `{"id":"`+a.Ticket.ID+`"}`, 204)
	select {
	case ev := <-events:
		if ev.Type != "ticket" || ev.Ticket.ID != a.Ticket.ID || ev.Ticket.Holders != 1 {
			t.Fatalf("event %+v", ev)
		}
	default:
		t.Fatal("no event after a leave")
	}
}

// Holdings from anyone but the gate, or that no gate sends, are refused and change nothing.
func TestHoldingsRoute(t *testing.T) {
	h, _ := newHub(t, "")
	a, _ := h.Ask(ask("fp1:a"))
	srv := httptest.NewServer(h.GateHandler("gate-token-0123"))
	defer srv.Close()
	post(t, srv.URL+"/v1/gate/holdings", "wrong", `{"held":{}}`, 401)
	post(t, srv.URL+"/v1/gate/holdings", "gate-token-0123", `{"held":{"`+a.Ticket.ID+`":-1}}`, 400)
	post(t, srv.URL+"/v1/gate/holdings", "gate-token-0123", `{"held":{},"extra":1}`, 400)
	post(t, srv.URL+"/v1/gate/holdings", "gate-token-0123", `{"held":[1]}`, 400)
	if holders(t, h, a.Ticket.ID) != 1 {
		t.Fatal("a refused report changed the count")
	}
	post(t, srv.URL+"/v1/gate/holdings", "gate-token-0123", `{"held":{}}`, 204)
	if holders(t, h, a.Ticket.ID) != 0 {
		t.Fatal("the report did not set the count")
	}
}

func post(t *testing.T, url, token, body string, want int) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != want {
		t.Fatalf("POST %s %s: %d, want %d", url, body, resp.StatusCode, want)
	}
}
