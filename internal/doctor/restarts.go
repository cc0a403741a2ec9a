package doctor

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/lockhttp/lockhttp/internal/display"
	"github.com/lockhttp/lockhttp/internal/restarts"
)

// assessRestarts says, for the local stack, which processes lox restarted since the stack
// started: a WARN for each (how often, when it last exited, how, and its last error line), with
// where to read why; OK when none exited.
func assessRestarts(r *Report, f *Facts) {
	s := f.Supervision
	if s == nil {
		return
	}
	started := stamp(s.Started)
	exited := false
	for _, p := range restarts.Processes {
		t, ok := s.Restarts[p]
		if !ok {
			continue
		}
		exited = true
		how := display.Line(t.Exit, 100)
		if t.Line != "" {
			how += "; its last error line: " + display.Line(t.Line, 300)
		}
		what := fmt.Sprintf("the %s restarted %s since the stack started at %s, the last time after it exited at %s (%s)", p, times(t.Count), started, stamp(t.Last), how)
		if t.Restarted.Before(t.Last) {
			what = fmt.Sprintf("the %s exited at %s (%s) and lox is restarting it; restarted %s before since the stack started at %s", p, stamp(t.Last), how, times(t.Count), started)
		}
		r.add(Warn, "restarts", "%s; fix: read why in %s (and lox's lines in %s); a process that exits %d times within %s stops the stack",
			what, filepath.Join(s.Logs, p+".log"), filepath.Join(s.Logs, "lox.log"), restarts.Limit, restarts.Window)
	}
	if !exited {
		r.add(OK, "restarts", "no process of the stack has exited since it started at %s", started)
	}
}

// stamp is a time as the restarts line says it: UTC, to the second.
func stamp(t time.Time) string { return t.UTC().Format(time.DateTime) + " UTC" }

// times is "once", "2 times"; "0 times" too.
func times(n int) string {
	if n == 1 {
		return "once"
	}
	return fmt.Sprintf("%d times", n)
}
