package claudeapi

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/lockhttp/lockhttp/internal/policy"
)

const testLimit = 1 << 20

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func jsonHeader() http.Header {
	return http.Header{"Content-Type": {"application/json"}, "Anthropic-Version": {"2023-06-01"}}
}

// checkJudgement asserts the verdict, code, rule, a fragment of the reason (or of a finding),
// NeverAuto on every ASK and the red flag.
func checkJudgement(t *testing.T, got Judgement, verdict policy.Verdict, code policy.Code, rule, fragment string, red bool) {
	t.Helper()
	if got.Verdict != verdict || got.Code != code || got.Rule != rule {
		t.Fatalf("got %s %q rule %q (%s); want %s %q rule %q", got.Verdict, got.Code, got.Rule, got.Reason, verdict, code, rule)
	}
	if got.Reason == "" {
		t.Fatalf("empty reason")
	}
	hay := got.Reason + "\n" + strings.Join(got.Findings, "\n")
	if !strings.Contains(hay, fragment) {
		t.Fatalf("reason %q, findings %q: no %q", got.Reason, got.Findings, fragment)
	}
	if got.NeverAuto != (verdict == policy.Ask) {
		t.Fatalf("NeverAuto = %v for %s", got.NeverAuto, verdict)
	}
	if got.Red != red {
		t.Fatalf("Red = %v, want %v", got.Red, red)
	}
	if verdict == policy.Ask && (len(got.Findings) == 0 || !strings.HasPrefix(got.Reason, got.Findings[0])) {
		t.Fatalf("an ASK whose reason %q does not start with its first finding %q", got.Reason, got.Findings)
	}
	if verdict == policy.Free && len(got.Findings) != 0 {
		t.Fatalf("a FREE decision with findings %q", got.Findings)
	}
}

// TestSDKBodies judges request bodies as the official SDKs send them.
func TestSDKBodies(t *testing.T) {
	const (
		msgs  = "/v1/messages"
		count = "/v1/messages/count_tokens"
	)
	cases := []struct {
		file     string
		path     string
		verdict  policy.Verdict
		rule     string
		fragment string
		red      bool
	}{
		{"plain.json", msgs, policy.Free, RuleMessages, "no MCP server", false},
		{"streaming.json", msgs + "?beta=true", policy.Free, RuleMessages, "no MCP server", false},
		{"custom_tools.json", msgs, policy.Free, RuleMessages, "no MCP server", false},
		{"tool_turns.json", msgs, policy.Free, RuleMessages, "no MCP server", false},
		{"web_search.json", msgs, policy.Free, RuleMessages, "but web search", false},
		{"web_search_result_history.json", msgs, policy.Free, RuleMessages, "no MCP server", false},
		{"web_fetch.json", msgs, policy.Ask, RuleMessages, `tools[1]: a server tool of type "web_fetch_20250910"`, true},
		{"code_execution.json", msgs, policy.Ask, RuleMessages, "container: Anthropic would run code", true},
		{"code_execution.json", msgs, policy.Ask, RuleMessages, `tools[0]: a server tool of type "code_execution_20250825"`, true},
		{"mcp.json", msgs + "?beta=true", policy.Ask, RuleMessages, "mcp_servers: Anthropic would connect", true},
		{"mcp.json", msgs, policy.Ask, RuleMessages, `a server tool of type "mcp_toolset"`, true},
		{"count_tokens.json", count, policy.Free, RuleMessages, "no MCP server", false},
		{"mcp.json", count, policy.Ask, RuleMessages, "mcp_servers", true},
		{"batches.json", "/v1/messages/batches", policy.Ask, RuleWrite, `POST "/v1/messages/batches" writes`, false},
		{"image_base64.json", msgs, policy.Free, RuleMessages, "no MCP server", false},
		{"image_url.json", msgs, policy.Ask, RuleMessages, `messages[0].content[0]: a source of type "url"`, true},
		{"document_url_tool_result.json", msgs, policy.Ask, RuleMessages, `messages[2].content[0].content[1]: a source of type "url"`, true},
		{"system_document_url.json", msgs, policy.Ask, RuleMessages, `system[1]: a source of type "url"`, true},
		{"allowed_callers.json", msgs, policy.Ask, RuleMessages, "tools[0].allowed_callers: a tool that Anthropic's code may call", true},
		{"allowed_callers_direct.json", msgs, policy.Free, RuleMessages, "no MCP server", false},
		{"thinking.json", msgs, policy.Free, RuleMessages, "no MCP server", false},
	}
	for _, c := range cases {
		t.Run(strings.TrimSuffix(c.file, ".json")+c.path, func(t *testing.T) {
			got := Judge(Request{Host: "api.anthropic.com", Method: "POST", Path: c.path, Header: jsonHeader(),
				Body: readTestdata(t, filepath.Join("sdk", c.file)), Limit: testLimit})
			checkJudgement(t, got, c.verdict, "", c.rule, c.fragment, c.red)
		})
	}
}

