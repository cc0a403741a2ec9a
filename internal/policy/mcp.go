package policy

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/lockhttp/lockhttp/internal/floor"
)

// The [[mcp]] endpoints: a remote MCP server at one host and path, whose requests the judge
// reads as MCP messages (package mcp) and decides here one message at a time. A tools/call is
// decided by the endpoint's rules, by tool; the protocol's own messages, which act on no tool or
// data of the server, are free; everything else asks. Endpoints and their rules are compiled at
// load: endpoints by host, rules by verdict and by exact tool name, as the [[rule]]s are.

// Limits on [[mcp]]: beyond them a value is more likely a mistake than a choice.
const (
	maxMCPEndpoints = 64
	maxMCPRules     = 256 // per endpoint
	maxMCPPath      = 1024
	maxToolPattern  = 256
)

// The rule names of the MCP decisions no [[mcp.rule]] made. A rule's own decision is named
// "mcp:<endpoint>:<rule>".
const (
	// RuleMCPProtocol: a message of the protocol's own (initialize, ping, the lists,
	// notifications, the client's responses), the server's event stream (GET) or the end of a
	// session (DELETE): free.
	RuleMCPProtocol = "mcp:protocol"
	// RuleMCPUnlisted: a tool no rule of the endpoint lists, or a method that acts on something
	// other than a tool (resources/read, prompts/get, ...): ask.
	RuleMCPUnlisted = "mcp:unlisted"
	// RuleMCPUnknownMethod: a method MCP does not define, or an HTTP method its transport does
	// not use: ask.
	RuleMCPUnknownMethod = "mcp:unknown-method"
)

// MCPEndpoint is an [[mcp]] endpoint compiled.
type MCPEndpoint struct {
	Name string
	Host string // normalised (floor.Host)
	Path string // as written
	key  string // the path as matched (mcpPathKey)

	rules []mcpRule
	// tiers holds the rules for every container by verdict; scoped the rules scoped to
	// containers, under each container id they name (and, for ask and deny rules, under the id
	// of a container [sources] does not name).
	tiers  [3]mcpTier
	scoped map[int32]*[3]mcpTier
}

// mcpRule is one [[mcp.rule]] compiled.
type mcpRule struct {
	name     string   // "mcp:<endpoint>:<rule>"
	tools    []string // the patterns as written
	verdict  Verdict
	patterns []toolPattern
	scope    []int32 // nil: every container
	reason   string  // `rule "reads" (free): tools read_*, list_*...`, built at compile time
}

// toolPattern is one pattern of tools; for an ask or deny rule its text is folded (foldName).
type toolPattern struct {
	parts []string // the text split at '*'; one part: an exact name
}

func (t *toolPattern) match(name string) bool {
	if len(t.parts) == 1 {
		return t.parts[0] == name
	}
	return wildMatch(t.parts, name)
}

// mcpTier holds the rules of one verdict: found by an exact tool name, or tried in file order
// when a pattern has a star.
type mcpTier struct {
	exact map[string][]int32
	globs []int32
}

func (t *mcpTier) add(id int32, r *mcpRule) {
	globbed := false
	for i := range r.patterns {
		pt := &r.patterns[i]
		if len(pt.parts) > 1 {
			globbed = true
			continue
		}
		if t.exact == nil {
			t.exact = make(map[string][]int32)
		}
		t.exact[pt.parts[0]] = appendOnce(t.exact[pt.parts[0]], id)
	}
	if globbed {
		t.globs = appendOnce(t.globs, id)
	}
}

// foldName is a name as a server that matches names without case reads it: every character
// replaced by the smallest of those it folds with (Unicode simple case folding), so that
// "DELETE", "delete" and "deleſe" fold alike.
func foldName(s string) string {
	simple := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= utf8.RuneSelf || 'a' <= c && c <= 'z' {
			simple = false
			break
		}
	}
	if simple {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		b.WriteRune(least)
	}
	return b.String()
}

