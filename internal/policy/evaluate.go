package policy

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
)

// Request is what the policy decides on: a request (or a CONNECT decided at the domain) after the
// floor has normalised its host.
type Request struct {
	Host   string // normalised host name (floor.Host)
	Method string // as sent, upper case
	Path   string // the escaped URL path as sent; ignored for a CONNECT
	// Connect is a CONNECT decided at the domain: the tunnel can carry any request to Host, unseen.
	Connect bool
	// Container is the [sources] container the request comes from: rules and [container.NAME]
	// lists scoped to other containers do not decide it. A name [sources] does not have (the
	// judge refuses such a request before it gets here) meets every scoped ask and deny rule and
	// deny list, and no scoped free rule or trusted list.
	Container string
}

// Reasons of the built-in decisions.
const (
	reasonTrusted       = "no rule matches; reads (GET, HEAD, OPTIONS) of a trusted host are free"
	reasonTrustedWrite  = "no rule matches; the host is trusted for reads (GET, HEAD, OPTIONS) only, so anything else needs a human"
	reasonUntrusted     = "no rule matches and the host is not trusted, so a human must approve"
	reasonConnectDomain = "a tunnel decided at the domain carries writes as well as reads, unseen, so a human must approve it (decryption would decide each request inside)"
	reasonConnectRule   = "; a tunnel decided at the domain would carry such requests unseen, so a human must approve it"
)

// Evaluate decides a request of r.Container by the rules, the deny lists and the trusted hosts
// that apply to that container: the most restrictive matching rule wins (deny > ask > free);
// with no match, reads of trusted hosts are free and everything else asks. It allocates nothing
// for an ordinary request.
func (p *Policy) Evaluate(r Request) Decision {
	if pat := p.deny.lookup(r.Host); pat != "" {
		return Decision{Verdict: Deny, Code: CodeRule, Rule: RuleDenyList, Reason: "the deny list names " + quote(pat)}
	}
	var scope int32
	if p.scoped {
		scope = p.scopeOf(r.Container)
		if d, ok := p.listDeny(scope, r.Host); ok {
			return d
		}
	}
	if r.Connect {
		return p.evaluateConnect(r.Host, scope)
	}
	m := matcher{p: p, bit: methodBit(r.Method), scope: scope}
	m.clean, m.params = cleanPath(r.Path)
	m.first = firstSegment(m.clean)
	exact := p.index.exact[r.Host]
	for v := Deny; ; v-- {
		m.best = -1
		m.tier(exact, v)
		if len(p.index.suffix) > 0 {
			for h := r.Host; ; {
				i := indexByte(h, '.')
				if i < 0 {
					break
				}
				h = h[i+1:]
				m.tier(p.index.suffix[h], v)
			}
		}
		m.tier(p.index.all, v)
		if m.best >= 0 {
			rl := &p.rules[m.best]
			d := Decision{Verdict: rl.verdict, Rule: rl.name, Reason: rl.reason}
			if rl.verdict == Deny {
				d.Code = CodeRule
			}
			return d
		}
		if v == Free {
			break
		}
	}
	if top := p.trusted.lookup(r.Host) != ""; top || p.listTrusted(scope, r.Host) {
		if m.bit&readMethods != 0 {
			reason := reasonTrusted
			if !top {
				reason = p.lists[scope].reasonTrusted
			}
			return Decision{Verdict: Free, Rule: RuleTrusted, Reason: reason}
		}
		return Decision{Verdict: Ask, Rule: RuleDefault, Reason: reasonTrustedWrite}
	}
	return Decision{Verdict: Ask, Rule: RuleDefault, Reason: reasonUntrusted}
}

// RuleDecrypt names the decision to open a CONNECT and decrypt it.
const RuleDecrypt = "decrypt"

const reasonDecrypt = "the tunnel is decrypted: each request inside it is decided on its own"

// EvaluateIntercept decides a CONNECT of container that the gate will decrypt: only what refuses
// the whole host applies here (the deny lists, a deny rule with neither methods nor paths, or one
// naming CONNECT); every request inside the tunnel is then decided by Evaluate.
func (p *Policy) EvaluateIntercept(host, container string) Decision {
	if pat := p.deny.lookup(host); pat != "" {
		return Decision{Verdict: Deny, Code: CodeRule, Rule: RuleDenyList, Reason: "the deny list names " + quote(pat)}
	}
	var scope int32
	if p.scoped {
		scope = p.scopeOf(container)
		if d, ok := p.listDeny(scope, host); ok {
			return d
		}
	}
	best := int32(-1)
	p.forRules(host, scope, func(id int32) {
		rl := &p.rules[id]
		if rl.verdict == Deny && (rl.whole || rl.connect) && (best < 0 || id < best) {
			best = id
		}
	})
	if best >= 0 {
		rl := &p.rules[best]
		return Decision{Verdict: Deny, Code: CodeRule, Rule: rl.name, Reason: rl.reason}
	}
	return Decision{Verdict: Free, Rule: RuleDecrypt, Reason: reasonDecrypt}
}

