package gate

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/egress"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/testkit"
	"github.com/lockhttp/lockhttp/internal/wsframe"
)

// testGate is a gate on a loopback listener with a real audit writer.
type testGate struct {
	g        *Gate
	addr     string
	auditDir string
	aw       *audit.Writer
	origin   *recorder
	server   *httptest.Server // the origin's
	port     int
}

type recorder struct {
	mu   sync.Mutex
	reqs []*http.Request
	body [][]byte
	h    http.Handler // optional override
}

func (o *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	o.mu.Lock()
	o.reqs = append(o.reqs, r)
	o.body = append(o.body, b)
	h := o.h
	o.mu.Unlock()
	if h != nil {
		h.ServeHTTP(w, r)
		return
	}
	fmt.Fprintf(w, "ok %s %s", r.Method, r.URL.Path)
}

func (o *recorder) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.reqs)
}

const gatePolicy = `version = 1
trusted = ["origin.test"]
[[rule]]
name = "writes"
hosts = ["origin.test"]
methods = ["POST"]
verdict = "free"
[[rule]]
name = "no-secret"
hosts = ["origin.test"]
paths = ["/secret/**"]
verdict = "deny"
[floor]
allow_cidrs = ["127.0.0.1/32"]
allow_ports = [%d]
[floor.hosts]
"origin.test" = "127.0.0.1"
"gone.test" = "127.0.0.1"
[sources]
local = ["127.0.0.0/8"]
`

func startGate(t testing.TB, handler http.Handler) *testGate {
	t.Helper()
	return startGateWith(t, handler, nil)
}

func startGateWith(t testing.TB, handler http.Handler, adjust func(*Config)) *testGate {
	t.Helper()
	rec := &recorder{h: handler}
	origin := httptest.NewServer(rec)
	t.Cleanup(origin.Close)
	port := origin.Listener.Addr().(*net.TCPAddr).Port
	dir := t.TempDir()
	aw, err := audit.Open(audit.Options{Dir: dir, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Audit: aw, Dialer: &egress.Dialer{}}
	if adjust != nil {
		adjust(&cfg)
	}
	g := New(cfg)
	p, err := policy.Load("gate.toml", []byte(fmt.Sprintf(gatePolicy, port)))
	if err != nil {
		t.Fatal(err)
	}
	g.SetPolicy(p)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { g.Serve(ctx, l); close(done) }()
	t.Cleanup(func() { cancel(); <-done; aw.Close() })
	return &testGate{g: g, addr: l.Addr().String(), auditDir: dir, aw: aw, origin: rec, server: origin, port: port}
}

func (tg *testGate) client() *http.Client {
	u, _ := url.Parse("http://" + tg.addr)
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u)}, Timeout: 10 * time.Second}
}

func (tg *testGate) url(path string) string {
	return fmt.Sprintf("http://origin.test:%d%s", tg.port, path)
}

// raw sends bytes and reads the answer until the gate closes the connection or goes quiet.
func (tg *testGate) raw(t *testing.T, s string) string {
	t.Helper()
	c, err := net.Dial("tcp", tg.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, s)
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	var b bytes.Buffer
	io.Copy(&b, c)
	return b.String()
}

func (tg *testGate) records(t *testing.T) []map[string]any {
	t.Helper()
	return testkit.AuditRecords(t, tg.auditDir)
}

