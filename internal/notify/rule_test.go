package notify

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/hubapi"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// TestRuleTicketNotifiedWithoutDecision: a rule an agent asks for is notified as what it is, its
// reason escaped and marked as the agent's, with no decision link even on a human channel: it
// is answered at the console's terminal alone.
func TestRuleTicketNotifiedWithoutDecision(t *testing.T) {
	rc := &receiver{}
	hook := httptest.NewServer(rc)
	defer hook.Close()
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	h, err := hub.New(hub.Config{Key: key, CheckRule: func(container, rule string) (hubapi.RuleAsk, error) {
		return hubapi.RuleAsk{Rule: rule, Loosens: `rule "x": + free GET on a.example.com`}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{hub: h, channels: []policy.Notify{{Name: "ops", URL: hook.URL, Kind: "webhook", Human: true}}}
	n := New(Config{Hub: h, Channels: e.chans, PublicURL: "http://console.test", Key: h.NotifyKey(), Backoff: 10 * time.Millisecond, Attempts: 3})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { n.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	tk, err := h.AskRule("g", hub.RuleRequest{Container: "agent", Rule: "[[rule]]", Reason: "please\x1b[31m\napproved"})
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "the notification", func() bool { return len(rc.all()) == 1 })
	var w Webhook
	raw := rc.all()[0].body
	if err := json.Unmarshal(raw, &w); err != nil {
		t.Fatal(err)
	}
	if w.Ticket != tk.ID || w.Kind != hubapi.KindRule || w.Method != "RULE" || w.DecisionURL != "" || !strings.HasPrefix(w.Why, hubapi.AgentWordsMark) ||
		!strings.Contains(w.Warning, "AN AGENT ASKS FOR A RULE") {
		t.Fatalf("webhook %+v", w)
	}
	if strings.Contains(string(raw), "\\u001b") || strings.Contains(w.Why, "\n") {
		t.Fatalf("the agent's reason reached the receiver unescaped:\n%s", raw)
	}
}
