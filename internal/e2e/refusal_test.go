package e2e

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/gate"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// refusalPolicy is the policy of TestRefusalsReachTheAgent; %[1]d is the TLS origin's port.
// denied.test and blocked.test are answered by the origin if anything ever reached them.
const refusalPolicy = `version = 1
trusted = ["origin.test"]
deny = ["denied.test", "spliced-denied.test"]
splice = ["spliced-denied.test"]

[[rule]]
name = "no-blocked"
hosts = ["blocked.test"]
verdict = "deny"

[floor]
allow_cidrs = ["127.0.0.1/32"]
allow_ports = [443, %[1]d]

[floor.hosts]
"origin.test" = "127.0.0.1"
"denied.test" = "127.0.0.1"
"blocked.test" = "127.0.0.1"
"ask.test" = "127.0.0.1"
"spliced-denied.test" = "127.0.0.1"

[sources]
local = ["127.0.0.0/8"]

[settings]
hold = "1s"
`

// clientEnv is the environment of a client run by the test: the machine's, without proxy
// settings, so that only the flags the test gives decide where the client goes.
func clientEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch strings.ToUpper(name) {
		case "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// requirePythonRequests returns python3's path when it can import requests; it skips when
// either is absent, except under CI=true (.ci/run installs python3-requests).
func requirePythonRequests(t *testing.T) string {
	t.Helper()
	py := requireTool(t, "python3")
	if out, err := exec.Command(py, "-c", "import requests").CombinedOutput(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("python3 cannot import requests; .ci/run must install python3-requests: %v\n%s", err, out)
		}
		t.Skipf("python3 cannot import requests: %s", bytes.TrimSpace(out))
	}
	return py
}

// pythonGet is a requests.get through a proxy, printing the status, the code and the body.
const pythonGet = `import sys, requests
r = requests.get(sys.argv[1], proxies={"http": sys.argv[2], "https": sys.argv[2]}, verify=sys.argv[3], timeout=15)
print(r.status_code)
print("code:", r.headers.get("X-LockHTTP-Code"))
print(r.text)
`

