// Package restarts carries what lox run's supervisor does to the console: each time a process of
// the local stack (the signer, the console, the gate) exited and lox restarted it, or stopped the
// stack because it kept exiting, lox reports it on the console's socket; the console writes it to
// its audit and keeps the latest for its terminal.
package restarts

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/display"
	"github.com/lockhttp/lockhttp/internal/httpjson"
	"github.com/lockhttp/lockhttp/internal/unixsock"
)

// Processes are the processes lox supervises, in the order it starts them.
var Processes = []string{"signer", "console", "gate"}

// Bounds of a report's text fields (bytes; longer is cut on a character boundary) and of its
// body.
const (
	maxExit = 200
	maxLine = 400
	maxBody = 16 << 10
)

// Report is one restart of a process of the stack, or lox giving up on one.
type Report struct {
	// Seq is lox's number for the report, from 1, across processes: a report the console got
	// twice (its answer was lost) has the same Seq.
	Seq     int    `json:"seq"`
	Process string `json:"process"` // one of Processes
	PID     int    `json:"pid"`     // the process that exited
	// Exited is when it exited; Exit how ("signal: killed", "exit status 1"); Line the last
	// line it wrote to its log in that run (readable, escaped, cut), "" when none.
	Exited time.Time `json:"exited"`
	Exit   string    `json:"exit"`
	Line   string    `json:"line,omitempty"`
	// NewPID is the process that took its place, up at Restarted; 0 when Stopped.
	NewPID    int       `json:"new_pid,omitempty"`
	Restarted time.Time `json:"restarted"`
	// Stopped: the process exited Limit times within Window, and lox stopped the stack.
	Stopped bool `json:"stopped,omitempty"`
	// Totals are each process's restarts since the stack started, this one included.
	Totals map[string]int `json:"totals"`
}

// The supervisor's limits: a process that exits Limit times within Window stops the stack.
const (
	Limit  = 5
	Window = time.Minute
)

// Tally is a process's restarts since the stack started, as up.json keeps them.
type Tally struct {
	Count int `json:"count"` // restarts (not counting a last exit that stopped the stack)
	// Last is when it last exited, Exit how, Line its last log line then.
	Last time.Time `json:"last"`
	Exit string    `json:"exit"`
	Line string    `json:"line,omitempty"`
	// Restarted is when the latest restart came up; before Last (or zero), lox is restarting
	// it now.
	Restarted time.Time `json:"restarted"`
}

// Text is the report in words, for the console's audit and its terminal, every field escaped.
//
//	the gate (pid 4242) exited (signal: killed) at 12:03:04; lox restarted it as pid 4250 (restart 2 since the stack started)
func (r Report) Text() string {
	x := func(s string) string { return display.Escape(s, false) }
	var b strings.Builder
	fmt.Fprintf(&b, "the %s (pid %d) exited (%s) at %s", x(r.Process), r.PID, x(r.Exit), r.Exited.Local().Format("15:04:05"))
	if r.Line != "" {
		fmt.Fprintf(&b, ", its last line %q", x(r.Line))
	}
	if r.Stopped {
		fmt.Fprintf(&b, "; it exited %d times within %s: lox stopped the stack", Limit, Window)
	} else {
		fmt.Fprintf(&b, "; lox restarted it as pid %d (restart %d since the stack started)", r.NewPID, r.Totals[r.Process])
	}
	return b.String()
}

// check refuses a report that is not one lox sends.
func (r Report) check() error {
	if !slices.Contains(Processes, r.Process) {
		return fmt.Errorf("process %q: use one of %s", display.Line(r.Process, 40), strings.Join(Processes, ", "))
	}
	if r.Seq < 1 || r.PID < 1 || (!r.Stopped && r.NewPID < 1) {
		return fmt.Errorf("a report needs seq, pid and, unless stopped, new_pid")
	}
	if len(r.Totals) > len(Processes) {
		return fmt.Errorf("totals name more processes than %s", strings.Join(Processes, ", "))
	}
	for p, n := range r.Totals {
		if !slices.Contains(Processes, p) || n < 0 {
			return fmt.Errorf("totals: %q %d is no process's count", display.Line(p, 40), n)
		}
	}
	return nil
}