func TestSmugglingNeverReachesTheOrigin(t *testing.T) {
	tg := startGate(t, nil)
	o := fmt.Sprintf("origin.test:%d", tg.port)
	good := "GET http://" + o + "/first HTTP/1.1\r\nHost: " + o + "\r\n\r\n"
	cases := []struct {
		name, bad, code, rule string
		status                int
	}{
		{"CL and TE", "POST http://" + o + "/x HTTP/1.1\r\nHost: " + o + "\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "E_FLOOR", "framing:bad-request", 400},
		{"duplicate CL", "POST http://" + o + "/x HTTP/1.1\r\nHost: " + o + "\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc", "E_FLOOR", "framing:bad-request", 400},
		{"obs-fold", "GET http://" + o + "/x HTTP/1.1\r\nHost: " + o + "\r\nX-A: a\r\n b\r\n\r\n", "E_FLOOR", "framing:bad-request", 400},
		{"bare LF", "GET http://" + o + "/x HTTP/1.1\nHost: " + o + "\r\n\r\n", "E_FLOOR", "framing:bad-request", 400},
		{"TE gzip chunked", "POST http://" + o + "/x HTTP/1.1\r\nHost: " + o + "\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", "E_FLOOR", "framing:bad-request", 400},
		{"h2c upgrade", "GET http://" + o + "/x HTTP/1.1\r\nHost: " + o + "\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAA\r\n\r\n", "E_FLOOR", "framing:h2c", 403},
		{"h2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "E_FLOOR", "framing:h2-preface", 403},
		{"host mismatch", "GET http://" + o + "/x HTTP/1.1\r\nHost: evil.test\r\n\r\n", "E_FLOOR", "framing:host-mismatch", 403},
		{"NUL in value", "GET http://" + o + "/x HTTP/1.1\r\nHost: " + o + "\r\nX-A: a\x00b\r\n\r\n", "E_FLOOR", "framing:bad-request", 400},
		{"origin-form", "GET /x HTTP/1.1\r\nHost: " + o + "\r\n\r\n", "E_FLOOR", "floor:origin-form", 400},
		{"other upgrade", "GET http://" + o + "/x HTTP/1.1\r\nHost: " + o + "\r\nConnection: Upgrade\r\nUpgrade: spdy/3\r\n\r\n", "E_FLOOR", "floor:upgrade", 403},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := tg.origin.count()
			out := tg.raw(t, good+c.bad+good)
			br := bufio.NewReader(strings.NewReader(out))
			first, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("first answer: %v\n%q", err, out)
			}
			io.Copy(io.Discard, first.Body)
			if first.StatusCode != 200 {
				t.Fatalf("the good request before: %d", first.StatusCode)
			}
			second, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("second answer: %v\n%q", err, out)
			}
			body, _ := io.ReadAll(second.Body)
			if second.StatusCode != c.status || second.Header.Get(HeaderCode) != c.code || second.Header.Get(HeaderRule) != c.rule {
				t.Fatalf("got %d %s %s; want %d %s %s\n%s", second.StatusCode, second.Header.Get(HeaderCode), second.Header.Get(HeaderRule), c.status, c.code, c.rule, body)
			}
			// Every refusal ends its connection, a well-framed one too (the gate writes its
			// status line itself): nothing after it is read.
			if rest, _ := io.ReadAll(br); len(rest) > 0 {
				t.Errorf("the gate answered after the refusal: %q", rest)
			}
			if got := tg.origin.count() - before; got != 1 {
				t.Errorf("%d requests reached the origin, want only the first", got)
			}
		})
	}
}

func TestHopByHopHeadersStripped(t *testing.T) {
	tg := startGate(t, nil)
	o := fmt.Sprintf("origin.test:%d", tg.port)
	out := tg.raw(t, "GET http://"+o+"/h HTTP/1.1\r\nHost: "+o+"\r\nConnection: close, X-Private\r\nX-Private: 1\r\nKeep-Alive: 5\r\nProxy-Authorization: Basic YWdlbnQ6dG9rZW4=\r\nProxy-Connection: keep-alive\r\nTE: trailers\r\nX-Kept: yes\r\n\r\n")
	if !strings.HasPrefix(out, "HTTP/1.1 200") {
		t.Fatalf("answer %q", out)
	}
	tg.origin.mu.Lock()
	h := tg.origin.reqs[len(tg.origin.reqs)-1].Header
	tg.origin.mu.Unlock()
	for _, k := range []string{"X-Private", "Keep-Alive", "Proxy-Authorization", "Proxy-Connection", "Te"} {
		if h.Get(k) != "" {
			t.Errorf("%s reached the origin", k)
		}
	}
	if h.Get("X-Kept") != "yes" {
		t.Error("an end-to-end header was dropped")
	}
}

