package stack

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/restarts"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

func TestProcExited(t *testing.T) {
	p := &proc{}
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for i, tc := range []struct {
		at   time.Duration
		want int
	}{
		{0, 1}, {10 * time.Second, 2}, {50 * time.Second, 3},
		{61 * time.Second, 3},  // the first has left the minute
		{111 * time.Second, 2}, // so have the second and the third
		{300 * time.Second, 1},
	} {
		if got := p.exited(t0.Add(tc.at)); got != tc.want {
			t.Errorf("exit %d at +%s: %d within the minute, want %d", i, tc.at, got, tc.want)
		}
	}
}

func TestLastError(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lines []string
		want  string
	}{
		{"killed while all was well", []string{"INFO gate listening", "DEBUG x"}, ""},
		{"an error line, then info", []string{"ERROR audit write failed err=disk", "INFO y"}, "ERROR audit write failed err=disk"},
		{"a fatal error in plain text", []string{"INFO x", "signer serve: load CA: bad key"}, "signer serve: load CA: bad key"},
		{"a panic's first line", []string{"INFO x", "panic: runtime error: index out of range", "", "goroutine 1 [running]:", "main.main()"},
			"panic: runtime error: index out of range"},
		{"nothing", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := lastError(tc.lines); got != tc.want {
				t.Errorf("lastError = %q, want %q", got, tc.want)
			}
		})
	}
}

// testSupervisor supervises one process, "gate", whose start runs script under sh; ready is
// true as soon as it runs (or never, with never).
func testSupervisor(t *testing.T, script string, never bool) (*supervisor, *proc, *testkit.Buffer) {
	t.Helper()
	state := t.TempDir()
	logs := filepath.Join(state, "logs")
	os.Mkdir(logs, 0o700)
	out := &testkit.Buffer{}
	up := &Up{StateDir: state, Logs: logs, ConsoleSocket: filepath.Join(state, "no-console.sock"), PIDs: map[string]int{"lox": os.Getpid()},
		Restarts: map[string]restarts.Tally{}}
	s := &supervisor{out: out, up: up, state: state, log: slog.New(slog.NewTextHandler(io.Discard, nil)), delay: time.Millisecond,
		now: time.Now, kick: make(chan struct{}, 1)}
	p := &proc{name: "gate", what: "the gate",
		start: func() (*child, error) {
			return start("gate", "/bin/sh", filepath.Join(logs, "gate.log"), nil, "-c", script)
		},
		ready: func(ctx context.Context, c *child) error {
			return waitFor(ctx, c, readyTimeout, func() bool { return !never })
		}}
	s.procs = []*proc{p}
	var err error
	if p.cur, err = p.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.stopAll)
	return s, p, out
}

func readUp(t *testing.T, state string) Up {
	t.Helper()
	var up Up
	data, err := os.ReadFile(filepath.Join(state, UpFile))
	if err != nil || json.Unmarshal(data, &up) != nil {
		t.Fatalf("up.json: %v %s", err, data)
	}
	return up
}

// A process that exits is started again after the delay; up.json names the new pid and the
// tally, and a report waits for the console.
func TestRestartComesBack(t *testing.T) {
	s, p, out := testSupervisor(t, "exec sleep 30", false)
	old := p.cur.pid
	stop(p.cur) // SIGTERM: any exit is restarted
	if err := s.restart(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if p.cur.pid == old || !strings.Contains(out.String(), "lox: the gate (pid ") || !strings.Contains(out.String(), "restarted the gate: pid") {
		t.Fatalf("pid %d (was %d):\n%s", p.cur.pid, old, out)
	}
	up := readUp(t, s.state)
	if up.PIDs["gate"] != p.cur.pid || up.Restarts["gate"].Count != 1 || up.Restarts["gate"].Exit != "signal: terminated" || up.Restarts["gate"].Restarted.Before(up.Restarts["gate"].Last) {
		t.Errorf("up.json: pids %v, restarts %+v", up.PIDs, up.Restarts)
	}
	if len(s.pending) != 1 || s.pending[0].Seq != 1 || s.pending[0].PID != old || s.pending[0].NewPID != p.cur.pid || s.pending[0].Totals["gate"] != 1 {
		t.Errorf("pending reports %+v", s.pending)
	}
}

// A process that cannot stay up is tried with a delay that doubles, and its fifth exit within
// the minute stops the stack with its last lines.
func TestRestartGivesUp(t *testing.T) {
	s, p, out := testSupervisor(t, "echo 'gate: -roots: open /r.pem: no such file or directory' >&2; exit 1", true)
	s.o.Roots = "/r.pem"
	<-p.cur.done
	err := s.restart(context.Background(), p)
	if err == nil {
		t.Fatal("no error after five exits")
	}
	for _, want := range []string{
		"the gate exited 5 times within 1m0s (the last time: exit status 1): lox stopped the stack; the last lines of ",
		"  | gate: -roots: open /r.pem: no such file or directory",
		"fix: --roots /r.pem does not exist",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	for _, want := range []string{"restarting it in 1ms (exit 1 within", "restarting it in 2ms (exit 2", "restarting it in 4ms (exit 3", "restarting it in 8ms (exit 4",
		"exited (exit status 1), 5 times within 1m0s: stopping the stack"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("lox's lines lack %q:\n%s", want, out)
		}
	}
	if up := readUp(t, s.state); up.Restarts["gate"].Count != 0 || up.Restarts["gate"].Line != "gate: -roots: open /r.pem: no such file or directory" {
		t.Errorf("up.json's restarts %+v", up.Restarts)
	}
}

// ctx ending while lox waits to restart a process ends the restart without an error.
func TestRestartEndsWithCtx(t *testing.T) {
	s, p, _ := testSupervisor(t, "exec sleep 30", true)
	stop(p.cur)
	ctx, cancel := context.WithCancel(context.Background())
	s.delay = time.Hour
	done := make(chan error, 1)
	go func() { done <- s.restart(ctx, p) }()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("restart after ctx ended: %v", err)
	}
}
