package consoleclient

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/console"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/testkit"
	"github.com/lockhttp/lockhttp/internal/unixsock"
)

const text = "version = 1\n[sources]\nlocal = [\"127.0.0.1\"]\n"

// fakeConsole serves a settable answer on a unix socket.
type fakeConsole struct {
	mu     sync.Mutex
	served console.Served
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
	fc := &fakeConsole{served: console.Served{Version: policy.Hash([]byte(text)), Name: "p.toml", TOML: text}}
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
	}, func(err error) { lastErr.Store(&err) })
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
	fc.served = console.Served{Version: policy.Hash([]byte(text)) + "x", Name: "p.toml", TOML: text + "deny = [\"a.example\"]\n"}
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
