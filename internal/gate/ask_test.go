package gate

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/hubapi"
	"github.com/lockhttp/lockhttp/internal/hubclient"
	"github.com/lockhttp/lockhttp/internal/judge"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// hubServer runs a hub on addr (":0" for any) from the state file; stop ends it.
func hubServer(t testing.TB, addr, state string, key ed25519.PrivateKey) (h *hub.Hub, url string, stop func()) {
	t.Helper()
	h, err := hub.New(hub.Config{Key: key, StatePath: state})
	if err != nil {
		t.Fatal(err)
	}
	var l net.Listener
	for i := 0; i < 50; i++ { // the old listener's port may take a moment to come free
		if l, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/gate/", h.GateHandler("gate-token-0123456789"))
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { h.Run(ctx); close(ran) }()
	// stop waits for Run's last state write, so that it never races the test's cleanup.
	return h, "http://" + l.Addr().String(), func() { cancel(); srv.Close(); <-ran }
}

func askGate(t testing.TB, hold string) (*testGate, *hub.Hub, string, ed25519.PrivateKey, string, func()) {
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	state := filepath.Join(t.TempDir(), "hub.json")
	h, url, stop := hubServer(t, "127.0.0.1:0", state, key)
	hc := hubclient.New(url, "gate-token-0123456789", key.Public().(ed25519.PublicKey), nil)
	ctx, cancel := context.WithCancel(context.Background())
	go hc.Run(ctx)
	t.Cleanup(cancel)
	tg := startGateWith(t, nil, func(c *Config) { c.Hub = hc; c.HeldDir = filepath.Join(t.TempDir(), "held") })
	p, err := policy.Load("p.toml", []byte(fmt.Sprintf(gatePolicy+"[settings]\nhold = %q\n", tg.port, hold)))
	if err != nil {
		t.Fatal(err)
	}
	tg.g.SetPolicy(p)
	deadline := time.Now().Add(5 * time.Second)
	for !hc.Connected() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	return tg, h, url, key, state, stop
}

// TestHubRestartKeepsThePendingTicket: a request is held, the hub restarts (same state file,
// same address); the ticket is still there, and a human's approval after the restart releases
// the retry; nothing passes without it.
func TestHubRestartKeepsThePendingTicket(t *testing.T) {
	tg, h, url, key, state, stop := askGate(t, "2s")
	c := tg.client()
	// DELETE on origin.test asks (trusted for reads only).
	req, _ := http.NewRequest("DELETE", tg.url("/thing"), nil)
	done := make(chan *http.Response, 1)
	go func() {
		resp, err := c.Do(req)
		if err != nil {
			t.Error(err)
		}
		done <- resp
	}()
	var id string
	testkit.WaitFor(t, 5*time.Second, "a ticket for the held request", func() bool {
		if p := h.Pending(); len(p) == 1 {
			id = p[0].ID
		}
		return id != ""
	})
	h.Flush()
	stop() // the hub goes away while the request is held
	resp := <-done
	resp.Body.Close()
	if resp.StatusCode != 403 || resp.Header.Get(HeaderCode) != "E_PENDING" || resp.Header.Get(HeaderTicket) != id {
		t.Fatalf("held request while the hub restarts: %d %s %s", resp.StatusCode, resp.Header.Get(HeaderCode), resp.Header.Get(HeaderTicket))
	}
	addr := strings.TrimPrefix(url, "http://")
	h2, _, stop2 := hubServer(t, addr, state, key)
	defer stop2()
	tk, ok := h2.Get(id)
	if !ok || tk.Status != hubapi.Pending {
		t.Fatalf("after the restart: %+v %v", tk, ok)
	}
	if tg.origin.count() != 0 {
		t.Fatal("the request went out without a human")
	}
	if _, err := h2.Decide(id, tk.Fingerprint, true, "terminal:test", ""); err != nil {
		t.Fatal(err)
	}
	// The retry passes once the gate's event stream is back.
	deadline := time.Now().Add(10 * time.Second)
	for {
		req, _ := http.NewRequest("DELETE", tg.url("/thing"), nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 {
			break
		}
		if resp.Header.Get(HeaderCode) != "E_NO_CONSOLE" || time.Now().After(deadline) {
			t.Fatalf("retry after approval: %d %s", resp.StatusCode, resp.Header.Get(HeaderCode))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if tg.origin.count() != 1 {
		t.Fatalf("%d requests went out", tg.origin.count())
	}
}

// TestManyHeldRequestsDoNotBlock holds 50 requests and checks that other traffic still flows and
// that a decision releases exactly the ticket decided.
func TestManyHeldRequestsDoNotBlock(t *testing.T) {
	tg, h, _, _, _, stop := askGate(t, "30s")
	defer stop()
	c := tg.client()
	results := make(chan int, 50)
	for i := 0; i < 50; i++ {
		go func(i int) {
			req, _ := http.NewRequest("DELETE", tg.url(fmt.Sprintf("/held/%d", i)), nil)
			resp, err := c.Do(req)
			if err != nil {
				results <- 0
				return
			}
			resp.Body.Close()
			results <- resp.StatusCode
		}(i)
	}
	testkit.WaitFor(t, 10*time.Second, "50 tickets", func() bool { return len(h.Pending()) >= 50 })
	// Reads flow while 50 requests are held.
	resp, err := c.Get(tg.url("/free"))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("a free read while requests are held: %v %v", resp, err)
	}
	resp.Body.Close()
	p := h.Pending()
	if _, err := h.Decide(p[0].ID, p[0].Fingerprint, true, "terminal:t", ""); err != nil {
		t.Fatal(err)
	}
	if got := <-results; got != 200 {
		t.Fatalf("released request: %d", got)
	}
	select {
	case got := <-results:
		t.Fatalf("another held request finished: %d", got)
	case <-time.After(300 * time.Millisecond):
	}
	for _, tk := range h.Pending() {
		h.Decide(tk.ID, tk.Fingerprint, false, "terminal:t", "cleanup")
	}
	for i := 0; i < 49; i++ {
		if got := <-results; got != 403 {
			t.Fatalf("denied request: %d", got)
		}
	}
}

func TestAskWithoutAHubIsNoConsole(t *testing.T) {
	tg := startGate(t, nil) // no hub configured
	req, _ := http.NewRequest("DELETE", tg.url("/x"), nil)
	start := time.Now()
	resp, err := tg.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 || resp.Header.Get(HeaderCode) != "E_NO_CONSOLE" || time.Since(start) > 5*time.Second {
		t.Fatalf("got %d %s after %s", resp.StatusCode, resp.Header.Get(HeaderCode), time.Since(start))
	}
}

// TestHeuristicsTicketShowsTheScore: under heuristics = "enforce" a FREE request over the
// threshold waits for a human; the ticket names the rule, the score and the reasons (not the
// blob), and a denial answers E_EXFIL_SUSPECT.
func TestHeuristicsTicketShowsTheScore(t *testing.T) {
	tg, h, _, _, _, stop := askGate(t, "10s")
	defer stop()
	// gone.test is mapped to the origin and not trusted: the heuristics score it in full.
	p, err := policy.Load("p.toml", []byte(fmt.Sprintf(gatePolicy+"[[rule]]\nname = \"api\"\nhosts = [\"gone.test\"]\nverdict = \"free\"\n"+
		"[settings]\nhold = \"10s\"\nheuristics = \"enforce\"\n", tg.port)))
	if err != nil {
		t.Fatal(err)
	}
	tg.g.SetPolicy(p)
	blob := strings.Repeat("Qm9vZ2xlIGlzIGEgc2VhcmNoIGVuZ2luZQ7x", 12)
	done := make(chan *http.Response, 1)
	go func() {
		resp, err := tg.client().Get(fmt.Sprintf("http://gone.test:%d/collect?d=%s", tg.port, blob))
		if err != nil {
			t.Error(err)
		}
		done <- resp
	}()
	var tk hubapi.Ticket
	testkit.WaitFor(t, 5*time.Second, "a ticket for the exfiltration suspect", func() bool {
		if p := h.Pending(); len(p) == 1 {
			tk = p[0]
		}
		return tk.ID != ""
	})
	if tk.Rule != judge.RuleHeuristics || !strings.Contains(tk.Reason, "exfiltration score") || !strings.Contains(tk.Warning, "base64") ||
		strings.Contains(tk.Reason+tk.Warning, blob[:30]) {
		t.Fatalf("ticket: rule %q reason %q warning %q", tk.Rule, tk.Reason, tk.Warning)
	}
	if _, err := h.Decide(tk.ID, tk.Fingerprint, false, "terminal:test", "not this"); err != nil {
		t.Fatal(err)
	}
	resp := <-done
	resp.Body.Close()
	if resp.StatusCode != 403 || resp.Header.Get(HeaderCode) != "E_EXFIL_SUSPECT" || tg.origin.count() != 0 {
		t.Fatalf("after the denial: %d %s, %d went out", resp.StatusCode, resp.Header.Get(HeaderCode), tg.origin.count())
	}
}
