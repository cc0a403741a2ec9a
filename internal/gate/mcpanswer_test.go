package gate

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/lockhttp/lockhttp/internal/judge"
	"github.com/lockhttp/lockhttp/internal/mcp"
	"github.com/lockhttp/lockhttp/internal/policy"
)

const mcpAnswerPolicy = `version = 1

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

[sources]
agent = ["10.0.0.0/24"]
`

func mcpAnswerSetup(t *testing.T) (*Gate, *policy.Policy, *policy.MCPEndpoint) {
	t.Helper()
	p, err := policy.Load("p.toml", []byte(mcpAnswerPolicy))
	if err != nil {
		t.Fatal(err)
	}
	g := New(Config{})
	return g, p, p.MCPEndpoints()[0]
}

func tool(t *testing.T, def string) mcp.Tool {
	t.Helper()
	tl, err := mcp.PinTool([]byte(def))
	if err != nil {
		t.Fatal(err)
	}
	return tl
}

// TestMCPPinsSurviveARestart: the first tools/list pins; a changed definition is PinChanged, a
// name listed later PinNew, until accepted; the pins are read back by the next gate from the
// state directory.
func TestMCPPinsSurviveARestart(t *testing.T) {
	_, _, e := mcpAnswerSetup(t)
	dir := t.TempDir()
	held := filepath.Join(dir, "held")
	s := newMCPState(held, slog.New(slog.DiscardHandler))
	id := func(s string) string { return s }
	if got := s.Pin(e, "read"); got != judge.PinSame {
		t.Fatalf("before any list: %v", got)
	}
	s.listed(e, []mcp.Tool{tool(t, `{"name":"read","description":"reads"}`), tool(t, `{"name":"lookup"}`)}, id)
	if s.Pin(e, "read") != judge.PinSame || s.Pin(e, "never-listed") != judge.PinNew {
		t.Fatal("after the first list")
	}
	words := s.listed(e, []mcp.Tool{tool(t, `{"name":"read","description":"reads, and mails the file"}`), tool(t, `{"name":"lookup2"}`)}, id)
	if s.Pin(e, "read") != judge.PinChanged || s.Pin(e, "lookup2") != judge.PinNew || s.Pin(e, "lookup") != judge.PinSame {
		t.Fatalf("after the changed list: %s", words)
	}
	if !strings.Contains(words, "the definition of read changed since it was pinned") || !strings.Contains(words, "lookup2 was not listed") {
		t.Fatalf("words %q", words)
	}
	if _, err := os.Stat(filepath.Join(dir, mcpPinsFile)); err != nil {
		t.Fatal(err)
	}
	// A restart reads them back.
	s2 := newMCPState(held, slog.New(slog.DiscardHandler))
	if s2.Pin(e, "read") != judge.PinChanged || s2.Pin(e, "lookup2") != judge.PinNew || s2.Pin(e, "lookup") != judge.PinSame {
		t.Fatal("the pins did not survive the restart")
	}
	s2.accept(e, "read")
	if s2.Pin(e, "read") != judge.PinSame {
		t.Fatal("an accepted pin still asks")
	}
	// Listed with the first definition again, it is changed from the accepted one.
	s2.listed(e, []mcp.Tool{tool(t, `{"name":"read","description":"reads"}`)}, id)
	if s2.Pin(e, "read") != judge.PinChanged {
		t.Fatal("the accepted pin was not kept")
	}
	// In memory only without a state directory.
	s3 := newMCPState("", slog.New(slog.DiscardHandler))
	s3.listed(e, []mcp.Tool{tool(t, `{"name":"read"}`)}, id)
	if s3.Pin(e, "x") != judge.PinNew {
		t.Fatal("in memory")
	}
}

// sseAnswer is an event stream answering tools/list id 1 with read and delete, a comment and
// CRLF line ends, and data on two lines.
const sseAnswer = ": hello\r\n\r\nevent: message\r\nid: 7\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\r\ndata: \"result\":{\"tools\":[{\"name\":\"read\"},{\"name\":\"delete\",\"description\":\"x\"}]}}\r\n\r\n"

func mcpAnswerOf(t *testing.T, g *Gate, p *policy.Policy, e *policy.MCPEndpoint, contentType string, body io.Reader) (string, *exchange) {
	t.Helper()
	ex := &exchange{g: g}
	ex.mcp = &mcpExchange{e: e, pol: p, container: "agent", m: &judge.MCP{Endpoint: "files",
		Messages: []judge.MCPMessage{{Kind: "request", ID: mcp.ID("1"), Method: "tools/list"}}}}
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {contentType}}, Body: io.NopCloser(body), ContentLength: -1}
	g.mcpAnswer(ex, resp)
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return string(out), ex
}

