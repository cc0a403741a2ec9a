package e2e

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
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

	"github.com/lockhttp/lockhttp/internal/claudeapi"
	"github.com/lockhttp/lockhttp/internal/gate"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

var (
	e2eGitHubToken = "ghp_" + strings.Repeat("k3M9", 9)
	e2eInjected    = "injected-" + strings.Repeat("Vx4", 10)
	e2eAntKey      = "sk-ant-api03-" + strings.Repeat("Lm8_", 20) + "QQ"
	e2eOtherAnt    = "sk-ant-api03-" + strings.Repeat("Rt2-", 20) + "ZZ"
)

const secretsPolicy = `version = 1
trusted = ["origin.test", "api.example.test", "other.test"]

[[rule]]
name = "example-writes"
hosts = ["api.example.test", "origin.test"]
methods = ["POST"]
verdict = "free"

# Its origin is plain HTTP on the loopback: http = true is the operator's word that the key may
# cross that network in clear text.
[[inject]]
name = "example-key"
hosts = ["api.example.test"]
header = "Authorization"
secret = "example"
format = "Bearer {secret}"
http = true

[[inject]]
name = "missing"
hosts = ["other.test"]
header = "X-Key"
secret = "not-in-the-file"

[claude]
credentials = "%[2]s"

[floor]
allow_cidrs = ["127.0.0.1/32"]
allow_ports = [%[1]s]

[floor.hosts]
"origin.test" = "127.0.0.1"
"api.example.test" = "127.0.0.1"
"other.test" = "127.0.0.1"
"api.anthropic.com" = "127.0.0.1"

[sources]
local = ["127.0.0.0/8"]

[settings]
hold = "1s"
`

type secretsEnv struct {
	*running
	origin  *originRecorder
	port    int
	tlsPort int
	caPool  *x509.CertPool
}

func startSecrets(t *testing.T) *secretsEnv {
	t.Helper()
	pki := newTestPKI(t)
	rec := &originRecorder{}
	plain := httptest.NewServer(rec)
	t.Cleanup(plain.Close)
	port := plain.Listener.Addr().(*net.TCPAddr).Port
	_, tlsPort := tlsOrigin(t, rec, pki.leaf(t, []string{"api.anthropic.com"}, time.Now().Add(time.Hour), false))
	dir := t.TempDir()
	secretsFile := filepath.Join(dir, "gate-secrets.toml")
	os.WriteFile(secretsFile, []byte("version = 1\n[secrets]\nexample = \""+e2eInjected+"\"\n"), 0o600)
	creds := filepath.Join(dir, "claude-credentials.toml")
	os.WriteFile(creds, []byte(fmt.Sprintf("version = 1\n[containers]\nlocal = [\"sha256:%s\"]\n", claudeapi.HashCredential(e2eAntKey))), 0o600)
	pol := fmt.Sprintf(secretsPolicy, fmt.Sprintf("%d, %d", port, tlsPort), creds)
	r := startStackWith(t, pol, []string{"--secrets", secretsFile, "--roots", pki.rootPEM}, nil)
	data, _ := os.ReadFile(r.up.CACert)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(data)
	return &secretsEnv{running: r, origin: rec, port: port, tlsPort: tlsPort, caPool: pool}
}

func (e *secretsEnv) do(t *testing.T, method, rawURL string, h http.Header, body string) (*http.Response, string) {
	t.Helper()
	u, _ := url.Parse(e.up.Gate)
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u), TLSClientConfig: &tls.Config{RootCAs: e.caPool}}, Timeout: 20 * time.Second}
	req, _ := http.NewRequest(method, rawURL, strings.NewReader(body))
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// noLeak checks that a value appears in none of the places the gate writes a request down.
func (e *secretsEnv) noLeak(t *testing.T, what string, values ...string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(e.up.AuditDir, "*.jsonl"))
	cfiles, _ := filepath.Glob(filepath.Join(e.up.ConsoleAudit, "*.jsonl"))
	logs, _ := filepath.Glob(filepath.Join(e.up.Logs, "*.log"))
	for _, f := range append(append(append(files, cfiles...), logs...), filepath.Join(e.state, "hub.json")) {
		data, _ := os.ReadFile(f)
		for _, v := range values {
			if bytes.Contains(data, []byte(v)) {
				t.Errorf("%s: %s contains the value", what, f)
			}
		}
	}
}

