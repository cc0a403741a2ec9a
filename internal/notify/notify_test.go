package notify

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// receiver is a webhook on loopback that keeps what it receives.
type receiver struct {
	mu     sync.Mutex
	got    []received
	status int // the answer; 0: 204
}

type received struct {
	header http.Header
	body   []byte
	at     time.Time
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	rc.got = append(rc.got, received{r.Header.Clone(), b, time.Now()})
	st := rc.status
	rc.mu.Unlock()
	if st == 0 {
		st = http.StatusNoContent
	}
	w.WriteHeader(st)
}

func (rc *receiver) all() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.got...)
}

type env struct {
	hub      *hub.Hub
	n        *Notifier
	srv      *httptest.Server // serves the decision links
	channels []policy.Notify
	mu       sync.Mutex
}

func (e *env) chans() []policy.Notify {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]policy.Notify(nil), e.channels...)
}

func newEnv(t *testing.T, channels ...policy.Notify) *env {
	t.Helper()
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	h, err := hub.New(hub.Config{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{hub: h, channels: channels}
	mux := http.NewServeMux()
	e.srv = httptest.NewServer(mux)
	t.Cleanup(e.srv.Close)
	e.n = New(Config{Hub: h, Channels: e.chans, PublicURL: e.srv.URL, Key: h.NotifyKey(), Backoff: 10 * time.Millisecond, Attempts: 3})
	mux.Handle(Pattern, e.n.Handler())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.n.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return e
}

func (e *env) ask(t *testing.T, fp string) hub.Ticket {
	t.Helper()
	ans, err := e.hub.Ask(hub.AskRequest{Kind: hub.KindRequest, Container: "agent", Agent: "claude", Method: "POST",
		URL: "https://api.example.com/v1/items?token=AKIAZ7QW3RTYUIOPAS5D", Rule: "ask-writes", Reason: "writes \x1b[31mask",
		BodyPreview: `{"key":"AKIAZ7QW3RTYUIOPAS5D","note":"<b>hi</b>"}`, BodySize: 40, Fingerprint: fp})
	if err != nil {
		t.Fatal(err)
	}
	return ans.Ticket
}

// decide posts a decision to link.
func decide(t *testing.T, link string, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(link, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b)
}

func TestWebhookNotifiesAndDecides(t *testing.T) {
	rc := &receiver{}
	hook := httptest.NewServer(rc)
	defer hook.Close()
	quiet := &receiver{}
	quietHook := httptest.NewServer(quiet)
	defer quietHook.Close()
	e := newEnv(t, policy.Notify{Name: "ops", URL: hook.URL + "/secret-path", Kind: "webhook", Human: true},
		policy.Notify{Name: "log", URL: quietHook.URL, Kind: "webhook"})
	tk := e.ask(t, "fp1:aaaa")
	testkit.WaitFor(t, 5*time.Second, "the notification on both channels", func() bool { return len(rc.all()) == 1 && len(quiet.all()) == 1 })

	var w Webhook
	if err := json.Unmarshal(rc.all()[0].body, &w); err != nil {
		t.Fatal(err)
	}
	if w.Ticket != tk.ID || w.Fingerprint != "fp1:aaaa" || w.Container != "agent" || w.Agent != "claude" || w.Rule != "ask-writes" ||
		w.Method != "POST" || !w.Human || w.Expires.IsZero() || !strings.HasPrefix(w.DecisionURL, e.srv.URL+LinkPrefix+"ops/"+tk.ID+"/") {
		t.Fatalf("webhook %+v", w)
	}
	raw := string(rc.all()[0].body)
	if strings.Contains(raw, "AKIAZ7QW3RTYUIOPAS5D") || strings.Contains(raw, "\x1b") || strings.Contains(raw, "\\u001b") {
		t.Fatalf("a secret or a control character reached the receiver:\n%s", raw)
	}
	var q Webhook
	json.Unmarshal(quiet.all()[0].body, &q)
	if q.Human || q.DecisionURL != "" {
		t.Fatalf("a channel that only notifies got a decision link: %+v", q)
	}

	cases := []struct {
		name   string
		link   string
		body   string
		status int
	}{
		{"a forged token", e.srv.URL + LinkPrefix + "ops/" + tk.ID + "/" + strings.Repeat("0", 64), `{"decision":"approve","fingerprint":"fp1:aaaa"}`, 403},
		{"another ticket's token", e.srv.URL + LinkPrefix + "ops/" + tk.ID + "/" + Token(e.hub.NotifyKey(), "ops", "tffffffffffff"), `{"decision":"approve","fingerprint":"fp1:aaaa"}`, 403},
		{"the token of a channel that only notifies", e.n.DecisionURL("log", tk.ID), `{"decision":"approve","fingerprint":"fp1:aaaa"}`, 403},
		{"an unknown channel", e.n.DecisionURL("nobody", tk.ID), `{"decision":"approve","fingerprint":"fp1:aaaa"}`, 403},
		{"a changed fingerprint", w.DecisionURL, `{"decision":"approve","fingerprint":"fp1:bbbb"}`, 403},
		{"no fingerprint", w.DecisionURL, `{"decision":"approve"}`, 400},
		{"an unknown decision", w.DecisionURL, `{"decision":"maybe","fingerprint":"fp1:aaaa"}`, 400},
		{"an unknown field", w.DecisionURL, `{"decision":"approve","fingerprint":"fp1:aaaa","auto":true}`, 400},
		{"not JSON", w.DecisionURL, `approve`, 400},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if st, body := decide(t, c.link, c.body); st != c.status {
				t.Fatalf("status %d, want %d: %s", st, c.status, body)
			}
			if cur, _ := e.hub.Get(tk.ID); cur.Status != hub.Pending {
				t.Fatalf("the ticket is %s after a refused decision", cur.Status)
			}
		})
	}
	// The body names an actor: whoever holds the link writes it, so the approver is the
	// channel's name alone.
	if st, body := decide(t, w.DecisionURL, `{"decision":"approve","fingerprint":"fp1:aaaa","actor":"terminal:alice"}`); st != 200 {
		t.Fatalf("the decision: %d %s", st, body)
	}
	cur, _ := e.hub.Get(tk.ID)
	if cur.Status != hub.Approved || cur.Decision.By != "notify:ops" {
		t.Fatalf("after the decision: %s by %+v", cur.Status, cur.Decision)
	}
	if st, _ := decide(t, w.DecisionURL, `{"decision":"deny","fingerprint":"fp1:aaaa"}`); st != 409 {
		t.Fatalf("a second decision: %d, want 409", st)
	}
	st := e.n.Status()
	if len(st) != 2 || st[0].Delivered != 1 || st[0].Host == "" || strings.Contains(st[0].Host, "secret") {
		t.Fatalf("status %+v", st)
	}
}

