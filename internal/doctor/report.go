// Package doctor says whether a lockhttp setup is sound. Gathering (files, sockets, the hub, the
// gate, the agent network, docker) collects Facts; Assess turns Facts into a Report of lines,
// each OK, WARN (works, look at it) or ERROR (will not work), with the fix in the line. The two
// are apart so that the facts of a compose setup, gathered in several containers, are assessed
// once, and so that every verdict of the doctor is tested without a running stack.
package doctor

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Level is how a check came out.
type Level int

const (
	OK Level = iota
	Warn
	Error
)

func (l Level) String() string {
	switch l {
	case OK:
		return "OK"
	case Warn:
		return "WARN"
	}
	return "ERROR"
}

func (l Level) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

func (l *Level) UnmarshalText(b []byte) error {
	switch string(b) {
	case "OK":
		*l = OK
	case "WARN":
		*l = Warn
	case "ERROR":
		*l = Error
	default:
		return fmt.Errorf("level %q: want OK, WARN or ERROR", b)
	}
	return nil
}

// Line is one check's outcome.
type Line struct {
	Level Level  `json:"level"`
	Check string `json:"check"` // ca, signer, console, policy, hub, gate, audit, agent-net, compose
	Text  string `json:"text"`  // what holds or does not; for WARN and ERROR, the fix
}

// Report is the doctor's answer, in the order of the checks.
type Report struct {
	Lines []Line `json:"lines"`
}

func (r *Report) add(l Level, check, format string, args ...any) {
	r.Lines = append(r.Lines, Line{Level: l, Check: check, Text: fmt.Sprintf(format, args...)})
}

// Worst is the worst level in the report (OK for an empty one).
func (r *Report) Worst() Level {
	w := OK
	for _, l := range r.Lines {
		w = max(w, l.Level)
	}
	return w
}

// Count is how many lines have level l.
func (r *Report) Count(l Level) int {
	n := 0
	for _, x := range r.Lines {
		if x.Level == l {
			n++
		}
	}
	return n
}

// Find returns the lines of one check.
func (r *Report) Find(check string) []Line {
	var out []Line
	for _, l := range r.Lines {
		if l.Check == check {
			out = append(out, l)
		}
	}
	return out
}

// Write prints one line per check and a summary line.
func (r *Report) Write(w io.Writer) {
	width := 0
	for _, l := range r.Lines {
		width = max(width, len(l.Check))
	}
	for _, l := range r.Lines {
		fmt.Fprintf(w, "%-5s  %-*s  %s\n", l.Level, width, l.Check, oneLine(l.Text))
	}
	fmt.Fprintf(w, "\n%d OK, %d WARN, %d ERROR\n", r.Count(OK), r.Count(Warn), r.Count(Error))
}

// WriteJSON prints the report as JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// oneLine keeps a check on its line whatever an error message holds.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
