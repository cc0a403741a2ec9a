package gate

import (
	"github.com/lockhttp/lockhttp/internal/budget"
	"github.com/lockhttp/lockhttp/internal/judge"
	"github.com/lockhttp/lockhttp/internal/policy"
)

// budgetSent adds what a tunnel decided at the domain sent up to its container's budgets, once
// the tunnel has closed: its CONNECT was counted when it was decided, and the bytes it carried
// were not known then.
func (g *Gate) budgetSent(pol *policy.Policy, res judge.Result, n int64) {
	g.budget.Add(pol.BudgetsFor(res.Container, res.Host), res.Container, n)
}

// Budgets is what each container has used of each budget of the current policy, for the state
// the gate reports to the hub.
func (g *Gate) Budgets() []budget.Use { return g.budget.Usage(g.pol.Load()) }