// TestChannelMadeNotifyOnly: a link sent while the channel was human decides nothing once the
// approved policy says it only notifies.
func TestChannelMadeNotifyOnly(t *testing.T) {
	rc := &receiver{}
	hook := httptest.NewServer(rc)
	defer hook.Close()
	e := newEnv(t, policy.Notify{Name: "ops", URL: hook.URL, Kind: "webhook", Human: true})
	tk := e.ask(t, "fp1:cccc")
	link := e.n.DecisionURL("ops", tk.ID)
	e.mu.Lock()
	e.channels[0].Human = false
	e.mu.Unlock()
	if st, body := decide(t, link, `{"decision":"approve","fingerprint":"fp1:cccc"}`); st != 403 {
		t.Fatalf("status %d: %s", st, body)
	}
}

// TestDeadReceiver: a receiver that refuses connections is retried a bounded number of times,
// its failure shows in the status without the URL, and the ticket is still decided on another
// facade at once.
func TestDeadReceiver(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String() + "/topic-secret"
	l.Close()
	e := newEnv(t, policy.Notify{Name: "dead", URL: dead, Kind: "ntfy", Human: true})
	tk := e.ask(t, "fp1:dddd")
	testkit.WaitFor(t, 5*time.Second, "the delivery given up", func() bool {
		st := e.n.Status()
		return len(st) == 1 && st[0].Failed == 1
	})
	st := e.n.Status()[0]
	if strings.Contains(st.LastError, "topic-secret") || st.LastError == "" || st.Delivered != 0 {
		t.Fatalf("status %+v", st)
	}
	if _, err := e.hub.Decide(tk.ID, "fp1:dddd", false, "terminal:alice", "no"); err != nil {
		t.Fatalf("deciding on the terminal with a dead channel: %v", err)
	}
}