func TestUnreachableTargetIs502(t *testing.T) {
	tg := startGate(t, nil)
	// gone.test maps to 127.0.0.1 on a port nothing listens on: open it in a policy of its own.
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	p, err := policy.Load("p.toml", []byte(fmt.Sprintf("version = 1\ntrusted = [\"gone.test\"]\n[floor]\nallow_cidrs = [\"127.0.0.1/32\"]\nallow_ports = [%d]\n[floor.hosts]\n\"gone.test\" = \"127.0.0.1\"\n[sources]\nlocal = [\"127.0.0.0/8\"]\n", port)))
	if err != nil {
		t.Fatal(err)
	}
	tg.g.SetPolicy(p)
	resp, err := tg.client().Get(fmt.Sprintf("http://gone.test:%d/", port))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 502 || !strings.Contains(string(body), "could not be reached") || resp.Header.Get(HeaderCode) != "" {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
}

func TestNoPolicyRefusesEverything(t *testing.T) {
	tg := startGate(t, nil)
	tg.g.SetPolicy(nil)
	resp, err := tg.client().Get(tg.url("/x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 || resp.Header.Get(HeaderCode) != "E_NO_CONSOLE" || resp.Header.Get(HeaderRule) != "no-policy" {
		t.Fatalf("got %d %s %s", resp.StatusCode, resp.Header.Get(HeaderCode), resp.Header.Get(HeaderRule))
	}
	if tg.origin.count() != 0 {
		t.Error("the origin was reached")
	}
}

// failingAuditor reports an unhealthy audit.
type failingAuditor struct{ *audit.Writer }

func (failingAuditor) Healthy() error { return errors.New("disk full") }

func TestBrokenAuditRefusesTraffic(t *testing.T) {
	tg := startGate(t, nil)
	tg.g.audit = failingAuditor{tg.aw}
	resp, err := tg.client().Get(tg.url("/x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || tg.origin.count() != 0 {
		t.Fatalf("got %d, origin reached %d times", resp.StatusCode, tg.origin.count())
	}
}

// TestRefusalIsAuditedBeforeTheAnswer reads the audit as soon as the refusal arrives: the
// record must already be there.
func TestRefusalIsAuditedBeforeTheAnswer(t *testing.T) {
	tg := startGate(t, nil)
	for i := 0; i < 20; i++ {
		resp, err := tg.client().Get(tg.url(fmt.Sprintf("/secret/%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		id := resp.Header.Get(HeaderRequest)
		found := false
		for _, m := range tg.records(t) {
			if m["id"] == id {
				found = m["code"] == "E_RULE" && m["rule"] == "no-secret"
			}
		}
		if !found {
			t.Fatalf("refusal %s answered before its record was written", id)
		}
	}
}

// TestForwardedIsAuditedBeforeItsLastByte reads the audit as soon as a forwarded answer is
// complete, small, large (its last bytes written through before the handler returns) or
// streamed without a length: the record must already be in the file, so that a gate killed at
// that moment has lost no record of an answer its client holds.
func TestForwardedIsAuditedBeforeItsLastByte(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 1<<20)
	tg := startGate(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/big/"):
			w.Header().Set("Content-Length", fmt.Sprint(len(big)))
			w.Write(big)
		case strings.HasPrefix(r.URL.Path, "/stream/"):
			for range 3 {
				w.Write([]byte("part "))
				w.(http.Flusher).Flush()
			}
		default:
			fmt.Fprintf(w, "ok %s", r.URL.Path)
		}
	}))
	for i := range 30 {
		path := []string{"/small/", "/big/", "/stream/"}[i%3] + fmt.Sprint(i)
		resp, err := tg.client().Get(tg.url(path))
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || len(body) == 0 {
			t.Fatalf("%s: %d, %d bytes, %v", path, resp.StatusCode, len(body), err)
		}
		id := resp.Header.Get(HeaderRequest)
		found := false
		for _, m := range tg.records(t) {
			found = found || (m["id"] == id && m["status"] == float64(200) && m["bytes_out"] == float64(len(body)))
		}
		if !found {
			t.Fatalf("%s: answer %s complete before its record (status 200, %d bytes out) was in the audit", path, id, len(body))
		}
	}
}

// TestLongStreamKeepsGoing sends a slow stream that outlasts the gate's header and idle
// timeouts; while it moves, it is not cut.
func TestLongStreamKeepsGoing(t *testing.T) {
	tg := startGateWith(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < 8; i++ {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
			time.Sleep(150 * time.Millisecond)
		}
	}), func(c *Config) {
		// Tight timeouts: the stream lasts longer than both.
		c.IdleTimeout = 300 * time.Millisecond
		c.ReadHeaderTimeout = 300 * time.Millisecond
	})
	resp, err := tg.client().Get(tg.url("/events"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	var got []string
	start := time.Now()
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			break
		}
		if strings.HasPrefix(line, "data: ") {
			got = append(got, strings.TrimSpace(line))
			if len(got) == 1 && time.Since(start) > time.Second {
				t.Error("the first event was held back: the stream is not flushed")
			}
		}
	}
	if len(got) != 8 {
		t.Fatalf("got %d events: %v", len(got), got)
	}
}