// bounded is r with its text fields cut to the bounds.
func (r Report) bounded() Report {
	r.Exit, r.Line = display.Cut(r.Exit, maxExit), display.Cut(r.Line, maxLine)
	return r
}

// Record is the report as a record of the console's audit: event "restart", or "restart-limit"
// when lox stopped the stack; the process as its rule, "lox-SEQ" as its id, Text as its detail.
func (r Report) Record() *audit.Record {
	ev := "restart"
	if r.Stopped {
		ev = "restart-limit"
	}
	return &audit.Record{Time: r.Exited, Event: ev, ID: fmt.Sprintf("lox-%d", r.Seq), Rule: r.Process, Detail: r.Text()}
}

// keep is how many reports a Log keeps.
const keep = 50

// Log keeps the latest reports the console got, for its terminal. It is safe for concurrent
// use; the zero Log is empty and ready to use.
type Log struct {
	mu      sync.Mutex
	reports []Report // guarded by mu: the latest, oldest first, at most keep; one per Seq
}

// Add keeps r, unless a report with its Seq is kept already.
func (l *Log) Add(r Report) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range l.reports {
		if k.Seq == r.Seq {
			return
		}
	}
	l.reports = append(l.reports, r)
	if over := len(l.reports) - keep; over > 0 {
		l.reports = append(l.reports[:0], l.reports[over:]...)
	}
}

// Recent is the kept reports, the latest first.
func (l *Log) Recent() []Report {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Report, 0, len(l.reports))
	for i := len(l.reports) - 1; i >= 0; i-- {
		out = append(out, l.reports[i])
	}
	return out
}

// Auditor keeps the console's audit records.
type Auditor interface {
	Write(ctx context.Context, r *audit.Record) error
}

// Handler takes lox's reports: POST a Report as JSON (16 KiB at most, no unknown fields) → 204,
// once it is in the audit and in l. It does not check who is calling: serve it to lox's uid only
// (unixsock.RequireUID).
func Handler(l *Log, a Auditor, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		refuse := func(status int, msg string) { httpjson.Write(w, status, map[string]string{"error": msg}) }
		if r.Method != http.MethodPost {
			refuse(http.StatusMethodNotAllowed, "POST a restart report")
			return
		}
		data, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
		if err != nil || len(data) > maxBody {
			refuse(http.StatusBadRequest, "a restart report is one JSON object of at most 16 KiB")
			return
		}
		var rep Report
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rep); err != nil {
			refuse(http.StatusBadRequest, "bad restart report: "+err.Error())
			return
		}
		if _, err := dec.Token(); err != io.EOF {
			refuse(http.StatusBadRequest, "bad restart report: data after the JSON object")
			return
		}
		if err := rep.check(); err != nil {
			refuse(http.StatusBadRequest, "bad restart report: "+err.Error())
			return
		}
		rep = rep.bounded()
		if err := a.Write(r.Context(), rep.Record()); err != nil {
			log.Error("audit write failed: restart report not recorded", "seq", rep.Seq, "err", err)
			refuse(http.StatusServiceUnavailable, "the console's audit cannot be written; lox sends the report again")
			return
		}
		l.Add(rep)
		log.Info("restart report recorded", "process", rep.Process, "pid", rep.PID, "exit", rep.Exit, "new_pid", rep.NewPID, "stopped", rep.Stopped)
		w.WriteHeader(http.StatusNoContent)
	})
}

// Path is where the console serves Handler on its socket.
const Path = "/restart"

// Send posts r to the console at its unix socket, and returns once the console recorded it.
func Send(ctx context.Context, socket string, r Report) error {
	body, err := json.Marshal(r)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://unix"+Path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Close = true // one report now and then: no idle connection kept
	resp, err := unixsock.Client(socket, 5*time.Second).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return fmt.Errorf("the console answered %s: %s", resp.Status, display.Line(strings.TrimSpace(string(msg)), 200))
	}
	return nil
}
