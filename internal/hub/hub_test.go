package hub

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/testkit"
)

func newHub(t *testing.T, state string) (*Hub, *testkit.Clock) {
	t.Helper()
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	c := testkit.NewClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	h, err := New(Config{Key: key, Now: c.Now, StatePath: state})
	if err != nil {
		t.Fatal(err)
	}
	return h, c
}

func ask(fp string) AskRequest {
	return AskRequest{Kind: KindRequest, Container: "agent", Method: "POST", URL: "https://example.com/x", Rule: "r", Fingerprint: fp}
}

func TestSameFingerprintSharesOneTicket(t *testing.T) {
	h, _ := newHub(t, "")
	a, _ := h.Ask(ask("fp1:a"))
	b, _ := h.Ask(ask("fp1:a"))
	c, _ := h.Ask(ask("fp1:b"))
	if a.Outcome != OutcomePending || b.Ticket.ID != a.Ticket.ID || c.Ticket.ID == a.Ticket.ID {
		t.Fatalf("a %s b %s c %s", a.Ticket.ID, b.Ticket.ID, c.Ticket.ID)
	}
	if got, _ := h.Get(a.Ticket.ID); got.Holders != 2 || !got.NeverAuto {
		t.Fatalf("holders %d never_auto %v", got.Holders, got.NeverAuto)
	}
	if len(h.Pending()) != 2 {
		t.Fatalf("pending %d", len(h.Pending()))
	}
}

