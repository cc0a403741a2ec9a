package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lockhttp/lockhttp/internal/asklog"
	"github.com/lockhttp/lockhttp/internal/atomicfile"
	"github.com/lockhttp/lockhttp/internal/console"
	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/propose"
)

// proposePeriod is the period :propose learns from.
const proposePeriod = 30 * 24 * time.Hour

// proposer is the :propose command: rules learnt from what humans approved, each taken into the
// policy file one at a time, to be approved with :review as any loosening.
type proposer struct {
	c   *console.Console
	hub *hub.Hub
	// policyPath is the policy file; gateAudit the gate's audit directory ("" when the console
	// was not told it and lox run's up.json beside the state does not name it); consoleAudit
	// the console's own (the hub's decisions are recorded there).
	policyPath, gateAudit, consoleAudit, statePath string
	now                                            func() time.Time
}

const proposeHelp = `:propose                   the proposals learnt from the last 30 days of asks
:propose show ID [exact]   one: its counts, examples, what it would have freed and also frees, the diff
:propose take ID [exact]   write its rule to the policy file; it then waits for :review like any loosening
:propose drop              take back the rule :propose take wrote while it waits for review`

// command runs :propose; by is the person at the terminal ("terminal:alice").
func (p *proposer) command(by string, args []string) (string, error) {
	if len(args) == 0 {
		return p.list()
	}
	exact := len(args) == 3 && args[2] == "exact"
	switch {
	case args[0] == "show" && (len(args) == 2 || exact):
		res, name, text, err := p.learn()
		if err != nil {
			return "", err
		}
		pr := res.Find(args[1])
		if pr == nil {
			return "", noProposal(args[1])
		}
		if exact && pr.Form(true) == nil {
			return "", fmt.Errorf("proposal %s has no exact form", pr.ID)
		}
		take := fmt.Sprintf("\nTake it: :propose take %s", pr.ID)
		if pr.General != nil && pr.Form(true) != nil {
			take += fmt.Sprintf("   (the exact form: :propose take %s exact)", pr.ID)
		}
		return pr.Review(name, text, exact, take+"\nIt then waits for your review (:review), as any loosening.\n"), nil
	case args[0] == "take" && (len(args) == 2 || exact):
		return p.take(by, args[1], exact)
	case args[0] == "drop" && len(args) == 1:
		return p.drop()
	}
	return "", errors.New("usage: :propose, :propose show ID [exact], :propose take ID [exact], :propose drop")
}

func noProposal(id string) error {
	return fmt.Errorf("no proposal %s now; :propose lists them (one taken and approved is free now, and no longer proposed)", id)
}

// learn reads the period's asks and decisions and proposes against the approved policy.
func (p *proposer) learn() (propose.Result, string, []byte, error) {
	s := p.c.Current()
	if s == nil {
		return propose.Result{}, "", nil, errors.New("no approved policy yet")
	}
	dir := p.auditDir()
	if dir == "" {
		return propose.Result{}, "", nil, errors.New("the console does not know the gate's audit directory: start it with -gate-audit DIR (lox run tells it by its state directory's up.json)")
	}
	from := p.now().Add(-proposePeriod)
	l, err := propose.New(propose.Config{Name: s.Name, Text: []byte(s.TOML), Since: from})
	if err != nil {
		return propose.Result{}, "", nil, fmt.Errorf("the approved policy: %w", err)
	}
	if _, err := asklog.Audit(dir, from, l.Observe); err != nil {
		return propose.Result{}, "", nil, fmt.Errorf("%w (the console reads the gate's audit: its files must be readable by the console's user)", err)
	}
	for _, d := range asklog.Tickets(p.hub.Recent(0)) {
		l.Decided(d)
	}
	if p.consoleAudit != "" {
		if _, err := asklog.ConsoleDecisions(p.consoleAudit, time.Time{}, l.Decided); err != nil {
			return propose.Result{}, "", nil, err
		}
	}
	return l.Result(), s.Name, []byte(s.TOML), nil
}

// auditDir is the gate's audit directory: -gate-audit, else the one lox run's up.json beside
// the console's state names.
func (p *proposer) auditDir() string {
	if p.gateAudit != "" || p.statePath == "" {
		return p.gateAudit
	}
	f, err := os.Open(filepath.Join(filepath.Dir(p.statePath), "up.json"))
	if err != nil {
		return ""
	}
	defer f.Close()
	var up struct {
		AuditDir string `json:"audit_dir"`
	}
	if json.NewDecoder(io.LimitReader(f, 1<<20)).Decode(&up) != nil {
		return ""
	}
	return up.AuditDir
}

