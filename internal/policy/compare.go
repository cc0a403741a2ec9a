package policy

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Comparison says how a new policy differs from the approved one. Loosenings lists, in words,
// every change that may let some request through more easily than before (or that the
// comparison cannot prove does not); Tightenings lists the rest of the changes. A change that is
// only a tightening (or no change at all) applies at once; a loosening waits for a human.
type Comparison struct {
	Loosenings  []string
	Tightenings []string
	// Examples are requests (and hosts) that the new policy decides less restrictively than the
	// old, found by deciding them under both (the differential check): at most a few, one per
	// host and kind, for the human's screen. Empty when the check found none.
	Examples []Example
	// Loosened is how many requests and host properties the differential check found decided
	// less restrictively, Examples included.
	Loosened int
	// Checked is how many decisions the differential check made, under both policies.
	Checked int
}

// Tightening reports that nothing in the new policy is more permissive than the old.
func (c Comparison) Tightening() bool { return len(c.Loosenings) == 0 && len(c.Examples) == 0 }

// Same reports that the two policies decide alike in every respect Compare reads.
func (c Comparison) Same() bool { return c.Tightening() && len(c.Tightenings) == 0 }

// Compare compares old (the approved policy) with new, in two ways that must both find no
// loosening for the change to be a tightening. The rule-by-rule comparison reasons about each
// part of the policy on its own and counts as a loosening anything it cannot prove is not one:
// asking a human too often is safe, missing a loosening is not; its lines are what the human
// reads. The differential check then decides, under both policies, requests built from every
// host, method and path either policy names (see differential): a request decided less
// restrictively makes the change a loosening whatever the rule-by-rule comparison said, and is
// shown as the example.
func Compare(old, new *Policy) Comparison {
	c := compareFiles(old, new)
	c.addDecisions(differential(old, new))
	return c
}

// addDecisions adds what the differential check found to the rule-by-rule comparison.
func (c *Comparison) addDecisions(d diffResult) {
	c.Examples, c.Loosened, c.Checked = d.examples, d.loosened, d.evaluated
	switch {
	case d.truncated:
		c.loose("decisions: the change reaches more requests than the differential check tries (%d decisions); a human must look", maxEvaluations)
	case len(d.examples) > 0 && len(c.Loosenings) == 0:
		// The rule-by-rule comparison missed it: the decision is what counts.
		more := ""
		if d.loosened > 1 {
			more = fmt.Sprintf(" (and %d more)", d.loosened-1)
		}
		c.loose("decisions: %s%s", d.examples[0], more)
	}
}

// compareFiles is the rule-by-rule comparison of Compare.
func compareFiles(old, new *Policy) Comparison {
	var c Comparison
	o, n := old.file, new.file
	c.hostList("trusted", o.Trusted, n.Trusted, false)
	c.hostList("deny", o.Deny, n.Deny, true)
	// Decrypting a host lets its reads through without the CONNECT's approval, and splicing one
	// opens its tunnel to whatever a CONNECT rule allows: both directions loosen something.
	for _, p := range n.Splice {
		if !covers(o.Splice, p) {
			c.loose("splice: + %q", p)
		}
	}
	for _, p := range o.Splice {
		if !covers(n.Splice, p) {
			c.loose("splice: - %q (its requests are then decrypted and decided one by one)", p)
		}
	}
	c.rules(o.Rules, n.Rules)
	c.containerLists(o, n)
	c.floor(old, new)
	c.sources(o.Sources, n.Sources)
	c.settings(old.Settings, new.Settings)
	c.secrets(o.Secrets, n.Secrets)
	c.hostList("jwt.hosts", o.JWT.Hosts, n.JWT.Hosts, false) // a host a JWT may go to more is a loosening
	c.injections(o.Inject, n.Inject)
	c.budgets(old.budgets, new.budgets)
	c.mcp(old, new)
	c.notify(old.notify, new.notify)
	if o.Claude.Credentials != n.Claude.Credentials {
		c.loose("claude.credentials: %q → %q (the file's contents are not compared)", o.Claude.Credentials, n.Claude.Credentials)
	}
	return c
}

