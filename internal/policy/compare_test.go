package policy

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"
)

func load(t testing.TB, src string) *Policy {
	t.Helper()
	p, err := Load("p.toml", []byte(src))
	if err != nil {
		t.Fatalf("%v\n%s", err, src)
	}
	return p
}

const cmpBase = `version = 1
trusted = ["github.com", "*.githubusercontent.com"]
deny = ["pastebin.com", "*.ngrok.io"]
splice = ["pinned.example.com"]

[[rule]]
name = "gh-push"
hosts = ["github.com"]
methods = ["POST"]
paths = ["/**/git-receive-pack"]
verdict = "ask"

[[rule]]
name = "npm-free"
hosts = ["registry.npmjs.org"]
methods = ["GET"]
verdict = "free"

[[rule]]
name = "no-admin"
hosts = ["api.example.com"]
paths = ["/admin/**"]
verdict = "deny"

[[inject]]
name = "gh"
hosts = ["api.github.com"]
header = "Authorization"
secret = "github"

[[secret]]
name = "acme"
pattern = "acme_[a-z]{20}"
hosts = ["api.acme.example"]

[jwt]
hosts = ["auth.example.com"]

[floor]
allow_cidrs = ["10.1.0.0/16"]
allow_ports = [80, 443]

[floor.hosts]
"git.internal.example" = "10.1.2.3"

[sources]
agent = ["172.30.0.0/24"]

[settings]
hold = "60s"
connect_grant = "10m"
buffer_limit = "8MiB"
heuristics = "enforce"
`