func (p *proposer) list() (string, error) {
	res, _, _, err := p.learn()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Proposals learnt from the gate's audit since %s (%d asks learnt from): %d\n",
		res.Since.UTC().Format("2006-01-02"), res.Learnt, len(res.Proposals))
	for i := range res.Proposals {
		fmt.Fprintf(&b, "  %s\n", res.Proposals[i].Headline())
	}
	if len(res.Declined) > 0 {
		fmt.Fprintf(&b, "%d more approved more than once are not proposed (a human denied some of them, or the floor or the comparison refuses them): lockhttp propose says why\n", len(res.Declined))
	}
	b.WriteString("\n" + proposeHelp + "\n")
	return b.String(), nil
}

// take writes the rule of proposal id to the policy file, after the approved policy, when the
// file is the approved policy: one rule at a time, nothing else with it. The console then finds
// the loosening and it waits for :review.
func (p *proposer) take(by, id string, exact bool) (string, error) {
	res, name, text, err := p.learn()
	if err != nil {
		return "", err
	}
	pr := res.Find(id)
	if pr == nil {
		return "", noProposal(id)
	}
	f := pr.Form(exact)
	if f == nil {
		return "", fmt.Errorf("proposal %s has no exact form", pr.ID)
	}
	path, onDisk, err := p.file()
	if err != nil {
		return "", err
	}
	if policy.Hash(onDisk) != policy.Hash(text) {
		return "", errors.New("the policy file differs from the approved policy (:review shows how): a proposal is added to the approved policy alone, one rule at a time; approve, reject or undo that change first")
	}
	block, err := pr.Block(f, propose.Origin{Tool: ":propose at the console's terminal", By: by, At: p.now()})
	if err != nil {
		return "", err
	}
	next := propose.Apply(text, block)
	if err := writeLike(path, next); err != nil {
		return "", fmt.Errorf("%w; the console cannot write the policy file here (in the compose setup it is read-only): add this to it yourself:\n%s", err, block)
	}
	return fmt.Sprintf("Rule %q written to %s (proposal %s). It loosens the policy, so the gate keeps the approved policy until you review it:\n"+
		"  :review                      what it loosens, and the diff\n"+
		"  :review approve %s   apply it\n"+
		"  :propose drop                take it back\n", f.Rule.Name, name, pr.ID, shortHash(policy.Hash(next))), nil
}

// drop writes the approved policy back over the policy file when the file is the approved
// policy and one rule :propose take added, nothing else.
func (p *proposer) drop() (string, error) {
	s := p.c.Current()
	if s == nil {
		return "", errors.New("no approved policy yet")
	}
	path, onDisk, err := p.file()
	if err != nil {
		return "", err
	}
	rest, ok := strings.CutPrefix(string(onDisk), s.TOML)
	if !ok || !strings.HasPrefix(strings.TrimLeft(rest, "\n"), "# Learned: proposal ") || strings.Count(rest, "[[") != 1 {
		return "", errors.New("the policy file is not the approved policy and one rule :propose take wrote; edit it yourself")
	}
	if err := writeLike(path, []byte(s.TOML)); err != nil {
		return "", err
	}
	return "The policy file is the approved policy again: the proposed rule is gone.", nil
}

// file reads the policy file, bounded, and names the file to write: its target when it is a
// symbolic link.
func (p *proposer) file() (string, []byte, error) {
	path, err := filepath.EvalSymlinks(p.policyPath)
	if err != nil {
		return "", nil, fmt.Errorf("policy file: %w", err)
	}
	f, err := os.Open(path)
	if err != nil {
		return "", nil, fmt.Errorf("policy file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, 4<<20+1))
	if err != nil {
		return "", nil, fmt.Errorf("policy file %s: %w", path, err)
	}
	return path, data, nil
}

// writeLike writes data over path atomically, keeping its mode.
func writeLike(path string, data []byte) error {
	mode := os.FileMode(0o600)
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
	}
	return atomicfile.WriteFile(path, data, mode)
}

func shortHash(version string) string {
	h := strings.TrimPrefix(version, "sha256:")
	if len(h) > 12 {
		h = h[:12]
	}
	return h
}
