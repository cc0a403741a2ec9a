package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/lockhttp/lockhttp/internal/floor"
	"github.com/lockhttp/lockhttp/internal/secrets"
)

// Defaults for the zero values of [settings] and [floor].
const (
	// DefaultHold ends before the shortest default timeout of the common clients (pip's 15 s;
	// docs/ask.md, "How long a request is held"), so that each sees E_PENDING and its ticket.
	DefaultHold         = 10 * time.Second
	DefaultConnectGrant = 10 * time.Minute
	DefaultBufferLimit  = 8 << 20
	DefaultHeuristics   = "shadow"
	// The bounds of the bodies the gate holds and of the tickets a container may open.
	DefaultBodyTimeout      = 60 * time.Second
	DefaultBodyMinRate      = 1 << 10
	DefaultHeldLimit        = 256 << 20
	DefaultHeldPerContainer = 64 << 20
	DefaultMaxPending       = 50
)

// DefaultPorts are the destination ports allowed when [floor] allow_ports is empty.
var DefaultPorts = []int{80, 443}

// Limits on settings: beyond them a value is more likely a mistake than a choice.
const (
	maxHold         = 30 * time.Minute
	maxConnectGrant = 24 * time.Hour
	maxBufferLimit  = 256 << 20
	maxBodyTimeout  = 30 * time.Minute
	maxHeldLimit    = 16 << 30
	maxPending      = 10000
)

// Methods the policy knows; a request with another method never matches a rule that lists methods.
var knownMethods = []string{"GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE", "CONNECT", "TRACE",
	"PROPFIND", "PROPPATCH", "MKCOL", "COPY", "MOVE", "LOCK", "UNLOCK", "REPORT", "SEARCH", "QUERY"}

// methodBit is a method's bit in a rule's method set; 0 for a method the policy does not know.
func methodBit(m string) uint32 {
	for i, k := range knownMethods {
		if k == m {
			return 1 << uint(i)
		}
	}
	return 0
}

const readMethods = 1<<0 | 1<<1 | 1<<2 // GET, HEAD, OPTIONS

var connectBit = methodBit("CONNECT")

// Policy is a compiled policy: indexes built at load so that evaluation does no parsing. It is
// immutable and safe for concurrent use.
type Policy struct {
	// Version is "sha256:" and the hex SHA-256 of the file's bytes.
	Version  string
	Name     string
	Settings Settings
	Floor    Floor

	trusted hostSet
	deny    hostSet
	splice  hostSet
	rules   []rule
	index   hostIndex
	sources []source
	names   map[string]bool // container names
	// cids numbers the containers of [sources] in name order, from 0; the id len(cids) stands
	// for a container [sources] does not name (see unknownScope).
	cids map[string]int32
	// scoped reports that a rule or a [container.NAME] section names containers: only then
	// does evaluation look up the request's container.
	scoped bool
	// lists holds the [container.NAME] host lists by container id (the last for a container
	// [sources] does not name); nil when the file has no such section.
	lists []containerLists

	secretRules []SecretRule
	jwtHosts    []string
	injections  []Injection
	budgets     []Budget
	notify      []Notify
	// mcp are the [[mcp]] endpoints in file order; mcpByHost finds them by host.
	mcp       []*MCPEndpoint
	mcpByHost map[string][]*MCPEndpoint
	injectBy  map[string]int // exact host → index in injections
	// ClaudeCredentials is [claude] credentials: the path of the credentials file.
	ClaudeCredentials string
	// ClaudeBound maps a container to the SHA-256 hex of each Claude credential a human bound to
	// it by approving the ASK about it. It is not in the file: the console serves it beside the
	// approved policy (console.Served.Bound), and it is not part of Version.
	ClaudeBound map[string][]string

	file *File // the file as written, for Compare

	// withAgent is what the console refuses while an agent runs as a uid of its own
	// (RefusedWithAgent).
	withAgent Errors
}

// SecretRule is a [[secret]] compiled: checked as the gate's detector checks it
// (secrets.CheckCustom), so the detector builds from it; its hosts are the patterns as written.
type SecretRule struct {
	Name, Pattern string
	Hosts         []string
}

// Injection is an [[inject]] rule.
type Injection struct {
	Name          string
	Hosts         []string
	Header, Query string
	Secret        string
	Format        string // with {secret}; never empty after compile
	HTTP          bool   // plain http:// requests get it too (else they are refused)
	// Optional: while the gate lacks the secret, the rule adds nothing and requests pass with
	// the agent's own credential (else they are refused).
	Optional bool
}

// Value is the header or query value to write, given the secret.
func (in *Injection) Value(secret string) string {
	return strings.Replace(in.Format, "{secret}", secret, 1)
}

// SecretRules are the policy's [[secret]] rules.
func (p *Policy) SecretRules() []SecretRule { return p.secretRules }

// JWTHosts are the host patterns of [jwt] hosts, as written: where a JWT may go.
func (p *Policy) JWTHosts() []string { return p.jwtHosts }

