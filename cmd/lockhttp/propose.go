package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/lockhttp/lockhttp/internal/asklog"
	"github.com/lockhttp/lockhttp/internal/atomicfile"
	"github.com/lockhttp/lockhttp/internal/console"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/propose"
)

const proposeUsage = `usage: lockhttp propose [--state DIR | --audit DIR --hub-state FILE [--console-audit DIR] --policy FILE]
                        [--since D] [--container NAME] [--json]
       lockhttp propose --dsn-file FILE --pub [GATE=]KEY... [--gate GATE]
                        [--state DIR | --hub-state FILE [--console-audit DIR] --policy FILE] [...]

Proposes free rules from what humans were asked: the ASK records of the gate's audit since D and
the humans' decisions on their tickets. Each proposal is one rule, for one container, one exact
host, one method and one path pattern that humans approved more than once and never denied,
printed as a diff of the policy file with its counts, examples and what else it would let
through. Nothing is written: take a proposal at the console's terminal (:propose), where it is
reviewed as any loosening (:review). docs/proposals.md says how proposals are learnt.

--state DIR reads lox run's state directory: the gate's audit (STATE/audit), the hub's state
(STATE/hub.json), the console's audit (STATE/console-audit) and the approved policy
(STATE/console-state.json). Without --state, name each: --audit, --hub-state, --console-audit
(optional: the decisions older than the hub keeps) and --policy (the approved policy's file), or
--state FILE (the console's -state file, which holds the approved policy).

--dsn-file FILE reads the gates' audit from their PostgreSQL copy instead of a directory: every
gate's chain, or --gate's, each verified first as lockhttp verify-log --dsn-file verifies it,
with the keys --pub gives (KEY for every gate, GATE=KEY for one). A copy that does not verify is
refused, naming the chain, the file and the line: nothing is proposed from it.

flags:
`

// maxProposePolicy bounds a policy file read (the console's bound).
const maxProposePolicy = 4 << 20

