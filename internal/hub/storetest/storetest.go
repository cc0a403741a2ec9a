// Package storetest is the conformance suite of hub.Store: every store (the embedded one, the
// PostgreSQL one) runs it, so that a hub behaves the same whichever keeps its state.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/hub"
)

// Open returns an empty store for one test.
type Open func(t *testing.T) hub.Store

// Shared returns two stores on the same state, as two hub replicas have them; nil for a store
// only one process may hold.
type Shared func(t *testing.T) (hub.Store, hub.Store)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

const (
	ttl    = 10 * time.Minute
	window = 10 * time.Minute
)

var keep = hub.Retention{Keep: 24 * time.Hour, MaxDecided: 1000, GateStale: 30 * time.Second}

func q(fp, gate string, now time.Time) hub.StoreAsk {
	return qc("agent", fp, gate, now)
}

func qc(container, fp, gate string, now time.Time) hub.StoreAsk {
	r := hub.AskRequest{Kind: hub.KindRequest, Container: container, Method: "POST", URL: "https://example.com/x", Rule: "r", Fingerprint: fp}
	return hub.StoreAsk{AskRequest: r, Gate: gate, Now: now, Window: window, MaxPendingAll: 5000,
		New: hub.Ticket{ID: newID(), Kind: r.Kind, Container: r.Container, Method: r.Method, URL: r.URL, Rule: r.Rule,
			Fingerprint: fp, Created: now, Expires: now.Add(ttl), NeverAuto: true, Status: hub.Pending}}
}

var (
	idMu sync.Mutex
	idN  int
)

func newID() string {
	idMu.Lock()
	defer idMu.Unlock()
	idN++
	return fmt.Sprintf("t%012d", idN)
}

func ask(t *testing.T, s hub.Store, a hub.StoreAsk) hub.StoreAnswer {
	t.Helper()
	ans, err := s.Ask(context.Background(), a)
	if err != nil {
		t.Fatalf("ask %s: %v", a.Fingerprint, err)
	}
	return ans
}

func get(t *testing.T, s hub.Store, id string) hub.Ticket {
	t.Helper()
	tk, ok, err := s.Get(context.Background(), id)
	if err != nil || !ok {
		t.Fatalf("get %s: %v %v", id, ok, err)
	}
	return tk
}

func decide(s hub.Store, id, fp string, approve bool, at time.Time) (hub.Ticket, error) {
	d := hub.Decision{Verdict: hub.Denied, By: "cli:root", Reason: "no", At: at}
	if approve {
		d = hub.Decision{Verdict: hub.Approved, By: "terminal:alice", At: at}
	}
	return s.Decide(context.Background(), id, fp, d, nil)
}

