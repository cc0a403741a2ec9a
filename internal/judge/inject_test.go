package judge

import (
	"net/http"
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/policy"
)

// TestInjectedHeaderIsNotTheAgentsCredential: with an [[inject]] rule for the Claude API's
// Authorization header, a request with the placeholder the agent's SDK sends there, or with
// none, carries the credential to add. (The decisions, and the refusal of a credential in
// another header, are corpus cases: judge-claude-inject-*.)
func TestInjectedHeaderIsNotTheAgentsCredential(t *testing.T) {
	p, err := policy.Load("inject.toml", []byte(`version = 1
[[inject]]
name = "claude"
hosts = ["api.anthropic.com"]
header = "Authorization"
secret = "anthropic"
format = "Bearer {secret}"
[sources]
agent = ["10.0.0.0/24"]
`))
	if err != nil {
		t.Fatal(err)
	}
	in, err := NewChecks(p, map[string]string{"anthropic": antKey}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	placeholder := "sk-ant-" + strings.Repeat("x", 64)
	body := `{"model":"claude","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`
	for _, c := range []struct {
		name    string
		header  http.Header
		verdict policy.Verdict
		rule    string
	}{
		{"a placeholder in the injected header", http.Header{"Authorization": {"Bearer " + placeholder}, "Content-Type": {"application/json"}}, policy.Free, "claude-api:messages"},
		{"no credential at all", http.Header{"Content-Type": {"application/json"}}, policy.Free, "claude-api:messages"},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := run(t, p, in, tcase{method: "POST", url: "https://api.anthropic.com/v1/messages", header: c.header, body: body})
			if res.Verdict != c.verdict || res.Rule != c.rule {
				t.Fatalf("got %v %s (%s); want %v %s", res.Verdict, res.Rule, res.Reason, c.verdict, c.rule)
			}
			if res.Inject == nil || res.Inject.Value != "Bearer "+antKey {
				t.Fatalf("inject %+v", res.Inject)
			}
		})
	}
}
