package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
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
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lockhttp/lockhttp/internal/gate"
	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// The MCP tests run the official Go SDK's servers and clients through the real stack: the
// servers behind a TLS origin on loopback (mcp.test), the clients through the gate over
// HTTP/1.1 and over HTTP/2 inside the decrypted tunnel, and each test holds the servers' own
// count of the calls they ran. The policy declares two endpoints of one host: files (/mcp),
// where read is free, delete denied and any other tool asks, and admin (/admin), where every
// tool is denied.
//
// A refused call reaches the client as a JSON-RPC error under its id (code -32010, answered
// 200 with X-LockHTTP-Code), which the SDK's client returns as the call's error; tools/list
// answers are cut to the tools the container may call (docs/mcp.md, "The answers").

const mcpPolicy = `version = 1

[[mcp]]
name = "files"
host = "mcp.test"
path = "/mcp"

[[mcp.rule]]
name = "reads"
tools = ["read"]
verdict = "free"

[[mcp.rule]]
name = "no-delete"
tools = ["delete"]
verdict = "deny"
%[2]s
[[mcp]]
name = "admin"
host = "mcp.test"
path = "/admin"

[[mcp.rule]]
name = "none"
tools = ["*"]
verdict = "deny"

[floor]
allow_cidrs = ["127.0.0.1/32"]
allow_ports = [%[1]d]

[floor.hosts]
"mcp.test" = "127.0.0.1"

[sources]
local = ["127.0.0.0/8"]

[settings]
hold = "1s"
`

// mcpServers are the SDK servers of one endpoint, one a protocol revision and answer form
// (chosen by the URL's query: rev, sse), and what they ran.
type mcpServers struct {
	mu       sync.Mutex
	handlers map[string]http.Handler
	ran      map[string]int    // tool → calls run
	args     map[string][]byte // tool → the arguments of its last call, as the server got them
}

func newMCPServers() *mcpServers {
	return &mcpServers{handlers: map[string]http.Handler{}, ran: map[string]int{}, args: map[string][]byte{}}
}

func (s *mcpServers) count(tool string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ran[tool]
}

// ServeHTTP hands the request to the server of its revision and answer form.
func (s *mcpServers) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rev, sse := r.URL.Query().Get("rev"), r.URL.Query().Get("sse") == "1"
	if rev == "" {
		rev = sdk.SupportedProtocolVersions()[len(sdk.SupportedProtocolVersions())-1]
	}
	key := fmt.Sprint(rev, sse)
	s.mu.Lock()
	h := s.handlers[key]
	if h == nil {
		srv := sdk.NewServer(&sdk.Implementation{Name: "mcp-e2e", Version: "1"}, &sdk.ServerOptions{SupportedProtocolVersions: []string{rev}})
		for _, name := range []string{"read", "delete", "write"} {
			srv.AddTool(&sdk.Tool{Name: name, Description: "The " + name + " tool.", InputSchema: json.RawMessage(`{"type":"object"}`)},
				func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
					s.mu.Lock()
					s.ran[req.Params.Name]++
					s.args[req.Params.Name] = append([]byte(nil), req.Params.Arguments...)
					s.mu.Unlock()
					return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "ran " + req.Params.Name}}}, nil
				})
		}
		// The 2026-07-28 revision has no sessions: the SDK serves it from a stateless handler.
		// The server is mcp.test to its clients, served on loopback: the SDK's protection of
		// loopback servers from names other than localhost is off.
		h = sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv },
			&sdk.StreamableHTTPOptions{JSONResponse: !sse, Stateless: rev >= "2026-07-28", DisableLocalhostProtection: true})
		s.handlers[key] = h
	}
	s.mu.Unlock()
	h.ServeHTTP(w, r)
}

type mcpEnv struct {
	*running
	port         int
	pool         *x509.CertPool // the gate's CA
	files, admin *mcpServers
}

// startMCP runs the stack with the MCP origin; extra is TOML added to the files endpoint
// (rules).
func startMCP(t *testing.T, extra string) *mcpEnv {
	t.Helper()
	pki := newTestPKI(t)
	e := &mcpEnv{files: newMCPServers(), admin: newMCPServers()}
	mux := http.NewServeMux()
	mux.Handle("/mcp", e.files)
	mux.Handle("/admin", e.admin)
	s := httptest.NewUnstartedServer(mux)
	s.TLS = &tls.Config{Certificates: []tls.Certificate{pki.leaf(t, []string{"mcp.test"}, time.Now().Add(24*time.Hour), false)}}
	s.StartTLS()
	t.Cleanup(s.Close)
	e.port = s.Listener.Addr().(*net.TCPAddr).Port
	e.running = startStackWith(t, fmt.Sprintf(mcpPolicy, e.port, extra), []string{"--roots", pki.rootPEM}, nil)
	e.pool = gatePool(t, e.running)
	return e
}

