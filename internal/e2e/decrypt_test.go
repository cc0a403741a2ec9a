package e2e

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cgi"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/floor"
	"github.com/lockhttp/lockhttp/internal/gate"
	"github.com/lockhttp/lockhttp/internal/stack"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

const decryptPolicy = `version = 1
trusted = ["origin.test", "git.test", "cold.test", "bad.test"]
splice = ["spliced.test"]

[[rule]]
name = "no-api-posts"
hosts = ["origin.test"]
methods = ["POST"]
paths = ["/api/**"]
verdict = "deny"

[[rule]]
name = "git-fetch"
hosts = ["git.test"]
methods = ["POST"]
paths = ["/**/git-upload-pack"]
verdict = "free"

[[rule]]
name = "git-push"
hosts = ["git.test"]
methods = ["POST"]
paths = ["/**/git-receive-pack"]
verdict = "deny"

[[rule]]
name = "spliced-ok"
hosts = ["spliced.test"]
methods = ["CONNECT"]
verdict = "free"

[floor]
allow_cidrs = ["127.0.0.1/32"]
allow_ports = [%[1]s]

[floor.hosts]
"origin.test" = "127.0.0.1"
"git.test" = "127.0.0.1"
"spliced.test" = "127.0.0.1"
"cold.test" = "127.0.0.1"
"other.test" = "127.0.0.1"
"bad.test" = "127.0.0.1"

[sources]
local = ["127.0.0.0/8"]

[settings]
hold = "1s"
`

type decryptEnv struct {
	*running
	pki    *testPKI
	origin *originRecorder
	port   int
	caPool *x509.CertPool
}

func startDecrypt(t *testing.T, extraPorts ...int) *decryptEnv {
	t.Helper()
	return startDecryptWithPKI(t, newTestPKI(t), extraPorts...)
}

func (e *decryptEnv) client() *http.Client {
	u, _ := url.Parse(e.up.Gate)
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u), TLSClientConfig: &tls.Config{RootCAs: e.caPool}}, Timeout: 15 * time.Second}
}

func (e *decryptEnv) url(host, path string) string {
	return fmt.Sprintf("https://%s:%d%s", host, e.port, path)
}