func TestCompare(t *testing.T) {
	base := load(t, cmpBase)
	cases := []struct {
		name  string
		edit  func(string) string
		loose string // a loosening that must be listed ("" for a pure tightening)
		tight string // a tightening that must be listed ("" for none)
	}{
		{"no change", func(s string) string { return s + "\n# a comment\n" }, "", ""},
		{"ask → free", func(s string) string { return strings.Replace(s, "verdict = \"ask\"", "verdict = \"free\"", 1) }, `rule "gh-push": verdict ask → free`, ""},
		{"free → ask", func(s string) string {
			return strings.Replace(s, "methods = [\"GET\"]\nverdict = \"free\"", "methods = [\"GET\"]\nverdict = \"ask\"", 1)
		}, "", `rule "npm-free": verdict free → ask`},
		{"deny → ask", func(s string) string { return strings.Replace(s, "verdict = \"deny\"", "verdict = \"ask\"", 1) }, `rule "no-admin": verdict deny → ask`, ""},
		{"trusted added", func(s string) string {
			return strings.Replace(s, `trusted = ["github.com",`, `trusted = ["*.ngrok.io", "github.com",`, 1)
		}, `trusted: + "*.ngrok.io"`, ""},
		{"trusted removed", func(s string) string { return strings.Replace(s, `"*.githubusercontent.com"]`, `]`, 1) }, "", `trusted: - "*.githubusercontent.com"`},
		{"trusted broadened to a covering pattern", func(s string) string {
			return strings.Replace(s, `trusted = ["github.com",`, `trusted = ["github.com", "*.github.com",`, 1)
		}, `trusted: + "*.github.com"`, ""},
		{"deny removed", func(s string) string { return strings.Replace(s, `"pastebin.com", `, ``, 1) }, `deny: - "pastebin.com"`, ""},
		{"deny added", func(s string) string { return strings.Replace(s, `deny = [`, `deny = ["evil.example", `, 1) }, "", `deny: + "evil.example"`},
		{"deny broadened", func(s string) string {
			return strings.Replace(s, `"pastebin.com"`, `"*.pastebin.com", "pastebin.com"`, 1)
		}, "", `deny: + "*.pastebin.com"`},
		{"splice added", func(s string) string { return strings.Replace(s, `splice = [`, `splice = ["github.com", `, 1) }, `splice: + "github.com"`, ""},
		{"ask rule loses a host", func(s string) string {
			return strings.Replace(s, "hosts = [\"github.com\"]\nmethods = [\"POST\"]", "hosts = [\"gitlab.com\"]\nmethods = [\"POST\"]", 1)
		}, `rule "gh-push": hosts: - "github.com"`, `rule "gh-push": hosts: + "gitlab.com"`},
		{"splice removed", func(s string) string { return strings.Replace(s, `splice = ["pinned.example.com"]`, `splice = []`, 1) }, `splice: - "pinned.example.com"`, ""},
		{"ask rule loses its methods (every method now)", func(s string) string { return strings.Replace(s, "methods = [\"POST\"]\n", "", 1) }, "", "methods: POST → every method"},
		{"ask rule narrowed to a method", func(s string) string {
			return strings.Replace(s, "paths = [\"/admin/**\"]", "paths = [\"/admin/**\"]\nmethods = [\"DELETE\"]", 1)
		}, `rule "no-admin": methods: every method → DELETE`, ""},
		{"free rule widened to every method", func(s string) string {
			return strings.Replace(s, "methods = [\"GET\"]\nverdict = \"free\"", "verdict = \"free\"", 1)
		}, `rule "npm-free": methods: GET → every method`, ""},
		{"free rule gains a host", func(s string) string {
			return strings.Replace(s, `hosts = ["registry.npmjs.org"]`, `hosts = ["registry.npmjs.org", "evil.example"]`, 1)
		}, `rule "npm-free": hosts: + "evil.example"`, ""},
		{"deny rule path changed", func(s string) string { return strings.Replace(s, `"/admin/**"`, `"/admin/users"`, 1) }, `rule "no-admin": paths: - /admin/**`, ""},
		{"ask rule removed", func(s string) string { return strings.Replace(s, `name = "gh-push"`, `name = "gh-push-renamed"`, 1) }, `rule "gh-push": - ask`, `rule "gh-push-renamed": + ask`},
		{"free rule added", func(s string) string {
			return s + "\n[[rule]]\nname = \"x\"\nhosts = [\"x.example\"]\nverdict = \"free\"\n"
		}, `rule "x": + free`, ""},
		{"deny rule added", func(s string) string {
			return s + "\n[[rule]]\nname = \"x\"\nhosts = [\"x.example\"]\nverdict = \"deny\"\n"
		}, "", `rule "x": + deny`},
		{"allow_cidrs added", func(s string) string {
			return strings.Replace(s, `allow_cidrs = ["10.1.0.0/16"]`, `allow_cidrs = ["10.1.0.0/16", "10.0.0.0/8"]`, 1)
		}, "floor.allow_cidrs: + 10.0.0.0/8", ""},
		{"allow_cidrs narrowed", func(s string) string {
			return strings.Replace(s, `allow_cidrs = ["10.1.0.0/16"]`, `allow_cidrs = ["10.1.2.0/24"]`, 1)
		}, "", "floor.allow_cidrs: - 10.1.0.0/16"},
		{"allow_ports added", func(s string) string {
			return strings.Replace(s, `allow_ports = [80, 443]`, `allow_ports = [80, 443, 22]`, 1)
		}, "floor.allow_ports: + 22", ""},
		{"floor.hosts changed", func(s string) string { return strings.Replace(s, `"10.1.2.3"`, `"10.1.2.4"`, 1) }, "floor.hosts: git.internal.example: 10.1.2.3 → 10.1.2.4", ""},
		{"a source added", func(s string) string {
			return strings.Replace(s, `agent = ["172.30.0.0/24"]`, `agent = ["172.30.0.0/24", "172.31.0.0/24"]`, 1)
		}, "sources.agent: + 172.31.0.0/24", ""},
		{"hold longer", func(s string) string { return strings.Replace(s, `hold = "60s"`, `hold = "600s"`, 1) }, "settings.hold: 1m0s → 10m0s", ""},
		{"hold shorter", func(s string) string { return strings.Replace(s, `hold = "60s"`, `hold = "30s"`, 1) }, "", "settings.hold: 1m0s → 30s"},
		{"heuristics enforce → shadow", func(s string) string { return strings.Replace(s, `heuristics = "enforce"`, `heuristics = "shadow"`, 1) }, "settings.heuristics: enforce → shadow", ""},
		{"http2 off", func(s string) string {
			return strings.Replace(s, `heuristics = "enforce"`, "heuristics = \"enforce\"\nhttp2 = \"off\"", 1)
		}, "", "settings.http2: on → off"},
		{"buffer_limit larger", func(s string) string { return strings.Replace(s, `"8MiB"`, `"64MiB"`, 1) }, "settings.buffer_limit", ""},
		{"inject added", func(s string) string {
			return s + "\n[[inject]]\nname = \"npm\"\nhosts = [\"registry.npmjs.org\"]\nheader = \"Authorization\"\nsecret = \"npm\"\n"
		}, `inject: + "npm"`, ""},
		{"inject on http:// too", func(s string) string {
			return strings.Replace(s, `secret = "github"`, "secret = \"github\"\nhttp = true", 1)
		},
			`inject "gh": http = true`, ""},
		{"inject made optional", func(s string) string {
			return strings.Replace(s, `secret = "github"`, "secret = \"github\"\noptional = true", 1)
		}, `inject "gh": optional = true`, ""},
		{"inject removed", func(s string) string {
			return strings.Replace(s, "[[inject]]\nname = \"gh\"\nhosts = [\"api.github.com\"]\nheader = \"Authorization\"\nsecret = \"github\"\n", "", 1)
		}, "", `inject: - "gh"`},
		{"secret hosts widened", func(s string) string {
			return strings.Replace(s, `hosts = ["api.acme.example"]`, `hosts = ["api.acme.example", "*"]`, 1)
		}, `secret "acme": hosts: + "*"`, ""},
		{"secret removed", func(s string) string {
			return strings.Replace(s, "[[secret]]\nname = \"acme\"\npattern = \"acme_[a-z]{20}\"\nhosts = [\"api.acme.example\"]\n", "", 1)
		}, `secret "acme": - (removed)`, ""},
		{"jwt host added", func(s string) string {
			return strings.Replace(s, `hosts = ["auth.example.com"]`, `hosts = ["auth.example.com", "attacker.example"]`, 1)
		}, `jwt.hosts: + "attacker.example"`, ""},
		{"jwt host widened to its suffix", func(s string) string {
			return strings.Replace(s, `hosts = ["auth.example.com"]`, `hosts = ["*.example.com"]`, 1)
		}, `jwt.hosts: + "*.example.com"`, ""},
		{"jwt host respelled", func(s string) string {
			return strings.Replace(s, `hosts = ["auth.example.com"]`, `hosts = ["Auth.Example.com."]`, 1)
		}, "", ""},
		{"jwt host removed", func(s string) string {
			return strings.Replace(s, `hosts = ["auth.example.com"]`, `hosts = []`, 1)
		}, "", `jwt.hosts: - "auth.example.com"`},
		{"claude credentials changed", func(s string) string { return s + "\n[claude]\ncredentials = \"/elsewhere.toml\"\n" }, "claude.credentials", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := load(t, c.edit(cmpBase))
			cmp := Compare(base, n)
			all := strings.Join(cmp.Loosenings, "\n")
			if c.loose == "" && !cmp.Tightening() {
				t.Fatalf("counted as a loosening:\n%s", all)
			}
			if c.loose != "" && !strings.Contains(all, c.loose) {
				t.Fatalf("loosenings do not list %q:\n%s", c.loose, all)
			}
			if c.tight != "" && !strings.Contains(strings.Join(cmp.Tightenings, "\n"), c.tight) {
				t.Fatalf("tightenings do not list %q:\n%s", c.tight, strings.Join(cmp.Tightenings, "\n"))
			}
			// And back again: the reverse edit is never a loosening where this one was a
			// pure tightening... and the reverse of a pure loosening is a tightening.
			rev := Compare(n, base)
			if c.loose != "" && c.tight == "" && !rev.Tightening() && !strings.Contains(c.name, "changed") && !strings.Contains(c.name, "splice") {
				t.Errorf("the reverse of a loosening is counted as a loosening too:\n%s", strings.Join(rev.Loosenings, "\n"))
			}
		})
	}
}