// Injections are the policy's [[inject]] rules.
func (p *Policy) Injections() []Injection { return p.injections }

// InjectionFor returns the [[inject]] rule for host, or nil.
func (p *Policy) InjectionFor(host string) *Injection {
	if i, ok := p.injectBy[host]; ok {
		return &p.injections[i]
	}
	return nil
}

// Settings are [settings] with the defaults applied.
type Settings struct {
	Hold         time.Duration
	ConnectGrant time.Duration
	BufferLimit  int64
	Heuristics   string
	// BodyTimeout and BodyMinRate bound how long a body may take to arrive (see FileSettings).
	BodyTimeout time.Duration
	BodyMinRate int64
	// HeldLimit and HeldPerContainer bound the body bytes held for decisions.
	HeldLimit        int64
	HeldPerContainer int64
	// MaxPending is how many tickets one container may have waiting for a human.
	MaxPending int
	// HTTP2 reports that decrypted tunnels offer h2 by ALPN (settings.http2 = "on").
	HTTP2 bool
}

// Floor is [floor] compiled.
type Floor struct {
	AllowCIDRs []netip.Prefix
	AllowPorts []int
	Hosts      map[string]netip.Addr
}

type source struct {
	prefix    netip.Prefix
	container string
}

type rule struct {
	name    string
	verdict Verdict
	methods uint32 // 0: every method
	paths   []glob // empty: every path
	reason  string // the decision's reason, built at compile time
	// whole reports that the rule covers every request to its hosts (no methods, no paths).
	whole bool
	// connect reports that the rule names CONNECT: it decides tunnels at the domain.
	connect bool
	// scope holds the ids of the containers the rule decides for; nil: every container.
	scope []int32
}

// hostSet is a set of host patterns; the values are the patterns as written, for reasons.
type hostSet struct {
	all    string            // "*" when the set holds every host
	exact  map[string]string // name → pattern
	suffix map[string]string // "example.com" → "*.example.com"
}

func (s *hostSet) add(p hostPattern) {
	switch {
	case p.any:
		s.all = p.text
	case p.suffix != "":
		if s.suffix == nil {
			s.suffix = make(map[string]string)
		}
		s.suffix[p.suffix] = p.text
	default:
		if s.exact == nil {
			s.exact = make(map[string]string)
		}
		s.exact[p.name] = p.text
	}
}

// lookup returns the pattern that matches host, or "".
func (s *hostSet) lookup(host string) string {
	if p, ok := s.exact[host]; ok {
		return p
	}
	if s.suffix != nil {
		for h := host; ; {
			i := strings.IndexByte(h, '.')
			if i < 0 {
				break
			}
			h = h[i+1:]
			if p, ok := s.suffix[h]; ok {
				return p
			}
		}
	}
	return s.all
}

// hostIndex maps hosts to the rules that name them.
type hostIndex struct {
	all    *bucket
	exact  map[string]*bucket
	suffix map[string]*bucket
}

// bucket holds the rules of one host key, by verdict: evaluation tries deny rules first, then
// ask, then free, and stops at the first tier with a match. Rules for every container are in
// tiers; rules scoped to containers are in scoped, under each container they name, so a request
// tries only the rules of its own container.
type bucket struct {
	tiers [3]tier
	// scoped maps a container id to the tiers of the rules scoped to it; nil when the host has
	// no scoped rule.
	scoped map[int32]*[3]tier
}

// tier holds rules of one verdict, in file order. Rules whose every path pattern begins with a
// literal segment are also found by that segment, so a request only tries rules that can match
// its path.
type tier struct {
	any   []int32            // rules without paths, or with a path that does not begin with a literal
	first map[string][]int32 // first literal path segment → rules
}

func (x *hostIndex) bucketFor(p hostPattern) *bucket {
	var m map[string]*bucket
	var k string
	switch {
	case p.any:
		if x.all == nil {
			x.all = &bucket{}
		}
		return x.all
	case p.suffix != "":
		m, k = x.suffix, p.suffix
	default:
		m, k = x.exact, p.name
	}
	b := m[k]
	if b == nil {
		b = &bucket{}
		m[k] = b
	}
	return b
}

// add indexes rule id under the host pattern p: for every container, or under each container of
// its scope. A scoped ask or deny rule is also indexed under unknown, the id of a container
// [sources] does not name, so that a request no container of the policy sent meets every
// restrictive rule and no scoped free rule.
func (x *hostIndex) add(p hostPattern, id int32, r *rule, unknown int32) {
	b := x.bucketFor(p)
	if r.scope == nil {
		b.tiers[r.verdict].add(id, r)
		return
	}
	if b.scoped == nil {
		b.scoped = make(map[int32]*[3]tier)
	}
	in := func(c int32) {
		ts := b.scoped[c]
		if ts == nil {
			ts = new([3]tier)
			b.scoped[c] = ts
		}
		ts[r.verdict].add(id, r)
	}
	for _, c := range r.scope {
		in(c)
	}
	if r.verdict != Free {
		in(unknown)
	}
}

