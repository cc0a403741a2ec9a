package e2e

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/gate"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// agreePolicy is the agreement corpus's policy; %[1]d is the plain origin's port, %[2]d the TLS
// origin's.
const agreePolicy = `version = 1
trusted = ["docs.test", "origin.test"]
deny = ["denied.test"]

[[rule]]
name = "uploads"
hosts = ["origin.test"]
methods = ["POST"]
paths = ["/upload/**"]
verdict = "free"

[[rule]]
name = "ask-delete"
hosts = ["origin.test"]
methods = ["DELETE"]
verdict = "ask"

[[rule]]
name = "no-admin"
hosts = ["origin.test", "docs.test"]
paths = ["/admin/**"]
verdict = "deny"

[[rule]]
name = "no-put"
hosts = ["origin.test"]
methods = ["PUT"]
verdict = "deny"

[[rule]]
name = "api"
hosts = ["api.test"]
methods = ["GET", "POST"]
paths = ["/v1/**"]
verdict = "free"

[[secret]]
name = "acme"
pattern = "acme_[A-Za-z0-9]{24}"
hosts = ["api.test"]

[floor]
allow_cidrs = ["127.0.0.1/32"]
allow_ports = [80, 443, %[1]d, %[2]d]

[floor.hosts]
"origin.test" = "127.0.0.1"
"docs.test" = "127.0.0.1"
"api.test" = "127.0.0.1"
"other.test" = "127.0.0.1"
"denied.test" = "127.0.0.1"

[sources]
local = ["127.0.0.0/8"]

[settings]
hold = "1s"

# Never reached by the corpus: the gate counts every request that goes out or asks, explain
# counts each from zero, and both decide alike.
[[budget]]
name = "generous"
requests_per_minute = 1000000
bytes_up_per_hour = "1GiB"
new_hosts_per_hour = 100
`

// Credential-shaped values, built from parts.
var (
	agreeGH   = "ghp_" + strings.Repeat("k7Q2", 9)
	agreeAcme = "acme_" + strings.Repeat("Zx9", 8)
)

// corpusRequest is one request of the agreement corpus: the bytes the gate receives (inside
// its tunnel, for a tunnel request) and the same request as lockhttp explain reads it.
type corpusRequest struct {
	tunnel  string // "host:port" of the CONNECT, or "" for a plain request
	method  string // as sent, for reading the answer (HEAD has no body)
	wire    []byte // what goes to the gate (inside the tunnel for a tunnel request)
	explain []byte // the raw request for lockhttp explain
}