// TestCompareJudgesDecisions: edits that read as narrowings but decide some request less
// restrictively are loosenings. A free whole-host rule given methods = ["CONNECT"] frees fewer
// requests inside a decrypted tunnel, but the CONNECT decided at the domain (a spliced host, or
// a gate without a signer) then sees a rule naming CONNECT, whose free verdict beats the host's
// ask rule for pushes: the tunnel that asked opens and carries POSTs unseen. A name dropped from
// [floor.hosts] is sent where DNS says instead of the address the operator gave it.
func TestCompareJudgesDecisions(t *testing.T) {
	const base = `version = 1
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
name = "pinned"
hosts = ["pinned.example.com"]
verdict = "free"

[[rule]]
name = "pinned-writes"
hosts = ["pinned.example.com"]
methods = ["POST", "PUT"]
verdict = "deny"

[floor.hosts]
"git.example.com" = "93.184.216.34"
`
	cases := []struct {
		name, from, to, loose string
	}{
		{"free whole-host rule narrowed to CONNECT",
			"name = \"gh\"\nhosts = [\"github.com\"]\n", "name = \"gh\"\nhosts = [\"github.com\"]\nmethods = [\"CONNECT\"]\n",
			`rule "gh": methods: every method → CONNECT`},
		{"free whole-host rule narrowed to GET and CONNECT",
			"name = \"gh\"\nhosts = [\"github.com\"]\n", "name = \"gh\"\nhosts = [\"github.com\"]\nmethods = [\"GET\", \"CONNECT\"]\n",
			`rule "gh": methods: every method → GET,CONNECT`},
		{"a spliced host's free rule narrowed to CONNECT",
			"name = \"pinned\"\nhosts = [\"pinned.example.com\"]\n", "name = \"pinned\"\nhosts = [\"pinned.example.com\"]\nmethods = [\"CONNECT\"]\n",
			`rule "pinned": methods: every method → CONNECT`},
		{"floor.hosts name removed", "\"git.example.com\" = \"93.184.216.34\"\n", "", "floor.hosts: - git.example.com"},
	}
	old := load(t, base)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src := strings.Replace(base, c.from, c.to, 1)
			if src == base {
				t.Fatal("the edit changed nothing")
			}
			cmp := Compare(old, load(t, src))
			if cmp.Tightening() {
				t.Fatalf("counted as a tightening: %q", cmp.Tightenings)
			}
			if all := strings.Join(cmp.Loosenings, "\n"); !strings.Contains(all, c.loose) {
				t.Fatalf("loosenings do not list %q:\n%s", c.loose, all)
			}
		})
	}
}

