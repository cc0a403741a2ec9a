package console

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/lockhttp/lockhttp/internal/atomicfile"
	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/policy"
)

// Approved is the policy the console serves, with who approved it and when.
type Approved struct {
	Version string    `json:"version"`
	Name    string    `json:"name"`
	TOML    string    `json:"toml"`
	By      string    `json:"by"`
	At      time.Time `json:"at"`
}

// Rejected is a loosening a human rejected.
type Rejected struct {
	Version string    `json:"version"`
	By      string    `json:"by"`
	Reason  string    `json:"reason"`
	At      time.Time `json:"at"`
}

// stateFile is the console's state, written atomically.
type stateFile struct {
	Version  int        `json:"version"`
	Approved *Approved  `json:"approved"`
	Rejected []Rejected `json:"rejected,omitempty"`
	// Bound is the Claude credentials humans bound to containers by approving, oldest first.
	Bound []Binding `json:"bound,omitempty"`
}

// maxRejected bounds the remembered rejections.
const maxRejected = 50

// Review is a policy file that loosens the approved policy, waiting for a human at the console's
// terminal.
type Review struct {
	Version  string
	Name     string
	Since    time.Time
	Changes  policy.Comparison
	Diff     string
	Rejected *Rejected // set when a human rejected this very version before

	text   []byte
	policy *policy.Policy
}

// ShortVersion is how a review is named on screen and in :review approve.
func (r *Review) ShortVersion() string { return shortHex(r.Version) }

func shortHex(version string) string {
	h := strings.TrimPrefix(version, "sha256:")
	if len(h) > 12 {
		h = h[:12]
	}
	return h
}

// Text renders the review for a human: what loosens, with requests the file decides less
// restrictively as examples, what tightens, the diff, and how to decide.
func (r *Review) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Policy file %s (version %s) differs from the approved policy.\n", r.Name, r.ShortVersion())
	if r.Rejected != nil {
		fmt.Fprintf(&b, "This version was REJECTED by %s at %s: %s\n", r.Rejected.By, r.Rejected.At.Format(time.RFC3339), r.Rejected.Reason)
	}
	b.WriteString("\nChanges that loosen the policy (a human must approve them):\n")
	for _, l := range r.Changes.Loosenings {
		fmt.Fprintf(&b, "  + %s\n", l)
	}
	if ex := r.Changes.Examples; len(ex) > 0 {
		b.WriteString("\nFor example, decided less restrictively than under the approved policy:\n")
		for _, e := range ex {
			fmt.Fprintf(&b, "  ! %s\n", e)
		}
		if more := r.Changes.Loosened - len(ex); more > 0 {
			fmt.Fprintf(&b, "  ! and %d more\n", more)
		}
	}
	if len(r.Changes.Tightenings) > 0 {
		b.WriteString("\nChanges that tighten it (they wait with the rest: one review, one decision):\n")
		for _, l := range r.Changes.Tightenings {
			fmt.Fprintf(&b, "  - %s\n", l)
		}
	}
	b.WriteString("\nDiff (approved → file):\n")
	b.WriteString(r.Diff)
	fmt.Fprintf(&b, "\nApprove: :review approve %s\nReject:  :review reject %s REASON\n", r.ShortVersion(), r.ShortVersion())
	return b.String()
}

// Pending returns the review waiting for a human, or nil.
func (c *Console) Pending() *Review {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.review
}

// Errors of Approve and Reject.
var (
	ErrNoReview = errors.New("no policy change waits for review")
	ErrStale    = errors.New("the policy file changed since this review was shown; run :review again")
)

// Approve approves the waiting review, naming its version as shown (its short form or in full);
// by names the person at the console's terminal. This is the only way a loosening is approved.
func (c *Console) Approve(shown, by string) error {
	r, err := c.pendingAs(shown)
	if err != nil {
		return err
	}
	c.approve(r.policy, r.text, by)
	c.record(&audit.Record{Event: "policy-review", Rule: "approved", Policy: r.Version, Approver: by,
		Detail: fmt.Sprintf("loosening approved: %s", strings.Join(r.Changes.Loosenings, "; "))})
	c.say("policy %s approved by %s", short(r.Version), by)
	return nil
}