func (c *Comparison) loose(format string, args ...any) {
	c.Loosenings = append(c.Loosenings, fmt.Sprintf(format, args...))
}

func (c *Comparison) tight(format string, args ...any) {
	c.Tightenings = append(c.Tightenings, fmt.Sprintf(format, args...))
}

// covers reports whether some pattern in set matches every host that p matches.
func covers(set []string, p string) bool {
	pp, err := parseHostPattern(p)
	if err != nil {
		return false
	}
	for _, s := range set {
		sp, err := parseHostPattern(s)
		if err != nil {
			continue
		}
		switch {
		case sp.any:
			return true
		case sp.suffix != "":
			if pp.any {
				continue
			}
			name := pp.name
			if pp.suffix != "" {
				name = "x." + pp.suffix // a name under p's suffix
				if pp.suffix == sp.suffix {
					return true
				}
			}
			if strings.HasSuffix(name, "."+sp.suffix) && (pp.suffix == "" || strings.HasSuffix(pp.suffix, "."+sp.suffix)) {
				return true
			}
		default:
			if !pp.any && pp.suffix == "" && pp.name == sp.name {
				return true
			}
		}
	}
	return false
}

// hostList compares a list of host patterns. restrictive lists (deny) loosen when they lose
// coverage; permissive lists (trusted, splice) loosen when they gain it.
func (c *Comparison) hostList(key string, old, new []string, restrictive bool) {
	for _, p := range new {
		if !covers(old, p) {
			if restrictive {
				c.tight("%s: + %q", key, p)
			} else {
				c.loose("%s: + %q", key, p)
			}
		}
	}
	for _, p := range old {
		if !covers(new, p) {
			if restrictive {
				c.loose("%s: - %q", key, p)
			} else {
				c.tight("%s: - %q", key, p)
			}
		}
	}
}

func ruleWords(r FileRule) string {
	var b strings.Builder
	if len(r.Methods) > 0 {
		b.WriteString(strings.Join(r.Methods, ","))
	} else {
		b.WriteString("any method")
	}
	b.WriteString(" on ")
	b.WriteString(strings.Join(r.Hosts, ", "))
	if len(r.Paths) > 0 {
		b.WriteString(" at ")
		b.WriteString(strings.Join(r.Paths, ", "))
	}
	if r.Containers != nil {
		b.WriteString(" for ")
		b.WriteString(containersWords(r.Containers))
	}
	return b.String()
}

// rules compares rules by name; a renamed rule is one removed and one added.
func (c *Comparison) rules(old, new []FileRule) {
	byName := func(rs []FileRule) map[string]FileRule {
		m := make(map[string]FileRule, len(rs))
		for _, r := range rs {
			m[r.Name] = r
		}
		return m
	}
	om, nm := byName(old), byName(new)
	for _, r := range new {
		prev, ok := om[r.Name]
		if !ok {
			if verdicts[r.Verdict] == Free {
				c.loose("rule %q: + %s %s", r.Name, r.Verdict, ruleWords(r))
			} else {
				c.tight("rule %q: + %s %s", r.Name, r.Verdict, ruleWords(r))
			}
			continue
		}
		c.rule(prev, r)
	}
	for _, r := range old {
		if _, ok := nm[r.Name]; !ok {
			if verdicts[r.Verdict] == Free {
				c.tight("rule %q: - %s %s", r.Name, r.Verdict, ruleWords(r))
			} else {
				c.loose("rule %q: - %s %s (removed)", r.Name, r.Verdict, ruleWords(r))
			}
		}
	}
}

