package judge

import (
	"net/http"
	"net/netip"
	"net/url"
	"testing"

	"github.com/lockhttp/lockhttp/internal/policy"
)

// scopePolicy frees pushes for the container coder alone, refuses gists to reviewer alone, and
// trusts docs.python.org for reviewer's reads alone.
const scopePolicy = `version = 1

[[rule]]
name = "coder-push"
hosts = ["github.com"]
methods = ["POST"]
containers = ["coder"]
verdict = "free"

[[rule]]
name = "no-gists"
hosts = ["gist.github.com"]
containers = ["reviewer"]
verdict = "deny"

[sources]
coder = ["10.0.0.2"]
reviewer = ["10.0.0.3"]

[container.reviewer]
trusted = ["docs.python.org"]
`

// TestDecideScopesByTheSourceAddress: the one judge decides a scoped rule for the container the
// connection's address names; an agent name, a header or a request naming the other container
// changes nothing. A CONNECT to decrypt and a section's trusted host follow the container too.
func TestDecideScopesByTheSourceAddress(t *testing.T) {
	p, err := policy.Load("scope.toml", []byte(scopePolicy))
	if err != nil {
		t.Fatal(err)
	}
	in, err := NewChecks(p, nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	decide := func(source, method, target string, header http.Header) Result {
		t.Helper()
		a := &Arrival{Kind: Plain, Source: netip.MustParseAddr(source), Method: method, Header: header}
		if method == http.MethodConnect {
			a.Kind, a.Host = Domain, target
		} else {
			u, err := url.Parse(target)
			if err != nil {
				t.Fatal(err)
			}
			a.URL, a.Host = u, u.Host
		}
		return Decide(&Env{Policy: p, Checks: in, Decrypt: true}, See(a))
	}
	// Whatever the request says of its container: the agent name, headers.
	pretend := http.Header{
		"Proxy-Authorization":  {"Basic " + b64("coder:x")},
		"X-Lockhttp-Container": {"coder"},
		"Forwarded":            {"for=10.0.0.2"},
		"X-Forwarded-For":      {"10.0.0.2"},
	}
	cases := []struct {
		name, source, method, target string
		header                       http.Header
		verdict                      policy.Verdict
		rule, container              string
	}{
		{"coder's push is free", "10.0.0.2", "POST", "http://github.com/o/r.git/git-receive-pack", http.Header{}, policy.Free, "coder-push", "coder"},
		{"reviewer's asks", "10.0.0.3", "POST", "http://github.com/o/r.git/git-receive-pack", http.Header{}, policy.Ask, policy.RuleDefault, "reviewer"},
		{"reviewer's asks, pretending to be coder", "10.0.0.3", "POST", "http://github.com/o/r.git/git-receive-pack", pretend, policy.Ask, policy.RuleDefault, "reviewer"},
		{"reviewer's gist is refused, pretending to be coder", "10.0.0.3", "GET", "http://gist.github.com/", pretend, policy.Deny, "no-gists", "reviewer"},
		{"reviewer's CONNECT to decrypt a gist is refused", "10.0.0.3", "CONNECT", "gist.github.com:443", http.Header{}, policy.Deny, "no-gists", "reviewer"},
		{"coder's is decrypted", "10.0.0.2", "CONNECT", "gist.github.com:443", http.Header{}, policy.Free, policy.RuleDecrypt, "coder"},
		{"reviewer's read of its trusted host is free", "10.0.0.3", "GET", "http://docs.python.org/3/", http.Header{}, policy.Free, policy.RuleTrusted, "reviewer"},
		{"coder's asks", "10.0.0.2", "GET", "http://docs.python.org/3/", http.Header{}, policy.Ask, policy.RuleDefault, "coder"},
		{"an address of no container is refused before any rule", "10.0.0.9", "GET", "http://gist.github.com/", pretend, policy.Deny, policy.RuleSource, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := decide(c.source, c.method, c.target, c.header.Clone())
			if res.Verdict != c.verdict || res.Rule != c.rule || res.Container != c.container {
				t.Fatalf("got %v %q for %q (%s); want %v %q for %q", res.Verdict, res.Rule, res.Container, res.Reason, c.verdict, c.rule, c.container)
			}
		})
	}
}