// Reject rejects the waiting review: the gate keeps the approved policy, and the console keeps
// saying that the file and the approved policy differ.
func (c *Console) Reject(shown, by, reason string) error {
	if strings.TrimSpace(reason) == "" {
		return errors.New("a rejection needs a reason")
	}
	r, err := c.pendingAs(shown)
	if err != nil {
		return err
	}
	rj := Rejected{Version: r.Version, By: by, Reason: reason, At: c.now()}
	c.mu.Lock()
	c.state.Rejected = append(c.state.Rejected, rj)
	if len(c.state.Rejected) > maxRejected {
		c.state.Rejected = c.state.Rejected[len(c.state.Rejected)-maxRejected:]
	}
	r.Rejected = &rj
	approved := c.state.Approved.Version
	c.mu.Unlock()
	if err := c.saveState(); err != nil {
		c.log.Error("console: writing the state file failed", "err", err)
	}
	c.record(&audit.Record{Event: "policy-review", Rule: "rejected", Policy: approved, Approver: by, Reason: reason,
		Detail: fmt.Sprintf("loosening %s rejected: %s", r.Version, strings.Join(r.Changes.Loosenings, "; "))})
	c.say("policy %s rejected by %s; the gate keeps %s", short(r.Version), by, short(approved))
	return nil
}

func (c *Console) pendingAs(shown string) (*Review, error) {
	c.mu.Lock()
	r := c.review
	c.mu.Unlock()
	if r == nil {
		return nil, ErrNoReview
	}
	s := strings.TrimPrefix(strings.TrimSpace(shown), "sha256:")
	if len(s) < 8 || !strings.HasPrefix(strings.TrimPrefix(r.Version, "sha256:"), s) {
		return nil, ErrStale
	}
	return r, nil
}

// StatusLines are the console's lines for its terminal: what the served policy is, and whether
// the file waits for review or was rejected.
func (c *Console) StatusLines() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	if a := c.state.Approved; a != nil {
		out = append(out, fmt.Sprintf("policy: %s (%s), approved by %s", a.Name, shortHex(a.Version), a.By))
	}
	switch {
	case c.review != nil && c.review.Rejected != nil:
		out = append(out, fmt.Sprintf("policy file %s DIFFERS from the approved policy: rejected by %s (:review to see it)", shortHex(c.review.Version), c.review.Rejected.By))
	case c.review != nil:
		out = append(out, fmt.Sprintf("policy file %s loosens the policy: %d change(s) WAIT FOR REVIEW (:review)", shortHex(c.review.Version), len(c.review.Changes.Loosenings)))
	case c.fileErr != "":
		out = append(out, "policy file rejected, the approved policy stays: "+firstLine(c.fileErr))
	}
	return out
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

func (c *Console) loadState() error {
	if c.cfg.StatePath == "" {
		return nil
	}
	f, err := os.Open(c.cfg.StatePath)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("console state: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, 16<<20))
	if err != nil {
		return fmt.Errorf("console state %s: %w", c.cfg.StatePath, err)
	}
	var st stateFile
	if err := json.Unmarshal(data, &st); err != nil {
		return fmt.Errorf("console state %s: %w; it holds the approved policy: restore it from a backup rather than remove it", c.cfg.StatePath, err)
	}
	if st.Approved != nil {
		p, err := policy.Load(st.Approved.Name, []byte(st.Approved.TOML))
		if err != nil {
			return fmt.Errorf("console state %s: the approved policy does not load with this version of lockhttp: %w", c.cfg.StatePath, err)
		}
		if p.Version != st.Approved.Version {
			return fmt.Errorf("console state %s: the approved policy's text does not match its version; the file was edited by hand", c.cfg.StatePath)
		}
		c.approved = p
	}
	if err := checkBindings(st.Bound); err != nil {
		return fmt.Errorf("console state %s: %w; the file was edited by hand", c.cfg.StatePath, err)
	}
	c.state = st
	if c.approved != nil {
		c.publish(Served{Version: c.approved.Version, Name: st.Approved.Name, TOML: st.Approved.TOML, LoadedAt: c.now(), Rules: c.approved.RuleCount()})
		// The metrics name the policy served from the start, applied when it was approved (the
		// state keeps when), not when this console started.
		at := st.Approved.At
		if at.IsZero() {
			at = c.now() // a state written before approvals were timed
		}
		c.cfg.Metrics.Served(c.approved.Version, at)
	}
	return nil
}

func (c *Console) saveState() error {
	if c.cfg.StatePath == "" {
		return nil
	}
	c.mu.Lock()
	st := c.state
	st.Version = 1
	if c.cfg.Bindings != nil {
		st.Bound = nil // the hub's database keeps them
	}
	data, err := json.MarshalIndent(st, "", " ")
	c.mu.Unlock()
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(c.cfg.StatePath, data, 0o600)
}
