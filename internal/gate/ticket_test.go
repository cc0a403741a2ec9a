package gate

import (
	"net/http"
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/hubapi"
	"github.com/lockhttp/lockhttp/internal/judge"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/secrets"
)

// TestTicketHeaders: a ticket shows every header value, escaped, and masks only credentials: what
// the detector recognises, and the values that are credentials by construction. A header's name
// never hides its value.
func TestTicketHeaders(t *testing.T) {
	gh := "ghp_" + strings.Repeat("Tk7q", 9)
	injected := "deploy-" + strings.Repeat("Zz9", 6)
	d, err := secrets.NewDetector(secrets.Config{Injected: []secrets.Injected{{Name: "deploy", Value: injected}}})
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{
		"X-Session-Data": {"hello-world-plain"},
		"X-Api-Token":    {gh},
		"Authorization":  {"Bearer opaque-bearer-value"},
		"X-Secret":       {"see\u202etxt.exe"},
		"X-Deploy":       {injected},
	}
	want := map[string]string{
		"X-Session-Data": "hello-world-plain",
		"X-Api-Token":    secrets.Mask("github", gh),
		"Authorization":  "Bearer " + secrets.Mask("secret", "opaque-bearer-value"),
		"X-Secret":       `see\u{202E}txt.exe`,
		"X-Deploy":       secrets.Mask("injected:deploy", injected),
	}
	for _, tc := range []struct {
		name string
		in   *judge.Checks
		skip string // a header whose value the detector must know to mask
	}{
		{"policy detector", &judge.Checks{Secrets: d}, ""},
		{"no detector: the built-in shapes", nil, "X-Deploy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ticketHeaders(h, tc.in)
			if len(got) != len(h) {
				t.Fatalf("%d headers, want %d: %+v", len(got), len(h), got)
			}
			for i, hd := range got {
				if i > 0 && got[i-1].Name > hd.Name {
					t.Errorf("not sorted: %q before %q", got[i-1].Name, hd.Name)
				}
				if hd.Name == tc.skip {
					continue
				}
				if hd.Value != want[hd.Name] {
					t.Errorf("%s: %q; want %q", hd.Name, hd.Value, want[hd.Name])
				}
			}
			for _, secret := range []string{gh, "opaque-bearer-value"} {
				if s := hubHeadersText(got); strings.Contains(s, secret) {
					t.Errorf("the ticket shows %q: %s", secret, s)
				}
			}
		})
	}
}

func hubHeadersText(hs []hubapi.Header) string {
	var b strings.Builder
	for _, h := range hs {
		b.WriteString(h.Name + ": " + h.Value + "\n")
	}
	return b.String()
}

// TestMCPTicket: the ticket of an MCP call shows the server, the tool and the arguments as its
// fingerprint covers them, pretty-printed, credentials masked and escaped; the ticket is keyed
// by the call's fingerprint. A batch shows no call (it is approved byte for byte).
func TestMCPTicket(t *testing.T) {
	// A credential of the server's own: it may go there, and the ticket masks it.
	p, err := policy.Load("p.toml", []byte("version = 1\n[[mcp]]\nname = \"files\"\nhost = \"mcp.example.com\"\npath = \"/mcp\"\n"+
		"[[secret]]\nname = \"acme\"\npattern = \"acme_[A-Za-z0-9]{24}\"\nhosts = [\"mcp.example.com\"]\n[sources]\na = [\"10.0.0.1\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	in, err := judge.NewChecks(p, nil, judge.ErrNoSecretsFile, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	gh := "acme_" + strings.Repeat("Tk7q", 6)
	decide := func(body string) judge.Result {
		r := &judge.Request{Kind: judge.Tunnel, Container: "a", Method: "POST", Scheme: "https", Authority: "mcp.example.com",
			Path: "/mcp", Header: http.Header{}, Body: []byte(body), BodySize: int64(len(body))}
		return judge.Decide(&judge.Env{Policy: p, Checks: in}, r)
	}
	res := decide(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"w","arguments":{"z":1,"note":"` + gh + `","a":"x\u202e"},"task":{"ttl":5}}}`)
	c := mcpCall(res, in)
	if res.Verdict != policy.Ask || c == nil || !strings.HasPrefix(res.Fingerprint, "mcp1:") {
		t.Fatalf("%v %s (%s): call %+v fingerprint %q", res.Verdict, res.Rule, res.Reason, c, res.Fingerprint)
	}
	wantArgs := "{\n  \"a\": \"x\\u{202E}\",\n  \"note\": \"" + secrets.Mask("custom:acme", gh) + "\",\n  \"z\": 1\n}"
	if c.Server != "files" || c.Method != "tools/call" || c.Tool != "w" || c.Arguments != wantArgs || c.Params != "{\n  \"task\": {\n    \"ttl\": 5\n  }\n}" {
		t.Errorf("call %+v\nwant the arguments\n%s", c, wantArgs)
	}
	if e := (hubapi.Ticket{MCP: c}).Escaped(); e.MCP.Arguments != wantArgs {
		t.Errorf("escaped %+v", e.MCP)
	}
	if c := mcpCall(decide(`[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"w"}}]`), in); c != nil {
		t.Errorf("a batch shows the call %+v", c)
	}
}
