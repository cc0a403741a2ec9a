package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/lockhttp/lockhttp/internal/mcp"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// The official Go SDK's server and client, over HTTP on loopback, for every protocol revision the
// SDK speaks and for both answer forms (JSON, event stream). A handler in front of the server
// does what the gate will: it parses every POST body and holds its Mcp-Method and Mcp-Name
// headers to it, cuts the tools/list answers to the tools allowed (feeding the event stream
// seven bytes at a time), and refuses calls of "delete" with the refusal bodies. The test checks
// that every body parses without a finding, that the tool the server ran and the arguments it
// got are the call's Target and Arguments, that the client sees only the allowed tool, and that
// a refused call never runs and reaches the client as the error or the tool result it should.

// seen is what the front handler and the server recorded.
type seen struct {
	mu       sync.Mutex
	busy     int // POSTs the front handler has not finished: a stream's report is written after its last event reached the client
	bodies   []*mcp.Body
	headers  []http.Header
	problems []string
	reports  []mcp.Report
	ran      []ranCall // the calls the server's handlers ran
	received []string  // the methods the server received
	wireTool map[string]json.RawMessage
}

type ranCall struct {
	method, target string
	arguments      []byte // canonical
}

func (s *seen) problem(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.problems = append(s.problems, sprintf(format, args...))
}

func sprintf(format string, args ...any) string {
	b, _ := json.Marshal(args)
	return format + " " + string(b)
}

func (s *seen) ranCall(method, target string, raw json.RawMessage) {
	var canon []byte
	if len(raw) > 0 {
		c, _, err := mcp.Canonical(raw)
		if err != nil {
			s.problem("the server got arguments Canonical refuses", string(raw), err.Error())
		}
		canon = c
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ran = append(s.ran, ranCall{method, target, canon})
}

// front is the handler in front of the SDK's: the gate's part.
func front(next http.Handler, s *seen, sse bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		s.mu.Lock()
		s.busy++
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			s.busy--
			s.mu.Unlock()
		}()
		body, err := io.ReadAll(r.Body)
		if err != nil {
			s.problem("reading a body", err.Error())
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		b := mcp.Parse(body)
		for _, f := range b.Findings {
			s.problem("finding", string(body), f.Text)
		}
		for _, f := range mcp.CheckHeaders(r.Header, b) {
			s.problem("header finding", r.Header, f.Text)
		}
		s.mu.Lock()
		s.bodies = append(s.bodies, b)
		s.headers = append(s.headers, r.Header.Clone())
		s.mu.Unlock()

		// Refuse calls of "delete": as an error, or as a tool result when its arguments ask.
		refused := map[int]mcp.Refusal{}
		style := mcp.AsError
		var lists []mcp.ID
		for i, m := range b.Messages {
			if m.Method == "tools/call" && m.Target == "delete" {
				refused[i] = mcp.Refusal{Code: policy.CodeRule, Rule: "no-delete", Reason: "the policy denies the tool delete"}
				if strings.Contains(string(m.Arguments), `"style":"tool"`) {
					style = mcp.AsToolResult
				}
			}
			if m.Method == "tools/list" {
				lists = append(lists, m.ID)
			}
		}
		if len(refused) > 0 {
			out := mcp.Answer(b, func(i int) (mcp.Refusal, bool) { r, ok := refused[i]; return r, ok }, style, sse)
			if sse {
				w.Header().Set("Content-Type", "text/event-stream")
			} else {
				w.Header().Set("Content-Type", "application/json")
			}
			w.Write(out)
			return
		}
		if len(lists) == 0 {
			next.ServeHTTP(w, r)
			return
		}
		f := &mcp.Filter{Lists: lists, Allow: func(name string) bool { return name != "delete" }}
		cw := &cutter{w: w, f: f, s: s}
		next.ServeHTTP(cw, r)
		cw.finish()
	})
}

// cutter passes an answer through a Filter: an event stream as it comes, seven bytes at a
// time; a JSON answer whole.
type cutter struct {
	w      http.ResponseWriter
	f      *mcp.Filter
	s      *seen
	status int
	stream *mcp.Stream
	buf    []byte // a JSON answer
	wrote  bool
}

func (c *cutter) Header() http.Header { return c.w.Header() }

func (c *cutter) WriteHeader(status int) {
	if c.wrote {
		return
	}
	c.wrote, c.status = true, status
	if strings.HasPrefix(c.w.Header().Get("Content-Type"), "text/event-stream") {
		c.stream = c.f.Stream(0)
		c.w.WriteHeader(status)
		return
	}
	c.w.Header().Del("Content-Length")
}

func (c *cutter) Write(p []byte) (int, error) {
	c.WriteHeader(http.StatusOK)
	if c.stream == nil {
		c.buf = append(c.buf, p...)
		return len(p), nil
	}
	for rest := p; len(rest) > 0; {
		n := min(7, len(rest))
		out, err := c.stream.Feed(nil, rest[:n])
		if err != nil {
			c.s.problem("cutting a stream", err.Error())
			return 0, err
		}
		if _, err := c.w.Write(out); err != nil {
			return 0, err
		}
		rest = rest[n:]
	}
	return len(p), nil
}

