package gate

import (
	"net/http"
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/policy"
)

// TestRefusalNamesTheMCPServer: every refusal's page tells the agent where to ask for a rule.
func TestRefusalNamesTheMCPServer(t *testing.T) {
	ex := &exchange{}
	ex.rec.ID, ex.rec.Method, ex.rec.URL = "r1", "GET", "http://a.example/"
	r, _ := http.NewRequest("GET", "http://a.example/", nil)
	body := string(newRefusal(r, ex, policy.Decision{Verdict: policy.Deny, Code: policy.CodeRule, Rule: "no", Reason: "no"}).Body)
	if !strings.Contains(body, "\nAsk for a rule: the MCP server https://lockhttp.internal/mcp (tools explain, pending, request_rule)\n") {
		t.Fatalf("the refusal's body:\n%s", body)
	}
}

// TestFreedBy: what the explain tool says frees a request, by its decision.
func TestFreedBy(t *testing.T) {
	for _, tc := range []struct {
		d    policy.Decision
		want string
	}{
		{policy.Decision{Verdict: policy.Free}, "nothing: it goes out"},
		{policy.Decision{Verdict: policy.Deny, Code: policy.CodeFloor}, "floor refuses it under every policy"},
		{policy.Decision{Verdict: policy.Ask}, "request_rule"},
		{policy.Decision{Verdict: policy.Deny, Code: policy.CodeRule}, "request_rule"},
		{policy.Decision{Verdict: policy.Deny, Code: policy.CodeSecretEgress, Reason: "a credential"}, "nothing the policy changes: a credential"},
	} {
		if got := freedBy(tc.d); !strings.Contains(got, tc.want) {
			t.Errorf("%+v: %q, want %q", tc.d, got, tc.want)
		}
	}
}