func TestWebSocketUpgradeIsDecidedAndPassed(t *testing.T) {
	tg := startGate(t, http.HandlerFunc(wsEchoOrigin))
	o := fmt.Sprintf("origin.test:%d", tg.port)
	c, err := net.Dial("tcp", tg.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET http://"+o+"/ws HTTP/1.1\r\nHost: "+o+"\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
	c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	wsWrite(c, wsframe.Text, true, "hello frames")
	if _, p, err := wsRead(br); err != nil || p != "echo:hello frames" {
		t.Fatalf("after the upgrade: %q %v", p, err)
	}
	// The session's record, when it ends, counts its messages each way.
	c.Close()
	testkit.WaitFor(t, 5*time.Second, "the session's record", func() bool {
		for _, r := range tg.records(t) {
			if r["event"] == "websocket" && r["verdict"] == "FREE" && strings.Contains(fmt.Sprint(r["detail"]), "1 messages up (18 bytes), 1 down (19 bytes)") {
				return true
			}
		}
		return false
	})
	// A refused upgrade (to a denied path) never reaches the origin.
	before := tg.origin.count()
	out := tg.raw(t, "GET http://"+o+"/secret/ws HTTP/1.1\r\nHost: "+o+"\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\nGET http://"+o+"/after HTTP/1.1\r\nHost: "+o+"\r\n\r\n")
	if !strings.HasPrefix(out, "HTTP/1.1 403") || strings.Count(out, "HTTP/1.1") != 1 || tg.origin.count() != before {
		t.Fatalf("refused upgrade: %q (origin reached %d times)", out, tg.origin.count()-before)
	}
}

// TestSlowHeadIsCut sends half a head and stalls: the gate closes the connection after its
// header timeout instead of holding it forever.
func TestSlowHeadIsCut(t *testing.T) {
	tg := startGateWith(t, nil, func(c *Config) { c.ReadHeaderTimeout = 300 * time.Millisecond })
	c, err := net.Dial("tcp", tg.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET http://origin.test/ HTTP/1.1\r\nHost: orig")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	_, err = io.ReadAll(c)
	if err != nil {
		t.Fatalf("the gate did not close the stalled connection: %v", err)
	}
	if time.Since(start) > 4*time.Second {
		t.Fatal("closed only after the client's own deadline")
	}
	if tg.origin.count() != 0 {
		t.Error("the origin was reached")
	}
}

func TestHeuristicsShadowAndEnforce(t *testing.T) {
	tg := startGate(t, nil)
	blob := strings.Repeat("Qm9vZ2xlIGlzIGEgc2VhcmNoIGVuZ2luZQ7x", 12) // ~430 base64 characters
	for _, mode := range []string{"shadow", "enforce"} {
		t.Run(mode, func(t *testing.T) {
			p, err := policy.Load("h.toml", []byte(fmt.Sprintf(`version = 1
[[rule]]
name = "api-free"
hosts = ["api-%[2]s.test"]
verdict = "free"
[floor]
allow_cidrs = ["127.0.0.1/32"]
allow_ports = [%[1]d]
[floor.hosts]
"api-%[2]s.test" = "127.0.0.1"
[sources]
local = ["127.0.0.0/8"]
[settings]
heuristics = %[2]q
`, tg.port, mode)))
			if err != nil {
				t.Fatal(err)
			}
			tg.g.SetPolicy(p)
			before := tg.origin.count()
			resp, err := tg.client().Get(fmt.Sprintf("http://api-%s.test:%d/collect?d=%s", mode, tg.port, blob))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			id := resp.Header.Get(HeaderRequest)
			switch mode {
			case "shadow":
				if resp.StatusCode != 200 || tg.origin.count() != before+1 {
					t.Fatalf("shadow: %d", resp.StatusCode)
				}
			case "enforce":
				if resp.StatusCode != 403 || resp.Header.Get(HeaderCode) != "E_EXFIL_SUSPECT" || resp.Header.Get(HeaderRule) != "heuristics" ||
					!strings.Contains(string(body), "base64") || tg.origin.count() != before {
					t.Fatalf("enforce: %d %s\n%s", resp.StatusCode, resp.Header.Get(HeaderCode), body)
				}
			}
			var rec map[string]any
			testkit.WaitFor(t, 5*time.Second, "the audit record of request "+id, func() bool {
				for _, m := range tg.records(t) {
					if m["id"] == id {
						rec = m
					}
				}
				return rec != nil
			})
			if rec == nil || rec["score"] == nil || !strings.Contains(fmt.Sprint(rec["findings"]), "base64") {
				t.Fatalf("audit record %v", rec)
			}
			if strings.Contains(fmt.Sprint(rec["findings"]), blob[:30]) {
				t.Fatal("the findings quote the blob")
			}
		})
	}
}
