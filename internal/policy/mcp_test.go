package policy

import (
	"errors"
	"os"
	"strings"
	"testing"
)

const mcpBase = `version = 1

[sources]
a = ["10.0.0.1"]
b = ["10.0.0.2"]

[[mcp]]
name = "files"
host = "mcp.example.com"
path = "/mcp"

[[mcp.rule]]
name = "reads"
tools = ["read_*", "list"]
verdict = "free"

[[mcp.rule]]
name = "no-delete"
tools = ["delete*"]
verdict = "deny"
reason = "deleting is for humans"

[[mcp.rule]]
name = "writes-b"
tools = ["write"]
verdict = "free"
containers = ["b"]

[[mcp]]
name = "other"
host = "mcp.example.com"
path = "/other/"

[[mcp.rule]]
name = "all"
tools = ["*"]
verdict = "free"
`

func TestMCPEvaluate(t *testing.T) {
	p := load(t, mcpBase)
	tool := func(name string) MCPMessage { return MCPMessage{Kind: MCPTool, Method: "tools/call", Tool: name} }
	tests := []struct {
		name, path, container string
		m                     MCPMessage
		verdict               Verdict
		rule, reason          string
	}{
		{"a free rule", "/mcp", "a", tool("read_file"), Free, "mcp:files:reads", `tools/call of "read_file" on MCP endpoint "files": rule "reads" (free): tools read_*, list`},
		{"an exact tool", "/mcp", "a", tool("list"), Free, "mcp:files:reads", ""},
		{"a free rule matches as written", "/mcp", "a", tool("READ_file"), Ask, RuleMCPUnlisted, `tools/call of "READ_file" on MCP endpoint "files": no rule of the endpoint lists the tool, so a human must approve`},
		{"a deny rule", "/mcp", "a", tool("delete_all"), Deny, "mcp:files:no-delete", `tools/call of "delete_all" on MCP endpoint "files": rule "no-delete" (deny): tools delete*: deleting is for humans`},
		{"a deny rule in any case", "/mcp", "a", tool("DELETE"), Deny, "mcp:files:no-delete", ""},
		{"a deny rule under case folding", "/mcp", "a", tool("deleſe_x"), Ask, RuleMCPUnlisted, ""},
		{"the long s folds", "/mcp", "a", tool("ſelect"), Ask, RuleMCPUnlisted, ""},
		{"deny wins over free", "/other", "a", tool("x"), Free, "mcp:other:all", ""},
		{"a scoped rule, its container", "/mcp", "b", tool("write"), Free, "mcp:files:writes-b", ""},
		{"a scoped rule, another container", "/mcp", "a", tool("write"), Ask, RuleMCPUnlisted, ""},
		{"an unknown container meets no scoped free rule", "/mcp", "nobody", tool("write"), Ask, RuleMCPUnlisted, ""},
		{"the protocol's own", "/mcp", "a", MCPMessage{Kind: MCPProtocol, Method: "initialize"}, Free, RuleMCPProtocol, `initialize on MCP endpoint "files" acts on no tool or data of the server (the protocol's own), so it is free`},
		{"another method", "/mcp", "a", MCPMessage{Kind: MCPOther, Method: "resources/read"}, Ask, RuleMCPUnlisted, ""},
		{"an unknown method", "/mcp", "a", MCPMessage{Kind: MCPUnknown, Method: "x/y"}, Ask, RuleMCPUnknownMethod, `"x/y" on MCP endpoint "files" is not a method of MCP, so a human must approve`},
		{"the same tool on another endpoint", "/other/", "a", tool("delete_all"), Free, "mcp:other:all", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := p.MCP("mcp.example.com", tc.path)
			if e == nil {
				t.Fatalf("no endpoint at %s", tc.path)
			}
			d := p.EvaluateMCP(e, tc.container, tc.m)
			if d.Verdict != tc.verdict || d.Rule != tc.rule || tc.reason != "" && d.Reason != tc.reason {
				t.Errorf("got %v %q %q, want %v %q %q", d.Verdict, d.Rule, d.Reason, tc.verdict, tc.rule, tc.reason)
			}
			if (d.Verdict == Deny) != (d.Code == CodeRule) {
				t.Errorf("code %q for %v", d.Code, d.Verdict)
			}
		})
	}
}