func TestDecryptDecidesEachRequest(t *testing.T) {
	e := startDecrypt(t)
	curl := requireTool(t, "curl")
	run := func(args ...string) (int, string, string) {
		t.Helper()
		dir := t.TempDir()
		full := append([]string{"-sS", "--cacert", e.up.CACert, "-x", e.up.Gate, "-D", filepath.Join(dir, "h"), "-o", filepath.Join(dir, "b"), "--max-time", "10"}, args...)
		out, err := exec.Command(curl, full...).CombinedOutput()
		if err != nil {
			t.Fatalf("curl %v: %v\n%s", args, err, out)
		}
		raw, _ := os.ReadFile(filepath.Join(dir, "h"))
		body, _ := os.ReadFile(filepath.Join(dir, "b"))
		blocks := strings.Split(strings.TrimSpace(string(raw)), "\r\n\r\n")
		// curl speaks HTTP/2 inside the tunnel, and writes its status line "HTTP/2 200".
		last := strings.Replace(blocks[len(blocks)-1], "HTTP/2 ", "HTTP/2.0 ", 1)
		resp, err := http.ReadResponse(bufioReader(last+"\r\n\r\n"), nil)
		if err != nil {
			t.Fatalf("headers %q: %v", raw, err)
		}
		return resp.StatusCode, resp.Header.Get(gate.HeaderCode) + " " + resp.Header.Get(gate.HeaderRule), string(body)
	}
	t.Run("curl GET is free", func(t *testing.T) {
		status, code, body := run(e.url("origin.test", "/docs"))
		if status != 200 || body != "origin saw GET /docs (0 bytes)" {
			t.Fatalf("%d %s %q", status, code, body)
		}
	})
	t.Run("curl POST refused by the rule", func(t *testing.T) {
		before := e.origin.count()
		status, code, body := run("-d", "secret=1", e.url("origin.test", "/api/items"))
		if status != 403 || code != "E_RULE no-api-posts" || !strings.Contains(body, "What to do:") {
			t.Fatalf("%d %s %q", status, code, body)
		}
		if e.origin.count() != before {
			t.Error("the refused POST reached the origin")
		}
	})
	t.Run("go client, keep-alive", func(t *testing.T) {
		c := e.client()
		before := e.origin.count()
		for i := 0; i < 3; i++ {
			resp, err := c.Get(e.url("origin.test", fmt.Sprintf("/read/%d", i)))
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("GET %d: %d", i, resp.StatusCode)
			}
			resp, err = c.Post(e.url("origin.test", "/api/x"), "text/plain", strings.NewReader("data"))
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 403 || resp.Header.Get(gate.HeaderRule) != "no-api-posts" {
				t.Fatalf("POST %d: %d %s", i, resp.StatusCode, resp.Header.Get(gate.HeaderRule))
			}
		}
		if got := e.origin.count() - before; got != 3 {
			t.Errorf("%d requests reached the origin, want the 3 GETs", got)
		}
		rec := false
		for _, m := range e.auditRecords() {
			rec = rec || (m["event"] == "tunnel-request" && m["rule"] == "no-api-posts" && m["code"] == "E_RULE" && strings.HasPrefix(m["url"].(string), "https://origin.test:"))
		}
		if !rec {
			t.Error("no audit record of the refused decrypted POST")
		}
	})
	t.Run("spliced host decided at the domain", func(t *testing.T) {
		// The client trusts only the origin's own root: a spliced tunnel is not decrypted.
		pool := x509.NewCertPool()
		pool.AddCert(e.pki.root)
		u, _ := url.Parse(e.up.Gate)
		c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u), TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 10 * time.Second}
		resp, err := c.Post(e.url("spliced.test", "/api/x"), "text/plain", strings.NewReader("unseen"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("spliced POST: %d", resp.StatusCode)
		}
	})
}

// gitServer serves bare repositories under root with git http-backend over TLS.
func gitServer(t *testing.T, pki *testPKI, root string) int {
	t.Helper()
	git := requireTool(t, "git")
	execPath, err := exec.Command(git, "--exec-path").Output()
	if err != nil {
		t.Fatal(err)
	}
	backend := filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend")
	h := &cgi.Handler{Path: backend, Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "REMOTE_USER=tester"}}
	_, port := tlsOrigin(t, h, pki.leaf(t, []string{"git.test"}, time.Now().Add(24*time.Hour), false))
	return port
}

func gitCmd(t *testing.T, dir string, args ...string) ([]byte, error) {
	return gitCmdEnv(t, dir, nil, args...)
}

