package e2e

import (
	"compress/gzip"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/claudeapi"
	"github.com/lockhttp/lockhttp/internal/gate"
	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/stack"
	"github.com/lockhttp/lockhttp/internal/testkit"
	shipped "github.com/lockhttp/lockhttp/policy"
)

// shippedWithFloor is policy/default.toml with nothing but a test's floor additions: the
// loopback range, the origin's port, and each of names sent to 127.0.0.1.
func shippedWithFloor(t *testing.T, port int, names ...string) string {
	t.Helper()
	text := string(shipped.Default)
	var hosts strings.Builder
	for _, n := range names {
		fmt.Fprintf(&hosts, "%q = \"127.0.0.1\"\n", n)
	}
	for _, r := range [][2]string{
		{"allow_cidrs = []\n", "allow_cidrs = [\"127.0.0.1/32\"]\n"},
		{"allow_ports = [80, 443]\n", fmt.Sprintf("allow_ports = [80, 443, %d]\n", port)},
		{"[floor.hosts]\n# name = \"address\", consulted before DNS.\n", "[floor.hosts]\n# name = \"address\", consulted before DNS.\n" + hosts.String()},
	} {
		if strings.Count(text, r[0]) != 1 {
			t.Fatalf("policy/default.toml no longer holds %q once", r[0])
		}
		text = strings.Replace(text, r[0], r[1], 1)
	}
	return text
}

// claudeHosts are the names Claude Code reaches, all played by one stand-in.
var claudeHosts = []string{"api.anthropic.com", "platform.claude.com", "statsig.anthropic.com", "o1158394.ingest.us.sentry.io"}

// claudeStandIn plays Anthropic for Claude Code: the OAuth token endpoint issues a new login at
// each call (its answer gzip-compressed when the client takes it), POST /v1/messages answers a
// message, anything else {}. It records every request.
type claudeStandIn struct {
	mu     sync.Mutex // guards reqs, issued
	reqs   []recorded
	issued []string // the logins and refresh tokens it issued, in order
}

func (s *claudeStandIn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	s.mu.Lock()
	s.reqs = append(s.reqs, recorded{r.Method, r.URL.RequestURI(), r.Host, r.Header.Clone(), body})
	n := len(s.issued)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == "POST" && r.URL.Path == "/v1/oauth/token":
		access := fmt.Sprintf("sk-ant-oat01-%s%04d", strings.Repeat("Iss", 24), n)
		refresh := fmt.Sprintf("sk-ant-ort01-%s%04d", strings.Repeat("Rfr", 24), n)
		s.mu.Lock()
		s.issued = append(s.issued, access, refresh)
		s.mu.Unlock()
		answer := fmt.Sprintf(`{"token_type":"Bearer","access_token":%q,"expires_in":28800,"refresh_token":%q,"scope":"user:inference user:profile","account":{"uuid":"a1","email_address":"user@example.com"}}`, access, refresh)
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			io.WriteString(zw, answer)
			zw.Close()
			return
		}
		io.WriteString(w, answer)
	case r.Method == "POST" && r.URL.Path == "/v1/messages":
		io.WriteString(w, `{"id":"msg_1","type":"message","role":"assistant","model":"claude","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1}}`)
	default:
		io.WriteString(w, `{}`)
	}
}

func (s *claudeStandIn) all() []recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]recorded(nil), s.reqs...)
}

func (s *claudeStandIn) saw(credential string) int {
	n := 0
	for _, r := range s.all() {
		if r.Header.Get("Authorization") == "Bearer "+credential || r.Header.Get("X-Api-Key") == credential {
			n++
		}
	}
	return n
}

// claudeCodeEnv is lox run on the shipped policy, its gate reaching the stand-in under
// claudeHosts, and a client that sends what Claude Code sends, through the gate.
type claudeCodeEnv struct {
	*askEnv
	api    *claudeStandIn
	client *http.Client
}

