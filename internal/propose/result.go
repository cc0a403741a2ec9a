package propose

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/lockhttp/lockhttp/internal/display"
	"github.com/lockhttp/lockhttp/internal/floor"
	"github.com/lockhttp/lockhttp/internal/policy"
)

// Result is what a Learner proposes from what it read.
type Result struct {
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	// Policy is the version of the approved policy the proposals add to.
	Policy string `json:"policy"`
	// Read is how many audit records were read, Asked how many of them were ASK records;
	// FromDecisions is how many tickets the decisions read told of whose requests the audit held
	// no record of (summarised, or never sent again), learnt from as asks; Learnt is how many
	// asks were learnt from in all.
	Read          int `json:"read"`
	Asked         int `json:"asked"`
	FromDecisions int `json:"from_decisions"`
	Learnt        int `json:"learnt"`
	// Skipped counts the asks not learnt from, by why.
	Skipped []Count `json:"skipped,omitempty"`
	// Truncated counts the records and decisions past the Learner's bounds: proposals are made
	// from the rest.
	Truncated int `json:"truncated,omitempty"`
	// Proposals are the rules proposed, the most human decisions saved first.
	Proposals []Proposal `json:"proposals"`
	// Declined are the groups humans approved more than once that are not proposed, and why.
	Declined []Declined `json:"declined,omitempty"`
}

// Count is a number of asks and why they were left.
type Count struct {
	Why   string `json:"why"`
	Count int    `json:"count"`
}

// Declined is a group humans approved more than once that no proposal covers.
type Declined struct {
	Container string `json:"container"`
	Host      string `json:"host"`
	Method    string `json:"method"`
	Pattern   string `json:"pattern"`
	Approvals int    `json:"approvals"`
	Why       string `json:"why"`
}

// Proposal is one rule proposed: free, for one container, one exact host, one method and one
// path pattern, in two forms when the paths asked had one id-like segment.
type Proposal struct {
	// ID names the proposal, the same from one run to the next for the same group: the first
	// 8 hex digits of the SHA-256 of its container, host, method and pattern.
	ID        string `json:"id"`
	Container string `json:"container"`
	Host      string `json:"host"`
	Method    string `json:"method"`
	// Asked is how many requests of the group asked; First and Last when.
	Asked int       `json:"asked"`
	First time.Time `json:"first"`
	Last  time.Time `json:"last"`
	// Approvals is how many tickets of the group humans approved (each a decision); Approvers
	// who (escaped). None was denied: a group any human denied is never proposed.
	Approvals int      `json:"approvals"`
	Approvers []string `json:"approvers"`
	// Unanswered is how many asks of the group no human decided: tickets that expired or wait,
	// and asks that opened none (no console, the ask limit).
	Unanswered int `json:"unanswered"`
	// Examples are two or three requests of the group, their URLs escaped (they are the agent's
	// text).
	Examples []Example `json:"examples"`
	// General is the rule with the id-like segment generalised; nil when the paths had none.
	General *Form `json:"general,omitempty"`
	// Exact is the rule naming the paths observed.
	Exact Form `json:"exact"`
}

// Example is one request of a proposal's group.
type Example struct {
	Method  string    `json:"method"`
	URL     string    `json:"url"` // escaped: the agent's text
	At      time.Time `json:"at"`
	Outcome string    `json:"outcome"` // "approved by cli:root", "unanswered", "no ticket"
}

// Form is one way of writing a proposal: its rule and what it would have done.
type Form struct {
	Rule policy.FileRule `json:"rule"`
	// Freed is how many asks of the period (of this container) the rule frees under the
	// approved policy, on how many distinct paths; Other of those paths are outside the group
	// (a pattern's star matches them). Saved is how many human decisions were made on them.
	Freed int `json:"freed"`
	Paths int `json:"paths"`
	Other int `json:"other_paths"`
	Saved int `json:"saved"`
	// NeverObserved says, in words, what else the rule lets through that the period never
	// showed; Unbounded reports that it is more than any count (a star).
	NeverObserved []string `json:"never_observed"`
	Unbounded     bool     `json:"unbounded"`
	// Segment is, for the general form, the index (1 for the first) of the generalised
	// segment, Class its class in the paths observed, and Values how many values it had.
	Segment int   `json:"segment,omitempty"`
	Class   Class `json:"class,omitempty"`
	Values  int   `json:"values,omitempty"`
	// Loosening is the console's comparison's line for the rule: how the review names it.
	Loosening string `json:"loosening"`
}

