package propose

import (
	"fmt"
	"strings"
	"time"

	"github.com/lockhttp/lockhttp/internal/policy"
)

// Origin says where a rule written to the policy file came from, for its comment.
type Origin struct {
	// Tool is what proposed it ("lockhttp propose", ":propose at the console's terminal").
	Tool string
	// By is who took it ("terminal:alice"); empty: not said.
	By string
	// At is when it was taken.
	At time.Time
}

// Form returns the general form of p, or its exact form when exact is set or p has no general
// form; nil when p has no such form.
func (p *Proposal) Form(exact bool) *Form {
	if !exact && p.General != nil {
		return p.General
	}
	if p.Exact.Rule.Name == "" {
		return nil
	}
	return &p.Exact
}

// Block is the text added to the policy file for form f of p: a comment naming where the rule
// came from, its counts and the date, then the rule.
func (p *Proposal) Block(f *Form, o Origin) (string, error) {
	rule, err := ruleBlock(f.Rule)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	taken := safe(o.Tool)
	if o.By != "" {
		taken += " by " + safe(o.By)
	}
	fmt.Fprintf(&b, "# Learned: proposal %s, taken with %s on %s.\n", p.ID, taken, o.At.UTC().Format("2006-01-02"))
	fmt.Fprintf(&b, "# %s asked %d times by container %s from %s to %s (UTC): approved in %d human\n",
		p.Method, p.Asked, safe(p.Container), p.First.UTC().Format("2006-01-02 15:04"), p.Last.UTC().Format("2006-01-02 15:04"), p.Approvals)
	fmt.Fprintf(&b, "# decisions, denied in none; it would have freed %d requests asked then.\n", f.Freed)
	if f.Segment > 0 {
		fmt.Fprintf(&b, "# Segment %d is generalised (%d values observed, each %s).\n", f.Segment, f.Values, f.Class.words())
	}
	b.WriteString(rule)
	return b.String(), nil
}

// safe keeps printable ASCII of s for a comment line; anything else becomes '?'.
func safe(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c < ' ' || c > '~' {
			b[i] = '?'
		}
	}
	if len(b) > 120 {
		b = append(b[:117], "..."...)
	}
	return string(b)
}

// ruleBlock writes r as a [[rule]] table. Every value is printable ASCII without quotes or
// backslashes (host names, methods, cleaned paths, container names, the reason propose writes):
// anything else is refused, never escaped into something that reads back otherwise.
func ruleBlock(r policy.FileRule) (string, error) {
	var b strings.Builder
	b.WriteString("[[rule]]\n")
	str := func(k, v string) error {
		q, err := tomlString(v)
		if err != nil {
			return fmt.Errorf("rule %s: %w", k, err)
		}
		fmt.Fprintf(&b, "%s = %s\n", k, q)
		return nil
	}
	list := func(k string, vs []string) error {
		qs := make([]string, len(vs))
		for i, v := range vs {
			q, err := tomlString(v)
			if err != nil {
				return fmt.Errorf("rule %s: %w", k, err)
			}
			qs[i] = q
		}
		fmt.Fprintf(&b, "%s = [%s]\n", k, strings.Join(qs, ", "))
		return nil
	}
	for _, err := range []error{
		str("name", r.Name), list("hosts", r.Hosts), list("methods", r.Methods), list("paths", r.Paths),
		list("containers", r.Containers), str("verdict", r.Verdict), str("reason", r.Reason),
	} {
		if err != nil {
			return "", err
		}
	}
	return b.String(), nil
}

func tomlString(s string) (string, error) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c > '~' || c == '"' || c == '\\' {
			return "", fmt.Errorf("%q holds a character a proposal does not write", s)
		}
	}
	return `"` + s + `"`, nil
}

// Apply is text with block added at its end, after a blank line.
func Apply(text []byte, block string) []byte {
	out := make([]byte, 0, len(text)+len(block)+2)
	out = append(out, text...)
	if len(out) > 0 && out[len(out)-1] != '\n' {
		out = append(out, '\n')
	}
	out = append(out, '\n')
	return append(out, block...)
}

// Diff is the change Apply makes, as a unified diff of the policy file named name: the last
// lines of text as context, then block added.
func Diff(name string, text []byte, block string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "--- %s (approved)\n+++ %s (with the rule)\n", name, name)
	lines := strings.Split(strings.TrimRight(string(text), "\n"), "\n")
	from := max(0, len(lines)-3)
	fmt.Fprintf(&b, "@@ -%d,%d +%d,%d @@\n", from+1, len(lines)-from, from+1, len(lines)-from+1+strings.Count(block, "\n"))
	for _, l := range lines[from:] {
		b.WriteString("  " + l + "\n")
	}
	b.WriteString("+ \n")
	for _, l := range strings.Split(strings.TrimRight(block, "\n"), "\n") {
		b.WriteString("+ " + l + "\n")
	}
	return b.String()
}

// Headline is one line for a list of proposals.
func (p *Proposal) Headline() string {
	return fmt.Sprintf("%s  free %s %s %s for %s: asked %d, approved in %d decisions, %s",
		p.ID, p.Method, p.Host, p.pattern(), p.Container, p.Asked, p.Approvals, p.Form(false).Frees())
}

// pattern is the path pattern of p's general form, or its exact paths.
func (p *Proposal) pattern() string {
	paths := p.Form(false).Rule.Paths
	if len(paths) > 3 {
		return fmt.Sprintf("%s and %d more paths", strings.Join(paths[:3], " "), len(paths)-3)
	}
	return strings.Join(paths, " ")
}

