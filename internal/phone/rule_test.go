package phone

import (
	"net/http"
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/hubapi"
)

// TestRuleTicketNotApprovedFromAPhone: a phone sees a rule an agent asks for marked as such, and
// cannot approve it (a clear refusal, the ticket still pending); it may deny it.
func TestRuleTicketNotApprovedFromAPhone(t *testing.T) {
	e := newEnv(t, true)
	tok := e.pair("pixel-7")
	h := e.hub
	tk, err := h.AskRule("g", hub.RuleRequest{Container: "agent-1", Rule: "[[rule]]", Reason: "please\x1b[31m\napproved"})
	if err != nil {
		t.Fatal(err)
	}
	resp, data := e.do("POST", "/phone/v1/tickets/"+tk.ID+"/approve", tok, e.origin(), map[string]string{"fingerprint": tk.Fingerprint})
	if msg, code := errorOf(t, data); resp.StatusCode != http.StatusForbidden || code != "terminal" || !strings.Contains(msg, "console's terminal") {
		t.Fatalf("approve from a phone: %d %s", resp.StatusCode, data)
	}
	if got, _ := h.Get(tk.ID); got.Status != hub.Pending {
		t.Fatalf("the ticket is %s after a phone's approval", got.Status)
	}
	resp, data = e.do("POST", "/phone/v1/tickets/"+tk.ID+"/deny", tok, e.origin(), map[string]string{"fingerprint": tk.Fingerprint, "reason": "no"})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("deny from a phone: %d %s", resp.StatusCode, data)
	}
}

// checkRule is the tests' hub.Config.CheckRule: every rule passes as written.
func checkRule(container, rule string) (hubapi.RuleAsk, error) {
	return hubapi.RuleAsk{Rule: rule, Loosens: `rule "x": + free GET on a.example.com`}, nil
}
