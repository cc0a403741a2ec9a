package judge

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/budget"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// TestDecideMessage: a WebSocket message is refused for a credential that does not belong to
// its host, for an injected secret's value, when the checks cannot run, and past a budget's
// bytes (counted only when it fits; with no counter, a message over a budget by itself);
// anything else passes.
func TestDecideMessage(t *testing.T) {
	p, err := policy.Load("b.toml", []byte(budgetPolicy))
	if err != nil {
		t.Fatal(err)
	}
	injected := map[string]string{"npm": "npm_secret_value_0123456789"}
	in, err := NewChecks(p, injected, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	clk := testkit.NewClock(time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC))
	env := &Env{Policy: p, Checks: in, Budgets: budget.New(budget.Config{Now: clk.Now})}
	cases := []struct {
		name    string
		env     *Env
		host    string
		payload string
		code    policy.Code
		rule    string
	}{
		{"a clean message", env, "docs.example.com", `{"type":"ping"}`, "", RuleWebSocket},
		{"a GitHub token", env, "docs.example.com", `{"t":"` + ghToken + `"}`, policy.CodeSecretEgress, "secret:github"},
		{"an injected secret's value", env, "docs.example.com", "x npm_secret_value_0123456789 y", policy.CodeSecretEgress, "secret:injected:npm"},
		{"no detector", &Env{Policy: p}, "docs.example.com", "hi", policy.CodeSecretEgress, RuleSecretsUnbuilt},
		{"no policy", &Env{}, "docs.example.com", "hi", policy.CodeNoConsole, "no-policy"},
		{"within the budget", env, "upload.example.com", strings.Repeat("a", 1000), "", RuleWebSocket},
		{"past the budget", env, "upload.example.com", strings.Repeat("a", 100), policy.CodeBudget, "budget:up"},
		{"past the budget by itself, no counter", &Env{Policy: p, Checks: in}, "upload.example.com", strings.Repeat("a", 2000), policy.CodeBudget, "budget:up"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := DecideMessage(c.env, &Message{Container: "agent", Host: c.host, Kind: "text", Payload: []byte(c.payload)})
			if d.Code != c.code || d.Rule != c.rule {
				t.Fatalf("%v %q %q (%s); want %q %q", d.Verdict, d.Code, d.Rule, d.Reason, c.code, c.rule)
			}
			if strings.Contains(d.Reason, ghToken) || strings.Contains(d.Reason, "npm_secret_value") {
				t.Fatalf("the reason holds the secret: %s", d.Reason)
			}
		})
	}
	if d := DecideSwitch(http.Header{"Sec-Websocket-Extensions": {"permessage-deflate"}}); d == nil || d.Rule != RuleWebSocketExtension {
		t.Fatalf("a switch with an extension: %v", d)
	}
	if d := DecideSwitch(http.Header{}); d != nil {
		t.Fatalf("a plain switch: %v", d)
	}
}

// TestDecideMessageCountsFrames: a message costs its frames as sent (Size), headers included, so
// empty messages use a budget up; a Size below the payload's length counts the payload.
func TestDecideMessageCountsFrames(t *testing.T) {
	p, err := policy.Load("b.toml", []byte(budgetPolicy))
	if err != nil {
		t.Fatal(err)
	}
	in, err := NewChecks(p, nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	clk := testkit.NewClock(time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC))
	env := &Env{Policy: p, Checks: in, Budgets: budget.New(budget.Config{Now: clk.Now})}
	passed := 0
	for range 500 {
		d := DecideMessage(env, &Message{Container: "agent", Host: "upload.example.com", Kind: "text", Size: 6})
		if d.Verdict != policy.Free {
			if d.Code != policy.CodeBudget || d.Rule != "budget:up" {
				t.Fatalf("empty message %d: %v %q %q", passed, d.Verdict, d.Code, d.Rule)
			}
			break
		}
		passed++
	}
	if passed != 1024/6 {
		t.Fatalf("%d empty messages of 6 bytes passed a budget of 1 KiB, want %d", passed, 1024/6)
	}
	env.Budgets = budget.New(budget.Config{Now: clk.Now})
	if d := DecideMessage(env, &Message{Container: "agent", Host: "upload.example.com", Kind: "binary", Payload: make([]byte, 1000), Size: 1}); d.Verdict != policy.Free {
		t.Fatalf("1,000 bytes: %v", d)
	}
	if d := DecideMessage(env, &Message{Container: "agent", Host: "upload.example.com", Kind: "binary", Payload: make([]byte, 30), Size: 1}); d.Code != policy.CodeBudget {
		t.Fatalf("30 bytes more, Size 1: %v, want E_BUDGET", d)
	}
}