// Run runs the suite.
func Run(t *testing.T, open Open, shared Shared) {
	ctx := context.Background()
	t.Run("identical asks share one ticket", func(t *testing.T) {
		s := open(t)
		a := ask(t, s, q("fp1:a", "gA", t0))
		b := ask(t, s, q("fp1:a", "gC", t0.Add(time.Second)))
		c := ask(t, s, q("fp1:b", "gA", t0))
		if a.Outcome != hub.OutcomePending || !a.Created || b.Created || b.Ticket.ID != a.Ticket.ID || c.Ticket.ID == a.Ticket.ID {
			t.Fatalf("a %+v\nb %+v\nc %+v", a, b, c)
		}
		if tk := get(t, s, a.Ticket.ID); tk.Holders != 2 || tk.Status != hub.Pending || !tk.NeverAuto || tk.URL != "https://example.com/x" || !tk.Created.Equal(t0) {
			t.Fatalf("ticket %+v", tk)
		}
		if p, _ := s.Pending(ctx); len(p) != 2 {
			t.Fatalf("%d pending", len(p))
		}
	})

	t.Run("a rule ask holds nothing, keeps its rule, and is bounded per container", func(t *testing.T) {
		s := open(t)
		rq := func(container, fp string, now time.Time) hub.StoreAsk {
			a := qc(container, fp, "gA", now)
			a.Kind, a.New.Kind, a.NoHold, a.MaxPendingKind = hub.KindRule, hub.KindRule, true, 2
			a.New.RuleAsk = &hub.RuleAsk{Rule: "[[rule]]\nname = \"x\"\n", AgentReason: "because\x1b[31m\napproved", Loosens: "rule \"x\": + free"}
			return a
		}
		ask(t, s, q("fp1:req", "gA", t0)) // a request ticket of the same container counts apart
		a := ask(t, s, rq("agent", "rule1:a", t0))
		b := ask(t, s, rq("agent", "rule1:a", t0.Add(time.Second)))
		if a.Outcome != hub.OutcomePending || !a.Created || b.Created || b.Ticket.ID != a.Ticket.ID {
			t.Fatalf("a %+v\nb %+v", a, b)
		}
		tk := get(t, s, a.Ticket.ID)
		if tk.Holders != 0 || tk.Kind != hub.KindRule || tk.RuleAsk == nil || tk.RuleAsk.AgentReason != "because\x1b[31m\napproved" || tk.RuleAsk.Rule != "[[rule]]\nname = \"x\"\n" {
			t.Fatalf("ticket %+v (rule %+v)", tk, tk.RuleAsk)
		}
		ask(t, s, rq("agent", "rule1:b", t0))
		if c := ask(t, s, rq("agent", "rule1:c", t0)); c.Outcome != hub.OutcomeLimit || c.Pending != 2 {
			t.Fatalf("the third pending rule of a container: %+v", c)
		}
		if d := ask(t, s, rq("other", "rule1:d", t0)); d.Outcome != hub.OutcomePending || !d.Created {
			t.Fatalf("another container's rule: %+v", d)
		}
		if _, err := decide(s, a.Ticket.ID, "rule1:a", true, t0.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		// Asked again after the decision: answered as it stands, no use spent.
		e := ask(t, s, rq("agent", "rule1:a", t0.Add(2*time.Minute)))
		if e.Outcome != hub.OutcomeApproved || e.Ticket.ID != a.Ticket.ID || e.Created {
			t.Fatalf("asked again after the approval: %+v", e)
		}
		if u := get(t, s, a.Ticket.ID).Uses; u != 1 {
			t.Fatalf("uses %d after a rule ask answered, want 1", u)
		}
	})

	t.Run("concurrent identical asks share one ticket", func(t *testing.T) {
		s := open(t)
		const n = 50
		ids := make(chan string, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a, err := s.Ask(ctx, q("fp1:same", fmt.Sprintf("g%d", i%3), t0))
				if err != nil {
					t.Error(err)
					return
				}
				ids <- a.Ticket.ID
			}()
		}
		wg.Wait()
		close(ids)
		seen := map[string]bool{}
		for id := range ids {
			seen[id] = true
		}
		if len(seen) != 1 {
			t.Fatalf("%d tickets for %d identical asks", len(seen), n)
		}
		for id := range seen {
			if h := get(t, s, id).Holders; h != n {
				t.Fatalf("holders %d, want %d", h, n)
			}
		}
	})

	t.Run("an approval releases the held requests, then one retry", func(t *testing.T) {
		s := open(t)
		a := ask(t, s, q("fp1:a", "gA", t0))
		ask(t, s, q("fp1:a", "gC", t0))
		if _, err := decide(s, a.Ticket.ID, "fp1:other", true, t0); !errors.Is(err, hub.ErrFingerprint) {
			t.Fatalf("a stale fingerprint: %v", err)
		}
		if _, err := decide(s, "t-none", "fp1:a", true, t0); !errors.Is(err, hub.ErrNotFound) {
			t.Fatalf("no such ticket: %v", err)
		}
		tk, err := decide(s, a.Ticket.ID, "fp1:a", true, t0.Add(time.Second))
		if err != nil || tk.Status != hub.Approved || tk.Uses != 2 || tk.Decision.Released != 2 || tk.Decision.By != "terminal:alice" {
			t.Fatalf("decide: %+v %v", tk, err)
		}
		if _, err := decide(s, a.Ticket.ID, "fp1:a", false, t0.Add(2*time.Second)); !errors.Is(err, hub.ErrDecided) {
			t.Fatalf("a second decision: %v", err)
		}
		for _, g := range []string{"gA", "gC"} {
			if c, err := s.Claim(ctx, a.Ticket.ID, "fp1:a", g, ""); err != nil || c.Decision == nil || c.Decision.Verdict != hub.Approved {
				t.Fatalf("claim of %s: %+v %v", g, c, err)
			}
		}
		if _, err := s.Claim(ctx, a.Ticket.ID, "fp1:a", "gA", ""); !errors.Is(err, hub.ErrDecided) {
			t.Fatalf("a third claim: %v", err)
		}
		if _, err := s.Claim(ctx, a.Ticket.ID, "fp1:x", "gA", ""); !errors.Is(err, hub.ErrFingerprint) {
			t.Fatalf("a claim with another fingerprint: %v", err)
		}
		// Every use spent: the next identical request asks again.
		if r := ask(t, s, q("fp1:a", "gA", t0.Add(time.Minute))); r.Outcome != hub.OutcomePending || r.Ticket.ID == a.Ticket.ID {
			t.Fatalf("after the uses: %s %s", r.Outcome, r.Ticket.ID)
		}
	})

	t.Run("an approval nothing waited on lets one retry through within the window", func(t *testing.T) {
		s := open(t)
		a := ask(t, s, q("fp1:a", "gA", t0))
		if tk, ok, err := s.Leave(ctx, a.Ticket.ID, "gA", false); err != nil || !ok || tk.Holders != 0 || tk.Gone != hub.GoneLeft {
			t.Fatalf("leave: %+v %v %v", tk, ok, err)
		}
		tk, err := decide(s, a.Ticket.ID, "fp1:a", true, t0)
		if err != nil || tk.Uses != 1 || tk.Decision.Released != 0 {
			t.Fatalf("decide: %+v %v", tk, err)
		}
		if r := ask(t, s, q("fp1:a", "gC", t0.Add(time.Minute))); r.Outcome != hub.OutcomeApproved || r.Ticket.ID != a.Ticket.ID || r.Ticket.Decision == nil {
			t.Fatalf("the retry: %+v", r)
		}
		if r := ask(t, s, q("fp1:a", "gC", t0.Add(time.Minute))); r.Outcome != hub.OutcomePending || r.Ticket.ID == a.Ticket.ID {
			t.Fatalf("a second retry: %s", r.Outcome)
		}
		// Past the window an unspent approval lets nothing through.
		b := ask(t, s, q("fp1:b", "gA", t0))
		s.Leave(ctx, b.Ticket.ID, "gA", false)
		decide(s, b.Ticket.ID, "fp1:b", true, t0)
		if r := ask(t, s, q("fp1:b", "gA", t0.Add(window))); r.Outcome != hub.OutcomePending || r.Ticket.ID == b.Ticket.ID {
			t.Fatalf("past the window: %s", r.Outcome)
		}
	})

	t.Run("a single-use authorisation is spent once by concurrent retries", func(t *testing.T) {
		s := open(t)
		for round := range 20 {
			fp := fmt.Sprintf("fp1:round%d", round)
			a := ask(t, s, q(fp, "gA", t0))
			s.Leave(ctx, a.Ticket.ID, "gA", false)
			if _, err := decide(s, a.Ticket.ID, fp, true, t0); err != nil {
				t.Fatal(err)
			}
			approved := spend(t, s, fp, 50)
			if approved != 1 {
				t.Fatalf("round %d: %d of 50 concurrent retries spent the single use", round, approved)
			}
		}
	})

	t.Run("a claim retried under its key spends one use", func(t *testing.T) {
		s := open(t)
		a := ask(t, s, q("fp1:a", "gA", t0))
		ask(t, s, q("fp1:a", "gC", t0))
		if _, err := decide(s, a.Ticket.ID, "fp1:a", true, t0); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if c, err := s.Claim(ctx, a.Ticket.ID, "fp1:a", "gA", "k-gA-1"); err != nil || c.Uses != 1 {
				t.Fatalf("a claim of gate A under its key: uses %d, %v", c.Uses, err)
			}
		}
		if _, err := s.Claim(ctx, a.Ticket.ID, "fp1:b", "gA", "k-gA-1"); !errors.Is(err, hub.ErrFingerprint) {
			t.Fatalf("a claim under a taken key with another fingerprint: %v", err)
		}
		if c, err := s.Claim(ctx, a.Ticket.ID, "fp1:a", "gC", "k-gC-1"); err != nil || c.Uses != 0 {
			t.Fatalf("gate C's claim: uses %d, %v", c.Uses, err)
		}
		if _, err := s.Claim(ctx, a.Ticket.ID, "fp1:a", "gC", "k-gC-2"); !errors.Is(err, hub.ErrDecided) {
			t.Fatalf("a third claim under a new key: %v", err)
		}
		// A claim refused keeps no key: it is refused again.
		if _, err := s.Claim(ctx, a.Ticket.ID, "fp1:a", "gC", "k-gC-2"); !errors.Is(err, hub.ErrDecided) {
			t.Fatalf("a refused claim retried: %v", err)
		}
	})

	t.Run("a denial answers retries within the window", func(t *testing.T) {
		s := open(t)
		a := ask(t, s, q("fp1:a", "gA", t0))
		tk, err := decide(s, a.Ticket.ID, "fp1:a", false, t0)
		if err != nil || tk.Status != hub.Denied || tk.Uses != 0 || tk.Decision.Reason != "no" {
			t.Fatalf("deny: %+v %v", tk, err)
		}
		if c, err := s.Claim(ctx, a.Ticket.ID, "fp1:a", "gA", ""); err != nil || c.Decision.Verdict != hub.Denied {
			t.Fatalf("claim of a denial: %+v %v", c, err)
		}
		for range 3 {
			if r := ask(t, s, q("fp1:a", "gC", t0.Add(time.Minute))); r.Outcome != hub.OutcomeDenied || r.Ticket.ID != a.Ticket.ID {
				t.Fatalf("a retry: %s", r.Outcome)
			}
		}
		if r := ask(t, s, q("fp1:a", "gC", t0.Add(window))); r.Outcome != hub.OutcomePending {
			t.Fatalf("past the window: %s", r.Outcome)
		}
	})

	t.Run("an expiry is swept once and reported once", func(t *testing.T) {
		s := open(t)
		a := ask(t, s, q("fp1:a", "gA", t0))
		if ex, err := s.Sweep(ctx, t0.Add(ttl-time.Second), keep); err != nil || len(ex) != 0 {
			t.Fatalf("before the expiry: %v %v", ex, err)
		}
		ex, err := s.Sweep(ctx, t0.Add(ttl), keep)
		if err != nil || len(ex) != 1 || ex[0].ID != a.Ticket.ID || ex[0].Status != hub.Expired {
			t.Fatalf("the sweep: %+v %v", ex, err)
		}
		if ex, _ := s.Sweep(ctx, t0.Add(ttl+time.Second), keep); len(ex) != 0 {
			t.Fatalf("a second sweep expired %d again", len(ex))
		}
		if _, err := decide(s, a.Ticket.ID, "fp1:a", true, t0.Add(ttl)); !errors.Is(err, hub.ErrDecided) {
			t.Fatalf("deciding an expired ticket: %v", err)
		}
		if r := ask(t, s, q("fp1:a", "gA", t0.Add(ttl+time.Minute))); r.Outcome != hub.OutcomeExpired || !r.Ticket.Reported {
			t.Fatalf("the retry: %+v", r)
		}
		if r := ask(t, s, q("fp1:a", "gA", t0.Add(ttl+time.Minute))); r.Outcome != hub.OutcomePending {
			t.Fatalf("the next retry: %s", r.Outcome)
		}
		// A decision past the expiry expires the ticket instead.
		b := ask(t, s, q("fp1:b", "gA", t0))
		tk, err := decide(s, b.Ticket.ID, "fp1:b", true, t0.Add(ttl))
		if !errors.Is(err, hub.ErrExpiredNow) || !errors.Is(err, hub.ErrDecided) || tk.Status != hub.Expired {
			t.Fatalf("a late decision: %+v %v", tk, err)
		}
		if ex, _ := s.Sweep(ctx, t0.Add(ttl+time.Second), keep); len(ex) != 0 {
			t.Fatalf("a sweep after the late decision expired %d", len(ex))
		}
	})

	t.Run("concurrent sweeps expire each ticket once", func(t *testing.T) {
		s := open(t)
		for i := range 20 {
			ask(t, s, q(fmt.Sprintf("fp1:%d", i), "gA", t0))
		}
		var mu sync.Mutex
		count := map[string]int{}
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ex, err := s.Sweep(ctx, t0.Add(ttl), keep)
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				for _, tk := range ex {
					count[tk.ID]++
				}
				mu.Unlock()
			}()
		}
		wg.Wait()
		if len(count) != 20 {
			t.Fatalf("%d tickets expired, want 20", len(count))
		}
		for id, n := range count {
			if n != 1 {
				t.Fatalf("%s expired %d times", id, n)
			}
		}
	})

	t.Run("concurrent decisions: one stands", func(t *testing.T) {
		s := open(t)
		a := ask(t, s, q("fp1:a", "gA", t0))
		var wg sync.WaitGroup
		var mu sync.Mutex
		ok := 0
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := decide(s, a.Ticket.ID, "fp1:a", i%2 == 0, t0.Add(time.Second))
				if err == nil {
					mu.Lock()
					ok++
					mu.Unlock()
				} else if !errors.Is(err, hub.ErrDecided) {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if ok != 1 {
			t.Fatalf("%d decisions stood", ok)
		}
	})

	t.Run("a binding that fails keeps the ticket pending", func(t *testing.T) {
		s := open(t)
		a := ask(t, s, q("fp1:a", "gA", t0))
		boom := errors.New("the state file is read-only")
		var seen hub.Ticket
		_, err := s.Decide(ctx, a.Ticket.ID, "fp1:a", hub.Decision{Verdict: hub.Approved, By: "cli:root", At: t0},
			func(tk hub.Ticket) error { seen = tk; return boom })
		if !errors.Is(err, boom) || seen.ID != a.Ticket.ID {
			t.Fatalf("decide: %v, bind saw %q", err, seen.ID)
		}
		if tk := get(t, s, a.Ticket.ID); tk.Status != hub.Pending || tk.Decision != nil {
			t.Fatalf("after a failed binding: %+v", tk)
		}
		if _, err := decide(s, a.Ticket.ID, "fp1:a", true, t0); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a container's pending tickets are bounded", func(t *testing.T) {
		s := open(t)
		for i := range 3 {
			a := qc("agent", fmt.Sprintf("fp1:%d", i), "gA", t0)
			a.MaxPending = 3
			if r := ask(t, s, a); r.Outcome != hub.OutcomePending {
				t.Fatalf("ask %d: %s", i, r.Outcome)
			}
		}
		a := qc("agent", "fp1:new", "gA", t0)
		a.MaxPending = 3
		if r := ask(t, s, a); r.Outcome != hub.OutcomeLimit || r.Pending != 3 {
			t.Fatalf("past the bound: %+v", r)
		}
		a = qc("agent", "fp1:0", "gA", t0)
		a.MaxPending = 3
		if r := ask(t, s, a); r.Outcome != hub.OutcomePending || r.Created {
			t.Fatalf("a retry past the bound: %+v", r)
		}
		a = qc("neighbour", "fp1:n", "gA", t0)
		a.MaxPending = 3
		if r := ask(t, s, a); r.Outcome != hub.OutcomePending {
			t.Fatalf("another container: %s", r.Outcome)
		}
		a = qc("third", "fp1:t", "gA", t0)
		a.MaxPendingAll = 4
		if r := ask(t, s, a); r.Outcome != hub.OutcomeLimit {
			t.Fatalf("past the bound of all containers: %s", r.Outcome)
		}
	})

	t.Run("each gate's report sets its own counts", func(t *testing.T) {
		s := open(t)
		a := ask(t, s, q("fp1:a", "gA", t0))
		ask(t, s, q("fp1:a", "gA", t0))
		ask(t, s, q("fp1:a", "gC", t0))
		b := ask(t, s, q("fp1:b", "gA", t0))
		steps := []struct {
			name    string
			gate    string
			h       hub.Holdings
			a, b    int
			changed int
		}{
			{"gate A holds what the hub counts", "gA", hub.Holdings{Held: map[string]int{a.Ticket.ID: 2, b.Ticket.ID: 1}}, 3, 1, 0},
			{"gate C's report leaves A's counts", "gC", hub.Holdings{Held: map[string]int{a.Ticket.ID: 1}}, 3, 1, 0},
			{"gate A lost a leave", "gA", hub.Holdings{Held: map[string]int{a.Ticket.ID: 1}}, 2, 0, 2},
			{"an ask on its way leaves its ticket", "gC", hub.Holdings{Asking: []string{"fp1:a"}}, 2, 0, 0},
			{"a claim on its way leaves its ticket", "gA", hub.Holdings{Busy: []string{a.Ticket.ID}}, 2, 0, 0},
			{"gate C restarted and holds nothing", "gC", hub.Holdings{}, 1, 0, 1},
			{"unknown tickets are ignored", "gA", hub.Holdings{Held: map[string]int{a.Ticket.ID: 1, "t-none": 9}}, 1, 0, 0},
		}
		for _, st := range steps {
			changed, err := s.SetHoldings(ctx, st.gate, st.h, t0)
			if err != nil {
				t.Fatal(err)
			}
			if ga, gb := get(t, s, a.Ticket.ID).Holders, get(t, s, b.Ticket.ID).Holders; ga != st.a || gb != st.b || len(changed) != st.changed {
				t.Fatalf("%s: holders %d, %d; %d changed; want %d, %d; %d", st.name, ga, gb, len(changed), st.a, st.b, st.changed)
			}
		}
		if tk := get(t, s, b.Ticket.ID); tk.Gone != hub.GoneLeft {
			t.Fatalf("a ticket whose held requests a report took: gone %q", tk.Gone)
		}
	})

	t.Run("a killed gate's cut requests come off its counts", func(t *testing.T) {
		s := open(t)
		a := ask(t, s, q("fp1:a", "gOld", t0))
		s.SetHoldings(ctx, "gOld", hub.Holdings{Held: map[string]int{a.Ticket.ID: 1}}, t0)
		ask(t, s, q("fp1:a", "gC", t0))
		s.SetHoldings(ctx, "gC", hub.Holdings{Held: map[string]int{a.Ticket.ID: 1}}, t0.Add(time.Second))
		// gOld was killed; it starts again as gNew and reports what its journal says was cut.
		changed, err := s.SetHoldings(ctx, "gNew", hub.Holdings{Cut: map[string]int{a.Ticket.ID: 1}}, t0.Add(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		tk := get(t, s, a.Ticket.ID)
		if tk.Holders != 1 || tk.Cut != 1 || tk.Gone != "" || len(changed) != 1 {
			t.Fatalf("after the cut: holders %d, cut %d, gone %q, %d changed", tk.Holders, tk.Cut, tk.Gone, len(changed))
		}
		// gC's request leaves too: nothing is held, and a restart cut the last counted.
		b := ask(t, s, q("fp1:b", "gOld", t0))
		s.SetHoldings(ctx, "gNew", hub.Holdings{Cut: map[string]int{b.Ticket.ID: 1}}, t0.Add(3*time.Second))
		if tk := get(t, s, b.Ticket.ID); tk.Holders != 0 || tk.Cut != 1 || tk.Gone != hub.GoneRestart {
			t.Fatalf("a ticket a kill cut: holders %d, cut %d, gone %q", tk.Holders, tk.Cut, tk.Gone)
		}
	})

	t.Run("a leave counts cut requests and says why nothing is held", func(t *testing.T) {
		s := open(t)
		a := ask(t, s, q("fp1:a", "gA", t0))
		if tk, _, _ := s.Leave(ctx, a.Ticket.ID, "gOther", true); tk.Holders != 1 || tk.Cut != 1 || tk.Gone != "" {
			t.Fatalf("a leave by a gate that held nothing: %+v", tk)
		}
		tk, ok, err := s.Leave(ctx, a.Ticket.ID, "gA", true)
		if err != nil || !ok || tk.Holders != 0 || tk.Cut != 2 || tk.Gone != hub.GoneRestart {
			t.Fatalf("a cut leave: %+v %v %v", tk, ok, err)
		}
		if r := ask(t, s, q("fp1:a", "gA", t0)); r.Ticket.Holders != 1 || r.Ticket.Gone != "" || r.Ticket.ID != a.Ticket.ID {
			t.Fatalf("a retry joins: %+v", r.Ticket)
		}
		if _, ok, err := s.Leave(ctx, "t-none", "gA", false); ok || err != nil {
			t.Fatalf("a leave of no ticket: %v %v", ok, err)
		}
	})

	t.Run("a gate silent past GateStale loses its counts", func(t *testing.T) {
		s := open(t)
		a := ask(t, s, q("fp1:a", "gA", t0))
		ask(t, s, q("fp1:a", "gC", t0))
		s.SetHoldings(ctx, "gC", hub.Holdings{Held: map[string]int{a.Ticket.ID: 1}}, t0.Add(20*time.Second))
		s.Sweep(ctx, t0.Add(31*time.Second), keep)
		if tk := get(t, s, a.Ticket.ID); tk.Holders != 1 {
			t.Fatalf("after gate A went silent: holders %d, want 1", tk.Holders)
		}
		s.Sweep(ctx, t0.Add(51*time.Second), keep)
		if tk := get(t, s, a.Ticket.ID); tk.Holders != 0 || tk.Gone != hub.GoneRestart {
			t.Fatalf("after both went silent: holders %d, gone %q", tk.Holders, tk.Gone)
		}
	})

	t.Run("a CONNECT grant approves its host and port", func(t *testing.T) {
		s := open(t)
		c := q("fp1:connect", "gA", t0)
		c.Kind, c.Host, c.Port, c.Grant = hub.KindConnect, "example.com", 443, time.Hour
		c.New.Kind, c.New.Host, c.New.Port, c.New.Grant = hub.KindConnect, "example.com", 443, time.Hour
		a := ask(t, s, c)
		if _, err := decide(s, a.Ticket.ID, "fp1:connect", true, t0); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			c.Now = t0.Add(time.Duration(i+30) * time.Minute)
			if r := ask(t, s, c); r.Outcome != hub.OutcomeApproved {
				t.Fatalf("within the grant: %s", r.Outcome)
			}
		}
		if st, _ := s.Counts(ctx, t0.Add(time.Minute), window); st.Grants != 1 {
			t.Fatalf("grants %d", st.Grants)
		}
		s.Sweep(ctx, t0.Add(2*time.Hour), keep)
		if st, _ := s.Counts(ctx, t0.Add(2*time.Hour), window); st.Grants != 0 {
			t.Fatalf("grants after the sweep %d", st.Grants)
		}
	})

	t.Run("decided tickets are bounded, the latest kept", func(t *testing.T) {
		s := open(t)
		var ids []string
		for i := range 30 {
			fp := fmt.Sprintf("fp1:%d", i)
			a := ask(t, s, q(fp, "gA", t0.Add(time.Duration(i)*time.Millisecond)))
			ids = append(ids, a.Ticket.ID)
			decide(s, a.Ticket.ID, fp, false, t0.Add(time.Second))
		}
		pend := ask(t, s, q("fp1:pending", "gA", t0.Add(25*time.Hour-time.Minute)))
		r := keep
		r.MaxDecided = 20
		s.Sweep(ctx, t0.Add(time.Minute), r)
		if d, _ := s.Decided(ctx); len(d) != 20 {
			t.Fatalf("%d decided kept", len(d))
		}
		if _, ok, _ := s.Get(ctx, ids[9]); ok {
			t.Fatal("an old one kept")
		}
		if _, ok, _ := s.Get(ctx, ids[10]); !ok {
			t.Fatal("a recent one dropped")
		}
		s.Sweep(ctx, t0.Add(25*time.Hour), keep)
		if d, _ := s.Decided(ctx); len(d) != 0 {
			t.Fatalf("%d decided kept past a day", len(d))
		}
		if _, ok, _ := s.Get(ctx, pend.Ticket.ID); !ok {
			t.Fatal("a pending ticket dropped by the retention")
		}
	})

	t.Run("the gates' reports and the counts", func(t *testing.T) {
		s := open(t)
		if g, err := s.Gate(ctx); err != nil || !g.Reported.IsZero() {
			t.Fatalf("before any report: %+v %v", g, err)
		}
		s.SetGate(ctx, "gA", hub.GateState{PolicyVersion: "v1", Reported: t0})
		s.SetGate(ctx, "gC", hub.GateState{PolicyVersion: "v2", Reported: t0.Add(time.Second), Budgets: []hub.GateBudget{{Budget: "b", Container: "agent", Percent: 80}}})
		if g, err := s.Gate(ctx); err != nil || g.PolicyVersion != "v2" || !g.Reported.Equal(t0.Add(time.Second)) || len(g.Budgets) != 1 {
			t.Fatalf("the latest report: %+v %v", g, err)
		}
		a := ask(t, s, q("fp1:a", "gA", t0))
		ask(t, s, qc("other", "fp1:o", "gA", t0))
		b := ask(t, s, q("fp1:b", "gA", t0))
		s.Leave(ctx, b.Ticket.ID, "gA", false)
		decide(s, b.Ticket.ID, "fp1:b", true, t0)
		st, err := s.Counts(ctx, t0.Add(time.Minute), window)
		if err != nil || st.Pending["agent"] != 1 || st.Pending["other"] != 1 || st.Authorisations != 1 {
			t.Fatalf("counts %+v %v (pending ticket %s)", st, err, a.Ticket.ID)
		}
	})

	if shared == nil {
		return
	}

	t.Run("replicas: one ticket, one decision, each told of the other's changes", func(t *testing.T) {
		s1, s2 := shared(t)
		changes := make(chan hub.Change, 64)
		s2.Watch(func(c hub.Change) { changes <- c })
		own := make(chan hub.Change, 64)
		s1.Watch(func(c hub.Change) { own <- c })
		waitListening(t, s1, s2)
		a := ask(t, s1, q("fp1:a", "gA", t0))
		b := ask(t, s2, q("fp1:a", "gC", t0))
		if b.Ticket.ID != a.Ticket.ID || b.Created {
			t.Fatalf("the second replica made ticket %s (created %v), want %s joined", b.Ticket.ID, b.Created, a.Ticket.ID)
		}
		next(t, changes, "ticket", a.Ticket.ID)
		if _, err := decide(s1, a.Ticket.ID, "fp1:a", true, t0); err != nil {
			t.Fatal(err)
		}
		c := next(t, changes, "decided", a.Ticket.ID)
		if c.Ticket.Status != hub.Approved || c.Ticket.Uses != 2 {
			t.Fatalf("the decision as the other replica reads it: %+v", c.Ticket)
		}
		if _, err := decide(s2, a.Ticket.ID, "fp1:a", false, t0); !errors.Is(err, hub.ErrDecided) {
			t.Fatalf("a second decision on the other replica: %v", err)
		}
		// s1 hears of s2's join, never of its own changes.
		for {
			select {
			case c := <-own:
				if c.Type != "ticket" || c.Ticket == nil || c.Ticket.ID != a.Ticket.ID {
					t.Fatalf("replica 1 was told %+v", c)
				}
				continue
			case <-time.After(200 * time.Millisecond):
			}
			break
		}
	})
}

// spend sends n concurrent identical asks for fp and returns how many were approved.
func spend(t *testing.T, s hub.Store, fp string, n int) int {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	approved := 0
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := s.Ask(context.Background(), q(fp, fmt.Sprintf("g%d", i%3), t0.Add(time.Minute)))
			if err != nil {
				t.Error(err)
				return
			}
			if r.Outcome == hub.OutcomeApproved {
				mu.Lock()
				approved++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return approved
}

// SpendRounds runs rounds of n concurrent retries of an approval nothing waited on, and fails
// unless each round spends it exactly once.
func SpendRounds(t *testing.T, s hub.Store, rounds, n int) {
	ctx := context.Background()
	for round := range rounds {
		fp := fmt.Sprintf("fp1:spend%d", round)
		a := ask(t, s, q(fp, "gA", t0))
		s.Leave(ctx, a.Ticket.ID, "gA", false)
		if _, err := decide(s, a.Ticket.ID, fp, true, t0); err != nil {
			t.Fatal(err)
		}
		if got := spend(t, s, fp, n); got != 1 {
			t.Fatalf("round %d: %d of %d concurrent retries spent the single use", round, got, n)
		}
	}
}

// Listener is a store whose listening can be counted.
type Listener interface {
	Listening(ctx context.Context) (int, error)
}

func waitListening(t *testing.T, stores ...hub.Store) {
	t.Helper()
	for _, s := range stores {
		l, ok := s.(Listener)
		if !ok {
			continue
		}
		// A wait with a deadline (testkit is for _test.go files only).
		deadline := time.Now().Add(10 * time.Second)
		for {
			if n, err := l.Listening(context.Background()); err == nil && n >= len(stores) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("the replicas were not listening within 10 s")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func next(t *testing.T, ch <-chan hub.Change, typ, id string) hub.Change {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case c := <-ch:
			if c.Type == typ && c.Ticket != nil && c.Ticket.ID == id {
				return c
			}
		case <-deadline:
			t.Fatalf("no %q change of %s within 10 s", typ, id)
		}
	}
}