// genCorpus makes n requests from seed: methods in any case, hop-by-hop and Connection-named
// headers, Proxy-Authorization, upgrades, override headers and parameters, schemes, path
// encodings and path parameters, bodies with and without secrets, plain and inside tunnels.
func genCorpus(seed uint64, n, port, tlsPort int) []corpusRequest {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	chance := func(pct int) bool { return rng.IntN(100) < pct }
	methods := []string{"GET", "GET", "HEAD", "POST", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"}
	paths := []string{"/", "/docs/a", "/upload/x", "/upload/../admin/x", "/admin/users", "/admin;x=1/users",
		"/public/..;/admin", "/Admin/users", "/%61dmin/x", "/upload/%2e%2e/admin/y", "/upload/a%2Fb", "/v1/items",
		"/v1/../admin", "/dns-query", "/up%6Coad/z", "/upload;v=1/x", "//admin/x", "/upload/.%2e/admin"}
	queries := []string{"", "", "", "?q=1", "?t=" + agreeGH, "?_method=DELETE", "?_method=put", "?k=" + agreeAcme, "?a=%00b"}
	out := make([]corpusRequest, 0, n)
	for len(out) < n {
		var c corpusRequest
		m := pick(methods...)
		switch rng.IntN(10) {
		case 0:
			m = strings.ToLower(m)
		case 1:
			m = m[:1] + strings.ToLower(m[1:])
		}
		c.method = m
		host := pick("origin.test", "origin.test", "docs.test", "api.test", "other.test", "denied.test")
		inTunnel := chance(40) && host != "denied.test"
		path, query := pick(paths...), pick(queries...)
		var h []string
		if inTunnel {
			authority := fmt.Sprintf("%s:%d", host, tlsPort)
			c.tunnel = authority
			hostHeader := authority
			if chance(4) {
				hostHeader = fmt.Sprintf("other.test:%d", tlsPort)
			}
			h = append(h, "Host: "+hostHeader)
		} else {
			h = append(h, fmt.Sprintf("Host: %s:%d", host, port))
		}
		if chance(15) {
			h = append(h, "Proxy-Authorization: Basic "+base64.StdEncoding.EncodeToString([]byte("agent-7:"+agreeGH)))
		}
		if chance(15) {
			h = append(h, "Connection: keep-alive, X-Tok", "X-Tok: token "+agreeGH)
		}
		if chance(8) {
			h = append(h, "X-Tok: token "+agreeGH)
		}
		if chance(8) {
			h = append(h, "Keep-Alive: timeout=5", "Te: trailers")
		}
		if chance(6) {
			h = append(h, "Connection: Upgrade, HTTP2-Settings", "Upgrade: h2c", "HTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA")
		} else if chance(4) && !inTunnel {
			h = append(h, "Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==")
		}
		if chance(8) {
			h = append(h, pick("X-HTTP-Method-Override: ", "X-HTTP-Method: ", "X-Method-Override: ")+pick("DELETE", "PUT", "GET", "delete"))
		}
		if chance(5) {
			h = append(h, "Accept: application/dns-message")
		}
		var body string
		switch rng.IntN(6) {
		case 1:
			body = "a=1&b=2"
			h = append(h, "Content-Type: application/x-www-form-urlencoded")
		case 2:
			body = `{"note":"` + agreeGH + `"}`
			h = append(h, "Content-Type: application/json")
		case 3:
			body = "a=1&_method=" + pick("PUT", "DELETE", "get")
			h = append(h, "Content-Type: application/x-www-form-urlencoded")
		case 4:
			body = "key=" + agreeAcme
			h = append(h, "Content-Type: application/x-www-form-urlencoded")
		}
		if body != "" {
			h = append(h, "Content-Length: "+strconv.Itoa(len(body)))
		}
		headers := strings.Join(h, "\r\n") + "\r\n\r\n" + body
		if inTunnel {
			c.wire = []byte(m + " " + path + query + " HTTP/1.1\r\n" + headers)
			// As the gate receives it: the CONNECT, then the request inside the tunnel.
			c.explain = append([]byte(fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", c.tunnel, c.tunnel)), c.wire...)
		} else {
			target := fmt.Sprintf("http://%s:%d%s%s", host, port, path, query)
			// (An https:// URL in a plain proxy request, which the gate refuses, is not in the
			// corpus: lockhttp explain reads an https:// request line as inside a tunnel.)
			if rng.IntN(40) == 0 {
				target = fmt.Sprintf("ftp://%s:%d%s", host, port, path)
			}
			c.wire = []byte(m + " " + target + " HTTP/1.1\r\n" + headers)
			c.explain = c.wire
		}
		out = append(out, c)
	}
	return out
}

// The two requests on which the gate and lockhttp explain disagreed before the decision was
// one function: a token in Proxy-Authorization, and one in a header that Connection names.
func fixedCorpus(port int) []corpusRequest {
	mk := func(s string) corpusRequest {
		return corpusRequest{method: "GET", wire: []byte(s), explain: []byte(s)}
	}
	return []corpusRequest{
		mk(fmt.Sprintf("GET http://docs.test:%d/a HTTP/1.1\r\nHost: docs.test:%d\r\nProxy-Authorization: Basic %s\r\n\r\n",
			port, port, base64.StdEncoding.EncodeToString([]byte("agent:"+agreeGH)))),
		mk(fmt.Sprintf("GET http://docs.test:%d/a HTTP/1.1\r\nHost: docs.test:%d\r\nConnection: X-Tok\r\nX-Tok: token %s\r\n\r\n",
			port, port, agreeGH)),
	}
}

// TestGateAndExplainAgree sends a generated corpus through the real gate binary and through
// lockhttp explain --batch with the approved policy of the same stack: verdict, code and rule
// must be identical for every request (the code of an ASK is the hub's outcome at the gate,
// E_NO_CONSOLE here, and none in explain). LOCKHTTP_AGREE_N and LOCKHTTP_AGREE_SEED run
// another size or seed.
func TestGateAndExplainAgree(t *testing.T) {
	n, seed := 10000, uint64(20261201)
	if testing.Short() {
		n = 1000
	}
	if v, err := strconv.Atoi(os.Getenv("LOCKHTTP_AGREE_N")); err == nil && v > 0 {
		n = v
	}
	if v, err := strconv.ParseUint(os.Getenv("LOCKHTTP_AGREE_SEED"), 10, 64); err == nil {
		seed = v
	}
	pki := newTestPKI(t)
	rec := &originRecorder{}
	plain := httptest.NewServer(rec)
	t.Cleanup(plain.Close)
	port := plain.Listener.Addr().(*net.TCPAddr).Port
	_, tlsPort := tlsOrigin(t, rec, pki.leaf(t, []string{"origin.test", "docs.test", "api.test", "other.test"}, time.Now().Add(24*time.Hour), false))
	r := startStackWith(t, fmt.Sprintf(agreePolicy, port, tlsPort), []string{"--roots", pki.rootPEM}, nil)

	// A second gate of the same stack (its console and signer), without a hub: every ASK is
	// then answered at once (E_NO_CONSOLE) instead of opening a ticket.
	g := startBareGate(t, r, pki.rootPEM)
	caPEM, err := os.ReadFile(r.up.CACert)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)

	corpus := append(fixedCorpus(port), genCorpus(seed, n, port, tlsPort)...)
	ids := sendCorpus(t, g.addr, pool, corpus)

	// lockhttp explain, every request in one run.
	var batch bytes.Buffer
	for _, c := range corpus {
		line, _ := json.Marshal(map[string][]byte{"request": c.explain})
		batch.Write(line)
		batch.WriteByte('\n')
	}
	cmd := exec.Command(filepath.Join(binDir, "lockhttp"), "explain", "--state", r.state, "--batch", "-")
	cmd.Stdin = &batch
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("lockhttp explain --batch: %v\n%s", err, stderr.String())
	}
	var explained []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("explain line %q: %v", sc.Text(), err)
		}
		explained = append(explained, m)
	}
	if len(explained) != len(corpus) {
		t.Fatalf("explain answered %d lines for %d requests", len(explained), len(corpus))
	}

	records := g.records(t, ids)
	mismatches, counts := 0, map[string]int{}
	for i, c := range corpus {
		gr, ex := records[ids[i]], explained[i]
		if ids[i] == "" || gr == nil {
			mismatches++
			if mismatches <= 20 {
				t.Errorf("request %d: no audit record at the gate (id %q)\n%q", i, ids[i], c.wire)
			}
			continue
		}
		gv, gc, gru := str(gr["verdict"]), str(gr["code"]), str(gr["rule"])
		ev, ec, eru := str(ex["verdict"]), str(ex["code"]), str(ex["rule"])
		counts[gv+" "+gru]++
		same := gv == ev && gru == eru && (gv == "ASK" || gc == ec)
		if gv == "ASK" && gc != "E_NO_CONSOLE" {
			same = false
		}
		if !same {
			mismatches++
			if mismatches <= 20 {
				t.Errorf("request %d disagrees: gate %s %s %s (%s), explain %s %s %s (%s)\n%q",
					i, gv, gc, gru, str(gr["reason"]), ev, ec, eru, str(ex["reason"]), c.explain)
			}
		}
	}
	if mismatches > 0 {
		t.Errorf("%d of %d requests disagree", mismatches, len(corpus))
	}
	// The two requests that once disagreed go out, without the token.
	for i := range fixedCorpus(port) {
		if v := str(records[ids[i]]["verdict"]); v != "FREE" {
			t.Errorf("fixed request %d: %s at the gate, want FREE", i, v)
		}
	}
	for _, got := range rec.all() {
		for k, vs := range got.Header {
			for _, v := range vs {
				if strings.Contains(v, agreeGH) && k != "X-Tok" {
					t.Errorf("the origin received the token in %s", k)
				}
			}
		}
		if got.Header.Get("Proxy-Authorization") != "" {
			t.Errorf("Proxy-Authorization reached the origin")
		}
	}
	t.Logf("%d requests, seed %d; decisions at the gate: %v", len(corpus), seed, counts)
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// bareGate is a gate process started by a test beside a lox stack.
type bareGate struct {
	addr  string
	audit string
}

