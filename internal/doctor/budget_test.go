package doctor

import (
	"bytes"
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/budget"
)

// TestBudgetLines: each budget in use is a line with what the container used of each limit;
// one that refused requests in the last hour is a WARN with the fix.
func TestBudgetLines(t *testing.T) {
	f := healthy()
	f.Gate.Status.Budgets = []budget.Use{
		{Budget: "egress", Container: "agent", Requests: 12, RequestsPerMinute: 60, BytesUp: 3 << 20, BytesUpPerHour: 50 << 20},
		{Budget: "egress", Container: "other", Requests: 60, RequestsPerMinute: 60, BytesUpPerHour: 50 << 20, Refused: 4},
		{Budget: "hosts", Container: "agent", Hosts: 3, NewHostsPerHour: 30},
	}
	r := Assess(f)
	var b bytes.Buffer
	r.Write(&b)
	lines := r.Find("budget")
	if len(lines) != 3 {
		t.Fatalf("%d budget lines, want 3:\n%s", len(lines), b.String())
	}
	want := []struct {
		level Level
		text  string
	}{
		{OK, `"egress" for container agent: 12 of 60 requests a minute, 3.0MiB of 50MiB sent an hour`},
		{Warn, `"egress" refused 4 request(s) of container other in the last hour (E_BUDGET); it has used 60 of 60 requests a minute, 0B of 50MiB sent an hour; fix: if the work needs more, raise the budget`},
		{OK, `"hosts" for container agent: 3 of 30 new hosts an hour`},
	}
	for i, w := range want {
		if lines[i].Level != w.level || !strings.Contains(lines[i].Text, w.text) {
			t.Errorf("line %d: %s %q, want %s %q", i, lines[i].Level, lines[i].Text, w.level, w.text)
		}
	}
	if r.Worst() != Warn {
		t.Errorf("worst %s, want WARN:\n%s", r.Worst(), b.String())
	}
}