func gitCmdEnv(t *testing.T, dir string, env []string, args ...string) ([]byte, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Env = append(cmd.Env, "GIT_TERMINAL_PROMPT=0", "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "HOME="+dir, "GIT_CONFIG_NOSYSTEM=1")
	return cmd.CombinedOutput()
}

func TestDecryptGitCloneFreePushRefused(t *testing.T) {
	requireTool(t, "git")
	pki := newTestPKI(t)
	repos := t.TempDir()
	seed := t.TempDir()
	for _, args := range [][]string{
		{"init", "--bare", "-b", "main", filepath.Join(repos, "repo.git")},
		{"-C", filepath.Join(repos, "repo.git"), "config", "http.receivepack", "true"},
		{"init", "-b", "main", "."},
		{"commit", "--allow-empty", "-m", "first"},
		{"push", filepath.Join(repos, "repo.git"), "main"},
	} {
		if out, err := gitCmd(t, seed, args...); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	port := gitServer(t, pki, repos)
	// The stack needs the git server's port too: build the env by hand around startDecrypt.
	e := startDecryptWithPKI(t, pki, port)
	work := t.TempDir()
	proxy := []string{"-c", "http.proxy=" + e.up.Gate}
	// GIT_SSL_CAINFO wins over http.sslCAInfo: set it, whatever the machine's environment says.
	env := []string{"GIT_SSL_CAINFO=" + e.up.CACert, "HTTPS_PROXY=", "https_proxy="}
	out, err := gitCmdEnv(t, work, env, append(proxy, "clone", fmt.Sprintf("https://git.test:%d/repo.git", port), "clone")...)
	if err != nil {
		t.Fatalf("clone through the gate: %v\n%s", err, out)
	}
	clone := filepath.Join(work, "clone")
	gitCmd(t, clone, "commit", "--allow-empty", "-m", "second")
	before, _ := gitCmd(t, repos, "--git-dir", filepath.Join(repos, "repo.git"), "rev-parse", "main")
	out, err = gitCmdEnv(t, clone, env, append(proxy, "push", "origin", "main")...)
	if err == nil {
		t.Fatalf("push through the gate succeeded:\n%s", out)
	}
	// git shows the refusal itself: its code, rule and what to do, as "remote:" lines.
	t.Logf("git push through the gate:\n%s", out)
	for _, want := range []string{"remote: Code:    E_RULE", "remote: Rule:    git-push", "What to do:", "lockhttp refused this push"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("push output does not show %q:\n%s", want, out)
		}
	}
	after, _ := gitCmd(t, repos, "--git-dir", filepath.Join(repos, "repo.git"), "rev-parse", "main")
	if !bytes.Equal(before, after) {
		t.Fatalf("the push changed the repository: %s → %s", before, after)
	}
	found := false
	for _, m := range e.auditRecords() {
		found = found || (m["rule"] == "git-push" && m["code"] == "E_RULE")
	}
	if !found {
		t.Error("no audit record of the refused push")
	}
}

func startDecryptWithPKI(t *testing.T, pki *testPKI, extraPorts ...int) *decryptEnv {
	t.Helper()
	rec := &originRecorder{}
	_, port := tlsOrigin(t, rec, pki.leaf(t, []string{"origin.test", "other.test", "cold.test", "spliced.test"}, time.Now().Add(24*time.Hour), false))
	ports := []string{fmt.Sprint(port)}
	for _, p := range extraPorts {
		ports = append(ports, fmt.Sprint(p))
	}
	r := startStackWith(t, fmt.Sprintf(decryptPolicy, strings.Join(ports, ", ")), []string{"--roots", pki.rootPEM}, nil)
	if r.up.CACert == "" || r.up.SignerSocket == "" {
		t.Fatalf("up.json has no ca_cert or signer_socket: %+v", r.up)
	}
	data, err := os.ReadFile(r.up.CACert)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(data)
	return &decryptEnv{running: r, pki: pki, origin: rec, port: port, caPool: pool}
}

// tunnel opens a CONNECT to host:port through the gate and returns the raw connection after
// the 200.
func (e *decryptEnv) tunnel(t *testing.T, host string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", e.up.Listen)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n", host, e.port, host, e.port)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	if br.Buffered() > 0 {
		t.Fatal("bytes after the CONNECT answer")
	}
	return c
}

// tlsTunnel is tunnel plus a TLS handshake with serverName as SNI.
func (e *decryptEnv) tlsTunnel(t *testing.T, host, serverName string) *tls.Conn {
	t.Helper()
	tc := tls.Client(e.tunnel(t, host), &tls.Config{ServerName: serverName, RootCAs: e.caPool, NextProtos: []string{"http/1.1"}})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("handshake: %v", err)
	}
	return tc
}

// exchange writes raw requests into conn and reads the responses until the gate closes.
func readAll(c net.Conn) string {
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b bytes.Buffer
	io.Copy(&b, c)
	return b.String()
}