func runPropose(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lockhttp propose", flag.ContinueOnError)
	fs.SetOutput(stderr)
	state := fs.String("state", "", "lox run's state `DIR`: its audit, hub state, console audit and approved policy (or the console's -state file: the approved policy alone)")
	auditDir := fs.String("audit", "", "the gate's audit `DIR` (instead of --state's)")
	hubState := fs.String("hub-state", "", "the hub's state `FILE`, its -hub-state (instead of --state's)")
	consoleAudit := fs.String("console-audit", "", "the console's audit `DIR`, its -audit: the humans' decisions older than the hub keeps (optional)")
	policyFile := fs.String("policy", "", "the approved policy's `FILE` (instead of --state's approved policy)")
	since := fs.String("since", "30d", "the period: a duration back from now (`D`: 7d, 36h) or a date (2026-12-01, or RFC 3339)")
	container := fs.String("container", "", "propose for this container alone (default: every container)")
	asJSON := fs.Bool("json", false, "print the proposals as JSON")
	dsnFile := fs.String("dsn-file", "", "read the gates' audit from the PostgreSQL copy whose DSN `FILE` holds (the gate's -audit-dsn-file), verified first, instead of --audit")
	var pubs pubList
	fs.Var(&pubs, "pub", "with --dsn-file, a trusted public `KEY` file of the gates' audit keys (repeatable); GATE=KEY trusts it for that gate's chain alone")
	gate := fs.String("gate", "", "with --dsn-file, read the chains of this gate `IDENTITY` alone (spiffe://lockhttp/gate/NAME, each of its instances; NAME@INSTANCE one; \"\" the gate without one)")
	fs.Usage = func() {
		fmt.Fprint(stderr, proposeUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	usage := func(msg string) int {
		fmt.Fprintf(stderr, "lockhttp propose: %s\n", msg)
		return 2
	}
	if fs.NArg() > 0 {
		return usage(fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	}
	now := time.Now()
	from, err := parseSince(*since, now)
	if err != nil {
		return usage(err.Error())
	}
	gateGiven := false
	fs.Visit(func(f *flag.Flag) { gateGiven = gateGiven || f.Name == "gate" })
	var dsn string
	if *dsnFile != "" {
		if *auditDir != "" {
			return usage("--audit and --dsn-file: give one (the audit's directory, or its database copy)")
		}
		if len(pubs) == 0 {
			return usage("the database copy needs --pub: the database holds no key (--pub KEY for every gate, --pub GATE=KEY for one)")
		}
		if dsn, err = readDSNFile(*dsnFile); err != nil {
			return usage(err.Error())
		}
	} else if gateGiven || len(pubs) > 0 {
		return usage("--gate and --pub are for the database copy (--dsn-file): a directory is one gate's")
	}
	if fi, err := os.Stat(*state); *state != "" && err == nil && fi.IsDir() {
		if *auditDir == "" && dsn == "" {
			*auditDir = stateDir(*state, "audit_dir", "audit")
		}
		if *hubState == "" {
			*hubState = filepath.Join(*state, "hub.json")
		}
		if *consoleAudit == "" {
			*consoleAudit = stateDir(*state, "console_audit_dir", "console-audit")
		}
	}
	if (*auditDir == "" && dsn == "") || *hubState == "" {
		return usage("give --state DIR (lox run's state directory), or --audit DIR (or --dsn-file FILE) and --hub-state FILE")
	}
	var name string
	var text []byte
	switch {
	case *policyFile != "":
		name = *policyFile
		if text, err = atomicfile.ReadFile(*policyFile, maxProposePolicy); err != nil {
			fmt.Fprintln(stderr, "lockhttp propose: policy:", err)
			return 1
		}
	case *state != "":
		if name, text, err = approvedText(*state); err != nil {
			fmt.Fprintln(stderr, "lockhttp propose:", err)
			return 1
		}
	default:
		return usage("give --policy FILE (the approved policy), or --state DIR")
	}
	l, err := propose.New(propose.Config{Name: name, Text: text, Since: from, Container: *container})
	if err != nil {
		fmt.Fprintln(stderr, "lockhttp propose: the approved policy:", err)
		return 1
	}
	if *container != "" {
		if p, _ := policy.Load(name, text); p != nil && !p.HasContainer(*container) {
			return usage(fmt.Sprintf("--container %q is not a container of the policy's [sources]; name one of %s", *container, strings.Join(p.Containers(), ", ")))
		}
	}
	if dsn != "" {
		copies, err := verifiedCopies(dsn, pubs, *gate, gateGiven)
		if err != nil {
			fmt.Fprintln(stderr, "lockhttp propose:", err)
			return 1
		}
		for _, c := range copies {
			if _, err := asklog.AuditSources(c.Sources, from, l.Observe); err != nil {
				fmt.Fprintf(stderr, "lockhttp propose: the database copy of %s: %v\n", chainName(c), err)
				return 1
			}
		}
	} else if _, err := asklog.Audit(*auditDir, from, l.Observe); err != nil {
		fmt.Fprintln(stderr, "lockhttp propose:", err)
		return 1
	}
	ds, err := asklog.HubState(*hubState)
	if err != nil && !(errors.Is(err, os.ErrNotExist) && *state != "") {
		fmt.Fprintln(stderr, "lockhttp propose:", err)
		return 1
	}
	for _, d := range ds {
		l.Decided(d)
	}
	if *consoleAudit != "" {
		if _, err := asklog.ConsoleDecisions(*consoleAudit, time.Time{}, l.Decided); err != nil && !(errors.Is(err, os.ErrNotExist) && *state != "") {
			fmt.Fprintln(stderr, "lockhttp propose:", err)
			return 1
		}
	}
	res := l.Result()
	if *asJSON {
		type diffs struct {
			General string `json:"general,omitempty"`
			Exact   string `json:"exact,omitempty"`
		}
		out := struct {
			propose.Result
			Diffs map[string]diffs `json:"diffs"`
		}{Result: res, Diffs: map[string]diffs{}}
		for i := range res.Proposals {
			p := &res.Proposals[i]
			var d diffs
			origin := propose.Origin{Tool: "lockhttp propose", At: now}
			if p.General != nil {
				if b, err := p.Block(p.General, origin); err == nil {
					d.General = propose.Diff(name, text, b)
				}
			}
			if f := p.Form(true); f != nil && f != p.General {
				if b, err := p.Block(f, origin); err == nil {
					d.Exact = propose.Diff(name, text, b)
				}
			}
			out.Diffs[p.ID] = d
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			fmt.Fprintln(stderr, "lockhttp propose:", err)
			return 1
		}
		return 0
	}
	fmt.Fprint(stdout, res.Text(name, text))
	if len(res.Proposals) > 0 {
		fmt.Fprintln(stdout, "\nTake one at the console's terminal: :propose take ID (the exact form: :propose take ID exact), then :review.")
	}
	return 0
}

// parseSince reads --since: a duration back from now ("7d", "36h") or a date ("2026-12-01", or
// RFC 3339).
func parseSince(s string, now time.Time) (time.Time, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n >= 0 && n <= 3650 {
			return now.Add(-time.Duration(n) * 24 * time.Hour), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	if t, err := time.Parse("2006-01-02", s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("--since %q: write a duration back from now (7d, 36h) or a date (2026-12-01)", s)
}

// stateDir is a directory of lox run's state: the one its up.json names under field, else
// STATE/def.
func stateDir(state, field, def string) string {
	if data, err := atomicfile.ReadFile(filepath.Join(state, "up.json"), 1<<20); err == nil {
		var up map[string]any
		if json.Unmarshal(data, &up) == nil {
			if d, ok := up[field].(string); ok && d != "" {
				return d
			}
		}
	}
	return filepath.Join(state, def)
}

// approvedText is the approved policy's name and text in the console's state file of lox run's
// state directory (or the console's -state file itself).
func approvedText(state string) (string, []byte, error) {
	path := state
	if fi, err := os.Stat(state); err == nil && fi.IsDir() {
		path = filepath.Join(state, consoleStateFile)
	}
	data, err := atomicfile.ReadFile(path, maxConsoleState)
	if err != nil {
		return "", nil, fmt.Errorf("no approved policy: %w; give --state DIR (lox run's state directory) or --policy FILE", err)
	}
	var st struct {
		Version  int               `json:"version"`
		Approved *console.Approved `json:"approved"`
	}
	if err := json.Unmarshal(data, &st); err != nil || st.Version != 1 || st.Approved == nil {
		return "", nil, fmt.Errorf("console state %s holds no approved policy this lockhttp reads; give --policy FILE", path)
	}
	if policy.Hash([]byte(st.Approved.TOML)) != st.Approved.Version {
		return "", nil, fmt.Errorf("console state %s: the approved policy's text does not match its version; the file was edited by hand", path)
	}
	return st.Approved.Name, []byte(st.Approved.TOML), nil
}
