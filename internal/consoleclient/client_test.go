package consoleclient

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/console"
	"github.com/lockhttp/lockhttp/internal/consoleapi"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/testkit"
	"github.com/lockhttp/lockhttp/internal/unixsock"
)

const text = "version = 1\n[sources]\nlocal = [\"127.0.0.1\"]\n"

// fakeConsole serves a settable answer on a unix socket.
type fakeConsole struct {
	mu     sync.Mutex
	served consoleapi.Served
	down   bool
}

func (f *fakeConsole) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	if r.Header.Get("If-None-Match") == `"`+f.served.Version+`"` {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	json.NewEncoder(w).Encode(f.served)
}

func TestPollAppliesKeepsAndRefuses(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "c.sock")
	l, err := unixsock.Listen(sock, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	fc := &fakeConsole{served: consoleapi.Served{Version: policy.Hash([]byte(text)), Name: "p.toml", TOML: text}}
	srv := &http.Server{Handler: fc}
	go srv.Serve(l)
	defer srv.Close()

	var applied atomic.Int32
	var cur atomic.Pointer[policy.Policy]
	var lastErr atomic.Pointer[error]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go Poll(ctx, New(sock), 10*time.Millisecond, slog.New(slog.DiscardHandler), func(p *policy.Policy) {
		applied.Add(1)
		cur.Store(p)
	}, func(err error) { lastErr.Store(&err) }, nil)
	testkit.WaitFor(t, 5*time.Second, "first policy applied", func() bool { return applied.Load() == 1 })
	// The console goes away: the policy stays, the error is reported, nothing is applied.
	fc.mu.Lock()
	fc.down = true
	fc.mu.Unlock()
	testkit.WaitFor(t, 5*time.Second, "error reported", func() bool { e := lastErr.Load(); return e != nil && *e != nil })
	if applied.Load() != 1 || cur.Load() == nil {
		t.Fatal("the policy changed while the console was down")
	}
	// A served policy whose text does not hash to its version is refused.
	fc.mu.Lock()
	fc.down = false
	fc.served = consoleapi.Served{Version: policy.Hash([]byte(text)) + "x", Name: "p.toml", TOML: text + "deny = [\"a.example\"]\n"}
	fc.mu.Unlock()
	testkit.WaitFor(t, 5*time.Second, "hash mismatch reported", func() bool {
		e := lastErr.Load()
		return e != nil && *e != nil && contains((*e).Error(), "does not match its version")
	})
	if applied.Load() != 1 {
		t.Fatal("a tampered policy was applied")
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// A binding the console makes is in the next policy Poll applies; a refresh makes Poll fetch at
// once and returns after the apply, so that the gate holds the binding before it answers the
// approved request.
func TestPollTakesBindingsOnRefresh(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.toml")
	if err := os.WriteFile(pol, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := console.New(console.Config{PolicyPath: pol, StatePath: filepath.Join(dir, "state.json"), GateUIDs: []int{os.Geteuid()}})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "c.sock")
	l, err := unixsock.Listen(sock, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: c.Handler(), ConnContext: unixsock.ConnContext}
	go srv.Serve(l)
	defer srv.Close()
	var cur atomic.Pointer[policy.Policy]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	now, refresh := Refresher()
	// A poll interval far longer than the test: only a refresh fetches again.
	go Poll(ctx, New(sock), time.Hour, slog.New(slog.DiscardHandler), func(p *policy.Policy) { cur.Store(p) }, nil, now)
	testkit.WaitFor(t, 5*time.Second, "first policy applied", func() bool { return cur.Load() != nil })
	if cur.Load().ClaudeBound != nil {
		t.Fatalf("bound before any binding: %v", cur.Load().ClaudeBound)
	}
	const hash = "0f393ff081f8c2d1e7b4a1c9d3e5f7a9b1c3d5e7f9a1b3c5d7e9f1a3b5c7d9e1"
	if err := c.Bind("local", hash, "cli:root", "t1"); err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	refresh(rctx)
	rcancel()
	if got := cur.Load().ClaudeBound["local"]; len(got) != 1 || got[0] != hash {
		t.Fatalf("after the refresh: bound %v", cur.Load().ClaudeBound)
	}
}

// A served binding that is not a SHA-256 hex is refused with the policy it came with.
func TestPollRefusesABadBinding(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "c.sock")
	l, err := unixsock.Listen(sock, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	fc := &fakeConsole{served: consoleapi.Served{Version: policy.Hash([]byte(text)), Name: "p.toml", TOML: text, Bound: map[string][]string{"local": {"sk-ant-api03-xyz"}}}}
	srv := &http.Server{Handler: fc}
	go srv.Serve(l)
	defer srv.Close()
	var lastErr atomic.Pointer[error]
	var applied atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go Poll(ctx, New(sock), 10*time.Millisecond, slog.New(slog.DiscardHandler), func(*policy.Policy) { applied.Add(1) }, func(err error) { lastErr.Store(&err) }, nil)
	testkit.WaitFor(t, 5*time.Second, "the bad binding reported", func() bool {
		e := lastErr.Load()
		return e != nil && *e != nil && contains((*e).Error(), "not a SHA-256")
	})
	if applied.Load() != 0 || contains((*lastErr.Load()).Error(), "sk-ant") {
		t.Fatalf("applied %d; error %v", applied.Load(), *lastErr.Load())
	}
}
