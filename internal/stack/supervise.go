package stack

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/lockhttp/lockhttp/internal/restarts"
)

// DefaultRestartDelay is how long lox waits, by default, before it restarts a process of the
// stack that exited for the first time within restarts.Window (Options.RestartDelay).
const DefaultRestartDelay = time.Second

// MaxRestartDelay is the longest Options.RestartDelay lox run takes: with the delays doubling
// (1, 2, 4, 8 times it), a process that keeps crashing exits restarts.Limit times within
// restarts.Window only when 15 delays fit in it, with time to spare for its starts.
const MaxRestartDelay = 3 * time.Second

// readyTimeout bounds how long a process has to come up, at the start and after a restart.
const readyTimeout = 15 * time.Second

// proc is one process of the stack under supervision: how to start it and to tell that it
// serves, the current one, and its exits.
type proc struct {
	name  string // "signer", "console", "gate": its log is logs/NAME.log
	what  string // "the signer", for messages
	start func() (*child, error)
	// ready waits until c serves, c exits, ctx ends or readyTimeout passes.
	ready func(ctx context.Context, c *child) error
	// quit says whether c's exit is the person at the terminal quitting (the terminal UI's
	// console exiting cleanly), which stops the stack instead of restarting c. Nil: never.
	quit func(c *child) bool
	// metrics is the URL the current process serves its metrics at, once it is ready ("":
	// none), for up.json.
	metrics func() string

	cur   *child
	exits []time.Time    // its exits within the last restarts.Window, oldest first
	tally restarts.Tally // its restarts since the stack started
}

// exited records an exit at t and returns how many fell within restarts.Window up to t.
func (p *proc) exited(t time.Time) int {
	kept := p.exits[:0]
	for _, e := range p.exits {
		if t.Sub(e) < restarts.Window {
			kept = append(kept, e)
		}
	}
	p.exits = append(kept, t)
	return len(p.exits)
}

// supervisor restarts the processes of a running stack as they exit (Run, once the stack is
// up): after a delay that doubles with each exit of the same process within restarts.Window;
// the restarts.Limit-th exit within it stops the stack with that process's last lines. Each
// exit and restart is a line on out (headless) and in logs/lox.log, a change of up.json (the
// new pid, the restarts' tally) and a report to the console, which audits it and shows it on
// its terminal.
type supervisor struct {
	o     Options
	out   io.Writer // lox's lines; nil in terminal UI mode (the console owns the terminal)
	up    *Up
	state string
	log   *slog.Logger // logs/lox.log
	delay time.Duration
	now   func() time.Time
	procs []*proc // in the order they start: signer, console, gate

	mu      sync.Mutex
	seq     int               // guarded by mu: the last report's Seq
	pending []restarts.Report // guarded by mu: reports the console has not taken yet, oldest first
	kick    chan struct{}     // cap 1: a report is pending
}

// say writes one of lox's lines: on out, and in lox.log at level.
func (s *supervisor) say(level slog.Level, msg string, line string, args ...any) {
	if s.out != nil {
		fmt.Fprintln(s.out, "lox: "+line)
	}
	s.log.Log(context.Background(), level, msg, args...)
}

// proc returns the supervised process named name.
func (s *supervisor) proc(name string) *proc {
	for _, p := range s.procs {
		if p.name == name {
			return p
		}
	}
	panic("stack: no process " + name)
}

// stopAll stops every process, the last started first.
func (s *supervisor) stopAll() {
	for i := len(s.procs) - 1; i >= 0; i-- {
		if c := s.procs[i].cur; c != nil {
			stop(c)
		}
	}
}

// run supervises until ctx ends (nil), the person at the terminal quits (nil), or a process
// exits restarts.Limit times within restarts.Window or cannot be started again (the error).
func (s *supervisor) run(ctx context.Context) error {
	go s.deliver(ctx)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.procs[0].cur.done:
		case <-s.procs[1].cur.done:
		case <-s.procs[2].cur.done:
		}
		// Several may be down: the first in start order is restarted first.
		for _, p := range s.procs {
			select {
			case <-p.cur.done:
			default:
				continue
			}
			if p.quit != nil && p.quit(p.cur) {
				return nil
			}
			if err := s.restart(ctx, p); err != nil || ctx.Err() != nil {
				return err
			}
		}
	}
}

