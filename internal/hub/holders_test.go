package hub

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/audit"
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

// A ticket whose requests are all gone says so, and why: the hold ended (a leave), the gate's
// stop cut it (a leave with cut), or a killed gate's next start reported it cut (holdings with
// Cut). A request that joins again clears it. The facades' API carries it.
func TestTicketSaysItsRequestsAreGone(t *testing.T) {
	tests := []struct {
		name     string
		end      func(t *testing.T, h *Hub, url, id string)
		gone     string
		cut      int
		sentence string
	}{
		{name: "the hold ended", end: func(t *testing.T, h *Hub, url, id string) {
			post(t, url+"/v1/gate/leave", "gate-token-0123", `{"id":"`+id+`"}`, 204)
		}, gone: GoneLeft, sentence: "the agent was told to retry (E_PENDING)"},
		{name: "the gate's stop cut it", end: func(t *testing.T, h *Hub, url, id string) {
			post(t, url+"/v1/gate/leave", "gate-token-0123", `{"id":"`+id+`","cut":true}`, 204)
		}, gone: GoneRestart, cut: 1, sentence: "the gate restarted while its request was held"},
		{name: "a killed gate's next start reported it cut", end: func(t *testing.T, h *Hub, url, id string) {
			post(t, url+"/v1/gate/holdings", "gate-token-0123", `{"held":{},"cut":{"`+id+`":1}}`, 204)
		}, gone: GoneRestart, cut: 1, sentence: "the request was cut, and its record in the gate's audit says so"},
		{name: "a report that counts none held", end: func(t *testing.T, h *Hub, url, id string) {
			post(t, url+"/v1/gate/holdings", "gate-token-0123", `{"held":{}}`, 204)
		}, gone: GoneLeft, sentence: "the hold ended"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := newHub(t, "")
			a, _ := h.Ask(ask("fp1:a"))
			id := a.Ticket.ID
			if got, _ := h.Get(id); got.Waiting != "" || got.Gone != "" {
				t.Fatalf("a ticket with a held request: waiting %q, gone %q", got.Waiting, got.Gone)
			}
			gate := httptest.NewServer(h.GateHandler("gate-token-0123"))
			defer gate.Close()
			tc.end(t, h, gate.URL, id)
			facades := httptest.NewServer(h.FacadeHandler(map[string]string{"cli": "cli-token-0123"}))
			defer facades.Close()
			got := getTicket(t, facades.URL+"/v1/tickets/"+id, "cli-token-0123")
			if got.Status != Pending || got.Holders != 0 || got.Gone != tc.gone || got.Cut != tc.cut ||
				!strings.Contains(got.Waiting, "Nothing is waiting on this ticket now") || !strings.Contains(got.Waiting, tc.sentence) ||
				!strings.Contains(got.Waiting, "lets one identical retry of the request through within 10 minutes of the approval") {
				t.Fatalf("ticket: status %s, holders %d, gone %q, cut %d, waiting %q", got.Status, got.Holders, got.Gone, got.Cut, got.Waiting)
			}
			// A retry of the request joins the ticket: it is held again.
			h.Ask(ask("fp1:a"))
			if got, _ := h.Get(id); got.Holders != 1 || got.Gone != "" || got.Waiting != "" || got.Cut != tc.cut {
				t.Fatalf("after a retry joined: holders %d, gone %q, waiting %q, cut %d", got.Holders, got.Gone, got.Waiting, got.Cut)
			}
		})
	}
}

// Approving a ticket nothing waits on says what the approval then stands for: one identical
// retry, until when; the decision's record says it too. An approval that released held requests
// says how many.
func TestApprovalOfATicketNothingWaitsOn(t *testing.T) {
	h, c := newHub(t, "")
	rec := &recordingAuditor{}
	h.cfg.Audit = rec
	a, _ := h.Ask(ask("fp1:a"))
	h.LeaveCut(a.Ticket.ID)
	got, err := h.Decide(a.Ticket.ID, "fp1:a", true, "cli:root", "")
	if err != nil {
		t.Fatal(err)
	}
	until := c.Now().Add(DefaultAuthWindow).UTC().Format("15:04:05 UTC")
	if got.Decision.Released != 0 || got.Uses != 1 ||
		!strings.Contains(got.Waiting, "Nothing was waiting on this ticket when it was approved (the gate restarted while its request was held") ||
		!strings.Contains(got.Waiting, "one identical retry of the request through until "+until+" (10 minutes), once") {
		t.Fatalf("approved: released %d, uses %d, waiting %q", got.Decision.Released, got.Uses, got.Waiting)
	}
	if len(rec.records) != 1 || !strings.Contains(rec.records[0].Detail, "no request was waiting (the gate restarted") ||
		!strings.Contains(rec.records[0].Detail, "one identical retry may pass until") {
		t.Fatalf("the decision's record: %+v", rec.records)
	}
	// The retry passes once; the one after asks again.
	if ans, _ := h.Ask(ask("fp1:a")); ans.Outcome != OutcomeApproved {
		t.Fatalf("the retry: %s", ans.Outcome)
	}
	if ans, _ := h.Ask(ask("fp1:a")); ans.Outcome != OutcomePending {
		t.Fatalf("the second retry: %s", ans.Outcome)
	}

	b, _ := h.Ask(ask("fp1:b"))
	h.Ask(ask("fp1:b"))
	got, err = h.Decide(b.Ticket.ID, "fp1:b", true, "cli:root", "")
	if err != nil {
		t.Fatal(err)
	}
	if got.Decision.Released != 2 || got.Waiting != "" || !strings.Contains(rec.records[1].Detail, "released 2 held request(s)") {
		t.Fatalf("approved with two held: released %d, waiting %q, record %q", got.Decision.Released, got.Waiting, rec.records[1].Detail)
	}
}

// Counts of cut requests no gate sends are refused and change nothing.
func TestHoldingsCutRefused(t *testing.T) {
	h, _ := newHub(t, "")
	a, _ := h.Ask(ask("fp1:a"))
	srv := httptest.NewServer(h.GateHandler("gate-token-0123"))
	defer srv.Close()
	for _, body := range []string{
		`{"held":{},"cut":{"` + a.Ticket.ID + `":0}}`,
		`{"held":{},"cut":{"` + a.Ticket.ID + `":-1}}`,
		`{"held":{},"cut":{"` + a.Ticket.ID + `":99999999}}`,
		`{"held":{},"cut":["x"]}`,
	} {
		post(t, srv.URL+"/v1/gate/holdings", "gate-token-0123", body, 400)
	}
	if got, _ := h.Get(a.Ticket.ID); got.Cut != 0 || got.Holders != 1 {
		t.Fatalf("a refused report changed the ticket: cut %d, holders %d", got.Cut, got.Holders)
	}
	// A cut report for a ticket the hub does not know changes nothing.
	post(t, srv.URL+"/v1/gate/holdings", "gate-token-0123", `{"held":{"`+a.Ticket.ID+`":1},"cut":{"t000000000000":2}}`, 204)
	if got, _ := h.Get(a.Ticket.ID); got.Cut != 0 || got.Holders != 1 {
		t.Fatalf("cut: %d, holders %d", got.Cut, got.Holders)
	}
}

func getTicket(t *testing.T, url, token string) Ticket {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var tk Ticket
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&tk) != nil {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	return tk
}

// recordingAuditor keeps the hub's records.
type recordingAuditor struct {
	records []audit.Record
}

func (a *recordingAuditor) Write(_ context.Context, r *audit.Record) error {
	a.records = append(a.records, *r)
	return nil
}