func TestDecryptAttacks(t *testing.T) {
	e := startDecrypt(t)
	o := fmt.Sprintf("origin.test:%d", e.port)
	good := "GET /ok HTTP/1.1\r\nHost: " + o + "\r\n\r\n"
	type attack struct {
		name   string
		host   string // CONNECT host
		sni    string // TLS server name; "-" for a plain-text client
		send   string
		code   string
		rule   string
		okHits int // requests expected to reach the origin
	}
	attacks := []attack{
		{"Host names another host", "origin.test", "origin.test", "GET / HTTP/1.1\r\nHost: other.test:" + fmt.Sprint(e.port) + "\r\n\r\n", "E_FLOOR", "floor:tunnel-binding", 0},
		{"Host names another port", "origin.test", "origin.test", "GET / HTTP/1.1\r\nHost: origin.test:9\r\n\r\n", "E_FLOOR", "floor:tunnel-binding", 0},
		{"Host without port means 443", "origin.test", "origin.test", "GET / HTTP/1.1\r\nHost: origin.test\r\n\r\n", "E_FLOOR", "floor:tunnel-binding", 0},
		{"later keep-alive request to another host", "origin.test", "origin.test", good + "GET / HTTP/1.1\r\nHost: other.test:" + fmt.Sprint(e.port) + "\r\n\r\n", "E_FLOOR", "floor:tunnel-binding", 1},
		{"absolute URL to another host", "origin.test", "origin.test", "GET https://other.test:" + fmt.Sprint(e.port) + "/ HTTP/1.1\r\nHost: other.test:" + fmt.Sprint(e.port) + "\r\n\r\n", "E_FLOOR", "floor:tunnel-binding", 0},
		{"absolute URL with another scheme", "origin.test", "origin.test", "GET http://" + o + "/ HTTP/1.1\r\nHost: " + o + "\r\n\r\n", "E_FLOOR", "floor:tunnel-binding", 0},
		{"later absolute URL to another port", "origin.test", "origin.test", good + "GET https://origin.test:444/ HTTP/1.1\r\nHost: origin.test:444\r\n\r\n", "E_FLOOR", "floor:tunnel-binding", 1},
		{"nested CONNECT", "origin.test", "origin.test", "CONNECT other.test:443 HTTP/1.1\r\nHost: other.test:443\r\n\r\n", "E_FLOOR", "framing:nested-connect", 0},
		{"HTTP/2 preface", "origin.test", "origin.test", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "E_FLOOR", "framing:h2-preface", 0},
		// Plain HTTP in the tunnel is read as http:// requests of the tunnel's host and port.
		{"plain text: Host names another host", "origin.test", "-", "GET / HTTP/1.1\r\nHost: other.test:" + fmt.Sprint(e.port) + "\r\n\r\n", "E_FLOOR", "floor:tunnel-binding", 0},
		{"plain text: Host without port means 80", "origin.test", "-", "GET / HTTP/1.1\r\nHost: origin.test\r\n\r\n", "E_FLOOR", "floor:tunnel-binding", 0},
		{"plain text: absolute https:// URL", "origin.test", "-", "GET https://" + o + "/ HTTP/1.1\r\nHost: " + o + "\r\n\r\n", "E_FLOOR", "floor:tunnel-binding", 0},
		{"plain text: HTTP/2 preface", "origin.test", "-", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "E_FLOOR", "framing:h2-preface", 0},
		{"plain text: nested CONNECT", "origin.test", "-", "CONNECT other.test:443 HTTP/1.1\r\nHost: other.test:443\r\n\r\n", "E_FLOOR", "framing:nested-connect", 0},
		{"plain text: two Content-Lengths", "origin.test", "-", "POST /ok HTTP/1.1\r\nHost: " + o + "\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", "E_FLOOR", "framing:bad-request", 0},
		{"plain text: not HTTP", "origin.test", "-", "SSH-2.0-OpenSSH_9.2\r\n", "E_FLOOR", "framing:bad-request", 0},
		{"plain text: a refused POST", "origin.test", "-", "POST /api/x HTTP/1.1\r\nHost: " + o + "\r\nContent-Length: 1\r\n\r\nx", "E_RULE", "no-api-posts", 0},
	}
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			before := e.origin.count()
			var c net.Conn
			if a.sni == "-" {
				c = e.tunnel(t, a.host)
			} else {
				c = e.tlsTunnel(t, a.host, a.sni)
			}
			io.WriteString(c, a.send)
			out := readAll(c)
			br := bufio.NewReader(strings.NewReader(out))
			var last *http.Response
			for {
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					break
				}
				io.Copy(io.Discard, resp.Body)
				last = resp
			}
			if last == nil || last.Header.Get(gate.HeaderCode) != a.code || last.Header.Get(gate.HeaderRule) != a.rule {
				t.Fatalf("want %s %s; the gate answered:\n%s", a.code, a.rule, out)
			}
			// The page's last line names the gate's own MCP server, https://lockhttp.internal/mcp:
			// the rest names no https:// URL.
			if a.sni == "-" && strings.Contains(strings.ReplaceAll(out, "https://"+floor.SelfName+floor.SelfMCPPath, ""), "https://") {
				t.Fatalf("a refusal in a cleartext tunnel names an https:// URL:\n%s", out)
			}
			if got := e.origin.count() - before; got != a.okHits {
				t.Fatalf("%d requests reached the origin, want %d", got, a.okHits)
			}
		})
	}
	tlsRefusals := []struct{ name, sni, rule string }{
		{"SNI names another host", "other.test", "floor:sni"},
		{"no SNI", "", "floor:sni"},
	}
	for _, a := range tlsRefusals {
		t.Run(a.name, func(t *testing.T) {
			before := e.origin.count()
			conf := &tls.Config{ServerName: a.sni, RootCAs: e.caPool}
			if a.sni == "" {
				conf.InsecureSkipVerify = true // the only way for Go's client to send no SNI
			}
			tc := tls.Client(e.tunnel(t, "origin.test"), conf)
			if err := tc.Handshake(); err == nil {
				t.Fatal("the handshake succeeded")
			}
			if e.origin.count() != before {
				t.Fatal("the origin was reached")
			}
			testkit.WaitFor(t, 5*time.Second, "audit record of the refused handshake", func() bool {
				for _, m := range e.auditRecords() {
					if m["event"] == "connect" && m["rule"] == a.rule && m["code"] == "E_FLOOR" {
						return true
					}
				}
				return false
			})
		})
	}
	t.Run("a client that rejects the certificate is E_PINNED", func(t *testing.T) {
		tc := tls.Client(e.tunnel(t, "origin.test"), &tls.Config{ServerName: "origin.test"}) // system roots only
		if err := tc.Handshake(); err == nil {
			t.Fatal("a client without the lockhttp CA accepted the gate's certificate")
		}
		tc.Close()
		testkit.WaitFor(t, 5*time.Second, "E_PINNED record", func() bool {
			for _, m := range e.auditRecords() {
				if m["event"] == "connect" && m["code"] == "E_PINNED" {
					return true
				}
			}
			return false
		})
	})
	t.Run("curl without the lockhttp CA is E_PINNED", func(t *testing.T) {
		// OpenSSL clients reject the certificate with an alert the gate's side reads as a bad
		// record MAC.
		pinned := func() int {
			n := 0
			for _, m := range e.auditRecords() {
				if m["event"] == "connect" && m["code"] == "E_PINNED" {
					n++
				}
			}
			return n
		}
		before := pinned()
		curl := requireTool(t, "curl")
		if out, err := exec.Command(curl, "-sS", "-x", e.up.Gate, "--max-time", "10", e.url("origin.test", "/pinned")).CombinedOutput(); err == nil {
			t.Fatalf("curl without the CA succeeded: %s", out)
		}
		testkit.WaitFor(t, 5*time.Second, "an E_PINNED record for curl", func() bool { return pinned() > before })
	})
}