// add appends rule id, found by the first literal segments of its paths when it has them.
func (t *tier) add(id int32, r *rule) {
	firsts := r.firstSegments()
	if firsts == nil {
		t.any = appendOnce(t.any, id)
		return
	}
	if t.first == nil {
		t.first = make(map[string][]int32)
	}
	for _, f := range firsts {
		t.first[f] = appendOnce(t.first[f], id)
	}
}

// firstSegments returns the literal first segments of the rule's paths, or nil when the rule
// has no paths or a path that does not begin with a literal segment.
func (r *rule) firstSegments() []string {
	if len(r.paths) == 0 {
		return nil
	}
	var out []string
	for _, g := range r.paths {
		if len(g.segs) == 0 || g.segs[0].kind != segLiteral {
			return nil
		}
		out = append(out, g.segs[0].lit)
	}
	return out
}

func appendOnce(ids []int32, id int32) []int32 {
	if len(ids) > 0 && ids[len(ids)-1] == id {
		return ids
	}
	return append(ids, id)
}

// hostPattern is one parsed host pattern.
type hostPattern struct {
	text   string
	any    bool   // "*"
	suffix string // for "*.example.com": "example.com"
	name   string // for an exact name
}

// key is what the pattern names once normalised: two spellings with one key name the same hosts.
func (p hostPattern) key() string {
	switch {
	case p.any:
		return "*"
	case p.suffix != "":
		return "*." + p.suffix
	}
	return p.name
}

// names says in words what the pattern names, for the error of a duplicate.
func (p hostPattern) names() string {
	if p.name != "" {
		return "host"
	}
	return "hosts"
}

// spellings finds the entries of one list (or the keys of one table) that name the same thing
// once normalised: a policy text must compile to one policy, so two spellings of one key are an
// error rather than a choice left to the order of a map.
type spellings map[string]string // normalised key → the entry as first written

// dup records text under its normalised key. When the key is already taken it returns the
// problem and the fix: what names the same thing is said in words by what.
func (s spellings) dup(key, text, what string) (string, bool) {
	prev, ok := s[key]
	if !ok {
		s[key] = text
		return "", false
	}
	if prev == text {
		return fmt.Sprintf("%q is listed twice; remove one", text), true
	}
	return fmt.Sprintf("%q and %q name the same %s; keep one", prev, text, what), true
}

// sectionKind is an array of named tables ([[budget]], [[notify]]) whose names sectionName
// checks.
type sectionKind struct {
	key     string         // the table's key: "budget"
	noun    string         // what one section is called in a fix: "budget", "channel"
	max     int            // the most sections allowed
	tooMany string         // the fix past max, with %d for max
	name    *regexp.Regexp // what a name must match
	badName string         // the fix of a name that does not match
}

// sectionName checks the name of section i of kind k against the sections before it (seen
// maps a name to the first section that has it) and past the most allowed. It returns the
// section's path and the label its other problems are reported under.
func (c *compiler) sectionName(k *sectionKind, seen map[string]int, i int, name string) ([]string, string) {
	path := []string{k.key, itoa(i)}
	at := append(append([]string{}, path...), "name")
	label := fmt.Sprintf("%s %q", k.key, name)
	if i == k.max {
		c.errorf(path, label, k.tooMany, k.max)
	}
	switch j, dup := seen[name]; {
	case name == "":
		label = fmt.Sprintf("%s #%d", k.key, i+1)
		c.errorf(at, label, "name is missing; give every %s a unique name = \"...\"", k.noun)
	case !k.name.MatchString(name):
		c.errorf(at, label, "%s", k.badName)
	case dup:
		c.errorf(at, label, "the name is used by %s #%d too; %s names must be unique", k.key, j+1, k.noun)
	default:
		seen[name] = i
	}
	return path, label
}

func parseHostPattern(text string) (hostPattern, error) {
	if text == "*" {
		return hostPattern{text: text, any: true}, nil
	}
	name, wildcard := text, false
	if strings.HasPrefix(text, "*.") {
		name, wildcard = text[2:], true
	}
	if strings.Contains(name, "*") {
		return hostPattern{}, fmt.Errorf("host pattern %q: a * may only stand alone or begin the pattern, as in \"*.example.com\"", text)
	}
	if strings.Contains(name, ":") && !strings.HasPrefix(name, "[") {
		return hostPattern{}, fmt.Errorf("host pattern %q: patterns name hosts without a port; ports are [floor] allow_ports", text)
	}
	norm, r := floor.Host(name)
	if r != nil {
		if r.Check == floor.IPLiteral {
			return hostPattern{}, fmt.Errorf("host pattern %q is an IP literal, which the floor always refuses; give the address a name in [floor.hosts]", text)
		}
		return hostPattern{}, fmt.Errorf("host pattern %q: %s", text, r.Reason)
	}
	if wildcard {
		return hostPattern{text: text, suffix: norm}, nil
	}
	return hostPattern{text: text, name: norm}, nil
}

