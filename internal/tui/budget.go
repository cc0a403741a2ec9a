package tui

import (
	"fmt"

	"github.com/lockhttp/lockhttp/internal/hub"
)

// budgetParts name, for the header, the containers the gate reported near or over a budget
// (escaped already): "agent over budget egress (3 refused)", "other at 85% of budget egress".
func (m *model) budgetParts(bs []hub.GateBudget) []string {
	out := make([]string, 0, len(bs))
	for _, b := range bs {
		if b.Refused > 0 {
			out = append(out, m.st.bad.Render(fmt.Sprintf("%s over budget %s (%d refused)", b.Container, b.Budget, b.Refused)))
			continue
		}
		out = append(out, m.st.warn.Render(fmt.Sprintf("%s at %d%% of budget %s", b.Container, b.Percent, b.Budget)))
	}
	return out
}