// TestRefusalsReachTheAgent: with decryption, a refusal of the whole host (the deny list, a deny
// rule naming the host alone) is answered inside the tunnel, to the first request, so that curl,
// Python requests and Go's net/http each show the code and what to do instead of a failed
// CONNECT. A spliced host keeps the CONNECT's refusal, whose body carries the same text. An
// E_PENDING answer carries Retry-After. A CONNECT whose Host names the proxy (Node's example)
// is bound to its target.
func TestRefusalsReachTheAgent(t *testing.T) {
	pki := newTestPKI(t)
	origin := &originRecorder{}
	_, port := tlsOrigin(t, origin, pki.leaf(t, []string{"origin.test", "denied.test", "blocked.test", "ask.test", "spliced-denied.test"}, time.Now().Add(24*time.Hour), false))
	r := startStackWith(t, fmt.Sprintf(refusalPolicy, port), []string{"--roots", pki.rootPEM}, nil)
	e := &decryptEnv{running: r, pki: pki, origin: origin, port: port}
	data, err := os.ReadFile(r.up.CACert)
	if err != nil {
		t.Fatal(err)
	}
	e.caPool = x509.NewCertPool()
	e.caPool.AppendCertsFromPEM(data)

	// wantRefusal checks a client's output for the refusal's text: the code, the rule, what to do.
	wantRefusal := func(t *testing.T, out, rule string) {
		t.Helper()
		for _, want := range []string{"lockhttp refused this request: GET https://", "Code:    E_RULE", "Rule:    " + rule, "What to do: The policy refuses this request."} {
			if !strings.Contains(out, want) {
				t.Errorf("the output lacks %q:\n%s", want, out)
			}
		}
	}

	t.Run("curl shows the refusal", func(t *testing.T) {
		curl := requireTool(t, "curl")
		cmd := exec.Command(curl, "-sS", "--max-time", "15", "--cacert", r.up.CACert, "-x", r.up.Gate, "https://denied.test/")
		cmd.Env = clientEnv()
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		t.Logf("curl stdout:\n%s\ncurl stderr: %s (err %v)", stdout.String(), stderr.String(), err)
		if err != nil {
			t.Fatalf("curl failed: %v: %s", err, stderr.String())
		}
		wantRefusal(t, stdout.String(), "deny")
	})

	t.Run("python requests shows the refusal", func(t *testing.T) {
		py := requirePythonRequests(t)
		cmd := exec.Command(py, "-c", pythonGet, "https://denied.test/", r.up.Gate, r.up.CACert)
		cmd.Env = clientEnv()
		out, err := cmd.CombinedOutput()
		t.Logf("python requests:\n%s (err %v)", out, err)
		if err != nil {
			t.Fatalf("python requests failed: %v", err)
		}
		if !strings.HasPrefix(string(out), "403\ncode: E_RULE\n") {
			t.Errorf("python requests: want status 403 and code E_RULE first:\n%s", out)
		}
		wantRefusal(t, string(out), "deny")
	})

	t.Run("go net/http gets a response, not a transport error", func(t *testing.T) {
		for _, c := range []struct{ name, host, rule string }{
			{"deny list", "denied.test", "deny"},
			{"a deny rule naming the host alone", "blocked.test", "no-blocked"},
		} {
			t.Run(c.name, func(t *testing.T) {
				before := e.origin.count()
				resp, err := e.client().Get(e.url(c.host, "/x?y=1"))
				if err != nil {
					t.Fatalf("transport error: %v", err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				t.Logf("go: %s %s=%s\n%s", resp.Status, gate.HeaderCode, resp.Header.Get(gate.HeaderCode), body)
				if resp.StatusCode != 403 || resp.Header.Get(gate.HeaderCode) != "E_RULE" || resp.Header.Get(gate.HeaderRule) != c.rule {
					t.Fatalf("got %d %s %s", resp.StatusCode, resp.Header.Get(gate.HeaderCode), resp.Header.Get(gate.HeaderRule))
				}
				wantRefusal(t, string(body), c.rule)
				if !strings.Contains(string(body), "https://"+c.host+":") {
					t.Errorf("the body does not name the request's URL:\n%s", body)
				}
				if e.origin.count() != before {
					t.Fatal("a request to a refused host reached the origin")
				}
				// The audit: the CONNECT's refusal, and the request inside refused with the same
				// decision, both 403.
				id := resp.Header.Get(gate.HeaderRequest)
				inner := e.recordFor(id)
				if inner["event"] != "tunnel-request" || inner["method"] != "GET" || inner["code"] != "E_RULE" || inner["rule"] != c.rule ||
					inner["status"] != float64(403) || !strings.HasPrefix(fmt.Sprint(inner["url"]), "https://"+c.host+":") {
					t.Errorf("the record of the request inside: %v", inner)
				}
				// The CONNECT's record is written when its tunnel closes, after the answer.
				var conn map[string]any
				testkit.WaitFor(t, 10*time.Second, "the CONNECT's record", func() bool {
					for _, m := range e.auditRecords() {
						if m["event"] == "connect" && m["url"] == fmt.Sprintf("%s:%d", c.host, e.port) {
							conn = m
						}
					}
					return conn != nil
				})
				if conn["verdict"] != "DENY" || conn["code"] != "E_RULE" || conn["rule"] != c.rule || conn["status"] != float64(403) ||
					!strings.Contains(fmt.Sprint(conn["detail"]), id) {
					t.Errorf("the CONNECT's record: %v", conn)
				}
			})
		}
	})

	t.Run("E_PENDING carries Retry-After", func(t *testing.T) {
		resp, err := e.client().Get(e.url("ask.test", "/held"))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 403 || resp.Header.Get(gate.HeaderCode) != "E_PENDING" || resp.Header.Get(gate.HeaderTicket) == "" {
			t.Fatalf("got %d %s ticket %q\n%s", resp.StatusCode, resp.Header.Get(gate.HeaderCode), resp.Header.Get(gate.HeaderTicket), body)
		}
		if ra := resp.Header.Get("Retry-After"); ra != "5" {
			t.Errorf("Retry-After %q, want 5", ra)
		}
		if !strings.Contains(string(body), "Retry the same request in a few seconds") {
			t.Errorf("the body does not say when to retry:\n%s", body)
		}
	})

	t.Run("a spliced host keeps the CONNECT refusal, with the whole text", func(t *testing.T) {
		host := fmt.Sprintf("spliced-denied.test:%d", e.port)
		out := rawExchange(t, r.up.Listen, "CONNECT "+host+" HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(out)), &http.Request{Method: "CONNECT"})
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 403 || resp.Header.Get(gate.HeaderCode) != "E_RULE" {
			t.Fatalf("got %d %s\n%s", resp.StatusCode, resp.Header.Get(gate.HeaderCode), out)
		}
		for _, want := range []string{"lockhttp refused this request: CONNECT " + host, "Code:    E_RULE", "Rule:    deny", "What to do:"} {
			if !strings.Contains(string(body), want) {
				t.Errorf("the CONNECT's body lacks %q:\n%s", want, body)
			}
		}
	})

	t.Run("a CONNECT whose Host names the proxy is bound to its target", func(t *testing.T) {
		// The bytes Node's http.request sends for its documentation's CONNECT example: Host is
		// the proxy's address.
		target := fmt.Sprintf("origin.test:%d", e.port)
		c, err := net.Dial("tcp", r.up.Listen)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(15 * time.Second))
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nConnection: keep-alive\r\n\r\n", target, r.up.Listen)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT with Host naming the proxy: %v %v", resp, err)
		}
		tc := tls.Client(&bufferedConn{Conn: c, r: br}, &tls.Config{ServerName: "origin.test", RootCAs: e.caPool})
		tbr := bufio.NewReader(tc)
		before := e.origin.count()
		fmt.Fprintf(tc, "GET /bound HTTP/1.1\r\nHost: %s\r\n\r\n", target)
		resp, err = http.ReadResponse(tbr, nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(body) != "origin saw GET /bound (0 bytes)" || e.origin.count() != before+1 {
			t.Fatalf("the request inside: %d %q", resp.StatusCode, body)
		}
		// The tunnel is the CONNECT target's: a request inside that names the proxy is refused.
		fmt.Fprintf(tc, "GET /elsewhere HTTP/1.1\r\nHost: %s\r\n\r\n", r.up.Listen)
		resp, err = http.ReadResponse(tbr, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != 403 || resp.Header.Get(gate.HeaderRule) != "floor:tunnel-binding" || e.origin.count() != before+1 {
			t.Fatalf("a request naming another host inside the tunnel: %d %s", resp.StatusCode, resp.Header.Get(gate.HeaderRule))
		}
	})

	t.Run("a CONNECT with two Host headers is refused", func(t *testing.T) {
		target := fmt.Sprintf("origin.test:%d", e.port)
		out := rawExchange(t, r.up.Listen, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\nHost: "+r.up.Listen+"\r\n\r\n")
		if !strings.HasPrefix(out, "HTTP/1.1 400") || !strings.Contains(out, "X-Lockhttp-Rule: framing:bad-request") || !strings.Contains(out, "more than one Host") {
			t.Fatalf("two Host headers on a CONNECT:\n%s", out)
		}
	})
}