// rule compares two versions of one rule. A rule's reach is its hosts × methods × paths ×
// containers: for a free rule a wider reach loosens; for an ask or deny rule a narrower reach
// loosens, and so does a verdict that becomes more permissive.
func (c *Comparison) rule(o, n FileRule) {
	ov, nv := verdicts[o.Verdict], verdicts[n.Verdict]
	name := n.Name
	if nv < ov {
		c.loose("rule %q: verdict %s → %s", name, o.Verdict, n.Verdict)
	} else if nv > ov {
		c.tight("rule %q: verdict %s → %s", name, o.Verdict, n.Verdict)
	}
	// The reach is judged against the more permissive of the two verdicts' directions: when the
	// verdict did not change, a free rule loosens by widening and an ask/deny rule by narrowing.
	freeNow := nv == Free
	freeBefore := ov == Free
	widened, narrowed := reachDiff(o, n)
	if freeNow && len(o.Methods) == 0 && slices.Contains(n.Methods, "CONNECT") {
		// Every method → some methods with CONNECT narrows what the rule frees inside a
		// decrypted tunnel, and widens what it frees at the domain: a rule naming CONNECT decides
		// a tunnel decided at the domain, over the host's ask and deny rules for some methods or
		// paths, and that tunnel carries those requests unseen.
		narrowed = slices.DeleteFunc(narrowed, func(w string) bool { return strings.HasPrefix(w, "methods: every method → ") })
		c.loose("rule %q: methods: every method → %s (a free rule naming CONNECT opens the tunnel decided at the domain, over the host's ask and deny rules)", name, strings.Join(n.Methods, ","))
	}
	for _, w := range widened {
		if freeNow {
			c.loose("rule %q: %s", name, w)
		} else {
			c.tight("rule %q: %s", name, w)
		}
	}
	for _, w := range narrowed {
		if !freeBefore {
			c.loose("rule %q: %s", name, w)
		} else {
			c.tight("rule %q: %s", name, w)
		}
	}
}

// reachDiff lists how n's reach grew and shrank compared with o's, in words.
func reachDiff(o, n FileRule) (widened, narrowed []string) {
	widened, narrowed = containersDiff(o.Containers, n.Containers)
	for _, h := range n.Hosts {
		if !covers(o.Hosts, h) {
			widened = append(widened, fmt.Sprintf("hosts: + %q", h))
		}
	}
	for _, h := range o.Hosts {
		if !covers(n.Hosts, h) {
			narrowed = append(narrowed, fmt.Sprintf("hosts: - %q", h))
		}
	}
	// Methods: empty means every method.
	switch {
	case len(o.Methods) == 0 && len(n.Methods) > 0:
		narrowed = append(narrowed, fmt.Sprintf("methods: every method → %s", strings.Join(n.Methods, ",")))
	case len(o.Methods) > 0 && len(n.Methods) == 0:
		widened = append(widened, fmt.Sprintf("methods: %s → every method", strings.Join(o.Methods, ",")))
	case len(o.Methods) > 0:
		for _, m := range n.Methods {
			if !slices.Contains(o.Methods, m) {
				widened = append(widened, fmt.Sprintf("methods: + %s", m))
			}
		}
		for _, m := range o.Methods {
			if !slices.Contains(n.Methods, m) {
				narrowed = append(narrowed, fmt.Sprintf("methods: - %s", m))
			}
		}
	}
	// Paths: empty means every path; a pattern is kept only when written the same.
	switch {
	case len(o.Paths) == 0 && len(n.Paths) > 0:
		narrowed = append(narrowed, fmt.Sprintf("paths: every path → %s", strings.Join(n.Paths, ", ")))
	case len(o.Paths) > 0 && len(n.Paths) == 0:
		widened = append(widened, fmt.Sprintf("paths: %s → every path", strings.Join(o.Paths, ", ")))
	case len(o.Paths) > 0:
		for _, p := range n.Paths {
			if !slices.Contains(o.Paths, p) {
				widened = append(widened, fmt.Sprintf("paths: + %s", p))
			}
		}
		for _, p := range o.Paths {
			if !slices.Contains(n.Paths, p) {
				narrowed = append(narrowed, fmt.Sprintf("paths: - %s", p))
			}
		}
	}
	return widened, narrowed
}