// restart brings p back after its current process exited: it waits the delay, starts it and
// waits until it serves, again and again while it exits, until it serves (nil), ctx ends (nil),
// or it exited restarts.Limit times within restarts.Window (the error, with its last lines).
func (s *supervisor) restart(ctx context.Context, p *proc) error {
	for {
		c := p.cur
		exit := exitText(c.err)
		last := lastError(logTail(c.log, c.logFrom))
		p.tally.Last, p.tally.Exit, p.tally.Line = c.exitedAt.UTC(), exit, last
		n := p.exited(c.exitedAt)
		s.up.Restarts[p.name] = p.tally
		if n >= restarts.Limit {
			s.say(slog.LevelError, "process exited too often: stopping the stack",
				fmt.Sprintf("%s (pid %d) exited (%s), %d times within %s: stopping the stack", p.what, c.pid, exit, n, restarts.Window),
				"process", p.name, "pid", c.pid, "exit", exit, "exits", n, "window", restarts.Window.String())
			s.writeUp()
			if p.name != "console" {
				s.reportNow(s.report(p, c, nil))
			}
			return exitError(c, fmt.Sprintf("%s exited %d times within %s (the last time: %s): lox stopped the stack", p.what, n, restarts.Window, exit), s.o)
		}
		delay := s.delay << (n - 1)
		s.say(slog.LevelWarn, "process exited: restarting it",
			fmt.Sprintf("%s (pid %d) exited (%s); restarting it in %s (exit %d within %s; %d stop the stack; see %s)", p.what, c.pid, exit, delay, n, restarts.Window, restarts.Limit, c.log),
			"process", p.name, "pid", c.pid, "exit", exit, "last_line", last, "restart_in", delay.String(), "exits", n)
		s.writeUp()
		wait := time.NewTimer(time.Until(c.exitedAt.Add(delay)))
		select {
		case <-ctx.Done():
			wait.Stop()
			return nil
		case <-wait.C:
		}
		nc, err := p.start()
		if err != nil {
			return fmt.Errorf("restarting %s: %w; lox stopped the stack", p.what, err)
		}
		p.cur = nc
		if err := p.ready(ctx, nc); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			// Not up in time, or exited while starting: either is an exit.
			stop(nc)
			continue
		}
		p.tally.Count++
		p.tally.Restarted = s.now().UTC()
		s.up.Restarts[p.name] = p.tally
		s.up.PIDs[p.name] = nc.pid
		if s.up.Metrics != nil && p.metrics != nil {
			// The address is kept across restarts; up.json names what the new process says.
			s.up.Metrics[p.name] = p.metrics()
		}
		s.writeUp()
		s.say(slog.LevelWarn, "process restarted",
			fmt.Sprintf("restarted %s: pid %d (restart %d since the stack started)", p.what, nc.pid, p.tally.Count),
			"process", p.name, "pid", nc.pid, "restarts", p.tally.Count)
		s.queue(s.report(p, c, nc))
		return nil
	}
}

// lastError is the line of a process's last lines that best says why it ended: a Go panic's or
// fatal error's first line, else the last line that is not at INFO or DEBUG level (a line of
// plain text counts: the binaries print their fatal errors so); "" when there is none (a process
// that was killed while all was well).
func lastError(lines []string) string {
	for _, l := range lines {
		if strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "fatal error: ") {
			return l
		}
	}
	for i := len(lines) - 1; i >= 0; i-- {
		if !strings.HasPrefix(lines[i], "INFO ") && !strings.HasPrefix(lines[i], "DEBUG ") {
			return lines[i]
		}
	}
	return ""
}

