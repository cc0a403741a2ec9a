package audit

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestAppendJSONMCP: an MCP request's fields follow the others, each bounded; a record of any
// other request has none.
func TestAppendJSONMCP(t *testing.T) {
	r := Record{Time: testTime, Verdict: "FREE", Status: 200, MCP: MCP{Endpoint: "files", Method: "tools/call", Tool: "read",
		Call: "mcp1:ab", Hidden: 2, Requests: "sampling/createMessage", Marks: `"ignore previous instructions" at result.content[0].text`, Answer: "cut"}}
	got := string(r.AppendJSON(nil))
	want := `{"time":"2026-11-30T14:03:07.123456789Z","verdict":"FREE","code":"","status":200,"mcp_endpoint":"files","mcp_method":"tools/call","mcp_tool":"read","mcp_call":"mcp1:ab","mcp_hidden":2,"mcp_requests":"sampling/createMessage","mcp_marks":"\"ignore previous instructions\" at result.content[0].text","mcp_answer":"cut"}`
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	r.MCP = MCP{Endpoint: "files", Tool: strings.Repeat("t", 5000), Marks: strings.Repeat("<", 5000)}
	line := r.AppendJSON(nil)
	var d map[string]any
	if err := json.Unmarshal(line, &d); err != nil {
		t.Fatal(err)
	}
	if tool := d["mcp_tool"].(string); len(tool) > maxShortField || !strings.Contains(tool, clipMarker) {
		t.Errorf("mcp_tool not clipped: %d bytes", len(tool))
	}
	if len(line) > 3000 {
		t.Errorf("a record with long MCP fields is %d bytes", len(line))
	}
	r.MCP = MCP{Tool: "read"} // no endpoint: no MCP request
	if s := string(r.AppendJSON(nil)); strings.Contains(s, "mcp_") {
		t.Errorf("a record without an endpoint has MCP fields: %s", s)
	}
}