func gatePool(t *testing.T, r *running) *x509.CertPool {
	t.Helper()
	data, err := os.ReadFile(r.up.CACert)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(data)
	return pool
}

// protoSeen is a RoundTripper that records the protocol of every answer: the test's proof that
// the client spoke HTTP/2 (or HTTP/1.1) to the gate.
// It keeps the gate's last refusal too (X-LockHTTP-Code and -Rule), which the SDK's error does
// not show.
type protoSeen struct {
	next   http.RoundTripper
	h1, h2 atomic.Int64
	mu     sync.Mutex
	code   string // the last refusal's code and rule
	rule   string
}

func (p *protoSeen) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := p.next.RoundTrip(r)
	if err == nil {
		if resp.ProtoMajor == 2 {
			p.h2.Add(1)
		} else {
			p.h1.Add(1)
		}
		if c := resp.Header.Get(gate.HeaderCode); c != "" {
			p.mu.Lock()
			p.code, p.rule = c, resp.Header.Get(gate.HeaderRule)
			p.mu.Unlock()
		}
	}
	return resp, err
}

// refused is the gate's last refusal, "CODE RULE".
func (p *protoSeen) refused() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.code + " " + p.rule
}

// httpClient is a client of the gate as an agent's: the gate as its proxy, the gate's CA
// trusted, HTTP/2 offered or HTTP/1.1 alone.
func (e *mcpEnv) httpClient(h2 bool) (*http.Client, *protoSeen) {
	proxy, _ := url.Parse("http://" + e.up.Listen)
	tc := &tls.Config{RootCAs: e.pool}
	if !h2 {
		tc.NextProtos = []string{"http/1.1"}
	}
	ps := &protoSeen{next: &http.Transport{Proxy: http.ProxyURL(proxy), TLSClientConfig: tc, ForceAttemptHTTP2: h2}}
	return &http.Client{Transport: ps, Timeout: 30 * time.Second}, ps
}

func (e *mcpEnv) url(path, rev string, sse bool) string {
	u := fmt.Sprintf("https://mcp.test:%d%s?rev=%s", e.port, path, rev)
	if sse {
		u += "&sse=1"
	}
	return u
}

