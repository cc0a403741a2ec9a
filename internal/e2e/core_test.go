package e2e

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/gate"
	"github.com/lockhttp/lockhttp/internal/testkit"
	"github.com/lockhttp/lockhttp/internal/unixsock"
)

// corePolicy is the policy of the core tests; %[1]d is the plain origin's port, %[2]d the TLS
// origin's.
const corePolicy = `version = 1
trusted = ["origin.test", "private.test"]
deny = ["denied.test"]
splice = ["tunnel.test", "asktunnel.test"]

[[rule]]
name = "origin-writes"
hosts = ["origin.test"]
methods = ["POST", "PUT"]
paths = ["/upload/**"]
verdict = "free"

[[rule]]
name = "no-admin"
hosts = ["origin.test"]
paths = ["/admin/**"]
verdict = "deny"

[[rule]]
name = "ask-delete"
hosts = ["origin.test"]
methods = ["DELETE"]
verdict = "ask"

[[rule]]
name = "tunnel-ok"
hosts = ["tunnel.test"]
methods = ["CONNECT"]
verdict = "free"

[floor]
allow_cidrs = ["127.0.0.1/32"]
allow_ports = [80, 443, %[1]d, %[2]d]

[floor.hosts]
"origin.test" = "127.0.0.1"
"denied.test" = "127.0.0.1"
"tunnel.test" = "127.0.0.1"
"private.test" = "10.0.0.1"
"asktunnel.test" = "127.0.0.1"

[sources]
local = ["127.0.0.0/8", "::1/128"]

[settings]
hold = "1s"
`

type coreEnv struct {
	*running
	origin    *originRecorder
	tlsOrigin *httptest.Server
	port      int
	tlsPort   int
}

func startCore(t *testing.T) *coreEnv {
	t.Helper()
	rec := &originRecorder{}
	plain := httptest.NewServer(rec)
	t.Cleanup(plain.Close)
	tlsSrv := httptest.NewTLSServer(rec)
	t.Cleanup(tlsSrv.Close)
	port := plain.Listener.Addr().(*net.TCPAddr).Port
	tlsPort := tlsSrv.Listener.Addr().(*net.TCPAddr).Port
	r := startStack(t, fmt.Sprintf(corePolicy, port, tlsPort))
	return &coreEnv{running: r, origin: rec, tlsOrigin: tlsSrv, port: port, tlsPort: tlsPort}
}

func (e *coreEnv) url(path string) string {
	return fmt.Sprintf("http://origin.test:%d%s", e.port, path)
}

func (e *coreEnv) client() *http.Client {
	u, _ := url.Parse(e.up.Gate)
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u)}, Timeout: 10 * time.Second}
}

// curl runs curl through the gate and returns the status, the headers and the body.
func (e *coreEnv) curl(t *testing.T, args ...string) (int, http.Header, string) {
	t.Helper()
	bin := requireTool(t, "curl")
	dir := t.TempDir()
	hdr := filepath.Join(dir, "h")
	full := append([]string{"-sS", "-x", e.up.Gate, "-D", hdr, "-o", filepath.Join(dir, "b"), "--max-time", "10"}, args...)
	out, err := exec.Command(bin, full...).CombinedOutput()
	if err != nil {
		t.Fatalf("curl %v: %v\n%s", args, err, out)
	}
	raw, _ := os.ReadFile(hdr)
	body, _ := os.ReadFile(filepath.Join(dir, "b"))
	// The last header block is the final response (after a CONNECT's 200).
	blocks := strings.Split(strings.TrimSpace(string(raw)), "\r\n\r\n")
	last := blocks[len(blocks)-1]
	resp, err := http.ReadResponse(bufioReader(last+"\r\n\r\n"), nil)
	if err != nil {
		t.Fatalf("curl headers %q: %v", raw, err)
	}
	return resp.StatusCode, resp.Header, string(body)
}

