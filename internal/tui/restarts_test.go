package tui

import (
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/restarts"
	"github.com/lockhttp/lockhttp/internal/traffic"
)

// lox's restarts are counted in the header and listed in the recent decisions, under every
// filter, escaped; the header stays red for a minute after the latest, and says so when lox gave
// up.
func TestRestartsInHeaderAndRecent(t *testing.T) {
	s := newSetup(t)
	s.size = [2]int{160, 50}
	s.cfg.Traffic = traffic.NewLog(0)
	now := s.clk.Now()
	var reports []restarts.Report
	s.cfg.Restarts = func() []restarts.Report { return reports }
	reports = []restarts.Report{
		{Seq: 2, Process: "gate", PID: 41, NewPID: 42, Exited: now, Exit: "signal: killed", Line: "ERROR boom\x1b[2J",
			Totals: map[string]int{"signer": 1, "gate": 2}},
		{Seq: 1, Process: "signer", PID: 31, NewPID: 32, Exited: now.Add(-time.Second), Exit: "exit status 2",
			Totals: map[string]int{"signer": 1, "gate": 1}},
	}
	d := s.start(t)
	v := d.view()
	header := strings.SplitN(v, "\n", 2)[0]
	if !strings.Contains(header, "restarted signer 1, gate 2 (last 12:00:00)") {
		t.Errorf("header: want the restarts' counts; got %q", header)
	}
	for _, want := range []string{
		"12:00:00  RESTART   gate", "pid 41 exited (signal: killed); restarted as pid 42 (restart 2)", `— ERROR boom\x1b[2J`,
		"11:59:59  RESTART   signer", "pid 31 exited (exit status 2); restarted as pid 32 (restart 1)",
	} {
		if !shows(v, want) {
			t.Errorf("want %q; got\n%s", want, v)
		}
	}
	if strings.Contains(v, "\x1b[2J") {
		t.Errorf("a log line reached the terminal unescaped: %q", v)
	}
	if i, j := strings.Index(v, "RESTART   gate"), strings.Index(v, "RESTART   signer"); i < 0 || j < i {
		t.Errorf("the latest restart goes first; got\n%s", v)
	}
	for _, f := range []string{"all [refused] asks", "all refused [asks]"} {
		d.key("f")
		d.waitView(f)
		if !shows(d.view(), "RESTART   gate") {
			t.Errorf("filter %q hides the restarts; got\n%s", f, d.view())
		}
	}

	// lox gives up on the gate: the header says so.
	reports = append([]restarts.Report{{Seq: 3, Process: "gate", PID: 42, Exited: now.Add(time.Second), Exit: "exit status 1", Stopped: true,
		Totals: map[string]int{"signer": 1, "gate": 2}}}, reports...)
	s.clk.Advance(2 * time.Second)
	d.send(tickMsg{})
	v = d.view()
	if !strings.Contains(strings.SplitN(v, "\n", 2)[0], "gate keeps exiting: stopping") || !shows(v, "STOP      gate") ||
		!shows(v, "exited 5 times within 1m0s: the stack stops") {
		t.Errorf("lox giving up: got\n%s", v)
	}
}

// The header's word on restarts is red for a minute after the latest, then yellow.
func TestRestartsHeaderFades(t *testing.T) {
	s := newSetup(t)
	now := s.clk.Now()
	s.cfg.Restarts = func() []restarts.Report {
		return []restarts.Report{{Seq: 1, Process: "console", PID: 1, NewPID: 2, Exited: now, Exit: "signal: killed", Totals: map[string]int{"console": 1}}}
	}
	d := s.start(t)
	m := d.m
	if got, want := m.restartsPart(), m.st.bad.Render("restarted console 1 (last 12:00:00)"); got != want {
		t.Errorf("at once: %q, want %q", got, want)
	}
	s.clk.Advance(restarts.Window + time.Second)
	if got, want := m.restartsPart(), m.st.warn.Render("restarted console 1 (last 12:00:00)"); got != want {
		t.Errorf("a minute later: %q, want %q", got, want)
	}
}

// Without restarts, or without a supervisor, the header has no word on them.
func TestNoRestarts(t *testing.T) {
	s := newSetup(t)
	d := s.start(t)
	if strings.Contains(d.view(), "restarted") || strings.Contains(d.view(), "RESTART") {
		t.Fatalf("restarts where there are none:\n%s", d.view())
	}
}
