package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"golang.org/x/net/http2"

	"github.com/lockhttp/lockhttp/internal/gate"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// h2Policy decides the HTTP/2 tests' requests: reads of origin.test are free, POSTs under /api
// are refused, POSTs under /upload free and under /review asked, a DELETE asks; other.test is known to the floor but is not the tunnel's host;
// denied.test is refused as a whole.
const h2Policy = `version = 1
trusted = ["origin.test"]
deny = ["denied.test"]

[[rule]]
name = "no-api-posts"
hosts = ["origin.test"]
methods = ["POST"]
paths = ["/api/**"]
verdict = "deny"

[[rule]]
name = "uploads"
hosts = ["origin.test"]
methods = ["POST"]
paths = ["/upload/**"]
verdict = "free"

[[rule]]
name = "reviews"
hosts = ["origin.test"]
methods = ["POST"]
paths = ["/review/**"]
verdict = "ask"

[[rule]]
name = "ask-delete"
hosts = ["origin.test"]
methods = ["DELETE"]
verdict = "ask"

[floor]
allow_cidrs = ["127.0.0.1/32"]
allow_ports = [%[1]d]

[floor.hosts]
"origin.test" = "127.0.0.1"
"other.test" = "127.0.0.1"

[sources]
local = ["127.0.0.0/8"]

[settings]
hold = "30s"
`

type h2Env struct {
	*running
	origin *originRecorder
	port   int
	pool   *x509.CertPool
}

// startH2 runs the stack with an HTTPS origin for origin.test and other.test; with h2Origin the
// origin offers HTTP/2 too.
func startH2(t *testing.T, h2Origin bool, h http.Handler) *h2Env {
	t.Helper()
	pki := newTestPKI(t)
	rec := &originRecorder{}
	if h == nil {
		h = rec
	}
	s := httptest.NewUnstartedServer(h)
	s.TLS = &tls.Config{Certificates: []tls.Certificate{pki.leaf(t, []string{"origin.test", "other.test"}, time.Now().Add(24*time.Hour), false)}}
	s.EnableHTTP2 = h2Origin
	s.StartTLS()
	t.Cleanup(s.Close)
	port := s.Listener.Addr().(*net.TCPAddr).Port
	r := startStackWith(t, fmt.Sprintf(h2Policy, port), []string{"--roots", pki.rootPEM}, nil)
	data, err := os.ReadFile(r.up.CACert)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(data)
	return &h2Env{running: r, origin: rec, port: port, pool: pool}
}

func (e *h2Env) url(path string) string { return fmt.Sprintf("https://origin.test:%d%s", e.port, path) }

// conn opens a CONNECT to origin.test through the gate and completes TLS offering h2 only.
func (e *h2Env) conn(t *testing.T) *tls.Conn {
	t.Helper()
	c, err := net.Dial("tcp", e.up.Listen)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "CONNECT origin.test:%d HTTP/1.1\r\nHost: origin.test:%d\r\n\r\n", e.port, e.port)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: "CONNECT"})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	c.SetReadDeadline(time.Time{})
	tc := tls.Client(c, &tls.Config{ServerName: "origin.test", RootCAs: e.pool, NextProtos: []string{"h2"}})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN inside the tunnel: %q, want h2", p)
	}
	return tc
}

// forwarder listens on the loopback and carries each connection it accepts into a new tunnel
// to origin.test through the gate: the bytes are the client's, TLS included (tlsInside: the
// forwarder speaks TLS to the gate for a client that speaks cleartext HTTP/2 to it).
func (e *h2Env) forwarder(t *testing.T, tlsInside bool) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				g, err := net.Dial("tcp", e.up.Listen)
				if err != nil {
					return
				}
				defer g.Close()
				fmt.Fprintf(g, "CONNECT origin.test:%d HTTP/1.1\r\nHost: origin.test:%d\r\n\r\n", e.port, e.port)
				br := bufio.NewReader(g)
				if resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"}); err != nil || resp.StatusCode != 200 {
					return
				}
				var up net.Conn = g
				if tlsInside {
					tc := tls.Client(g, &tls.Config{ServerName: "origin.test", RootCAs: e.pool, NextProtos: []string{"h2"}})
					if tc.Handshake() != nil {
						return
					}
					up = tc
				}
				done := make(chan struct{}, 2)
				go func() { io.Copy(up, c); done <- struct{}{} }()
				go func() { io.Copy(c, up); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	return l.Addr().String()
}