// Load decodes, validates and compiles a policy file. Its error is Errors: the problems of
// decoding and of the values together, in file order, so one load reports every problem it can
// find (all of them but after a TOML syntax error, which stops the reading).
func Load(name string, data []byte) (*Policy, error) {
	doc, errs := decode(name, data)
	if doc == nil {
		return nil, report(errs)
	}
	p, cerrs := doc.compile()
	if errs = append(errs, cerrs...); len(errs) > 0 {
		return nil, report(errs)
	}
	return p, nil
}

// Validate checks every value of the document; the errors name line, key and fix.
func (d *Document) Validate() error {
	_, err := d.Compile()
	return err
}

// Hash is the version of a policy text: "sha256:" and its hex SHA-256.
func Hash(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// compiler collects errors with their lines while it builds a Policy.
type compiler struct {
	d    *Document
	errs Errors
}

// errorf records a problem at the line of path. Compile reports the first maxErrors in file
// order, so every problem is kept until then. A problem under a value that did not decode is
// not one: the value was left zero.
func (c *compiler) errorf(path []string, key string, format string, args ...any) {
	if c.d.failedAt(path) {
		return
	}
	c.errs = append(c.errs, &Error{File: c.d.Name, Line: c.d.loc.line(path...), Key: key, Msg: fmt.Sprintf(format, args...)})
}

// Compile validates the document and builds the Policy.
func (d *Document) Compile() (*Policy, error) {
	p, errs := d.compile()
	if len(errs) > 0 {
		return nil, report(errs)
	}
	return p, nil
}

// compile validates the document and builds the Policy, or returns every problem it found.
func (d *Document) compile() (*Policy, Errors) {
	c := &compiler{d: d}
	f := &d.File
	p := &Policy{
		Version: Hash(d.Text),
		Name:    d.Name,
		index:   hostIndex{exact: make(map[string]*bucket), suffix: make(map[string]*bucket)},
		names:   make(map[string]bool),
		file:    f,
	}
	c.sources(p, f.Sources) // first: rules and sections name its containers
	c.hostList(&p.trusted, "trusted", f.Trusted)
	c.hostList(&p.deny, "deny", f.Deny)
	c.hostList(&p.splice, "splice", f.Splice)
	c.rules(p, f.Rules)
	c.containerSections(p, f.Containers)
	c.mcp(p, f.MCP) // after sources and splice
	c.floor(p, &f.Floor)
	c.settings(p, &f.Settings)
	c.secretRules(p, f.Secrets)
	c.jwt(p, &f.JWT)
	c.injections(p, f.Inject)
	c.budgets(p, f.Budgets)
	c.notify(p, f.Notify)
	p.ClaudeCredentials = f.Claude.Credentials
	if len(c.errs) > 0 {
		return nil, c.errs
	}
	return p, nil
}

func (c *compiler) hostList(set *hostSet, key string, patterns []string) {
	c.hostListAt(set, []string{key}, key, patterns)
}

// hostListAt compiles the host list at path (named key in errors) into set. Only a deny list
// may hold "*".
func (c *compiler) hostListAt(set *hostSet, path []string, key string, patterns []string) {
	seen := spellings{}
	deny := path[len(path)-1] == "deny"
	for _, t := range patterns {
		hp, err := parseHostPattern(t)
		if err != nil {
			c.errorf(path, key, "%v", err)
			continue
		}
		if hp.any && !deny {
			c.errorf(path, key, "\"*\" would name every host; list the hosts, or use a rule with hosts = [\"*\"]")
			continue
		}
		if msg, dup := seen.dup(hp.key(), t, hp.names()); dup {
			c.errorf(path, key, "%s", msg)
			continue
		}
		set.add(hp)
	}
}

var verdicts = map[string]Verdict{"free": Free, "ask": Ask, "deny": Deny}

func (c *compiler) rules(p *Policy, rules []FileRule) {
	seen := make(map[string]int)
	for i, fr := range rules {
		path := []string{"rule", itoa(i)}
		at := func(k string) []string { return append(append([]string{}, path...), k) }
		label := fmt.Sprintf("rule %q", fr.Name)
		if fr.Name == "" {
			label = fmt.Sprintf("rule #%d", i+1)
			c.errorf(at("name"), label, "name is missing; give every rule a unique name = \"...\"")
		} else if j, dup := seen[fr.Name]; dup {
			c.errorf(at("name"), label, "the name is used by rule #%d too; rule names must be unique", j+1)
		}
		seen[fr.Name] = i
		r := rule{name: fr.Name}
		v, ok := verdicts[fr.Verdict]
		if !ok {
			if fr.Verdict == "" {
				c.errorf(at("verdict"), label, "verdict is missing; use one of \"free\", \"ask\", \"deny\"")
			} else {
				c.errorf(at("verdict"), label, "verdict %q is unknown; use one of \"free\", \"ask\", \"deny\"", fr.Verdict)
			}
		}
		r.verdict = v
		if len(fr.Hosts) == 0 {
			c.errorf(at("hosts"), label, "hosts is missing; name the hosts the rule applies to, as in hosts = [\"github.com\"]")
		}
		var pats []hostPattern
		hosts := spellings{}
		for _, h := range fr.Hosts {
			hp, err := parseHostPattern(h)
			if err != nil {
				c.errorf(at("hosts"), label, "hosts: %v", err)
				continue
			}
			// The same name written twice the same way is harmless (the index holds a rule once
			// per host); two spellings of one name are refused like those of the lists.
			if prev, ok := hosts[hp.key()]; ok && prev != h {
				c.errorf(at("hosts"), label, "hosts: %q and %q name the same %s; keep one", prev, h, hp.names())
				continue
			}
			hosts[hp.key()] = h
			pats = append(pats, hp)
		}
		for _, m := range fr.Methods {
			bit := methodBit(m)
			if bit == 0 {
				fix := "use one of " + strings.Join(knownMethods, ", ")
				if up := strings.ToUpper(m); methodBit(up) != 0 {
					fix = fmt.Sprintf("methods are upper case: write %q", up)
				}
				c.errorf(at("methods"), label, "unknown method %q; %s", m, fix)
				continue
			}
			if r.methods&bit != 0 {
				c.errorf(at("methods"), label, "method %q is listed twice", m)
			}
			r.methods |= bit
		}
		for _, pat := range fr.Paths {
			g, err := compileGlob(pat, r.verdict != Free)
			if err != nil {
				c.errorf(at("paths"), label, "%v", err)
				continue
			}
			r.paths = append(r.paths, g)
		}
		if r.methods&connectBit != 0 && len(fr.Paths) > 0 {
			c.errorf(at("paths"), label, "a CONNECT has no path; remove paths or the CONNECT method")
		}
		r.whole = r.methods == 0 && len(fr.Paths) == 0
		r.connect = r.methods&connectBit != 0
		r.scope = c.ruleScope(p, fr.Containers, at("containers"), label)
		r.reason = ruleReason(&fr, r.verdict)
		id := int32(len(p.rules))
		p.rules = append(p.rules, r)
		for _, hp := range pats {
			p.index.add(hp, id, &p.rules[id], p.unknownScope())
		}
	}
}

func ruleReason(fr *FileRule, v Verdict) string {
	var b strings.Builder
	fmt.Fprintf(&b, "rule %q (%s): ", fr.Name, strings.ToLower(v.String()))
	if len(fr.Methods) > 0 {
		b.WriteString(strings.Join(fr.Methods, ","))
	} else {
		b.WriteString("any method")
	}
	b.WriteString(" on ")
	b.WriteString(strings.Join(fr.Hosts, ", "))
	if len(fr.Paths) > 0 {
		b.WriteString(" at ")
		b.WriteString(strings.Join(fr.Paths, ", "))
	}
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

func (c *compiler) floor(p *Policy, ff *FileFloor) {
	cidrs := spellings{}
	for _, s := range ff.AllowCIDRs {
		pfx, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				c.errorf([]string{"floor", "allow_cidrs"}, "floor.allow_cidrs", "%q is not an address or CIDR; write it like \"10.0.0.0/8\" or \"127.0.0.1\"", s)
				continue
			}
			pfx = netip.PrefixFrom(a, a.BitLen())
		}
		if pfx.Masked() != pfx {
			c.errorf([]string{"floor", "allow_cidrs"}, "floor.allow_cidrs", "%q has host bits set; did you mean %q?", s, pfx.Masked().String())
			continue
		}
		if pfx.Bits() == 0 {
			c.errorf([]string{"floor", "allow_cidrs"}, "floor.allow_cidrs", "%q would open every address; name the ranges you need", s)
			continue
		}
		if msg, dup := cidrs.dup(pfx.String(), s, addresses(pfx)); dup {
			c.errorf([]string{"floor", "allow_cidrs"}, "floor.allow_cidrs", "%s", msg)
			continue
		}
		p.Floor.AllowCIDRs = append(p.Floor.AllowCIDRs, pfx)
	}
	seen := make(map[int]bool)
	for _, port := range ff.AllowPorts {
		if port < 1 || port > 65535 {
			c.errorf([]string{"floor", "allow_ports"}, "floor.allow_ports", "%d is not a port; use 1 to 65535", port)
			continue
		}
		if seen[port] {
			c.errorf([]string{"floor", "allow_ports"}, "floor.allow_ports", "%d is listed twice", port)
		}
		seen[port] = true
		p.Floor.AllowPorts = append(p.Floor.AllowPorts, port)
	}
	if len(p.Floor.AllowPorts) == 0 {
		p.Floor.AllowPorts = append([]int(nil), DefaultPorts...)
	}
	// The names are taken in file order, never in the order of the map: which of two spellings
	// of one name is refused must not change from one load to the next.
	names := make([]string, 0, len(ff.Hosts))
	for name := range ff.Hosts {
		names = append(names, name)
	}
	line := func(name string) int { return c.d.loc.line("floor", "hosts", name) }
	sort.Slice(names, func(i, j int) bool {
		if li, lj := line(names[i]), line(names[j]); li != lj {
			return li < lj
		}
		return names[i] < names[j]
	})
	p.Floor.Hosts = make(map[string]netip.Addr, len(ff.Hosts))
	hosts := spellings{}
	for _, name := range names {
		addr := ff.Hosts[name]
		path := []string{"floor", "hosts", name}
		key := "floor.hosts." + name
		norm, r := floor.Host(name)
		if r != nil {
			c.errorf(path, key, "%s; the keys of [floor.hosts] are host names", r.Reason)
			continue
		}
		if msg, dup := hosts.dup(norm, name, "host"); dup {
			c.errorf(path, "floor.hosts", "%s", msg)
			continue
		}
		a, err := netip.ParseAddr(addr)
		if err != nil || a.Zone() != "" {
			c.errorf(path, key, "%q is not an IP address; write it like \"10.1.2.3\" or \"fd00::5\"", addr)
			continue
		}
		p.Floor.Hosts[norm] = a.Unmap()
	}
}