// session connects an SDK client of revision rev to the endpoint at path through the gate.
func (e *mcpEnv) session(t *testing.T, ctx context.Context, path, rev string, sse, h2 bool) (*sdk.ClientSession, *protoSeen) {
	t.Helper()
	hc, ps := e.httpClient(h2)
	client := sdk.NewClient(&sdk.Implementation{Name: "mcp-e2e-client", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: e.url(path, rev, sse), HTTPClient: hc, MaxRetries: -1},
		&sdk.ClientSessionOptions{ProtocolVersion: rev})
	if err != nil {
		t.Fatalf("connecting to %s through the gate: %v", path, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs, ps
}

var protos = []struct {
	name string
	h2   bool
}{{"http1", false}, {"http2", true}}

// TestMCPThroughTheGate: every protocol revision the SDK speaks, JSON and event-stream answers,
// over HTTP/1.1 and HTTP/2: a call a free rule lists runs once; a call a deny rule lists never
// runs and the client gets an error; the same tool on the endpoint that denies every tool
// never runs.
func TestMCPThroughTheGate(t *testing.T) {
	e := startMCP(t, "")
	versions := sdk.SupportedProtocolVersions()
	if len(versions) < 5 {
		t.Fatalf("the SDK speaks %v; this test expects 2024-11-05 to 2026-07-28", versions)
	}
	for _, p := range protos {
		for _, rev := range versions {
			for _, sse := range []bool{false, true} {
				name := fmt.Sprintf("%s/%s/json", p.name, rev)
				if sse {
					name = fmt.Sprintf("%s/%s/sse", p.name, rev)
				}
				t.Run(name, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					cs, ps := e.session(t, ctx, "/mcp", rev, sse, p.h2)
					if got := cs.InitializeResult().ProtocolVersion; got != rev {
						t.Fatalf("the session speaks %s, want %s", got, rev)
					}
					list, err := cs.ListTools(ctx, nil)
					if err != nil || len(list.Tools) != 2 { // delete is hidden
						t.Fatalf("tools/list: %v %+v", err, list)
					}
					reads, deletes := e.files.count("read"), e.files.count("delete")
					res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "read", Arguments: map[string]any{"path": "/notes/" + name}})
					if err != nil || res.IsError {
						t.Fatalf("calling read: %v %+v", err, res)
					}
					if got := e.files.count("read"); got != reads+1 {
						t.Errorf("the server ran read %d times, want %d", got, reads+1)
					}
					_, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "delete", Arguments: map[string]any{"path": "/notes"}})
					if !isRefusal(err) || ps.refused() != "E_RULE mcp:files:no-delete" {
						t.Errorf("calling delete: %v (the gate's refusal %q), want the gate's refusal E_RULE by mcp:files:no-delete", err, ps.refused())
					}
					if got := e.files.count("delete"); got != deletes {
						t.Errorf("the server ran delete %d times, want %d", got-deletes, 0)
					}
					if p.h2 && (ps.h2.Load() == 0 || ps.h1.Load() > 0) || !p.h2 && (ps.h1.Load() == 0 || ps.h2.Load() > 0) {
						t.Errorf("answers over HTTP/1.1: %d, HTTP/2: %d", ps.h1.Load(), ps.h2.Load())
					}
				})
			}
		}
	}
	// The same tool on the other endpoint follows that endpoint's rule: refused.
	for _, p := range protos {
		t.Run(p.name+"/admin", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cs, ps := e.session(t, ctx, "/admin", versions[len(versions)-2], false, p.h2)
			_, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "read", Arguments: map[string]any{"path": "/a"}})
			if err == nil || ps.refused() != "E_RULE mcp:admin:none" {
				t.Errorf("calling read on admin: %v (the gate's refusal %q), want E_RULE by mcp:admin:none", err, ps.refused())
			}
		})
	}
	if got := e.admin.count("read"); got != 0 {
		t.Errorf("the admin endpoint ran read %d times", got)
	}
	// The audit names the rules: the free call by the rule that listed it, the refusals by
	// theirs.
	rules := map[string]int{}
	for _, rec := range e.auditRecords() {
		if r, ok := rec["rule"].(string); ok {
			rules[r]++
		}
	}
	if rules["mcp:files:reads"] == 0 || rules["mcp:files:no-delete"] == 0 || rules["mcp:admin:none"] != len(protos) || rules["mcp:protocol"] == 0 {
		t.Errorf("audit rules %v", rules)
	}
}

// rawMCP posts MCP bodies of its own making through the gate: what no SDK client writes.
type rawMCP struct {
	hc      *http.Client
	url     string
	session string
}

type rawAnswer struct {
	status     int
	code, rule string
	body       string
}