func TestCoreFreeRequestsReachTheOrigin(t *testing.T) {
	e := startCore(t)
	c := e.client()

	t.Run("curl GET", func(t *testing.T) {
		status, h, body := e.curl(t, e.url("/hello?x=1"))
		if status != 200 || body != "origin saw GET /hello?x=1 (0 bytes)" {
			t.Fatalf("status %d body %q", status, body)
		}
		id := h.Get(gate.HeaderRequest)
		rec := e.recordFor(id)
		if rec["verdict"] != "FREE" || rec["rule"] != "trusted" || rec["status"] != float64(200) || rec["container"] != "local" {
			t.Errorf("audit record %v", rec)
		}
	})
	t.Run("curl POST body intact", func(t *testing.T) {
		payload := make([]byte, 300<<10)
		rand.Read(payload)
		f := filepath.Join(t.TempDir(), "payload")
		os.WriteFile(f, payload, 0o600)
		before := e.origin.count()
		status, h, _ := e.curl(t, "--data-binary", "@"+f, e.url("/upload/blob"))
		if status != 200 {
			t.Fatalf("status %d", status)
		}
		got := e.origin.all()[before]
		if got.Method != "POST" || !bytes.Equal(got.Body, payload) {
			t.Fatalf("origin got %s with %d bytes, want POST with %d", got.Method, len(got.Body), len(payload))
		}
		if got.Header.Get("Proxy-Authorization") != "" || got.Header.Get("Proxy-Connection") != "" {
			t.Errorf("proxy headers reached the origin: %v", got.Header)
		}
		rec := e.recordFor(h.Get(gate.HeaderRequest))
		if rec["rule"] != "origin-writes" || rec["bytes_in"] != float64(len(payload)) {
			t.Errorf("audit record %v", rec)
		}
	})
	t.Run("go client GET and chunked POST", func(t *testing.T) {
		resp, err := c.Get(e.url("/go"))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "origin saw GET /go (0 bytes)" {
			t.Fatalf("status %d body %q", resp.StatusCode, body)
		}
		payload := strings.Repeat("chunk of data ", 5000)
		before := e.origin.count()
		// An io.Reader without a length goes out chunked.
		resp, err = c.Post(e.url("/upload/chunked"), "text/plain", io.MultiReader(strings.NewReader(payload)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || string(e.origin.all()[before].Body) != payload {
			t.Fatalf("status %d, origin body intact: %v", resp.StatusCode, string(e.origin.all()[before].Body) == payload)
		}
	})
	t.Run("agent name from proxy credentials", func(t *testing.T) {
		u, _ := url.Parse(e.up.Gate)
		u.User = url.UserPassword("claude-1", "s3cret-token")
		cl := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u)}}
		resp, err := cl.Get(e.url("/agent"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		rec := e.recordFor(resp.Header.Get(gate.HeaderRequest))
		if rec["agent"] != "claude-1" {
			t.Errorf("agent = %v", rec["agent"])
		}
		if last := e.origin.all()[e.origin.count()-1]; last.Header.Get("Proxy-Authorization") != "" {
			t.Error("Proxy-Authorization reached the origin")
		}
	})
	t.Run("CONNECT free at the domain", func(t *testing.T) {
		u, _ := url.Parse(e.up.Gate)
		pool := x509.NewCertPool()
		pool.AddCert(e.tlsOrigin.Certificate())
		cl := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u),
			TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "example.com"}}}
		resp, err := cl.Get(fmt.Sprintf("https://tunnel.test:%d/inside", e.tlsPort))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "origin saw GET /inside (0 bytes)" {
			t.Fatalf("status %d body %q", resp.StatusCode, body)
		}
		cl.CloseIdleConnections()
		// The tunnel's record is written when the tunnel closes.
		testkit.WaitFor(t, 5*time.Second, "connect record", func() bool {
			for _, m := range e.auditRecords() {
				if m["event"] == "connect" && m["rule"] == "tunnel-ok" && m["verdict"] == "FREE" && m["bytes_out"].(float64) > 0 {
					return true
				}
			}
			return false
		})
	})
}

