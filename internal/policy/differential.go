package policy

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
)

// The differential check backs Compare's rule-by-rule reading of the two files: it decides a
// generated set of requests under both policies, the way the gate decides them, and reports the
// requests the new policy decides less restrictively (verdicts ordered FREE < ASK < DENY). The
// set is built from what either policy names:
//
//   - hosts: every exact name either policy names anywhere (rules, trusted, deny, splice,
//     [container.NAME] lists, [[inject]], [floor.hosts]); for each "*.suffix", a name under the
//     suffix and the suffix itself; a name under no pattern. Every host decides as one of these
//     does: a host's decisions depend only on the patterns that match it.
//   - containers: every container of the new policy's [sources] (the only ones whose requests
//     it decides), one of each kind for a host: containers that the rules and lists matching
//     the host treat alike, in both policies, decide alike. A policy that names no container is
//     tried as a container it does not name.
//   - methods: GET, HEAD, OPTIONS, POST, PUT, PATCH, DELETE, CONNECT, every method a rule for the
//     host names, and one that no rule can name.
//   - paths: "/" and, for every path pattern of a rule for the host, its literal prefix and
//     samples of it (stars filled, "**" as none, one and two segments, one segment deeper, with a
//     ;parameter, in upper case), the stars filled with a word no pattern holds (filler) and
//     with each literal segment of the host's rules that changed (changedWords), where the
//     patterns meet.
//
// and, for each host, the CONNECT decided at the domain (a spliced host, or a gate without a
// signer), the CONNECT to decrypt, each request inside a tunnel as the gate with a signer opens
// it, and the host's properties: spliced (decrypt → splice hides its requests), trusted for
// reads, the [floor.hosts] address (any change sends the name elsewhere) and the credential
// injected. A host whose matching rules, lists, injection and address are the same in both
// policies (for a container) decides alike and is skipped, which keeps an edit of a large policy
// cheap.
//
// The policy-wide values (floor ports and ranges, sources, settings, [[secret]], [jwt],
// [claude]) are compared by compareFiles alone: they are one value each, compared exactly there.
// So are the [[budget]] sections, each with the section of the same name: a budget bounds what
// it counts rather than deciding a request by itself (TestCompareDecisionsProperty checks,
// container by container and host by host, that a tightening keeps every old bound).

// maxEvaluations bounds the decisions one differential check makes (both policies counted).
// A change that reaches more requests counts as a loosening: a human looks.
const maxEvaluations = 200_000

// maxExamples bounds the examples a Comparison carries.
const maxExamples = 3

// ExampleKind says what an Example decides.
type ExampleKind uint8

// The kinds of example.
const (
	// ExampleRequest is a request decided by its method and path: plain HTTP, or inside a
	// decrypted tunnel.
	ExampleRequest ExampleKind = iota
	// ExampleTunnel is a request inside a CONNECT tunnel as a gate with a signer opens it: a
	// spliced host's tunnel is decided at the domain, any other is decrypted and the request
	// decided on its own.
	ExampleTunnel
	// ExampleConnect is a CONNECT decided at the domain: to a spliced host, or by a gate without
	// a signer. The tunnel carries any request unseen.
	ExampleConnect
	// ExampleIntercept is a CONNECT the gate opens to decrypt.
	ExampleIntercept
	// ExampleSplice is a host spliced now and decrypted before: its requests are no longer seen.
	ExampleSplice
	// ExampleTrusted is a host trusted for reads now and not before.
	ExampleTrusted
	// ExampleAddress is a name sent to another address: [floor.hosts] added, changed or removed.
	ExampleAddress
	// ExampleInject is a host that receives a credential it did not, or another one.
	ExampleInject
	// ExampleMCP is an MCP message (Example.MCP) of a request to an [[mcp]] endpoint, or to
	// where one was.
	ExampleMCP
	// ExampleMCPTunnel is such a message inside a CONNECT tunnel as a gate with a signer opens it.
	ExampleMCPTunnel
)

var exampleKinds = [...]string{"request", "tunnel", "connect", "intercept", "splice", "trusted", "address", "inject", "mcp", "mcp-tunnel"}