// TestUpstreamCertificateProblems: the gate verifies origins; each bad certificate is a 502 that
// names the reason in fixed text (never the TLS library's words or the origin's address), and
// for an unknown authority the fix: the operator's --roots.
func TestUpstreamCertificateProblems(t *testing.T) {
	pki := newTestPKI(t)
	other := newTestPKI(t) // a root the gate does not trust
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "should not be seen") })
	_, unknown := tlsOrigin(t, h, other.leaf(t, []string{"bad.test"}, time.Now().Add(time.Hour), false))
	_, expired := tlsOrigin(t, h, pki.leaf(t, []string{"bad.test"}, time.Now().Add(-time.Hour), false))
	_, wrongName := tlsOrigin(t, h, pki.leaf(t, []string{"elsewhere.test"}, time.Now().Add(time.Hour), false))
	_, weak := tlsOrigin(t, h, pki.leaf(t, []string{"bad.test"}, time.Now().Add(time.Hour), true))
	e := startDecryptWithPKI(t, pki, unknown, expired, wrongName, weak)
	c := e.client()
	for _, tc := range []struct {
		name string
		port int
		want string
	}{
		{"unknown authority", unknown, "its TLS certificate is signed by an unknown authority (not one the gate trusts). " +
			"If it is a server of your own with a private CA, the operator gives the gate that CA's root certificate: lox run --roots FILE (LOCKHTTP_ROOTS in a compose deployment)."},
		{"expired", expired, "expired"},
		{"wrong name", wrongName, "bad.test"},
		{"weak key", weak, "weak certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := c.Get(fmt.Sprintf("https://bad.test:%d/", tc.port))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 502 || !strings.Contains(string(body), tc.want) || strings.Contains(string(body), "should not be seen") {
				t.Fatalf("got %d %q; want 502 naming %q", resp.StatusCode, body, tc.want)
			}
			for _, internal := range []string{"x509", "tls:", "127.0.0.1"} {
				if strings.Contains(string(body), internal) {
					t.Errorf("the 502 shows the agent %q, an internal cause:\n%s", internal, body)
				}
			}
		})
	}
}