func (c *Comparison) floor(old, new *Policy) {
	for _, p := range new.Floor.AllowCIDRs {
		if !prefixCovered(old.Floor.AllowCIDRs, p) {
			c.loose("floor.allow_cidrs: + %s", p)
		}
	}
	for _, p := range old.Floor.AllowCIDRs {
		if !prefixCovered(new.Floor.AllowCIDRs, p) {
			c.tight("floor.allow_cidrs: - %s", p)
		}
	}
	for _, port := range new.Floor.AllowPorts {
		if !slices.Contains(old.Floor.AllowPorts, port) {
			c.loose("floor.allow_ports: + %d", port)
		}
	}
	for _, port := range old.Floor.AllowPorts {
		if !slices.Contains(new.Floor.AllowPorts, port) {
			c.tight("floor.allow_ports: - %d", port)
		}
	}
	for _, name := range sortedKeys(new.Floor.Hosts) {
		a := new.Floor.Hosts[name]
		if prev, ok := old.Floor.Hosts[name]; !ok {
			c.loose("floor.hosts: + %s = %s", name, a)
		} else if prev != a {
			c.loose("floor.hosts: %s: %s → %s", name, prev, a)
		}
	}
	for _, name := range sortedKeys(old.Floor.Hosts) {
		if _, ok := new.Floor.Hosts[name]; !ok {
			// The name is then sent where DNS says: another address for a name the rules
			// may trust.
			c.loose("floor.hosts: - %s (it goes where DNS says instead of %s)", name, old.Floor.Hosts[name])
		}
	}
}