func (k ExampleKind) String() string {
	if int(k) < len(exampleKinds) {
		return exampleKinds[k]
	}
	return "unknown"
}

// Example is one request (or host) that the new policy decides less restrictively than the old.
type Example struct {
	Kind ExampleKind
	// Container is the container whose requests are decided less restrictively; empty when every
	// container's are (or the policy names none).
	Container    string
	Host         string
	Method, Path string // requests and tunnels
	// MCP says what MCP message an ExampleMCP is: "initialize", `tools/call of "read"`.
	MCP string
	// Old and New are the decisions, for requests, tunnels and CONNECTs.
	Old, New Decision
	// Was and Now describe a host's property (splice, trusted, address, inject) in words.
	Was, Now string
}

// String is the example for the human's screen, such as
// `POST https://github.com/x/git-receive-pack would be FREE (rule "npm"), was ASK (rule "gh-push")`,
// after `from container b: ` when only some containers' requests are.
func (e Example) String() string {
	if e.Container != "" {
		return "from container " + e.Container + ": " + e.what()
	}
	return e.what()
}

func (e Example) what() string {
	dec := func(d Decision) string { return fmt.Sprintf("%s (rule %q)", d.Verdict, d.Rule) }
	switch e.Kind {
	case ExampleRequest:
		return fmt.Sprintf("%s https://%s%s would be %s, was %s", e.Method, e.Host, e.Path, dec(e.New), dec(e.Old))
	case ExampleTunnel:
		return fmt.Sprintf("%s https://%s%s through a CONNECT tunnel would be %s, was %s", e.Method, e.Host, e.Path, dec(e.New), dec(e.Old))
	case ExampleConnect:
		return fmt.Sprintf("CONNECT %s:443 decided at the domain (spliced, or no signer) would be %s, was %s", e.Host, dec(e.New), dec(e.Old))
	case ExampleIntercept:
		return fmt.Sprintf("CONNECT %s:443 to decrypt would be %s, was %s", e.Host, dec(e.New), dec(e.Old))
	case ExampleSplice:
		return fmt.Sprintf("%s would be %s, was %s", e.Host, e.Now, e.Was)
	case ExampleTrusted:
		return fmt.Sprintf("%s would be %s, was %s", e.Host, e.Now, e.Was)
	case ExampleAddress:
		return fmt.Sprintf("%s would be sent to %s, was sent to %s", e.Host, e.Now, e.Was)
	case ExampleInject:
		return fmt.Sprintf("requests to %s would carry %s, carried %s", e.Host, e.Now, e.Was)
	case ExampleMCP:
		return fmt.Sprintf("MCP %s in %s https://%s%s would be %s, was %s", e.MCP, e.Method, e.Host, e.Path, dec(e.New), dec(e.Old))
	case ExampleMCPTunnel:
		return fmt.Sprintf("MCP %s in %s https://%s%s through a CONNECT tunnel would be %s, was %s", e.MCP, e.Method, e.Host, e.Path, dec(e.New), dec(e.Old))
	}
	return e.Host
}

// diffResult is what the differential check found.
type diffResult struct {
	examples  []Example // at most maxExamples, one per host and kind, in host order
	loosened  int       // requests and host properties decided less restrictively
	evaluated int       // decisions made, both policies counted
	truncated bool      // the set was larger than maxEvaluations and was not all tried
}

func (d *diffResult) add(e Example) {
	d.loosened++
	if len(d.examples) >= maxExamples {
		return
	}
	for _, x := range d.examples {
		if x.Host == e.Host && x.Kind == e.Kind {
			return // one per host and kind: the screen shows different things
		}
	}
	d.examples = append(d.examples, e)
}

// baseMethods are tried on every host.
var baseMethods = []string{"GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE", "CONNECT"}

// unnamedMethod is a method no rule can name (it is not one the policy knows).
const unnamedMethod = "PURGE"