func TestInjectionAndSecretEgress(t *testing.T) {
	e := startSecrets(t)
	t.Run("the injected secret reaches its host, and the agent never sees it", func(t *testing.T) {
		before := e.origin.count()
		resp, body := e.do(t, "POST", fmt.Sprintf("http://api.example.test:%d/v1/items", e.port), nil, "x=1")
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		got := e.origin.all()[before]
		if got.Header.Get("Authorization") != "Bearer "+e2eInjected {
			t.Fatalf("the origin got Authorization %q", got.Header.Get("Authorization"))
		}
		if strings.Contains(body, e2eInjected) || strings.Contains(fmt.Sprint(resp.Header), e2eInjected) {
			t.Fatal("the agent's answer holds the secret")
		}
	})
	t.Run("an agent-sent Authorization is replaced", func(t *testing.T) {
		before := e.origin.count()
		e.do(t, "POST", fmt.Sprintf("http://api.example.test:%d/v1/items", e.port), http.Header{"Authorization": {"Bearer agent-made"}}, "x=1")
		if got := e.origin.all()[before].Header.Values("Authorization"); len(got) != 1 || got[0] != "Bearer "+e2eInjected {
			t.Fatalf("the origin got %q", got)
		}
	})
	t.Run("another host never gets it", func(t *testing.T) {
		before := e.origin.count()
		resp, _ := e.do(t, "POST", fmt.Sprintf("http://origin.test:%d/v1/items", e.port), nil, "x=1")
		if resp.StatusCode != 200 || e.origin.all()[before].Header.Get("Authorization") != "" {
			t.Fatalf("%d, Authorization %q", resp.StatusCode, e.origin.all()[before].Header.Get("Authorization"))
		}
	})
	t.Run("a spoofed Host never gets it", func(t *testing.T) {
		before := e.origin.count()
		out := rawExchange(t, e.up.Listen, fmt.Sprintf("POST http://origin.test:%d/v1 HTTP/1.1\r\nHost: api.example.test:%d\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx", e.port, e.port))
		if !strings.Contains(out, "framing:host-mismatch") || e.origin.count() != before {
			t.Fatalf("spoofed Host: %q", out)
		}
	})
	t.Run("a missing secret is E_INJECT", func(t *testing.T) {
		before := e.origin.count()
		resp, body := e.do(t, "GET", fmt.Sprintf("https://other.test:%d/x", e.tlsPort), nil, "")
		if resp.StatusCode != 403 || resp.Header.Get(gate.HeaderCode) != "E_INJECT" || !strings.Contains(body, "secrets file lacks it") || e.origin.count() != before {
			t.Fatalf("%d %s %s", resp.StatusCode, resp.Header.Get(gate.HeaderCode), body)
		}
	})
	t.Run("plain http:// to a host whose rule injects over https only is E_INJECT", func(t *testing.T) {
		before := e.origin.count()
		resp, body := e.do(t, "GET", fmt.Sprintf("http://other.test:%d/x", e.port), nil, "")
		if resp.StatusCode != 403 || resp.Header.Get(gate.HeaderCode) != "E_INJECT" || resp.Header.Get(gate.HeaderRule) != "inject:missing" ||
			!strings.Contains(body, "over https only") || e.origin.count() != before {
			t.Fatalf("%d %s %s", resp.StatusCode, resp.Header.Get(gate.HeaderCode), body)
		}
	})
	t.Run("the agent sending the injected value is refused", func(t *testing.T) {
		resp, body := e.do(t, "POST", fmt.Sprintf("http://origin.test:%d/leak", e.port), nil, "stolen="+e2eInjected)
		if resp.StatusCode != 403 || resp.Header.Get(gate.HeaderCode) != "E_SECRET_EGRESS" || strings.Contains(body, e2eInjected) {
			t.Fatalf("%d %s %s", resp.StatusCode, resp.Header.Get(gate.HeaderCode), body)
		}
	})
	t.Run("a GitHub token to another host is refused, and shown nowhere", func(t *testing.T) {
		before := e.origin.count()
		for _, c := range []struct {
			name string
			h    http.Header
			url  string
			body string
		}{
			{"header", http.Header{"Authorization": {"token " + e2eGitHubToken}}, "/h", ""},
			{"query", nil, "/q?token=" + e2eGitHubToken, ""},
			{"json", http.Header{"Content-Type": {"application/json"}}, "/j", `{"t":"` + e2eGitHubToken + `"}`},
		} {
			resp, body := e.do(t, "POST", fmt.Sprintf("http://origin.test:%d%s", e.port, c.url), c.h, c.body)
			if resp.StatusCode != 403 || resp.Header.Get(gate.HeaderCode) != "E_SECRET_EGRESS" || !strings.Contains(body, "github") {
				t.Fatalf("%s: %d %s %s", c.name, resp.StatusCode, resp.Header.Get(gate.HeaderCode), body)
			}
			if strings.Contains(body, e2eGitHubToken) || strings.Contains(body, e2eGitHubToken[4:20]) {
				t.Fatalf("%s: the refusal shows the token", c.name)
			}
		}
		if e.origin.count() != before {
			t.Fatal("a refused request reached the origin")
		}
	})
	// Give the audit a moment to reach the disk, then look everywhere.
	testkit.WaitFor(t, 5*time.Second, "the audit written", func() bool { return len(e.auditRecords()) > 5 })
	e.noLeak(t, "credentials", e2eInjected, e2eGitHubToken, e2eGitHubToken[4:24])
}