// TestNtfyMessage: an ntfy channel gets a short text with the link and the two buttons that
// POST the decision; a 5xx answer is retried.
func TestNtfyMessage(t *testing.T) {
	rc := &receiver{status: 503}
	hook := httptest.NewServer(rc)
	defer hook.Close()
	e := newEnv(t, policy.Notify{Name: "phone", URL: hook.URL, Kind: "ntfy", Human: true})
	tk := e.ask(t, "fp1:eeee")
	testkit.WaitFor(t, 5*time.Second, "two attempts", func() bool { return len(rc.all()) >= 2 })
	rc.mu.Lock()
	rc.status = 200
	rc.mu.Unlock()
	testkit.WaitFor(t, 5*time.Second, "the delivery", func() bool { return e.n.Status()[0].Delivered == 1 })
	got := rc.all()[len(rc.all())-1]
	link := e.n.DecisionURL("phone", tk.ID)
	if !strings.Contains(string(got.body), link) || !strings.Contains(string(got.body), "POST https://api.example.com/v1/items") ||
		strings.Contains(string(got.body), "AKIAZ7QW3RTYUIOPAS5D") {
		t.Fatalf("message:\n%s", got.body)
	}
	acts := got.header.Get("Actions")
	if !strings.Contains(acts, "http, Approve, "+link+", method=POST") || !strings.Contains(acts, `"fingerprint":"fp1:eeee"`) || strings.ContainsAny(acts, "\r\n") {
		t.Fatalf("Actions %q", acts)
	}
	if !strings.Contains(got.header.Get("Title"), tk.ID) {
		t.Fatalf("Title %q", got.header.Get("Title"))
	}
	if strings.Contains(acts, "actor") {
		t.Fatalf("the buttons name an actor, which is ignored: %q", acts)
	}
}

