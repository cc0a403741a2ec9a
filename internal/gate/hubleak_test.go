package gate

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/hubclient"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// TestHubErrorsStayInTheLog: whatever the hub's failure (a connection dropped under the ask, an
// ask sent on to an address that refuses it, an error answer to the ask or to the claim of an
// approved ticket), the refusal the agent reads (status line, every header, the body, plain
// text and JSON) names neither the hub's address nor the hub client's error: it is fixed text,
// and the cause is in the gate's log.
func TestHubErrorsStayInTheLog(t *testing.T) {
	const cause = "pq: connection to 10.9.8.7:5432 failed: password authentication failed for user hubsecret"
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	h, err := hub.New(hub.Config{Key: key, StatePath: filepath.Join(t.TempDir(), "hub.json")})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hubAddr := l.Addr().String()
	// The real hub behind a front that fails the ask or the claim as the case says.
	var fail atomic.Value // func(w, r) bool: true when it answered r itself
	fail.Store(func(http.ResponseWriter, *http.Request) bool { return false })
	real := h.GateHandler("gate-token-0123456789")
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !fail.Load().(func(http.ResponseWriter, *http.Request) bool)(w, r) {
			real.ServeHTTP(w, r)
		}
	})}
	go srv.Serve(l)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { h.Run(ctx); close(ran) }()
	t.Cleanup(func() { cancel(); srv.Close(); <-ran })

	hc := hubclient.New("http://"+hubAddr, "gate-token-0123456789", key.Public().(ed25519.PublicKey), nil)
	hctx, hcancel := context.WithCancel(context.Background())
	go hc.Run(hctx)
	t.Cleanup(hcancel)
	var logs testkit.Buffer
	tg := startGateWith(t, nil, func(c *Config) {
		c.Hub = hc
		c.HeldDir = filepath.Join(t.TempDir(), "held")
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	p, err := policy.Load("p.toml", []byte(fmt.Sprintf(gatePolicy+"[settings]\nhold = \"10s\"\n", tg.port)))
	if err != nil {
		t.Fatal(err)
	}
	tg.g.SetPolicy(p)
	testkit.WaitFor(t, 5*time.Second, "the gate's event stream to the hub", hc.Connected)

	on := func(path string, answer func(w http.ResponseWriter, r *http.Request)) func(http.ResponseWriter, *http.Request) bool {
		return func(w http.ResponseWriter, r *http.Request) bool {
			if r.URL.Path != path {
				return false
			}
			answer(w, r)
			return true
		}
	}
	for _, c := range []struct {
		name string
		fail func(http.ResponseWriter, *http.Request) bool
		// approve: the ask reaches the hub and a human approves the ticket (the claim fails).
		approve bool
		code    string
		// leaks are what the hub client's error holds that the agent must not read.
		leaks []string
	}{
		{"the connection drops under the ask", on("/v1/gate/ask", func(w http.ResponseWriter, r *http.Request) {
			c, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				c.Close()
			}
		}), false, "E_NO_CONSOLE", []string{"EOF"}},
		{"the ask is sent on to an address that refuses it", on("/v1/gate/ask", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://127.0.0.1:1/v1/gate/ask", http.StatusTemporaryRedirect)
		}), false, "E_NO_CONSOLE", []string{"127.0.0.1:1", "dial tcp", "connection refused"}},
		{"the hub answers the ask with an error", on("/v1/gate/ask", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprintf(w, `{"error":%q}`, cause)
		}), false, "E_NO_CONSOLE", []string{cause, "hubsecret", "10.9.8.7", "hub answered"}},
		{"the hub answers the claim with an error", on("/v1/gate/claim", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprintf(w, `{"error":%q}`, cause)
		}), true, "E_PENDING", []string{cause, "hubsecret", "10.9.8.7", "hub answered"}},
	} {
		for _, accept := range []string{"*/*", "application/json"} {
			t.Run(c.name+"/"+accept, func(t *testing.T) {
				fail.Store(c.fail)
				before := len(logs.String())
				done := make(chan *http.Response, 1)
				go func() {
					req, _ := http.NewRequest("DELETE", tg.url("/thing"), nil)
					req.Header.Set("Accept", accept)
					resp, err := tg.client().Do(req)
					if err != nil {
						t.Error(err)
					}
					done <- resp
				}()
				if c.approve {
					var id, fp string
					testkit.WaitFor(t, 5*time.Second, "a ticket for the held request", func() bool {
						for _, tk := range h.Pending() {
							id, fp = tk.ID, tk.Fingerprint
						}
						return id != ""
					})
					if _, err := h.Decide(id, fp, true, "terminal:test", ""); err != nil {
						t.Fatal(err)
					}
				}
				resp := <-done
				if resp == nil {
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.Header.Get(HeaderCode) != c.code || tg.origin.count() != 0 {
					t.Fatalf("%s %s, %d went out:\n%s", resp.Status, resp.Header.Get(HeaderCode), tg.origin.count(), body)
				}
				shown := resp.Status + "\n" + string(body)
				for k, vs := range resp.Header {
					shown += "\n" + k + ": " + strings.Join(vs, ", ")
				}
				for _, leak := range append([]string{hubAddr, "/v1/gate/"}, c.leaks...) {
					if strings.Contains(shown, leak) {
						t.Errorf("the agent reads %q:\n%s", leak, shown)
					}
				}
				// The cause is the log's.
				if log := logs.String()[before:]; !strings.Contains(log, hubAddr) && !strings.Contains(log, "hub answered 500") {
					t.Errorf("the log does not hold the hub's failure:\n%s", log)
				}
			})
		}
	}
}