// mcpPathKey is what an endpoint's path and a request's are compared by: each reading of
// LoosePaths (lower case, encoded and back slashes as separators, ;parameters kept and cut),
// without a trailing slash. A request goes to an endpoint when any reading of its path is the
// endpoint's, so no way of writing the path steps around the endpoint's rules.
func mcpPathKeys(escaped string) [3]string {
	ls := LoosePaths(CleanPath(escaped))
	for i, l := range ls {
		if len(l) > 1 {
			ls[i] = strings.TrimSuffix(l, "/")
		}
	}
	return ls
}

// MCP returns the [[mcp]] endpoint a request to host (normalised) at the escaped path goes to,
// or nil.
func (p *Policy) MCP(host, path string) *MCPEndpoint {
	es := p.mcpByHost[host]
	if len(es) == 0 {
		return nil
	}
	keys := mcpPathKeys(path)
	for _, e := range es {
		for _, k := range keys {
			if k == e.key {
				return e
			}
		}
	}
	return nil
}

// MCPEndpoints are the policy's [[mcp]] endpoints, in file order.
func (p *Policy) MCPEndpoints() []*MCPEndpoint { return p.mcp }

// hasMCP reports whether an endpoint is on host.
func (p *Policy) hasMCP(host string) bool { return len(p.mcpByHost[host]) > 0 }

// MCPKind is what one MCP message is to the policy.
type MCPKind uint8

const (
	// MCPTool is a tools/call of MCPMessage.Tool.
	MCPTool MCPKind = iota
	// MCPProtocol is a message that acts on no tool or data of the server: initialize, ping,
	// server/discover, the lists, a notification of the protocol, the client's response to a
	// server's request; and the server's event stream (GET) and the end of a session (DELETE).
	MCPProtocol
	// MCPOther is a method of the protocol that acts on something other than a tool: a
	// resource read, a prompt, a completion, a subscription, a task.
	MCPOther
	// MCPUnknown is a method MCP does not define, or an HTTP method its transport does not use.
	MCPUnknown
)

// MCPMessage is one message of a request to an endpoint, as the policy decides it.
type MCPMessage struct {
	Kind MCPKind
	// Method says what the message is, for the reason: the JSON-RPC method ("initialize"), or
	// words for what has none ("GET (the server's event stream)"). Agent input for MCPUnknown.
	Method string
	// Tool is the tool a tools/call calls.
	Tool string
}

// EvaluateMCP decides one message of a request of container to endpoint e (the one MCP found
// for the request, whose [[rule]]s and deny lists did not refuse it): a tools/call by the
// endpoint's rules that apply to the container (the most restrictive matching rule wins; an ask
// or deny rule matches the tool's name in any case, a free rule only as written), else it asks
// (mcp:unlisted); the protocol's own messages are free (mcp:protocol); a method that acts on
// something else asks (mcp:unlisted); an unknown method asks (mcp:unknown-method). It does no
// parsing: the judge has read the message.
func (p *Policy) EvaluateMCP(e *MCPEndpoint, container string, m MCPMessage) Decision {
	on := fmt.Sprintf(" on MCP endpoint %q", e.Name)
	switch m.Kind {
	case MCPTool:
		what := fmt.Sprintf("tools/call of %s%s", floor.Shown(m.Tool, floor.MaxShown), on)
		r := p.mcpMatch(e, container, m.Tool)
		if r == nil {
			return Decision{Verdict: Ask, Rule: RuleMCPUnlisted, Reason: what + ": no rule of the endpoint lists the tool, so a human must approve"}
		}
		d := Decision{Verdict: r.verdict, Rule: r.name, Reason: what + ": " + r.reason}
		if r.verdict == Deny {
			d.Code = CodeRule
		}
		return d
	case MCPProtocol:
		return Decision{Verdict: Free, Rule: RuleMCPProtocol, Reason: m.Method + on + " acts on no tool or data of the server (the protocol's own), so it is free"}
	case MCPOther:
		return Decision{Verdict: Ask, Rule: RuleMCPUnlisted, Reason: m.Method + on + " acts on the server's data, and no rule decides it (rules decide tools), so a human must approve"}
	}
	return Decision{Verdict: Ask, Rule: RuleMCPUnknownMethod, Reason: fmt.Sprintf("%s%s is not a method of MCP, so a human must approve", floor.Shown(m.Method, floor.MaxShown), on)}
}