// maxExactPaths bounds the paths of an exact form; past it the form lists the most asked.
const maxExactPaths = 32

// group is the asks of one container × host × method × pattern.
type group struct {
	container, host, method, pattern string
	segment                          int   // the generalised segment, 0 for an exact pattern
	class                            Class // its class
	shapes                           []*shape
}

func (g *group) id() string {
	sum := sha256.Sum256([]byte(g.container + "\x00" + g.host + "\x00" + g.method + "\x00" + g.pattern))
	return hex.EncodeToString(sum[:4])
}

// triple names the requests one proposed rule can decide: its container, host and method.
type triple struct{ container, host, method string }

// Result proposes the rules (see the package comment and docs/proposals.md).
func (l *Learner) Result() Result {
	if !l.done {
		l.done = true
		l.finish()
	}
	res := Result{Since: l.cfg.Since, Until: l.cfg.Until, Policy: l.pol.Version, Read: l.read, Asked: l.asks, FromDecisions: l.fromHub, Truncated: l.truncated}
	outcomes := l.outcomes()
	denied := map[key]bool{}
	for k := range l.summarised {
		denied[k] = true
	}
	for t, o := range outcomes {
		if k, ok := l.reqOf[t]; ok && !o.approved {
			denied[k] = true
		}
	}
	byTriple := map[triple][]*shape{}
	deniedBy := map[triple][]key{}
	for k := range denied {
		t := triple{k.container, k.host, k.method}
		deniedBy[t] = append(deniedBy[t], k)
	}
	groups := map[string]*group{}
	var order []string
	keys := make([]key, 0, len(l.shapes))
	for k := range l.shapes {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keyLess(keys[i], keys[j]) })
	for _, k := range keys {
		s := l.shapes[k]
		res.Learnt += s.asks
		t := triple{k.container, k.host, k.method}
		byTriple[t] = append(byTriple[t], s)
		pattern, seg, class := generalise(k.path)
		gk := k.container + "\x00" + k.host + "\x00" + k.method + "\x00" + pattern
		g := groups[gk]
		if g == nil {
			g = &group{container: k.container, host: k.host, method: k.method, pattern: pattern, segment: seg, class: class}
			groups[gk] = g
			order = append(order, gk)
		}
		if g.class != class {
			g.class = "" // ids of two classes at the segment: said as "an id"
		}
		g.shapes = append(g.shapes, s)
	}
	queue := make([]*group, 0, len(order))
	for _, gk := range order {
		queue = append(queue, groups[gk])
	}
	names := map[string]bool{}
	for _, r := range l.doc.File.Rules {
		names[r.Name] = true
	}
	for len(queue) > 0 {
		g := queue[0]
		queue = queue[1:]
		approvals, approvers := g.approvals(outcomes)
		deniedAt := ""
		for _, s := range g.shapes {
			if denied[s.key] {
				deniedAt = s.key.path
				break
			}
		}
		if deniedAt != "" {
			if g.segment > 0 {
				// The pattern is denied somewhere: what else was asked is learnt path by path.
				if approvals >= 2 {
					res.Declined = append(res.Declined, g.declined(approvals, fmt.Sprintf("a human denied a request of it (%s); each path is learnt on its own", clip(deniedAt))))
				}
				queue = append(queue, g.split()...)
			} else if approvals >= 2 {
				res.Declined = append(res.Declined, g.declined(approvals, "a human denied a request of it"))
			}
			continue
		}
		if approvals < 2 {
			continue // approved once or never: nothing learnt yet
		}
		t := triple{g.container, g.host, g.method}
		p := Proposal{ID: g.id(), Container: g.container, Host: g.host, Method: g.method, Approvals: approvals, Approvers: approvers}
		g.describe(&p, outcomes)
		name := ruleName(g, p.ID, names)
		if g.segment > 0 {
			gf, why := l.form(g, name, []string{g.pattern}, byTriple[t], deniedBy[t], outcomes)
			switch {
			case why == whyFreesDenied:
				res.Declined = append(res.Declined, g.declined(approvals, "the pattern would free a request a human denied; each path is learnt on its own"))
				queue = append(queue, g.split()...)
				continue
			case why != "":
				res.Declined = append(res.Declined, g.declined(approvals, "the general form: "+why))
			default:
				gf.Segment, gf.Class, gf.Values = g.segment, g.class, len(g.shapes)
				gf.NeverObserved = append([]string{fmt.Sprintf("every other value of segment %d of %s (a * matches any one segment, not only %s): unbounded, %d observed",
					g.segment, g.pattern, g.class.words(), len(g.shapes))}, gf.NeverObserved...)
				gf.Unbounded = true
				p.General = gf
			}
		}
		ef, why := l.form(g, name, g.exactPaths(), byTriple[t], deniedBy[t], outcomes)
		if why != "" {
			if p.General == nil {
				res.Declined = append(res.Declined, g.declined(approvals, why))
				continue
			}
			// The general form stands alone; its exact form is what it generalises.
			ef = &Form{}
		}
		p.Exact = *ef
		names[name] = true
		res.Proposals = append(res.Proposals, p)
	}
	sort.SliceStable(res.Proposals, func(i, j int) bool {
		a, b := &res.Proposals[i], &res.Proposals[j]
		if a.Approvals != b.Approvals {
			return a.Approvals > b.Approvals
		}
		if a.Asked != b.Asked {
			return a.Asked > b.Asked
		}
		return a.ID < b.ID
	})
	for why, n := range l.skipped {
		res.Skipped = append(res.Skipped, Count{Why: why, Count: n})
	}
	sort.Slice(res.Skipped, func(i, j int) bool {
		if res.Skipped[i].Count != res.Skipped[j].Count {
			return res.Skipped[i].Count > res.Skipped[j].Count
		}
		return res.Skipped[i].Why < res.Skipped[j].Why
	})
	return res
}

