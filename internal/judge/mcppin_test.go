package judge

import (
	"net/http"
	"net/netip"
	"testing"

	"github.com/lockhttp/lockhttp/internal/policy"
)

// pinsOf is a pin state: the change of each tool of the endpoint named.
type pinsOf map[string]PinChange

func (p pinsOf) Pin(e *policy.MCPEndpoint, tool string) PinChange { return p[e.Name+"/"+tool] }

// TestMCPPinChanged: a call a rule frees of a tool whose pin changed, or of a name first listed
// after the pins, asks with the fixed reason; a refusal stays a refusal; without the gate's pins
// (lockhttp explain) nothing changed.
func TestMCPPinChanged(t *testing.T) {
	p, in := mcpSetup(t)
	decide := func(pins MCPPins, tool string) Result {
		t.Helper()
		h := http.Header{"Content-Type": {"application/json"}}
		body := mcpCall("1", tool, `{"path":"/a"}`)
		r := &Request{Kind: Tunnel, Container: "agent", Source: netip.MustParseAddr("10.0.0.5"), Method: "POST",
			Scheme: "https", Authority: "mcp.example.com", Path: "/mcp", Header: h, MediaType: "application/json",
			Body: []byte(body), BodySize: int64(len(body))}
		return Decide(&Env{Policy: p, Checks: in, Pins: pins}, r)
	}
	cases := []struct {
		name    string
		pins    MCPPins
		tool    string
		verdict policy.Verdict
		rule    string
		reason  string
	}{
		{"no pins", nil, "read", policy.Free, "mcp:files:reads", ""},
		{"same", pinsOf{"files/read": PinSame}, "read", policy.Free, "mcp:files:reads", ""},
		{"changed", pinsOf{"files/read": PinChanged}, "read", policy.Ask, RuleMCPPinChanged,
			`tools/call of "read" on MCP endpoint "files": its definition (name, description, schemas or annotations) changed since the gate pinned it, so a human must approve before it runs`},
		{"new", pinsOf{"files/read": PinNew}, "read", policy.Ask, RuleMCPPinChanged,
			`tools/call of "read" on MCP endpoint "files": the server did not list it when the gate pinned the endpoint's tools (a renamed or added tool), so a human must approve before it runs`},
		{"denied stays denied", pinsOf{"files/delete": PinChanged}, "delete", policy.Deny, "mcp:files:no-delete", ""},
		{"asked stays its rule's", pinsOf{"files/write": PinChanged}, "write", policy.Ask, "mcp:unlisted", ""},
		{"another endpoint's pin", pinsOf{"other/read": PinChanged}, "read", policy.Free, "mcp:files:reads", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := decide(c.pins, c.tool)
			if res.Verdict != c.verdict || res.Rule != c.rule || c.reason != "" && res.Reason != c.reason {
				t.Fatalf("%v %s (%s), want %v %s (%s)", res.Verdict, res.Rule, res.Reason, c.verdict, c.rule, c.reason)
			}
			if c.rule == RuleMCPPinChanged && (res.Fingerprint == "" || res.MCP.Messages[0].Decision.Rule != RuleMCPPinChanged) {
				t.Fatalf("the pin's ask is not keyed by the call: %q %+v", res.Fingerprint, res.MCP.Messages)
			}
		})
	}
}
