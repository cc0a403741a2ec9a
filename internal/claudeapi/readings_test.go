package claudeapi

import (
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/policy"
)

// TestPathReadings: Judge reads a path every way the policy does (policy.LoosePaths). A path
// that names the Files API in any reading asks; a path that a servlet container routes to the
// Messages API is judged as a Messages API call and never free; the OAuth paths are free only
// when written plainly.
func TestPathReadings(t *testing.T) {
	plain := readTestdata(t, "sdk/plain.json")
	fetch := readTestdata(t, "sdk/web_fetch.json")
	cases := []struct {
		name, host, method, path string
		body                     []byte
		verdict                  policy.Verdict
		rule, fragment           string
	}{
		// A "..;" segment is a name to a server that knows nothing of parameters: the Files API.
		{"files under a dot-dot parameter", "api.anthropic.com", "GET", "/v1/files/..;/models", nil, policy.Ask, RuleFiles, "the Files API"},
		// A servlet container cuts the parameter before it decodes the slashes: the Files API.
		{"files before a parameter with encoded slashes", "api.anthropic.com", "GET", "/v1/files;x%2F..%2F..%2Fmodels", nil, policy.Ask, RuleFiles, "the Files API"},
		{"messages before a parameter with encoded slashes", "api.anthropic.com", "POST", "/v1/messages;x%2F..%2F..%2Fskills", fetch, policy.Ask, RuleMessages, "web_fetch"},
		{"messages before a parameter, plain body", "api.anthropic.com", "POST", "/v1/messages;x%2F..%2F..%2Fskills", plain, policy.Ask, RuleMessages, "written another way"},
		// A parameter-cut dot-dot segment leaves the OAuth paths: not free.
		{"oauth dot-dot parameter", "api.anthropic.com", "POST", "/v1/oauth/..;/skills", nil, policy.Ask, RuleWrite, "writes"},
		{"oauth encoded dot-dot parameter", "console.anthropic.com", "POST", "/v1/oauth/%2e%2e;/skills", nil, policy.Ask, RuleWrite, "writes"},
		{"oauth parameter", "api.anthropic.com", "POST", "/v1/oauth/token;x", nil, policy.Ask, RuleWrite, "writes"},
		{"claude.ai oauth dot-dot parameter", "claude.ai", "POST", "/oauth/..;/api/organizations", nil, policy.Ask, RuleWrite, "writes"},
		{"oauth encoded slash", "api.anthropic.com", "POST", "/v1/oauth/x%2F..%2F..%2Fskills", nil, policy.Ask, RuleWrite, "writes"},
		// Unchanged.
		{"oauth plain", "api.anthropic.com", "POST", "/v1/oauth/token", nil, policy.Free, RuleOAuth, "OAuth"},
		{"claude.ai oauth plain", "claude.ai", "GET", "/oauth/authorize?code=true", nil, policy.Free, RuleOAuth, "OAuth"},
		{"files parameter", "api.anthropic.com", "GET", "/v1/files;x/abc", nil, policy.Ask, RuleFiles, "the Files API"},
		{"messages parameter", "api.anthropic.com", "POST", "/v1/messages;x", plain, policy.Ask, RuleMessages, "written another way"},
		{"messages dot-dot parameter", "api.anthropic.com", "POST", "/v1/x/..;/messages", plain, policy.Ask, RuleMessages, "written another way"},
		{"read with a parameter", "api.anthropic.com", "GET", "/v1/models;x", nil, policy.Free, RuleRead, "GET reads only"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Judge(Request{Host: c.host, Method: c.method, Path: c.path, Header: jsonHeader(), Body: c.body, Limit: testLimit})
			checkJudgement(t, got, c.verdict, "", c.rule, c.fragment, c.verdict == policy.Ask && c.rule == RuleMessages)
		})
	}
}

// agreementPolicy asks, as a policy would, about the Files API and the Messages API.
const agreementPolicy = `
version = 1
[[rule]]
name = "files"
hosts = ["api.anthropic.com"]
paths = ["/v1/files", "/v1/files/**"]
verdict = "ask"

[[rule]]
name = "messages"
hosts = ["api.anthropic.com"]
methods = ["POST"]
paths = ["/v1/messages", "/v1/messages/count_tokens"]
verdict = "ask"
`

// FuzzJudgeAgreesWithPolicy holds Judge and the policy to one reading of a path: what a policy
// rule on the Files API catches, Judge never frees; what a policy rule on the Messages API
// catches, Judge judges as the Messages (or Files) API and frees only when written plainly; and
// what Judge calls the Files API, the policy's rule catches too.
func FuzzJudgeAgreesWithPolicy(f *testing.F) {
	p, err := policy.Load("agreement.toml", []byte(agreementPolicy))
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{
		"/v1/files", "/v1/files/abc", "/V1/FILES", "/v1/files;x/abc", "/v1/files/..;/models",
		"/v1/files;x%2F..%2F..%2Fmodels", "/v1%2Ffiles", "/v1\\files", "/v1/x/..;/files",
		"/v1/messages", "/v1/messages;x", "/V1;x/Messages", "/v1/messages;x%2F..%2F..%2Fskills",
		"/v1/oauth/..;/files", "/v1/oauth/..;/messages", "/v1/models", "/v1/messages/",
	} {
		f.Add("GET", s)
		f.Add("POST", s)
	}
	body := readTestdata(f, "sdk/plain.json")
	f.Fuzz(func(t *testing.T, method, path string) {
		if method != "GET" && method != "POST" {
			return
		}
		j := Judge(Request{Host: "api.anthropic.com", Method: method, Path: path, Header: jsonHeader(), Body: body, Limit: testLimit})
		escaped, _, _ := strings.Cut(path, "?") // the policy is given the path without its query
		d := p.Evaluate(policy.Request{Host: "api.anthropic.com", Method: method, Path: escaped})
		switch d.Rule {
		case "files":
			if j.Verdict == policy.Free {
				t.Fatalf("%s %q: the policy's files rule catches it and Judge frees it (%s)", method, path, j.Rule)
			}
		case "messages":
			if j.Rule != RuleMessages && j.Rule != RuleSize && j.Rule != RuleFiles {
				t.Fatalf("%s %q: the policy's messages rule catches it and Judge decides it by %s", method, path, j.Rule)
			}
			if clean := policy.CleanPath(escaped); j.Verdict == policy.Free && clean != "/v1/messages" && clean != "/v1/messages/count_tokens" {
				t.Fatalf("%s %q: the policy's messages rule catches it and Judge frees it written as %q", method, path, clean)
			}
		}
		if j.Rule == RuleFiles && d.Rule != "files" {
			t.Fatalf("%s %q: Judge calls it the Files API and the policy's files rule does not catch it (%s)", method, path, d.Rule)
		}
	})
}