// differential decides the generated requests under old and new (see the comment at the top of
// this file) and reports those new decides less restrictively.
func differential(old, new *Policy) diffResult {
	var d diffResult
	ov, nv := newRuleView(old), newRuleView(new)
	fill := filler(old, new)
	containers := new.Containers()
	if len(containers) == 0 {
		containers = []string{""}
	}
	for _, h := range probeHosts(old, new) {
		kinds := containerKinds(ov, nv, h, containers)
		for i, k := range kinds {
			words := changedWords(ov, k.ors, nv, k.nrs)
			if words == nil && !hostDiffers(old, new, h, k.container, i == 0) {
				continue // the same rules and lists: the same decisions
			}
			methods, paths := probeRequests(fill, words, old, k.ors, new, k.nrs)
			cost := 4 + 2*len(methods)*len(paths)
			if d.evaluated+cost > maxEvaluations {
				d.truncated = true
				return d
			}
			d.evaluated += cost
			shown := ""
			if len(kinds) > 1 {
				shown = k.container // only some containers' requests are decided so
			}
			d.host(old, new, h, k.container, shown, i == 0, methods, paths)
		}
	}
	d.mcp(old, new, containers, fill)
	return d
}

// mcpProbes are the messages tried on every endpoint, besides a tools/call of each sample tool.
var mcpProbes = []struct {
	method string // the HTTP method
	m      MCPMessage
}{
	{"POST", MCPMessage{Kind: MCPProtocol, Method: "initialize"}},
	{"POST", MCPMessage{Kind: MCPOther, Method: "resources/read"}},
	{"POST", MCPMessage{Kind: MCPUnknown, Method: "lockhttp/unknown"}},
	{"GET", MCPMessage{Kind: MCPProtocol, Method: "GET (the server's event stream)"}},
	{"DELETE", MCPMessage{Kind: MCPProtocol, Method: "DELETE (the end of the session)"}},
	{"PUT", MCPMessage{Kind: MCPUnknown, Method: "PUT"}},
}

// mcp decides, under both policies, the MCP messages a request to each endpoint of either may
// carry (every container; the endpoint's path as written, with and without a trailing slash,
// each in upper case, and the samples of the host's path patterns that route to an endpoint;
// the probes above and a tools/call of every sample of the tool patterns on its host), plainly
// and through a tunnel, as the gate decides them (mcpDecision).
func (d *diffResult) mcp(old, new *Policy, containers []string, fill string) {
	type target struct{ host, path string }
	var targets []target
	seen := map[target]bool{}
	add := func(host, path string) {
		if t := (target{host, path}); !seen[t] {
			seen[t] = true
			targets = append(targets, t)
		}
	}
	views := []*ruleView{newRuleView(old), newRuleView(new)}
	for _, p := range []*Policy{old, new} {
		for _, e := range p.mcp {
			if e.Host == "" || e.key == "" {
				continue
			}
			bare := strings.TrimSuffix(e.Path, "/")
			for _, path := range []string{e.Path, bare, bare + "/"} {
				if path != "" {
					add(e.Host, path)
					add(e.Host, strings.ToUpper(path))
				}
			}
			// The paths the host's rules name that route to an endpoint of either policy: there
			// a rule's verdict meets the endpoint's (an endpoint removed leaves the rule's).
			for _, v := range views {
				for _, ct := range containers {
					for _, id := range v.rulesFor(e.Host, ct) {
						rl := &v.p.rules[id]
						for j := range rl.paths {
							for _, sample := range pathSamples(rl.paths[j].text, fill) {
								if old.MCP(e.Host, sample) != nil || new.MCP(e.Host, sample) != nil {
									add(e.Host, sample)
								}
							}
						}
					}
				}
			}
		}
	}
	for _, t := range targets {
		tools := mcpSamples(t.host, fill, old, new)
		probes := slices.Clone(mcpProbes)
		for _, tool := range tools {
			probes = append(probes, struct {
				method string
				m      MCPMessage
			}{"POST", MCPMessage{Kind: MCPTool, Method: "tools/call", Tool: tool}})
		}
		cost := 2 * (2 + len(probes)) * len(containers)
		if d.evaluated+cost > maxEvaluations {
			d.truncated = true
			return
		}
		d.evaluated += cost
		for _, ct := range containers {
			shown := ""
			if len(containers) > 1 && (old.scoped || new.scoped) {
				shown = ct
			}
			connect := Request{Host: t.host, Method: "CONNECT", Connect: true, Container: ct}
			oc, nc := old.Evaluate(connect), new.Evaluate(connect)
			oi, ni := old.EvaluateIntercept(t.host, ct), new.EvaluateIntercept(t.host, ct)
			for _, pr := range probes {
				oe := old.mcpDecision(t.host, pr.method, t.path, ct, pr.m)
				ne := new.mcpDecision(t.host, pr.method, t.path, ct, pr.m)
				kind := ExampleMCP
				if ne.Verdict >= oe.Verdict {
					oe, ne = tunnelDecision(old, t.host, oc, oi, oe), tunnelDecision(new, t.host, nc, ni, ne)
					kind = ExampleMCPTunnel
				}
				if ne.Verdict < oe.Verdict {
					d.add(Example{Kind: kind, Container: shown, Host: t.host, Method: pr.method, Path: t.path,
						MCP: mcpWords(pr.m), Old: oe, New: ne})
				}
			}
		}
	}
}