// TestCompareProperty: for random policies and random edits, when Compare says tightening, no
// request's decision gets less restrictive (plain requests, CONNECTs at the domain, decrypted
// CONNECTs, the port floor).
func TestCompareProperty(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	hosts := []string{"a.example.com", "b.example.com", "x.a.example.com", "example.com", "c.org", "d.net"}
	patterns := []string{"a.example.com", "*.example.com", "*.a.example.com", "example.com", "c.org", "*"}
	methods := []string{"GET", "POST", "PUT", "DELETE", "CONNECT"}
	segs := []string{"a", "b", "x.git", "*", "**", "*.git"}
	reqSegs := []string{"a", "b", "x.git", "A", "y", "%2F", ".."}
	vs := []string{"free", "ask", "deny"}
	ports := []int{80, 443, 8080, 22}
	type rrule struct {
		name, verdict         string
		hosts, methods, paths []string
	}
	type rpol struct {
		trusted, deny, splice []string
		rules                 []rrule
		ports                 []int
	}
	pick := func(list []string, n int) []string {
		var out []string
		for i := 0; i < n; i++ {
			p := list[rng.Intn(len(list))]
			if !contains(out, p) {
				out = append(out, p)
			}
		}
		return out
	}
	randomRule := func(i int) rrule {
		r := rrule{name: fmt.Sprintf("r%d", i), verdict: vs[rng.Intn(3)], hosts: pick(patterns, 1+rng.Intn(2))}
		switch rng.Intn(4) {
		case 0:
			r.methods = []string{"CONNECT"}
		case 1:
			r.methods = pick(methods[:4], 1+rng.Intn(2))
			if rng.Intn(2) == 0 {
				r.paths = []string{"/" + strings.Join(pick(segs, 1+rng.Intn(2)), "/")}
			}
		case 2:
			r.paths = []string{"/" + strings.Join(pick(segs, 1+rng.Intn(2)), "/")}
		}
		return r
	}
	randomPolicy := func() rpol {
		p := rpol{trusted: pick(patterns[:5], rng.Intn(3)), deny: pick(patterns[:5], rng.Intn(2)), splice: pick(patterns[:5], rng.Intn(2)),
			ports: append([]int(nil), ports[:1+rng.Intn(4)]...)}
		for i, n := 0, rng.Intn(6); i < n; i++ {
			p.rules = append(p.rules, randomRule(i))
		}
		return p
	}
	// mutate makes a small random edit: most of them are tightenings or loosenings of one part.
	mutate := func(p rpol) rpol {
		q := p
		q.rules = append([]rrule(nil), p.rules...)
		for k := 0; k < 1+rng.Intn(2); k++ {
			switch rng.Intn(9) {
			case 0:
				q.rules = append(q.rules, randomRule(10+rng.Intn(10)))
			case 1:
				if len(q.rules) > 0 {
					i := rng.Intn(len(q.rules))
					q.rules = append(q.rules[:i:i], q.rules[i+1:]...)
				}
			case 2:
				if len(q.rules) > 0 {
					i := rng.Intn(len(q.rules))
					q.rules[i].verdict = vs[rng.Intn(3)]
				}
			case 3:
				if len(q.rules) > 0 {
					i := rng.Intn(len(q.rules))
					r := randomRule(0)
					q.rules[i].hosts, q.rules[i].methods, q.rules[i].paths = r.hosts, r.methods, r.paths
				}
			case 4:
				q.trusted = pick(patterns[:5], rng.Intn(3))
			case 5:
				q.deny = pick(patterns[:5], rng.Intn(3))
			case 6:
				q.splice = pick(patterns[:5], rng.Intn(2))
			case 7:
				q.ports = append([]int(nil), ports[:1+rng.Intn(4)]...)
			case 8:
				if len(q.rules) > 0 {
					i := rng.Intn(len(q.rules))
					q.rules[i].hosts = pick(patterns, 1+rng.Intn(3))
				}
			}
		}
		return q
	}
	render := func(p rpol) string {
		var b strings.Builder
		quote := func(ss []string) string {
			q := make([]string, len(ss))
			for i, s := range ss {
				q[i] = fmt.Sprintf("%q", s)
			}
			return strings.Join(q, ", ")
		}
		fmt.Fprintf(&b, "version = 1\ntrusted = [%s]\ndeny = [%s]\nsplice = [%s]\n", quote(p.trusted), quote(p.deny), quote(p.splice))
		for _, r := range p.rules {
			fmt.Fprintf(&b, "[[rule]]\nname = %q\nhosts = [%s]\nverdict = %q\n", r.name, quote(r.hosts), r.verdict)
			if len(r.methods) > 0 {
				fmt.Fprintf(&b, "methods = [%s]\n", quote(r.methods))
			}
			if len(r.paths) > 0 {
				fmt.Fprintf(&b, "paths = [%s]\n", quote(r.paths))
			}
		}
		b.WriteString("[floor]\nallow_ports = [")
		for i, port := range p.ports {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprint(&b, port)
		}
		b.WriteString("]\n")
		return b.String()
	}
	rank := func(p *Policy, kind int, host, method, path string, port int) Verdict {
		if !contains(intsToStrings(p.Floor.AllowPorts), fmt.Sprint(port)) {
			return Deny
		}
		switch kind {
		case 0:
			return p.Evaluate(Request{Host: host, Method: method, Path: path}).Verdict
		case 1: // CONNECT at the domain, or decrypted when not spliced
			if p.Spliced(host) {
				return p.Evaluate(Request{Host: host, Method: "CONNECT", Connect: true}).Verdict
			}
			// Decrypted: the CONNECT's refusal, then every request inside.
			if p.EvaluateIntercept(host, "").Verdict == Deny {
				return Deny
			}
			return p.Evaluate(Request{Host: host, Method: method, Path: path}).Verdict
		default: // a gate without a signer
			return p.Evaluate(Request{Host: host, Method: "CONNECT", Connect: true}).Verdict
		}
	}
	checked := 0
	for iter := 0; iter < 3000; iter++ {
		base := randomPolicy()
		oldSrc, newSrc := render(base), render(mutate(base))
		old, err1 := Load("o.toml", []byte(oldSrc))
		new, err2 := Load("n.toml", []byte(newSrc))
		if err1 != nil || err2 != nil {
			continue
		}
		if !Compare(old, new).Tightening() {
			continue
		}
		checked++
		for q := 0; q < 60; q++ {
			var ps []string
			for s := 0; s < rng.Intn(4); s++ {
				ps = append(ps, reqSegs[rng.Intn(len(reqSegs))])
			}
			host, method, path := hosts[rng.Intn(len(hosts))], methods[rng.Intn(4)], "/"+strings.Join(ps, "/")
			port := ports[rng.Intn(len(ports))]
			kind := rng.Intn(3)
			if ov, nv := rank(old, kind, host, method, path, port), rank(new, kind, host, method, path, port); nv < ov {
				t.Fatalf("Compare said tightening, but %s %s%s (kind %d, port %d) went from %v to %v\nold:\n%s\nnew:\n%s",
					method, host, path, kind, port, ov, nv, oldSrc, newSrc)
			}
		}
	}
	if checked < 50 {
		t.Fatalf("only %d tightening pairs were checked; the generator needs to make more", checked)
	}
	t.Logf("%d tightening pairs checked", checked)
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func intsToStrings(ns []int) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = fmt.Sprint(n)
	}
	return out
}
