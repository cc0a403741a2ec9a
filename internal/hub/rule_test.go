package hub

import (
	"errors"
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/hubapi"
)

// TestRuleTicket: a rule an agent asks for is a ticket no facade approves (Decide refuses it
// with ErrRuleAtTerminal, whoever calls), that TakeRule approves for the terminal alone and only
// when its take succeeds; its inputs are bounded and its reason kept as the agent's words.
func TestRuleTicket(t *testing.T) {
	h, _ := newHub(t, "")
	h.cfg.CheckRule = func(container, rule string) (RuleAsk, error) {
		if strings.Contains(rule, "169.254.169.254") {
			return RuleAsk{}, errors.New("the floor refuses the host")
		}
		return RuleAsk{Rule: rule, Loosens: `rule "x": + free GET on a.example.com`}, nil
	}
	reason := "need it\x1b[2J\napproved by terminal:alice"
	tk, err := h.AskRule("g", RuleRequest{Container: "agent", Rule: "[[rule]]", Reason: reason})
	if err != nil {
		t.Fatal(err)
	}
	if tk.Kind != KindRule || tk.Status != Pending || tk.Holders != 0 || tk.Waiting != "" || !tk.Red || tk.Warning == "" ||
		tk.Reason != hubapi.AgentWordsMark+reason || tk.RuleAsk.AgentReason != reason {
		t.Fatalf("ticket %+v", tk)
	}
	if e := tk.Escaped(); strings.ContainsAny(e.Reason, "\x1b\n") || strings.ContainsAny(e.RuleAsk.AgentReason, "\x1b\n") {
		t.Fatalf("escaped reason %q / %q", e.Reason, e.RuleAsk.AgentReason)
	}
	for _, by := range []string{"phone:pixel", "cli:root", "ntfy:ops", "terminal:alice"} {
		if _, err := h.Decide(tk.ID, tk.Fingerprint, true, by, ""); !errors.Is(err, ErrRuleAtTerminal) {
			t.Fatalf("Decide approve by %s: %v", by, err)
		}
	}
	if _, err := h.TakeRule(tk.ID, tk.Fingerprint, "phone:pixel", func(Ticket) error { return nil }); !errors.Is(err, ErrRuleAtTerminal) {
		t.Fatalf("TakeRule by a phone: %v", err)
	}
	if _, err := h.TakeRule(tk.ID, tk.Fingerprint, "terminal:alice", func(Ticket) error { return errors.New("file differs") }); err == nil || !strings.Contains(err.Error(), "file differs") {
		t.Fatalf("a failed take: %v", err)
	}
	if got, _ := h.Get(tk.ID); got.Status != Pending {
		t.Fatalf("after refused approvals: %s", got.Status)
	}
	taken := false
	got, err := h.TakeRule(tk.ID, tk.Fingerprint, "terminal:alice", func(t Ticket) error { taken = t.ID == tk.ID; return nil })
	if err != nil || !taken || got.Status != Approved || got.Decision.By != "terminal:alice" {
		t.Fatalf("TakeRule: %v %+v", err, got)
	}
	// A request ticket is not taken as a rule.
	a, _ := h.Ask(ask("fp1:a"))
	if _, err := h.TakeRule(a.Ticket.ID, "fp1:a", "terminal:alice", func(Ticket) error { return nil }); err == nil {
		t.Fatal("TakeRule took a request ticket")
	}
	if asks, err := h.Asks("agent"); err != nil || len(asks) != 2 {
		t.Fatalf("asks of agent: %d %v", len(asks), err)
	}
	if asks, err := h.Asks("other"); err != nil || len(asks) != 0 {
		t.Fatalf("asks of other: %d %v", len(asks), err)
	}
	for range asksPerMinute - 1 {
		h.Asks("agent")
	}
	if _, err := h.Asks("agent"); err == nil || !strings.Contains(err.Error(), "within a minute") {
		t.Fatalf("past the rate of reads: %v", err)
	}
	for _, tc := range []struct {
		name string
		req  RuleRequest
		want string
	}{
		{"no container", RuleRequest{Rule: "r", Reason: "x"}, "container"},
		{"empty rule", RuleRequest{Container: "agent", Rule: " ", Reason: "x"}, "rule is empty"},
		{"long rule", RuleRequest{Container: "agent", Rule: strings.Repeat("a", hubapi.MaxRuleText+1), Reason: "x"}, "at most"},
		{"empty reason", RuleRequest{Container: "agent", Rule: "r", Reason: ""}, "reason is empty"},
		{"long reason", RuleRequest{Container: "agent", Rule: "r", Reason: strings.Repeat("a", hubapi.MaxRuleReason+1)}, "at most"},
		{"not utf-8", RuleRequest{Container: "agent", Rule: "r", Reason: "\xff"}, "UTF-8"},
		{"floor", RuleRequest{Container: "agent", Rule: "169.254.169.254", Reason: "x"}, "floor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := h.AskRule("g", tc.req); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("AskRule: %v, want %q", err, tc.want)
			}
		})
	}
	for i := range hubapi.MaxRulePending {
		if _, err := h.AskRule("g", RuleRequest{Container: "busy", Rule: "r", Reason: strings.Repeat("x", i+1)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.AskRule("g", RuleRequest{Container: "busy", Rule: "r", Reason: "one more"}); err == nil || !strings.Contains(err.Error(), "waiting for a human") {
		t.Fatalf("past the bound: %v", err)
	}
	for range ruleChecksPerMinute {
		h.AskRule("g", RuleRequest{Container: "rate", Rule: "169.254.169.254", Reason: "x"})
	}
	if _, err := h.AskRule("g", RuleRequest{Container: "rate", Rule: "r", Reason: "x"}); err == nil || !strings.Contains(err.Error(), "within a minute") {
		t.Fatalf("past the rate: %v", err)
	}
	if _, err := h.AskRule("g", RuleRequest{Container: "rate2", Rule: "r", Reason: "x"}); err != nil {
		t.Fatalf("another container within the minute: %v", err)
	}
}