func (c *compiler) sources(p *Policy, src map[string][]string) {
	names := make([]string, 0, len(src))
	for name := range src {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		path := []string{"sources", name}
		key := "sources." + name
		if !validContainerName(name) {
			c.errorf(path, key, "container names use a-z, 0-9, '.', '_' and '-' only, starting with a letter or digit")
			continue
		}
		if len(src[name]) == 0 {
			c.errorf(path, key, "no addresses; list the addresses or CIDRs this container's connections come from")
		}
		p.names[name] = true
		if p.cids == nil {
			p.cids = make(map[string]int32)
		}
		p.cids[name] = int32(len(p.cids))
		seen := spellings{}
		for _, s := range src[name] {
			pfx, err := netip.ParsePrefix(s)
			if err != nil {
				a, aerr := netip.ParseAddr(s)
				if aerr != nil || a.Zone() != "" {
					c.errorf(path, key, "%q is not an address or CIDR; write it like \"172.30.0.0/24\" or \"127.0.0.1\"", s)
					continue
				}
				pfx = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
			}
			if pfx.Masked() != pfx {
				c.errorf(path, key, "%q has host bits set; did you mean %q?", s, pfx.Masked().String())
				continue
			}
			if msg, dup := seen.dup(pfx.String(), s, addresses(pfx)); dup {
				c.errorf(path, key, "%s", msg)
				continue
			}
			for _, o := range p.sources {
				if o.prefix.Overlaps(pfx) && o.container != name {
					c.errorf(path, key, "%q overlaps %q of container %q; a source address must name one container", s, o.prefix.String(), o.container)
				}
			}
			p.sources = append(p.sources, source{prefix: pfx, container: name})
		}
	}
}