func TestApprovalReleasesHoldersThenOneRetry(t *testing.T) {
	h, c := newHub(t, "")
	a, _ := h.Ask(ask("fp1:a"))
	h.Ask(ask("fp1:a")) // a second identical request held
	if _, err := h.Decide(a.Ticket.ID, "fp1:other", true, "terminal:alice", ""); !errors.Is(err, ErrFingerprint) {
		t.Fatalf("decide with a stale fingerprint: %v", err)
	}
	if _, err := h.Decide(a.Ticket.ID, "fp1:a", true, "terminal:alice", ""); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		d, err := h.Claim(a.Ticket.ID, "fp1:a")
		if err != nil || d.Verdict != Approved || d.By != "terminal:alice" {
			t.Fatalf("claim %d: %v %v", i, d, err)
		}
		if err := d.Verify(h.PublicKey(), a.Ticket.ID, "fp1:a"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.Claim(a.Ticket.ID, "fp1:a"); !errors.Is(err, ErrDecided) {
		t.Fatalf("a third claim: %v", err)
	}
	// Both held requests went: a retry asks again.
	r, _ := h.Ask(ask("fp1:a"))
	if r.Outcome != OutcomePending || r.Ticket.ID == a.Ticket.ID {
		t.Fatalf("retry after the held ones: %+v", r.Outcome)
	}
	_ = c
}

func TestApprovalAfterPendingAllowsExactlyOneRetry(t *testing.T) {
	h, c := newHub(t, "")
	a, _ := h.Ask(ask("fp1:a"))
	h.Leave(a.Ticket.ID) // E_PENDING: nobody holds it
	if _, err := h.Decide(a.Ticket.ID, "fp1:a", true, "cli:root", ""); err != nil {
		t.Fatal(err)
	}
	first, _ := h.Ask(ask("fp1:a"))
	if first.Outcome != OutcomeApproved || first.Signed.Verify(h.PublicKey(), a.Ticket.ID, "fp1:a") != nil {
		t.Fatalf("first retry: %+v", first)
	}
	second, _ := h.Ask(ask("fp1:a"))
	if second.Outcome != OutcomePending || second.Ticket.ID == a.Ticket.ID {
		t.Fatalf("second retry: %+v", second.Outcome)
	}
	// The authorisation lasts the window only.
	h2, c2 := newHub(t, "")
	b, _ := h2.Ask(ask("fp1:b"))
	h2.Leave(b.Ticket.ID)
	h2.Decide(b.Ticket.ID, "fp1:b", true, "cli:root", "")
	c2.Advance(DefaultAuthWindow + time.Second)
	if late, _ := h2.Ask(ask("fp1:b")); late.Outcome != OutcomePending {
		t.Fatalf("retry after the window: %s", late.Outcome)
	}
	_ = c
}

func TestDenialAnswersRetries(t *testing.T) {
	h, _ := newHub(t, "")
	a, _ := h.Ask(ask("fp1:a"))
	if _, err := h.Decide(a.Ticket.ID, "fp1:a", false, "phone:pixel", "not this repo"); err != nil {
		t.Fatal(err)
	}
	d, err := h.Claim(a.Ticket.ID, "fp1:a")
	if err != nil || d.Verdict != Denied || d.Reason != "not this repo" {
		t.Fatalf("claim of a denial: %+v %v", d, err)
	}
	r, _ := h.Ask(ask("fp1:a"))
	if r.Outcome != OutcomeDenied || r.Signed.Reason != "not this repo" {
		t.Fatalf("retry after a denial: %+v", r)
	}
}

func TestExpiryThenTimeoutOnceThenAskAgain(t *testing.T) {
	h, c := newHub(t, "")
	ch, cancel := h.Subscribe()
	defer cancel()
	a, _ := h.Ask(ask("fp1:a"))
	<-ch // the new ticket
	c.Advance(DefaultTicketTTL)
	h.Expire()
	ev := <-ch
	if ev.Type != "expired" || ev.Ticket.ID != a.Ticket.ID {
		t.Fatalf("event %+v", ev)
	}
	if _, err := h.Decide(a.Ticket.ID, "fp1:a", true, "cli:x", ""); !errors.Is(err, ErrDecided) {
		t.Fatalf("deciding an expired ticket: %v", err)
	}
	if r, _ := h.Ask(ask("fp1:a")); r.Outcome != OutcomeExpired {
		t.Fatalf("first retry: %s", r.Outcome)
	}
	if r, _ := h.Ask(ask("fp1:a")); r.Outcome != OutcomePending {
		t.Fatalf("second retry: %s", r.Outcome)
	}
}

func TestConnectGrant(t *testing.T) {
	h, c := newHub(t, "")
	req := AskRequest{Kind: KindConnect, Container: "agent", Method: "CONNECT", URL: "example.com:443", Host: "example.com", Port: 443,
		Fingerprint: "fp1:c", Grant: 10 * time.Minute, Warning: "reads and writes both pass, unseen"}
	a, _ := h.Ask(req)
	h.Decide(a.Ticket.ID, "fp1:c", true, "terminal:alice", "")
	h.Claim(a.Ticket.ID, "fp1:c")
	for i := 0; i < 3; i++ {
		if r, _ := h.Ask(req); r.Outcome != OutcomeApproved {
			t.Fatalf("CONNECT %d within the grant: %s", i, r.Outcome)
		}
	}
	c.Advance(11 * time.Minute)
	h.Expire()
	if r, _ := h.Ask(req); r.Outcome == OutcomeApproved {
		t.Fatal("the grant outlived connect_grant")
	}
}

func TestStateSurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hub.json")
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	h, err := New(Config{Key: key, StatePath: path})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := h.Ask(ask("fp1:a"))
	b, _ := h.Ask(ask("fp1:b"))
	h.Decide(b.Ticket.ID, "fp1:b", false, "cli:x", "no")
	h.Flush()
	h2, err := New(Config{Key: key, StatePath: path})
	if err != nil {
		t.Fatal(err)
	}
	ta, ok := h2.Get(a.Ticket.ID)
	if !ok || ta.Status != Pending || ta.Holders != 0 {
		t.Fatalf("pending ticket after restart: %+v %v", ta, ok)
	}
	if tb, _ := h2.Get(b.Ticket.ID); tb.Status != Denied || tb.Decision.Reason != "no" {
		t.Fatalf("denied ticket after restart: %+v", tb)
	}
	// The pending ticket can still be decided, and a retry joins it.
	if r, _ := h2.Ask(ask("fp1:a")); r.Ticket.ID != a.Ticket.ID {
		t.Fatal("a retry after restart made a new ticket")
	}
	if _, err := h2.Decide(a.Ticket.ID, "fp1:a", true, "terminal:a", ""); err != nil {
		t.Fatal(err)
	}
}

func TestDecisionSignatureBinds(t *testing.T) {
	h, _ := newHub(t, "")
	a, _ := h.Ask(ask("fp1:a"))
	h.Decide(a.Ticket.ID, "fp1:a", true, "terminal:alice", "")
	d, _ := h.Claim(a.Ticket.ID, "fp1:a")
	if err := d.Verify(h.PublicKey(), a.Ticket.ID, "fp1:b"); err == nil {
		t.Error("verified for another fingerprint")
	}
	d.By = "terminal:mallory"
	if err := d.Verify(h.PublicKey(), a.Ticket.ID, "fp1:a"); err == nil {
		t.Error("verified after tampering")
	}
	other, _ := newHub(t, "")
	d.By = "terminal:alice"
	if err := d.Verify(other.PublicKey(), a.Ticket.ID, "fp1:a"); err == nil {
		t.Error("verified with another hub's key")
	}
}

func TestSlowSubscriberDropped(t *testing.T) {
	h, _ := newHub(t, "")
	ch, _ := h.Subscribe()
	for i := 0; i < 1100; i++ {
		h.Ask(ask("fp1:" + string(rune('a'+i%26)) + time.Duration(i).String()))
	}
	n := 0
	for range ch {
		n++
	}
	if n != 1024 {
		t.Fatalf("got %d events before the close, want 1024", n)
	}
}

