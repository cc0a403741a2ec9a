package policy

import (
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"
)

const diffBase = `version = 1
trusted = ["github.com", "*.githubusercontent.com"]
deny = ["pastebin.com"]
splice = ["pinned.example.com"]

[[rule]]
name = "gh"
hosts = ["github.com"]
verdict = "free"

[[rule]]
name = "gh-push"
hosts = ["github.com"]
methods = ["POST"]
paths = ["/**/git-receive-pack"]
verdict = "ask"

[[rule]]
name = "no-admin"
hosts = ["*.example.com"]
paths = ["/admin/**"]
verdict = "deny"

[[rule]]
name = "pinned"
hosts = ["pinned.example.com"]
methods = ["CONNECT"]
verdict = "ask"

[[rule]]
name = "pinned-reads"
hosts = ["pinned.example.com"]
methods = ["GET"]
verdict = "free"

[[inject]]
name = "gh"
hosts = ["api.github.com"]
header = "Authorization"
secret = "github"

[floor.hosts]
"git.example.com" = "93.184.216.34"
`

// TestDifferential: the differential check alone finds the requests a change decides less
// restrictively, and names the first as the example; a tightening has none.
func TestDifferential(t *testing.T) {
	base := load(t, diffBase)
	cases := []struct {
		name string
		edit func(string) string
		want string // an example ("" for none)
		kind ExampleKind
	}{
		{"no change", func(s string) string { return s + "# a comment\n" }, "", 0},
		{"rules reordered", func(s string) string {
			i := strings.Index(s, "[[rule]]\nname = \"no-admin\"")
			j := strings.Index(s, "[[rule]]\nname = \"pinned\"")
			return strings.Replace(s, s[i:j], "", 1) + "\n" + s[i:j]
		}, "", 0},
		{"a rule renamed", func(s string) string { return strings.Replace(s, `name = "no-admin"`, `name = "no-admin-2"`, 1) }, "", 0},
		{"free whole-host rule narrowed to CONNECT", func(s string) string {
			return strings.Replace(s, "hosts = [\"github.com\"]\nverdict = \"free\"", "hosts = [\"github.com\"]\nmethods = [\"CONNECT\"]\nverdict = \"free\"", 1)
		}, `CONNECT github.com:443 decided at the domain (spliced, or no signer) would be FREE (rule "gh"), was ASK (rule "gh-push")`, ExampleConnect},
		{"free whole-host rule narrowed to GET and CONNECT", func(s string) string {
			return strings.Replace(s, "hosts = [\"github.com\"]\nverdict = \"free\"", "hosts = [\"github.com\"]\nmethods = [\"GET\", \"CONNECT\"]\nverdict = \"free\"", 1)
		}, `CONNECT github.com:443 decided at the domain (spliced, or no signer) would be FREE (rule "gh"), was ASK (rule "gh-push")`, ExampleConnect},
		{"ask → free", func(s string) string {
			return strings.Replace(s, "paths = [\"/**/git-receive-pack\"]\nverdict = \"ask\"", "paths = [\"/**/git-receive-pack\"]\nverdict = \"free\"", 1)
		}, `POST https://github.com/git-receive-pack would be FREE (rule "gh"), was ASK (rule "gh-push")`, ExampleRequest},
		{"ask → free opens the tunnel too", func(s string) string {
			return strings.Replace(s, "paths = [\"/**/git-receive-pack\"]\nverdict = \"ask\"", "paths = [\"/**/git-receive-pack\"]\nverdict = \"free\"", 1)
		}, `CONNECT github.com:443 decided at the domain (spliced, or no signer) would be FREE (rule "gh"), was ASK (rule "gh-push")`, ExampleConnect},
		{"deny rule path rewritten", func(s string) string { return strings.Replace(s, `"/admin/**"`, `"/admin/users"`, 1) },
			`GET https://git.example.com/admin would be ASK (rule "default"), was DENY (rule "no-admin")`, ExampleRequest},
		{"deny list loses a host", func(s string) string { return strings.Replace(s, `deny = ["pastebin.com"]`, `deny = []`, 1) },
			`CONNECT pastebin.com:443 decided at the domain (spliced, or no signer) would be ASK (rule "default"), was DENY (rule "deny")`, ExampleConnect},
		{"splice added", func(s string) string { return strings.Replace(s, `splice = [`, `splice = ["github.com", `, 1) },
			`github.com would be spliced (its tunnel decided at the domain, its requests unseen), was decrypted (each request decided on its own)`, ExampleSplice},
		{"splice removed from a trusted host", func(s string) string {
			s = strings.Replace(s, `splice = ["pinned.example.com"]`, `splice = []`, 1)
			return strings.Replace(s, `trusted = [`, `trusted = ["pinned.example.com", `, 1)
		}, `pinned.example.com would be trusted for reads`, ExampleTrusted},
		{"splice removed", func(s string) string {
			return strings.Replace(s, `splice = ["pinned.example.com"]`, `splice = []`, 1)
		}, `GET https://pinned.example.com/ through a CONNECT tunnel would be FREE (rule "pinned-reads"), was ASK (rule "pinned")`, ExampleTunnel},
		{"trusted added", func(s string) string { return strings.Replace(s, `trusted = [`, `trusted = ["c.org", `, 1) },
			`c.org would be trusted for reads (free without a rule; the heuristics score it as trusted), was not trusted`, ExampleTrusted},
		{"trusted suffix added", func(s string) string { return strings.Replace(s, `trusted = [`, `trusted = ["*.org", `, 1) },
			`x.org would be trusted for reads`, ExampleTrusted},
		{"floor.hosts removed", func(s string) string { return strings.Replace(s, "\"git.example.com\" = \"93.184.216.34\"\n", "", 1) },
			`git.example.com would be sent to the address DNS gives, was sent to 93.184.216.34 ([floor.hosts])`, ExampleAddress},
		{"floor.hosts changed", func(s string) string { return strings.Replace(s, `"93.184.216.34"`, `"93.184.216.35"`, 1) },
			`git.example.com would be sent to 93.184.216.35 ([floor.hosts]), was sent to 93.184.216.34 ([floor.hosts])`, ExampleAddress},
		{"floor.hosts added", func(s string) string { return s + "\"c.org\" = \"93.184.216.36\"\n" },
			`c.org would be sent to 93.184.216.36 ([floor.hosts]), was sent to the address DNS gives`, ExampleAddress},
		{"inject changed", func(s string) string { return strings.Replace(s, `secret = "github"`, `secret = "other"`, 1) },
			`requests to api.github.com would carry secret "other" as header Authorization (inject "gh"), carried secret "github" as header Authorization (inject "gh")`, ExampleInject},
		{"inject added", func(s string) string {
			return s + "\n[[inject]]\nname = \"npm\"\nhosts = [\"registry.npmjs.org\"]\nquery = \"token\"\nsecret = \"npm\"\n"
		}, `requests to registry.npmjs.org would carry secret "npm" as query parameter token (inject "npm"), carried no injected credential`, ExampleInject},
		{"inject on http:// too", func(s string) string {
			return strings.Replace(s, `secret = "github"`, "secret = \"github\"\nhttp = true", 1)
		},
			`requests to api.github.com would carry secret "github" as header Authorization, on http:// too (inject "gh"), carried secret "github" as header Authorization (inject "gh")`, ExampleInject},
		{"inject made optional", func(s string) string {
			return strings.Replace(s, `secret = "github"`, "secret = \"github\"\noptional = true", 1)
		},
			`requests to api.github.com would carry secret "github" as header Authorization, or while the gate lacks it the agent's own (inject "gh"), carried secret "github" as header Authorization (inject "gh")`, ExampleInject},
		{"deny rule narrowed to CONNECT", func(s string) string {
			return strings.Replace(s, "paths = [\"/admin/**\"]\nverdict = \"deny\"", "methods = [\"CONNECT\"]\nverdict = \"deny\"", 1)
		}, `GET https://git.example.com/admin would be ASK (rule "default"), was DENY (rule "no-admin")`, ExampleRequest},
		// Tightenings: nothing decides less restrictively.
		{"deny added", func(s string) string { return strings.Replace(s, `deny = [`, `deny = ["evil.example", `, 1) }, "", 0},
		{"ask rule widened to every method", func(s string) string { return strings.Replace(s, "methods = [\"POST\"]\n", "", 1) }, "", 0},
		{"ask rule gains a method", func(s string) string {
			return strings.Replace(s, `methods = ["CONNECT"]`, `methods = ["CONNECT", "POST"]`, 1)
		}, "", 0},
		// The rule-by-rule comparison counts this a loosening; the decisions do not change (the
		// ask rule naming CONNECT is more restrictive).
		{"free rule gains CONNECT beside an ask rule naming it", func(s string) string {
			return strings.Replace(s, `methods = ["GET"]`, `methods = ["GET", "CONNECT"]`, 1)
		}, "", 0},
		{"free rule removed", func(s string) string {
			return strings.Replace(s, "[[rule]]\nname = \"gh\"\nhosts = [\"github.com\"]\nverdict = \"free\"\n", "", 1)
		}, "", 0},
		{"trusted removed", func(s string) string { return strings.Replace(s, `, "*.githubusercontent.com"`, ``, 1) }, "", 0},
		{"inject removed", func(s string) string {
			return strings.Replace(s, "[[inject]]\nname = \"gh\"\nhosts = [\"api.github.com\"]\nheader = \"Authorization\"\nsecret = \"github\"\n", "", 1)
		}, "", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := load(t, c.edit(diffBase))
			d := differential(base, n)
			if d.truncated {
				t.Fatal("truncated")
			}
			if c.want == "" {
				if len(d.examples) > 0 {
					t.Fatalf("%d loosened, such as: %s", d.loosened, d.examples[0])
				}
				return
			}
			if len(d.examples) == 0 {
				t.Fatalf("no loosening found (%d decisions); want %q", d.evaluated, c.want)
			}
			i := slices.IndexFunc(d.examples, func(e Example) bool { return strings.Contains(e.String(), c.want) && e.Kind == c.kind })
			if i < 0 {
				t.Fatalf("the examples are\n  %v\nwant\n  %s (%v)", d.examples, c.want, c.kind)
			}
			// Compare carries them, and counts the change a loosening.
			cmp := Compare(base, n)
			if cmp.Tightening() || !slices.Equal(cmp.Examples, d.examples) {
				t.Fatalf("Compare: tightening %v, examples %v", cmp.Tightening(), cmp.Examples)
			}
		})
	}
}