// addresses says in words what a prefix names, for the error of a duplicate.
func addresses(p netip.Prefix) string {
	if p.IsSingleIP() {
		return "address"
	}
	return "addresses"
}

func validContainerName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || (i > 0 && (c == '.' || c == '_' || c == '-'))
		if !ok {
			return false
		}
	}
	return true
}

func (c *compiler) settings(p *Policy, fs *FileSettings) {
	s := &p.Settings
	s.Hold = durationOr(fs.Hold, DefaultHold)
	if fs.Hold.Set && (fs.Hold.Duration <= 0 || fs.Hold.Duration > maxHold) {
		c.errorf([]string{"settings", "hold"}, "settings.hold", "%s is out of range; use more than 0s and at most %s", fs.Hold.Duration, maxHold)
	}
	s.ConnectGrant = durationOr(fs.ConnectGrant, DefaultConnectGrant)
	if fs.ConnectGrant.Set && (fs.ConnectGrant.Duration <= 0 || fs.ConnectGrant.Duration > maxConnectGrant) {
		c.errorf([]string{"settings", "connect_grant"}, "settings.connect_grant", "%s is out of range; use more than 0s and at most %s", fs.ConnectGrant.Duration, maxConnectGrant)
	}
	s.BufferLimit = DefaultBufferLimit
	if fs.BufferLimit.Set {
		s.BufferLimit = fs.BufferLimit.Bytes
		if s.BufferLimit < 1024 || s.BufferLimit > maxBufferLimit {
			c.errorf([]string{"settings", "buffer_limit"}, "settings.buffer_limit", "%d bytes is out of range; use 1KiB to 256MiB", s.BufferLimit)
		}
	}
	s.BodyTimeout = durationOr(fs.BodyTimeout, DefaultBodyTimeout)
	if fs.BodyTimeout.Set && (fs.BodyTimeout.Duration < time.Second || fs.BodyTimeout.Duration > maxBodyTimeout) {
		c.errorf([]string{"settings", "body_timeout"}, "settings.body_timeout", "%s is out of range; use 1s to %s", fs.BodyTimeout.Duration, maxBodyTimeout)
	}
	s.BodyMinRate = sizeOr(fs.BodyMinRate, DefaultBodyMinRate)
	if fs.BodyMinRate.Set && (s.BodyMinRate < 1 || s.BodyMinRate > maxBufferLimit) {
		c.errorf([]string{"settings", "body_min_rate"}, "settings.body_min_rate", "%d bytes per second is out of range; use 1 to 256MiB (a body slower than this after its first 5 seconds is refused)", s.BodyMinRate)
	}
	s.HeldLimit = sizeOr(fs.HeldLimit, DefaultHeldLimit)
	if fs.HeldLimit.Set && (s.HeldLimit < s.BufferLimit || s.HeldLimit > maxHeldLimit) {
		c.errorf([]string{"settings", "held_limit"}, "settings.held_limit", "%d bytes is out of range; use buffer_limit (%d bytes) to 16GiB", s.HeldLimit, s.BufferLimit)
	}
	s.HeldPerContainer = sizeOr(fs.HeldPerContainer, DefaultHeldPerContainer)
	if fs.HeldPerContainer.Set && (s.HeldPerContainer < s.BufferLimit || s.HeldPerContainer > s.HeldLimit) {
		c.errorf([]string{"settings", "held_per_container"}, "settings.held_per_container", "%d bytes is out of range; use buffer_limit (%d bytes) to held_limit (%d bytes)", s.HeldPerContainer, s.BufferLimit, s.HeldLimit)
	}
	if !fs.HeldPerContainer.Set && s.HeldPerContainer > s.HeldLimit {
		s.HeldPerContainer = s.HeldLimit
	}
	if !fs.HeldPerContainer.Set && s.HeldPerContainer < s.BufferLimit {
		s.HeldPerContainer = min(s.BufferLimit, s.HeldLimit)
	}
	if !fs.HeldLimit.Set && s.HeldLimit < s.BufferLimit {
		s.HeldLimit = s.BufferLimit
	}
	s.MaxPending = DefaultMaxPending
	if fs.MaxPending != 0 {
		s.MaxPending = fs.MaxPending
		if fs.MaxPending < 1 || fs.MaxPending > maxPending {
			c.errorf([]string{"settings", "max_pending"}, "settings.max_pending", "%d is out of range; use 1 to %d", fs.MaxPending, maxPending)
		}
	}
	switch fs.HTTP2 {
	case "", "on":
		s.HTTP2 = true
	case "off":
	default:
		c.errorf([]string{"settings", "http2"}, "settings.http2", "%q is unknown; use \"on\" (offer h2 inside decrypted tunnels) or \"off\" (http/1.1 only)", fs.HTTP2)
	}
	switch fs.Heuristics {
	case "":
		s.Heuristics = DefaultHeuristics
	case "shadow", "enforce":
		s.Heuristics = fs.Heuristics
	default:
		c.errorf([]string{"settings", "heuristics"}, "settings.heuristics", "%q is unknown; use \"shadow\" (log the score) or \"enforce\" (ask above the threshold)", fs.Heuristics)
	}
}