func startClaudeCode(t *testing.T, loxFlags ...string) *claudeCodeEnv {
	t.Helper()
	pki := newTestPKI(t)
	api := &claudeStandIn{}
	_, port := tlsOrigin(t, api, pki.leaf(t, claudeHosts, time.Now().Add(time.Hour), false))
	r := startStackWith(t, shippedWithFloor(t, port, claudeHosts...), append([]string{"--roots", pki.rootPEM}, loxFlags...), nil)
	gateURL, _ := url.Parse(r.up.Gate)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = http.ProxyURL(gateURL)
	tr.ForceAttemptHTTP2 = false // HTTP/1.1, as Claude Code speaks it through a proxy
	ca, err := os.ReadFile(r.up.CACert)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatalf("%s holds no certificate", r.up.CACert)
	}
	tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	return &claudeCodeEnv{askEnv: &askEnv{running: r, port: port}, api: api, client: &http.Client{Transport: tr, Timeout: 90 * time.Second}}
}

// call sends method url with a credential in header (Authorization: Bearer, or x-api-key) and
// body; it returns the status, the gate's code and request id, and the body.
func (e *claudeCodeEnv) call(t *testing.T, method, path, host, header, credential, body string) (int, string, string, string) {
	t.Helper()
	req, _ := http.NewRequest(method, fmt.Sprintf("https://%s:%d%s", host, e.port, path), strings.NewReader(body))
	switch header {
	case "Authorization":
		req.Header.Set("Authorization", "Bearer "+credential)
		req.Header.Set("anthropic-beta", "oauth-2025-04-20")
	case "x-api-key":
		req.Header.Set("x-api-key", credential)
	}
	if strings.HasPrefix(body, "{") {
		req.Header.Set("Content-Type", "application/json")
	} else if body != "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	return resp.StatusCode, resp.Header.Get(gate.HeaderCode), resp.Header.Get(gate.HeaderRequest), string(b)
}

const claudeMessage = `{"model":"claude-sonnet-4-5","max_tokens":32,"messages":[{"role":"user","content":"hello"}],"tools":[{"name":"Bash","description":"run","input_schema":{"type":"object"}}]}`

func (e *claudeCodeEnv) message(t *testing.T, header, credential string) (int, string, string) {
	t.Helper()
	status, code, id, _ := e.call(t, "POST", "/v1/messages?beta=true", "api.anthropic.com", header, credential, claudeMessage)
	return status, code, id
}

// heldMessage sends a message in the background, to be held on a ticket; the result comes on
// the channel.
func (e *claudeCodeEnv) heldMessage(t *testing.T, header, credential string) <-chan [2]string {
	ch := make(chan [2]string, 1)
	go func() {
		req, _ := http.NewRequest("POST", fmt.Sprintf("https://api.anthropic.com:%d/v1/messages?beta=true", e.port), strings.NewReader(claudeMessage))
		req.Header.Set("Content-Type", "application/json")
		if header == "Authorization" {
			req.Header.Set("Authorization", "Bearer "+credential)
		} else {
			req.Header.Set(header, credential)
		}
		resp, err := e.client.Do(req)
		if err != nil {
			ch <- [2]string{"error", err.Error()}
			return
		}
		resp.Body.Close()
		ch <- [2]string{fmt.Sprint(resp.StatusCode), resp.Header.Get(gate.HeaderCode)}
	}()
	return ch
}

// decided waits for the held message's answer.
func decided(t *testing.T, ch <-chan [2]string) [2]string {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("the held request did not end within 30s of the decision")
	}
	return [2]string{}
}

