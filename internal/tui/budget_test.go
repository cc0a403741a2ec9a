package tui

import (
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/hub"
)

// TestBudgetsInTheHeader: the header names the containers the gate reports near or over a
// budget.
func TestBudgetsInTheHeader(t *testing.T) {
	s := newSetup(t)
	s.size = [2]int{200, 30}
	d := s.start(t)
	s.hub.SetGateState(hub.GateState{PolicyVersion: "sha256:0123456789abcdef0123", Signer: "ok", Audit: "ok",
		Budgets: []hub.GateBudget{{Budget: "egress", Container: "agent", Percent: 100, Refused: 3}, {Budget: "egress", Container: "other", Percent: 85}}})
	d.waitFor("the gate's state", func() bool { return len(d.m.gate.Budgets) == 2 })
	v := d.view()
	for _, want := range []string{"gate ok · agent over budget egress (3 refused) · other at 85% of budget egress"} {
		if !strings.Contains(v, want) {
			t.Errorf("want %q; got\n%s", want, v)
		}
	}
}
