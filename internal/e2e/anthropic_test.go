package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/lockhttp/lockhttp/internal/claudeapi"
	"github.com/lockhttp/lockhttp/internal/gate"
	"github.com/lockhttp/lockhttp/internal/secrets"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

var (
	// sdkKey is the container's own key in the credentials-file cases.
	sdkKey = "sk-ant-api03-" + strings.Repeat("Hq5_", 20) + "KK"
	// sdkForeignKey is another account's key.
	sdkForeignKey = "sk-ant-api03-" + strings.Repeat("Wd3-", 20) + "PP"
	// sdkInjectedKey is the key the gate injects; only the gate's secrets file holds it.
	sdkInjectedKey = "sk-ant-api03-" + strings.Repeat("Zp6_", 20) + "MM"
	// sdkPlaceholder is what the agent's SDK holds in injection mode: one character repeated
	// after the prefix, as in documentation examples, which no detector takes for a key.
	sdkPlaceholder = "sk-ant-" + strings.Repeat("x", 64)
)

const anthropicPolicy = `version = 1
%[3]s
[floor]
allow_cidrs = ["127.0.0.1/32"]
allow_ports = [%[1]d]

[floor.hosts]
"api.anthropic.com" = "127.0.0.1"

[sources]
local = ["127.0.0.0/8"]

[settings]
hold = "1s"
%[2]s`

// anthropicStandIn is api.anthropic.com as the SDK needs it: POST /v1/messages answers a
// Message, or its server-sent events when the body says "stream": true; POST /v1/files answers
// the file's metadata. It records every request that reaches it.
type anthropicStandIn struct {
	mu   sync.Mutex // guards reqs
	reqs []recorded
}

const (
	standInText     = "Hello from the stand-in"
	standInStreamed = "Streamed through the gate"
)

func (s *anthropicStandIn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	s.mu.Lock()
	s.reqs = append(s.reqs, recorded{r.Method, r.URL.RequestURI(), r.Host, r.Header.Clone(), body})
	s.mu.Unlock()
	switch {
	case r.Method == "POST" && r.URL.Path == "/v1/messages":
		var req struct {
			Model  string `json:"model"`
			Stream bool   `json:"stream"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			apiError(w, 400, "invalid_request_error", "the body is not JSON")
			return
		}
		if req.Stream {
			s.stream(w, req.Model)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"msg_standin01","type":"message","role":"assistant","model":%q,"content":[{"type":"text","text":%q}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":9,"output_tokens":5}}`, req.Model, standInText)
	case r.Method == "POST" && r.URL.Path == "/v1/files":
		mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if err != nil || mt != "multipart/form-data" {
			apiError(w, 400, "invalid_request_error", "an upload is multipart/form-data")
			return
		}
		part, err := multipart.NewReader(bytes.NewReader(body), params["boundary"]).NextPart()
		if err != nil || part.FormName() != "file" {
			apiError(w, 400, "invalid_request_error", "the upload has no file part")
			return
		}
		data, _ := io.ReadAll(part)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"file_standin01","type":"file","filename":%q,"mime_type":%q,"size_bytes":%d,"created_at":"2025-01-01T00:00:00Z","downloadable":false}`, part.FileName(), part.Header.Get("Content-Type"), len(data))
	default:
		apiError(w, 404, "not_found_error", "the stand-in serves /v1/messages and /v1/files only")
	}
}

// stream writes the event sequence of a streamed Messages call, flushing each event.
func (s *anthropicStandIn) stream(w http.ResponseWriter, model string) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	half := len(standInStreamed) / 2
	events := []struct{ name, data string }{
		{"message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":"msg_standin02","type":"message","role":"assistant","model":%q,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":9,"output_tokens":1}}}`, model)},
		{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`},
		{"content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":%q}}`, standInStreamed[:half])},
		{"content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":%q}}`, standInStreamed[half:])},
		{"content_block_stop", `{"type":"content_block_stop","index":0}`},
		{"message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":6}}`},
		{"message_stop", `{"type":"message_stop"}`},
	}
	f, _ := w.(http.Flusher)
	for _, e := range events {
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", e.name, e.data)
		if f != nil {
			f.Flush()
		}
	}
}