// finish takes, as asks, the tickets whose decisions were read and whose requests the audit
// held no record of: the request that opened each.
func (l *Learner) finish() {
	ids := make([]string, 0, len(l.decisions))
	for t := range l.decisions {
		ids = append(ids, t)
	}
	sort.Strings(ids)
	for _, t := range ids {
		d := l.decisions[t]
		if _, seen := l.reqOf[t]; seen || d.URL == "" || d.Kind == "connect" {
			continue
		}
		at := d.Created
		if at.IsZero() {
			at = d.At
		}
		l.observe(Observation{Time: at, Event: "request", Container: d.Container, Method: d.Method, URL: d.URL, Verdict: "ASK", Ticket: t}, true)
	}
}

// outcomes is every ticket's decision: the hub's or the console's when read, else what the
// records of its requests show.
func (l *Learner) outcomes() map[string]outcome {
	out := make(map[string]outcome, len(l.recorded)+len(l.decisions))
	for t, o := range l.recorded {
		out[t] = o
	}
	for t, d := range l.decisions {
		out[t] = outcome{approved: d.Approved, by: d.By}
	}
	return out
}

func keyLess(a, b key) bool {
	if a.container != b.container {
		return a.container < b.container
	}
	if a.host != b.host {
		return a.host < b.host
	}
	if a.method != b.method {
		return a.method < b.method
	}
	return a.path < b.path
}

// approvals counts the tickets of g humans approved and names who, escaped.
func (g *group) approvals(outcomes map[string]outcome) (int, []string) {
	n := 0
	by := map[string]bool{}
	seen := map[string]bool{}
	for _, s := range g.shapes {
		for _, t := range s.tickets {
			if o, ok := outcomes[t]; ok && o.approved && !seen[t] {
				seen[t] = true
				n++
				by[display.Escape(o.by, false)] = true
			}
		}
	}
	names := make([]string, 0, len(by))
	for b := range by {
		names = append(names, b)
	}
	sort.Strings(names)
	if len(names) > 5 {
		names = append(names[:5], fmt.Sprintf("and %d more", len(names)-5))
	}
	return n, names
}

// split makes one exact group of each path of g.
func (g *group) split() []*group {
	out := make([]*group, 0, len(g.shapes))
	for _, s := range g.shapes {
		out = append(out, &group{container: g.container, host: g.host, method: g.method, pattern: s.key.path, shapes: []*shape{s}})
	}
	return out
}

func (g *group) declined(approvals int, why string) Declined {
	return Declined{Container: g.container, Host: g.host, Method: g.method, Pattern: clip(g.pattern), Approvals: approvals, Why: why}
}