// An approval of a ticket with a binding keeps the binding first: when it fails, or the hub has
// nowhere to keep it, the ticket stays pending and nothing is released. A denial binds nothing.
func TestApprovalBindsTheCredential(t *testing.T) {
	const hash = "0f393ff081f8c2d1e7b4a1c9d3e5f7a9b1c3d5e7f9a1b3c5d7e9f1a3b5c7d9e1"
	h, _ := newHub(t, filepath.Join(t.TempDir(), "hub.json"))
	req := ask("fp1:k")
	req.Bind = &Bind{Container: "agent", Hash: hash}
	a, err := h.Ask(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Decide(a.Ticket.ID, "fp1:k", true, "cli:root", ""); err == nil || !strings.Contains(err.Error(), "cannot bind") {
		t.Fatalf("approve with no Bind hook: %v", err)
	}
	var got []string
	fail := errors.New("state file: disk full")
	h.cfg.Bind = func(b Bind, by, ticket string) error {
		got = append(got, b.Container+" "+b.Hash+" "+by+" "+ticket)
		return fail
	}
	if _, err := h.Decide(a.Ticket.ID, "fp1:k", true, "cli:root", ""); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("approve with a failing binding: %v", err)
	}
	if tk, _ := h.Get(a.Ticket.ID); tk.Status != Pending {
		t.Fatalf("after a failed binding the ticket is %s", tk.Status)
	}
	if _, err := h.Claim(a.Ticket.ID, "fp1:k"); !errors.Is(err, ErrDecided) {
		t.Fatalf("claim after a failed binding: %v", err)
	}
	fail = nil
	if _, err := h.Decide(a.Ticket.ID, "fp1:k", true, "cli:root", ""); err != nil {
		t.Fatal(err)
	}
	if want := "agent " + hash + " cli:root " + a.Ticket.ID; len(got) != 2 || got[1] != want {
		t.Fatalf("bindings %q, want the last %q", got, want)
	}
	// A denial binds nothing.
	req.Fingerprint = "fp1:k2"
	b, _ := h.Ask(req)
	if _, err := h.Decide(b.Ticket.ID, "fp1:k2", false, "cli:root", "not mine"); err != nil || len(got) != 2 {
		t.Fatalf("deny: %v, bindings %d", err, len(got))
	}
	// The binding survives a restart in the ticket (what was approved, for the recent list).
	h.Flush()
	h2, err := New(Config{Key: h.cfg.Key, StatePath: h.cfg.StatePath})
	if err != nil {
		t.Fatal(err)
	}
	if tk, _ := h2.Get(a.Ticket.ID); tk.Bind == nil || tk.Bind.Hash != hash {
		t.Fatalf("after a restart: %+v", tk.Bind)
	}
}

// A gate's binding must be for its own request ticket: another container's, a CONNECT's or a
// hash that is not one is refused.
func TestAskRefusesABadBinding(t *testing.T) {
	h, _ := newHub(t, "")
	good := "0f393ff081f8c2d1e7b4a1c9d3e5f7a9b1c3d5e7f9a1b3c5d7e9f1a3b5c7d9e1"
	for _, b := range []*Bind{{Container: "other", Hash: good}, {Container: "agent", Hash: good[:60]}, {Container: "agent", Hash: "sk-ant-api03-" + good[:51]}, {Container: "agent", Hash: strings.ToUpper(good)}} {
		req := ask("fp1:x")
		req.Bind = b
		if _, err := h.Ask(req); err == nil {
			t.Fatalf("binding %+v accepted", b)
		}
	}
	req := AskRequest{Kind: KindConnect, Container: "agent", Method: "CONNECT", URL: "h:443", Fingerprint: "fp1:c", Bind: &Bind{Container: "agent", Hash: good}}
	if _, err := h.Ask(req); err == nil {
		t.Fatal("a CONNECT ticket with a binding accepted")
	}
}