// TestBadBodies: every ambiguity and unexpected type asks, with a reason that says which.
func TestBadBodies(t *testing.T) {
	cases := []struct {
		file     string
		fragment string
	}{
		{"duplicate_tools.json", `the key "tools" appears twice in the top level`},
		{"duplicate_tool_type.json", `the key "type" appears twice in tools[0]`},
		{"case_Tools.json", `the top-level key "Tools" differs from "tools" only by case`},
		{"case_MCP_SERVERS.json", `the top-level key "MCP_SERVERS" differs from "mcp_servers" only by case`},
		{"case_Container.json", `"Container" differs from "container"`},
		{"fold_long_s.json", `differs from "mcp_servers" only by case`},
		{"escaped_mcp_servers.json", "mcp_servers: Anthropic would connect"},
		{"case_tool_type.json", `tools[0].TYPE differs from "type" only by case`},
		{"top_level_array.json", "the body is not one JSON object (it starts with '[')"},
		{"trailing_object.json", "data after the object at byte 3"},
		{"trailing_garbage.json", "data after the object at byte 2"},
		{"invalid_utf8.json", "not valid UTF-8"},
		{"invalid_utf8_key.json", "not valid UTF-8"},
		{"lone_high_surrogate.json", "a lone high surrogate"},
		{"lone_low_surrogate.json", "a lone low surrogate"},
		{"high_surrogate_then_letter.json", "a lone high surrogate"},
		{"deep_nesting.json", "nests deeper than 512 levels"},
		{"bom.json", "not one JSON object"},
		{"number_out_of_range.json", "out of range"},
		{"empty.json", "the body is empty"},
		{"case_source_type.json", `a source of type "url"`},
		{"case_source_key.json", `differs from "source" only by case`},
		{"case_source_key.json", `a source of type "url"`},
		{"tools_not_array.json", "tools: an object where an array is expected"},
		{"tool_not_object.json", "tools[0]: a string where a tool object is expected"},
		{"tool_type_number.json", "tools[0].type: a number where a string is expected"},
		{"source_type_null.json", "messages[0].content[0].source.type: null where a string is expected"},
		{"source_not_object.json", "messages[0].content[0].source: a string where an object is expected"},
		{"allowed_callers_not_array.json", "tools[0].allowed_callers"},
		{"tool_search.json", `tools[1]: a server tool of type "tool_search_tool_regex_20251119"`},
	}
	for _, c := range cases {
		t.Run(strings.TrimSuffix(c.file, ".json"), func(t *testing.T) {
			body := readTestdata(t, filepath.Join("bad", c.file))
			free, findings := JudgeBody(body)
			if free || len(findings) == 0 {
				t.Fatalf("free = %v, findings %q; want not free", free, findings)
			}
			if !strings.Contains(strings.Join(findings, "\n"), c.fragment) {
				t.Fatalf("findings %q: no %q", findings, c.fragment)
			}
			got := Judge(Request{Host: "api.anthropic.com", Method: "POST", Path: "/v1/messages", Header: jsonHeader(), Body: body, Limit: testLimit})
			checkJudgement(t, got, policy.Ask, "", RuleMessages, c.fragment, true)
		})
	}
}

