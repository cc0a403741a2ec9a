package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/lockhttp/lockhttp/internal/console"
	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/hubapi"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/propose"
)

// asks holds the rules agents ask for: the hub's check of one against the approved policy
// (hub.Config.CheckRule), and the terminal's take of one into the policy file, after which it
// waits for :review like any loosening.
type asks struct {
	c   *console.Console
	pr  *proposer // the policy file, as :propose writes it
	now func() time.Time
}

// check is hub.Config.CheckRule: the rule an agent of container asks for, against the approved
// policy, as propose.CheckAsked holds it.
func (a *asks) check(container, rule string) (hubapi.RuleAsk, error) {
	s := a.c.Current()
	if s == nil {
		return hubapi.RuleAsk{}, errors.New("the console has no approved policy yet")
	}
	got, err := propose.CheckAsked(s.Name, []byte(s.TOML), container, rule)
	if err != nil {
		return hubapi.RuleAsk{}, err
	}
	return hubapi.RuleAsk{Rule: got.Block, Diff: got.Diff, Loosens: got.Loosens, Version: s.Version}, nil
}

// command is :rule take ID FINGERPRINT, which the terminal runs when its human approves a rule
// ticket (by: "terminal:alice"): the rule is checked again against the approved policy, must be
// the very rule the ticket shows, and is written to the policy file when the file is the
// approved policy; the ticket is then approved as taken, and the review of that diff is shown.
func (a *asks) command(h *hub.Hub, by string, args []string) (string, error) {
	if len(args) != 3 || args[0] != "take" {
		return "", errors.New("usage: :rule take ID FINGERPRINT (approving a rule ticket runs it)")
	}
	var written []byte
	t, err := h.TakeRule(args[1], args[2], by, func(t hub.Ticket) error {
		s := a.c.Current()
		if s == nil {
			return errors.New("the console has no approved policy yet")
		}
		got, err := propose.CheckAsked(s.Name, []byte(s.TOML), t.Container, t.RuleAsk.Rule)
		if err != nil {
			return fmt.Errorf("the rule no longer passes the checks against the approved policy: %w; deny the ticket", err)
		}
		if got.Block != t.RuleAsk.Rule {
			return errors.New("the rule reads otherwise against the approved policy now; deny the ticket")
		}
		path, onDisk, err := a.pr.file()
		if err != nil {
			return err
		}
		if policy.Hash(onDisk) != s.Version {
			return errors.New("the policy file differs from the approved policy (:review shows how): a rule asked for is added to the approved policy alone; approve, reject or undo that change first")
		}
		block := propose.AskedOrigin(t.Container, t.ID, propose.Origin{Tool: "the console's terminal", By: by, At: a.now()}) + got.Block
		next := propose.Apply([]byte(s.TOML), block)
		if err := writeLike(path, next); err != nil {
			return fmt.Errorf("%w; the console cannot write the policy file here: deny the ticket and add the rule yourself", err)
		}
		written = next
		return nil
	})
	if err != nil {
		return "", err
	}
	h.FlushNow()
	if err := a.c.Reload(); err != nil {
		return "", fmt.Errorf("the rule of %s is in the policy file, but the console could not read it back: %w", t.ID, err)
	}
	r := a.c.Pending()
	if r == nil || r.Version != policy.Hash(written) {
		return "", fmt.Errorf("the rule of %s is in the policy file; :review shows it", t.ID)
	}
	return fmt.Sprintf("Rule of %s written to the policy file. It loosens the policy: the gate keeps the approved policy until you approve the review.\n"+
		"  :review approve %s   apply it\n  :review reject %s REASON\n\n%s", t.ID, r.ShortVersion(), r.ShortVersion(), r.Text()), nil
}
