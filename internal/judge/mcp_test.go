package judge

import (
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/mcp"
	"github.com/lockhttp/lockhttp/internal/policy"
)

const mcpPolicy = `version = 1

[[rule]]
name = "everything"
hosts = ["mcp.example.com"]
verdict = "free"

[[mcp]]
name = "files"
host = "mcp.example.com"
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
other = ["10.0.1.0/24"]
`

func mcpSetup(t *testing.T) (*policy.Policy, *Checks) {
	t.Helper()
	p, err := policy.Load("mcp.toml", []byte(mcpPolicy))
	if err != nil {
		t.Fatal(err)
	}
	in, err := NewChecks(p, nil, ErrNoSecretsFile, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p, in
}

func mcpCall(id, tool, args string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"` + tool + `","arguments":` + args + `,"_meta":{"progressToken":` + id + `}}}`
}

// TestMCPFingerprint: a call that asks is keyed by its MCP fingerprint, which is the same
// whatever the id, the spacing, the order of the arguments and _meta, and differs for another
// value, tool, container or query; a batch or an ambiguous body is keyed by its bytes (no MCP
// fingerprint).
func TestMCPFingerprint(t *testing.T) {
	p, in := mcpSetup(t)
	fp := func(c tcase) string {
		t.Helper()
		res := run(t, p, in, c)
		if res.Verdict != policy.Ask || res.MCP == nil {
			t.Fatalf("%s: %v %s (%s) mcp %+v", c.body, res.Verdict, res.Rule, res.Reason, res.MCP)
		}
		if res.Fingerprint != res.MCP.Fingerprint {
			t.Fatalf("the result's fingerprint %q is not the MCP step's %q", res.Fingerprint, res.MCP.Fingerprint)
		}
		return res.Fingerprint
	}
	post := func(body string) tcase {
		return tcase{method: "POST", url: "https://mcp.example.com/mcp", body: body, header: http.Header{"Content-Type": {"application/json"}}}
	}
	a := fp(post(mcpCall("1", "write", `{"path":"/a","n":1}`)))
	if !strings.HasPrefix(a, "mcp1:") {
		t.Fatalf("fingerprint %q", a)
	}
	for name, body := range map[string]string{
		"another id":      mcpCall(`"x-7"`, "write", `{"path":"/a","n":1}`),
		"re-spaced":       strings.ReplaceAll(mcpCall("2", "write", `{ "path" : "/a" , "n" : 1 }`), ",", " ,\n "),
		"reordered":       mcpCall("3", "write", `{"n":1.0,"path":"\/a"}`),
		"escapes in keys": mcpCall("4", "write", `{"p\u0061th":"/a","n":1e0}`),
	} {
		if got := fp(post(body)); got != a {
			t.Errorf("%s: %s, want %s", name, got, a)
		}
	}
	for name, c := range map[string]tcase{
		"a value changed":   post(mcpCall("1", "write", `{"path":"/b","n":1}`)),
		"another tool":      post(mcpCall("1", "write2", `{"path":"/a","n":1}`)),
		"another query":     {method: "POST", url: "https://mcp.example.com/mcp?key=2", body: mcpCall("1", "write", `{"path":"/a","n":1}`)},
		"another container": {method: "POST", url: "https://mcp.example.com/mcp", container: "other", body: mcpCall("1", "write", `{"path":"/a","n":1}`)},
	} {
		if got := fp(c); got == a {
			t.Errorf("%s: the same fingerprint", name)
		}
	}
	// A batch, and an ambiguous body: no MCP fingerprint (the gate keys the ticket by the bytes).
	for name, body := range map[string]string{
		"a batch":      "[" + mcpCall("1", "write", `{}`) + "," + mcpCall("2", "read", `{}`) + "]",
		"a second key": `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read","Name":"delete"}}`,
	} {
		res := run(t, p, in, post(body))
		if res.Verdict != policy.Ask || res.Fingerprint != "" || res.MCP.Fingerprint != "" {
			t.Errorf("%s: %v %s fingerprint %q", name, res.Verdict, res.Rule, res.Fingerprint)
		}
	}
	// A request that is no MCP call has none.
	if res := run(t, p, in, tcase{method: "POST", url: "https://mcp.example.com/other", body: "x"}); res.MCP != nil || res.Fingerprint != "" {
		t.Errorf("another path: mcp %+v fingerprint %q", res.MCP, res.Fingerprint)
	}
}