// exactPaths are the paths of g, the most asked first, at most maxExactPaths.
func (g *group) exactPaths() []string {
	ss := slices.Clone(g.shapes)
	sort.SliceStable(ss, func(i, j int) bool { return ss[i].asks > ss[j].asks })
	var out []string
	for _, s := range ss {
		if len(out) == maxExactPaths {
			break
		}
		out = append(out, s.key.path)
	}
	sort.Strings(out)
	return out
}

// describe fills the counts, times and examples of p from g.
func (g *group) describe(p *Proposal, outcomes map[string]outcome) {
	tickets := map[string]bool{}
	for _, s := range g.shapes {
		p.Asked += s.asks
		if p.First.IsZero() || s.first.Before(p.First) {
			p.First = s.first
		}
		if s.last.After(p.Last) {
			p.Last = s.last
		}
		p.Unanswered += s.noTicket
		for _, t := range s.tickets {
			if _, ok := outcomes[t]; !ok && !tickets[t] {
				p.Unanswered++
			}
			tickets[t] = true
		}
	}
	// Examples: the first request of each path, the most asked paths first, then more requests
	// of them, up to three.
	ss := slices.Clone(g.shapes)
	sort.SliceStable(ss, func(i, j int) bool { return ss[i].asks > ss[j].asks })
	for round := 0; round < 3 && len(p.Examples) < 3; round++ {
		for _, s := range ss {
			if round < len(s.examples) && len(p.Examples) < 3 {
				e := s.examples[round]
				out := "no ticket"
				if e.ticket != "" {
					out = "unanswered"
					if o, ok := outcomes[e.ticket]; ok && o.approved {
						out = "approved by " + display.Escape(o.by, false)
					}
				}
				p.Examples = append(p.Examples, Example{Method: g.method, URL: clip(display.Escape(e.url, false)), At: e.at, Outcome: out})
			}
		}
	}
}

// clip bounds a piece of the agent's text shown in a proposal.
func clip(s string) string {
	const limit = 200
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}

// ruleName names a proposal's rule: "learned-<method>-<host>-<id>", unique in the policy.
func ruleName(g *group, id string, names map[string]bool) string {
	name := "learned-" + strings.ToLower(g.method) + "-" + g.host + "-" + id[:6]
	if names[name] {
		name = "learned-" + strings.ToLower(g.method) + "-" + g.host + "-" + id
	}
	for i := 2; names[name]; i++ {
		name = fmt.Sprintf("learned-%s-%s-%s-%d", strings.ToLower(g.method), g.host, id, i)
	}
	return name
}

// whyFreesDenied is form's answer for a rule that would free a request a human denied.
const whyFreesDenied = "it would free a request a human denied"

// form builds the rule of g with paths and says what it would have done: over the asks of its
// container, host and method (shapes), the requests it frees under the approved policy; and
// checks it (check). It returns why when the rule is not proposed.
func (l *Learner) form(g *group, name string, paths []string, shapes []*shape, denied []key, outcomes map[string]outcome) (*Form, string) {
	r := policy.FileRule{Name: name, Hosts: []string{g.host}, Methods: []string{g.method}, Paths: paths,
		Containers: []string{g.container}, Verdict: "free",
		Reason: fmt.Sprintf("learned from what humans approved (proposal %s)", g.id())}
	cand, loosening, err := l.check(r)
	if err != nil {
		return nil, err.Error()
	}
	for _, k := range denied {
		req := policy.Request{Host: k.host, Method: k.method, Path: k.path, Container: k.container}
		if cand.Evaluate(req).Verdict == policy.Free && l.pol.Evaluate(req).Verdict != policy.Free {
			return nil, whyFreesDenied
		}
	}
	f := &Form{Rule: r, Loosening: loosening}
	in := map[key]bool{}
	for _, s := range g.shapes {
		in[s.key] = true
	}
	queries := map[string]bool{}
	decided := map[string]bool{}
	mine := 0
	for _, s := range shapes {
		req := policy.Request{Host: s.key.host, Method: s.key.method, Path: s.key.path, Container: s.key.container}
		if cand.Evaluate(req).Verdict != policy.Free {
			continue
		}
		f.Freed += s.asks
		f.Paths++
		if in[s.key] {
			mine++
		} else {
			f.Other++
		}
		for _, q := range s.queries {
			queries[q] = true
		}
		for _, t := range s.tickets {
			if _, ok := outcomes[t]; ok && !decided[t] {
				decided[t] = true
				f.Saved++
			}
		}
	}
	if mine == 0 {
		return nil, "the rule would free none of the requests asked (the path reads another way to a free rule)"
	}
	q := fmt.Sprintf("any query string on these paths: a rule does not read the query (%d observed)", len(queries))
	if len(queries) >= maxQueries {
		q = fmt.Sprintf("any query string on these paths: a rule does not read the query (%d or more observed)", maxQueries)
	}
	f.NeverObserved = []string{q}
	return f, ""
}