// TestSignerDownFailsClosed stops the signer (SIGSTOP: it hangs) and asks for a host the gate has
// no certificate for yet: refused with E_NO_SIGNER, never spliced; once the signer runs again
// the same host is decrypted.
func TestSignerDownFailsClosed(t *testing.T) {
	e := startDecrypt(t)
	// The signer's pid as up.json has it now (a restart since the start rewrites it), stopped
	// for certain before the request: a signal to a stale pid would test nothing.
	var up stack.Up
	if data, err := os.ReadFile(filepath.Join(e.state, stack.UpFile)); err != nil || json.Unmarshal(data, &up) != nil {
		t.Fatalf("up.json: %v", err)
	}
	signer := up.PIDs["signer"]
	if signer == 0 {
		t.Fatal("no signer pid in up.json")
	}
	if err := syscall.Kill(signer, syscall.SIGSTOP); err != nil {
		t.Fatalf("stop the signer (pid %d): %v\n%s", signer, err, e.out)
	}
	defer syscall.Kill(signer, syscall.SIGCONT)
	testkit.WaitFor(t, 5*time.Second, "the signer stopped", func() bool {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", signer))
		i := bytes.LastIndexByte(stat, ')')
		return err == nil && i > 0 && len(stat) > i+2 && stat[i+2] == 'T'
	})
	before := e.origin.count()
	resp, err := e.client().Get(e.url("cold.test", "/x"))
	if err == nil {
		resp.Body.Close()
		t.Fatalf("request went through with the signer stopped: %d\n%s", resp.StatusCode, e.out)
	}
	c, err := net.Dial("tcp", e.up.Listen)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "CONNECT cold.test:%d HTTP/1.1\r\nHost: cold.test:%d\r\n\r\n", e.port, e.port)
	c.SetReadDeadline(time.Now().Add(15 * time.Second)) // the gate waits for the signer up to 5s
	var b bytes.Buffer
	io.Copy(&b, c)
	c.Close()
	out := b.String()
	if !strings.Contains(out, "E_NO_SIGNER") || !strings.HasPrefix(out, "HTTP/1.1 503") {
		t.Fatalf("CONNECT with the signer stopped:\n%s", out)
	}
	if e.origin.count() != before {
		t.Fatal("the origin was reached with the signer stopped")
	}
	syscall.Kill(signer, syscall.SIGCONT)
	testkit.WaitFor(t, 20*time.Second, "decryption back", func() bool {
		resp, err := e.client().Get(e.url("cold.test", "/x"))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}

// TestGateNeverHoldsTheCAKey reads the gate's open files, its memory map and its memory: the CA
// key is in none of them.
func TestGateNeverHoldsTheCAKey(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("this test reads another process's memory and needs root (CI runs as root)")
		}
		t.Skip("needs root to read the gate's memory")
	}
	e := startDecrypt(t)
	// Make the gate use the signer first.
	resp, err := e.client().Get(e.url("origin.test", "/warm"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	keyPath := filepath.Join(filepath.Dir(e.up.CACert), "ca-key.pem")
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(keyPEM)
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	d := ecdsaScalar(t, key)
	pid := e.up.PIDs["gate"]
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, fd := range fds {
		target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if strings.Contains(target, "ca-key") {
			t.Fatalf("the gate has the CA key open: %s", target)
		}
	}
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(maps), "ca-key") {
		t.Fatal("the CA key file is mapped into the gate")
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	scanned := 0
	for _, line := range strings.Split(string(maps), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || !strings.HasPrefix(f[1], "r") {
			continue
		}
		var start, end uint64
		fmt.Sscanf(f[0], "%x-%x", &start, &end)
		if end-start > 1<<30 {
			continue
		}
		buf := make([]byte, end-start)
		n, _ := mem.ReadAt(buf, int64(start))
		scanned += n
		if bytes.Contains(buf[:n], d) || bytes.Contains(buf[:n], keyPEM[30:80]) {
			t.Fatalf("the CA private key is in the gate's memory (region %s)", f[0])
		}
	}
	if scanned < 1<<20 {
		t.Fatalf("scanned only %d bytes of the gate's memory", scanned)
	}
	t.Logf("scanned %d MiB of the gate's memory", scanned>>20)
}

// TestExplainAgreesInsideTunnels decides https:// request lines with lockhttp explain and sends
// the same requests through a decrypted tunnel.
func TestExplainAgreesInsideTunnels(t *testing.T) {
	e := startDecrypt(t)
	o := fmt.Sprintf("origin.test:%d", e.port)
	for i, req := range []struct{ method, path, body string }{
		{"GET", "/docs/x", ""},
		{"POST", "/api/items", "a=1"},
		{"POST", "/API/%2e%2e/api/items", "a=1"},
		{"DELETE", "/docs/x", ""},
		{"GET", "/dns-query?dns=AAAB", ""},
	} {
		t.Run(fmt.Sprintf("%02d %s %s", i, req.method, req.path), func(t *testing.T) {
			head := fmt.Sprintf("%s https://%s%s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n%s", req.method, o, req.path, o, len(req.body), req.body)
			cmd := exec.Command(filepath.Join(binDir, "lockhttp"), "explain", "--policy", e.policy, "-")
			cmd.Stdin = strings.NewReader(head)
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("explain: %v", err)
			}
			var ex struct{ Verdict, Code, Rule string }
			json.Unmarshal(out, &ex)
			tc := e.tlsTunnel(t, "origin.test", "origin.test")
			fmt.Fprintf(tc, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", req.method, req.path, o, len(req.body), req.body)
			resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			code, rule := resp.Header.Get(gate.HeaderCode), resp.Header.Get(gate.HeaderRule)
			switch ex.Verdict {
			case "FREE":
				if code != "" || resp.StatusCode >= 400 {
					t.Fatalf("explain FREE, gate %d %s %s", resp.StatusCode, code, rule)
				}
			case "ASK":
				if code != "E_PENDING" || rule != ex.Rule {
					t.Fatalf("explain ASK %s, gate %d %s %s", ex.Rule, resp.StatusCode, code, rule)
				}
			default:
				if code != ex.Code || rule != ex.Rule {
					t.Fatalf("explain %s %s %s, gate %d %s %s", ex.Verdict, ex.Code, ex.Rule, resp.StatusCode, code, rule)
				}
			}
		})
	}
}