// TestCompareConnectNarrowingIsALoosening is the hole the differential check closes: adding
// methods = ["CONNECT"] to a free whole-host rule narrows it inside a decrypted tunnel, but the
// CONNECT decided at the domain then sees a rule naming CONNECT, and the free verdict beats the
// host's ask rule for pushes: a spliced or undecrypted tunnel that asked now opens, carrying
// POSTs unseen.
func TestCompareConnectNarrowingIsALoosening(t *testing.T) {
	old := load(t, diffBase)
	new := load(t, strings.Replace(diffBase, "hosts = [\"github.com\"]\nverdict = \"free\"", "hosts = [\"github.com\"]\nmethods = [\"CONNECT\"]\nverdict = \"free\"", 1))
	r := Request{Host: "github.com", Method: "CONNECT", Connect: true}
	if o, n := old.Evaluate(r), new.Evaluate(r); o.Verdict != Ask || o.Rule != "gh-push" || n.Verdict != Free || n.Rule != "gh" {
		t.Fatalf("the premise: the CONNECT at the domain was %+v, is %+v", o, n)
	}
	c := Compare(old, new)
	if c.Tightening() {
		t.Fatalf("counted as a tightening: %q", c.Tightenings)
	}
	all := strings.Join(c.Loosenings, "\n")
	if !strings.Contains(all, `rule "gh": methods: every method → CONNECT`) {
		t.Errorf("the loosenings do not name the rule:\n%s", all)
	}
	if strings.Contains(strings.Join(c.Tightenings, "\n"), `rule "gh"`) {
		t.Errorf("the same change is listed as a tightening too: %q", c.Tightenings)
	}
	if len(c.Examples) == 0 || c.Examples[0].Kind != ExampleConnect || c.Examples[0].Host != "github.com" {
		t.Fatalf("examples: %v", c.Examples)
	}
}

