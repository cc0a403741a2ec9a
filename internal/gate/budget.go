package gate

import (
	"cmp"
	"slices"

	"github.com/lockhttp/lockhttp/internal/hubapi"
	"github.com/lockhttp/lockhttp/internal/judge"
	"github.com/lockhttp/lockhttp/internal/policy"
)

// budgetSent adds what a tunnel decided at the domain sent up to its container's budgets, once
// the tunnel has closed: its CONNECT was counted when it was decided, and the bytes it carried
// were not known then.
func (g *Gate) budgetSent(pol *policy.Policy, res judge.Result, n int64) {
	g.budget.Add(pol.BudgetsFor(res.Container, res.Host), res.Container, n)
}

// Budgets in the state the gate reports to the hub: a container at nearBudget percent of a
// limit or more, or refused in the last hour, at most reportBudgets of them.
const (
	nearBudget    = 80
	reportBudgets = 8
)

// BudgetState is the containers near or over a budget of the current policy, refused ones first
// and then by the share used, for the state the gate reports to the hub (the console's terminal
// shows them).
func (g *Gate) BudgetState() []hubapi.GateBudget {
	var out []hubapi.GateBudget
	for _, u := range g.budget.Usage(g.pol.Load()) {
		if p := u.Percent(); p >= nearBudget || u.Refused > 0 {
			out = append(out, hubapi.GateBudget{Budget: u.Budget, Container: u.Container, Percent: p, Refused: u.Refused})
		}
	}
	slices.SortStableFunc(out, func(a, b hubapi.GateBudget) int {
		if ar, br := a.Refused > 0, b.Refused > 0; ar != br {
			if ar {
				return -1
			}
			return 1
		}
		return cmp.Compare(b.Percent, a.Percent)
	})
	return out[:min(len(out), reportBudgets)]
}