// TestMCPResult: what the MCP step reports besides the decision: the endpoint, each message
// with its decision, the message that decided, the findings in red.
func TestMCPResult(t *testing.T) {
	p, in := mcpSetup(t)
	res := run(t, p, in, tcase{method: "POST", url: "https://mcp.example.com/mcp",
		body: "[" + mcpCall("1", "read", `{}`) + "," + mcpCall("2", "delete", `{"all":true}`) + "]"})
	m := res.MCP
	if res.Verdict != policy.Deny || m == nil || m.Endpoint != "files" || !m.Batch || len(m.Messages) != 2 || m.Decided != 1 {
		t.Fatalf("%v %s mcp %+v", res.Verdict, res.Rule, m)
	}
	if d := m.Messages[0].Decision; d.Verdict != policy.Free || d.Rule != "mcp:files:reads" {
		t.Errorf("the first message: %+v", d)
	}
	if mm := m.Messages[1]; mm.Target != "delete" || string(mm.Arguments) != `{"all":true}` || mm.Decision.Rule != "mcp:files:no-delete" || !strings.HasPrefix(mm.Decision.Reason, "message 2 of the batch of 2: ") {
		t.Errorf("the second message: %+v", mm)
	}
	res = run(t, p, in, tcase{method: "POST", url: "https://mcp.example.com/mcp", body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name\u0000":"delete","name":"read"}}`})
	if res.Verdict != policy.Ask || res.Rule != RuleMCPAmbiguous || !res.Red || len(res.Findings) == 0 || len(res.MCP.Findings) == 0 {
		t.Errorf("an ambiguous body: %v %s red %v findings %q", res.Verdict, res.Rule, res.Red, res.Findings)
	}
}

// TestMCPMethodOverride: a request that names another method in an override is decided as
// both: a GET that a server may take for a POST is read as the POST it would be.
func TestMCPMethodOverride(t *testing.T) {
	p, in := mcpSetup(t)
	body := mcpCall("1", "delete", `{}`)
	u, _ := url.Parse("/mcp")
	a := &Arrival{Kind: Tunnel, Source: netip.MustParseAddr("10.0.0.5"), Container: "agent", Method: "GET", URL: u, Host: "mcp.example.com",
		Header: http.Header{"X-Http-Method-Override": {"POST"}}, Tunnel: &Binding{Host: "mcp.example.com", Port: 443},
		Body: []byte(body), BodySize: int64(len(body))}
	v := See(a)
	if v.Override != "POST" {
		t.Fatalf("the view's override %q", v.Override)
	}
	res := Decide(&Env{Policy: p, Checks: in}, v)
	if res.Verdict != policy.Deny || res.Rule != "mcp:files:no-delete" || res.Fingerprint != "" {
		t.Errorf("GET overridden to POST with a call of delete: %v %s (%s) fingerprint %q", res.Verdict, res.Rule, res.Reason, res.Fingerprint)
	}
}

// FuzzDecideMCP: whatever body and mirror headers an agent sends to an endpoint, the decision
// is made (no panic), a body with a finding is never free, a header finding is refused, and a
// free request names what it was decided as: go test -fuzz FuzzDecideMCP ./internal/judge/
func FuzzDecideMCP(f *testing.F) {
	p, in := mcpSetup(&testing.T{})
	f.Add([]byte(mcpCall("1", "read", `{"path":"/a"}`)), "", "")
	f.Add([]byte(mcpCall("1", "delete", `{}`)), "tools/call", "read")
	f.Add([]byte(`[`+mcpCall("1", "read", `{}`)+`,`+mcpCall("2", "delete", `{}`)+`]`), "", "")
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read","Name":"delete"}}`), "", "")
	f.Add([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`), "notifications/initialized", "")
	f.Fuzz(func(t *testing.T, body []byte, method, name string) {
		h := http.Header{}
		if method != "" {
			h.Set("Mcp-Method", method)
		}
		if name != "" {
			h.Set("Mcp-Name", name)
		}
		r := &Request{Kind: Tunnel, Container: "agent", Method: "POST", Scheme: "https", Authority: "mcp.example.com",
			Path: "/mcp", Header: h, Body: body, BodySize: int64(len(body))}
		res := Decide(&Env{Policy: p, Checks: in}, r)
		if res.MCP == nil {
			if res.Verdict != policy.Deny {
				t.Fatalf("not decided as MCP: %v %s (%s)", res.Verdict, res.Rule, res.Reason)
			}
			return // refused before the MCP step (a credential in the body)
		}
		b := mcp.Parse(body)
		if len(b.Findings) > 0 && res.Verdict == policy.Free {
			t.Fatalf("a body with findings %q is free (%s)", b.Findings[0].Text, res.Rule)
		}
		if len(mcp.CheckHeaders(h, b)) > 0 && res.Verdict != policy.Deny {
			t.Fatalf("a header finding is %v (%s)", res.Verdict, res.Rule)
		}
		if res.Fingerprint != "" && (b.Batch || len(b.Findings) > 0 || len(b.Messages) != 1) {
			t.Fatalf("an MCP fingerprint for a body that is not one call")
		}
	})
}