// mcpMatch is the rule of e that decides a call of tool by container, or nil: the first
// matching rule of the most restrictive tier that has one.
func (p *Policy) mcpMatch(e *MCPEndpoint, container, tool string) *mcpRule {
	var scope int32
	if p.scoped {
		scope = p.scopeOf(container)
	}
	folded := foldName(tool)
	for v := Deny; ; v-- {
		name := folded
		if v == Free {
			name = tool // a free rule frees the name as written, no other spelling
		}
		best := int32(-1)
		try := func(t *mcpTier) {
			if ids := t.exact[name]; len(ids) > 0 && (best < 0 || ids[0] < best) {
				best = ids[0]
			}
			for _, id := range t.globs {
				if best >= 0 && id >= best {
					return // file order: nothing later comes first
				}
				if e.rules[id].matches(name) {
					best = id
					return
				}
			}
		}
		try(&e.tiers[v])
		if ts := e.scoped[scope]; ts != nil {
			try(&ts[v])
		}
		if best >= 0 {
			return &e.rules[best]
		}
		if v == Free {
			return nil
		}
	}
}

func (r *mcpRule) matches(name string) bool {
	for i := range r.patterns {
		if r.patterns[i].match(name) {
			return true
		}
	}
	return false
}

// mcpSections is how [[mcp]] sections are counted and named.
var mcpSections = sectionKind{
	key: "mcp", noun: "endpoint", max: maxMCPEndpoints,
	tooMany: "more than %d MCP endpoints; the gate decides at most that many",
	name:    secretName,
	badName: "the name uses letters, digits, '.', '_' and '-' only, at most 64: it names the endpoint in X-LockHTTP-Rule and in the fingerprint of its calls",
}

// mcp compiles the [[mcp]] endpoints; [sources] and splice are compiled first.
func (c *compiler) mcp(p *Policy, fes []FileMCP) {
	seen := make(map[string]int)
	targets := map[string]string{} // host and path key → endpoint name
	for i, fe := range fes {
		path, label := c.sectionName(&mcpSections, seen, i, fe.Name)
		at := func(k string) []string { return append(append([]string{}, path...), k) }
		e := &MCPEndpoint{Name: fe.Name, Path: fe.Path}
		hostOK := false
		switch hp, err := parseHostPattern(fe.Host); {
		case fe.Host == "":
			c.errorf(at("host"), label, "host is missing; give the MCP server's host name, as host = \"mcp.example.com\"")
		case err != nil:
			c.errorf(at("host"), label, "host: %v", err)
		case hp.any || hp.suffix != "":
			c.errorf(at("host"), label, "host %q is a pattern; an endpoint is one server: give its exact host name", fe.Host)
		case p.splice.lookup(hp.name) != "":
			c.errorf(at("host"), label, "host %q is on the splice list (%q), so the gate never decrypts it and never sees its calls; remove it from splice, or remove the endpoint", fe.Host, p.splice.lookup(hp.name))
		default:
			e.Host, hostOK = hp.name, true
		}
		switch {
		case fe.Path == "":
			c.errorf(at("path"), label, "path is missing; give the endpoint's URL path, as path = \"/mcp\"")
		case !strings.HasPrefix(fe.Path, "/"):
			c.errorf(at("path"), label, "path %q does not begin with \"/\"; give the URL path alone, as path = \"/mcp\"", fe.Path)
		case len(fe.Path) > maxMCPPath:
			c.errorf(at("path"), label, "path is %d bytes, over %d", len(fe.Path), maxMCPPath)
		case strings.ContainsAny(fe.Path, "?#*") || strings.IndexFunc(fe.Path, func(r rune) bool { return r <= ' ' || r >= 0x7f }) >= 0:
			c.errorf(at("path"), label, "path %q holds a query, a fragment, a '*', white space or a character outside ASCII; give the URL path alone, percent-encoded, as path = \"/mcp\"", fe.Path)
		default:
			e.key = mcpPathKeys(fe.Path)[0]
			if hostOK {
				t := e.Host + "\x00" + e.key
				if prev, dup := targets[t]; dup {
					c.errorf(at("path"), label, "the same endpoint as [[mcp]] %q (paths are matched in any case, with or without a trailing slash); keep one", prev)
				} else {
					targets[t] = fe.Name
				}
			}
		}
		c.mcpRules(p, e, fe.Rules, path, label)
		p.mcp = append(p.mcp, e)
		if hostOK && e.key != "" {
			if p.mcpByHost == nil {
				p.mcpByHost = make(map[string][]*MCPEndpoint)
			}
			p.mcpByHost[e.Host] = append(p.mcpByHost[e.Host], e)
		}
	}
}