// TestMCPEndpointPaths: a request goes to an endpoint whatever way its path is written that a
// lenient server routes to it, and no other.
func TestMCPEndpointPaths(t *testing.T) {
	p := load(t, mcpBase)
	for path, want := range map[string]string{
		"/mcp": "files", "/mcp/": "files", "/MCP": "files", "//mcp": "files", "/%6Dcp": "files",
		"/mcp;x=1": "files", "/a/../mcp": "files", "/other": "other", "/Other/": "other",
		"/mcp2": "", "/mc": "", "/mcp/x": "", "/": "",
	} {
		got := ""
		if e := p.MCP("mcp.example.com", path); e != nil {
			got = e.Name
		}
		if got != want {
			t.Errorf("%s goes to %q, want %q", path, got, want)
		}
	}
	if p.MCP("other.example.com", "/mcp") != nil {
		t.Error("an endpoint on another host")
	}
}

func TestMCPConnectAtTheDomainAsks(t *testing.T) {
	p := load(t, mcpBase+`
[[rule]]
name = "whole"
hosts = ["mcp.example.com"]
verdict = "free"
`)
	d := p.Evaluate(Request{Host: "mcp.example.com", Method: "CONNECT", Connect: true, Container: "a"})
	if d.Verdict != Ask || !strings.Contains(d.Reason, `MCP endpoint "files"`) {
		t.Errorf("a CONNECT at the domain to an endpoint's host: %+v", d)
	}
}

func TestMCPErrors(t *testing.T) {
	tests := []struct {
		name, text, want string
	}{
		{"no name", "[[mcp]]\nhost = \"h.example.com\"\npath = \"/mcp\"\n", `p.toml:9: mcp #1: name is missing`},
		{"a pattern host", "[[mcp]]\nname = \"x\"\nhost = \"*.example.com\"\npath = \"/mcp\"\n", `p.toml:11: mcp "x": host "*.example.com" is a pattern; an endpoint is one server: give its exact host name`},
		{"no path", "[[mcp]]\nname = \"x\"\nhost = \"h.example.com\"\n", `p.toml:9: mcp "x": path is missing`},
		{"a relative path", "[[mcp]]\nname = \"x\"\nhost = \"h.example.com\"\npath = \"mcp\"\n", `p.toml:12: mcp "x": path "mcp" does not begin with "/"`},
		{"a query", "[[mcp]]\nname = \"x\"\nhost = \"h.example.com\"\npath = \"/mcp?a=1\"\n", `p.toml:12: mcp "x": path "/mcp?a=1" holds a query`},
		{"the same endpoint twice", "[[mcp]]\nname = \"x\"\nhost = \"h.example.com\"\npath = \"/mcp\"\n[[mcp]]\nname = \"y\"\nhost = \"H.example.com\"\npath = \"/MCP/\"\n", `p.toml:16: mcp "y": the same endpoint as [[mcp]] "x"`},
		{"a spliced host", "[[mcp]]\nname = \"x\"\nhost = \"s.example.com\"\npath = \"/mcp\"\n", `p.toml:11: mcp "x": host "s.example.com" is on the splice list`},
		{"a rule without tools", "[[mcp]]\nname = \"x\"\nhost = \"h.example.com\"\npath = \"/mcp\"\n[[mcp.rule]]\nname = \"r\"\nverdict = \"free\"\n", `p.toml:13: mcp "x" rule "r": tools is missing`},
		{"a second endpoint's rule", "[[mcp]]\nname = \"x\"\nhost = \"h.example.com\"\npath = \"/mcp\"\n[[mcp]]\nname = \"y\"\nhost = \"h.example.com\"\npath = \"/y\"\n[[mcp.rule]]\nname = \"r\"\ntools = [\"a b\"]\nverdict = \"free\"\n", `p.toml:19: mcp "y" rule "r": tools: "a b" holds white space`},
		{"a bad verdict", "[[mcp]]\nname = \"x\"\nhost = \"h.example.com\"\npath = \"/mcp\"\n[[mcp.rule]]\nname = \"r\"\ntools = [\"a\"]\nverdict = \"allow\"\n", `p.toml:16: mcp "x" rule "r": verdict "allow" is unknown; use one of "free", "ask", "deny"`},
		{"two rules of one name", "[[mcp]]\nname = \"x\"\nhost = \"h.example.com\"\npath = \"/mcp\"\n[[mcp.rule]]\nname = \"r\"\ntools = [\"a\"]\nverdict = \"free\"\n[[mcp.rule]]\nname = \"r\"\ntools = [\"b\"]\nverdict = \"ask\"\n", `p.toml:18: mcp "x" rule "r": the name is used by rule #1 of the endpoint too`},
		{"a deny rule's tools in two cases", "[[mcp]]\nname = \"x\"\nhost = \"h.example.com\"\npath = \"/mcp\"\n[[mcp.rule]]\nname = \"r\"\ntools = [\"del\", \"DEL\"]\nverdict = \"deny\"\n", `p.toml:15: mcp "x" rule "r": tools: "del" and "DEL" name the same tools, in any case`},
		{"an unknown container", "[[mcp]]\nname = \"x\"\nhost = \"h.example.com\"\npath = \"/mcp\"\n[[mcp.rule]]\nname = \"r\"\ntools = [\"a\"]\nverdict = \"free\"\ncontainers = [\"zz\"]\n", `p.toml:17: mcp "x" rule "r": containers: "zz" is not a container of [sources]`},
		{"an unknown key", "[[mcp]]\nname = \"x\"\nhost = \"h.example.com\"\npath = \"/mcp\"\n[[mcp.rule]]\nname = \"r\"\ntool = [\"a\"]\nverdict = \"free\"\n", `p.toml:15: mcp.rule.tool: unknown key; the keys of [[mcp.rule]] are name, tools, verdict, reason, containers`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := "version = 1\nsplice = [\"s.example.com\"]\n\n[sources]\na = [\"10.0.0.1\"]\n\n# endpoints\n\n" + tc.text
			_, err := Load("p.toml", []byte(src))
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("loaded: %v", err)
			}
			for _, e := range es {
				if strings.HasPrefix(e.Error(), tc.want) {
					return
				}
			}
			t.Errorf("errors:\n%v\nwant one starting %q", err, tc.want)
		})
	}
}