// forRules calls fn with the id of every rule whose hosts match host and that decides for the
// container scope (an id of scopeOf).
func (p *Policy) forRules(host string, scope int32, fn func(int32)) {
	tiers := func(ts *[3]tier) {
		for v := range ts {
			t := &ts[v]
			for _, id := range t.any {
				fn(id)
			}
			for _, ids := range t.first {
				for _, id := range ids {
					fn(id)
				}
			}
		}
	}
	each := func(b *bucket) {
		if b == nil {
			return
		}
		tiers(&b.tiers)
		if ts := b.scoped[scope]; ts != nil {
			tiers(ts)
		}
	}
	each(p.index.exact[host])
	for h := host; ; {
		i := indexByte(h, '.')
		if i < 0 {
			break
		}
		h = h[i+1:]
		each(p.index.suffix[h])
	}
	each(p.index.all)
}

// evaluateConnect decides a CONNECT at the domain, where the tunnel can carry any request to
// host unseen. Whole-host rules (no methods, no paths) and rules naming CONNECT decide, the most
// restrictive winning; a whole-host deny refuses. Without a rule naming CONNECT, a rule that
// asks about or refuses only some requests to the host, or an [[mcp]] endpoint on it, makes the
// tunnel ask, since the tunnel would carry those requests unseen. Nothing matching: ask.
func (p *Policy) evaluateConnect(host string, scope int32) Decision {
	best, restricted := int32(-1), int32(-1)
	explicit := false
	p.forRules(host, scope, func(id int32) {
		rl := &p.rules[id]
		switch {
		case rl.whole || rl.connect:
			if rl.connect {
				explicit = true
			}
			if best < 0 || rl.verdict > p.rules[best].verdict || (rl.verdict == p.rules[best].verdict && id < best) {
				best = id
			}
		case rl.verdict != Free:
			if restricted < 0 || id < restricted {
				restricted = id
			}
		}
	})
	if best >= 0 && (p.rules[best].verdict == Deny || explicit || restricted < 0 && (!p.hasMCP(host) || p.rules[best].verdict != Free)) {
		rl := &p.rules[best]
		d := Decision{Verdict: rl.verdict, Rule: rl.name, Reason: rl.reason}
		if rl.verdict == Deny {
			d.Code = CodeRule
		}
		return d
	}
	if restricted >= 0 {
		rl := &p.rules[restricted]
		return Decision{Verdict: Ask, Rule: rl.name, Reason: rl.reason + reasonConnectRule}
	}
	if es := p.mcpByHost[host]; len(es) > 0 {
		// The endpoint's calls are decided one by one, most of them asking: the tunnel would
		// carry them unseen.
		return Decision{Verdict: Ask, Rule: RuleDefault, Reason: fmt.Sprintf("the host serves the MCP endpoint %q, whose calls are decided one by one; %s", es[0].Name, reasonConnectDomain)}
	}
	return Decision{Verdict: Ask, Rule: RuleDefault, Reason: reasonConnectDomain}
}

// matcher finds, within one verdict tier, the first matching rule in file order. It reads the
// request's path the ways CleanPath describes: a restrictive rule matches if it matches any of
// LoosePaths, a free rule only if it matches both CleanPath and cutPath.
type matcher struct {
	p      *Policy
	bit    uint32
	scope  int32     // the request's container (scopeOf)
	clean  string    // CleanPath of the request
	first  string    // the first segment of clean
	params bool      // clean has ;parameters: cut and the loose readings differ
	cut    string    // cutPath of clean, computed on first use when params
	cutSet bool      // cut is set
	loose  [3]string // LoosePaths of clean, computed on first use (only [0] without params)
	lfirst [3]string // the first segments of loose
	fold   bool      // loose is set
	best   int32     // the first matching rule of the tier so far, -1 for none
}

// tier tries the rules of verdict v in b: those for every container, and those scoped to the
// request's container.
func (m *matcher) tier(b *bucket, v Verdict) {
	if b == nil {
		return
	}
	m.tierOf(&b.tiers[v], v)
	if b.scoped != nil {
		if ts := b.scoped[m.scope]; ts != nil {
			m.tierOf(&ts[v], v)
		}
	}
}