func prefixCovered(set []netip.Prefix, p netip.Prefix) bool {
	for _, s := range set {
		if s.Bits() <= p.Bits() && s.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (c *Comparison) sources(old, new map[string][]string) {
	for _, name := range sortedKeys(new) {
		for _, s := range new[name] {
			if !slices.Contains(old[name], s) {
				c.loose("sources.%s: + %s", name, s)
			}
		}
	}
	for _, name := range sortedKeys(old) {
		for _, s := range old[name] {
			if !slices.Contains(new[name], s) {
				c.tight("sources.%s: - %s", name, s)
			}
		}
	}
}

func (c *Comparison) settings(o, n Settings) {
	if n.Hold > o.Hold {
		c.loose("settings.hold: %s → %s", o.Hold, n.Hold)
	} else if n.Hold < o.Hold {
		c.tight("settings.hold: %s → %s", o.Hold, n.Hold)
	}
	if n.ConnectGrant > o.ConnectGrant {
		c.loose("settings.connect_grant: %s → %s", o.ConnectGrant, n.ConnectGrant)
	} else if n.ConnectGrant < o.ConnectGrant {
		c.tight("settings.connect_grant: %s → %s", o.ConnectGrant, n.ConnectGrant)
	}
	// The bounds on what a container may hold: raising one lets it hold more; lowering the
	// minimum body rate lets a slower body through.
	for _, b := range []struct {
		key    string
		o, n   int64
		looser bool // the new value is the looser one
	}{
		{"body_timeout", int64(o.BodyTimeout), int64(n.BodyTimeout), n.BodyTimeout > o.BodyTimeout},
		{"held_limit", o.HeldLimit, n.HeldLimit, n.HeldLimit > o.HeldLimit},
		{"held_per_container", o.HeldPerContainer, n.HeldPerContainer, n.HeldPerContainer > o.HeldPerContainer},
		{"max_pending", int64(o.MaxPending), int64(n.MaxPending), n.MaxPending > o.MaxPending},
		{"body_min_rate", o.BodyMinRate, n.BodyMinRate, n.BodyMinRate < o.BodyMinRate},
	} {
		switch {
		case b.o == b.n:
		case b.looser:
			c.loose("settings.%s: %s → %s", b.key, showBound(b.key, b.o), showBound(b.key, b.n))
		default:
			c.tight("settings.%s: %s → %s", b.key, showBound(b.key, b.o), showBound(b.key, b.n))
		}
	}
	if n.BufferLimit > o.BufferLimit {
		c.loose("settings.buffer_limit: %d → %d bytes", o.BufferLimit, n.BufferLimit)
	} else if n.BufferLimit < o.BufferLimit {
		c.tight("settings.buffer_limit: %d → %d bytes", o.BufferLimit, n.BufferLimit)
	}
	if o.HTTP2 != n.HTTP2 {
		// HTTP/2 decides every stream as HTTP/1.1 decides every request; turning it on still
		// widens what the gate parses of the agent's bytes.
		if n.HTTP2 {
			c.loose("settings.http2: off → on")
		} else {
			c.tight("settings.http2: on → off")
		}
	}
	if o.Heuristics != n.Heuristics {
		if n.Heuristics == "enforce" {
			c.tight("settings.heuristics: %s → %s", o.Heuristics, n.Heuristics)
		} else {
			c.loose("settings.heuristics: %s → %s", o.Heuristics, n.Heuristics)
		}
	}
}

func (c *Comparison) secrets(old, new []FileSecret) {
	om := map[string]FileSecret{}
	for _, s := range old {
		om[s.Name] = s
	}
	nm := map[string]bool{}
	for _, s := range new {
		nm[s.Name] = true
		prev, ok := om[s.Name]
		switch {
		case !ok:
			c.tight("secret %q: + pattern", s.Name)
		case prev.Pattern != s.Pattern:
			c.loose("secret %q: pattern changed (it may match less)", s.Name)
		}
		if ok {
			for _, h := range s.Hosts {
				if !covers(prev.Hosts, h) {
					c.loose("secret %q: hosts: + %q", s.Name, h)
				}
			}
		}
	}
	for _, s := range old {
		if !nm[s.Name] {
			c.loose("secret %q: - (removed)", s.Name)
		}
	}
}

func (c *Comparison) injections(old, new []FileInject) {
	key := func(i FileInject) string {
		return strings.Join([]string{strings.Join(i.Hosts, ","), i.Header, i.Query, i.Secret, i.Format}, "|")
	}
	om := map[string]FileInject{}
	for _, i := range old {
		om[i.Name] = i
	}
	nm := map[string]bool{}
	for _, i := range new {
		nm[i.Name] = true
		prev, ok := om[i.Name]
		target := i.Header
		if target == "" {
			target = "query " + i.Query
		}
		switch {
		case !ok:
			c.loose("inject: + %q (secret %q as %s to %s)", i.Name, i.Secret, target, strings.Join(i.Hosts, ", "))
		case key(prev) != key(i):
			c.loose("inject %q: changed (secret %q as %s to %s)", i.Name, i.Secret, target, strings.Join(i.Hosts, ", "))
		case i.HTTP && !prev.HTTP:
			c.loose("inject %q: http = true (the secret also goes out on plain http:// requests)", i.Name)
		case i.Optional && !prev.Optional:
			c.loose("inject %q: optional = true (while the secret is absent, requests go out with the agent's own credential)", i.Name)
		}
	}
	for _, i := range old {
		if !nm[i.Name] {
			c.tight("inject: - %q", i.Name)
		}
	}
}

// showBound is a bound of [settings] as a review shows it.
func showBound(key string, v int64) string {
	switch key {
	case "body_timeout":
		return time.Duration(v).String()
	case "max_pending":
		return strconv.FormatInt(v, 10)
	case "body_min_rate":
		return strconv.FormatInt(v, 10) + " bytes/s"
	}
	return strconv.FormatInt(v, 10) + " bytes"
}