// check proves a proposed rule is nothing but itself: a free rule for one exact host the floor
// lets through, one method that is not CONNECT, paths that are not the floor's, one container of
// the policy; added to the approved text it decodes back to exactly that rule, changes nothing
// else of the file, and the console's comparison (policy.Compare) finds that one loosening and
// requests of that host alone decided less restrictively. It returns the candidate policy and the
// comparison's line.
func (l *Learner) check(r policy.FileRule) (*policy.Policy, string, error) {
	if len(r.Hosts) != 1 || strings.Contains(r.Hosts[0], "*") {
		return nil, "", fmt.Errorf("not one exact host")
	}
	host := r.Hosts[0]
	if h, ref := floor.Host(host); ref != nil || h != host || floor.Name(host) != nil {
		return nil, "", fmt.Errorf("the floor refuses the host")
	}
	if len(r.Methods) != 1 || r.Methods[0] == "CONNECT" || !knownMethod(r.Methods[0]) {
		return nil, "", fmt.Errorf("not one method a proposal may name")
	}
	if len(r.Containers) != 1 || !l.pol.HasContainer(r.Containers[0]) || r.Verdict != "free" {
		return nil, "", fmt.Errorf("not a free rule for one container of the policy")
	}
	for _, p := range r.Paths {
		if !strings.HasPrefix(p, "/") || strings.Contains(p, "**") || strings.Count(p, "*") > 1 {
			return nil, "", fmt.Errorf("path %q is not a proposal's path", p)
		}
		if strings.Contains(p, "*") && !slices.Contains(strings.Split(p, "/"), "*") {
			return nil, "", fmt.Errorf("path %q: a star stands for a whole segment only", p)
		}
		if floor.Request(r.Methods[0], strings.ReplaceAll(p, "*", "x"), nil) != nil {
			return nil, "", fmt.Errorf("the floor refuses path %q", p)
		}
	}
	block, err := ruleBlock(r)
	if err != nil {
		return nil, "", err
	}
	text := Apply(l.cfg.Text, block)
	doc, err := policy.Decode(l.cfg.Name, text)
	if err != nil {
		return nil, "", fmt.Errorf("the policy file with the rule does not decode (%v); add the rule by hand", firstLine(err.Error()))
	}
	cand, err := doc.Compile()
	if err != nil {
		return nil, "", fmt.Errorf("the policy file with the rule does not load (%v)", firstLine(err.Error()))
	}
	got := doc.File
	if n := len(got.Rules); n != len(l.doc.File.Rules)+1 || !reflect.DeepEqual(got.Rules[n-1], r) {
		return nil, "", fmt.Errorf("the rule does not read back as written")
	}
	got.Rules = got.Rules[:len(got.Rules)-1]
	want := l.doc.File
	if len(want.Rules) == 0 {
		want.Rules = got.Rules // nil and empty alike
	}
	if !reflect.DeepEqual(got, want) {
		return nil, "", fmt.Errorf("adding the rule changes more of the file than the rule")
	}
	cmp := policy.Compare(l.pol, cand)
	line := fmt.Sprintf("rule %q: + free ", r.Name)
	if len(cmp.Loosenings) != 1 || !strings.HasPrefix(cmp.Loosenings[0], line) || len(cmp.Tightenings) != 0 {
		return nil, "", fmt.Errorf("the comparison finds more than the rule: %s", strings.Join(append(cmp.Loosenings, cmp.Tightenings...), "; "))
	}
	for _, e := range cmp.Examples {
		if e.Host != host || (e.Kind != policy.ExampleRequest && e.Kind != policy.ExampleTunnel) {
			return nil, "", fmt.Errorf("the comparison finds another host or kind loosened: %s", e)
		}
	}
	return cand, cmp.Loosenings[0], nil
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}
