package hubclient

import (
	"context"
	"crypto/ed25519"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/hubapi"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

const gateToken = "gate-token-0123456789"

type holdsEnv struct {
	hub *hub.Hub
	clk *testkit.Clock
	srv *httptest.Server
	c   *Client
}

func newHoldsEnv(t *testing.T) *holdsEnv {
	t.Helper()
	pub, key, _ := ed25519.GenerateKey(nil)
	clk := testkit.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	h, err := hub.New(hub.Config{Key: key, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h.GateHandler(gateToken))
	t.Cleanup(srv.Close)
	return &holdsEnv{hub: h, clk: clk, srv: srv, c: New(srv.URL, gateToken, pub, nil)}
}

func askReq(fp string) hubapi.AskRequest {
	return hubapi.AskRequest{Kind: hubapi.KindRequest, Container: "dev", Method: "POST", URL: "https://example.com/", Rule: "r", Fingerprint: fp}
}

func (e *holdsEnv) holders(t *testing.T, id string) int {
	t.Helper()
	tk, ok := e.hub.Get(id)
	if !ok {
		t.Fatalf("no ticket %s", id)
	}
	return tk.Holders
}

func (e *holdsEnv) held(id string) int {
	s, _ := e.c.Holdings()
	return s.Held[id]
}

// The gate counts what it holds from the ask to the claim, the leave or the expiry, whatever
// the hub answered; its report puts the hub's count right after a lost call.
func TestHoldingsFollowTheRequests(t *testing.T) {
	e := newHoldsEnv(t)
	ctx := context.Background()
	a, err := e.c.Ask(ctx, askReq("fp1:a"))
	if err != nil {
		t.Fatal(err)
	}
	id := a.Ticket.ID
	if _, err := e.c.Ask(ctx, askReq("fp1:a")); err != nil {
		t.Fatal(err)
	}
	if e.held(id) != 2 || e.holders(t, id) != 2 {
		t.Fatalf("after two asks: the gate holds %d, the hub counts %d", e.held(id), e.holders(t, id))
	}
	// An ask whose answer the gate never saw: the hub counts one more than the gate holds.
	e.hub.AskAs(e.c.gate, askReq("fp1:a"))
	// A leave that failed (the hub stalled): the gate stops holding, the hub never heard.
	down := New("http://127.0.0.1:1", gateToken, nil, nil)
	down.holds.held[id] = 1
	down.Leave(id)
	if s, _ := down.Holdings(); len(s.Held) != 0 || len(s.Busy) != 0 {
		t.Fatalf("after a failed leave the gate still holds %+v", s)
	}
	e.c.Leave(id)
	if e.held(id) != 1 || e.holders(t, id) != 2 {
		t.Fatalf("before the report: the gate holds %d, the hub counts %d", e.held(id), e.holders(t, id))
	}
	if err := e.c.ReportHoldings(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.holders(t, id); got != 1 {
		t.Fatalf("after the report the hub counts %d, want 1", got)
	}

	// A claim ends the hold, whatever the hub answers.
	if _, err := e.c.Claim(ctx, id, "fp1:a"); err == nil {
		t.Fatal("a claim of a pending ticket succeeded")
	}
	if e.held(id) != 0 {
		t.Fatalf("after the claim the gate holds %d", e.held(id))
	}

	// A wait that returns the ticket expired ends the hold: nothing is claimed for it.
	b, _ := e.c.Ask(ctx, askReq("fp1:b"))
	e.clk.Advance(hub.DefaultTicketTTL + time.Second)
	e.hub.Expire()
	tk, err := e.c.Wait(ctx, b.Ticket.ID)
	if err != nil || tk.Status != hubapi.Expired {
		t.Fatalf("wait: %+v %v", tk.Status, err)
	}
	if s, _ := e.c.Holdings(); len(s.Held) != 0 || len(s.Asking) != 0 || len(s.Busy) != 0 {
		t.Fatalf("the gate still holds %+v", s)
	}
}

// When its event stream connects (a hub restarted, or back after a stall) the gate reports what
// it holds at once: the hub's counts are right again without anyone asking.
func TestHoldingsReportedOnConnect(t *testing.T) {
	e := newHoldsEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, err := e.c.Ask(ctx, askReq("fp1:a"))
	if err != nil {
		t.Fatal(err)
	}
	e.hub.SetHoldingsAs(e.c.gate, hubapi.Holdings{}) // as after a restart of the hub: no holders
	e.hub.AskAs(e.c.gate, askReq("fp1:z"))           // an ask whose answer the gate never saw
	go e.c.Run(ctx)
	testkit.WaitFor(t, 5*time.Second, "the counts set by the gate", func() bool {
		var z int
		for _, tk := range e.hub.Pending() {
			if tk.Fingerprint == "fp1:z" {
				z = tk.Holders
			}
		}
		return e.holders(t, a.Ticket.ID) == 1 && z == 0
	})
}

// The requests a kill of the gate cut go to the hub with the first report after the event
// stream connects, once: the ticket then says so. A report that fails keeps them for the next.
func TestCutReportedOnce(t *testing.T) {
	e := newHoldsEnv(t)
	ctx := context.Background()
	// The ticket a killed gate held a request on, as the hub kept it (a count of one).
	a, _ := e.hub.Ask(askReq("fp1:a"))
	id := a.Ticket.ID
	down := New("http://127.0.0.1:1", gateToken, nil, nil)
	down.ReportCut(map[string]int{id: 1})
	if err := down.ReportHoldings(ctx); err == nil {
		t.Fatal("a report to no hub succeeded")
	}
	if s, _ := down.Holdings(); s.Cut[id] != 1 {
		t.Fatalf("a failed report dropped the cut requests: %+v", s)
	}

	e.c.ReportCut(map[string]int{id: 1})
	if err := e.c.ReportHoldings(ctx); err != nil {
		t.Fatal(err)
	}
	tk, _ := e.hub.Get(id)
	if tk.Holders != 0 || tk.Cut != 1 || tk.Gone != hubapi.GoneRestart {
		t.Fatalf("after the report: holders %d, cut %d, gone %q", tk.Holders, tk.Cut, tk.Gone)
	}
	if s, _ := e.c.Holdings(); len(s.Cut) != 0 {
		t.Fatalf("the cut requests are reported again: %+v", s)
	}
	if err := e.c.ReportHoldings(ctx); err != nil {
		t.Fatal(err)
	}
	if tk, _ := e.hub.Get(id); tk.Cut != 1 {
		t.Fatalf("cut counted %d times", tk.Cut)
	}
}

// A request the gate's stop cut leaves its ticket as cut.
func TestLeaveCut(t *testing.T) {
	e := newHoldsEnv(t)
	a, err := e.c.Ask(context.Background(), askReq("fp1:a"))
	if err != nil {
		t.Fatal(err)
	}
	e.c.LeaveCut(a.Ticket.ID)
	tk, _ := e.hub.Get(a.Ticket.ID)
	if tk.Holders != 0 || tk.Cut != 1 || tk.Gone != hubapi.GoneRestart || e.held(a.Ticket.ID) != 0 {
		t.Fatalf("after the cut: holders %d, cut %d, gone %q, the gate holds %d", tk.Holders, tk.Cut, tk.Gone, e.held(a.Ticket.ID))
	}
}