// TestH2StreamsThroughTheStack: a Go HTTP/2 client connection inside one decrypted tunnel
// carries a free GET, a refused POST, a DELETE held for a human while a GET completes beside
// it and then approved with lox approve, and a stream naming another host, refused on its own;
// every stream has its own audit record with its stream id, and the tunnel is one CONNECT.
func TestH2StreamsThroughTheStack(t *testing.T) {
	e := startH2(t, false, nil)
	cc, err := (&http2.Transport{}).NewClientConn(e.conn(t))
	if err != nil {
		t.Fatal(err)
	}
	do := func(method, url, host, body string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		if host != "" {
			req.Host = host
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		resp, err := cc.RoundTrip(req.WithContext(ctx))
		if err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	if resp, body := do("GET", e.url("/docs"), "", ""); resp.StatusCode != 200 || body != "origin saw GET /docs (0 bytes)" {
		t.Fatalf("free GET: %d %q", resp.StatusCode, body)
	}
	if resp, body := do("POST", e.url("/api/items"), "", "x=1"); resp.StatusCode != 403 || resp.Header.Get(gate.HeaderRule) != "no-api-posts" || !strings.Contains(body, "Code:    E_RULE") {
		t.Fatalf("refused POST: %d %v %q", resp.StatusCode, resp.Header, body)
	}
	held := make(chan *http.Response, 1)
	go func() {
		req, _ := http.NewRequest("DELETE", e.url("/held"), nil)
		resp, err := cc.RoundTrip(req)
		if err != nil {
			t.Error(err)
			close(held)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		held <- resp
	}()
	ask := &askEnv{running: e.running, origin: e.origin, port: e.port}
	tk := ask.waitTicket(t, e.url("/held"))
	if resp, body := do("GET", e.url("/meanwhile"), "", ""); resp.StatusCode != 200 || !strings.Contains(body, "GET /meanwhile") {
		t.Fatalf("a GET beside the held DELETE: %d %q", resp.StatusCode, body)
	}
	if resp, body := do("GET", e.url("/elsewhere"), fmt.Sprintf("other.test:%d", e.port), ""); resp.StatusCode != 403 || resp.Header.Get(gate.HeaderRule) != "floor:tunnel-binding" {
		t.Fatalf("a stream to another host: %d %v %q", resp.StatusCode, resp.Header, body)
	}
	select {
	case r := <-held:
		t.Fatalf("the DELETE answered before the approval: %v", r)
	default:
	}
	if out, err := ask.lox(t, "approve", tk.ID); err != nil {
		t.Fatalf("lox approve: %v\n%s", err, out)
	}
	if r := <-held; r == nil || r.StatusCode != 200 {
		t.Fatalf("the approved DELETE: %v", r)
	}
	paths := map[string]bool{}
	for _, r := range e.origin.all() {
		paths[r.Method+" "+r.Path] = true
	}
	if !paths["DELETE /held"] || !paths["GET /meanwhile"] || paths["POST /api/items"] || paths["GET /elsewhere"] {
		t.Fatalf("the origin saw %v", paths)
	}
	var streams []float64
	testkit.WaitFor(t, 10*time.Second, "six stream records", func() bool {
		streams = streams[:0]
		for _, m := range e.auditRecords() {
			if m["event"] == "tunnel-request" {
				s, _ := m["stream"].(float64)
				streams = append(streams, s)
			}
		}
		return len(streams) == 5
	})
	sort.Float64s(streams)
	for i, s := range streams {
		if s == 0 || i > 0 && s == streams[i-1] {
			t.Fatalf("stream ids %v: each request needs its own", streams)
		}
	}
	cc.Close()
	testkit.WaitFor(t, 10*time.Second, "the tunnel's record", func() bool {
		n := 0
		for _, m := range e.auditRecords() {
			if m["event"] == "connect" && m["detail"] == "http/2" {
				n++
			}
		}
		return n == 1
	})
}

// TestH2Curl: curl --http2 through the gate: a free GET and a refused POST on HTTP/2, the
// refusal's body and headers intact.
func TestH2Curl(t *testing.T) {
	curl := requireTool(t, "curl")
	e := startH2(t, false, nil)
	run := func(args ...string) string {
		t.Helper()
		full := append([]string{"-sS", "--http2", "--cacert", e.up.CACert, "-x", e.up.Gate, "--max-time", "10", "-w", "\n%{http_version} %{http_code}\n", "-D", "-"}, args...)
		out, err := exec.Command(curl, full...).CombinedOutput()
		if err != nil {
			t.Fatalf("curl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := run(e.url("/docs")); !strings.HasSuffix(out, "\n2 200\n") || !strings.Contains(out, "origin saw GET /docs") {
		t.Fatalf("free GET:\n%s", out)
	}
	out := run("-d", "x=1", e.url("/api/items"))
	if !strings.HasSuffix(out, "\n2 403\n") || !strings.Contains(out, "x-lockhttp-code: E_RULE") || !strings.Contains(out, "Rule:    no-api-posts") {
		t.Fatalf("refused POST:\n%s", out)
	}
	// HTTP/2 has no reason phrase: the advice is in a header and in the body.
	if advice := policy.CodeRule.Advice(); !strings.Contains(out, "x-lockhttp-advice: "+advice+"\r\n") || !strings.Contains(out, "What to do: "+advice) {
		t.Fatalf("the refusal's advice:\n%s", out)
	}
}

// TestH2RefusedHost: a tunnel to a host the policy refuses as a whole answers curl --http2 and
// Go's client on HTTP/2 with the refusal (code, rule and advice in the headers and the body), a
// record of the stream with its id; nothing reaches the origin.
func TestH2RefusedHost(t *testing.T) {
	curl := requireTool(t, "curl")
	e := startH2(t, false, nil)
	u := fmt.Sprintf("https://denied.test:%d/x", e.port)
	advice := policy.CodeRule.Advice()
	out, err := exec.Command(curl, "-sS", "--http2", "--cacert", e.up.CACert, "-x", e.up.Gate, "--max-time", "10",
		"-w", "\n%{http_version} %{http_code}\n", "-D", "-", u).CombinedOutput()
	if err != nil {
		t.Fatalf("curl: %v\n%s", err, out)
	}
	for _, want := range []string{"x-lockhttp-code: E_RULE\r\n", "x-lockhttp-rule: deny\r\n", "x-lockhttp-advice: " + advice + "\r\n",
		"Code:    E_RULE", "What to do: " + advice} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("curl --http2: no %q in\n%s", want, out)
		}
	}
	if !strings.HasSuffix(string(out), "\n2 403\n") {
		t.Fatalf("curl --http2: not a 403 over HTTP/2:\n%s", out)
	}
	proxy, _ := url.Parse(e.up.Gate)
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: e.pool}, ForceAttemptHTTP2: true},
		Timeout: 10 * time.Second}
	resp, err := c.Get(u + "?go=1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != 403 || resp.Header.Get(gate.HeaderCode) != "E_RULE" || resp.Header.Get(gate.HeaderAdvice) != advice ||
		!strings.Contains(string(b), "What to do: "+advice) {
		t.Fatalf("Go's client: %s %d %v\n%s", resp.Proto, resp.StatusCode, resp.Header, b)
	}
	id := resp.Header.Get(gate.HeaderRequest)
	testkit.WaitFor(t, 10*time.Second, "the stream's record", func() bool {
		for _, m := range e.auditRecords() {
			if m["id"] == id {
				if m["event"] != "tunnel-request" || m["rule"] != "deny" || m["stream"] != float64(1) || m["status"] != float64(403) {
					t.Fatalf("the stream's record: %v", m)
				}
				return true
			}
		}
		return false
	})
	if n := len(e.origin.all()); n != 0 {
		t.Fatalf("the origin saw %d requests", n)
	}
}

// TestH2Load: h2load (nghttp2-client) through the gate (it speaks no proxy protocol: a
// forwarder opens the CONNECT for each of its connections): many streams over few connections,
// free ones all answered, refused ones all refused.
func TestH2Load(t *testing.T) {
	h2load := requireTool(t, "h2load")
	e := startH2(t, false, nil)
	fwd := e.forwarder(t, false)
	load := func(args ...string) string {
		t.Helper()
		full := append([]string{"-n", "200", "-c", "2", "-m", "10", "--connect-to", fwd}, args...)
		out, err := exec.Command(h2load, full...).CombinedOutput()
		if err != nil {
			t.Fatalf("h2load %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := load(e.url("/load")); !strings.Contains(out, "200 succeeded") || !strings.Contains(out, "status codes: 200 2xx") || !strings.Contains(out, "h2") {
		t.Fatalf("free GETs:\n%s", out)
	}
	data := filepath.Join(t.TempDir(), "body")
	os.WriteFile(data, []byte("x=1"), 0o644)
	if out := load("-d", data, e.url("/api/items")); !strings.Contains(out, "status codes: 0 2xx, 0 3xx, 200 4xx") {
		t.Fatalf("refused POSTs:\n%s", out)
	}
	for _, r := range e.origin.all() {
		if r.Path == "/api/items" {
			t.Fatal("a refused POST reached the origin")
		}
	}
}

// TestH2Nghttp: nghttp (nghttp2-client) through the gate (a forwarder opens the CONNECT; the
// TLS is nghttp's, to the gate's leaf). Three POSTs on one connection, their header blocks in
// CONTINUATION frames: the refused one and the free one are answered while the asked one is
// held, and the approval releases it; a stream whose Host field names another host is reset
// and recorded, and a TLS server name naming one refuses the tunnel before any stream.
func TestH2Nghttp(t *testing.T) {
	nghttp := requireTool(t, "nghttp")
	e := startH2(t, false, nil)
	fwd := e.forwarder(t, false)
	authority := fmt.Sprintf("origin.test:%d", e.port)
	data := filepath.Join(t.TempDir(), "body")
	os.WriteFile(data, []byte("x=1"), 0o644)
	cmd := exec.Command(nghttp, "-v", "-n", "-y", "--no-dep", "--continuation", "-d", data, "-H", ":authority: "+authority,
		"https://"+fwd+"/api/items", "https://"+fwd+"/upload/a", "https://"+fwd+"/review/b")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	streams := newNghttpLog()
	ended := make(chan struct{})
	go func() { streams.read(out); close(ended) }()
	ask := &askEnv{running: e.running, origin: e.origin, port: e.port}
	ask.waitTicket(t, e.url("/review/b"))
	testkit.WaitFor(t, 10*time.Second, "the refused and the free POST answered", func() bool {
		return streams.status("/api/items") != "" && streams.status("/upload/a") != ""
	})
	if s, c := streams.status("/api/items"), streams.header("/api/items", "x-lockhttp-code"); s != "403" || c != "E_RULE" {
		t.Fatalf("the refused POST: %s %s\n%s", s, c, streams)
	}
	if s := streams.status("/upload/a"); s != "200" {
		t.Fatalf("the free POST: %s\n%s", s, streams)
	}
	if s := streams.status("/review/b"); s != "" {
		t.Fatalf("the asked POST answered %s before the approval\n%s", s, streams)
	}
	tk := ask.waitTicket(t, e.url("/review/b"))
	if out, err := ask.lox(t, "approve", tk.ID); err != nil {
		t.Fatalf("lox approve: %v\n%s", err, out)
	}
	select {
	case <-ended:
	case <-time.After(20 * time.Second):
		t.Fatalf("nghttp did not end after the approval\n%s", streams)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("nghttp: %v\n%s", err, streams)
	}
	if s := streams.status("/review/b"); s != "200" {
		t.Fatalf("the approved POST: %s\n%s", s, streams)
	}
	if n := streams.connections(); n != 1 {
		t.Fatalf("nghttp used %d connections, want 1\n%s", n, streams)
	}
	// A Host field naming another host beside the tunnel's :authority: the HTTP/2 server
	// resets that stream itself (RFC 9113 8.3.1), and the gate records it from the frames.
	other, _ := exec.Command(nghttp, "-v", "-n", "-y", "--no-dep", "-H", ":authority: "+authority, "-H", fmt.Sprintf("host: other.test:%d", e.port),
		"https://"+fwd+"/elsewhere").CombinedOutput()
	o := newNghttpLog()
	o.read(strings.NewReader(string(other)))
	if s := o.status("/elsewhere"); s != "" || !strings.Contains(string(other), "recv RST_STREAM frame") {
		t.Fatalf("a stream with another Host: answered %q, want a reset\n%s", s, other)
	}
	testkit.WaitFor(t, 10*time.Second, "the reset stream's record", func() bool {
		for _, m := range e.auditRecords() {
			if m["rule"] == "framing:h2-stream" && m["stream"] == float64(1) && m["verdict"] == "DENY" {
				return true
			}
		}
		return false
	})
	// nghttp names its :authority in the TLS server name too: naming another host there is
	// refused at the handshake, before any stream.
	sni, _ := exec.Command(nghttp, "-v", "-n", "-y", "--no-dep", "-H", fmt.Sprintf(":authority: other.test:%d", e.port), "https://"+fwd+"/sni").CombinedOutput()
	if strings.Contains(string(sni), ":status:") {
		t.Fatalf("a tunnel whose TLS names another host answered a stream:\n%s", sni)
	}
	testkit.WaitFor(t, 10*time.Second, "the refused handshake's record", func() bool {
		for _, m := range e.auditRecords() {
			if m["rule"] == "floor:sni" {
				return true
			}
		}
		return false
	})
	for _, r := range e.origin.all() {
		if r.Path == "/api/items" || r.Path == "/elsewhere" || r.Path == "/sni" {
			t.Fatalf("the origin saw %s %s", r.Method, r.Path)
		}
	}
}

// nghttpLog reads what nghttp -v prints: the path each stream it opened asks for, and the
// header fields received on each stream.
type nghttpLog struct {
	mu    sync.Mutex
	lines []string
	conns int
	path  map[string]string            // stream id -> :path sent
	recv  map[string]map[string]string // stream id -> received field -> value
}

func newNghttpLog() *nghttpLog {
	return &nghttpLog{path: map[string]string{}, recv: map[string]map[string]string{}}
}

var (
	nghttpSend = regexp.MustCompile(`send HEADERS frame <.*stream_id=(\d+)>`)
	nghttpPath = regexp.MustCompile(`^\s+:path: (\S+)`)
	nghttpRecv = regexp.MustCompile(`recv \(stream_id=(\d+)\) ([^:\s][^:]*|:status): (.*)`)
)

// read takes lines until r ends.
func (l *nghttpLog) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	var opening string
	for sc.Scan() {
		line := sc.Text()
		l.mu.Lock()
		l.lines = append(l.lines, line)
		switch {
		case strings.HasSuffix(line, "] Connected"):
			l.conns++
		case nghttpSend.MatchString(line):
			opening = nghttpSend.FindStringSubmatch(line)[1]
		case opening != "" && nghttpPath.MatchString(line):
			l.path[opening] = nghttpPath.FindStringSubmatch(line)[1]
			opening = ""
		case nghttpRecv.MatchString(line):
			m := nghttpRecv.FindStringSubmatch(line)
			if l.recv[m[1]] == nil {
				l.recv[m[1]] = map[string]string{}
			}
			l.recv[m[1]][m[2]] = m[3]
		}
		l.mu.Unlock()
	}
}

// header is the value of field received on the stream that asked for path; "" if none yet.
func (l *nghttpLog) header(path, field string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, p := range l.path {
		if p == path {
			return l.recv[id][field]
		}
	}
	return ""
}

func (l *nghttpLog) status(path string) string { return l.header(path, ":status") }

func (l *nghttpLog) connections() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.conns
}

func (l *nghttpLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// h2specKnown are the h2spec cases the gate does not pass, each with why (docs/threat-model.md,
// "HTTP/2 conformance", says the same).
var h2specKnown = map[string]string{
	"http2/6.5.3: Sends multiple values of SETTINGS_INITIAL_WINDOW_SIZE":                                            "x/net/http2 closes a connection whose SETTINGS frame repeats a setting (GOAWAY PROTOCOL_ERROR), on purpose: RFC 9113 allows the repetition, and the server refuses it as suspicious",
	"http2/8.1.2.2: Sends a HEADERS frame that contains the connection-specific header field":                       "x/net/http2 answers such a request 400 instead of resetting the stream: it is refused all the same, and never reaches the gate's handler or the origin",
	"http2/8.1.2.2: Sends a HEADERS frame that contains the TE header field with any value other than \"trailers\"": "the same: 400, refused before the gate's handler",
}

// TestH2Spec runs the h2spec conformance suite (github.com/summerwind/h2spec, a tool of this
// module) against the gate's HTTP/2 server inside a decrypted tunnel: h2spec speaks cleartext
// HTTP/2 to a forwarder, which carries it inside TLS, inside a CONNECT, to the gate. Its
// requests name the forwarder's address in :authority, so the gate answers each with a refusal
// (floor:tunnel-binding): a HEADERS answer, which is what h2spec's cases look for. H2SPEC_ARGS
// adds arguments ("-v http2/6.5.3" looks at one section).
func TestH2Spec(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "h2spec")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/summerwind/h2spec/cmd/h2spec").CombinedOutput(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("building h2spec: %v\n%s", err, out)
		}
		t.Skipf("h2spec does not build here: %v\n%s", err, out)
	}
	e := startH2(t, false, nil)
	fwd := e.forwarder(t, true)
	host, port, _ := net.SplitHostPort(fwd)
	report := filepath.Join(t.TempDir(), "h2spec.xml")
	out, _ := exec.Command(bin, append([]string{"-h", host, "-p", port, "-o", "5", "-j", report}, strings.Fields(os.Getenv("H2SPEC_ARGS"))...)...).CombinedOutput()
	data, err := os.ReadFile(report)
	if err != nil {
		t.Fatalf("no h2spec report: %v\n%s", err, out)
	}
	var suites struct {
		Suites []struct {
			Name  string `xml:"name,attr"`
			Cases []struct {
				Package string    `xml:"package,attr"`
				Class   string    `xml:"classname,attr"`
				Failure *struct{} `xml:"failure"`
				Error   *struct{} `xml:"error"`
				Skipped *struct{} `xml:"skipped"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(data, &suites); err != nil {
		t.Fatal(err)
	}
	var passed, skipped int
	var failed []string
	for _, s := range suites.Suites {
		for _, c := range s.Cases {
			name := c.Package + ": " + c.Class
			switch {
			case c.Skipped != nil:
				skipped++
			case c.Failure != nil || c.Error != nil:
				if _, ok := h2specKnown[name]; !ok {
					failed = append(failed, name)
				}
			default:
				passed++
			}
		}
	}
	t.Logf("h2spec: %d passed, %d skipped, %d known failures", passed, skipped, len(h2specKnown))
	if passed < 100 && os.Getenv("H2SPEC_ARGS") == "" || len(failed) > 0 {
		t.Fatalf("h2spec: %d passed; failed, and not known: %s\n%s", passed, strings.Join(failed, "\n"), out)
	}
}

// wsEcho is a WebSocket origin (gorilla/websocket) that echoes text messages.
type wsEcho struct {
	mu  sync.Mutex
	got []string
}

func (o *wsEcho) serve(w http.ResponseWriter, r *http.Request) {
	c, err := (&websocket.Upgrader{EnableCompression: true}).Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer c.Close()
	for {
		mt, p, err := c.ReadMessage()
		if err != nil {
			return
		}
		o.mu.Lock()
		o.got = append(o.got, string(p))
		o.mu.Unlock()
		c.WriteMessage(mt, append([]byte("echo:"), p...))
	}
}

// TestWebSocketPython: Python's websockets library (Debian's python3-websockets), inside a
// decrypted tunnel: a clean message is echoed; one with a credential is never delivered and
// the gate closes the socket with 1008, E_SECRET_EGRESS in the reason.
func TestWebSocketPython(t *testing.T) {
	py := python(t, "websockets")
	echo := &wsEcho{}
	e := startH2(t, false, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { echo.serve(w, r) }))
	pythonWebSocket(t, py, e.up.Listen, e.port, e.up.CACert, "hello")
	echo.mu.Lock()
	defer echo.mu.Unlock()
	if len(echo.got) != 1 || echo.got[0] != "hello" {
		t.Fatalf("the origin got %q", echo.got)
	}
}

// TestWebSocketCleartextTunnel: ws:// through a CONNECT, as gorilla/websocket (and browsers)
// send it through a proxy: the gate reads the plain HTTP inside the tunnel, decides the upgrade
// as an http:// URL of the tunnel's host and checks every message; a credential closes the
// socket (1008, E_SECRET_EGRESS) before it reaches the origin. Python's websockets over a
// CONNECT it opens itself does the same.
func TestWebSocketCleartextTunnel(t *testing.T) {
	py := python(t, "websockets")
	echo := &wsEcho{}
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { echo.serve(w, r) }))
	t.Cleanup(o.Close)
	port := o.Listener.Addr().(*net.TCPAddr).Port
	e := &h2Env{running: startStackWith(t, fmt.Sprintf(h2Policy, port), nil, nil), port: port}
	proxy, _ := url.Parse(e.up.Gate)
	d := websocket.Dialer{Proxy: http.ProxyURL(proxy), HandshakeTimeout: 10 * time.Second}
	c, resp, err := d.Dial(fmt.Sprintf("ws://origin.test:%d/ws", port), nil)
	if err != nil {
		t.Fatalf("gorilla ws:// through the gate: %v %v", resp, err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	c.WriteMessage(websocket.TextMessage, []byte("hello"))
	if _, p, err := c.ReadMessage(); err != nil || string(p) != "echo:hello" {
		t.Fatalf("a clean message: %q %v", p, err)
	}
	token := "ghp_" + strings.Repeat("Zz9Y", 9)
	c.WriteMessage(websocket.TextMessage, []byte(`{"note": "`+token+`"}`))
	_, _, err = c.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.ClosePolicyViolation || !strings.Contains(ce.Text, "E_SECRET_EGRESS") {
		t.Fatalf("after a message with a credential: %v", err)
	}
	pythonWebSocket(t, py, e.up.Listen, port, "", "from python")
	echo.mu.Lock()
	got := append([]string(nil), echo.got...)
	echo.mu.Unlock()
	if len(got) != 2 || got[0] != "hello" || got[1] != "from python" {
		t.Fatalf("the origin got %q", got)
	}
	want := fmt.Sprintf("http://origin.test:%d/ws", port)
	testkit.WaitFor(t, 10*time.Second, "two cleartext tunnels, their upgrades and sessions", func() bool {
		var tunnels, upgrades, sessions int
		for _, m := range e.auditRecords() {
			switch {
			case m["event"] == "connect" && m["detail"] == "cleartext":
				tunnels++
			case m["event"] == "tunnel-request" && m["url"] == want && m["verdict"] == "FREE":
				upgrades++
			case m["event"] == "websocket" && m["code"] == "E_SECRET_EGRESS":
				sessions++
			}
			if strings.Contains(fmt.Sprint(m), token[4:]) {
				t.Fatalf("a record holds the credential: %v", m)
			}
		}
		return tunnels == 2 && upgrades == 2 && sessions == 2
	})
}

// pyWebSocket opens a CONNECT to origin.test through the gate, then a WebSocket inside it with
// Python's websockets (wss:// with the CA file given, ws:// with "-"), sends a clean message and
// one with a credential, and prints what came back as JSON.
const pyWebSocket = `
import asyncio, json, socket, ssl, sys
import websockets

async def main(gate, port, ca, first, token):
    host, gport = gate.rsplit(":", 1)
    s = socket.create_connection((host, int(gport)))
    s.sendall(("CONNECT origin.test:%s HTTP/1.1\r\nHost: origin.test:%s\r\n\r\n" % (port, port)).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(1)
    assert head.startswith(b"HTTP/1.1 200"), head
    scheme, tls = "ws", {}
    if ca != "-":
        scheme, tls = "wss", {"ssl": ssl.create_default_context(cafile=ca), "server_hostname": "origin.test"}
    out = {}
    async with websockets.connect("%s://origin.test:%s/ws" % (scheme, port), sock=s, **tls) as ws:
        await ws.send(first)
        out["echo"] = await ws.recv()
        await ws.send(json.dumps({"note": token}))
        try:
            out["after"] = await ws.recv()
        except websockets.exceptions.ConnectionClosed as e:
            out["code"], out["reason"] = e.rcvd.code, e.rcvd.reason
    print(json.dumps(out))

asyncio.run(main(*sys.argv[1:]))
`

// pythonWebSocket runs pyWebSocket (ca "": ws://) and checks that the clean message was echoed
// and the one with a credential closed the socket with 1008 and E_SECRET_EGRESS.
func pythonWebSocket(t *testing.T, py, gate string, port int, ca, first string) {
	t.Helper()
	if ca == "" {
		ca = "-"
	}
	token := "ghp_" + strings.Repeat("Zz9Y", 9)
	out, err := exec.Command(py, "-c", pyWebSocket, gate, fmt.Sprint(port), ca, first, token).CombinedOutput()
	if err != nil {
		t.Fatalf("python websockets: %v\n%s", err, out)
	}
	if s := string(out); !strings.Contains(s, `"echo": "echo:`+first+`"`) || !strings.Contains(s, `"code": 1008`) || !strings.Contains(s, "E_SECRET_EGRESS") || strings.Contains(s, `"after"`) {
		t.Fatalf("python websockets: %s", s)
	}
}

// TestH2PythonHttpx: Python's httpx with HTTP/2 on (Debian's python3-httpx and python3-h2)
// through the gate: a free GET and a refused POST, both over HTTP/2.
func TestH2PythonHttpx(t *testing.T) {
	py := python(t, "httpx", "h2")
	e := startH2(t, false, nil)
	script := `
import sys, httpx
gate, ca, free, refused = sys.argv[1:]
try:
    c = httpx.Client(http2=True, proxy=gate, verify=ca, timeout=10)
except TypeError:  # httpx before 0.26 names it proxies
    c = httpx.Client(http2=True, proxies=gate, verify=ca, timeout=10)
with c:
    r = c.get(free)
    print(r.http_version, r.status_code, r.text)
    r = c.post(refused, content=b"x=1")
    print(r.http_version, r.status_code, r.headers.get("x-lockhttp-code"), r.headers.get("x-lockhttp-rule"))
`
	out, err := exec.Command(py, "-c", script, e.up.Gate, e.up.CACert, e.url("/docs"), e.url("/api/items")).CombinedOutput()
	if err != nil {
		t.Fatalf("httpx: %v\n%s", err, out)
	}
	s := string(out)
	if !strings.Contains(s, "HTTP/2 200 origin saw GET /docs") || !strings.Contains(s, "HTTP/2 403 E_RULE no-api-posts") {
		t.Fatalf("httpx over HTTP/2:\n%s", s)
	}
}
