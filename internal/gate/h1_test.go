package gate

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/egress"
	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/hubclient"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// framingOrigin answers by path, each answer framed its own way.
func framingOrigin(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/chunked":
		w.Header().Set("Trailer", "X-Sum")
		w.Write([]byte("part one;"))
		w.(http.Flusher).Flush()
		w.Write([]byte("part two"))
		w.Header().Set("X-Sum", "17")
	case "/length":
		w.Header().Set("Content-Length", "5")
		w.Write([]byte("hello"))
	case "/empty":
		w.WriteHeader(http.StatusNoContent)
	case "/unmodified":
		w.WriteHeader(http.StatusNotModified)
	case "/echo":
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "got %d bytes: %s", len(b), b)
	default:
		fmt.Fprintf(w, "origin: %s %s", r.Method, r.URL.Path)
	}
}

// askTLSGate is a decrypting gate with a hub on loopback, connected.
func askTLSGate(t *testing.T, origin http.Handler) (*tlsGate, *hub.Hub) {
	t.Helper()
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	h, url, stop := hubServer(t, "127.0.0.1:0", filepath.Join(t.TempDir(), "hub.json"), key)
	t.Cleanup(stop)
	hc := hubclient.New(url, "gate-token-0123456789", key.Public().(ed25519.PublicKey), nil)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go hc.Run(ctx)
	tg := startTLSGateWith(t, origin, func(c *Config) { c.Hub = hc })
	testkit.WaitFor(t, 5*time.Second, "the hub connected", hc.Connected)
	return tg, h
}

// openTunnel opens a decrypted tunnel to origin.test through tg.
func openTunnel(t *testing.T, tg *tlsGate) (*tls.Conn, *bufio.Reader) {
	t.Helper()
	authority := fmt.Sprintf("origin.test:%d", tg.port)
	tc, err := connectTLS(t, tg.addr, authority, "origin.test", &tls.Config{RootCAs: tg.caPool})
	if err != nil {
		t.Fatal(err)
	}
	return tc, bufio.NewReader(tc)
}

func readAnswer(t *testing.T, br *bufio.Reader, method string) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("reading the answer to %s: %v", method, err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body of the answer to %s: %v", method, err)
	}
	return resp, string(b)
}