// mcpWords says what an MCP message is, for an example.
func mcpWords(m MCPMessage) string {
	if m.Kind == MCPTool {
		return fmt.Sprintf("tools/call of %q", m.Tool)
	}
	return m.Method
}

// containerKind is a container standing for those that the rules and lists matching one host
// treat alike, in both policies: ors and nrs are the ids of the rules of old and new that match
// the host for it.
type containerKind struct {
	container string
	ors, nrs  []int32
}

// containerKinds sorts containers into kinds for host h: those whose matching rules and
// [container.NAME] lists are the same, in old and in new, decide every request to h alike, so
// one of each is tried. A policy without scopes makes one kind.
func containerKinds(ov, nv *ruleView, h string, containers []string) []containerKind {
	if !ov.p.scoped && !nv.p.scoped {
		return []containerKind{{container: containers[0], ors: ov.rulesFor(h, containers[0]), nrs: nv.rulesFor(h, containers[0])}}
	}
	var kinds []containerKind
	var keys []string
	for _, c := range containers {
		k := containerKind{container: c, ors: ov.rulesFor(h, c), nrs: nv.rulesFor(h, c)}
		lists := func(p *Policy) string {
			id := p.scopeOf(c)
			_, denied := p.listDeny(id, h)
			return fmt.Sprint(denied, p.listTrusted(id, h))
		}
		key := fmt.Sprint(k.ors, k.nrs, lists(ov.p), lists(nv.p))
		if !slices.Contains(keys, key) {
			keys = append(keys, key)
			kinds = append(kinds, k)
		}
	}
	return kinds
}

// host compares everything decided about one host for container ct (shown names it in the
// examples, or is empty when every container's requests are decided alike). first is the first
// container tried for the host: what does not depend on the container (splicing, the address,
// the injected credential) is compared then.
func (d *diffResult) host(old, new *Policy, h, ct, shown string, first bool, methods, paths []string) {
	add := func(e Example) {
		e.Container = shown
		d.add(e)
	}
	if first && !old.Spliced(h) && new.Spliced(h) {
		d.add(Example{Kind: ExampleSplice, Host: h, Was: "decrypted (each request decided on its own)",
			Now: "spliced (its tunnel decided at the domain, its requests unseen)"})
	}
	connect := Request{Host: h, Method: "CONNECT", Connect: true, Container: ct}
	oc, nc := old.Evaluate(connect), new.Evaluate(connect)
	if nc.Verdict < oc.Verdict {
		add(Example{Kind: ExampleConnect, Host: h, Old: oc, New: nc})
	}
	oi, ni := old.EvaluateIntercept(h, ct), new.EvaluateIntercept(h, ct)
	if ni.Verdict < oi.Verdict {
		add(Example{Kind: ExampleIntercept, Host: h, Old: oi, New: ni})
	}
	if first {
		oa, oOK := old.Floor.Hosts[h]
		na, nOK := new.Floor.Hosts[h]
		if oOK != nOK || oa != na {
			d.add(Example{Kind: ExampleAddress, Host: h, Was: addressWords(oa, oOK), Now: addressWords(na, nOK)})
		}
	}
	if !old.Trusted(h, ct) && new.Trusted(h, ct) {
		add(Example{Kind: ExampleTrusted, Host: h, Was: "not trusted", Now: "trusted for reads (free without a rule; the heuristics score it as trusted)"})
	}
	if oj, nj := old.InjectionFor(h), new.InjectionFor(h); first && nj != nil && (oj == nil || !sameInjection(oj, nj) || nj.HTTP && !oj.HTTP || nj.Optional && !oj.Optional) {
		d.add(Example{Kind: ExampleInject, Host: h, Was: injectionWords(oj), Now: injectionWords(nj)})
	}
	for _, m := range methods {
		for _, p := range paths {
			r := Request{Host: h, Method: m, Path: p, Container: ct}
			oe, ne := old.Evaluate(r), new.Evaluate(r)
			if ne.Verdict < oe.Verdict {
				add(Example{Kind: ExampleRequest, Host: h, Method: m, Path: p, Old: oe, New: ne})
				continue
			}
			if ot, nt := tunnelDecision(old, h, oc, oi, oe), tunnelDecision(new, h, nc, ni, ne); nt.Verdict < ot.Verdict {
				add(Example{Kind: ExampleTunnel, Host: h, Method: m, Path: p, Old: ot, New: nt})
			}
		}
	}
}