// issue calls the OAuth token endpoint as Claude Code does at platform.claude.com, and returns
// the login and refresh token the answer issues.
func (e *claudeCodeEnv) issue(t *testing.T, body string) (access, refresh string, id string) {
	t.Helper()
	status, code, id, answer := e.call(t, "POST", "/v1/oauth/token", "platform.claude.com", "", "", body)
	if status != 200 {
		t.Fatalf("the token endpoint through the gate: %d %s %s", status, code, answer)
	}
	var a struct {
		Access  string `json:"access_token"`
		Refresh string `json:"refresh_token"`
	}
	if err := json.Unmarshal([]byte(answer), &a); err != nil || a.Access == "" {
		t.Fatalf("the token endpoint's answer as the client read it: %v %q", err, answer)
	}
	return a.Access, a.Refresh, id
}

// TestClaudeCodeShippedPolicy: Claude Code under lox run with the shipped policy and nothing set
// up. A login from before (a subscription) asks once, in a ticket naming it as a Claude login;
// one approval binds it. A login the gate saw issued through the token endpoint, at a login or a
// refresh, is free at once; a login from anywhere else still asks. An API key asks once, named by
// its end. Telemetry is refused without a ticket. Only hashes of the logins are kept.
func TestClaudeCodeShippedPolicy(t *testing.T) {
	e := startClaudeCode(t)
	loginBefore := "sk-ant-oat01-" + strings.Repeat("Bfr", 24) + "0001"
	apiKey := "sk-ant-api03-" + strings.Repeat("Env_", 20) + "Kq7Z"
	msgURL := fmt.Sprintf("https://api.anthropic.com:%d/v1/messages?beta=true", e.port)

	approveOnce := func(t *testing.T, header, credential string, want []string, warning string) {
		t.Helper()
		held := e.heldMessage(t, header, credential)
		tk := e.waitTicket(t, msgURL)
		hash := claudeapi.HashCredential(credential)
		if tk.Rule != claudeapi.RuleNewCredential || !tk.NeverAuto || tk.Bind == nil || tk.Bind.Container != "local" || tk.Bind.Hash != hash {
			t.Fatalf("ticket %+v", tk)
		}
		for _, w := range append(want, "container local sends a new Claude credential", "sha256 "+hash[:12]+"…", "approving binds it to local") {
			if !strings.Contains(tk.Reason, w) {
				t.Errorf("the ticket's reason %q does not say %q", tk.Reason, w)
			}
		}
		if !strings.Contains(tk.Warning, warning) {
			t.Errorf("the ticket's warning %q does not say %q", tk.Warning, warning)
		}
		if out, err := e.lox(t, "approve", tk.ID); err != nil {
			t.Fatalf("lox approve: %v\n%s", err, out)
		}
		if got := decided(t, held); got[0] != "200" {
			t.Fatalf("the held request after the approval: %v", got)
		}
		// Bound: the next requests pass at once, with no ticket.
		for i := 0; i < 2; i++ {
			if status, code, _ := e.message(t, header, credential); status != 200 {
				t.Fatalf("request %d after the approval: %d %s", i, status, code)
			}
		}
		if n := e.api.saw(credential); n != 3 {
			t.Fatalf("the stand-in saw the credential %d times, want 3", n)
		}
		if ts := e.tickets(t); len(ts) != 0 {
			t.Fatalf("tickets pending after the binding: %+v", ts)
		}
	}

	t.Run("a login from before asks once, named as a Claude login", func(t *testing.T) {
		approveOnce(t, "Authorization", loginBefore, []string{
			"a Claude login (an OAuth token, sha256 " + claudeapi.HashCredential(loginBefore)[:12] + "…) issued outside this gate, in Authorization",
			"Claude Code holds one after you log it in with your Claude account (a subscription: /login, or claude setup-token)",
		}, "Approving binds this Claude login to local: its later requests with it pass without asking. Approve only if you logged Claude Code in with your Claude account for this container.")
	})

	var refresh string
	var issued []string
	t.Run("a login issued through the gate is free at once", func(t *testing.T) {
		access, ref, id := e.issue(t, `{"grant_type":"authorization_code","code":"the-code","state":"s","client_id":"9d1c250a","redirect_uri":"https://platform.claude.com/oauth/code/callback","code_verifier":"v"}`)
		refresh, issued = ref, append(issued, access, ref)
		if status, code, _ := e.message(t, "Authorization", access); status != 200 {
			t.Fatalf("the issued login's first request: %d %s", status, code)
		}
		rec := e.recordFor(id)
		if d := fmt.Sprint(rec["detail"]); rec["verdict"] != "FREE" || rec["rule"] != claudeapi.RuleOAuth || !strings.Contains(d, "bound to container local (sha256 "+claudeapi.HashCredential(access)[:12]+"…)") {
			t.Fatalf("the token request's record: %v", rec)
		}
	})
	t.Run("a refreshed login is free at once, the one before too", func(t *testing.T) {
		access, ref, _ := e.issue(t, "grant_type=refresh_token&refresh_token="+url.QueryEscape(refresh)+"&client_id=9d1c250a")
		issued = append(issued, access, ref)
		if status, code, _ := e.message(t, "Authorization", access); status != 200 {
			t.Fatalf("the refreshed login's first request: %d %s", status, code)
		}
		if status, code, _ := e.message(t, "Authorization", issued[0]); status != 200 {
			t.Fatalf("the login before the refresh: %d %s", status, code)
		}
		if ts := e.tickets(t); len(ts) != 0 {
			t.Fatalf("tickets pending: %+v", ts)
		}
	})
	t.Run("a login from anywhere else still asks", func(t *testing.T) {
		elsewhere := "sk-ant-oat01-" + strings.Repeat("Oth", 24) + "0009"
		held := e.heldMessage(t, "Authorization", elsewhere)
		tk := e.waitTicket(t, msgURL)
		if tk.Rule != claudeapi.RuleNewCredential || tk.Bind == nil || tk.Bind.Hash != claudeapi.HashCredential(elsewhere) {
			t.Fatalf("ticket %+v", tk)
		}
		if out, err := e.lox(t, "deny", "--reason", "not mine", tk.ID); err != nil {
			t.Fatalf("lox deny: %v\n%s", err, out)
		}
		if got := decided(t, held); got != [2]string{"403", "E_DENIED"} {
			t.Fatalf("the denied request: %v", got)
		}
		if e.api.saw(elsewhere) != 0 {
			t.Fatal("the login from elsewhere reached the stand-in")
		}
	})
	t.Run("an API key in the environment asks once, named by its end", func(t *testing.T) {
		approveOnce(t, "x-api-key", apiKey, []string{
			"an Anthropic API key (sha256 " + claudeapi.HashCredential(apiKey)[:12] + "…, key ending …Kq7Z), in x-api-key: check its end against the keys your Anthropic Console lists",
		}, "Approving binds this Claude credential to local")
	})
	t.Run("telemetry is refused without a ticket", func(t *testing.T) {
		before := len(e.api.all())
		for _, c := range []struct{ host, path, rule string }{
			{"statsig.anthropic.com", "/v1/rgstr", "claude-code-telemetry"},
			{"statsig.anthropic.com", "/v1/initialize", "claude-code-telemetry"},
			{"o1158394.ingest.us.sentry.io", "/api/4508259541909504/envelope/", "claude-code-telemetry"},
			{"api.anthropic.com", "/api/event_logging/batch", "claude-code-events"},
		} {
			for i := 0; i < 2; i++ { // a second session's telemetry: refused alike
				status, code, id, body := e.call(t, "POST", c.path, c.host, "Authorization", loginBefore, `{"events":[]}`)
				if status != 403 || code != "E_RULE" || !strings.Contains(body, "refused without asking") {
					t.Fatalf("%s%s: %d %s %s", c.host, c.path, status, code, body)
				}
				if rec := e.recordFor(id); rec["rule"] != c.rule || rec["ticket"] != nil {
					t.Fatalf("%s%s: record %v", c.host, c.path, rec)
				}
			}
		}
		if n := len(e.api.all()); n != before {
			t.Fatalf("telemetry reached the stand-in: %d requests", n-before)
		}
		if ts := e.tickets(t); len(ts) != 0 {
			t.Fatalf("telemetry opened tickets: %+v", ts)
		}
	})
	t.Run("the bindings are on record, the logins are not", func(t *testing.T) {
		out, err := e.lox(t, "credentials")
		if err != nil || !strings.Contains(out, "gate (issued by platform.claude.com)") || !strings.Contains(out, claudeapi.HashCredential(issued[0])[:12]) ||
			!strings.Contains(out, claudeapi.HashCredential(loginBefore)[:12]) {
			t.Fatalf("lox credentials: %v\n%s", err, out)
		}
		var n int
		files, _ := filepath.Glob(filepath.Join(e.up.ConsoleAudit, "*.jsonl"))
		for _, f := range files {
			data, _ := os.ReadFile(f)
			for _, line := range strings.Split(string(data), "\n") {
				if strings.Contains(line, `"rule":"credential-bound"`) && strings.Contains(line, `"approver":"gate"`) && strings.Contains(line, "platform.claude.com") {
					n++
				}
			}
		}
		if n != 2 {
			t.Fatalf("%d credential-bound records by the gate in the console's audit, want 2", n)
		}
		(&secretsEnv{running: e.running}).noLeak(t, "the logins", append(issued, loginBefore, apiKey)...)
	})
}

