package policy

import (
	"strings"
	"testing"
)

// pathParamPolicy has a deny, an ask and free rules whose paths a ;parameter could otherwise
// step around; api.example.com is not trusted, so a request no rule decides asks by default.
const pathParamPolicy = `
version = 1
[[rule]]
name = "admin"
hosts = ["api.example.com"]
paths = ["/admin/**"]
verdict = "deny"

[[rule]]
name = "secret"
hosts = ["api.example.com"]
paths = ["/secret/**", "/x/*/y"]
verdict = "deny"

[[rule]]
name = "messages"
hosts = ["llm.example.com"]
methods = ["POST"]
paths = ["/v1/messages"]
verdict = "ask"

[[rule]]
name = "public"
hosts = ["api.example.com"]
paths = ["/public/**"]
verdict = "free"

[[rule]]
name = "session"
hosts = ["api.example.com"]
paths = ["/session;v=1/**"]
verdict = "free"

[[rule]]
name = "docs"
hosts = ["api.example.com"]
paths = ["/docs/**", "/static/**"]
verdict = "free"
`

// TestPathParameters: rules match ;parameters the way servlet containers route them. A
// restrictive rule catches a path under it in any reading; a free rule frees a path only when
// the path is under it in every reading, so "/public/..;/admin" (which a servlet container routes
// as "/admin") falls through to the deny rule or the default.
func TestPathParameters(t *testing.T) {
	p := mustLoad(t, pathParamPolicy)
	const (
		api = "api.example.com"
		llm = "llm.example.com"
	)
	cases := []struct {
		name         string
		host, method string
		path         string
		verdict      Verdict
		rule         string
		reason       string
	}{
		// Deny and ask rules see through parameters.
		{"deny sees through a parameter", api, "GET", "/admin;x=1/users", Deny, "admin", `rule "admin" (deny)`},
		{"deny sees through an empty parameter", api, "GET", "/admin;/users", Deny, "admin", `rule "admin" (deny)`},
		{"deny sees through a final parameter", api, "GET", "/admin;", Deny, "admin", `rule "admin" (deny)`},
		{"deny sees through case and a parameter", api, "GET", "/ADMIN;x/users", Deny, "admin", `rule "admin" (deny)`},
		{"deny sees through an encoded parameter", api, "GET", "/admin%3Bx/users", Deny, "admin", `rule "admin" (deny)`},
		{"deny sees through a parameter and an encoded slash", api, "GET", "/admin;x%2F..%2Fusers", Deny, "admin", `rule "admin" (deny)`},
		{"ask sees through a parameter", llm, "POST", "/v1/messages;x", Ask, "messages", `rule "messages" (ask)`},
		{"ask sees through a parameter on the first segment", llm, "POST", "/V1;x/messages", Ask, "messages", `rule "messages" (ask)`},
		// A parameter-cut dot-dot segment leaves a free rule's reach: the path is not free.
		{"dot-dot parameter out of a free rule is denied", api, "GET", "/public/..;/admin", Deny, "admin", `rule "admin" (deny)`},
		{"dot-dot parameter out of a free rule asks", api, "GET", "/public/..;/other", Ask, RuleDefault, reasonUntrusted},
		{"dot-dot parameter with a value", api, "GET", "/public/..;x=1/admin/users", Deny, "admin", `rule "admin" (deny)`},
		{"encoded dot-dot parameter", api, "GET", "/public/%2e%2e;/admin", Deny, "admin", `rule "admin" (deny)`},
		{"upper-case encoded dot-dot parameter", api, "GET", "/public/%2E%2E;x/admin", Deny, "admin", `rule "admin" (deny)`},
		{"half-encoded dot-dot parameter", api, "GET", "/public/.%2e;/admin", Deny, "admin", `rule "admin" (deny)`},
		{"dot-dot with an encoded parameter", api, "GET", "/public/..%3B/admin", Deny, "admin", `rule "admin" (deny)`},
		{"two dot-dot parameters", api, "GET", "/public/a/..;/..;/other", Ask, RuleDefault, reasonUntrusted},
		{"dot-dot parameter out of a parametered free rule", api, "GET", "/session;v=1/..;/admin", Deny, "admin", `rule "admin" (deny)`},
		// An encoded or back slash that makes a dot-dot segment: no free rule vouches for it.
		{"encoded slash dot-dot out of a free rule", api, "GET", "/public/..%2Fother", Ask, RuleDefault, reasonUntrusted},
		{"encoded slash dot-dot into a denied path", api, "GET", "/public/..%2fadmin", Deny, "admin", `rule "admin" (deny)`},
		{"backslash dot-dot out of a free rule", api, "GET", `/public/..\other`, Ask, RuleDefault, reasonUntrusted},
		{"encoded backslash dot-dot", api, "GET", "/public/a/..%5C..%5Cother", Ask, RuleDefault, reasonUntrusted},
		{"an encoded slash without dot-dot stays free", api, "GET", "/public/group%2Frepo", Free, "public", `rule "public" (free)`},
		// Free rules keep freeing paths that stay under them in every reading.
		{"parameter under a free rule is free", api, "GET", "/public/a;b/c", Free, "public", `rule "public" (free)`},
		{"dot-dot parameter within a free rule is free", api, "GET", "/public/a/..;/b", Free, "public", `rule "public" (free)`},
		{"free rule written with a parameter", api, "GET", "/session;v=1/x", Free, "session", `rule "session" (free)`},
		{"both readings under one free rule's patterns", api, "GET", "/docs/..;/static/a.css", Free, "docs", `rule "docs" (free)`},
		// Deny rules still match the reading that keeps parameters.
		{"deny keeps the reading with parameters", api, "GET", "/secret/..;/public/x", Deny, "secret", `rule "secret" (deny)`},
		{"deny keeps a parameter-only segment", api, "GET", "/x/;p/y", Deny, "secret", `rule "secret" (deny)`},
		// Unchanged: ordinary paths.
		{"ordinary deny", api, "GET", "/admin/users", Deny, "admin", `rule "admin" (deny)`},
		{"ordinary free", api, "GET", "/public/a/b", Free, "public", `rule "public" (free)`},
		{"ordinary ask", llm, "POST", "/v1/messages", Ask, "messages", `rule "messages" (ask)`},
		{"ordinary default", api, "GET", "/other", Ask, RuleDefault, reasonUntrusted},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := p.Evaluate(Request{Host: c.host, Method: c.method, Path: c.path})
			if d.Verdict != c.verdict || d.Rule != c.rule {
				t.Fatalf("%s %s: got %v rule %q (%s); want %v rule %q", c.method, c.path, d.Verdict, d.Rule, d.Reason, c.verdict, c.rule)
			}
			if (d.Verdict == Deny) != (d.Code == CodeRule) {
				t.Errorf("code %q for %v", d.Code, d.Verdict)
			}
			if !strings.Contains(d.Reason, c.reason) {
				t.Errorf("reason %q does not contain %q", d.Reason, c.reason)
			}
		})
	}
}