func (c *cutter) Flush() {
	if f, ok := c.w.(http.Flusher); ok {
		f.Flush()
	}
}

func (c *cutter) finish() {
	if c.stream != nil {
		out, err := c.stream.End(nil)
		if err != nil {
			c.s.problem("ending a stream", err.Error())
		}
		c.w.Write(out)
		c.report(c.stream.Report())
		return
	}
	out, rep, err := c.f.JSON(c.buf)
	if err != nil {
		c.s.problem("cutting a JSON answer", err.Error())
	}
	c.report(rep)
	if c.status == 0 {
		c.status = http.StatusOK
	}
	c.w.WriteHeader(c.status)
	c.w.Write(out)
}

func (c *cutter) report(rep mcp.Report) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	c.s.reports = append(c.s.reports, rep)
}

// newServer is an SDK server of one revision with the tools read and delete, a prompt and a
// resource, recording what it runs.
func newServer(t *testing.T, version string, s *seen) *sdk.Server {
	srv := sdk.NewServer(&sdk.Implementation{Name: "test-server", Version: "1"},
		&sdk.ServerOptions{SupportedProtocolVersions: []string{version}})
	schema := json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"},"n":{"type":"number"},"opts":{"type":"object"},"style":{"type":"string"}}}`)
	for _, tool := range []*sdk.Tool{
		{Name: "read", Description: "Reads a file.", InputSchema: schema, Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		{Name: "delete", Description: "Deletes a file.", InputSchema: schema},
	} {
		wire, err := json.Marshal(tool)
		if err != nil {
			t.Fatal(err)
		}
		s.wireTool[tool.Name] = wire
		srv.AddTool(tool, func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			s.ranCall("tools/call", req.Params.Name, req.Params.Arguments)
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "ran " + req.Params.Name}}}, nil
		})
	}
	srv.AddPrompt(&sdk.Prompt{Name: "greet", Arguments: []*sdk.PromptArgument{{Name: "who"}}},
		func(ctx context.Context, req *sdk.GetPromptRequest) (*sdk.GetPromptResult, error) {
			args, _ := json.Marshal(req.Params.Arguments)
			s.ranCall("prompts/get", req.Params.Name, args)
			return &sdk.GetPromptResult{Messages: []*sdk.PromptMessage{{Role: "user", Content: &sdk.TextContent{Text: "hi"}}}}, nil
		})
	srv.AddResource(&sdk.Resource{URI: "file:///notes/a b.txt", Name: "notes", MIMEType: "text/plain"},
		func(ctx context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
			s.ranCall("resources/read", req.Params.URI, nil)
			return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: req.Params.URI, Text: "a"}}}, nil
		})
	srv.AddReceivingMiddleware(func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
			s.mu.Lock()
			s.received = append(s.received, method)
			s.mu.Unlock()
			return next(ctx, method, req)
		}
	})
	return srv
}

func TestSDK(t *testing.T) {
	versions := sdk.SupportedProtocolVersions()
	if len(versions) < 5 {
		t.Fatalf("the SDK speaks %v; this test expects 2024-11-05 to 2026-07-28", versions)
	}
	for _, version := range versions {
		for _, sse := range []bool{false, true} {
			name := version + "/json"
			if sse {
				name = version + "/sse"
			}
			t.Run(name, func(t *testing.T) { sdkRound(t, version, sse) })
		}
	}
}