// mcpRules compiles the rules of endpoint e, at path (labelled label) in the file.
func (c *compiler) mcpRules(p *Policy, e *MCPEndpoint, frs []FileMCPRule, path []string, label string) {
	if len(frs) > maxMCPRules {
		c.errorf(append(append([]string{}, path...), "rule"), label, "more than %d rules; an endpoint takes at most that many (a rule's tools are a list)", maxMCPRules)
	}
	seen := make(map[string]int)
	for i, fr := range frs {
		rpath := append(append([]string{}, path...), "rule", itoa(i))
		at := func(k string) []string { return append(append([]string{}, rpath...), k) }
		rlabel := fmt.Sprintf("%s rule %q", label, fr.Name)
		switch j, dup := seen[fr.Name]; {
		case fr.Name == "":
			rlabel = fmt.Sprintf("%s rule #%d", label, i+1)
			c.errorf(at("name"), rlabel, "name is missing; give every rule of the endpoint a unique name = \"...\"")
		case !secretName.MatchString(fr.Name):
			c.errorf(at("name"), rlabel, "the name uses letters, digits, '.', '_' and '-' only, at most 64: it is sent in X-LockHTTP-Rule")
		case dup:
			c.errorf(at("name"), rlabel, "the name is used by rule #%d of the endpoint too; rule names must be unique within an endpoint", j+1)
		default:
			seen[fr.Name] = i
		}
		r := mcpRule{name: "mcp:" + e.Name + ":" + fr.Name, tools: fr.Tools}
		v, ok := verdicts[fr.Verdict]
		switch {
		case fr.Verdict == "":
			c.errorf(at("verdict"), rlabel, "verdict is missing; use one of \"free\", \"ask\", \"deny\"")
		case !ok:
			c.errorf(at("verdict"), rlabel, "verdict %q is unknown; use one of \"free\", \"ask\", \"deny\"", fr.Verdict)
		}
		r.verdict = v
		if len(fr.Tools) == 0 {
			c.errorf(at("tools"), rlabel, "tools is missing; name the tools the rule decides, as tools = [\"read_*\"] (\"*\" for every tool)")
		}
		keys := spellings{}
		for _, t := range fr.Tools {
			if why := toolPatternProblem(t); why != "" {
				c.errorf(at("tools"), rlabel, "tools: %q %s", t, why)
				continue
			}
			text := t
			what := "tools"
			if v != Free {
				text, what = foldName(t), "tools, in any case (an ask or deny rule matches names in any case)"
			}
			if msg, dup := keys.dup(text, t, what); dup {
				c.errorf(at("tools"), rlabel, "tools: %s", msg)
				continue
			}
			r.patterns = append(r.patterns, toolPattern{parts: strings.Split(text, "*")})
		}
		r.scope = c.ruleScope(p, fr.Containers, at("containers"), rlabel)
		r.reason = mcpRuleReason(&fr, v)
		e.rules = append(e.rules, r)
	}
	unknown := p.unknownScope()
	for id := range e.rules {
		r := &e.rules[id]
		if r.scope == nil {
			e.tiers[r.verdict].add(int32(id), r)
			continue
		}
		if e.scoped == nil {
			e.scoped = make(map[int32]*[3]mcpTier)
		}
		in := func(c int32) {
			ts := e.scoped[c]
			if ts == nil {
				ts = new([3]mcpTier)
				e.scoped[c] = ts
			}
			ts[r.verdict].add(int32(id), r)
		}
		for _, c := range r.scope {
			in(c)
		}
		if r.verdict != Free {
			in(unknown)
		}
	}
}