// tunnelDecision is how a gate with a signer decides a request inside a CONNECT tunnel to h: a
// spliced host's tunnel is decided at the domain (connect) and carries the request unseen; any
// other is opened to decrypt (intercept) and the request is decided on its own (req).
func tunnelDecision(p *Policy, h string, connect, intercept, req Decision) Decision {
	if p.Spliced(h) {
		return connect
	}
	if intercept.Verdict > req.Verdict {
		return intercept
	}
	return req
}

// hostDiffers reports whether anything but the rules decides h differently for container ct:
// the lists (splicing decides its tunnels); and, when first, the host's properties that are
// the same for every container: the injection, the address.
func hostDiffers(old, new *Policy, h, ct string, first bool) bool {
	denied := func(p *Policy) bool {
		if p.deny.lookup(h) != "" {
			return true
		}
		_, ok := p.listDeny(p.scopeOf(ct), h)
		return ok
	}
	if denied(old) != denied(new) || old.Trusted(h, ct) != new.Trusted(h, ct) || old.Spliced(h) != new.Spliced(h) || old.hasMCP(h) != new.hasMCP(h) {
		return true
	}
	if !first {
		return false
	}
	oa, oOK := old.Floor.Hosts[h]
	na, nOK := new.Floor.Hosts[h]
	if oOK != nOK || oa != na {
		return true
	}
	oj, nj := old.InjectionFor(h), new.InjectionFor(h)
	return (oj == nil) != (nj == nil) || (oj != nil && (!sameInjection(oj, nj) || oj.HTTP != nj.HTTP || oj.Optional != nj.Optional))
}

// sameInjection: a and b put the same value in the same place (whether plain http:// requests get
// it too, and whether it is optional, are compared apart: only turning them on loosens).
func sameInjection(a, b *Injection) bool {
	return a.Header == b.Header && a.Query == b.Query && a.Secret == b.Secret && a.Format == b.Format
}

func injectionWords(in *Injection) string {
	if in == nil {
		return "no injected credential"
	}
	target := "header " + in.Header
	if in.Header == "" {
		target = "query parameter " + in.Query
	}
	over := ""
	if in.HTTP {
		over = ", on http:// too"
	}
	if in.Optional {
		over += ", or while the gate lacks it the agent's own"
	}
	return fmt.Sprintf("secret %q as %s%s (inject %q)", in.Secret, target, over, in.Name)
}

func addressWords(a netip.Addr, ok bool) string {
	if !ok {
		return "the address DNS gives"
	}
	return a.String() + " ([floor.hosts])"
}

// ruleView finds, for a host, the rules of one policy that apply to it, and what each decides by.
type ruleView struct {
	p    *Policy
	sigs []string // per rule: verdict, methods and paths, which decide with the hosts
	seen []uint32 // per rule: the epoch it was last collected in
	now  uint32
}

