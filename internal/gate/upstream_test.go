package gate

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// connCounter counts the connections an origin accepted.
type connCounter struct{ n atomic.Int64 }

func (c *connCounter) hook(_ net.Conn, s http.ConnState) {
	if s == http.StateNew {
		c.n.Add(1)
	}
}

func echoOrigin(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	if r.URL.Path == "/close" {
		w.Header().Set("Connection", "close")
	}
	fmt.Fprintf(w, "%s %s %d:%s", r.Method, r.URL.Path, len(b), b)
}

// TestUpstreamPoolReusesAndRecovers: plain and decrypted, requests to an HTTP/1.1 origin share
// one pooled connection; an origin that closes its idle connections, or says Connection: close,
// costs a new connection and no failed request, a POST included (it is never sent twice).
func TestUpstreamPoolReusesAndRecovers(t *testing.T) {
	for _, decrypted := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "decrypted"}[decrypted], func(t *testing.T) {
			var conns connCounter
			var posts atomic.Int64
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost {
					posts.Add(1)
				}
				echoOrigin(w, r)
			})
			var c *http.Client
			var base string
			var setIdle func(time.Duration)
			lastBody := func(echo string) string { return echo[strings.Index(echo, ":")+1:] }
			if decrypted {
				tg := startTLSGate(t, h)
				tg.origin.Config.ConnState = conns.hook
				setIdle = func(d time.Duration) { tg.origin.Config.IdleTimeout = d }
				c, base = tg.client(), fmt.Sprintf("https://origin.test:%d", tg.port)
				setPolicy(t, tg.gate, fmt.Sprintf(`version = 1
trusted = ["origin.test"]
[[rule]]
name = "writes"
hosts = ["origin.test"]
methods = ["POST"]
verdict = "free"
[floor]
allow_cidrs = ["127.0.0.1/32"]
allow_ports = [%d]
[sources]
local = ["127.0.0.0/8"]
`, tg.port))
			} else {
				tg := startGate(t, h)
				// The recorder before the handler reads the body: it keeps what arrived.
				lastBody = func(string) string {
					tg.origin.mu.Lock()
					defer tg.origin.mu.Unlock()
					return string(tg.origin.body[len(tg.origin.body)-1])
				}
				tg.server.Config.ConnState = conns.hook
				setIdle = func(d time.Duration) { tg.server.Config.IdleTimeout = d }
				c, base = tg.client(), tg.url("")
			}
			do := func(method, path, body string) string {
				t.Helper()
				req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
				if body == "" {
					req.Body = nil
				}
				resp, err := c.Do(req)
				if err != nil {
					t.Fatalf("%s %s: %v", method, path, err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != 200 {
					t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
				}
				return string(b)
			}
			for i := 0; i < 5; i++ {
				if got, want := do("GET", fmt.Sprintf("/r%d", i), ""), fmt.Sprintf("GET /r%d ", i); !strings.HasPrefix(got, want) {
					t.Fatalf("got %q, want %q", got, want)
				}
			}
			if got := lastBody(do("POST", "/p", "hello body")); got != "hello body" {
				t.Fatalf("POST: the origin got %q", got)
			}
			if n := conns.n.Load(); n != 1 {
				t.Fatalf("6 requests took %d upstream connections", n)
			}
			if got := do("GET", "/close", ""); !strings.HasPrefix(got, "GET /close ") {
				t.Fatalf("Connection: close: %q", got)
			}
			// The origin closes what idles 50 ms: the next POST finds its pooled connection
			// closed, and goes out once, on a new one.
			setIdle(50 * time.Millisecond)
			do("GET", "/before-idle", "")
			time.Sleep(300 * time.Millisecond)
			before := posts.Load()
			if got := lastBody(do("POST", "/after-idle", "x")); got != "x" {
				t.Fatalf("POST after the origin closed the idle connection: the origin got %q", got)
			}
			if n := posts.Load() - before; n != 1 {
				t.Fatalf("the POST reached the origin %d times", n)
			}
		})
	}
}

// TestUpstreamHostileAnswers: an origin that sends a head without end, or informational answers
// without end, gets a 502, and the gate holds a bounded amount of it.
func TestUpstreamHostileAnswers(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := make([]byte, 4096)
				n, _ := c.Read(br)
				c.SetWriteDeadline(time.Now().Add(5 * time.Second))
				if strings.Contains(string(br[:n]), "/endless-head") {
					io.WriteString(c, "HTTP/1.1 200 OK\r\nX-Big: ")
					chunk := strings.Repeat("a", 64<<10)
					for i := 0; i < 64; i++ { // 4 MiB, past the 1 MiB bound
						if _, err := io.WriteString(c, chunk); err != nil {
							return
						}
					}
					return
				}
				for i := 0; i < 50; i++ {
					if _, err := io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"); err != nil {
						return
					}
				}
			}()
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port
	tg := startGate(t, nil)
	setPolicy(t, tg.g, fmt.Sprintf(gatePolicy, port))
	for _, path := range []string{"/endless-head", "/endless-1xx"} {
		resp, err := tg.client().Get(fmt.Sprintf("http://origin.test:%d%s", port, path))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("%s: %d, want 502", path, resp.StatusCode)
		}
	}
	// The bounds stopped each, not the origin's close.
	want := map[string]string{"/endless-head": "head is over 1 MiB", "/endless-1xx": "too many informational"}
	for path, why := range want {
		rec := waitRecord(t, tg.auditDir, path, func(m map[string]any) bool { return strings.HasSuffix(fmt.Sprint(m["url"]), path) })
		if !strings.Contains(fmt.Sprint(rec["detail"]), why) {
			t.Fatalf("%s: detail %q, want it to say %q", path, rec["detail"], why)
		}
	}
}