// exitText is how a process ended, as exec.Cmd.Wait says it ("signal: killed", "exit status
// 1"); "exit status 0" for a clean exit.
func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// writeUp rewrites up.json with the pids and tallies as they are now; a failure is said, not
// fatal (the stack runs on).
func (s *supervisor) writeUp() {
	if err := writeUp(s.state, s.up); err != nil {
		s.say(slog.LevelError, "up.json not written", fmt.Sprintf("writing %s: %v", filepath.Join(s.state, UpFile), err), "err", err)
	}
}

// report is the report of old's exit, and of nc taking its place (nil: lox stops the stack).
func (s *supervisor) report(p *proc, old, nc *child) restarts.Report {
	s.mu.Lock()
	s.seq++
	seq := s.seq
	s.mu.Unlock()
	r := restarts.Report{Seq: seq, Process: p.name, PID: old.pid, Exited: p.tally.Last, Exit: p.tally.Exit, Line: p.tally.Line,
		Totals: map[string]int{}}
	for _, q := range s.procs {
		r.Totals[q.name] = q.tally.Count
	}
	if nc == nil {
		r.Stopped = true
	} else {
		r.NewPID, r.Restarted = nc.pid, p.tally.Restarted
	}
	return r
}

// queue hands r to the delivery to the console.
func (s *supervisor) queue(r restarts.Report) {
	s.mu.Lock()
	s.pending = append(s.pending, r)
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// reportNow sends r to the console at once, for the report of a stack about to stop: the queue
// has no time left. A failure is in lox.log.
func (s *supervisor) reportNow(r restarts.Report) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	s.flush(ctx)
	if err := restarts.Send(ctx, s.up.ConsoleSocket, r); err != nil {
		s.log.Error("restart report not delivered to the console", "seq", r.Seq, "err", err)
	}
}

// deliverEvery is how often the delivery tries again while the console does not take a report.
const deliverEvery = 500 * time.Millisecond

// deliver sends the pending reports to the console, in order, until ctx ends: each is written
// to the console's audit before the next is sent. A console that is down (restarting) gets
// them once it is back.
func (s *supervisor) deliver(ctx context.Context) {
	t := time.NewTicker(deliverEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			s.mu.Lock()
			n := len(s.pending)
			s.mu.Unlock()
			if n > 0 {
				s.log.Error("restart reports not delivered to the console when the stack stopped", "reports", n)
			}
			return
		case <-s.kick:
		case <-t.C:
		}
		s.flush(ctx)
	}
}

// flush sends what is pending until the console refuses or is away.
func (s *supervisor) flush(ctx context.Context) {
	for {
		s.mu.Lock()
		if len(s.pending) == 0 {
			s.mu.Unlock()
			return
		}
		r := s.pending[0]
		s.mu.Unlock()
		if err := restarts.Send(ctx, s.up.ConsoleSocket, r); err != nil {
			s.log.Debug("restart report not delivered yet", "seq", r.Seq, "err", err)
			return
		}
		s.mu.Lock()
		if len(s.pending) > 0 && s.pending[0].Seq == r.Seq {
			s.pending = s.pending[1:]
		}
		s.mu.Unlock()
	}
}

// openLoxLog opens logs/lox.log, lox's own log (JSON lines), for appending.
func openLoxLog(dir string) (*os.File, *slog.Logger, error) {
	f, _, err := openLog(filepath.Join(dir, "lox.log"))
	if err != nil {
		return nil, nil, err
	}
	return f, slog.New(slog.NewJSONHandler(f, nil)), nil
}

// terminalState is the terminal's modes before the console's terminal UI took it, so that lox
// can give the terminal back when a console that crashed left it in raw mode and the alternate
// screen.
type terminalState struct {
	f *os.File
	t *syscall.Termios
}

func saveTerminal(f *os.File) *terminalState {
	t := termios(f)
	if t == nil {
		return nil
	}
	return &terminalState{f: f, t: t}
}

// restore puts the modes back, leaves the alternate screen and shows the cursor.
func (ts *terminalState) restore(out io.Writer) {
	if ts == nil {
		return
	}
	ioctl(ts.f.Fd(), syscall.TCSETS, uintptr(unsafe.Pointer(ts.t)))
	io.WriteString(out, "\x1b[?1049l\x1b[?25h\r\n")
}