func TestMCPCompare(t *testing.T) {
	base := load(t, mcpBase)
	tests := []struct {
		name   string
		edit   func(string) string
		loose  bool
		phrase string
	}{
		{"a free rule added", func(s string) string {
			return s + "[[mcp.rule]]\nname = \"more\"\ntools = [\"x\"]\nverdict = \"free\"\n"
		}, true, `mcp "other" rule "more": + free tools x`},
		{"a deny rule added", func(s string) string {
			return s + "[[mcp.rule]]\nname = \"no-x\"\ntools = [\"x\"]\nverdict = \"deny\"\n"
		}, false, `mcp "other" rule "no-x": + deny tools x`},
		{"a free rule widened", func(s string) string {
			return strings.Replace(s, `tools = ["read_*", "list"]`, `tools = ["read_*", "list", "write_*"]`, 1)
		}, true, `mcp "files" rule "reads": tools: + write_*`},
		{"a free rule narrowed", func(s string) string {
			return strings.Replace(s, `tools = ["read_*", "list"]`, `tools = ["read_*"]`, 1)
		}, false, `mcp "files" rule "reads": tools: - list`},
		{"a deny rule narrowed", func(s string) string { return strings.Replace(s, `tools = ["delete*"]`, `tools = ["delete_all"]`, 1) }, true, `mcp "files" rule "no-delete": tools: - delete*`},
		{"a deny rule made free", func(s string) string {
			return strings.Replace(s, "tools = [\"delete*\"]\nverdict = \"deny\"", "tools = [\"delete*\"]\nverdict = \"free\"", 1)
		}, true, `mcp "files" rule "no-delete": verdict deny → free`},
		{"a scoped free rule for every container", func(s string) string {
			return strings.Replace(s, "containers = [\"b\"]\n", "", 1)
		}, true, `mcp "files" rule "writes-b": containers: b → every container`},
		{"an endpoint added", func(s string) string {
			return s + "[[mcp]]\nname = \"new\"\nhost = \"n.example.com\"\npath = \"/\"\n"
		}, true, `mcp "new": + endpoint https://n.example.com/`},
		{"an endpoint moved", func(s string) string {
			return strings.Replace(s, `path = "/other/"`, `path = "/elsewhere"`, 1)
		}, true, `mcp "other": + endpoint https://mcp.example.com/elsewhere (moved from`},
		{"an endpoint removed", func(s string) string { return s[:strings.Index(s, "[[mcp]]\nname = \"other\"")] }, false, `mcp "other": - endpoint https://mcp.example.com/other/ (its requests are then decided by the rules, which ask)`},
		{"an endpoint removed under a free rule of its host", func(s string) string {
			return s[:strings.Index(s, "[[mcp]]\nname = \"other\"")] + "[[rule]]\nname = \"mcp-host\"\nhosts = [\"*.example.com\"]\nmethods = [\"GET\"]\nverdict = \"free\"\n"
		}, true, `mcp "other": - endpoint https://mcp.example.com/other/, and the free rule "mcp-host" names its host`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := Compare(base, load(t, tc.edit(mcpBase)))
			lines := strings.Join(append(append([]string{}, c.Loosenings...), c.Tightenings...), "\n")
			if c.Tightening() == tc.loose {
				t.Errorf("loose %v, want %v: %q %q %v", !c.Tightening(), tc.loose, c.Loosenings, c.Tightenings, c.Examples)
			}
			if !strings.Contains(lines, tc.phrase) {
				t.Errorf("no line says %q:\n%s", tc.phrase, lines)
			}
		})
	}
}

