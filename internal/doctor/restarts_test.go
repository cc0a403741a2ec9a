package doctor

import (
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/restarts"
)

func TestAssessRestarts(t *testing.T) {
	started := now.Add(-time.Hour)
	tests := []struct {
		name     string
		restarts map[string]restarts.Tally
		want     []Line // the restarts lines, in order
	}{
		{"none", nil, []Line{{OK, "restarts", "no process of the stack has exited since it started at 2026-11-30 11:00:00 UTC"}}},
		{"the gate twice, the signer once", map[string]restarts.Tally{
			"gate": {Count: 2, Last: now.Add(-time.Minute), Exit: "signal: killed", Restarted: now.Add(-time.Minute + time.Second)},
			"signer": {Count: 1, Last: now.Add(-30 * time.Minute), Exit: "exit status 1", Line: "ERROR out of memory\x1b[2J",
				Restarted: now.Add(-29 * time.Minute)},
		}, []Line{
			{Warn, "restarts", `the signer restarted once since the stack started at 2026-11-30 11:00:00 UTC, the last time after it exited at 2026-11-30 11:30:00 UTC (exit status 1; its last error line: ERROR out of memory\x1b[2J); fix: read why in /s/logs/signer.log (and lox's lines in /s/logs/lox.log); a process that exits 5 times within 1m0s stops the stack`},
			{Warn, "restarts", "the gate restarted 2 times since the stack started at 2026-11-30 11:00:00 UTC, the last time after it exited at 2026-11-30 11:59:00 UTC (signal: killed); fix: read why in /s/logs/gate.log (and lox's lines in /s/logs/lox.log); a process that exits 5 times within 1m0s stops the stack"},
		}},
		{"the console down, being restarted", map[string]restarts.Tally{
			"console": {Count: 1, Last: now.Add(-time.Second), Exit: "signal: killed", Restarted: now.Add(-time.Hour / 2)},
		}, []Line{
			{Warn, "restarts", "the console exited at 2026-11-30 11:59:59 UTC (signal: killed) and lox is restarting it; restarted once before since the stack started at 2026-11-30 11:00:00 UTC; fix: read why in /s/logs/console.log (and lox's lines in /s/logs/lox.log); a process that exits 5 times within 1m0s stops the stack"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &Facts{Mode: "local", Now: now, Supervision: &SupervisionFacts{Started: started, Logs: "/s/logs", Restarts: tc.restarts}}
			got := Assess(f).Find("restarts")
			if len(got) != len(tc.want) {
				t.Fatalf("%d lines, want %d: %+v", len(got), len(tc.want), got)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("line %d:\n%+v\nwant\n%+v", i, got[i], tc.want[i])
				}
			}
		})
	}
	// Compose has no supervisor of lox's: no restarts line.
	if got := Assess(healthy()).Find("restarts"); len(got) != 0 || strings.Contains(Assess(healthy()).Lines[0].Text, "restart") {
		t.Errorf("compose: %+v", got)
	}
}