func (m *matcher) tierOf(t *tier, v Verdict) {
	m.ids(t.any)
	if t.first == nil {
		return
	}
	if v == Free {
		m.ids(t.first[m.first]) // a free rule must match clean
		return
	}
	m.foldPath()
	m.ids(t.first[m.lfirst[0]])
	if m.params {
		for i := 1; i < len(m.lfirst); i++ {
			if f := m.lfirst[i]; f != m.lfirst[0] && (i == 1 || f != m.lfirst[1]) {
				m.ids(t.first[f])
			}
		}
	}
}

func (m *matcher) foldPath() {
	if m.fold {
		return
	}
	m.fold = true
	if !m.params { // the three readings are one
		m.loose[0] = foldPath(m.clean)
		m.lfirst[0] = firstSegment(m.loose[0])
		return
	}
	m.loose = LoosePaths(m.clean)
	for i, l := range m.loose {
		m.lfirst[i] = firstSegment(l)
	}
}

func (m *matcher) cutPath() string {
	if !m.cutSet {
		m.cut, m.cutSet = cutPath(m.clean), true
	}
	return m.cut
}

func (m *matcher) ids(ids []int32) {
	for _, id := range ids {
		if m.best >= 0 && id >= m.best {
			return // ids are in file order: nothing later can come first
		}
		if m.match(&m.p.rules[id]) {
			m.best = id
			return
		}
	}
}

// match reports whether rl applies to the request.
func (m *matcher) match(rl *rule) bool {
	if rl.methods != 0 && rl.methods&m.bit == 0 {
		return false
	}
	if len(rl.paths) == 0 {
		return true
	}
	if rl.verdict != Free {
		m.foldPath()
		n := 1
		if m.params {
			n = len(m.loose)
		}
		for _, l := range m.loose[:n] {
			for i := range rl.paths {
				if rl.paths[i].match(l) {
					return true
				}
			}
		}
		return false
	}
	if escapesBySlash(m.clean) {
		// An encoded or back slash next to a dot-dot segment: an origin that reads it as a
		// separator resolves the path elsewhere. No free rule vouches for where.
		return false
	}
	matched := false
	for i := range rl.paths {
		if rl.paths[i].match(m.clean) {
			matched = true
			break
		}
	}
	if !matched || !m.params {
		return matched
	}
	cut := m.cutPath()
	for i := range rl.paths {
		if rl.paths[i].matchCut(cut) {
			return true
		}
	}
	return false
}

// escapesBySlash reports whether a cleaned path has an encoded slash or backslash (%2F, %5C, \\)
// that makes a ".." a dot-dot segment once read as a separator: "/public/..%2Fadmin".
func escapesBySlash(clean string) bool {
	if indexByte(clean, '.') < 0 || (indexByte(clean, '%') < 0 && indexByte(clean, '\\') < 0) {
		return false
	}
	r := slashes.Replace(clean)
	if r == clean {
		return false
	}
	for _, seg := range strings.Split(r, "/") {
		if seg, _, _ = strings.Cut(seg, ";"); seg == ".." {
			return true
		}
	}
	return false
}

var slashes = strings.NewReplacer("%2F", "/", "%2f", "/", "%5C", "/", "%5c", "/", "\\", "/")

// firstSegment is the first segment of a cleaned path ("/a/b" → "a").
func firstSegment(p string) string {
	p = p[1:]
	if i := indexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return p
}

// Spliced reports whether host is on the splice list (never decrypted).
func (p *Policy) Spliced(host string) bool { return p.splice.lookup(host) != "" }

// Trusted reports whether host is trusted for the reads of container: by the top-level trusted
// list, or by the container's [container.NAME] trusted list.
func (p *Policy) Trusted(host, container string) bool {
	if p.trusted.lookup(host) != "" {
		return true
	}
	return p.scoped && p.listTrusted(p.scopeOf(container), host)
}

// Container names the container whose connections come from addr, or "" when none does.
func (p *Policy) Container(addr netip.Addr) string {
	addr = addr.Unmap()
	for i := range p.sources {
		if p.sources[i].prefix.Contains(addr) {
			return p.sources[i].container
		}
	}
	return ""
}

// HasContainer reports whether [sources] names the container.
func (p *Policy) HasContainer(name string) bool { return p.names[name] }

// Containers lists the container names of [sources], sorted.
func (p *Policy) Containers() []string {
	out := make([]string, 0, len(p.names))
	for n := range p.names {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// RuleCount is the number of [[rule]] entries.
func (p *Policy) RuleCount() int { return len(p.rules) }

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

func quote(s string) string { return "\"" + s + "\"" }