// TestTunnelAnswerFraming: the tunnel's server frames each answer as HTTP/1.1 says: chunked with
// its trailers, a declared length, no body for HEAD, 204 and 304, answers to pipelined requests
// in order, all on one connection.
func TestTunnelAnswerFraming(t *testing.T) {
	tg := startTLSGate(t, http.HandlerFunc(framingOrigin))
	tc, br := openTunnel(t, tg)
	host := fmt.Sprintf("origin.test:%d", tg.port)
	get := func(method, path string) string {
		return fmt.Sprintf("%s %s HTTP/1.1\r\nHost: %s\r\n\r\n", method, path, host)
	}

	io.WriteString(tc, get("GET", "/chunked"))
	resp, body := readAnswer(t, br, "GET")
	if resp.StatusCode != 200 || body != "part one;part two" || len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" {
		t.Fatalf("chunked: %d %q %v", resp.StatusCode, body, resp.TransferEncoding)
	}
	if got := resp.Trailer.Get("X-Sum"); got != "17" {
		t.Fatalf("trailer X-Sum: %q (trailers %v)", got, resp.Trailer)
	}
	if resp.Header.Get(HeaderRequest) == "" || resp.Header.Get("Date") == "" {
		t.Fatalf("headers: %v", resp.Header)
	}

	io.WriteString(tc, get("HEAD", "/length"))
	resp, body = readAnswer(t, br, "HEAD")
	if resp.StatusCode != 200 || body != "" || resp.Header.Get("Content-Length") != "5" {
		t.Fatalf("HEAD: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	for _, path := range []string{"/empty", "/unmodified"} {
		io.WriteString(tc, get("GET", path))
		resp, body = readAnswer(t, br, "GET")
		if body != "" || len(resp.TransferEncoding) != 0 || resp.Close {
			t.Fatalf("%s: %d %q %v close=%v", path, resp.StatusCode, body, resp.Header, resp.Close)
		}
	}

	// Two requests in one write: two answers, in order.
	io.WriteString(tc, get("GET", "/one")+get("GET", "/two"))
	for _, want := range []string{"origin: GET /one", "origin: GET /two"} {
		resp, body = readAnswer(t, br, "GET")
		if resp.StatusCode != 200 || body != want {
			t.Fatalf("pipelined: %d %q, want %q", resp.StatusCode, body, want)
		}
	}

	// Connection: close is honoured: the answer says it and the connection ends.
	fmt.Fprintf(tc, "GET /last HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host)
	resp, body = readAnswer(t, br, "GET")
	if !resp.Close || body != "origin: GET /last" {
		t.Fatalf("Connection: close: close=%v %q", resp.Close, body)
	}
	tc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := br.Read(make([]byte, 1)); err == nil {
		t.Fatalf("the connection goes on after Connection: close (%d bytes)", n)
	}
}

// TestTunnelExpectContinue: a client that waits for 100 Continue gets it when the gate reads the
// body, and the body then reaches the origin; an HTTP/1.0 request is answered and closed.
func TestTunnelExpectContinue(t *testing.T) {
	tg := startTLSGate(t, http.HandlerFunc(framingOrigin))
	tc, br := openTunnel(t, tg)
	host := fmt.Sprintf("origin.test:%d", tg.port)
	fmt.Fprintf(tc, "PUT /echo HTTP/1.1\r\nHost: %s\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n", host)
	tc.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100 ") {
		t.Fatalf("before the body: %q %v", line, err)
	}
	if blank, _ := br.ReadString('\n'); blank != "\r\n" {
		t.Fatalf("100 Continue has headers: %q", blank)
	}
	io.WriteString(tc, "hello")
	resp, body := readAnswer(t, br, "PUT")
	if resp.StatusCode != 200 || body != "got 5 bytes: hello" {
		t.Fatalf("after 100 Continue: %d %q", resp.StatusCode, body)
	}

	fmt.Fprintf(tc, "GET /old HTTP/1.0\r\nHost: %s\r\n\r\n", host)
	resp, body = readAnswer(t, br, "GET")
	if !resp.Close || body != "origin: GET /old" {
		t.Fatalf("HTTP/1.0: close=%v %q", resp.Close, body)
	}
}

// TestTunnelIdleAndSlowHeads: a tunnel idle past the idle timeout is closed, and so is one whose
// head does not arrive within the header timeout.
func TestTunnelIdleAndSlowHeads(t *testing.T) {
	tg := startTLSGateWith(t, http.HandlerFunc(framingOrigin), func(c *Config) {
		c.IdleTimeout = 300 * time.Millisecond
		c.ReadHeaderTimeout = 300 * time.Millisecond
	})
	host := fmt.Sprintf("origin.test:%d", tg.port)
	tc, br := openTunnel(t, tg)
	fmt.Fprintf(tc, "GET /a HTTP/1.1\r\nHost: %s\r\n\r\n", host)
	if resp, _ := readAnswer(t, br, "GET"); resp.StatusCode != 200 {
		t.Fatalf("first request: %d", resp.StatusCode)
	}
	start := time.Now()
	tc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err == nil || time.Since(start) > 4*time.Second {
		t.Fatalf("an idle tunnel stays open: %v after %v", err, time.Since(start))
	}

	tc, br = openTunnel(t, tg)
	fmt.Fprintf(tc, "GET /slow HTTP/1.1\r\nHost: %s\r\n", host) // the head never ends
	start = time.Now()
	tc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err == nil || time.Since(start) > 4*time.Second {
		t.Fatalf("a head that never ends keeps the tunnel: %v after %v", err, time.Since(start))
	}
}