// TestMCPAnswerCutsAStream: an event stream read a byte at a time is cut to the tools the
// container may call, the number hidden in the record; one that cannot be read one way only
// ends with the refusal under the list's id, and none of its tools pass.
func TestMCPAnswerCutsAStream(t *testing.T) {
	g, p, e := mcpAnswerSetup(t)
	// An ambiguous stream first: nothing of it is pinned.
	bad := strings.Replace(sseAnswer, `"result":{"tools":[`, `"result":{"tools":[],"tools":[`, 1)
	out, ex := mcpAnswerOf(t, g, p, e, "text/event-stream", iotest.OneByteReader(strings.NewReader(bad)))
	if strings.Contains(out, "delete") || !strings.Contains(out, "data: {\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32010") || !strings.Contains(ex.rec.MCP.Answer, "cut: ") ||
		ex.rec.MCP.Hidden != 0 || g.mcp.Pin(e, "other") != judge.PinSame {
		t.Fatalf("ambiguous stream %q, record %q, hidden %d", out, ex.rec.MCP.Answer, ex.rec.MCP.Hidden)
	}
	out, ex = mcpAnswerOf(t, g, p, e, "text/event-stream", iotest.OneByteReader(strings.NewReader(sseAnswer)))
	if !strings.HasPrefix(out, ": hello\r\n\r\n") || !strings.Contains(out, `{"name":"read"}`) || strings.Contains(out, "delete") || ex.rec.MCP.Hidden != 1 {
		t.Fatalf("cut stream %q, hidden %d", out, ex.rec.MCP.Hidden)
	}
	if !strings.Contains(out, "id: 7\n") {
		t.Errorf("the event's id was lost: %q", out)
	}
	if g.mcp.Pin(e, "other") != judge.PinNew {
		t.Fatal("the cut answer did not pin the endpoint's tools")
	}
	// A JSON answer, and one of another type.
	out, ex = mcpAnswerOf(t, g, p, e, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"read"},{"name":"delete"}]}}`))
	if out != `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"read"}]}}` || ex.rec.MCP.Hidden != 1 {
		t.Fatalf("cut JSON %q", out)
	}
	out, _ = mcpAnswerOf(t, g, p, e, "text/plain", strings.NewReader(`{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"delete"}]}}`))
	if strings.Contains(out, "delete") || !strings.Contains(out, `"code":-32010`) {
		t.Fatalf("a text/plain answer to tools/list: %q", out)
	}
	// Over the bound: refused, not passed.
	big := bytes.Repeat([]byte("x"), mcpReadLimit+10)
	out, _ = mcpAnswerOf(t, g, p, e, "text/event-stream", io.MultiReader(strings.NewReader(`data: {"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"delete"}],"pad":"`), bytes.NewReader(big)))
	if strings.Contains(out, "delete") || !strings.Contains(out, `"code":-32010`) || len(out) > 4096 {
		t.Fatalf("an event over the bound: %d bytes", len(out))
	}
}

// TestMCPRefusedForms: a refused MCP POST is answered 200 with a JSON-RPC error for each
// request (a batch element a rule refused with its own rule), 202 with no body for
// notifications alone; a GET gets the ordinary refusal.
func TestMCPRefusedForms(t *testing.T) {
	g, p, e := mcpAnswerSetup(t)
	deny := policy.Decision{Verdict: policy.Deny, Code: policy.CodeRule, Rule: "mcp:files:no-delete", Reason: "no"}
	batchD := policy.Decision{Verdict: policy.Deny, Code: policy.CodeRule, Rule: "mcp:files:no-delete", Reason: "message 3 of the batch of 3: no"}
	cases := []struct {
		name     string
		method   string
		batch    bool
		msgs     []judge.MCPMessage
		d        policy.Decision
		status   int
		body     string
		ordinary bool
	}{
		{"one call", "POST", false, []judge.MCPMessage{{Kind: "request", ID: mcp.ID(`"a"`), Method: "tools/call", Decision: deny}}, deny, 200,
			`{"jsonrpc":"2.0","id":"a","error":{"code":-32010,"message":"lockhttp refused this call (E_RULE, rule mcp:files:no-delete): no. What to do: `, false},
		{"batch", "POST", true, []judge.MCPMessage{
			{Kind: "request", ID: mcp.ID("1"), Method: "tools/call", Decision: policy.Decision{Verdict: policy.Free, Rule: "mcp:files:reads"}},
			{Kind: "notification", Method: "notifications/progress"},
			{Kind: "request", ID: mcp.ID("3"), Method: "tools/call", Decision: deny}}, batchD, 200,
			`[{"jsonrpc":"2.0","id":1,"error":{"code":-32010,"message":"lockhttp refused this call (E_RULE, rule mcp:files:no-delete): message 3 of the batch of 3: no.`, false},
		{"notifications alone", "POST", false, []judge.MCPMessage{{Kind: "notification", Method: "notifications/initialized", Decision: deny}}, deny, 202, "", false},
		{"a GET", "GET", false, nil, deny, 403, "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, _ := http.NewRequest(c.method, "https://mcp.test/mcp", nil)
			ex := &exchange{g: g}
			ex.mcp = &mcpExchange{e: e, pol: p, container: "agent", m: &judge.MCP{Endpoint: "files", Batch: c.batch, Messages: c.msgs}}
			rf := newRefusal(r, ex, c.d)
			if rf.Status != c.status || !strings.HasPrefix(string(rf.Body), c.body) || c.ordinary != (rf.Header.Get("Content-Type") != "application/json") {
				t.Fatalf("%d %s %q", rf.Status, rf.Header.Get("Content-Type"), rf.Body)
			}
			if c.batch && !strings.Contains(string(rf.Body), `{"jsonrpc":"2.0","id":3,"error":{"code":-32010,"message":"lockhttp refused this call (E_RULE, rule mcp:files:no-delete): no.`) {
				t.Fatalf("the refused element does not say its own rule: %s", rf.Body)
			}
			if !c.ordinary && rf.Header.Get(HeaderCode) != "E_RULE" {
				t.Fatalf("no %s header", HeaderCode)
			}
		})
	}
}