// TestClaudeAPIThroughTheGate sends Messages API bodies as the SDKs write them through a
// decrypted tunnel to a stand-in for api.anthropic.com, and compares with lockhttp explain.
func TestClaudeAPIThroughTheGate(t *testing.T) {
	e := startSecrets(t)
	messages := fmt.Sprintf("https://api.anthropic.com:%d/v1/messages?beta=true", e.tlsPort)
	json := http.Header{"Content-Type": {"application/json"}, "X-Api-Key": {e2eAntKey}, "Anthropic-Version": {"2023-06-01"}}
	cases := []struct {
		name, method, url, body string
		h                       http.Header
		status                  int
		code                    string
	}{
		{"plain message", "POST", messages, `{"model":"claude-sonnet-4-5","max_tokens":1024,"messages":[{"role":"user","content":"Hello"}]}`, json, 200, ""},
		{"streaming with a custom tool named web_fetch", "POST", messages, `{"model":"m","max_tokens":10,"stream":true,"tools":[{"name":"web_fetch","description":"x","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"hi"}]}`, json, 200, ""},
		{"web_search is free", "POST", messages, `{"model":"m","max_tokens":10,"tools":[{"type":"web_search_20250305","name":"web_search"}],"messages":[]}`, json, 200, ""},
		{"web_fetch asks", "POST", messages, `{"model":"m","max_tokens":10,"tools":[{"type":"web_fetch_20250910","name":"web_fetch"}],"messages":[]}`, json, 403, "E_PENDING"},
		{"mcp_servers ask", "POST", messages, `{"model":"m","max_tokens":10,"mcp_servers":[{"type":"url","url":"https://mcp.example","name":"x"}],"tools":[{"type":"mcp_toolset","mcp_server_name":"x"}],"messages":[]}`, json, 403, "E_PENDING"},
		{"code execution with a container asks", "POST", messages, `{"model":"m","max_tokens":10,"container":"c1","tools":[{"type":"code_execution_20250825","name":"code_execution"}],"messages":[]}`, json, 403, "E_PENDING"},
		{"a duplicate tools key asks", "POST", messages, `{"model":"m","tools":[],"tools":[{"type":"web_fetch_20250910","name":"f"}],"messages":[]}`, json, 403, "E_PENDING"},
		{"count_tokens", "POST", fmt.Sprintf("https://api.anthropic.com:%d/v1/messages/count_tokens", e.tlsPort), `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, json, 200, ""},
		{"batches ask", "POST", fmt.Sprintf("https://api.anthropic.com:%d/v1/messages/batches", e.tlsPort), `{"requests":[]}`, json, 403, "E_PENDING"},
		{"files ask", "GET", fmt.Sprintf("https://api.anthropic.com:%d/v1/files", e.tlsPort), "", json, 403, "E_PENDING"},
		{"models are free", "GET", fmt.Sprintf("https://api.anthropic.com:%d/v1/models", e.tlsPort), "", json, 200, ""},
		{"a key that is not the container's asks", "POST", messages, `{"model":"m","messages":[]}`, http.Header{"Content-Type": {"application/json"}, "X-Api-Key": {e2eOtherAnt}}, 403, "E_PENDING"},
		{"two keys are refused", "POST", messages, `{"model":"m","messages":[]}`, http.Header{"Content-Type": {"application/json"}, "X-Api-Key": {e2eOtherAnt}, "Authorization": {"Bearer " + e2eAntKey}}, 403, "E_SECRET_EGRESS"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, body := e.do(t, c.method, c.url, c.h, c.body)
			if resp.StatusCode != c.status || resp.Header.Get(gate.HeaderCode) != c.code {
				t.Fatalf("got %d %q; want %d %q\n%s", resp.StatusCode, resp.Header.Get(gate.HeaderCode), c.status, c.code, body)
			}
			// lockhttp explain decides the same.
			u, _ := url.Parse(c.url)
			var raw strings.Builder
			fmt.Fprintf(&raw, "%s %s HTTP/1.1\r\nHost: %s\r\n", c.method, c.url, u.Host)
			for k, vs := range c.h {
				for _, v := range vs {
					fmt.Fprintf(&raw, "%s: %s\r\n", k, v)
				}
			}
			fmt.Fprintf(&raw, "Content-Length: %d\r\n\r\n%s", len(c.body), c.body)
			cmd := exec.Command(filepath.Join(binDir, "lockhttp"), "explain", "--policy", e.policy, "-")
			cmd.Stdin = strings.NewReader(raw.String())
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("explain: %v", err)
			}
			want := map[string]string{"": `"verdict":"FREE"`, "E_PENDING": `"verdict":"ASK"`, "E_SECRET_EGRESS": `"code":"E_SECRET_EGRESS"`}[c.code]
			if !strings.Contains(string(out), want) {
				t.Errorf("explain says %s; want %s", out, want)
			}
		})
	}
	// The ticket of an MCP request is red and says why.
	found := false
	for _, tk := range (&askEnv{running: e.running}).tickets(t) {
		if strings.Contains(tk.Reason, "mcp_servers") {
			found = true
			if !tk.Red || !strings.Contains(tk.Warning, "mcp") || !tk.NeverAuto {
				t.Errorf("the MCP ticket is not red, NeverAuto, or has no warning: %+v", tk)
			}
		}
	}
	if !found {
		t.Error("no ticket for the MCP request")
	}
	e.noLeak(t, "Claude keys", e2eAntKey, e2eOtherAnt)
}