func (c *rawMCP) post(t *testing.T, body string, header http.Header) rawAnswer {
	t.Helper()
	req, _ := http.NewRequest("POST", c.url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if c.session != "" {
		req.Header.Set("Mcp-Session-Id", c.session)
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", c.url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if s := resp.Header.Get("Mcp-Session-Id"); s != "" {
		c.session = s
	}
	return rawAnswer{resp.StatusCode, resp.Header.Get(gate.HeaderCode), resp.Header.Get(gate.HeaderRule), string(data)}
}

// rawSession opens a session of the 2025-06-18 revision (initialize, then the notification) at
// the files endpoint.
func (e *mcpEnv) rawSession(t *testing.T, h2 bool) *rawMCP {
	t.Helper()
	hc, _ := e.httpClient(h2)
	c := &rawMCP{hc: hc, url: e.url("/mcp", "2025-06-18", false)}
	a := c.post(t, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`, nil)
	if a.status != 200 || c.session == "" {
		t.Fatalf("initialize: %+v", a)
	}
	if a := c.post(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, nil); a.status != 202 {
		t.Fatalf("notifications/initialized: %+v", a)
	}
	return c
}

// TestMCPApprovalIsOfTheCall: an approval of a call with arguments A frees one call with A,
// whatever its id and however A is written (re-spaced, keys reordered); the retry after it asks
// again, and A with one value changed asks. The ticket shows the server, the tool, the
// arguments and the call's hash.
func TestMCPApprovalIsOfTheCall(t *testing.T) {
	e := startMCP(t, "")
	ask := &askEnv{running: e.running}
	rev := "2025-06-18"
	for i, p := range protos {
		t.Run(p.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			path := fmt.Sprintf("/notes/%d.txt", i)
			args := map[string]any{"path": path, "text": "hello", "n": 2}
			// call calls write with args from a new session (so a new id), and says how the gate
			// refused it ("" when it ran).
			call := func() string {
				cs, ps := e.session(t, ctx, "/mcp", rev, false, p.h2)
				if _, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "write", Arguments: args}); err != nil {
					return ps.refused()
				}
				return ""
			}
			const pending = "E_PENDING mcp:unlisted"
			base := e.files.count("write")
			// The call asks; no one answers within the hold: refused E_PENDING.
			if got := call(); got != pending {
				t.Fatalf("the first call: %q, want %q", got, pending)
			}
			tk := waitMCPTicket(t, ask, path, "")
			if tk.MCP.Server != "files" || tk.MCP.Method != "tools/call" || tk.MCP.Tool != "write" || !strings.HasPrefix(tk.Fingerprint, "mcp1:") ||
				tk.MCP.Arguments != fmt.Sprintf("{\n  \"n\": 2,\n  \"path\": %q,\n  \"text\": \"hello\"\n}", path) {
				t.Fatalf("the ticket's call: %+v fingerprint %s", tk.MCP, tk.Fingerprint)
			}
			if out, err := ask.lox(t, "approve", tk.ID); err != nil || !strings.Contains(out, "mcp: tools/call write on server files, call "+tk.Fingerprint) {
				t.Fatalf("lox approve: %v\n%s", err, out)
			}
			// The same call written otherwise (keys reordered, re-spaced, escaped), with another
			// id: it is the call approved, and runs once.
			raw := e.rawSession(t, p.h2)
			body := fmt.Sprintf("{ \"params\" : { \"arguments\" : { \"text\" : \"hell\\u006f\", \"path\" : %q, \"n\" : 2.0 }, \"name\" : \"write\" },\n \"method\" : \"tools/call\", \"id\" : \"retry-%d\", \"jsonrpc\" : \"2.0\" }", path, i)
			if a := raw.post(t, body, nil); a.status != 200 || !strings.Contains(a.body, "ran write") {
				t.Fatalf("the approved call, written otherwise: %+v", a)
			}
			if got := e.files.count("write"); got != base+1 {
				t.Fatalf("the server ran write %d times after the approval, want 1", got-base)
			}
			// A second retry asks again: the approval was used.
			if got := call(); got != pending {
				t.Fatalf("the second retry: %q, want it to ask again (%q)", got, pending)
			}
			if got := e.files.count("write"); got != base+1 {
				t.Fatalf("the second retry ran: %d runs", got-base)
			}
			// Approved again, the SDK client's own retry (a new session, a new id) runs once.
			tk2 := waitMCPTicket(t, ask, path, tk.ID)
			if tk2.Fingerprint != tk.Fingerprint {
				t.Fatalf("the retry's ticket is keyed by %s, the first by %s", tk2.Fingerprint, tk.Fingerprint)
			}
			if out, err := ask.lox(t, "approve", tk2.ID); err != nil {
				t.Fatalf("lox approve: %v\n%s", err, out)
			}
			if got := call(); got != "" {
				t.Fatalf("the retry after the approval: refused %q", got)
			}
			if got := e.files.count("write"); got != base+2 {
				t.Fatalf("the server ran write %d times, want 2", got-base)
			}
			// One value changed: another call, which asks.
			args["text"] = "goodbye"
			if got := call(); got != pending {
				t.Fatalf("a changed argument: %q, want it to ask (%q)", got, pending)
			}
			if got := e.files.count("write"); got != base+2 {
				t.Fatalf("the changed call ran")
			}
			tk3 := waitMCPTicket(t, ask, path, tk2.ID)
			if tk3.Fingerprint == tk.Fingerprint || !strings.Contains(tk3.MCP.Arguments, "goodbye") {
				t.Fatalf("the changed call's ticket %+v %s", tk3.MCP, tk3.Fingerprint)
			}
		})
	}
}

// waitMCPTicket waits for a pending ticket of an MCP call whose arguments name path, other
// than the ticket skip.
func waitMCPTicket(t *testing.T, ask *askEnv, path, skip string) hub.Ticket {
	t.Helper()
	var found hub.Ticket
	testkit.WaitFor(t, 10*time.Second, "the ticket of the call of "+path, func() bool {
		for _, tk := range ask.tickets(t) {
			if tk.ID != skip && tk.MCP != nil && strings.Contains(tk.MCP.Arguments, path) && tk.Status == hub.Pending {
				found = tk
				return true
			}
		}
		return false
	})
	return found
}

// TestMCPBodiesTheGateReadsOneWay: a batch [read, delete] sent without a version header, and a
// call whose Mcp-Name header names another tool than its body, are refused, and the server runs
// nothing of either.
func TestMCPBodiesTheGateReadsOneWay(t *testing.T) {
	e := startMCP(t, "")
	for _, p := range protos {
		t.Run(p.name, func(t *testing.T) {
			hc, _ := e.httpClient(p.h2)
			reads, deletes := e.files.count("read"), e.files.count("delete")
			c := &rawMCP{hc: hc, url: e.url("/mcp", "2025-03-26", false)}
			batch := `[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read","arguments":{"path":"/a"}}},` +
				`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"delete","arguments":{"path":"/a"}}}]`
			if a := c.post(t, batch, nil); a.status != 200 || a.code != "E_RULE" || a.rule != "mcp:files:no-delete" || !strings.Contains(a.body, `"id":2,"error":{"code":-32010`) {
				t.Errorf("the batch [read, delete]: %+v", a)
			}
			raw := e.rawSession(t, p.h2)
			call := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"delete","arguments":{"path":"/a"}}}`
			if a := raw.post(t, call, http.Header{"Mcp-Method": {"tools/call"}, "Mcp-Name": {"read"}}); a.status != 200 || a.code != "E_FLOOR" || a.rule != "mcp:header" || !strings.Contains(a.body, `"id":3,"error":{"code":-32010`) {
				t.Errorf("Mcp-Name: read on a call of delete: %+v", a)
			}
			if e.files.count("read") != reads || e.files.count("delete") != deletes {
				t.Errorf("the server ran read %d and delete %d times", e.files.count("read")-reads, e.files.count("delete")-deletes)
			}
		})
	}
}

var (
	lenientOnce sync.Once
	lenientBins map[string]string
	lenientErr  error
)

// lenientServers builds the MCP servers of the SDK's older releases in
// testdata/mcplenient: v1.2.0 (go.mod) and v1.3.1 (go131.mod).
func lenientServers(t *testing.T) map[string]string {
	t.Helper()
	lenientOnce.Do(func() {
		lenientBins = map[string]string{}
		for version, modfile := range map[string]string{"v1.2.0": "go.mod", "v1.3.1": "go131.mod"} {
			bin := filepath.Join(binDir, "mcplenient-"+version)
			cmd := exec.Command("go", "build", "-modfile="+modfile, "-o", bin, ".")
			cmd.Dir = filepath.Join("testdata", "mcplenient")
			cmd.Env = append(os.Environ(), "GOFLAGS=-mod=readonly", "GOWORK=off")
			if out, err := cmd.CombinedOutput(); err != nil {
				lenientErr = fmt.Errorf("building the SDK %s server: %v\n%s", version, err, out)
				return
			}
			lenientBins[version] = bin
		}
	})
	if lenientErr != nil {
		t.Fatal(lenientErr)
	}
	return lenientBins
}

// lenient is one running server of an older SDK.
type lenient struct {
	version string
	port    int
	client  *http.Client // straight to the server, trusting its certificate
}

func startLenient(t *testing.T, pki *testPKI, version, bin string) *lenient {
	t.Helper()
	cert := pki.leaf(t, []string{"mcp.test"}, time.Now().Add(24*time.Hour), false)
	dir := t.TempDir()
	keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o600)
	os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600)
	cmd := exec.Command(bin, "-listen", "127.0.0.1:0", "-cert", certPath, "-key", keyPath)
	out := &testkit.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var port int
	testkit.WaitFor(t, 10*time.Second, "the "+version+" server's address", func() bool {
		_, rest, ok := strings.Cut(out.String(), "listening on 127.0.0.1:")
		if ok {
			fmt.Sscanf(rest, "%d", &port)
		}
		return port > 0
	})
	roots := x509.NewCertPool()
	roots.AddCert(pki.root)
	return &lenient{version: version, port: port,
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "mcp.test"}}}}
}

// count is how many times the server ran tool.
func (l *lenient) count(t *testing.T, tool string) int {
	t.Helper()
	resp, err := l.client.Get(fmt.Sprintf("https://127.0.0.1:%d/count", l.port))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]int
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m[tool]
}

// direct posts body to the server itself, not through the gate.
func (l *lenient) direct(t *testing.T, body string) string {
	t.Helper()
	req, _ := http.NewRequest("POST", fmt.Sprintf("https://127.0.0.1:%d/mcp", l.port), strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	resp, err := l.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return string(data)
}

// TestMCPLenientServersNeverRunTheVariants: bodies that older SDK servers read as a call of
// delete while the gate's reading says read (a key in another case, the long s, a NUL in a
// key, an escaped key) ask in red and never reach the server, over HTTP/1.1 and HTTP/2; each
// server is first shown to run delete for the body, so that the test can fail. Their tickets
// show no ordinary call.
func TestMCPLenientServersNeverRunTheVariants(t *testing.T) {
	bins := lenientServers(t)
	pki := newTestPKI(t)
	servers := []*lenient{startLenient(t, pki, "v1.2.0", bins["v1.2.0"]), startLenient(t, pki, "v1.3.1", bins["v1.3.1"])}
	variants := map[string][]string{
		"v1.2.0": {
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read","Name":"delete","arguments":{}}}`,
			`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"read","arguments":{}},"paramſ":{"name":"delete","arguments":{}}}`,
			`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"NAME":"delete","arguments":{}}}`,
		},
		"v1.3.1": {
			`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"read","name\u0000":"delete","arguments":{}}}`,
			`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name\u0000":"delete","arguments":{}}}`,
		},
	}
	// Each server runs delete for its variants when they reach it.
	for _, l := range servers {
		for _, body := range variants[l.version] {
			before := l.count(t, "delete")
			if out := l.direct(t, body); l.count(t, "delete") != before+1 {
				t.Fatalf("the %s server did not run delete for %s (it answered %s): it is not the lenient server this test needs", l.version, body, out)
			}
		}
	}
	var ports []string
	for _, l := range servers {
		ports = append(ports, fmt.Sprint(l.port))
	}
	policy := fmt.Sprintf(`version = 1

[[mcp]]
name = "lenient"
host = "mcp.test"
path = "/mcp"

[[mcp.rule]]
name = "reads"
tools = ["read"]
verdict = "free"

[[mcp.rule]]
name = "no-delete"
tools = ["delete"]
verdict = "deny"

[floor]
allow_cidrs = ["127.0.0.1/32"]
allow_ports = [%s]

[floor.hosts]
"mcp.test" = "127.0.0.1"

[sources]
local = ["127.0.0.0/8"]

[settings]
hold = "1s"
`, strings.Join(ports, ", "))
	r := startStackWith(t, policy, []string{"--roots", pki.rootPEM}, nil)
	e := &mcpEnv{running: r, pool: gatePool(t, r)}
	ask := &askEnv{running: r}
	for _, p := range protos {
		for _, l := range servers {
			t.Run(p.name+"/"+l.version, func(t *testing.T) {
				hc, _ := e.httpClient(p.h2)
				c := &rawMCP{hc: hc, url: fmt.Sprintf("https://mcp.test:%d/mcp", l.port)}
				reads, deletes := l.count(t, "read"), l.count(t, "delete")
				for _, body := range variants[l.version] {
					a := c.post(t, body, http.Header{"Mcp-Protocol-Version": {"2025-06-18"}})
					if a.status != 200 || a.code != "E_PENDING" || a.rule != "mcp:ambiguous" || !strings.Contains(a.body, `"code":-32010`) {
						t.Errorf("%s: %+v, want it held for a human (mcp:ambiguous, E_PENDING)", body, a)
					}
				}
				if l.count(t, "delete") != deletes || l.count(t, "read") != reads {
					t.Errorf("the %s server ran delete %d and read %d times", l.version, l.count(t, "delete")-deletes, l.count(t, "read")-reads)
				}
			})
		}
	}
	// Their tickets are red, name what is ambiguous, and show no call to approve as one.
	n := 0
	for _, tk := range ask.tickets(t) {
		if tk.Rule != "mcp:ambiguous" {
			continue
		}
		n++
		if !tk.Red || tk.MCP != nil || strings.HasPrefix(tk.Fingerprint, "mcp1:") || !strings.Contains(tk.Warning, "MCP: ") {
			t.Errorf("ticket %s: red %v, call %+v, fingerprint %s, warning %q", tk.ID, tk.Red, tk.MCP, tk.Fingerprint, tk.Warning)
		}
	}
	if n == 0 {
		t.Error("no ticket of an ambiguous body")
	}
}