// startBareGate starts a gate on the stack's console and signer; extra flags come last, so that
// one given twice (-signer) takes the extra's value.
func startBareGate(t *testing.T, r *running, roots string, extra ...string) *bareGate {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	g := &bareGate{addr: addr, audit: t.TempDir()}
	args := []string{"-listen", addr, "-console", r.up.ConsoleSocket, "-audit", g.audit, "-signer", r.up.SignerSocket,
		"-log-level", "warn", "-poll", "200ms",
		// Every refusal with a record of its own: the test compares each request's decision,
		// which a summary of refusals (past 20 a second per container) lists only by id.
		"-audit-summarize-after", "1000000"}
	if roots != "" {
		args = append(args, "-roots", roots)
	}
	args = append(args, extra...)
	if os.Geteuid() == 0 {
		args = append(args, "-allow-root")
	}
	cmd := exec.Command(filepath.Join(binDir, "gate"), args...)
	log := &testkit.Buffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	// Ready once it answers its own name with a policy.
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(mustURL(t, "http://"+addr))}, Timeout: 2 * time.Second}
	testkit.WaitFor(t, 20*time.Second, "the bare gate answering with a policy", func() bool {
		select {
		case <-done:
			t.Fatalf("the gate exited:\n%s", log)
		default:
		}
		resp, err := client.Get("http://lockhttp.internal/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return g
}

// records reads the gate's audit until every id in ids has its record.
func (g *bareGate) records(t *testing.T, ids []string) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	deadline := time.Now().Add(30 * time.Second)
	for {
		files, _ := filepath.Glob(filepath.Join(g.audit, "*.jsonl"))
		for _, f := range files {
			data, _ := os.ReadFile(f)
			for _, line := range bytes.Split(data, []byte("\n")) {
				var m map[string]any
				if json.Unmarshal(line, &m) == nil {
					out[str(m["id"])] = m
				}
			}
		}
		missing := 0
		for _, id := range ids {
			if id != "" && out[id] == nil {
				missing++
			}
		}
		if missing == 0 || time.Now().After(deadline) {
			return out
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// sendCorpus sends every request through the gate at addr, on keep-alive connections (a CONNECT
// tunnel per host for tunnel requests), four at a time, and returns each answer's
// X-LockHTTP-Request.
func sendCorpus(t *testing.T, addr string, pool *x509.CertPool, corpus []corpusRequest) []string {
	t.Helper()
	ids := make([]string, len(corpus))
	const workers = 4
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			s := &sender{addr: addr, pool: pool, conns: map[string]*senderConn{}}
			defer s.close()
			for i := w; i < len(corpus); i += workers {
				id, err := s.send(&corpus[i])
				if err != nil {
					errs <- fmt.Errorf("request %d %q: %w", i, corpus[i].wire, err)
					return
				}
				ids[i] = id
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return ids
}

type sender struct {
	addr  string
	pool  *x509.CertPool
	conns map[string]*senderConn // by tunnel authority, "" for plain
}

type senderConn struct {
	c  net.Conn
	br *bufio.Reader
}

func (s *sender) close() {
	for _, c := range s.conns {
		c.c.Close()
	}
}

func (s *sender) conn(tunnel string) (*senderConn, error) {
	if c := s.conns[tunnel]; c != nil {
		return c, nil
	}
	c, err := net.DialTimeout("tcp", s.addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	sc := &senderConn{c: c, br: bufio.NewReader(c)}
	if tunnel != "" {
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", tunnel, tunnel)
		resp, err := http.ReadResponse(sc.br, &http.Request{Method: http.MethodConnect})
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("CONNECT %s: %w", tunnel, err)
		}
		if resp.StatusCode != 200 {
			c.Close()
			return nil, fmt.Errorf("CONNECT %s: %s", tunnel, resp.Status)
		}
		host, _, _ := net.SplitHostPort(tunnel)
		tc := tls.Client(&bufferedConn{Conn: c, r: sc.br}, &tls.Config{ServerName: host, RootCAs: s.pool, NextProtos: []string{"http/1.1"}})
		if err := tc.Handshake(); err != nil {
			c.Close()
			return nil, fmt.Errorf("TLS in the tunnel to %s: %w", tunnel, err)
		}
		sc = &senderConn{c: tc, br: bufio.NewReader(tc)}
	}
	s.conns[tunnel] = sc
	return sc, nil
}

// send sends one request and reads its answer; a connection the gate closes is opened again
// for the next request.
func (s *sender) send(c *corpusRequest) (string, error) {
	for attempt := 0; ; attempt++ {
		sc, err := s.conn(c.tunnel)
		if err != nil {
			return "", err
		}
		sc.c.SetDeadline(time.Now().Add(30 * time.Second))
		_, werr := sc.c.Write(c.wire)
		var resp *http.Response
		if werr == nil {
			resp, err = http.ReadResponse(sc.br, &http.Request{Method: strings.ToUpper(c.method)})
		}
		if werr != nil || err != nil {
			sc.c.Close()
			delete(s.conns, c.tunnel)
			if attempt == 0 {
				continue // a kept-alive connection the gate had closed
			}
			if werr != nil {
				return "", werr
			}
			return "", err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.Close || resp.StatusCode == http.StatusSwitchingProtocols {
			sc.c.Close()
			delete(s.conns, c.tunnel)
		}
		return resp.Header.Get(gate.HeaderRequest), nil
	}
}

// bufferedConn reads what a bufio.Reader already holds before the connection.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