// TestClaudeCodeKeyFileShipped: with lox run --claude-key-file and the shipped policy, the
// placeholder Claude Code holds is replaced by the key, and nothing asks.
func TestClaudeCodeKeyFileShipped(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "anthropic-key")
	if err := os.WriteFile(keyFile, []byte(sdkInjectedKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := startClaudeCode(t, "--claude-key-file", keyFile)
	for i := 0; i < 2; i++ {
		if status, code, _ := e.message(t, "x-api-key", sdkPlaceholder); status != 200 {
			t.Fatalf("request %d: %d %s", i, status, code)
		}
	}
	if n := e.api.saw(sdkInjectedKey); n != 2 {
		t.Fatalf("the stand-in saw the key %d times, want 2", n)
	}
	if e.api.saw(sdkPlaceholder) != 0 {
		t.Fatal("the placeholder reached the stand-in")
	}
	// A login of the agent's own beside the injected key is refused, as before.
	if status, code, _ := e.message(t, "Authorization", "sk-ant-oat01-"+strings.Repeat("Own", 24)+"0001"); status != 403 || code != "E_SECRET_EGRESS" {
		t.Fatalf("a login beside the injected key: %d %s", status, code)
	}
	if ts := e.tickets(t); len(ts) != 0 {
		t.Fatalf("tickets: %+v", ts)
	}
	(&secretsEnv{running: e.running}).noLeak(t, "the injected key", sdkInjectedKey)
}

// claudeStub is a `claude` for lox run -- claude: it does over the network what Claude Code does
// in each setup, with curl through the gate lox gives it. Holding ANTHROPIC_API_KEY (its own
// key, or lox's placeholder), it sends two messages with it in x-api-key; holding none, it logs
// in as /login does (the OAuth token endpoint at platform.claude.com), sends two messages with
// the login it was issued and reports its telemetry. It prints each answer's status and the
// gate's code. It speaks HTTP/1.1, as Claude Code does through a proxy.
const claudeStub = `#!/bin/sh
api=https://api.anthropic.com:%[1]d
msg='{"model":"claude-sonnet-4-5","max_tokens":32,"messages":[{"role":"user","content":"hello"}]}'
say() { l=$1; shift; curl --http1.1 -sS -o /dev/null -w "$l %%{http_code} %%header{x-lockhttp-code}\n" --max-time 90 "$@"; }
if [ -n "$ANTHROPIC_API_KEY" ]; then
  for i in 1 2; do say message-$i -H "x-api-key: $ANTHROPIC_API_KEY" -H 'content-type: application/json' -d "$msg" "$api/v1/messages"; done
  exit 0
fi
answer=$(curl --http1.1 -sS --max-time 30 -H 'content-type: application/json' -d '{"grant_type":"authorization_code","code":"pasted-code","client_id":"9d1c250a","code_verifier":"v","redirect_uri":"https://platform.claude.com/oauth/code/callback","state":"s"}' https://platform.claude.com:%[1]d/v1/oauth/token)
login=$(printf %%s "$answer" | sed -n 's/.*"access_token":"\([^"]*\)".*/\1/p')
[ -n "$login" ] || { echo "no login in: $answer"; exit 4; }
for i in 1 2; do say message-$i -H "authorization: Bearer $login" -H 'anthropic-beta: oauth-2025-04-20' -H 'content-type: application/json' -d "$msg" "$api/v1/messages"; done
say telemetry -H "authorization: Bearer $login" -H 'content-type: application/json' -d '{"events":[]}' "$api/api/event_logging/batch"
say statsig -H 'content-type: application/json' -d '{}' https://statsig.anthropic.com:%[1]d/v1/rgstr
`

// TestClaudeCodeUnderLoxRun runs what a Claude Code user types, with the shipped policy and only
// the test's floor additions: sudo bin/lox run -- claude (logged in with /login: no ticket),
// with --agent-env ANTHROPIC_API_KEY (one approval, the ticket naming the key by its end), and
// with --claude-key-file (the key injected, no ticket). claude is a stand-in that does what Claude
// Code does over the network (claudeStub).
func TestClaudeCodeUnderLoxRun(t *testing.T) {
	requireRoot(t)
	requireTool(t, "curl")
	const uid = stack.DefaultAgentUID
	if pids := processesOf(uid); len(pids) > 0 {
		t.Fatalf("uid %d already runs %v: the test needs it free", uid, pids)
	}
	t.Cleanup(func() {
		for _, pid := range processesOf(uid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	base := t.TempDir()
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	tmp, bin := filepath.Join(base, "tmp"), filepath.Join(base, "bin")
	for _, d := range []string{tmp, bin} {
		os.Mkdir(d, 0o711)
		os.Chmod(d, 0o711)
	}
	pki := newTestPKI(t)
	api := &claudeStandIn{}
	_, port := tlsOrigin(t, api, pki.leaf(t, claudeHosts, time.Now().Add(time.Hour), false))
	if err := os.WriteFile(filepath.Join(bin, "claude"), []byte(fmt.Sprintf(claudeStub, port)), 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(bin, "claude"), 0o755)
	polPath := filepath.Join(base, "policy.toml")
	if err := os.WriteFile(polPath, []byte(shippedWithFloor(t, port, claudeHosts...)), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(t *testing.T, state string, env []string, args ...string) *agentLox {
		t.Helper()
		all := append([]string{"run", "--headless", "--state", state, "--policy", polPath, "--listen", "127.0.0.1:0",
			"--hub-listen", "127.0.0.1:0", "--roots", pki.rootPEM}, args...)
		l := &agentLox{stdout: &testkit.Buffer{}, stderr: &testkit.Buffer{}, done: make(chan struct{})}
		l.cmd = execLox(t, all...)
		l.cmd.Stdout, l.cmd.Stderr = l.stdout, l.stderr
		l.cmd.Env = append(os.Environ(), append([]string{"TMPDIR=" + tmp, "PATH=" + bin + ":" + os.Getenv("PATH")}, env...)...)
		if err := l.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { l.cmd.Wait(); close(l.done) }()
		t.Cleanup(func() {
			select {
			case <-l.done:
			default:
				l.cmd.Process.Kill()
				<-l.done
			}
		})
		return l
	}
	finished := func(t *testing.T, l *agentLox, want string) {
		t.Helper()
		if code := l.wait(t, 120*time.Second); code != 0 {
			t.Fatalf("lox exited %d\nstdout:\n%s\nstderr:\n%s", code, l.stdout, l.stderr)
		}
		if got := l.stdout.String(); got != want {
			t.Fatalf("claude printed:\n%s\nwant:\n%s\nstderr:\n%s", got, want, l.stderr)
		}
	}
	consoleAudit := func(state string) string {
		files, _ := filepath.Glob(filepath.Join(state, "console-audit", "*.jsonl"))
		var b strings.Builder
		for _, f := range files {
			data, _ := os.ReadFile(f)
			b.Write(data)
		}
		return b.String()
	}

	t.Run("sudo bin/lox run -- claude, logged in with /login", func(t *testing.T) {
		state := filepath.Join(base, "state-login")
		l := run(t, state, nil, "--", "claude")
		finished(t, l, "message-1 200 \nmessage-2 200 \ntelemetry 403 E_RULE\nstatsig 403 E_RULE\n")
		if n := strings.Count(consoleAudit(state), `"approver":"gate"`); n != 1 {
			t.Fatalf("%d bindings by the gate in the console's audit, want 1", n)
		}
		if strings.Contains(consoleAudit(state), `"event":"ticket-decided"`) {
			t.Fatal("a ticket was decided")
		}
	})
	t.Run("with an API key in the environment: one approval", func(t *testing.T) {
		key := "sk-ant-api03-" + strings.Repeat("Usr_", 20) + "Ab9Q"
		state := filepath.Join(base, "state-key")
		l := run(t, state, []string{"ANTHROPIC_API_KEY=" + key}, "--agent-env", "ANTHROPIC_API_KEY", "--", "claude")
		ask := &askEnv{running: &running{t: t, state: state}}
		var tk hub.Ticket
		testkit.WaitFor(t, 60*time.Second, "the key's ticket", func() bool {
			out, err := ask.lox(t, "tickets", "--json")
			if err != nil {
				return false
			}
			var ts []hub.Ticket
			if json.Unmarshal([]byte(out), &ts) != nil || len(ts) == 0 {
				return false
			}
			tk = ts[0]
			return true
		})
		want := "container local sends a new Claude credential, an Anthropic API key (sha256 " + claudeapi.HashCredential(key)[:12] + "…, key ending …Ab9Q), in x-api-key"
		if tk.Rule != claudeapi.RuleNewCredential || !strings.Contains(tk.Reason, want) || strings.Contains(tk.Reason, key) {
			t.Fatalf("the ticket says %q; want %q", tk.Reason, want)
		}
		if out, err := ask.lox(t, "approve", tk.ID); err != nil {
			t.Fatalf("lox approve: %v\n%s", err, out)
		}
		finished(t, l, "message-1 200 \nmessage-2 200 \n")
		if n := strings.Count(consoleAudit(state), `"event":"ticket-decided"`); n != 1 {
			t.Fatalf("%d tickets decided, want 1", n)
		}
	})
	t.Run("with --claude-key-file: injected, no ticket", func(t *testing.T) {
		keyFile := filepath.Join(base, "anthropic-key")
		if err := os.WriteFile(keyFile, []byte(sdkInjectedKey+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		state := filepath.Join(base, "state-inject")
		before := api.saw(sdkInjectedKey)
		l := run(t, state, nil, "--claude-key-file", keyFile, "--", "claude")
		finished(t, l, "message-1 200 \nmessage-2 200 \n")
		if n := api.saw(sdkInjectedKey) - before; n != 2 {
			t.Fatalf("the stand-in saw the key %d times, want 2", n)
		}
		if strings.Contains(consoleAudit(state), `"event":"ticket-decided"`) {
			t.Fatal("a ticket was decided")
		}
	})
}