func sdkRound(t *testing.T, version string, sse bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := &seen{wireTool: map[string]json.RawMessage{}}
	srv := newServer(t, version, s)
	// The 2026-07-28 revision has no sessions: the SDK serves it from a stateless handler.
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv },
		&sdk.StreamableHTTPOptions{JSONResponse: !sse, Stateless: version >= "2026-07-28"})
	web := httptest.NewServer(front(h, s, sse))
	defer web.Close()

	client := sdk.NewClient(&sdk.Implementation{Name: "test-client", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: web.URL}, &sdk.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer cs.Close()
	if got := cs.InitializeResult().ProtocolVersion; got != version {
		t.Fatalf("the session speaks %s, want %s", got, version)
	}

	// tools/list, cut: the client sees read alone.
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
	}
	if !slices.Equal(names, []string{"read"}) {
		t.Errorf("the client lists %v, want [read]", names)
	}

	// An allowed call, with arguments that need escapes and canonical ordering.
	args := map[string]any{"path": "/tmp/a \"b\"/ü\u2028<x>", "n": 1.5e-7, "opts": map[string]any{"z": 1, "a": []any{true, nil, 1e21}}}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "read", Arguments: args})
	if err != nil || res.IsError {
		t.Fatalf("calling read: %v %+v", err, res)
	}
	if _, err := cs.GetPrompt(ctx, &sdk.GetPromptParams{Name: "greet", Arguments: map[string]string{"who": "wörld"}}); err != nil {
		t.Fatalf("prompts/get: %v", err)
	}
	if _, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "file:///notes/a b.txt"}); err != nil {
		t.Fatalf("resources/read: %v", err)
	}
	// The SDK's client sends ping without the _meta its own 2026-07-28 server requires.
	if version < "2026-07-28" {
		if err := cs.Ping(ctx, nil); err != nil {
			t.Fatalf("ping: %v", err)
		}
	}

	// Refused calls: as a JSON-RPC error, and as a tool result.
	_, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "delete", Arguments: map[string]any{"path": "/etc"}})
	var werr *jsonrpc.Error
	if !errors.As(err, &werr) || werr.Code != mcp.RefusalCode || !strings.Contains(werr.Message, "E_RULE") || !strings.Contains(werr.Message, "rule no-delete") {
		t.Errorf("a refused call: err %v, want a JSON-RPC error %d naming E_RULE and the rule", err, mcp.RefusalCode)
	}
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "delete", Arguments: map[string]any{"path": "/etc", "style": "tool"}})
	if err != nil || !res.IsError || len(res.Content) != 1 || !strings.Contains(res.Content[0].(*sdk.TextContent).Text, "E_RULE") {
		t.Errorf("a refused call as a tool result: %v %+v, want isError with E_RULE", err, res)
	}
	cs.Close()

	// A stream's answer reaches the client before the handler in front writes its report.
	testkit.WaitFor(t, 10*time.Second, "the front handler to finish every POST", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.busy == 0
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.problems {
		t.Error(p)
	}

	// The server ran read, the prompt and the resource, never delete; each as a parsed message
	// names it.
	var parsed []ranCall
	methods := map[string]int{}
	for _, b := range s.bodies {
		for _, m := range b.Messages {
			if m.Kind == mcp.Request || m.Kind == mcp.Notification {
				methods[m.Method]++
			}
			if m.Kind == mcp.Request && (m.ID == nil) {
				t.Errorf("a request without an id: %+v", m)
			}
			if m.HasTarget {
				parsed = append(parsed, ranCall{m.Method, m.Target, m.Arguments})
			}
		}
	}
	wantRan := []ranCall{{method: "tools/call", target: "read"}, {method: "prompts/get", target: "greet"}, {method: "resources/read", target: "file:///notes/a b.txt"}}
	if len(s.ran) != len(wantRan) {
		t.Fatalf("the server ran %+v, want %+v", s.ran, wantRan)
	}
	for i, r := range s.ran {
		if r.method != wantRan[i].method || r.target != wantRan[i].target {
			t.Errorf("the server ran %s %q, want %s %q", r.method, r.target, wantRan[i].method, wantRan[i].target)
		}
		found := false
		for _, p := range parsed {
			if p.method == r.method && p.target == r.target && (r.method == "resources/read" || bytes.Equal(p.arguments, r.arguments)) {
				found = true
			}
		}
		if !found {
			t.Errorf("no parsed message is the call the server ran: %s %q %s; parsed %q", r.method, r.target, r.arguments, parsed)
		}
	}
	for _, m := range s.received {
		if methods[m] == 0 {
			t.Errorf("the server received %s, which no parsed message carries", m)
		}
	}
	if methods["tools/call"] != 3 {
		t.Errorf("parsed %d tools/call messages, want 3 (read, and delete twice)", methods["tools/call"])
	}

	// The revision that mirrors the body in headers sent them, and they held.
	mirrored := 0
	for _, h := range s.headers {
		if h.Get(mcp.HeaderName) != "" {
			mirrored++
		}
	}
	if version >= "2026-07-28" && mirrored < 5 {
		t.Errorf("%d requests carried %s, want the 5 calls that name something", mirrored, mcp.HeaderName)
	}
	if version < "2026-07-28" && mirrored > 0 {
		t.Errorf("%d requests of %s carried %s", mirrored, version, mcp.HeaderName)
	}

	// The cut answer's report: one tool hidden, both pinned as their definitions are.
	var tools []mcp.Tool
	hidden := 0
	for _, r := range s.reports {
		tools = append(tools, r.Tools...)
		hidden += r.Hidden
		for _, f := range r.Findings {
			t.Errorf("report finding: %s", f)
		}
	}
	if hidden != 1 || len(tools) != 2 {
		t.Fatalf("reports hid %d of %d tools %+v, want 1 of 2", hidden, len(tools), tools)
	}
	for _, tool := range tools {
		want, err := mcp.PinTool(s.wireTool[tool.Name])
		if err != nil {
			t.Fatal(err)
		}
		if tool.Pin != want.Pin || tool.Hidden != (tool.Name == "delete") {
			t.Errorf("tool %s: pin %s hidden %v, want pin %s (of the server's own definition) hidden %v", tool.Name, tool.Pin, tool.Hidden, want.Pin, tool.Name == "delete")
		}
	}
}