func apiError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"type":"error","error":{"type":%q,"message":%q}}`, typ, msg)
}

func (s *anthropicStandIn) all() []recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]recorded(nil), s.reqs...)
}

func (s *anthropicStandIn) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.reqs)
}

// anthropicEnv is a lox run stack whose gate reaches the stand-in as api.anthropic.com.
type anthropicEnv struct {
	*running
	api    *anthropicStandIn
	port   int
	caPool *x509.CertPool
}

// startAnthropic starts the stand-in and a stack; policyTail is appended to the policy and
// inject goes before [floor]. gateSecrets, when not empty, is the content of the gate's secrets
// file.
func startAnthropic(t *testing.T, inject, policyTail, gateSecrets string) *anthropicEnv {
	t.Helper()
	pki := newTestPKI(t)
	api := &anthropicStandIn{}
	_, port := tlsOrigin(t, api, pki.leaf(t, []string{"api.anthropic.com"}, time.Now().Add(time.Hour), false))
	flags := []string{"--roots", pki.rootPEM}
	if gateSecrets != "" {
		p := filepath.Join(t.TempDir(), "gate-secrets.toml")
		if err := os.WriteFile(p, []byte(gateSecrets), 0o600); err != nil {
			t.Fatal(err)
		}
		flags = append(flags, "--secrets", p)
	}
	r := startStackWith(t, fmt.Sprintf(anthropicPolicy, port, policyTail, inject), flags, nil)
	data, err := os.ReadFile(r.up.CACert)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		t.Fatalf("%s holds no certificate", r.up.CACert)
	}
	return &anthropicEnv{running: r, api: api, port: port, caPool: pool}
}

// client is the SDK as an agent builds it, its HTTP client going through the gate and trusting
// the lockhttp CA. Nothing is read from the environment: the credential is what opts give.
func (e *anthropicEnv) client(opts ...option.RequestOption) anthropic.Client {
	gateURL, err := url.Parse(e.up.Gate)
	if err != nil {
		panic(err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = http.ProxyURL(gateURL)
	tr.TLSClientConfig = &tls.Config{RootCAs: e.caPool}
	base := []option.RequestOption{
		option.WithoutEnvironmentDefaults(),
		option.WithBaseURL(fmt.Sprintf("https://api.anthropic.com:%d", e.port)),
		option.WithHTTPClient(&http.Client{Transport: tr, Timeout: 15 * time.Second}),
		option.WithMaxRetries(0),
	}
	return anthropic.NewClient(append(base, opts...)...)
}

// refusal is the gate's answer to a call the SDK reports as an error: its status, code and rule.
func refusal(t *testing.T, err error) (int, string, string) {
	t.Helper()
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("the SDK's error is %T (%v), not *anthropic.Error", err, err)
	}
	if apiErr.Response == nil {
		t.Fatalf("the SDK's error carries no response: %v", apiErr)
	}
	return apiErr.StatusCode, apiErr.Response.Header.Get(gate.HeaderCode), apiErr.Response.Header.Get(gate.HeaderRule)
}

func helloParams() anthropic.MessageNewParams {
	return anthropic.MessageNewParams{
		Model:     anthropic.ModelClaudeSonnet5_5,
		MaxTokens: 1024,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Hello"))},
	}
}

func messageText(m *anthropic.Message) string {
	var b strings.Builder
	for _, c := range m.Content {
		b.WriteString(c.Text)
	}
	return b.String()
}

// TestAnthropicSDK drives the official Anthropic Go SDK through lox run's gate to a stand-in for
// api.anthropic.com: what the Claude API checks free goes out, what they ask for reaches the
// SDK as the gate's 403, and an injected key reaches Anthropic while the agent holds a
// placeholder.
func TestAnthropicSDK(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()

	t.Run("the container's own key", func(t *testing.T) {
		creds := filepath.Join(t.TempDir(), "claude-credentials.toml")
		if err := os.WriteFile(creds, []byte(fmt.Sprintf("version = 1\n[containers]\nlocal = [\"sha256:%s\"]\n", claudeapi.HashCredential(sdkKey))), 0o600); err != nil {
			t.Fatal(err)
		}
		e := startAnthropic(t, "", fmt.Sprintf("\n[claude]\ncredentials = %q\n", creds), "")
		c := e.client(option.WithAPIKey(sdkKey))

		t.Run("a plain message goes out", func(t *testing.T) {
			before := e.api.count()
			msg, err := c.Messages.New(ctx, helloParams())
			if err != nil {
				t.Fatalf("Messages.New: %v", err)
			}
			if got := messageText(msg); got != standInText || msg.StopReason != anthropic.StopReasonEndTurn {
				t.Fatalf("the SDK read %q, stop reason %q", got, msg.StopReason)
			}
			reqs := e.api.all()[before:]
			if len(reqs) != 1 || reqs[0].Path != "/v1/messages" {
				t.Fatalf("the stand-in saw %d requests: %+v", len(reqs), reqs)
			}
			// SDK v2 sends WithAPIKey's key as a bearer token.
			if got := reqs[0].Header.Get("Authorization"); got != "Bearer "+sdkKey || reqs[0].Header.Get("X-Api-Key") != "" {
				t.Errorf("the stand-in got Authorization %q, x-api-key %q", got, reqs[0].Header.Get("X-Api-Key"))
			}
		})
		t.Run("a streamed message goes out and is reassembled", func(t *testing.T) {
			before := e.api.count()
			stream := c.Messages.NewStreaming(ctx, helloParams())
			var msg anthropic.Message
			var types []string
			for stream.Next() {
				ev := stream.Current()
				types = append(types, ev.Type)
				if err := msg.Accumulate(ev); err != nil {
					t.Fatalf("Accumulate %s: %v", ev.Type, err)
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatalf("stream: %v", err)
			}
			stream.Close()
			want := "message_start content_block_start content_block_delta content_block_delta content_block_stop message_delta message_stop"
			if got := strings.Join(types, " "); got != want {
				t.Errorf("events %s; want %s", got, want)
			}
			if got := messageText(&msg); got != standInStreamed || msg.StopReason != anthropic.StopReasonEndTurn {
				t.Fatalf("the SDK reassembled %q, stop reason %q", got, msg.StopReason)
			}
			reqs := e.api.all()[before:]
			if len(reqs) != 1 || !strings.Contains(string(reqs[0].Body), `"stream":true`) {
				t.Fatalf("the stand-in saw %+v", reqs)
			}
		})
		t.Run("mcp_servers ask", func(t *testing.T) {
			before := e.api.count()
			_, err := c.Beta.Messages.New(ctx, anthropic.BetaMessageNewParams{
				Model:      anthropic.ModelClaudeSonnet5_5,
				MaxTokens:  1024,
				Messages:   []anthropic.BetaMessageParam{anthropic.NewBetaUserMessage(anthropic.NewBetaTextBlock("What is in my tracker?"))},
				MCPServers: []anthropic.BetaRequestMCPServerURLDefinitionParam{{Name: "tracker", URL: "https://mcp.example.com/sse"}},
				Betas:      []anthropic.AnthropicBeta{anthropic.AnthropicBetaMCPClient2025_04_04},
			})
			if err == nil {
				t.Fatal("the MCP call succeeded")
			}
			status, code, rule := refusal(t, err)
			t.Logf("the gate answered %d %s %s", status, code, rule)
			if status != 403 || (code != "E_PENDING" && code != "E_NO_CONSOLE") || rule != claudeapi.RuleMessages {
				t.Fatalf("got %d %s %s; want 403 E_PENDING or E_NO_CONSOLE, rule %s", status, code, rule, claudeapi.RuleMessages)
			}
			if e.api.count() != before {
				t.Fatal("the MCP call reached the stand-in")
			}
		})
		t.Run("a Files API upload asks", func(t *testing.T) {
			before := e.api.count()
			_, err := c.Files.Upload(ctx, anthropic.FileUploadParams{File: anthropic.File(strings.NewReader("the agent's notes\n"), "notes.txt", "text/plain")})
			if err == nil {
				t.Fatal("the upload succeeded")
			}
			status, code, rule := refusal(t, err)
			t.Logf("the gate answered %d %s %s", status, code, rule)
			if status != 403 || (code != "E_PENDING" && code != "E_NO_CONSOLE") || rule != claudeapi.RuleFiles {
				t.Fatalf("got %d %s %s; want 403 E_PENDING or E_NO_CONSOLE, rule %s", status, code, rule, claudeapi.RuleFiles)
			}
			if e.api.count() != before {
				t.Fatal("the upload reached the stand-in")
			}
		})
		t.Run("another account's key asks", func(t *testing.T) {
			before := e.api.count()
			foreign := e.client(option.WithAPIKey(sdkForeignKey))
			_, err := foreign.Messages.New(ctx, helloParams())
			if err == nil {
				t.Fatal("the call with another account's key succeeded")
			}
			status, code, rule := refusal(t, err)
			if status != 403 || code != "E_PENDING" || rule != claudeapi.RuleNewCredential {
				t.Fatalf("got %d %s %s; want 403 E_PENDING %s", status, code, rule, claudeapi.RuleNewCredential)
			}
			if e.api.count() != before {
				t.Fatal("the held call reached the stand-in")
			}
		})
		t.Run("two keys in one call are refused", func(t *testing.T) {
			before := e.api.count()
			two := e.client(option.WithAPIKey(sdkKey), option.WithHeader("x-api-key", sdkKey))
			_, err := two.Messages.New(ctx, helloParams())
			if err == nil {
				t.Fatal("the call with two credentials succeeded")
			}
			status, code, rule := refusal(t, err)
			if status != 403 || code != "E_SECRET_EGRESS" || rule != claudeapi.RuleCredential {
				t.Fatalf("got %d %s %s; want 403 E_SECRET_EGRESS %s", status, code, rule, claudeapi.RuleCredential)
			}
			if e.api.count() != before {
				t.Fatal("the refused call reached the stand-in")
			}
		})
		(&secretsEnv{running: e.running}).noLeak(t, "Claude keys", sdkKey, sdkForeignKey)
	})

	// The placeholder must be one the detectors pass over, and the real key one they find: else
	// the injection cases below would not show what they claim.
	det, err := secrets.NewDetector(secrets.Config{})
	if err != nil {
		t.Fatal(err)
	}
	scan := func(v string) []secrets.Finding {
		return det.Scan(&secrets.Request{Host: "example.test", Path: "/", Header: http.Header{"X-Api-Key": {v}}})
	}
	if f := scan(sdkPlaceholder); len(f) != 0 {
		t.Fatalf("the detectors take the placeholder for a credential: %+v", f)
	}
	if f := scan(sdkInjectedKey); len(f) == 0 {
		t.Fatal("the detectors do not find the injected key")
	}

	for _, c := range []struct {
		name   string
		inject string // the [[inject]] rule
		header string // where the stand-in must find the key
		want   string // its value there
		sdk    option.RequestOption
	}{
		{
			name:   "injected x-api-key",
			inject: "[[inject]]\nname = \"anthropic\"\nhosts = [\"api.anthropic.com\"]\nheader = \"x-api-key\"\nsecret = \"anthropic\"\n",
			header: "X-Api-Key", want: sdkInjectedKey,
			sdk: option.WithHeader("x-api-key", sdkPlaceholder),
		},
		{
			name:   "injected Authorization, as WithAPIKey sends it",
			inject: "[[inject]]\nname = \"anthropic\"\nhosts = [\"api.anthropic.com\"]\nheader = \"Authorization\"\nsecret = \"anthropic\"\nformat = \"Bearer {secret}\"\n",
			header: "Authorization", want: "Bearer " + sdkInjectedKey,
			sdk: option.WithAPIKey(sdkPlaceholder),
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := startAnthropic(t, c.inject, "", fmt.Sprintf("version = 1\n[secrets]\nanthropic = %q\n", sdkInjectedKey))
			cl := e.client(c.sdk)
			msg, err := cl.Messages.New(ctx, helloParams())
			if err != nil {
				var apiErr *anthropic.Error
				if errors.As(err, &apiErr) && apiErr.Response != nil {
					body, _ := json.Marshal(apiErr.RawJSON())
					t.Fatalf("the gate refused the placeholder before injecting the key: %d %s %s %s", apiErr.StatusCode,
						apiErr.Response.Header.Get(gate.HeaderCode), apiErr.Response.Header.Get(gate.HeaderRule), body)
				}
				t.Fatalf("Messages.New: %v", err)
			}
			if got := messageText(msg); got != standInText {
				t.Fatalf("the SDK read %q", got)
			}
			reqs := e.api.all()
			if len(reqs) != 1 {
				t.Fatalf("the stand-in saw %d requests", len(reqs))
			}
			h := reqs[0].Header
			if got := h.Values(c.header); len(got) != 1 || got[0] != c.want {
				t.Errorf("the stand-in got %s %q; want the injected key alone", c.header, got)
			}
			for k, vs := range h {
				for _, v := range vs {
					if strings.Contains(v, sdkPlaceholder) {
						t.Errorf("the stand-in got the placeholder in %s", k)
					}
				}
				if !strings.EqualFold(k, c.header) && (strings.EqualFold(k, "Authorization") || strings.EqualFold(k, "X-Api-Key")) {
					t.Errorf("the stand-in got a second credential header %s", k)
				}
			}
			if strings.Contains(string(reqs[0].Body), sdkPlaceholder) || strings.Contains(string(reqs[0].Body), sdkInjectedKey) {
				t.Error("the body carries a key")
			}
			// The agent never held the key: not in the answer it read, nor anywhere the gate
			// writes a request down.
			if strings.Contains(msg.RawJSON(), sdkInjectedKey) {
				t.Error("the answer the SDK read holds the injected key")
			}
			(&secretsEnv{running: e.running}).noLeak(t, "the injected key", sdkInjectedKey)
		})
	}
}

// TestClaudeKeyBoundByApproval: an agent that holds its own key, with no credentials file. Its
// first call asks (NeverAuto), the ticket names the key without showing it, and one approval
// with lox approve binds the key to the container through the console: the call passes on its
// retry and every later call with the key passes without asking, as lockhttp explain --state
// also says. Another key asks again; two keys in one call stay refused; the key is never in the
// clear in what the stack writes.
func TestClaudeKeyBoundByApproval(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := startAnthropic(t, "", "", "")
	ask := &askEnv{running: e.running}
	c := e.client(option.WithAPIKey(sdkKey))

	// The first call: held, then E_PENDING after the policy's hold; nothing reached Anthropic.
	_, err := c.Messages.New(ctx, helloParams())
	if err == nil {
		t.Fatal("the first call with a new key passed without a human")
	}
	if status, code, rule := refusal(t, err); status != 403 || code != "E_PENDING" || rule != claudeapi.RuleNewCredential {
		t.Fatalf("first call: %d %s %s; want 403 E_PENDING %s", status, code, rule, claudeapi.RuleNewCredential)
	}
	if n := e.api.count(); n != 0 {
		t.Fatalf("the stand-in saw %d requests before the approval", n)
	}
	tk := ask.waitTicket(t, fmt.Sprintf("https://api.anthropic.com:%d/v1/messages", e.port))
	hash := claudeapi.HashCredential(sdkKey)
	if !tk.NeverAuto || tk.Rule != claudeapi.RuleNewCredential || tk.Bind == nil || tk.Bind.Container != "local" || tk.Bind.Hash != hash {
		t.Fatalf("ticket %+v", tk)
	}
	for _, want := range []string{"container local sends a new Claude credential", "sha256 " + hash[:12] + "…", "key ending …" + sdkKey[len(sdkKey)-4:]} {
		if !strings.Contains(tk.Reason, want) {
			t.Fatalf("the ticket's reason %q does not say %q", tk.Reason, want)
		}
	}
	if !strings.Contains(tk.Warning, "Approving binds this Claude credential to local") {
		t.Fatalf("the ticket's warning %q", tk.Warning)
	}
	if out, err := ask.lox(t, "approve", tk.ID); err != nil {
		t.Fatalf("lox approve: %v\n%s", err, out)
	}

	// The retry passes on the approval; the next calls pass on the binding.
	if msg, err := c.Messages.New(ctx, helloParams()); err != nil || messageText(msg) != standInText {
		t.Fatalf("the retry after the approval: %v", err)
	}
	other := helloParams()
	other.Messages = []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Something else"))}
	for i := 0; i < 3; i++ {
		if _, err := c.Messages.New(ctx, other); err != nil {
			t.Fatalf("call %d after the binding: %v", i, err)
		}
	}
	if n := e.api.count(); n != 4 {
		t.Fatalf("the stand-in saw %d requests, want 4", n)
	}
	if ts := ask.tickets(t); len(ts) != 0 {
		t.Fatalf("tickets pending after the binding: %+v", ts)
	}
	// explain decides with the console's state, bindings included, as the gate does.
	explain := exec.Command(filepath.Join(binDir, "lockhttp"), "explain", "--state", e.state, "-H", "x-api-key: "+sdkKey,
		"GET", fmt.Sprintf("https://api.anthropic.com:%d/v1/models", e.port))
	out, err := explain.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "FREE") {
		t.Fatalf("explain of the bound key: %v\n%s", err, out)
	}

	// Another key asks again; two keys stay refused.
	foreign := e.client(option.WithAPIKey(sdkForeignKey))
	_, err = foreign.Messages.New(ctx, helloParams())
	if status, code, rule := refusal(t, err); status != 403 || code != "E_PENDING" || rule != claudeapi.RuleNewCredential {
		t.Fatalf("another key: %d %s %s; want E_PENDING %s", status, code, rule, claudeapi.RuleNewCredential)
	}
	two := e.client(option.WithAPIKey(sdkKey), option.WithHeader("x-api-key", sdkKey))
	_, err = two.Messages.New(ctx, other)
	if status, code, _ := refusal(t, err); status != 403 || code != "E_SECRET_EGRESS" {
		t.Fatalf("two keys: %d %s; want E_SECRET_EGRESS", status, code)
	}
	if n := e.api.count(); n != 4 {
		t.Fatalf("the stand-in saw %d requests, want still 4", n)
	}

	// The binding is on record with its approver, in the console's audit.
	var bound bool
	files, _ := filepath.Glob(filepath.Join(e.up.ConsoleAudit, "*.jsonl"))
	for _, f := range files {
		data, _ := os.ReadFile(f)
		for _, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line, `"rule":"credential-bound"`) && strings.Contains(line, `"ticket":"`+tk.ID+`"`) && strings.Contains(line, `"approver":"cli:`) {
				bound = true
			}
		}
	}
	if !bound {
		t.Fatal("no credential-bound record with the approver in the console's audit")
	}
	// lox credentials lists the binding; lox unbind takes it away, and the key asks again.
	if out, err := ask.lox(t, "credentials"); err != nil || !strings.Contains(out, hash[:12]) || !strings.Contains(out, tk.ID) {
		t.Fatalf("lox credentials: %v\n%s", err, out)
	}
	if out, err := ask.lox(t, "unbind", "local", hash[:12]); err != nil {
		t.Fatalf("lox unbind: %v\n%s", err, out)
	}
	testkit.WaitFor(t, 10*time.Second, "the unbound key to ask again", func() bool {
		_, err := c.Messages.New(ctx, other)
		if err == nil {
			return false
		}
		_, code, rule := refusal(t, err)
		return code == "E_PENDING" && rule == claudeapi.RuleNewCredential
	})
	(&secretsEnv{running: e.running}).noLeak(t, "the agent's own keys", sdkKey, sdkForeignKey)
}