// TestCompareNamesWhatTheDiffMissed: when the rule-by-rule comparison finds no loosening and
// the decisions do, the loosening line is the first example, with how many more there are.
func TestCompareNamesWhatTheDiffMissed(t *testing.T) {
	old := load(t, diffBase)
	new := load(t, strings.Replace(diffBase, "hosts = [\"github.com\"]\nverdict = \"free\"", "hosts = [\"github.com\"]\nmethods = [\"CONNECT\"]\nverdict = \"free\"", 1))
	d := differential(old, new)
	// As the rule-by-rule comparison of HEAD saw it: a tightening.
	c := Comparison{Tightenings: []string{`rule "gh": methods: every method → CONNECT`}}
	c.addDecisions(d)
	if c.Tightening() || len(c.Loosenings) != 1 {
		t.Fatalf("loosenings %q", c.Loosenings)
	}
	want := `decisions: CONNECT github.com:443 decided at the domain (spliced, or no signer) would be FREE (rule "gh"), was ASK (rule "gh-push")`
	if !strings.HasPrefix(c.Loosenings[0], want) {
		t.Fatalf("the loosening is\n  %s\nwant\n  %s", c.Loosenings[0], want)
	}
	if d.loosened > 1 && !strings.HasSuffix(c.Loosenings[0], fmt.Sprintf("(and %d more)", d.loosened-1)) {
		t.Errorf("the loosening does not count the rest: %s", c.Loosenings[0])
	}
	// When the rule-by-rule comparison found loosenings, they are the lines, and the
	// examples go with them.
	c = Comparison{Loosenings: []string{"x"}}
	c.addDecisions(d)
	if len(c.Loosenings) != 1 || len(c.Examples) == 0 {
		t.Fatalf("loosenings %q, examples %v", c.Loosenings, c.Examples)
	}
}

// TestCompareTruncatedIsALoosening: a change that reaches more requests than the differential
// check tries is left to a human.
func TestCompareTruncatedIsALoosening(t *testing.T) {
	var b strings.Builder
	b.WriteString("version = 1\n")
	for i := 0; i < 400; i++ {
		fmt.Fprintf(&b, "[[rule]]\nname = \"r%d\"\nhosts = [\"*\"]\npaths = [\"/p%d/*/**\"]\nverdict = \"ask\"\n", i, i)
	}
	for i := 0; i < 40; i++ {
		fmt.Fprintf(&b, "[[rule]]\nname = \"h%d\"\nhosts = [\"h%d.example.com\"]\nverdict = \"ask\"\n", i, i)
	}
	src := b.String()
	old := load(t, src)
	new := load(t, strings.Replace(src, "paths = [\"/p0/*/**\"]\nverdict = \"ask\"", "paths = [\"/p0/*/**\"]\nverdict = \"deny\"", 1))
	c := Compare(old, new)
	if c.Tightening() || !strings.Contains(strings.Join(c.Loosenings, "\n"), "more requests than the differential check tries") {
		t.Fatalf("loosenings %q (checked %d)", c.Loosenings, c.Checked)
	}
	// A change of one host's rule stays cheap and is judged.
	new = load(t, strings.Replace(src, "hosts = [\"h3.example.com\"]\nverdict = \"ask\"", "hosts = [\"h3.example.com\"]\nverdict = \"deny\"", 1))
	if c := Compare(old, new); !c.Tightening() {
		t.Fatalf("loosenings %q (checked %d)", c.Loosenings, c.Checked)
	}
}

// chooser makes the random choices of the policy generator: math/rand for the property test,
// the fuzzer's bytes for the fuzz target.
type chooser interface{ Intn(n int) int }

// byteChooser reads choices from bytes; once they run out, every choice is 0.
type byteChooser struct {
	b []byte
	i int
}

func (c *byteChooser) Intn(n int) int {
	if c.i >= len(c.b) {
		return 0
	}
	v := int(c.b[c.i]) % n
	c.i++
	return v
}

type genRule struct {
	name, verdict         string
	hosts, methods, paths []string
	containers            []string // nil: the key left out (every container)
}

type genInject struct{ name, host, secret string }

// genBudget is a [[budget]]; a nil list is the key left out (every container, every host), a
// zero limit the limit left out.
type genBudget struct {
	name                 string
	containers, hosts    []string
	rpm, bytes, newHosts int
}

// genMCP is an [[mcp]] endpoint and its rules.
type genMCP struct {
	name, host, path string
	rules            []genRule // hosts and methods unused; paths hold the tools
}

type genPolicy struct {
	trusted, deny, splice []string
	mcp                   []genMCP
	rules                 []genRule
	floorHosts            map[string]string
	inject                []genInject
	budgets               []genBudget
	// sections are the [container.NAME] lists by container (absent: no section).
	sections map[string]genSection
}

type genSection struct{ trusted, deny []string }