// TestToolTypes classifies tools by type, never by name.
func TestToolTypes(t *testing.T) {
	cases := []struct {
		tool string
		free bool
	}{
		{`{"name":"web_fetch","input_schema":{"type":"object"}}`, true},
		{`{"type":null,"name":"code_execution","input_schema":{"type":"object"}}`, true},
		{`{"type":"custom","name":"mcp_toolset","input_schema":{"type":"object"}}`, true},
		{`{"type":"bash_20250124","name":"bash"}`, true},
		{`{"type":"bash_20241022","name":"bash"}`, true},
		{`{"type":"text_editor_20250728","name":"str_replace_based_edit_tool"}`, true},
		{`{"type":"computer_20251124","name":"computer"}`, true},
		{`{"type":"memory_20250818","name":"memory"}`, true},
		{`{"type":"computer_toolset_20260101","name":"c"}`, true},
		{`{"type":"browser_toolset_20260101","name":"b"}`, true},
		{`{"type":"web_search_20250305","name":"web_search"}`, true},
		{`{"type":"web_search_20260209","name":"web_search","allowed_callers":["direct"]}`, true},
		{`{"type":"web_fetch_20250910","name":"get_weather"}`, false},
		{`{"type":"web_fetch_20260209","name":"web_fetch"}`, false},
		{`{"type":"code_execution_20250522","name":"code_execution"}`, false},
		{`{"type":"mcp_toolset","mcp_server_name":"x"}`, false},
		{`{"type":"tool_search_tool_bm25_20251119","name":"tool_search_tool_bm25"}`, false},
		{`{"type":"advisor_20260301","name":"advisor"}`, false},
		{`{"type":"something_new_20270101","name":"x"}`, false},
		{`{"type":"","name":"x"}`, false},
		{`{"type":"Custom","name":"x"}`, false},
		{`{"type":"bash","name":"bash"}`, false},
		{`{"type":"web_search","name":"web_search"}`, false},
		{`{"type":["custom"],"name":"x"}`, false},
		{`{"type":true,"name":"x"}`, false},
		{`{"type":"cust\u006fm","name":"x"}`, true},
		{`{"name":"x","allowed_callers":[]}`, true},
		{`{"name":"x","allowed_callers":["direct","direct"]}`, true},
		{`{"name":"x","allowed_callers":["direct","code_execution_20250825"]}`, false},
		{`{"name":"x","allowed_callers":[null]}`, false},
		{`{"name":"x","allowed_callers":null}`, false},
		{`{"name":"x","Allowed_Callers":["code_execution_20250825"]}`, false},
	}
	for _, c := range cases {
		t.Run(c.tool, func(t *testing.T) {
			body := `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[],"tools":[` + c.tool + `]}`
			free, findings := JudgeBody([]byte(body))
			if free != c.free {
				t.Fatalf("free = %v (findings %q), want %v", free, findings, c.free)
			}
		})
	}
}

// TestTopLevel: mcp_servers and container ask whatever their value; other fields do not.
func TestTopLevel(t *testing.T) {
	cases := []struct {
		fields string
		free   bool
	}{
		{`"mcp_servers":[]`, false},
		{`"mcp_servers":null`, false},
		{`"container":null`, false},
		{`"container":{"skills":[{"type":"anthropic","skill_id":"pptx","version":"latest"}]}`, false},
		{`"tools":null`, false},
		{`"tools":[]`, true},
		{`"metadata":{"mcp_servers":[1],"container":"x","tools":[{"type":"web_fetch_20250910"}]}`, true},
		{`"tool_choice":{"type":"tool","name":"web_fetch"}`, true},
		{`"messages":[{"role":"user","content":[{"type":"image","source":{"type":"URL","url":"https://example.com/a.png"}}]}]`, false},
		{`"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url"}}]}]`, false},
		{`"messages":[{"role":"user","content":[{"type":"text","text":"x","source":{"type":"url"}}]}]`, false},
		{`"messages":[{"role":"user","content":[{"type":"document","source":{"type":"content","content":[{"type":"image","source":{"type":"url","url":"https://example.com/a.png"}}]}}]}]`, false},
		{`"messages":[{"role":"user","content":[{"type":"document","source":{"type":"text","media_type":"text/plain","data":"a url source: {\"type\":\"url\"}"}}]}]`, true},
		{`"messages":[{"role":"user","content":[{"type":"document","source":{"type":"file","file_id":"file_011"}}]}]`, true},
		{`"messages":[{"role":"user","content":[{"type":"container_upload","file_id":"file_011"}]}]`, true},
		{`"messages":[{"role":"user","content":[{"type":"image"}]}]`, true},
	}
	for _, c := range cases {
		t.Run(c.fields, func(t *testing.T) {
			body := `{"model":"claude-sonnet-4-5","max_tokens":10,` + c.fields + `}`
			free, findings := JudgeBody([]byte(body))
			if free != c.free {
				t.Fatalf("free = %v (findings %q), want %v", free, findings, c.free)
			}
		})
	}
}

