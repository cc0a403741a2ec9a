package hubclient

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/hubapi"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// Two gates hold the identical request on one ticket: each one's report of what it holds leaves
// the other's count standing, so the approval lets both through, once each.
func TestTwoGatesShareATicket(t *testing.T) {
	e := newHoldsEnv(t)
	ctx := context.Background()
	other := New(e.srv.URL, gateToken, e.hub.PublicKey(), nil)
	for _, g := range []*Client{e.c, other} {
		k, _ := g.key()
		g.pub.Store(&k) // as Run does
	}
	a, err := e.c.Ask(ctx, askReq("fp1:a"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := other.Ask(ctx, askReq("fp1:a"))
	if err != nil || c.Ticket.ID != a.Ticket.ID {
		t.Fatalf("the second gate's ask: %v %v", c.Ticket.ID, err)
	}
	for _, g := range []*Client{e.c, other, e.c} {
		if err := g.ReportHoldings(ctx); err != nil {
			t.Fatal(err)
		}
		if n := e.holders(t, a.Ticket.ID); n != 2 {
			t.Fatalf("after a gate's report the hub counts %d held requests, want 2", n)
		}
	}
	if _, err := e.hub.Decide(a.Ticket.ID, "fp1:a", true, "cli:root", ""); err != nil {
		t.Fatal(err)
	}
	for i, g := range []*Client{e.c, other} {
		d, err := g.Claim(ctx, a.Ticket.ID, "fp1:a")
		if err != nil || d.Verdict != hubapi.Approved {
			t.Fatalf("gate %d's claim: %v %v", i, d, err)
		}
	}
	if _, err := other.Claim(ctx, a.Ticket.ID, "fp1:a"); err == nil {
		t.Fatal("a third claim of an approval that released two held requests succeeded")
	}
}

// A decision whose event never reaches the gate (the hub lost it) still ends the wait: the gate
// rereads what it waits on every few seconds while its stream is up.
func TestLostEventReread(t *testing.T) {
	e := newHoldsEnv(t)
	// A hub whose event stream carries only its beats: every event is lost.
	mute := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/gate/events" {
			e.hub.GateHandler(gateToken).ServeHTTP(w, r)
			return
		}
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	srv := httptest.NewServer(mute)
	defer srv.Close()
	c := New(srv.URL, gateToken, e.hub.PublicKey(), nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.Run(ctx)
	testkit.WaitFor(t, 5*time.Second, "the event stream up", c.Connected)
	a, err := c.Ask(ctx, askReq("fp1:a"))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan hubapi.Ticket, 1)
	go func() {
		tk, _ := c.Wait(ctx, a.Ticket.ID)
		got <- tk
	}()
	// Decide once the wait has looked at the ticket once (pending).
	testkit.WaitFor(t, 5*time.Second, "the wait registered", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.waiters[a.Ticket.ID]) == 1
	})
	if _, err := e.hub.Decide(a.Ticket.ID, "fp1:a", true, "cli:root", ""); err != nil {
		t.Fatal(err)
	}
	select {
	case tk := <-got:
		if tk.Status != hubapi.Approved {
			t.Fatalf("the wait ended with %s", tk.Status)
		}
	case <-time.After(4 * rereadEvery):
		t.Fatalf("the wait did not end within %s of the decision whose event was lost", 4*rereadEvery)
	}
}

// Every call of the gate names it; a name the hub cannot take is refused.
func TestGateNamed(t *testing.T) {
	e := newHoldsEnv(t)
	names := make(chan string, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		names <- r.Header.Get(hubapi.HeaderGate)
		e.hub.GateHandler(gateToken).ServeHTTP(w, r)
	}))
	defer srv.Close()
	c := New(srv.URL, gateToken, e.hub.PublicKey(), nil)
	if _, err := c.Ask(context.Background(), askReq("fp1:a")); err != nil {
		t.Fatal(err)
	}
	if n := <-names; n == "" || n != c.gate {
		t.Fatalf("the ask named gate %q, want %q", n, c.gate)
	}
	req, _ := http.NewRequest("POST", e.srv.URL+"/v1/gate/holdings", strings.NewReader(`{"held":{}}`))
	req.Header.Set("Authorization", "Bearer "+gateToken)
	req.Header.Set(hubapi.HeaderGate, "a b")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(resp.Body).ReadString('\n')
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(line, hubapi.HeaderGate) {
		t.Fatalf("a bad gate name: %d %s", resp.StatusCode, line)
	}
}

// A claim whose answer is lost (the hub took it, then its connection was cut) is sent again and
// spends no second use: the other gate's held request still gets its own.
func TestClaimRetriedSpendsOnce(t *testing.T) {
	e := newHoldsEnv(t)
	ctx := context.Background()
	var mu sync.Mutex
	cut := 1
	lossy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		drop := r.URL.Path == "/v1/gate/claim" && cut > 0
		if drop {
			cut--
		}
		mu.Unlock()
		if !drop {
			e.hub.GateHandler(gateToken).ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		e.hub.GateHandler(gateToken).ServeHTTP(rec, r) // the hub takes the claim ...
		conn, _, _ := w.(http.Hijacker).Hijack()
		conn.Close() // ... and its answer is lost
	}))
	defer lossy.Close()
	a := New(lossy.URL, gateToken, e.hub.PublicKey(), nil)
	c := New(e.srv.URL, gateToken, e.hub.PublicKey(), nil)
	for _, g := range []*Client{a, c} {
		k, _ := g.key()
		g.pub.Store(&k)
	}
	tk, err := a.Ask(ctx, askReq("fp1:a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Ask(ctx, askReq("fp1:a")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.hub.Decide(tk.Ticket.ID, "fp1:a", true, "cli:root", ""); err != nil {
		t.Fatal(err)
	}
	if d, err := a.Claim(ctx, tk.Ticket.ID, "fp1:a"); err != nil || d.Verdict != hubapi.Approved {
		t.Fatalf("gate A's claim, its first answer lost: %v %v", d, err)
	}
	if cut != 0 {
		t.Fatal("no answer was lost")
	}
	if d, err := c.Claim(ctx, tk.Ticket.ID, "fp1:a"); err != nil || d.Verdict != hubapi.Approved {
		t.Fatalf("gate C's claim after gate A's was sent twice: %v %v", d, err)
	}
}