// toolPatternProblem says what is wrong with a pattern of tools, or "".
func toolPatternProblem(t string) string {
	switch {
	case t == "":
		return "is empty; name a tool, or \"*\" for every tool"
	case len(t) > maxToolPattern:
		return fmt.Sprintf("is over %d bytes", maxToolPattern)
	case !utf8.ValidString(t):
		return "is not UTF-8"
	case strings.IndexFunc(t, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) }) >= 0:
		return "holds white space or a control or invisible character, which no tool name the gate decides holds"
	}
	return ""
}

func mcpRuleReason(fr *FileMCPRule, v Verdict) string {
	var b strings.Builder
	fmt.Fprintf(&b, "rule %q (%s): tools %s", fr.Name, strings.ToLower(v.String()), strings.Join(fr.Tools, ", "))
	if fr.Containers != nil {
		b.WriteString(" for ")
		b.WriteString(containersWords(fr.Containers))
	}
	if fr.Reason != "" {
		b.WriteString(": ")
		b.WriteString(fr.Reason)
	}
	return b.String()
}

// mcp compares the [[mcp]] endpoints by name. An endpoint added frees its protocol's messages
// and what its free rules list: a loosening. One removed leaves its requests to the [[rule]]s,
// which ask about them: a tightening, unless a free rule names its host or the endpoint had deny
// rules (what they refused then asks). An
// endpoint moved to another host or path is one removed and one added. Its rules are compared
// by name as [[rule]]s are, a rule's reach being its tools and containers.
func (c *Comparison) mcp(old, new *Policy) {
	o, n := old.file.MCP, new.file.MCP
	om := make(map[string]*FileMCP, len(o))
	for i := range o {
		om[o[i].Name] = &o[i]
	}
	nm := make(map[string]bool, len(n))
	where := func(e *FileMCP) string { return "https://" + e.Host + e.Path }
	removed := func(e *FileMCP, why string) {
		for _, r := range e.Rules {
			if verdicts[r.Verdict] == Deny {
				c.loose("mcp %q: - endpoint %s%s, and its deny rule %q with it: the calls it refused then ask", e.Name, where(e), why, r.Name)
				return
			}
		}
		host, _ := floor.Host(e.Host)
		for _, r := range new.file.Rules {
			if verdicts[r.Verdict] == Free && covers(r.Hosts, host) {
				c.loose("mcp %q: - endpoint %s%s, and the free rule %q names its host: its requests are then decided by that rule", e.Name, where(e), why, r.Name)
				return
			}
		}
		c.tight("mcp %q: - endpoint %s%s (its requests are then decided by the rules, which ask)", e.Name, where(e), why)
	}
	for i := range n {
		e := &n[i]
		nm[e.Name] = true
		prev, ok := om[e.Name]
		switch {
		case !ok:
			c.loose("mcp %q: + endpoint %s (its protocol's own messages are free)", e.Name, where(e))
			c.mcpRules(e.Name, nil, e.Rules)
		case mcpTarget(prev) != mcpTarget(e):
			removed(prev, " (moved)")
			c.loose("mcp %q: + endpoint %s (moved from %s)", e.Name, where(e), where(prev))
			c.mcpRules(e.Name, nil, e.Rules)
		default:
			c.mcpRules(e.Name, prev.Rules, e.Rules)
		}
	}
	for i := range o {
		if !nm[o[i].Name] {
			removed(&o[i], "")
		}
	}
}

// mcpTarget is the host and path an endpoint is matched by.
func mcpTarget(e *FileMCP) string {
	host, _ := floor.Host(e.Host)
	return host + "\x00" + mcpPathKeys(e.Path)[0]
}

func mcpRuleWords(r FileMCPRule) string {
	s := "tools " + strings.Join(r.Tools, ", ")
	if r.Containers != nil {
		s += " for " + containersWords(r.Containers)
	}
	return s
}