func sizeOr(s Size, def int64) int64 {
	if s.Set {
		return s.Bytes
	}
	return def
}

func durationOr(d Duration, def time.Duration) time.Duration {
	if d.Set {
		return d.Duration
	}
	return def
}

var secretName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// secretRules checks each [[secret]] with secrets.CheckCustom, the check the gate's detector
// makes when it is built from the policy: a rule it would refuse is refused here, at its line,
// rather than approved and left to fail in the gate.
func (c *compiler) secretRules(p *Policy, rules []FileSecret) {
	seen := map[string]bool{}
	for i, fs := range rules {
		path := []string{"secret", itoa(i)}
		at := func(k string) []string { return append(append([]string{}, path...), k) }
		label := fmt.Sprintf("secret %q", fs.Name)
		if fs.Name == "" {
			label = fmt.Sprintf("secret #%d", i+1)
		}
		err := secrets.CheckCustom(secrets.Custom{Name: fs.Name, Pattern: fs.Pattern, Hosts: fs.Hosts})
		var ce *secrets.CustomError
		switch {
		case errors.As(err, &ce):
			c.errorf(at(ce.Field), label, "%s", ce.Msg)
		case err != nil:
			c.errorf(path, label, "%v", err)
		}
		if seen[fs.Name] && (ce == nil || ce.Field != "name") {
			c.errorf(at("name"), label, "the name is used twice; secret names must be unique")
		}
		seen[fs.Name] = true
		// The detector matches hosts normalised; two spellings of one are one host.
		hosts := spellings{}
		for _, h := range fs.Hosts {
			hp, err := parseHostPattern(h)
			if err != nil {
				continue // CheckCustom has said why
			}
			if msg, dup := hosts.dup(hp.key(), h, hp.names()); dup {
				c.errorf(at("hosts"), label, "hosts: %s", msg)
			}
		}
		p.secretRules = append(p.secretRules, SecretRule{Name: fs.Name, Pattern: fs.Pattern, Hosts: fs.Hosts})
	}
}