func TestCoreRefusals(t *testing.T) {
	e := startCore(t)
	cases := []struct {
		name   string
		args   []string
		status int
		code   string
		rule   string
	}{
		{"deny list", []string{fmt.Sprintf("http://denied.test:%d/x", e.port)}, 403, "E_RULE", "deny"},
		{"deny rule", []string{e.url("/admin/users")}, 403, "E_RULE", "no-admin"},
		{"IP literal", []string{fmt.Sprintf("http://127.0.0.1:%d/x", e.port)}, 403, "E_FLOOR", "floor:ip-literal"},
		{"IP literal, decimal", []string{fmt.Sprintf("http://2130706433:%d/x", e.port)}, 403, "E_FLOOR", "floor:ip-literal"},
		{"private address", []string{fmt.Sprintf("http://private.test:%d/x", e.port)}, 403, "E_FLOOR", "floor:address"},
		{"port not allowed", []string{"http://origin.test:8081/x"}, 403, "E_FLOOR", "floor:port"},
		{"single label", []string{fmt.Sprintf("http://intranet:%d/x", e.port)}, 403, "E_FLOOR", "floor:single-label"},
		{"metadata", []string{"http://metadata.google.internal/computeMetadata/v1/"}, 403, "E_FLOOR", "floor:metadata"},
		{"ask held past the hold", []string{"-X", "DELETE", e.url("/thing")}, 403, "E_PENDING", "ask-delete"},
		{"write to trusted asks", []string{"-X", "PATCH", e.url("/thing")}, 403, "E_PENDING", "default"},
		{"CONNECT port not allowed", []string{"-p", "https://origin.test:1234/"}, 403, "E_FLOOR", "floor:port"},
		{"CONNECT asks at the domain", []string{"-p", fmt.Sprintf("https://asktunnel.test:%d/", e.tlsPort)}, 403, "E_PENDING", "default"},
		// Decrypted, the refusal of the CONNECT answers the first request inside the tunnel.
		{"CONNECT deny list", []string{"--cacert", e.up.CACert, "https://denied.test/"}, 403, "E_RULE", "deny"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := e.origin.count()
			status, h, body := e.curlStatus(t, c.args...)
			if status != c.status || h.Get(gate.HeaderCode) != c.code || h.Get(gate.HeaderRule) != c.rule {
				t.Fatalf("got %d %q rule %q; want %d %q rule %q\n%s", status, h.Get(gate.HeaderCode), h.Get(gate.HeaderRule), c.status, c.code, c.rule, body)
			}
			if !strings.Contains(body, "What to do:") || !strings.Contains(body, c.code) {
				t.Errorf("body does not tell the agent what to do:\n%s", body)
			}
			if e.origin.count() != before {
				t.Errorf("the origin was reached")
			}
			rec := e.recordFor(h.Get(gate.HeaderRequest))
			if rec["code"] != c.code || rec["status"] != float64(c.status) || rec["rule"] != c.rule {
				t.Errorf("audit record %v", rec)
			}
		})
	}
}

// curlStatus is curl for requests that may be refused, CONNECTs included: curl reports a failed
// CONNECT through its exit code, so the status comes from the headers it saved.
func (e *coreEnv) curlStatus(t *testing.T, args ...string) (int, http.Header, string) {
	t.Helper()
	bin := requireTool(t, "curl")
	dir := t.TempDir()
	hdr := filepath.Join(dir, "h")
	full := append([]string{"-sS", "-x", e.up.Gate, "-D", hdr, "-o", filepath.Join(dir, "b"), "--max-time", "10"}, args...)
	exec.Command(bin, full...).Run()
	raw, _ := os.ReadFile(hdr)
	body, _ := os.ReadFile(filepath.Join(dir, "b"))
	blocks := strings.Split(strings.TrimSpace(string(raw)), "\r\n\r\n")
	// curl writes an HTTP/2 answer's status line as "HTTP/2 403", which http.ReadResponse
	// does not take for a version.
	last, _ := strings.CutPrefix(blocks[len(blocks)-1], "HTTP/2 ")
	if last != blocks[len(blocks)-1] {
		last = "HTTP/2.0 " + last
	}
	resp, err := http.ReadResponse(bufioReader(last+"\r\n\r\n"), nil)
	if err != nil {
		t.Fatalf("curl %v headers %q: %v", args, raw, err)
	}
	if len(body) == 0 && resp.StatusCode >= 400 {
		// curl does not save the body of a refused CONNECT: ask again over a raw socket.
		body = []byte(e.rawBody(t, args[len(args)-1]))
	}
	return resp.StatusCode, resp.Header, string(body)
}

