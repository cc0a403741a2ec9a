package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/cmdmain"
	"github.com/lockhttp/lockhttp/internal/stack"
	"github.com/lockhttp/lockhttp/internal/traffic"
)

// runLog is lox log: the gate's latest decisions from its audit and, with -f, each new one as it
// is written, without replaying the day.
func runLog(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lox log", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: lox log [-f] [-n N] [--only all|refused|asks] [--state DIR | --audit DIR] [--json]\n\n"+
			"The gate's decisions from its audit: the last N of the latest day, then with -f each new one.\n\nflags:\n")
		fs.PrintDefaults()
	}
	state := fs.String("state", ".lockfamily", "the stack's state directory (its up.json names the audit directory)")
	dir := fs.String("audit", "", "the gate's audit directory, instead of --state's (the compose setup's /vol/audit)")
	follow := fs.Bool("f", false, "follow: print each decision as the gate writes it, until interrupted")
	n := fs.Int("n", 10, "how many of the decisions already written to print first")
	only := fs.String("only", "all", "which decisions: all, refused (an E_ code) or asks (the policy asked a human)")
	asJSON := fs.Bool("json", false, "print the audit records as they are (one JSON object a line)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return usageErr(err)
	}
	if len(pos) > 0 {
		fmt.Fprintf(stderr, "lox log: unexpected argument %q\n", pos[0])
		return 2
	}
	if *n < 0 {
		fmt.Fprintln(stderr, "lox log: -n must be 0 or more")
		return 2
	}
	filter, err := traffic.ParseFilter(*only)
	if err != nil {
		fmt.Fprintln(stderr, "lox log: --only:", err)
		return 2
	}
	if *dir == "" {
		*dir = auditDirOf(*state)
	}
	if fi, err := os.Stat(*dir); err != nil || !fi.IsDir() {
		if !*follow {
			fmt.Fprintf(stderr, "lox log: no audit directory %s; start the stack with lox run, or name it with --state or --audit\n", *dir)
			return 1
		}
		fmt.Fprintf(stderr, "lox log: %s does not exist yet; waiting for the gate to write it\n", *dir)
	}
	ctx, stop := cmdmain.Signals()
	defer stop()
	// -n counts what is shown: read more of the day's end than that (a filter skips records, and
	// a line may not be one), and print the last n of what passes.
	last := 0
	switch {
	case *n == 0:
	case filter == traffic.All:
		last = *n + 100
	default:
		last = max(*n, 10000)
	}
	bad := 0
	caughtUp := false
	var backlog []string // the records already written, until the last n of them are printed
	each := func(line []byte) {
		var e traffic.Entry
		if err := json.Unmarshal(line, &e); err != nil {
			bad++
			return
		}
		if !filter.Match(e) || e.Event == audit.EventIntent && !*asJSON {
			// An intent (a request going out) is shown by its outcome's line; --json shows
			// every line.
			return
		}
		out := e.Line()
		if *asJSON {
			out = string(line)
		}
		if !caughtUp {
			backlog = append(backlog, out)
			return
		}
		fmt.Fprintln(stdout, out)
	}
	o := audit.TailOptions{Last: last, Follow: *follow, CaughtUp: func() {
		for _, l := range backlog[max(0, len(backlog)-*n):] {
			fmt.Fprintln(stdout, l)
		}
		backlog, caughtUp = nil, true
	}}
	err = audit.Tail(ctx, *dir, o, each)
	if bad > 0 {
		fmt.Fprintf(stderr, "lox log: %d lines of %s are not audit records; lockhttp verify-log %s checks the files\n", bad, *dir, *dir)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(stderr, "lox log:", err)
		return 1
	}
	return 0
}

// auditDirOf is the gate's audit directory of the stack in state: up.json's, else STATE/audit.
func auditDirOf(state string) string {
	if data, err := os.ReadFile(filepath.Join(state, stack.UpFile)); err == nil {
		var up stack.Up
		if json.Unmarshal(data, &up) == nil && up.AuditDir != "" {
			return up.AuditDir
		}
	}
	return filepath.Join(state, "audit")
}