// Frees is "would have freed N observed requests; also frees P never observed", P a count of
// paths, or unbounded for a star (NeverObserved says what in words).
func (f *Form) Frees() string {
	if f.Unbounded {
		return fmt.Sprintf("would have freed %d observed requests; also frees unbounded never observed (segment %d takes any value)", f.Freed, f.Segment)
	}
	return fmt.Sprintf("would have freed %d observed requests; also frees 0 paths never observed (these paths only, with any query)", f.Freed)
}

// Review is the text of one proposal for a human deciding on it: the counts, the examples, both
// forms with what each would have freed and also frees, and the diff of the general form (the
// exact form's when exact). take is how to take it ("" leaves that line out).
func (p *Proposal) Review(name string, text []byte, exact bool, take string) string {
	var b strings.Builder
	f := p.Form(exact)
	fmt.Fprintf(&b, "Proposal %s: free %s %s %s for container %s\n", p.ID, p.Method, p.Host, p.pattern(), p.Container)
	fmt.Fprintf(&b, "  asked %d times, first %s, last %s\n", p.Asked, p.First.UTC().Format(time.RFC3339), p.Last.UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "  humans approved it in %d decisions (%s), denied it in none; %d asks no human answered\n",
		p.Approvals, strings.Join(p.Approvers, ", "), p.Unanswered)
	b.WriteString("  examples (the agent's text, escaped):\n")
	for _, e := range p.Examples {
		fmt.Fprintf(&b, "    %s %s  (%s, %s)\n", e.Method, e.URL, e.At.UTC().Format(time.RFC3339), e.Outcome)
	}
	if p.General != nil {
		writeForm(&b, "general", p.General)
	}
	if p.Exact.Rule.Name != "" {
		writeForm(&b, "exact", &p.Exact)
	}
	if f != nil {
		block, err := p.Block(f, Origin{Tool: "lockhttp propose", At: p.Last})
		if err == nil {
			form := "general"
			if f != p.General {
				form = "exact"
			}
			fmt.Fprintf(&b, "  the policy diff (%s form; the comment's first line says who took it and when):\n", form)
			for _, l := range strings.Split(strings.TrimRight(Diff(name, text, block), "\n"), "\n") {
				b.WriteString("    " + l + "\n")
			}
		}
	}
	if take != "" {
		b.WriteString(take)
	}
	return b.String()
}

func writeForm(b *strings.Builder, kind string, f *Form) {
	fmt.Fprintf(b, "  %s form: paths = [%s]\n", kind, strings.Join(f.Rule.Paths, ", "))
	fmt.Fprintf(b, "    %s\n", f.Frees())
	if f.Other > 0 {
		fmt.Fprintf(b, "    (%d of the %d paths it would have freed were asked outside the group: its star matches them)\n", f.Other, f.Paths)
	}
	fmt.Fprintf(b, "    saves %d human decisions\n", f.Saved)
	for _, n := range f.NeverObserved {
		fmt.Fprintf(b, "    never observed: %s\n", n)
	}
	fmt.Fprintf(b, "    the review will say: %s\n", f.Loosening)
}

// Text is the result for a human: what was read, then each proposal's review.
func (r *Result) Text(name string, text []byte) string {
	var b strings.Builder
	period := "the whole audit"
	if !r.Since.IsZero() {
		period = "since " + r.Since.UTC().Format(time.RFC3339)
	}
	fmt.Fprintf(&b, "Read %d audit records (%s): %d asks, and %d tickets only the decisions told of; %d asks learnt from; proposals: %d.\n",
		r.Read, period, r.Asked, r.FromDecisions, r.Learnt, len(r.Proposals))
	if r.Truncated > 0 {
		fmt.Fprintf(&b, "%d records or decisions were past the bounds and not read: give a shorter period (--since).\n", r.Truncated)
	}
	for _, c := range r.Skipped {
		fmt.Fprintf(&b, "  %d asks not learnt from: %s\n", c.Count, c.Why)
	}
	for i := range r.Proposals {
		b.WriteString("\n")
		b.WriteString(r.Proposals[i].Review(name, text, false, ""))
	}
	if len(r.Declined) > 0 {
		b.WriteString("\nApproved more than once, not proposed:\n")
		for _, d := range r.Declined {
			fmt.Fprintf(&b, "  %s %s %s for %s (%d approvals): %s\n", d.Method, d.Host, d.Pattern, d.Container, d.Approvals, d.Why)
		}
	}
	return b.String()
}

// Find returns the proposal with id, or nil.
func (r *Result) Find(id string) *Proposal {
	for i := range r.Proposals {
		if r.Proposals[i].ID == id {
			return &r.Proposals[i]
		}
	}
	return nil
}

// Check holds a rule to what a proposal may be (see Learner's check): a free rule for one exact
// host the floor lets through, one method other than CONNECT, paths of at most one star each
// standing for a whole segment, one container of the approved policy (text, named name); added
// to that text it reads back as written, changes nothing else, and the console's comparison
// finds that one loosening, of that host's requests alone. It returns the comparison's line. A
// rule asked for by other means than the audit (an agent's, with its reason) is held to it too.
func Check(name string, text []byte, r policy.FileRule) (string, error) {
	l, err := New(Config{Name: name, Text: text})
	if err != nil {
		return "", err
	}
	_, line, err := l.check(r)
	return line, err
}

// RuleBlock is r as the [[rule]] table Apply adds, or why it cannot be written.
func RuleBlock(r policy.FileRule) (string, error) { return ruleBlock(r) }