func newRuleView(p *Policy) *ruleView {
	v := &ruleView{p: p, sigs: make([]string, len(p.rules)), seen: make([]uint32, len(p.rules))}
	for i := range p.rules {
		rl := &p.rules[i]
		paths := make([]string, len(rl.paths))
		for j := range rl.paths {
			paths[j] = rl.paths[j].text
		}
		sort.Strings(paths)
		v.sigs[i] = fmt.Sprintf("%d %x %s", rl.verdict, rl.methods, strings.Join(paths, " "))
	}
	return v
}

// rulesFor returns the ids of the rules whose hosts match h and that decide for container ct,
// each once, in file order.
func (v *ruleView) rulesFor(h, ct string) []int32 {
	v.now++
	var ids []int32
	v.p.forRules(h, v.p.scopeOf(ct), func(id int32) {
		if v.seen[id] != v.now {
			v.seen[id] = v.now
			ids = append(ids, id)
		}
	})
	slices.Sort(ids)
	return ids
}

// maxWords bounds the words of changed rules that fill the stars of a host's path patterns.
const maxWords = 32

// changedWords compares the rules ors of old and nrs of new that apply to one host: nil when
// they decide alike (the same verdicts, methods and paths, names aside); otherwise the literal
// path segments of the rules that differ (at most maxWords, never nil). A request that the
// change decides differently is in the reach of a rule that differs, so filling the stars of
// the host's other patterns with these words finds where the patterns meet ("/a/*" and
// "/**/x.git" meet at "/a/x.git").
func changedWords(ov *ruleView, ors []int32, nv *ruleView, nrs []int32) []string {
	count := make(map[string]int, len(nrs))
	for _, id := range nrs {
		count[nv.sigs[id]]++
	}
	var changed []*rule
	for _, id := range ors {
		if count[ov.sigs[id]] > 0 {
			count[ov.sigs[id]]--
		} else {
			changed = append(changed, &ov.p.rules[id])
		}
	}
	for _, id := range nrs {
		if count[nv.sigs[id]] > 0 {
			count[nv.sigs[id]]--
			changed = append(changed, &nv.p.rules[id])
		}
	}
	if len(changed) == 0 {
		return nil
	}
	words := []string{}
	for _, rl := range changed {
		for j := range rl.paths {
			segs, err := compileSegs(rl.paths[j].text, rl.paths[j].text)
			if err != nil {
				continue
			}
			for _, sg := range segs {
				if sg.kind == segLiteral && sg.lit != "" && !slices.Contains(words, sg.lit) && len(words) < maxWords {
					words = append(words, sg.lit)
				}
			}
		}
	}
	return words
}

// probeHosts lists hosts that stand for every host (see the comment at the top of this file),
// sorted.
func probeHosts(ps ...*Policy) []string {
	exact, suffix := map[string]bool{}, map[string]bool{}
	sets := func(s *hostSet) {
		for k := range s.exact {
			exact[k] = true
		}
		for k := range s.suffix {
			suffix[k] = true
		}
	}
	for _, p := range ps {
		sets(&p.trusted)
		sets(&p.deny)
		sets(&p.splice)
		for i := range p.lists {
			sets(&p.lists[i].trusted)
			sets(&p.lists[i].deny)
		}
		for k := range p.index.exact {
			exact[k] = true
		}
		for k := range p.index.suffix {
			suffix[k] = true
		}
		for k := range p.injectBy {
			exact[k] = true
		}
		for k := range p.Floor.Hosts {
			exact[k] = true
		}
		for k := range p.mcpByHost {
			exact[k] = true
		}
	}
	// A name under no suffix pattern and not named: it stands for every host no pattern names.
	under := func(h string) bool {
		for s := range suffix {
			if strings.HasSuffix(h, "."+s) {
				return true
			}
		}
		return false
	}
	out := map[string]bool{}
	for i := 0; ; i++ {
		h := "lockhttp-unnamed.invalid"
		if i > 0 {
			h = fmt.Sprintf("lockhttp-unnamed.invalid%d", i)
		}
		if !exact[h] && !under(h) {
			out[h] = true
			break
		}
	}
	for h := range exact {
		out[h] = true
	}
	for s := range suffix {
		out[s] = true // the apex: not under its own pattern
		h := "x." + s
		for exact[h] || suffix[h] {
			h = "x" + h // a name that no exact pattern or deeper suffix names
		}
		out[h] = true
	}
	hosts := make([]string, 0, len(out))
	for h := range out {
		hosts = append(hosts, h)
	}
	sort.Strings(hosts)
	return hosts
}