var (
	genPatterns = []string{"a.example.com", "*.example.com", "*.a.example.com", "example.com", "c.org", "*", "mcp.test"}
	genNames    = []string{"a.example.com", "b.example.com", "example.com", "c.org"}
	genMethods  = []string{"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT"}
	genSegs     = []string{"a", "b", "x.git", "*", "**", "*.git", "A", "a;p"}
	genVerdicts = []string{"free", "ask", "deny"}
	genAddrs    = []string{"93.184.216.34", "93.184.216.35"}
	// genContainers are the generated policies' [sources] containers.
	genContainers = []string{"a", "b"}
	genLimits     = []int{1, 10, 60, 100}
	// The [[mcp]] endpoints' hosts (never under a splice pattern: [:5] of genPatterns), paths
	// and tool patterns; genCalls are the tools the property tests call, beside the patterns'
	// own samples.
	genMCPHosts = []string{"mcp.test", "a.example.com"}
	genMCPPaths = []string{"/mcp", "/m/"}
	genTools    = []string{"read", "read_*", "*", "DELETE", "del*", "w"}
	genCalls    = []string{"read", "read_x", "READ", "delete", "DELETE", "Del_x", "deleſe", "w", "W", "other"}
)

type generator struct{ r chooser }

func (g generator) pick(list []string, n int) []string {
	var out []string
	for i := 0; i < n; i++ {
		if p := list[g.r.Intn(len(list))]; !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

func (g generator) path() string {
	return "/" + strings.Join(g.pick(genSegs, 1+g.r.Intn(2)), "/")
}

// reach sets a rule's methods and paths, often the shapes that matter at the domain: none,
// CONNECT alone, CONNECT with a read.
func (g generator) reach(r *genRule) {
	r.methods, r.paths = nil, nil
	switch g.r.Intn(6) {
	case 0:
		r.methods = []string{"CONNECT"}
	case 1:
		r.methods = []string{"GET", "CONNECT"}
	case 2:
		r.methods = g.pick(genMethods[:5], 1+g.r.Intn(2))
		if g.r.Intn(2) == 0 {
			r.paths = []string{g.path()}
		}
	case 3:
		r.paths = []string{g.path()}
	}
}

func (g generator) rule(i int) genRule {
	r := genRule{name: fmt.Sprintf("r%d", i), verdict: genVerdicts[g.r.Intn(3)], hosts: g.pick(genPatterns, 1+g.r.Intn(2))}
	g.reach(&r)
	g.scope(&r)
	return r
}

// scope sets a rule's containers: often left out, else one or both containers.
func (g generator) scope(r *genRule) {
	r.containers = nil
	if g.r.Intn(2) == 0 {
		r.containers = g.pick(genContainers, 1+g.r.Intn(2))
	}
}

// section sets, changes or removes the [container.NAME] section of one container.
func (g generator) section(sections map[string]genSection) {
	name := genContainers[g.r.Intn(len(genContainers))]
	if _, ok := sections[name]; ok && g.r.Intn(3) == 0 {
		delete(sections, name)
		return
	}
	sections[name] = genSection{trusted: g.pick(genPatterns[:5], g.r.Intn(3)), deny: g.pick(genPatterns[:5], g.r.Intn(2))}
}

// mcpRule is a random rule of an endpoint: its tools in paths.
func (g generator) mcpRule(i int) genRule {
	r := genRule{name: fmt.Sprintf("t%d", i), verdict: genVerdicts[g.r.Intn(3)], paths: g.pick(genTools, 1+g.r.Intn(2))}
	g.scope(&r)
	return r
}

// mcpEndpoint is a random endpoint with a few rules.
func (g generator) mcpEndpoint(i int) genMCP {
	e := genMCP{name: fmt.Sprintf("m%d", i), host: genMCPHosts[g.r.Intn(len(genMCPHosts))], path: genMCPPaths[g.r.Intn(len(genMCPPaths))]}
	for j, n := 0, g.r.Intn(3); j < n; j++ {
		e.rules = append(e.rules, g.mcpRule(j))
	}
	return e
}

// mutateMCP adds, removes, moves or edits an endpoint or one of its rules.
func (g generator) mutateMCP(p *genPolicy) {
	if len(p.mcp) == 0 || g.r.Intn(5) == 0 {
		p.mcp = append(p.mcp, g.mcpEndpoint(10+g.r.Intn(10)))
		return
	}
	i := g.r.Intn(len(p.mcp))
	e := &p.mcp[i]
	e.rules = slices.Clone(e.rules)
	switch g.r.Intn(8) {
	case 0:
		p.mcp = slices.Delete(p.mcp, i, i+1)
	case 1:
		e.path = genMCPPaths[g.r.Intn(len(genMCPPaths))]
	case 2:
		e.rules = append(e.rules, g.mcpRule(10+g.r.Intn(10)))
	default:
		if len(e.rules) == 0 {
			e.rules = append(e.rules, g.mcpRule(10+g.r.Intn(10)))
			return
		}
		j := g.r.Intn(len(e.rules))
		switch g.r.Intn(4) {
		case 0:
			e.rules = slices.Delete(e.rules, j, j+1)
		case 1:
			e.rules[j].verdict = genVerdicts[g.r.Intn(3)]
		case 2:
			e.rules[j].paths = g.pick(genTools, 1+g.r.Intn(3))
		default:
			g.scope(&e.rules[j])
		}
	}
}

func (g generator) policy() genPolicy {
	p := genPolicy{trusted: g.pick(genPatterns[:5], g.r.Intn(3)), deny: g.pick(genPatterns[:5], g.r.Intn(2)),
		splice: g.pick(genPatterns[:5], g.r.Intn(2)), floorHosts: map[string]string{}}
	for i, n := 0, g.r.Intn(6); i < n; i++ {
		p.rules = append(p.rules, g.rule(i))
	}
	if g.r.Intn(2) == 0 {
		p.floorHosts[genNames[g.r.Intn(len(genNames))]] = genAddrs[0]
	}
	if g.r.Intn(2) == 0 {
		p.inject = append(p.inject, genInject{name: "i0", host: genNames[g.r.Intn(len(genNames))], secret: "s0"})
	}
	for i, n := 0, g.r.Intn(3); i < n; i++ {
		p.budgets = append(p.budgets, g.budget(i))
	}
	p.sections = map[string]genSection{}
	for i, n := 0, g.r.Intn(3); i < n; i++ {
		g.section(p.sections)
	}
	for i, n := 0, g.r.Intn(3); i < n; i++ {
		p.mcp = append(p.mcp, g.mcpEndpoint(i))
	}
	return p
}

// budget is a random [[budget]] with at least one limit.
func (g generator) budget(i int) genBudget {
	b := genBudget{name: fmt.Sprintf("b%d", i)}
	g.budgetReach(&b)
	for b.rpm == 0 && b.bytes == 0 && b.newHosts == 0 {
		g.budgetLimit(&b)
	}
	return b
}

// budgetReach sets a budget's containers and hosts, often left out.
func (g generator) budgetReach(b *genBudget) {
	b.containers, b.hosts = nil, nil
	if g.r.Intn(2) == 0 {
		b.containers = g.pick(genContainers, 1+g.r.Intn(2))
	}
	if g.r.Intn(2) == 0 {
		b.hosts = g.pick(genPatterns, 1+g.r.Intn(2))
	}
}

// budgetLimit sets, changes or leaves out one limit of a budget, keeping at least one.
func (g generator) budgetLimit(b *genBudget) {
	limits := []*int{&b.rpm, &b.bytes, &b.newHosts}
	l := limits[g.r.Intn(3)]
	if v := g.r.Intn(len(genLimits) + 1); v < len(genLimits) {
		*l = genLimits[v]
	} else if n := *limits[0] + *limits[1] + *limits[2] - *l; n > 0 {
		*l = 0
	}
}

// mutate makes one or two small random edits.
func (g generator) mutate(p genPolicy) genPolicy {
	q := p
	q.rules = slices.Clone(p.rules)
	q.floorHosts = map[string]string{}
	for k, v := range p.floorHosts {
		q.floorHosts[k] = v
	}
	q.inject = slices.Clone(p.inject)
	q.budgets = slices.Clone(p.budgets)
	q.sections = map[string]genSection{}
	for k, v := range p.sections {
		q.sections[k] = v
	}
	q.mcp = slices.Clone(p.mcp)
	for k := 0; k < 1+g.r.Intn(2); k++ {
		i := -1
		if len(q.rules) > 0 {
			i = g.r.Intn(len(q.rules))
		}
		switch g.r.Intn(20) {
		case 17, 18, 19:
			g.mutateMCP(&q)
		case 14, 15:
			if i >= 0 {
				g.scope(&q.rules[i]) // the containers of a rule widened, narrowed or left out
			}
		case 16:
			g.section(q.sections)
		case 12:
			switch j := g.r.Intn(len(q.budgets) + 1); {
			case j == len(q.budgets):
				q.budgets = append(q.budgets, g.budget(10+g.r.Intn(10)))
			case g.r.Intn(3) == 0:
				q.budgets = slices.Delete(q.budgets, j, j+1)
			default:
				g.budgetLimit(&q.budgets[j])
			}
		case 13:
			if j := g.r.Intn(len(q.budgets) + 1); j < len(q.budgets) {
				g.budgetReach(&q.budgets[j])
			}
		case 0:
			q.rules = append(q.rules, g.rule(10+g.r.Intn(10)))
		case 1:
			if i >= 0 {
				q.rules = slices.Delete(q.rules, i, i+1)
			}
		case 2:
			if i >= 0 {
				q.rules[i].verdict = genVerdicts[g.r.Intn(3)]
			}
		case 3, 4:
			if i >= 0 {
				g.reach(&q.rules[i])
			}
		case 5:
			if i >= 0 {
				q.rules[i].hosts = g.pick(genPatterns, 1+g.r.Intn(3))
			}
		case 6:
			q.trusted = g.pick(genPatterns[:5], g.r.Intn(3))
		case 7:
			q.deny = g.pick(genPatterns[:5], g.r.Intn(3))
		case 8:
			q.splice = g.pick(genPatterns[:5], g.r.Intn(2))
		case 9:
			name := genNames[g.r.Intn(len(genNames))]
			if _, ok := q.floorHosts[name]; ok && g.r.Intn(2) == 0 {
				delete(q.floorHosts, name)
			} else {
				q.floorHosts[name] = genAddrs[g.r.Intn(2)]
			}
		case 10:
			switch {
			case len(q.inject) > 0 && g.r.Intn(2) == 0:
				q.inject = nil
			case len(q.inject) > 0:
				q.inject[0].secret = "s1"
			default:
				q.inject = append(q.inject, genInject{name: "i1", host: genNames[g.r.Intn(len(genNames))], secret: "s1"})
			}
		case 11:
			if i >= 0 && len(q.rules[i].methods) == 0 && len(q.rules[i].paths) == 0 {
				q.rules[i].methods = []string{"CONNECT"} // the narrowing that opens tunnels
			}
		}
	}
	return q
}

func (p genPolicy) render() string {
	var b strings.Builder
	list := func(ss []string) string {
		q := make([]string, len(ss))
		for i, s := range ss {
			q[i] = fmt.Sprintf("%q", s)
		}
		return strings.Join(q, ", ")
	}
	fmt.Fprintf(&b, "version = 1\ntrusted = [%s]\ndeny = [%s]\nsplice = [%s]\n", list(p.trusted), list(p.deny), list(p.splice))
	for _, r := range p.rules {
		fmt.Fprintf(&b, "[[rule]]\nname = %q\nhosts = [%s]\nverdict = %q\n", r.name, list(r.hosts), r.verdict)
		if len(r.methods) > 0 {
			fmt.Fprintf(&b, "methods = [%s]\n", list(r.methods))
		}
		if len(r.paths) > 0 {
			fmt.Fprintf(&b, "paths = [%s]\n", list(r.paths))
		}
		if r.containers != nil {
			fmt.Fprintf(&b, "containers = [%s]\n", list(r.containers))
		}
	}
	for _, in := range p.inject {
		fmt.Fprintf(&b, "[[inject]]\nname = %q\nhosts = [%q]\nheader = \"Authorization\"\nsecret = %q\n", in.name, in.host, in.secret)
	}
	for _, bu := range p.budgets {
		fmt.Fprintf(&b, "[[budget]]\nname = %q\n", bu.name)
		if bu.containers != nil {
			fmt.Fprintf(&b, "containers = [%s]\n", list(bu.containers))
		}
		if bu.hosts != nil {
			fmt.Fprintf(&b, "hosts = [%s]\n", list(bu.hosts))
		}
		for _, l := range []struct {
			key string
			v   int
		}{{"requests_per_minute", bu.rpm}, {"bytes_up_per_hour", bu.bytes}, {"new_hosts_per_hour", bu.newHosts}} {
			if l.v > 0 {
				fmt.Fprintf(&b, "%s = %d\n", l.key, l.v)
			}
		}
	}
	b.WriteString("[floor.hosts]\n")
	for _, k := range sortedKeys(p.floorHosts) {
		fmt.Fprintf(&b, "%q = %q\n", k, p.floorHosts[k])
	}
	b.WriteString("[sources]\n")
	for i, name := range genContainers {
		fmt.Fprintf(&b, "%s = [\"10.0.0.%d\"]\n", name, i+1)
	}
	for _, name := range sortedKeys(p.sections) {
		sec := p.sections[name]
		fmt.Fprintf(&b, "[container.%s]\ntrusted = [%s]\ndeny = [%s]\n", name, list(sec.trusted), list(sec.deny))
	}
	for _, e := range p.mcp {
		fmt.Fprintf(&b, "[[mcp]]\nname = %q\nhost = %q\npath = %q\n", e.name, e.host, e.path)
		for _, r := range e.rules {
			fmt.Fprintf(&b, "[[mcp.rule]]\nname = %q\ntools = [%s]\nverdict = %q\n", r.name, list(r.paths), r.verdict)
			if r.containers != nil {
				fmt.Fprintf(&b, "containers = [%s]\n", list(r.containers))
			}
		}
	}
	return b.String()
}

// mcpLoosenedBy is the property tests' own account of an MCP message decided less
// restrictively for container ct: every message of genCalls and the protocol's kinds, in a
// request to every endpoint path either policy names, on every endpoint host and as written in
// upper case, plainly and through a tunnel. It returns what loosened, or "".
func mcpLoosenedBy(old, new *Policy, ct string) string {
	msgs := []MCPMessage{{Kind: MCPProtocol, Method: "initialize"}, {Kind: MCPOther, Method: "prompts/get"}, {Kind: MCPUnknown, Method: "x"}}
	for _, c := range genCalls {
		msgs = append(msgs, MCPMessage{Kind: MCPTool, Method: "tools/call", Tool: c})
	}
	for _, h := range genMCPHosts {
		for _, path := range append(genMCPPaths, "/MCP/", "/M", "/m", "/mcp/", "//mcp", "/mcp;x", "/Mcp", "/other") {
			for _, method := range []string{"POST", "GET", "DELETE", "PATCH"} {
				// A POST carries a message; a GET or a DELETE none (the stream, the session's
				// end); another method is none MCP uses.
				ms := msgs
				switch method {
				case "GET", "DELETE":
					ms = []MCPMessage{{Kind: MCPProtocol, Method: method}}
				case "PATCH":
					ms = []MCPMessage{{Kind: MCPUnknown, Method: method}}
				}
				for _, m := range ms {
					od, nd := old.mcpDecision(h, method, path, ct, m), new.mcpDecision(h, method, path, ct, m)
					if nd.Verdict < od.Verdict {
						return fmt.Sprintf("MCP %s %s %s%s from %s: %v (%s) → %v (%s)", mcpWords(m), method, h, path, ct, od.Verdict, od.Rule, nd.Verdict, nd.Rule)
					}
					tun := func(p *Policy, d Decision) Decision {
						return tunnelDecision(p, h, p.Evaluate(Request{Host: h, Method: "CONNECT", Connect: true, Container: ct}), p.EvaluateIntercept(h, ct), d)
					}
					if ot, nt := tun(old, od), tun(new, nd); nt.Verdict < ot.Verdict {
						return fmt.Sprintf("MCP %s %s %s%s through a tunnel from %s: %v → %v", mcpWords(m), method, h, path, ct, ot.Verdict, nt.Verdict)
					}
				}
			}
		}
	}
	return ""
}

// loosenedBy is the property tests' own account of "decided less restrictively", written apart
// from the differential check: for one host, whether its properties loosen; for one request to
// it from container ct, whether the plain request, the CONNECT at the domain, the CONNECT to
// decrypt or the request through a tunnel (as a gate with a signer opens it) loosens. It
// returns what loosened, or "".
func loosenedBy(old, new *Policy, ct, host, method, path string) string {
	switch {
	case !old.Spliced(host) && new.Spliced(host):
		return "spliced"
	case !old.Trusted(host, ct) && new.Trusted(host, ct):
		return "trusted for container " + ct
	case old.Floor.Hosts[host] != new.Floor.Hosts[host]:
		return "floor.hosts"
	}
	if oj, nj := old.InjectionFor(host), new.InjectionFor(host); nj != nil && (oj == nil || oj.Secret != nj.Secret || oj.Header != nj.Header || oj.Query != nj.Query || oj.Format != nj.Format) {
		return "inject"
	}
	verdicts := func(p *Policy) (plain, connect, intercept, tunnel Verdict) {
		plain = p.Evaluate(Request{Host: host, Method: method, Path: path, Container: ct}).Verdict
		connect = p.Evaluate(Request{Host: host, Method: "CONNECT", Connect: true, Container: ct}).Verdict
		intercept = p.EvaluateIntercept(host, ct).Verdict
		tunnel = max(intercept, plain)
		if p.Spliced(host) {
			tunnel = connect
		}
		return
	}
	op, oc, oi, ot := verdicts(old)
	np, nc, ni, nt := verdicts(new)
	switch {
	case np < op:
		return fmt.Sprintf("%s %s%s from %s: %v → %v", method, host, path, ct, op, np)
	case nc < oc:
		return fmt.Sprintf("CONNECT %s at the domain from %s: %v → %v", host, ct, oc, nc)
	case ni < oi:
		return fmt.Sprintf("CONNECT %s to decrypt from %s: %v → %v", host, ct, oi, ni)
	case nt < ot:
		return fmt.Sprintf("%s %s%s through a tunnel from %s: %v → %v", method, host, path, ct, ot, nt)
	}
	return ""
}

// budgetLoosened is the property tests' own account of a budget loosened for one container
// and host: a limit some old budget puts on the container's requests to the host that no new
// budget puts as low. (Each budget is a bound on what it counts, so a tightening keeps every
// old bound at every container and host.) It returns what loosened, or "".
func budgetLoosened(old, new *Policy, container, host string) string {
	limits := func(b *Budget) [3]int64 { return [3]int64{b.RequestsPerMinute, b.BytesUpPerHour, b.NewHostsPerHour} }
	for _, ob := range old.BudgetsFor(container, host) {
		for m, l := range limits(ob) {
			if l == 0 {
				continue
			}
			kept := false
			for _, nb := range new.BudgetsFor(container, host) {
				if n := limits(nb)[m]; n > 0 && n <= l {
					kept = true
				}
			}
			if !kept {
				return fmt.Sprintf("budget %q: limit %d of %s on container %s to %s", ob.Name, l, [3]string{"requests_per_minute", "bytes_up_per_hour", "new_hosts_per_hour"}[m], container, host)
			}
		}
	}
	return ""
}

var (
	randHosts = []string{"a.example.com", "b.example.com", "x.a.example.com", "y.x.a.example.com", "example.com", "c.org",
		"d.c.org", "d.net", "unrelated.io", "mcp.test"}
	randSegs = []string{"a", "b", "x.git", "A", "y", "%2F", "..", "a;p", "B.GIT", ""}
)

// randomRequest is a request of the independent set: from either container, any known method,
// hosts the patterns name and do not, paths in several readings.
func randomRequest(r chooser) (ct, host, method, path string) {
	ct = genContainers[r.Intn(len(genContainers))]
	host = randHosts[r.Intn(len(randHosts))]
	method = unnamedMethod
	if i := r.Intn(len(knownMethods) + 1); i < len(knownMethods) {
		method = knownMethods[i]
	}
	var segs []string
	for i, n := 0, r.Intn(4); i < n; i++ {
		segs = append(segs, randSegs[r.Intn(len(randSegs))])
	}
	return ct, host, method, "/" + strings.Join(segs, "/")
}

// checkPair checks the two properties of Compare on one pair of policy texts:
//   - when the rule-by-rule comparison says tightening, the differential check finds nothing
//     (the diff never misses what the decisions show);
//   - when Compare says tightening, no decision loosens, for the differential's own request set
//     and for an independent random set.
//
// It reports whether the pair loaded and Compare said tightening.
func checkPair(t *testing.T, r chooser, oldSrc, newSrc string, random int) bool {
	t.Helper()
	old, err1 := Load("o.toml", []byte(oldSrc))
	new, err2 := Load("n.toml", []byte(newSrc))
	if err1 != nil || err2 != nil {
		return false
	}
	d := differential(old, new)
	if fc := compareFiles(old, new); len(fc.Loosenings) == 0 && len(d.examples) > 0 {
		t.Fatalf("the rule-by-rule comparison says tightening (%q), the decisions loosen: %s\nold:\n%s\nnew:\n%s",
			fc.Tightenings, d.examples[0], oldSrc, newSrc)
	}
	if len(d.examples) == 0 && !d.truncated {
		// The differential check alone is complete for the random requests too.
		for _, ct := range genContainers {
			if what := mcpLoosenedBy(old, new, ct); what != "" {
				t.Fatalf("the differential check found nothing (%d decisions), and %s loosens\nold:\n%s\nnew:\n%s", d.evaluated, what, oldSrc, newSrc)
			}
		}
		for i := 0; i < random; i++ {
			ct, h, m, p := randomRequest(r)
			if what := loosenedBy(old, new, ct, h, m, p); what != "" {
				t.Fatalf("the differential check found nothing (%d decisions), and %s loosens\nold:\n%s\nnew:\n%s", d.evaluated, what, oldSrc, newSrc)
			}
		}
	}
	c := Compare(old, new)
	if !c.Tightening() {
		return false
	}
	fail := func(what string) {
		t.Helper()
		t.Fatalf("Compare says tightening (%q), and %s loosens\nold:\n%s\nnew:\n%s", c.Tightenings, what, oldSrc, newSrc)
	}
	ov, nv, fill := newRuleView(old), newRuleView(new), filler(old, new)
	for _, h := range probeHosts(old, new) {
		for _, ct := range genContainers { // every container, not one of each kind
			ors, nrs := ov.rulesFor(h, ct), nv.rulesFor(h, ct)
			methods, paths := probeRequests(fill, changedWords(ov, ors, nv, nrs), old, ors, new, nrs)
			for _, m := range methods {
				for _, p := range paths {
					if what := loosenedBy(old, new, ct, h, m, p); what != "" {
						fail(what)
					}
				}
			}
		}
	}
	for i := 0; i < random; i++ {
		ct, h, m, p := randomRequest(r)
		if what := loosenedBy(old, new, ct, h, m, p); what != "" {
			fail(what)
		}
	}
	for _, h := range append(probeHosts(old, new), randHosts...) {
		for _, ct := range genContainers {
			if what := budgetLoosened(old, new, ct, h); what != "" {
				fail(what)
			}
		}
	}
	for _, ct := range genContainers {
		if what := mcpLoosenedBy(old, new, ct); what != "" {
			fail(what)
		}
	}
	return true
}

// TestCompareDecisionsProperty feeds random policy pairs (random policies and small random edits
// of them) through both halves of Compare; see checkPair. The seed is fixed.
func TestCompareDecisionsProperty(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	g := generator{r: rng}
	checked, pairs := 0, 0
	for iter := 0; iter < 3000; iter++ {
		base := g.policy()
		next := g.mutate(base)
		if iter%4 == 0 {
			next = g.policy() // an unrelated pair now and then
		}
		pairs++
		if checkPair(t, rng, base.render(), next.render(), 80) {
			checked++
		}
	}
	if checked < 250 {
		t.Fatalf("only %d of %d pairs were tightenings; the generator needs to make more", checked, pairs)
	}
	t.Logf("%d pairs, %d tightenings checked", pairs, checked)
}

// FuzzCompare is TestCompareDecisionsProperty with the fuzzer's bytes for the random choices:
// go test -fuzz FuzzCompare ./internal/policy/
func FuzzCompare(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x05\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f"))
	f.Add([]byte("CONNECT github.com:443 at the domain, a free rule narrowed"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &byteChooser{b: data}
		g := generator{r: r}
		base := g.policy()
		next := g.mutate(base)
		checkPair(t, r, base.render(), next.render(), 50)
	})
}

func TestPathSamples(t *testing.T) {
	cases := []struct {
		pattern string
		want    []string
	}{
		{"/admin/**", []string{"/admin", "/admin/x", "/admin/x/x", "/admin/x/x", "/admin;x/x", "/ADMIN/X"}},
		{"/**/git-receive-pack", []string{"/", "/git-receive-pack", "/x/git-receive-pack", "/x/x/git-receive-pack", "/x/git-receive-pack/x", "/x;x/git-receive-pack"}},
		{"/*/*.git/info/refs", []string{"/", "/x/x.git/info/refs", "/x/x.git/info/refs/x", "/x;x/x.git/info/refs"}},
		{"/", []string{"/", "/x", "/;x"}},
	}
	for _, c := range cases {
		t.Run(c.pattern, func(t *testing.T) {
			got := pathSamples(c.pattern, "x")
			for _, w := range c.want {
				if !slices.Contains(got, w) {
					t.Errorf("samples %q lack %q", got, w)
				}
			}
			for _, s := range got {
				if !strings.HasPrefix(s, "/") {
					t.Errorf("sample %q does not start with /", s)
				}
			}
		})
	}
}

func TestProbeHosts(t *testing.T) {
	p := load(t, "version = 1\ntrusted = [\"*.example.com\", \"x.example.com\"]\ndeny = [\"*.invalid\"]\n[[rule]]\nname = \"r\"\nhosts = [\"*.a.example.com\", \"B.org\"]\nverdict = \"ask\"\n")
	got := probeHosts(p)
	for _, want := range []string{"example.com", "xx.example.com", "x.example.com", "a.example.com", "x.a.example.com", "b.org", "invalid", "x.invalid"} {
		if !slices.Contains(got, want) {
			t.Errorf("hosts %q lack %q", got, want)
		}
	}
	unnamed := 0
	for _, h := range got {
		if strings.HasPrefix(h, "lockhttp-unnamed.") && p.trusted.lookup(h) == "" && p.deny.lookup(h) == "" {
			unnamed++
		}
	}
	if unnamed != 1 {
		t.Errorf("%d names under no pattern in %q; want 1", unnamed, got)
	}
}

func BenchmarkCompare1000(b *testing.B) {
	src := bigPolicy(1000)
	old := mustLoad(b, src)
	edits := []struct{ name, src string }{
		{"same", src + "# a comment\n"},
		{"one rule", strings.Replace(src, "name = \"r4\"\nhosts = [\"h4.example.com\"]\nverdict = \"ask\"", "name = \"r4\"\nhosts = [\"h4.example.com\"]\nverdict = \"deny\"", 1)},
		{"a rule for every host", src + "[[rule]]\nname = \"all\"\nhosts = [\"*\"]\nmethods = [\"DELETE\"]\nverdict = \"ask\"\n"},
		{"github.com rule gains a host", strings.Replace(src, "name = \"r2\"\nhosts = [\"github.com\"]", "name = \"r2\"\nhosts = [\"github.com\", \"gitlab.com\"]", 1)},
		{"path of a rule on a host with 500 rules", strings.Replace(src, "paths = [\"/v3/*/items/**\"]", "paths = [\"/v3/*/items/*\"]", 1)},
	}
	for _, e := range edits {
		new := mustLoad(b, e.src)
		b.Run(e.name, func(b *testing.B) {
			b.ReportAllocs()
			var c Comparison
			for i := 0; i < b.N; i++ {
				c = Compare(old, new)
			}
			b.ReportMetric(float64(c.Checked), "decisions")
		})
	}
}
