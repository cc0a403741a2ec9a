package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// scopedTOML frees pushes to github.com for the container coder alone, refuses gists to
// reviewer alone and trusts docs.python.org for reviewer alone.
const scopedTOML = `version = 1

[[rule]]
name = "coder-push"
hosts = ["github.com"]
methods = ["POST"]
paths = ["/**/git-receive-pack"]
containers = ["coder"]
verdict = "free"

[[rule]]
name = "no-gists"
hosts = ["gist.github.com"]
containers = ["reviewer"]
verdict = "deny"

[sources]
coder = ["127.0.0.2"]
reviewer = ["127.0.0.3"]

[container.reviewer]
trusted = ["docs.python.org"]
`

// TestExplainScopedRules: lockhttp explain --container NAME decides as the gate decides a
// request of that container, and shows the container and the rule it matched; without
// --container, a policy of several containers asks for one.
func TestExplainScopedRules(t *testing.T) {
	pol := writeFile(t, t.TempDir(), "policy.toml", scopedTOML)
	push := "https://github.com/o/r.git/git-receive-pack"
	cases := []struct {
		name                     string
		args                     []string
		verdict, rule, container string
		reasonContaining         string
	}{
		{"coder's push", []string{"--container", "coder", "POST", push}, "FREE", "coder-push", "coder", "for container coder"},
		{"reviewer's push", []string{"--container", "reviewer", "POST", push}, "ASK", "default", "reviewer", "not trusted"},
		{"reviewer's gist", []string{"--container", "reviewer", "GET", "https://gist.github.com/"}, "DENY", "no-gists", "reviewer", "for container reviewer"},
		{"reviewer's CONNECT to a gist", []string{"--container", "reviewer", "CONNECT", "gist.github.com:443"}, "DENY", "no-gists", "reviewer", ""},
		{"coder's gist", []string{"--container", "coder", "GET", "https://gist.github.com/"}, "ASK", "default", "coder", ""},
		{"reviewer's docs", []string{"--container", "reviewer", "GET", "https://docs.python.org/3/"}, "FREE", "trusted", "reviewer", "[container.reviewer] trusts"},
		{"coder's docs", []string{"--container", "coder", "GET", "https://docs.python.org/3/"}, "ASK", "default", "coder", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, stdout, stderr := explainRun(t, "", append([]string{"--policy", pol}, c.args...)...)
			if code != 0 {
				t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
			}
			var d struct{ Verdict, Rule, Container, Reason string }
			if err := json.Unmarshal([]byte(stdout), &d); err != nil {
				t.Fatal(err)
			}
			if d.Verdict != c.verdict || d.Rule != c.rule || d.Container != c.container || !strings.Contains(d.Reason, c.reasonContaining) {
				t.Fatalf("got %s %s for %q (%s); want %s %s for %q, a reason containing %q", d.Verdict, d.Rule, d.Container, d.Reason, c.verdict, c.rule, c.container, c.reasonContaining)
			}
		})
	}
	code, _, _, stderr := explainRun(t, "", "--policy", pol, "POST", push)
	if code != 2 || !strings.Contains(stderr, "the policy names several containers (coder, reviewer); choose one with --container") {
		t.Fatalf("without --container: exit %d, stderr %q", code, stderr)
	}
}