func (e *coreEnv) rawBody(t *testing.T, target string) string {
	u, err := url.Parse(target)
	if err != nil || u.Scheme != "https" {
		return ""
	}
	host := u.Host
	if u.Port() == "" {
		host += ":443"
	}
	out := rawExchange(t, e.up.Listen, "CONNECT "+host+" HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
	_, body, _ := strings.Cut(out, "\r\n\r\n")
	return body
}

func TestCoreAuditHasOneRecordPerRequest(t *testing.T) {
	e := startCore(t)
	c := e.client()
	ids := map[string]string{}
	for _, p := range []string{"/a", "/admin/x", "/b"} {
		resp, err := c.Get(e.url(p))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		ids[resp.Header.Get(gate.HeaderRequest)] = p
	}
	testkit.WaitFor(t, 5*time.Second, "three records", func() bool {
		n := 0
		for _, m := range e.auditRecords() {
			if _, ok := ids[m["id"].(string)]; ok {
				n++
			}
		}
		return n == 3
	})
	counts := map[string]int{}
	for _, m := range e.auditRecords() {
		counts[m["id"].(string)]++
	}
	for id := range ids {
		if counts[id] != 1 {
			t.Errorf("request %s has %d records", id, counts[id])
		}
	}
	out, err := exec.Command(filepath.Join(binDir, "lockhttp"), "verify-log", e.up.AuditDir).CombinedOutput()
	if err != nil {
		t.Errorf("verify-log: %v\n%s", err, out)
	}
}

func TestCorePolicyReload(t *testing.T) {
	e := startCore(t)
	c := e.client()
	get := func(path string) (int, string) {
		resp, err := c.Get(e.url(path))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get(gate.HeaderRule)
	}
	if s, _ := get("/reload"); s != 200 {
		t.Fatalf("before the edit: %d", s)
	}
	orig, _ := os.ReadFile(e.policy)
	edited := strings.Replace(string(orig), "[floor]", "[[rule]]\nname = \"no-reload\"\nhosts = [\"origin.test\"]\npaths = [\"/reload\"]\nverdict = \"deny\"\n\n[floor]", 1)
	if err := os.WriteFile(e.policy, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	editedAt := time.Now()
	testkit.WaitFor(t, 3*time.Second, "the edit to take effect", func() bool {
		s, rule := get("/reload")
		return s == 403 && rule == "no-reload"
	})
	t.Logf("the edit took effect after %s", time.Since(editedAt))

	// An invalid edit keeps the policy: wait until the console has rejected it and the gate has
	// asked the console again since, then check the decisions.
	gateStatus := func() gate.Status {
		var st gate.Status
		resp, err := unixsock.Client(e.up.GateSocket, 2*time.Second).Get("http://unix/status")
		if err == nil {
			json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
		}
		return st
	}
	versionBefore := gateStatus().PolicyVersion
	bad := strings.Replace(edited, `verdict = "deny"`, `verdict = "nope"`, 1)
	if err := os.WriteFile(e.policy, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	written := time.Now()
	testkit.WaitFor(t, 5*time.Second, "the console to reject the file", func() bool {
		var st struct {
			FileError string `json:"file_error"`
		}
		resp, err := unixsock.Client(e.up.ConsoleSocket, 2*time.Second).Get("http://unix/status")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		json.NewDecoder(resp.Body).Decode(&st)
		return strings.Contains(st.FileError, `verdict "nope" is unknown`)
	})
	testkit.WaitFor(t, 5*time.Second, "the gate to poll again", func() bool {
		return gateStatus().ConsoleChecked.After(written.Add(100 * time.Millisecond))
	})
	if v := gateStatus().PolicyVersion; v != versionBefore {
		t.Fatalf("policy version changed from %s to %s after an invalid edit", versionBefore, v)
	}
	if s, rule := get("/reload"); s != 403 || rule != "no-reload" {
		t.Fatalf("after the invalid edit: %d %q", s, rule)
	}
}