// jwt compiles [jwt]: its hosts are checked as the gate's detector checks them
// (secrets.CheckJWTHosts), so the detector builds from them.
func (c *compiler) jwt(p *Policy, fj *FileJWT) {
	path := []string{"jwt", "hosts"}
	seen := spellings{}
	for _, h := range fj.Hosts {
		if err := secrets.CheckJWTHosts([]string{h}); err != nil {
			c.errorf(path, "jwt.hosts", "%v", err)
			continue
		}
		hp, err := parseHostPattern(h)
		switch {
		case err != nil:
			c.errorf(path, "jwt.hosts", "%v", err)
			continue
		case hp.any:
			c.errorf(path, "jwt.hosts", "\"*\" would let every JWT go to every host; list the hosts your agent's tokens are for")
			continue
		}
		if msg, dup := seen.dup(hp.key(), h, hp.names()); dup {
			c.errorf(path, "jwt.hosts", "%s", msg)
			continue
		}
		p.jwtHosts = append(p.jwtHosts, h)
	}
}

var tokenRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

// notInjectable are headers the gate will not set: framing, routing and hop-by-hop headers.
var notInjectable = map[string]bool{"host": true, "content-length": true, "transfer-encoding": true,
	"connection": true, "proxy-authorization": true, "proxy-connection": true, "keep-alive": true,
	"te": true, "trailer": true, "upgrade": true, "content-type": true}

func (c *compiler) injections(p *Policy, rules []FileInject) {
	p.injectBy = map[string]int{}
	seen := map[string]bool{}
	for i, fi := range rules {
		path := []string{"inject", itoa(i)}
		at := func(k string) []string { return append(append([]string{}, path...), k) }
		label := fmt.Sprintf("inject %q", fi.Name)
		if fi.Name == "" {
			c.errorf(at("name"), label, "name is missing; give every inject rule a unique name")
		} else if seen[fi.Name] {
			c.errorf(at("name"), label, "the name is used twice; inject names must be unique")
		}
		seen[fi.Name] = true
		switch {
		case (fi.Header == "") == (fi.Query == ""):
			c.errorf(at("header"), label, "give exactly one of header = \"...\" or query = \"...\"")
		case fi.Header != "" && !tokenRE.MatchString(fi.Header):
			c.errorf(at("header"), label, "header %q is not a header name", fi.Header)
		case fi.Header != "" && notInjectable[strings.ToLower(fi.Header)]:
			c.errorf(at("header"), label, "the gate does not set %s: it frames or routes the request", fi.Header)
		case fi.Query != "" && strings.ContainsAny(fi.Query, "&=#?% "):
			c.errorf(at("query"), label, "query parameter %q: use a plain name", fi.Query)
		}
		if !secretName.MatchString(fi.Secret) {
			c.errorf(at("secret"), label, "secret is missing or not of letters, digits, '.', '_' and '-': it names a value in the gate's secrets file")
		}
		format := fi.Format
		if format == "" {
			format = "{secret}"
		}
		if strings.Count(format, "{secret}") != 1 {
			c.errorf(at("format"), label, "format must hold {secret} exactly once, as in \"Bearer {secret}\"")
		}
		if len(fi.Hosts) == 0 {
			c.errorf(at("hosts"), label, "hosts is missing; name the hosts that receive the credential")
		}
		in := Injection{Name: fi.Name, Hosts: fi.Hosts, Header: fi.Header, Query: fi.Query, Secret: fi.Secret, Format: format, HTTP: fi.HTTP, Optional: fi.Optional}
		idx := len(p.injections)
		hosts := spellings{}
		for _, h := range fi.Hosts {
			hp, err := parseHostPattern(h)
			if err != nil {
				c.errorf(at("hosts"), label, "hosts: %v", err)
				continue
			}
			if hp.any || hp.suffix != "" {
				c.errorf(at("hosts"), label, "hosts: %q: a credential is injected for exact host names only, never a pattern", h)
				continue
			}
			if msg, dup := hosts.dup(hp.name, h, "host"); dup {
				c.errorf(at("hosts"), label, "hosts: %s", msg)
				continue
			}
			if prev, dup := p.injectBy[hp.name]; dup {
				c.errorf(at("hosts"), label, "hosts: %q already has inject rule %q; one credential per host", h, rules[prev].Name)
				continue
			}
			p.injectBy[hp.name] = idx
		}
		p.injections = append(p.injections, in)
	}
}