// TestMCPFreeRuleWaitsForReview: a free MCP rule added to the policy file does not free the call
// until it is approved with :review in the console's terminal, which names it as a loosening;
// then the call runs. (The endpoint is plain http://, decided as MCP like one inside a tunnel.)
func TestMCPFreeRuleWaitsForReview(t *testing.T) {
	files := newMCPServers()
	mux := http.NewServeMux()
	mux.Handle("/mcp", files)
	o := httptest.NewServer(mux)
	defer o.Close()
	port := o.Listener.Addr().(*net.TCPAddr).Port
	s := startTmuxStack(t, fmt.Sprintf(mcpPolicy, port, ""))
	proxy, _ := url.Parse("http://" + s.up.Listen)
	call := func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		ps := &protoSeen{next: &http.Transport{Proxy: http.ProxyURL(proxy)}}
		client := sdk.NewClient(&sdk.Implementation{Name: "mcp-e2e-client", Version: "1"}, nil)
		cs, err := client.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: fmt.Sprintf("http://mcp.test:%d/mcp?rev=2025-06-18", port),
			HTTPClient: &http.Client{Transport: ps}, MaxRetries: -1, DisableStandaloneSSE: true}, &sdk.ClientSessionOptions{ProtocolVersion: "2025-06-18"})
		if err != nil {
			t.Fatalf("connecting through the gate: %v", err)
		}
		defer cs.Close()
		if _, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "write", Arguments: map[string]any{"path": "/a"}}); err != nil {
			return ps.refused()
		}
		return ""
	}
	if got := call(); got != "E_PENDING mcp:unlisted" {
		t.Fatalf("before the edit: %q", got)
	}
	orig, _ := os.ReadFile(s.policy)
	loose := strings.Replace(string(orig), "\n[[mcp]]\nname = \"admin\"", "\n[[mcp.rule]]\nname = \"writes\"\ntools = [\"write\"]\nverdict = \"free\"\n\n[[mcp]]\nname = \"admin\"", 1)
	if loose == string(orig) {
		t.Fatal("the edit changed nothing")
	}
	os.WriteFile(s.policy, []byte(loose), 0o600)
	testkit.WaitFor(t, 10*time.Second, "the console to show the waiting review", func() bool {
		return strings.Contains(s.screen(), "WAIT FOR REVIEW")
	})
	gatePolledAfter(t, s.up, time.Now())
	if got := call(); got != "E_PENDING mcp:unlisted" || files.count("write") != 0 {
		t.Fatalf("a free MCP rule applied without review: %q, %d runs", got, files.count("write"))
	}
	s.command("review")
	var version string
	testkit.WaitFor(t, 10*time.Second, "the review on the screen", func() bool {
		m := versionRE.FindStringSubmatch(s.screen())
		if m != nil {
			version = m[1]
		}
		return m != nil && strings.Contains(s.screen(), `mcp "files" rule "writes": + free tools write`)
	})
	// An Escape and the ':' after it can reach the UI in one read (alt+':'), which drops the
	// command: it is typed again until the call passes.
	last := "not approved yet"
	for try := 0; try < 3 && last != ""; try++ {
		s.keys("Escape")
		s.command("review approve " + version)
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
			if last = call(); last == "" {
				break
			}
		}
	}
	if last != "" {
		t.Fatalf("after the approval the call is still refused (%s); the screen:\n%s", last, s.screen())
	}
	if got := files.count("write"); got != 1 {
		t.Fatalf("the server ran write %d times, want 1", got)
	}
}

// isRefusal reports whether err is the gate's refusal as the SDK's client returns it: the
// JSON-RPC error of code -32010.
func isRefusal(err error) bool {
	var we *jsonrpc.Error
	return errors.As(err, &we) && we.Code == -32010 && strings.Contains(we.Message, "lockhttp refused this call")
}