// TestTokenFile: a channel with token_file sends its access token as a bearer token, read from
// the file at each delivery (a new token applies at once); a token file that cannot be used
// fails the delivery with an error naming the file, never its content.
func TestTokenFile(t *testing.T) {
	rc := &receiver{}
	hook := httptest.NewServer(rc)
	defer hook.Close()
	dir := t.TempDir()
	tokPath := filepath.Join(dir, "ntfy.token")
	if err := os.WriteFile(tokPath, []byte("tk_first7c2e9a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, policy.Notify{Name: "phone", URL: hook.URL, Kind: "ntfy", Human: true, TokenFile: tokPath})
	e.ask(t, "fp1:1010")
	testkit.WaitFor(t, 5*time.Second, "the first delivery", func() bool { return len(rc.all()) == 1 })
	if got := rc.all()[0].header.Get("Authorization"); got != "Bearer tk_first7c2e9a" {
		t.Fatalf("Authorization %q", got)
	}
	os.WriteFile(tokPath, []byte("tk_second41b0"), 0o600)
	e.ask(t, "fp1:2020")
	testkit.WaitFor(t, 5*time.Second, "the second delivery", func() bool { return len(rc.all()) == 2 })
	if got := rc.all()[1].header.Get("Authorization"); got != "Bearer tk_second41b0" {
		t.Fatalf("Authorization after the file changed %q", got)
	}
	for _, c := range []struct{ name, content, want string }{
		{"two words", "tk_secret one two", "holds something other than one token"},
		{"empty", "\n", "is empty"},
	} {
		t.Run(c.name, func(t *testing.T) {
			os.WriteFile(tokPath, []byte(c.content), 0o600)
			before := e.n.Status()[0].Failed
			e.ask(t, "fp1:"+strings.ReplaceAll(c.name, " ", ""))
			testkit.WaitFor(t, 5*time.Second, "the delivery given up", func() bool { return e.n.Status()[0].Failed == before+1 })
			st := e.n.Status()[0]
			if !strings.Contains(st.LastError, tokPath) || !strings.Contains(st.LastError, c.want) || strings.Contains(st.LastError, "tk_secret") {
				t.Fatalf("last error %q", st.LastError)
			}
			if len(rc.all()) != 2 {
				t.Fatal("a notification went out without its token")
			}
		})
	}
}

// TestSlowReceiverBounded: a receiver that never answers holds its channel's workers only: the
// hub's asks go on at once, the queue stays bounded and what does not fit is dropped, counted.
func TestSlowReceiverBounded(t *testing.T) {
	release := make(chan struct{})
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	defer hook.Close()
	defer close(release)
	e := newEnv(t, policy.Notify{Name: "slow", URL: hook.URL, Kind: "webhook"})
	for i := 0; i < queueSize+workers+5; i++ {
		e.ask(t, "fp1:"+strings.Repeat("0", 3)+string(rune('a'+i%26))+string(rune('a'+i/26)))
	}
	testkit.WaitFor(t, 5*time.Second, "the overflow dropped", func() bool {
		st := e.n.Status()
		return len(st) == 1 && st[0].Dropped >= 1 && st[0].Queued <= queueSize
	})
}

// startNotifier runs a Notifier for h until the test ends or stop is called, its decision links
// served by srv's mux.
func startNotifier(t *testing.T, h *hub.Hub, clock *testkit.Clock, chans func() []policy.Notify, mux *http.ServeMux, public string) (n *Notifier, stop func()) {
	t.Helper()
	n = New(Config{Hub: h, Channels: chans, PublicURL: public, Key: h.NotifyKey(), Now: clock.Now, Backoff: 10 * time.Millisecond, Attempts: 3})
	mux.Handle(Pattern, n.Handler())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { n.Run(ctx); close(done) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return n, stop
}

// TestReloadedTicketNotifiedAgain: a ticket still pending when the console restarts (the hub
// reloads it from its state file, long after it was opened) reaches the channel again, once,
// marked again; the link of that notification decides it on the restarted hub. A ticket that
// expired meanwhile is not sent.
func TestReloadedTicketNotifiedAgain(t *testing.T) {
	rc := &receiver{}
	hook := httptest.NewServer(rc)
	defer hook.Close()
	chans := func() []policy.Notify {
		return []policy.Notify{{Name: "ops", URL: hook.URL, Kind: "webhook", Human: true}}
	}
	clock := testkit.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	state := t.TempDir() + "/hub.json"
	of := func(id string) []Webhook {
		var out []Webhook
		for _, r := range rc.all() {
			var w Webhook
			if json.Unmarshal(r.body, &w) == nil && w.Ticket == id {
				out = append(out, w)
			}
		}
		return out
	}

	// Before the restart: two tickets, the first opened eight minutes before it.
	h1, err := hub.New(hub.Config{Key: key, StatePath: state, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	mux1 := http.NewServeMux()
	srv1 := httptest.NewServer(mux1)
	defer srv1.Close()
	_, stop1 := startNotifier(t, h1, clock, chans, mux1, srv1.URL)
	ask := func(h *hub.Hub, fp string) hub.Ticket {
		ans, err := h.Ask(hub.AskRequest{Kind: hub.KindRequest, Container: "agent", Method: "POST", URL: "https://api.example.com/v1/items",
			Rule: "ask-writes", Fingerprint: fp})
		if err != nil {
			t.Fatal(err)
		}
		return ans.Ticket
	}
	held := ask(h1, "fp1:1111")
	testkit.WaitFor(t, 5*time.Second, "the first notification", func() bool { return len(of(held.ID)) == 1 })
	if of(held.ID)[0].Again {
		t.Fatal("a new ticket's notification is marked again")
	}
	clock.Advance(hub.DefaultTicketTTL - 2*time.Minute)
	second := ask(h1, "fp1:2222")
	testkit.WaitFor(t, 5*time.Second, "the second ticket's notification", func() bool { return len(of(second.ID)) == 1 })
	h1.Flush()
	stop1()
	srv1.Close()

	// The restart, a minute later: a new hub from the state file, a new notifier.
	clock.Advance(time.Minute)
	h2, err := hub.New(hub.Config{Key: key, StatePath: state, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	mux2 := http.NewServeMux()
	srv2 := httptest.NewServer(mux2)
	defer srv2.Close()
	n2, _ := startNotifier(t, h2, clock, chans, mux2, srv2.URL)
	testkit.WaitFor(t, 5*time.Second, "the reloaded tickets notified again", func() bool {
		return len(of(held.ID)) == 2 && len(of(second.ID)) == 2
	})
	again := of(held.ID)[1]
	if !again.Again || again.Fingerprint != held.Fingerprint || !strings.HasPrefix(again.DecisionURL, srv2.URL+LinkPrefix+"ops/"+held.ID+"/") {
		t.Fatalf("the notification after the restart: %+v", again)
	}
	// The gate asking again for the held request (its hold re-reported) sends nothing more.
	ask(h2, "fp1:1111")
	fresh := ask(h2, "fp1:3333")
	testkit.WaitFor(t, 5*time.Second, "a new ticket's notification", func() bool { return len(of(fresh.ID)) == 1 })
	if of(fresh.ID)[0].Again {
		t.Fatal("a ticket opened after the restart is marked again")
	}
	testkit.WaitFor(t, 5*time.Second, "the queue drained", func() bool { return n2.Status()[0].Queued == 0 })
	if got := len(of(held.ID)); got != 2 {
		t.Fatalf("%d notifications of the held ticket, want 2 (one per start)", got)
	}
	if st, body := decide(t, again.DecisionURL, `{"decision":"approve","fingerprint":"fp1:1111","actor":"bob"}`); st != 200 {
		t.Fatalf("the decision through the link sent after the restart: %d %s", st, body)
	}
	if cur, _ := h2.Get(held.ID); cur.Status != hub.Approved || cur.Decision.By != "notify:ops" {
		t.Fatalf("after the decision: %s %+v", cur.Status, cur.Decision)
	}

	// A ticket that expired while the console was down is not sent again.
	stale := ask(h2, "fp1:4444")
	testkit.WaitFor(t, 5*time.Second, "the stale ticket's notification", func() bool { return len(of(stale.ID)) == 1 })
	h2.Flush()
	clock.Advance(hub.DefaultTicketTTL + time.Minute)
	h3, err := hub.New(hub.Config{Key: key, StatePath: state, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	n3, _ := startNotifier(t, h3, clock, chans, http.NewServeMux(), srv2.URL)
	marker := ask(h3, "fp1:5555")
	testkit.WaitFor(t, 5*time.Second, "the marker ticket's notification", func() bool { return len(of(marker.ID)) == 1 })
	testkit.WaitFor(t, 5*time.Second, "the queue drained", func() bool { return n3.Status()[0].Queued == 0 })
	if got := len(of(stale.ID)); got != 1 {
		t.Fatalf("a ticket that expired while the console was down was notified %d times, want 1", got)
	}
}

// Approving through a link a ticket whose request a gate restart cut answers what the approval
// stands for, as every facade says it.
func TestDecisionLinkSaysNothingWaited(t *testing.T) {
	rc := &receiver{}
	hook := httptest.NewServer(rc)
	defer hook.Close()
	e := newEnv(t, policy.Notify{Name: "ops", URL: hook.URL, Kind: "webhook", Human: true})
	tk := e.ask(t, "fp1:cccc")
	e.hub.LeaveCut(tk.ID)
	st, body := decide(t, e.n.DecisionURL("ops", tk.ID), `{"decision":"approve","fingerprint":"fp1:cccc"}`)
	var ans map[string]string
	if st != 200 || json.Unmarshal([]byte(body), &ans) != nil || ans["status"] != "approved" ||
		!strings.Contains(ans["waiting"], "Nothing was waiting on this ticket when it was approved (the gate restarted") {
		t.Fatalf("the answer: %d %s", st, body)
	}
}
