package hubclient

import (
	"bufio"
	"context"
	"maps"
	"net/http"
	"net/http/httptest"
	"strconv"
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

// The reread of what the gate's held requests wait on is one call for all of them, not one a
// ticket: 1,000 held requests used to cost the gate and the hub 1,000 calls every 3 s. The
// decided tickets among them still end their waits; so do they with a hub that has no such call.
func TestRereadIsOneCall(t *testing.T) {
	for _, old := range []bool{false, true} {
		name := "hub with the batch call"
		if old {
			name = "older hub, one call a ticket"
		}
		t.Run(name, func(t *testing.T) {
			e := newHoldsEnv(t)
			var mu sync.Mutex
			calls := map[string]int{}
			counting := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				key := r.Method + " " + r.URL.Path
				if strings.HasPrefix(r.URL.Path, "/v1/gate/tickets/") {
					key = r.Method + " /v1/gate/tickets/{id}"
				}
				mu.Lock()
				calls[key]++
				mu.Unlock()
				if old && key == "POST /v1/gate/tickets" {
					http.NotFound(w, r)
					return
				}
				e.hub.GateHandler(gateToken).ServeHTTP(w, r)
			})
			srv := httptest.NewServer(counting)
			defer srv.Close()
			c := New(srv.URL, gateToken, e.hub.PublicKey(), nil)
			ctx := context.Background()
			const n = 50
			waits := map[string]chan hubapi.Ticket{}
			var decided []string
			for i := range n {
				fp := "fp" + strconv.Itoa(i) + ":a"
				a, err := c.Ask(ctx, askReq(fp))
				if err != nil {
					t.Fatal(err)
				}
				ch := make(chan hubapi.Ticket, 1)
				c.mu.Lock()
				c.waiters[a.Ticket.ID] = map[chan hubapi.Ticket]struct{}{ch: {}}
				c.mu.Unlock()
				waits[a.Ticket.ID] = ch
				if i%10 == 0 {
					if _, err := e.hub.Decide(a.Ticket.ID, fp, i%20 == 0, "cli:root", "no"); err != nil {
						t.Fatal(err)
					}
					decided = append(decided, a.Ticket.ID)
				}
			}
			mu.Lock()
			clear(calls)
			mu.Unlock()
			c.resync(ctx)
			for _, id := range decided {
				select {
				case tk := <-waits[id]:
					if tk.ID != id || tk.Status == hubapi.Pending {
						t.Fatalf("the wait on %s got %s %s", id, tk.ID, tk.Status)
					}
				default:
					t.Fatalf("the reread did not end the wait on decided ticket %s", id)
				}
				delete(waits, id)
			}
			for id, ch := range waits {
				if len(ch) != 0 {
					t.Fatalf("the reread ended the wait on pending ticket %s", id)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			want := map[string]int{"POST /v1/gate/tickets": 1}
			if old {
				want["GET /v1/gate/tickets/{id}"] = n
			}
			if !maps.Equal(calls, want) {
				t.Fatalf("the reread of %d tickets made the calls %v, want %v", n, calls, want)
			}
		})
	}
}