func gzipped(t testing.TB, b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(b)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func deflated(t testing.TB, b []byte) []byte {
	var buf bytes.Buffer
	w := zlib.NewWriter(&buf)
	w.Write(b)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func brotlied(t testing.TB, b []byte) []byte {
	var buf bytes.Buffer
	w := brotli.NewWriter(&buf)
	w.Write(b)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestEncodings: encoded bodies are decoded under the limit and judged; what cannot be decoded
// asks; a bomb is refused.
func TestEncodings(t *testing.T) {
	plain := readTestdata(t, "sdk/plain.json")
	fetch := readTestdata(t, "sdk/web_fetch.json")
	bomb := gzipped(t, bytes.Repeat([]byte(" "), 4*testLimit))
	if len(bomb) > testLimit {
		t.Fatalf("the bomb is %d bytes, not under the limit", len(bomb))
	}
	cases := []struct {
		name     string
		ctype    []string
		encoding []string
		body     []byte
		limit    int64
		verdict  policy.Verdict
		code     policy.Code
		rule     string
		fragment string
	}{
		{"gzip free", []string{"application/json"}, []string{"gzip"}, gzipped(t, plain), testLimit, policy.Free, "", RuleMessages, "no MCP server"},
		{"gzip ask", []string{"application/json"}, []string{"gzip"}, gzipped(t, fetch), testLimit, policy.Ask, "", RuleMessages, "web_fetch_20250910"},
		{"x-gzip", []string{"application/json"}, []string{"X-GZIP"}, gzipped(t, fetch), testLimit, policy.Ask, "", RuleMessages, "web_fetch_20250910"},
		{"deflate free", []string{"application/json"}, []string{"deflate"}, deflated(t, plain), testLimit, policy.Free, "", RuleMessages, "no MCP server"},
		{"deflate ask", []string{"application/json"}, []string{"deflate"}, deflated(t, fetch), testLimit, policy.Ask, "", RuleMessages, "web_fetch_20250910"},
		{"br free", []string{"application/json"}, []string{"br"}, brotlied(t, plain), testLimit, policy.Free, "", RuleMessages, "no MCP server"},
		{"br ask", []string{"application/json"}, []string{"br"}, brotlied(t, fetch), testLimit, policy.Ask, "", RuleMessages, "web_fetch_20250910"},
		{"gzip then br, one line", []string{"application/json"}, []string{"gzip, br"}, brotlied(t, gzipped(t, fetch)), testLimit, policy.Ask, "", RuleMessages, "web_fetch_20250910"},
		{"gzip then br, two lines", []string{"application/json"}, []string{"gzip", "br"}, brotlied(t, gzipped(t, plain)), testLimit, policy.Free, "", RuleMessages, "no MCP server"},
		{"identity", []string{"application/json"}, []string{"identity"}, plain, testLimit, policy.Free, "", RuleMessages, "no MCP server"},
		{"listed in the wrong order", []string{"application/json"}, []string{"br, gzip"}, brotlied(t, gzipped(t, plain)), testLimit, policy.Ask, "", RuleMessages, "the gzip body cannot be read"},
		{"not gzip", []string{"application/json"}, []string{"gzip"}, plain, testLimit, policy.Ask, "", RuleMessages, "the gzip body cannot be read"},
		{"gzip with trailing data", []string{"application/json"}, []string{"gzip"}, append(gzipped(t, plain), "{}"...), testLimit, policy.Ask, "", RuleMessages, "the gzip body cannot be read"},
		{"deflate with trailing data", []string{"application/json"}, []string{"deflate"}, append(deflated(t, plain), "{}"...), testLimit, policy.Ask, "", RuleMessages, "bytes after the compressed stream"},
		{"br with trailing data", []string{"application/json"}, []string{"br"}, append(brotlied(t, plain), "{}"...), testLimit, policy.Ask, "", RuleMessages, "the br body cannot be read"},
		{"unknown encoding", []string{"application/json"}, []string{"zstd"}, plain, testLimit, policy.Ask, "", RuleMessages, `the content coding "zstd" is not one the gate reads`},
		{"too many encodings", []string{"application/json"}, []string{"gzip,gzip,gzip,gzip,gzip"}, plain, testLimit, policy.Ask, "", RuleMessages, "5 content codings stacked"},
		{"gzip bomb", []string{"application/json"}, []string{"gzip"}, bomb, testLimit, policy.Deny, policy.CodeBodyTooLarge, RuleSize, `decodes (Content-Encoding "gzip") to more than the limit`},
		{"raw over the limit", []string{"application/json"}, nil, plain, int64(len(plain)) - 1, policy.Deny, policy.CodeBodyTooLarge, RuleSize, "over the limit"},
		{"at the limit", []string{"application/json"}, nil, plain, int64(len(plain)), policy.Free, "", RuleMessages, "no MCP server"},
		{"zero limit", []string{"application/json"}, nil, plain, 0, policy.Deny, policy.CodeBodyTooLarge, RuleSize, "over the limit"},
		{"text/plain", []string{"text/plain"}, nil, plain, testLimit, policy.Ask, "", RuleMessages, `the body is "text/plain", not application/json`},
		{"no content type", nil, nil, plain, testLimit, policy.Ask, "", RuleMessages, "no Content-Type"},
		{"two content types", []string{"application/json", "application/json"}, nil, plain, testLimit, policy.Ask, "", RuleMessages, "more than one Content-Type"},
		{"unreadable content type", []string{"application/json; ="}, nil, plain, testLimit, policy.Ask, "", RuleMessages, "cannot be read"},
		{"charset", []string{"application/json; charset=utf-8"}, nil, plain, testLimit, policy.Free, "", RuleMessages, "no MCP server"},
		{"upper case", []string{"Application/JSON"}, nil, plain, testLimit, policy.Free, "", RuleMessages, "no MCP server"},
		{"json suffix", []string{"application/vnd.api+json"}, nil, plain, testLimit, policy.Ask, "", RuleMessages, "not application/json"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := http.Header{}
			for _, v := range c.ctype {
				h.Add("Content-Type", v)
			}
			for _, v := range c.encoding {
				h.Add("Content-Encoding", v)
			}
			got := Judge(Request{Host: "api.anthropic.com", Method: "POST", Path: "/v1/messages", Header: h, Body: c.body, Limit: c.limit})
			checkJudgement(t, got, c.verdict, c.code, c.rule, c.fragment, c.verdict == policy.Ask)
		})
	}
}

// TestPaths: which check decides each method and path.
func TestPaths(t *testing.T) {
	plain := readTestdata(t, "sdk/plain.json")
	fetch := readTestdata(t, "sdk/web_fetch.json")
	cases := []struct {
		host, method, path string
		body               []byte
		verdict            policy.Verdict
		rule, fragment     string
	}{
		{"api.anthropic.com", "POST", "/v1/messages?beta=true", plain, policy.Free, RuleMessages, "no MCP server"},
		{"api.anthropic.com", "POST", "/v1/messages?beta=true", fetch, policy.Ask, RuleMessages, "web_fetch"},
		{"API.Anthropic.COM.", "POST", "/v1/messages", plain, policy.Free, RuleMessages, "no MCP server"},
		{"api.anthropic.com:443", "POST", "/v1/messages", plain, policy.Free, RuleMessages, "no MCP server"},
		{"api.anthropic.com", "POST", "/v1/messages/count_tokens?beta=true", fetch, policy.Ask, RuleMessages, "web_fetch"},
		{"api.anthropic.com", "POST", "/v1/messages/batches", plain, policy.Ask, RuleWrite, `POST "/v1/messages/batches"`},
		{"api.anthropic.com", "POST", "/v1/messages/batches/msgbatch_01/cancel", nil, policy.Ask, RuleWrite, "writes"},
		{"api.anthropic.com", "GET", "/v1/messages/batches/msgbatch_01/results", nil, policy.Free, RuleRead, "GET reads only"},
		{"api.anthropic.com", "GET", "/v1/files/abc/content", nil, policy.Ask, RuleFiles, "the Files API"},
		{"api.anthropic.com", "GET", "/v1/files", nil, policy.Ask, RuleFiles, "the Files API"},
		{"api.anthropic.com", "POST", "/v1/files?beta=true", nil, policy.Ask, RuleFiles, "the Files API"},
		{"api.anthropic.com", "DELETE", "/v1/files/file_011", nil, policy.Ask, RuleFiles, "the Files API"},
		{"api.anthropic.com", "HEAD", "/V1/FILES/abc", nil, policy.Ask, RuleFiles, "the Files API"},
		{"api.anthropic.com", "GET", "/v1/files%2Fabc", nil, policy.Ask, RuleFiles, "the Files API"},
		{"api.anthropic.com", "GET", "/v1/files;x/abc", nil, policy.Ask, RuleFiles, "the Files API"},
		{"api.anthropic.com", "GET", "/v1\\files\\abc", nil, policy.Ask, RuleFiles, "the Files API"},
		{"api.anthropic.com", "GET", "/v1/%66iles/abc", nil, policy.Ask, RuleFiles, "the Files API"},
		{"api.anthropic.com", "GET", "/v1/filesystem", nil, policy.Free, RuleRead, "GET reads only"},
		{"api.anthropic.com", "GET", "/v1/models", nil, policy.Free, RuleRead, "GET reads only"},
		{"api.anthropic.com", "OPTIONS", "/v1/messages", nil, policy.Free, RuleRead, "OPTIONS reads only"},
		{"api.anthropic.com", "get", "/v1/models", nil, policy.Ask, RuleWrite, `get "/v1/models" writes`},
		{"api.anthropic.com", "PUT", "/v1/messages", plain, policy.Ask, RuleWrite, `PUT "/v1/messages" writes`},
		{"api.anthropic.com", "POST", "/v1/skills", nil, policy.Ask, RuleWrite, `POST "/v1/skills" writes`},
		{"console.anthropic.com", "POST", "/v1/oauth/token", nil, policy.Free, RuleOAuth, "OAuth"},
		{"api.anthropic.com", "POST", "/v1/oauth/token", nil, policy.Free, RuleOAuth, "OAuth"},
		{"claude.ai", "GET", "/oauth/authorize?code=true&client_id=x", nil, policy.Free, RuleOAuth, "OAuth"},
		{"claude.ai", "POST", "/oauth/token", nil, policy.Free, RuleOAuth, "OAuth"},
		{"api.anthropic.com", "POST", "/oauth/token", nil, policy.Ask, RuleWrite, "writes"},
		{"claude.ai", "POST", "/OAUTH/token", nil, policy.Ask, RuleWrite, "writes"},
		{"claude.ai", "POST", "/api/organizations/x/chat_conversations", nil, policy.Ask, RuleWrite, "writes"},
		{"statsig.anthropic.com", "POST", "/v1/rgstr", nil, policy.Ask, RuleWrite, "writes"},
		{"statsig.anthropic.com", "GET", "/v1/initialize", nil, policy.Free, RuleRead, "GET reads only"},
		// Case and form variants are judged as the path they name, and never free.
		{"api.anthropic.com", "POST", "/V1/Messages", plain, policy.Ask, RuleMessages, `"/V1/Messages" is "/v1/messages" written another way`},
		{"api.anthropic.com", "POST", "/V1/MESSAGES", fetch, policy.Ask, RuleMessages, "web_fetch"},
		{"api.anthropic.com", "POST", "/v1/messages/", plain, policy.Ask, RuleMessages, "written another way"},
		{"api.anthropic.com", "POST", "//v1//messages", plain, policy.Free, RuleMessages, "no MCP server"},
		{"api.anthropic.com", "POST", "/v1/messages;x", plain, policy.Ask, RuleMessages, "written another way"},
		{"api.anthropic.com", "POST", "/v1%2Fmessages", fetch, policy.Ask, RuleMessages, "web_fetch"},
		{"api.anthropic.com", "POST", "/v1/Messages/Count_Tokens", plain, policy.Ask, RuleMessages, "written another way"},
		// Dot segments are resolved first.
		{"api.anthropic.com", "POST", "/v1/files/../messages", fetch, policy.Ask, RuleMessages, "web_fetch"},
		{"api.anthropic.com", "POST", "/v1/files/../messages", plain, policy.Free, RuleMessages, "no MCP server"},
		{"api.anthropic.com", "POST", "/v1/files/%2e%2e/messages", fetch, policy.Ask, RuleMessages, "web_fetch"},
		{"api.anthropic.com", "GET", "/v1/messages/../files", nil, policy.Ask, RuleFiles, "the Files API"},
		{"api.anthropic.com", "GET", "/v1/oauth/../files/x", nil, policy.Ask, RuleFiles, "the Files API"},
		{"api.anthropic.com", "POST", "/v1/oauth/x%2F..%2F..%2Fmessages", fetch, policy.Ask, RuleMessages, "web_fetch"},
		{"api.anthropic.com", "GET", "/v1/oauth/x%2F..%2F..%2Ffiles", nil, policy.Ask, RuleFiles, "the Files API"},
		// Not one of the five hosts.
		{"docs.anthropic.com", "GET", "/", nil, policy.Ask, RuleHost, "not one of the Claude API hosts"},
		{"example.com", "GET", "/", nil, policy.Ask, RuleHost, "not one of the Claude API hosts"},
	}
	for _, c := range cases {
		t.Run(c.host+" "+c.method+" "+c.path, func(t *testing.T) {
			got := Judge(Request{Host: c.host, Method: c.method, Path: c.path, Header: jsonHeader(), Body: c.body, Limit: testLimit})
			checkJudgement(t, got, c.verdict, "", c.rule, c.fragment, c.verdict == policy.Ask && c.rule == RuleMessages)
		})
	}
}

func TestGoverns(t *testing.T) {
	cases := []struct {
		host           string
		covered, known bool
	}{
		{"api.anthropic.com", true, true},
		{"API.ANTHROPIC.COM.", true, true},
		{"claude.ai", true, true},
		{"claude.ai:443", true, true},
		{"console.anthropic.com", true, true},
		{"statsig.anthropic.com", true, true},
		{"anthropic.com", true, false},
		{"docs.anthropic.com", true, false},
		{"mcp-proxy.anthropic.com", true, false},
		{"a.b.claude.ai", true, false},
		{"claude.com", true, false},
		{"platform.claude.com", true, true},
		{"Platform.Claude.Com.", true, true},
		{"notanthropic.com", false, false},
		{"anthropic.com.evil.example", false, false},
		{"claude.ai.example", false, false},
		{"example.com", false, false},
	}
	for _, c := range cases {
		t.Run(c.host, func(t *testing.T) {
			covered, known := Governs(c.host)
			if covered != c.covered || known != c.known {
				t.Fatalf("Governs(%q) = %v, %v; want %v, %v", c.host, covered, known, c.covered, c.known)
			}
		})
	}
	got := OtherHost("Docs.Anthropic.com")
	checkJudgement(t, got, policy.Ask, "", RuleHost, `"docs.anthropic.com" is an Anthropic host`, false)
}