// TestMCPDifferentialFindsTheCall: what the rule-by-rule comparison reads as a rule's change,
// the differential check finds as the call it frees.
func TestMCPDifferentialFindsTheCall(t *testing.T) {
	base := load(t, mcpBase)
	new := load(t, strings.Replace(mcpBase, "tools = [\"delete*\"]\nverdict = \"deny\"", "tools = [\"delete*\"]\nverdict = \"ask\"", 1))
	d := differential(base, new)
	found := false
	for _, e := range d.examples {
		if e.Kind == ExampleMCP && strings.Contains(e.String(), `in POST https://mcp.example.com/mcp would be ASK (rule "mcp:files:no-delete"), was DENY`) {
			found = true
		}
	}
	if !found {
		t.Errorf("examples %v", d.examples)
	}
}

// TestDocsMCPExample loads the example of docs/mcp.md ("Endpoints and rules"), checks what the
// text says it decides, and the errors it quotes.
func TestDocsMCPExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/mcp.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "## Endpoints and rules\n")
	_, block, ok2 := strings.Cut(section, "```toml\n")
	block, _, ok3 := strings.Cut(block, "```\n")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/mcp.md has no TOML block under \"Endpoints and rules\"")
	}
	p := load(t, block)
	e := p.MCP("api.githubcopilot.com", "/mcp/")
	if e == nil {
		t.Fatal("no endpoint at https://api.githubcopilot.com/mcp/")
	}
	tool := func(name string) MCPMessage { return MCPMessage{Kind: MCPTool, Method: "tools/call", Tool: name} }
	for _, c := range []struct {
		container, tool string
		verdict         Verdict
		rule            string
	}{
		{"reviewer", "get_me", Free, "mcp:github:reads"},
		{"coder", "search_code", Free, "mcp:github:reads"},
		{"coder", "merge_pull_request", Deny, "mcp:github:no-merge"},
		{"coder", "Delete_repo", Deny, "mcp:github:no-merge"},
		{"coder", "create_pull_request", Free, "mcp:github:coder-writes"},
		{"reviewer", "create_pull_request", Ask, RuleMCPUnlisted},
		{"coder", "create_issue", Ask, RuleMCPUnlisted},
	} {
		if d := p.EvaluateMCP(e, c.container, tool(c.tool)); d.Verdict != c.verdict || d.Rule != c.rule {
			t.Errorf("%s from %s: %v %q; the docs say %v %q", c.tool, c.container, d.Verdict, d.Rule, c.verdict, c.rule)
		}
	}
	for _, edit := range [][2]string{{`"get_*"`, `"get *"`}, {`host = "api.githubcopilot.com"`, `host = "*.githubcopilot.com"`}} {
		_, err := Load("policy.toml", []byte(strings.Replace(block, edit[0], edit[1], 1)))
		if err == nil || !strings.Contains(string(doc), err.Error()+"\n") {
			t.Errorf("the docs do not quote the error of %s\n%v", edit[1], err)
		}
	}
}