// mcpRules compares the rules of one endpoint by name; a renamed rule is one removed and one
// added. A free rule loosens by widening, an ask or deny rule by narrowing, and any rule by a
// more permissive verdict.
func (c *Comparison) mcpRules(ep string, old, new []FileMCPRule) {
	om := make(map[string]FileMCPRule, len(old))
	for _, r := range old {
		om[r.Name] = r
	}
	nm := make(map[string]bool, len(new))
	for _, r := range new {
		nm[r.Name] = true
		prev, ok := om[r.Name]
		if !ok {
			if verdicts[r.Verdict] == Free {
				c.loose("mcp %q rule %q: + free %s", ep, r.Name, mcpRuleWords(r))
			} else {
				c.tight("mcp %q rule %q: + %s %s", ep, r.Name, r.Verdict, mcpRuleWords(r))
			}
			continue
		}
		ov, nv := verdicts[prev.Verdict], verdicts[r.Verdict]
		if nv < ov {
			c.loose("mcp %q rule %q: verdict %s → %s", ep, r.Name, prev.Verdict, r.Verdict)
		} else if nv > ov {
			c.tight("mcp %q rule %q: verdict %s → %s", ep, r.Name, prev.Verdict, r.Verdict)
		}
		widened, narrowed := containersDiff(prev.Containers, r.Containers)
		for _, t := range r.Tools {
			if !toolCovered(prev.Tools, t) {
				widened = append(widened, fmt.Sprintf("tools: + %s", t))
			}
		}
		for _, t := range prev.Tools {
			if !toolCovered(r.Tools, t) {
				narrowed = append(narrowed, fmt.Sprintf("tools: - %s", t))
			}
		}
		for _, w := range widened {
			if nv == Free {
				c.loose("mcp %q rule %q: %s", ep, r.Name, w)
			} else {
				c.tight("mcp %q rule %q: %s", ep, r.Name, w)
			}
		}
		for _, w := range narrowed {
			if ov != Free {
				c.loose("mcp %q rule %q: %s", ep, r.Name, w)
			} else {
				c.tight("mcp %q rule %q: %s", ep, r.Name, w)
			}
		}
	}
	for _, r := range old {
		if nm[r.Name] {
			continue
		}
		if verdicts[r.Verdict] == Free {
			c.tight("mcp %q rule %q: - free %s", ep, r.Name, mcpRuleWords(r))
		} else {
			c.loose("mcp %q rule %q: - %s %s (removed)", ep, r.Name, r.Verdict, mcpRuleWords(r))
		}
	}
}

// toolCovered reports whether some pattern of set matches every name p matches, as written
// (a pattern and its own spelling in another case are taken for different reaches: asking a
// human too often is safe).
func toolCovered(set []string, p string) bool {
	for _, s := range set {
		switch {
		case s == "*", s == p:
			return true
		case !strings.Contains(p, "*") && wildMatch(strings.Split(s, "*"), p):
			return true
		case strings.HasSuffix(s, "*") && !strings.Contains(s[:len(s)-1], "*") && strings.HasPrefix(p, s[:len(s)-1]):
			return true
		}
	}
	return false
}

// mcpDecision is how the gate decides one MCP message of a request (host, HTTP method, path,
// container): the [[rule]]s and deny lists first (a refusal stands), then the endpoint the
// request goes to, if any. The differential check and its property test decide MCP requests
// with it, as judge.Decide does.
func (p *Policy) mcpDecision(host, method, path, container string, m MCPMessage) Decision {
	d := p.Evaluate(Request{Host: host, Method: method, Path: path, Container: container})
	if d.Verdict == Deny {
		return d
	}
	if e := p.MCP(host, path); e != nil {
		return p.EvaluateMCP(e, container, m)
	}
	return d
}

// mcpSamples are tool names that tell the tool patterns of both policies' endpoints on host
// apart: each pattern filled with fill and with nothing, in upper case, and a name no pattern
// names.
func mcpSamples(host, fill string, ps ...*Policy) []string {
	set := map[string]bool{}
	var out []string
	add := func(s string) {
		if s != "" && !set[s] {
			set[s] = true
			out = append(out, s)
		}
	}
	for _, p := range ps {
		for _, e := range p.mcpByHost[host] {
			for _, r := range e.rules {
				for _, t := range r.tools {
					for _, s := range []string{strings.ReplaceAll(t, "*", fill), strings.ReplaceAll(t, "*", "")} {
						add(s)
						add(strings.ToUpper(s))
					}
				}
			}
		}
	}
	add("lockhttp-unnamed-tool")
	slices.Sort(out)
	return out
}
