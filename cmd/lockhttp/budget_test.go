package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestExplainBudgets: explain runs the budget step with empty counts and says so; a request over
// a budget by itself is refused as the gate refuses it.
func TestExplainBudgets(t *testing.T) {
	pol := writeFile(t, t.TempDir(), "policy.toml", approvedTOML+`
[[budget]]
name = "up"
hosts = ["example.org"]
bytes_up_per_hour = "64B"
`)
	code, _, stdout, stderr := explainRun(t, "", "--policy", pol, "GET", "https://example.org/")
	var got struct{ Verdict, Rule, Note string }
	if code != 0 || json.Unmarshal([]byte(stdout), &got) != nil {
		t.Fatalf("exit %d: %s %s", code, stdout, stderr)
	}
	if got.Verdict != "FREE" || !strings.Contains(got.Note, "the budgets counted from zero") {
		t.Fatalf("a request under the budget: %s", stdout)
	}
	code, d, stdout, _ := explainRun(t, "", "--policy", pol, "POST", "https://example.org/upload/a", "-d", strings.Repeat("a", 100))
	if code != 0 || d.Verdict != "DENY" || d.Code != "E_BUDGET" || d.Rule != "budget:up" || !strings.Contains(d.Reason, "never fits") {
		t.Fatalf("a body over the whole budget: %s", stdout)
	}
}