// probeRequests lists the methods and paths tried on a host to which the rules ors of old and
// nrs of new apply: fill stands for what a star matches, and each of words fills the stars too.
func probeRequests(fill string, words []string, old *Policy, ors []int32, new *Policy, nrs []int32) (methods, paths []string) {
	var bits uint32
	pathSet := map[string]bool{"/": true}
	paths = append(paths, "/")
	each := func(p *Policy, ids []int32) {
		for _, id := range ids {
			rl := &p.rules[id]
			bits |= rl.methods
			for j := range rl.paths {
				for _, s := range pathSamples(rl.paths[j].text, fill, words...) {
					if !pathSet[s] {
						pathSet[s] = true
						paths = append(paths, s)
					}
				}
			}
		}
	}
	each(old, ors)
	each(new, nrs)
	methods = append(methods, baseMethods...)
	for i, m := range knownMethods {
		if bits&(1<<uint(i)) != 0 && !slices.Contains(methods, m) {
			methods = append(methods, m)
		}
	}
	return append(methods, unnamedMethod), paths
}

// filler is the text that stands for what a star matches in the samples of a path pattern:
// "x", or another word when a path pattern of either policy holds it, so that a pattern's
// samples are not the literal text of another pattern ("/*.git" filled is not "/x.git").
func filler(ps ...*Policy) string {
	var texts []string
	for _, p := range ps {
		for i := range p.rules {
			for j := range p.rules[i].paths {
				texts = append(texts, strings.ToLower(p.rules[i].paths[j].text))
			}
		}
	}
	for i := 0; ; i++ {
		f := "x"
		if i > 0 {
			f = fmt.Sprintf("lockhttp%d", i)
		}
		if !slices.ContainsFunc(texts, func(t string) bool { return strings.Contains(t, f) }) {
			return f
		}
	}
}

// pathSamples are paths that tell a path pattern apart from its neighbours: its literal prefix,
// the pattern filled (a star, or a star within a segment, as fill; "**" as no segment, one and
// two), one segment deeper, with a ;parameter on its first segment, in upper case, and filled
// with each of words (a star and "**" as the word).
func pathSamples(pattern, fill string, words ...string) []string {
	segs, err := compileSegs(pattern, pattern)
	if err != nil {
		return nil
	}
	// sample fills stars with star and "**" with the segments globstar.
	sample := func(star string, globstar ...string) string {
		var parts []string
		for _, s := range segs {
			switch s.kind {
			case segLiteral:
				parts = append(parts, s.lit)
			case segStar:
				parts = append(parts, star)
			case segWild:
				parts = append(parts, strings.Join(s.parts, star))
			case segGlobstar:
				parts = append(parts, globstar...)
			}
		}
		return "/" + strings.Join(parts, "/")
	}
	var prefix []string
	for _, s := range segs {
		if s.kind != segLiteral {
			break
		}
		prefix = append(prefix, s.lit)
	}
	one := sample(fill, fill)
	out := []string{"/" + strings.Join(prefix, "/"), sample(fill), one, sample(fill, fill, fill), strings.TrimSuffix(one, "/") + "/" + fill}
	first, rest, _ := strings.Cut(one[1:], "/")
	param := "/" + first + ";" + fill
	if rest != "" || strings.Contains(one[1:], "/") {
		param += "/" + rest
	}
	out = append(out, param)
	if up := strings.ToUpper(one); up != one {
		out = append(out, up)
	}
	if len(prefix) < len(segs) { // the pattern has a star: fill it with the words too
		for _, w := range words {
			out = append(out, sample(w, w))
		}
	}
	return out
}