// A container with max_pending pending tickets gets OutcomeLimit for a new one (and one
// "limit" event), while its retries still join their tickets and other containers still ask;
// once a human answers one, it may ask again.
func TestPendingTicketsBoundedPerContainer(t *testing.T) {
	h, _ := newHub(t, "")
	events, stop := h.Subscribe()
	defer stop()
	req := func(container, fp string) AskRequest {
		r := ask(fp)
		r.Container, r.MaxPending = container, 3
		return r
	}
	var first AskAnswer
	for i := 0; i < 3; i++ {
		a, err := h.Ask(req("agent", fmt.Sprintf("fp1:%d", i)))
		if err != nil || a.Outcome != OutcomePending {
			t.Fatalf("ask %d: %v %v", i, a.Outcome, err)
		}
		if i == 0 {
			first = a
		}
	}
	for i := 0; i < 5; i++ {
		if a, _ := h.Ask(req("agent", fmt.Sprintf("fp1:new%d", i))); a.Outcome != OutcomeLimit {
			t.Fatalf("a 4th ticket: %s", a.Outcome)
		}
	}
	if a, _ := h.Ask(req("agent", "fp1:0")); a.Outcome != OutcomePending || a.Ticket.ID != first.Ticket.ID {
		t.Fatalf("a retry past the bound: %s %s", a.Outcome, a.Ticket.ID)
	}
	if a, _ := h.Ask(req("neighbour", "fp1:n")); a.Outcome != OutcomePending {
		t.Fatalf("another container: %s", a.Outcome)
	}
	limits := 0
	for len(events) > 0 {
		if ev := <-events; ev.Type == "limit" {
			limits++
			if ev.Limit.Container != "agent" || ev.Limit.Pending != 3 {
				t.Fatalf("limit event %+v", ev.Limit)
			}
		}
	}
	if limits != 1 {
		t.Fatalf("%d limit events for 5 refused asks, want 1", limits)
	}
	if _, err := h.Decide(first.Ticket.ID, "fp1:0", false, "cli:root", "no"); err != nil {
		t.Fatal(err)
	}
	if a, _ := h.Ask(req("agent", "fp1:new0")); a.Outcome != OutcomePending {
		t.Fatalf("after a decision: %s", a.Outcome)
	}
}

// The decided and expired tickets kept are bounded, the latest kept.
func TestDecidedTicketsBounded(t *testing.T) {
	h, c := newHub(t, "")
	var ids []string
	for i := 0; i < maxDecided+50; i++ {
		a, _ := h.Ask(ask(fmt.Sprintf("fp1:%d", i)))
		ids = append(ids, a.Ticket.ID)
		if _, err := h.Decide(a.Ticket.ID, fmt.Sprintf("fp1:%d", i), false, "cli:root", "no"); err != nil {
			t.Fatal(err)
		}
		c.Advance(time.Millisecond)
	}
	h.Expire()
	if n := len(h.Recent(0)); n != maxDecided {
		t.Fatalf("%d decided tickets kept, want %d", n, maxDecided)
	}
	if _, ok := h.Get(ids[len(ids)-1]); !ok {
		t.Fatal("the latest was dropped")
	}
	if _, ok := h.Get(ids[49]); ok {
		t.Fatal("the 50 oldest were kept")
	}
	if _, ok := h.Get(ids[50]); !ok {
		t.Fatal("more than the 50 oldest were dropped")
	}
}

// The pending list comes a page at a time: every ticket once, newest first, whatever is decided
// between two pages; a bad cursor starts from the first page; large tickets make short pages.
func TestPendingPages(t *testing.T) {
	h, c := newHub(t, "")
	var ids []string
	for i := 0; i < 25; i++ {
		a, _ := h.Ask(ask(fmt.Sprintf("fp1:%d", i)))
		ids = append(ids, a.Ticket.ID)
		if i%3 != 0 {
			c.Advance(time.Millisecond) // some share a creation time
		}
	}
	var got []string
	cursor, pages := "", 0
	for {
		page, next := h.PendingPage(10, cursor)
		pages++
		for _, tk := range page {
			got = append(got, tk.ID)
		}
		if pages == 1 {
			// A ticket of the first page is decided before the second is read.
			if _, err := h.Decide(page[0].ID, page[0].Fingerprint, false, "cli:root", "no"); err != nil {
				t.Fatal(err)
			}
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if pages != 3 || len(got) != 25 {
		t.Fatalf("%d pages, %d tickets; want 3 pages of all 25", pages, len(got))
	}
	seen := map[string]bool{}
	for _, id := range got {
		if seen[id] {
			t.Fatalf("ticket %s twice", id)
		}
		seen[id] = true
	}
	if got[0] != ids[len(ids)-1] {
		t.Fatalf("the first is %s, want the newest %s", got[0], ids[len(ids)-1])
	}
	if page, next := h.PendingPage(1000, ""); len(page) != 24 || next != "" {
		t.Fatalf("a large limit: %d tickets, next %q", len(page), next)
	}
	if page, _ := h.PendingPage(10, "garbage"); len(page) != 10 {
		t.Fatalf("a bad cursor: %d tickets", len(page))
	}
	big := ask("fp1:big")
	big.URL = "https://example.com/" + strings.Repeat("a", 600<<10)
	h.Ask(big)
	big.Fingerprint = "fp1:big2"
	h.Ask(big)
	if page, next := h.PendingPage(MaxPage, ""); len(page) != 1 || next == "" {
		t.Fatalf("two tickets of 600 KiB: a page of %d, next %q; want one a page", len(page), next)
	}
}
