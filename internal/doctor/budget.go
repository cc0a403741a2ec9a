package doctor

import (
	"fmt"
	"strings"

	"github.com/lockhttp/lockhttp/internal/budget"
	"github.com/lockhttp/lockhttp/internal/policy"
)

// assessBudgets says, for each [[budget]] of the gate's policy and each container it counts,
// what the container has used of it; a budget that refused requests in the last hour is a WARN.
func assessBudgets(r *Report, f *Facts) {
	if f.Gate == nil || f.Gate.Status == nil {
		return
	}
	for _, u := range f.Gate.Status.Budgets {
		used := budgetWords(u)
		if u.Refused > 0 {
			r.add(Warn, "budget", "%q refused %d request(s) of container %s in the last hour (E_BUDGET); it has used %s; fix: if the work needs more, raise the budget in the policy (a loosening: it waits for review at the console's terminal)",
				u.Budget, u.Refused, u.Container, used)
			continue
		}
		r.add(OK, "budget", "%q for container %s: %s", u.Budget, u.Container, used)
	}
}

// budgetWords says what u has used of each limit its budget sets.
func budgetWords(u budget.Use) string {
	var parts []string
	if u.RequestsPerMinute > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d requests a minute", u.Requests, u.RequestsPerMinute))
	}
	if u.BytesUpPerHour > 0 {
		parts = append(parts, fmt.Sprintf("%s of %s sent an hour", byteWords(u.BytesUp), policy.FormatSize(u.BytesUpPerHour)))
	}
	if u.NewHostsPerHour > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d new hosts an hour", u.Hosts, u.NewHostsPerHour))
	}
	return strings.Join(parts, ", ")
}

// byteWords is a byte count as a person reads it: "512B", "3.2KiB", "48.0MiB".
func byteWords(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%dB", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1fKiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.1fGiB", float64(n)/(1<<30))
}