// TestTunnelClientGoneWhileAsked: a request inside a decrypted tunnel waits for a human; its
// client closes the connection; the wait ends at once, the ticket is left, and the audit says the
// client went away.
func TestTunnelClientGoneWhileAsked(t *testing.T) {
	origin := &countingHandler{}
	tg, h := askTLSGate(t, origin)
	setPolicy(t, tg.gate, fmt.Sprintf(`version = 1
trusted = ["origin.test"]
[[rule]]
name = "deletes"
hosts = ["origin.test"]
methods = ["DELETE"]
verdict = "ask"
[settings]
hold = "30s"
[floor]
allow_cidrs = ["127.0.0.1/32"]
allow_ports = [%d]
[sources]
local = ["127.0.0.0/8"]
`, tg.port))
	tc, br := openTunnel(t, tg)
	host := fmt.Sprintf("origin.test:%d", tg.port)
	// One request first, so that the one held is not the connection's first.
	fmt.Fprintf(tc, "GET /first HTTP/1.1\r\nHost: %s\r\n\r\n", host)
	if resp, _ := readAnswer(t, br, "GET"); resp.StatusCode != 200 {
		t.Fatalf("first request: %d", resp.StatusCode)
	}
	fmt.Fprintf(tc, "DELETE /held HTTP/1.1\r\nHost: %s\r\n\r\n", host)
	testkit.WaitFor(t, 5*time.Second, "a ticket", func() bool { return len(h.Pending()) == 1 })
	tc.Close()
	rec := waitRecord(t, tg.audit, "the held request's record", func(m map[string]any) bool {
		return m["method"] == "DELETE" && m["code"] != nil
	})
	if rec["code"] != "E_PENDING" || !strings.Contains(fmt.Sprint(rec["reason"]), "the client went away") {
		t.Fatalf("record of the abandoned request: %v", rec)
	}
	if origin.n.Load() != 1 {
		t.Fatalf("the origin saw %d requests, want 1 (the GET)", origin.n.Load())
	}
}

// TestServeShutdown: when the gate stops, an idle client connection is closed at once, a request
// in progress gets its whole answer, and Serve returns once it has.
func TestServeShutdown(t *testing.T) {
	release, arrived := make(chan struct{}), make(chan struct{})
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(arrived)
			<-release
		}
		io.WriteString(w, "done "+r.URL.Path)
	}))
	defer origin.Close()
	port := origin.Listener.Addr().(*net.TCPAddr).Port
	aw, err := audit.Open(audit.Options{Dir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer aw.Close()
	g := New(Config{Audit: aw, Dialer: &egress.Dialer{}})
	setPolicy(t, g, fmt.Sprintf(gatePolicy, port))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { g.Serve(ctx, l); close(served) }()

	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(10 * time.Second))
		return c, bufio.NewReader(c)
	}
	get := func(path string) string {
		return fmt.Sprintf("GET http://origin.test:%d%s HTTP/1.1\r\nHost: origin.test:%d\r\n\r\n", port, path, port)
	}
	idle, idleR := dial()
	io.WriteString(idle, get("/a"))
	if resp, body := readAnswer(t, idleR, "GET"); resp.StatusCode != 200 || body != "done /a" {
		t.Fatalf("first request: %d %q", resp.StatusCode, body)
	}
	busy, busyR := dial()
	io.WriteString(busy, get("/slow"))
	select {
	case <-arrived:
	case <-time.After(5 * time.Second):
		t.Fatal("the slow request did not reach the origin")
	}

	cancel()
	start := time.Now()
	if _, err := idleR.ReadByte(); err == nil || time.Since(start) > 2*time.Second {
		t.Fatalf("the idle connection after the stop: %v after %v", err, time.Since(start))
	}
	select {
	case <-served:
		t.Fatal("Serve returned with a request in progress")
	default:
	}
	close(release)
	if resp, body := readAnswer(t, busyR, "GET"); resp.StatusCode != 200 || body != "done /slow" {
		t.Fatalf("the request in progress: %d %q", resp.StatusCode, body)
	}
	select {
	case <-served:
	case <-time.After(4 * time.Second):
		t.Fatal("Serve did not return after the last answer")
	}
}
