package policy

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// scopeBase has two containers, coder and reviewer, rules scoped to one or both, and a
// [container.NAME] section for each.
const scopeBase = `version = 1
trusted = ["github.com"]
deny = ["pastebin.com"]

[[rule]]
name = "coder-push"
hosts = ["github.com"]
methods = ["POST"]
paths = ["/**/git-receive-pack"]
containers = ["coder"]
verdict = "free"

[[rule]]
name = "coder-tunnel"
hosts = ["tunnel.example.com"]
methods = ["CONNECT"]
containers = ["coder"]
verdict = "free"

[[rule]]
name = "no-gists"
hosts = ["gist.github.com"]
containers = ["reviewer"]
verdict = "deny"

[[rule]]
name = "api-writes"
hosts = ["api.example.com"]
methods = ["POST", "PUT"]
containers = ["reviewer", "coder"]
verdict = "ask"

[[rule]]
name = "api"
hosts = ["api.example.com"]
verdict = "free"

[sources]
coder = ["10.0.0.2"]
reviewer = ["10.0.0.3"]

[container.reviewer]
trusted = ["docs.python.org"]

[container.coder]
deny = ["*.ngrok.io"]
`

// TestScopedRules: a rule scoped to a container decides that container's requests and no
// other's, whatever kind of decision (a request, a CONNECT at the domain, a CONNECT to decrypt).
func TestScopedRules(t *testing.T) {
	p := load(t, scopeBase)
	push := Request{Host: "github.com", Method: "POST", Path: "/o/r.git/git-receive-pack"}
	cases := []struct {
		name      string
		container string
		r         Request
		intercept bool
		verdict   Verdict
		rule      string
		reason    string // a part of the reason ("" to skip)
	}{
		{"a free rule frees its container's request", "coder", push, false, Free, "coder-push", `rule "coder-push" (free): POST on github.com at /**/git-receive-pack for container coder`},
		{"and asks for the other's", "reviewer", push, false, Ask, RuleDefault, "trusted for reads"},
		{"a scoped free CONNECT rule opens its container's tunnel at the domain", "coder", Request{Host: "tunnel.example.com", Method: "CONNECT", Connect: true}, false, Free, "coder-tunnel", ""},
		{"and not the other's", "reviewer", Request{Host: "tunnel.example.com", Method: "CONNECT", Connect: true}, false, Ask, RuleDefault, ""},
		{"a scoped deny rule refuses its container's request", "reviewer", Request{Host: "gist.github.com", Method: "GET", Path: "/"}, false, Deny, "no-gists", "for container reviewer"},
		{"its CONNECT to decrypt", "reviewer", Request{Host: "gist.github.com"}, true, Deny, "no-gists", ""},
		{"its CONNECT at the domain", "reviewer", Request{Host: "gist.github.com", Method: "CONNECT", Connect: true}, false, Deny, "no-gists", ""},
		{"and not the other's", "coder", Request{Host: "gist.github.com", Method: "GET", Path: "/"}, false, Ask, RuleDefault, ""},
		{"nor its CONNECT to decrypt", "coder", Request{Host: "gist.github.com"}, true, Free, RuleDecrypt, ""},
		{"a rule for both containers decides both", "coder", Request{Host: "api.example.com", Method: "PUT", Path: "/x"}, false, Ask, "api-writes", "for containers reviewer, coder"},
		{"both", "reviewer", Request{Host: "api.example.com", Method: "POST", Path: "/x"}, false, Ask, "api-writes", ""},
		{"the rule for every container still decides", "reviewer", Request{Host: "api.example.com", Method: "GET", Path: "/x"}, false, Free, "api", ""},
		// A container [sources] does not name never reaches evaluation (the judge refuses it
		// first); should one, scoped ask and deny rules apply to it and scoped free rules do not.
		{"an unnamed container meets scoped deny rules", "", Request{Host: "gist.github.com", Method: "GET", Path: "/"}, false, Deny, "no-gists", ""},
		{"and scoped ask rules", "intruder", Request{Host: "api.example.com", Method: "POST", Path: "/x"}, false, Ask, "api-writes", ""},
		{"and no scoped free rule", "intruder", push, false, Ask, RuleDefault, ""},
		{"nor a scoped free CONNECT rule", "", Request{Host: "tunnel.example.com", Method: "CONNECT", Connect: true}, false, Ask, RuleDefault, ""},
	}
	for _, c := range cases {
		t.Run(c.name+" ("+c.container+")", func(t *testing.T) {
			var d Decision
			if c.intercept {
				d = p.EvaluateIntercept(c.r.Host, c.container)
			} else {
				r := c.r
				r.Container = c.container
				d = p.Evaluate(r)
			}
			if d.Verdict != c.verdict || d.Rule != c.rule || !strings.Contains(d.Reason, c.reason) {
				t.Fatalf("got %v %q (%s); want %v %q (%s)", d.Verdict, d.Rule, d.Reason, c.verdict, c.rule, c.reason)
			}
			if (d.Verdict == Deny) != (d.Code == CodeRule) {
				t.Errorf("code %q with %v", d.Code, d.Verdict)
			}
		})
	}
}

// TestContainerSections: a [container.NAME] section's trusted and deny lists apply to that
// container's requests alone, beside the top-level lists.
func TestContainerSections(t *testing.T) {
	p := load(t, scopeBase)
	cases := []struct {
		name, container string
		r               Request
		intercept       bool
		verdict         Verdict
		rule, reason    string
	}{
		{"a section's trusted host frees its container's reads", "reviewer", Request{Host: "docs.python.org", Method: "GET", Path: "/3/"}, false, Free, RuleTrusted, "reads (GET, HEAD, OPTIONS) of a host [container.reviewer] trusts are free"},
		{"not its writes", "reviewer", Request{Host: "docs.python.org", Method: "POST", Path: "/3/"}, false, Ask, RuleDefault, reasonTrustedWrite},
		{"nor the other container's reads", "coder", Request{Host: "docs.python.org", Method: "GET", Path: "/3/"}, false, Ask, RuleDefault, reasonUntrusted},
		{"the top-level trusted list is every container's", "coder", Request{Host: "github.com", Method: "GET", Path: "/"}, false, Free, RuleTrusted, reasonTrusted},
		{"a section's deny list refuses its container's request", "coder", Request{Host: "x.ngrok.io", Method: "GET", Path: "/"}, false, Deny, RuleDenyList, `the deny list of [container.coder] names "*.ngrok.io"`},
		{"its CONNECT to decrypt", "coder", Request{Host: "x.ngrok.io"}, true, Deny, RuleDenyList, "[container.coder]"},
		{"its CONNECT at the domain", "coder", Request{Host: "x.ngrok.io", Method: "CONNECT", Connect: true}, false, Deny, RuleDenyList, "[container.coder]"},
		{"not the other container's", "reviewer", Request{Host: "x.ngrok.io", Method: "GET", Path: "/"}, false, Ask, RuleDefault, ""},
		{"the top-level deny list is every container's", "reviewer", Request{Host: "pastebin.com", Method: "GET", Path: "/"}, false, Deny, RuleDenyList, `the deny list names "pastebin.com"`},
		{"an unnamed container meets every section's deny list", "intruder", Request{Host: "x.ngrok.io", Method: "GET", Path: "/"}, false, Deny, RuleDenyList, "comes from no container of [sources]"},
		{"and no section's trusted list", "intruder", Request{Host: "docs.python.org", Method: "GET", Path: "/"}, false, Ask, RuleDefault, ""},
	}
	for _, c := range cases {
		t.Run(c.name+" ("+c.container+")", func(t *testing.T) {
			var d Decision
			if c.intercept {
				d = p.EvaluateIntercept(c.r.Host, c.container)
			} else {
				r := c.r
				r.Container = c.container
				d = p.Evaluate(r)
			}
			if d.Verdict != c.verdict || d.Rule != c.rule || !strings.Contains(d.Reason, c.reason) {
				t.Fatalf("got %v %q (%s); want %v %q (%s)", d.Verdict, d.Rule, d.Reason, c.verdict, c.rule, c.reason)
			}
		})
	}
	if !p.Trusted("docs.python.org", "reviewer") || p.Trusted("docs.python.org", "coder") || p.Trusted("docs.python.org", "") {
		t.Error("Trusted does not follow the section")
	}
}

// TestCompareContainers: widening the containers of a free rule (or removing the list) and
// narrowing those of an ask or deny rule are loosenings; the reverse are tightenings. So for the
// [container.NAME] lists: a trusted host added or a deny host dropped loosens.
func TestCompareContainers(t *testing.T) {
	old := load(t, scopeBase)
	cases := []struct {
		name  string
		edit  func(string) string
		loose string // a loosening that must be listed ("" for none)
		tight string // a tightening that must be listed ("" for none)
		// example is a request the differential check must show ("" for none).
		example string
	}{
		{"a free rule's containers widened", func(s string) string {
			return strings.Replace(s, "containers = [\"coder\"]\nverdict = \"free\"", "containers = [\"coder\", \"reviewer\"]\nverdict = \"free\"", 1)
		}, `rule "coder-push": containers: + reviewer`, "",
			`from container reviewer: POST https://github.com/git-receive-pack would be FREE (rule "coder-push"), was ASK (rule "default")`},
		{"a free rule's containers removed", func(s string) string {
			return strings.Replace(s, "containers = [\"coder\"]\nverdict = \"free\"", "verdict = \"free\"", 1)
		}, `rule "coder-push": containers: coder → every container`, "",
			`from container reviewer: POST https://github.com/git-receive-pack would be FREE (rule "coder-push")`},
		{"a free rule's containers narrowed", func(s string) string {
			return strings.Replace(s, "hosts = [\"api.example.com\"]\nverdict = \"free\"", "hosts = [\"api.example.com\"]\ncontainers = [\"coder\"]\nverdict = \"free\"", 1)
		}, "", `rule "api": containers: every container → coder`, ""},
		{"a free CONNECT rule's containers widened", func(s string) string {
			return strings.Replace(s, "containers = [\"coder\"]\nverdict = \"free\"\n\n[[rule]]\nname = \"no-gists\"", "containers = [\"coder\", \"reviewer\"]\nverdict = \"free\"\n\n[[rule]]\nname = \"no-gists\"", 1)
		}, `rule "coder-tunnel": containers: + reviewer`, "",
			`from container reviewer: CONNECT tunnel.example.com:443 decided at the domain (spliced, or no signer) would be FREE (rule "coder-tunnel"), was ASK (rule "default")`},
		{"a deny rule's containers narrowed", func(s string) string {
			return strings.Replace(s, `containers = ["reviewer"]`, `containers = ["coder"]`, 1)
		}, `rule "no-gists": containers: - reviewer`, `rule "no-gists": containers: + coder`,
			`from container reviewer: GET https://gist.github.com/ would be ASK (rule "default"), was DENY (rule "no-gists")`},
		{"a deny rule's containers widened to every container", func(s string) string {
			return strings.Replace(s, "containers = [\"reviewer\"]\n", "", 1)
		}, "", `rule "no-gists": containers: reviewer → every container`, ""},
		{"an ask rule's containers narrowed", func(s string) string {
			return strings.Replace(s, `containers = ["reviewer", "coder"]`, `containers = ["reviewer"]`, 1)
		}, `rule "api-writes": containers: - coder`, "",
			`from container coder: POST https://api.example.com/ would be FREE (rule "api"), was ASK (rule "api-writes")`},
		{"a free rule moved to the other container", func(s string) string {
			return strings.Replace(s, "containers = [\"coder\"]\nverdict = \"free\"", "containers = [\"reviewer\"]\nverdict = \"free\"", 1)
		}, `rule "coder-push": containers: + reviewer`, `rule "coder-push": containers: - coder`,
			`from container reviewer: POST https://github.com/git-receive-pack would be FREE (rule "coder-push")`},
		{"an ask rule's containers widened", func(s string) string {
			return strings.Replace(s, `containers = ["reviewer", "coder"]`, "", 1)
		}, "", `rule "api-writes": containers: reviewer, coder → every container`, ""},
		{"a free rule for every container scoped to one", func(s string) string {
			return strings.Replace(s, "hosts = [\"api.example.com\"]\nverdict = \"free\"", "hosts = [\"api.example.com\"]\ncontainers = [\"reviewer\"]\nverdict = \"free\"", 1)
		}, "", `rule "api": containers: every container → reviewer`, ""},
		{"a section trusts a host more", func(s string) string {
			return strings.Replace(s, `trusted = ["docs.python.org"]`, `trusted = ["docs.python.org", "*.readthedocs.io"]`, 1)
		}, `container.reviewer.trusted: + "*.readthedocs.io"`, "",
			`from container reviewer: x.readthedocs.io would be trusted for reads`},
		{"a section trusts a host less", func(s string) string {
			return strings.Replace(s, `trusted = ["docs.python.org"]`, `trusted = []`, 1)
		}, "", `container.reviewer.trusted: - "docs.python.org"`, ""},
		{"a section denies a host less", func(s string) string {
			return strings.Replace(s, `deny = ["*.ngrok.io"]`, `deny = []`, 1)
		}, `container.coder.deny: - "*.ngrok.io"`, "",
			`from container coder: CONNECT x.ngrok.io:443 decided at the domain (spliced, or no signer) would be ASK (rule "default"), was DENY (rule "deny")`},
		{"a section removed", func(s string) string {
			return strings.Replace(s, "[container.coder]\ndeny = [\"*.ngrok.io\"]\n", "", 1)
		}, `container.coder.deny: - "*.ngrok.io"`, "", ""},
		{"a section denies a host more", func(s string) string {
			return strings.Replace(s, `deny = ["*.ngrok.io"]`, `deny = ["*.ngrok.io", "webhook.site"]`, 1)
		}, "", `container.coder.deny: + "webhook.site"`, ""},
		{"a section added", func(s string) string {
			return s + "\n[container.api]\ndeny = [\"x.example\"]\n"
		}, "", "", ""}, // not loaded: see below
		{"a host moved from a section to the top level", func(s string) string {
			s = strings.Replace(s, `deny = ["*.ngrok.io"]`, `deny = []`, 1)
			return strings.Replace(s, `deny = ["pastebin.com"]`, `deny = ["pastebin.com", "*.ngrok.io"]`, 1)
		}, "", `deny: + "*.ngrok.io"`, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src := c.edit(scopeBase)
			new, err := Load("p.toml", []byte(src))
			if err != nil {
				if c.name == "a section added" && strings.Contains(err.Error(), `"api" is not a container of [sources]`) {
					return // a section names a [sources] container
				}
				t.Fatalf("%v\n%s", err, src)
			}
			cmp := Compare(old, new)
			loose, tight := strings.Join(cmp.Loosenings, "\n"), strings.Join(cmp.Tightenings, "\n")
			switch {
			case c.loose == "" && !cmp.Tightening():
				t.Fatalf("counted as a loosening:\n%s\nexamples %v", loose, cmp.Examples)
			case c.loose != "" && !strings.Contains(loose, c.loose):
				t.Fatalf("the loosenings\n%s\nlack\n%s", loose, c.loose)
			case c.tight != "" && !strings.Contains(tight, c.tight):
				t.Fatalf("the tightenings\n%s\nlack\n%s", tight, c.tight)
			}
			if c.example != "" && !slices.ContainsFunc(cmp.Examples, func(e Example) bool { return strings.Contains(e.String(), c.example) }) {
				t.Fatalf("the examples\n%v\nlack\n%s", cmp.Examples, c.example)
			}
			// Reversed, a loosening is a tightening and the other way round.
			back := Compare(new, old)
			if c.loose != "" && c.tight == "" && !back.Tightening() {
				t.Errorf("reversed, not a tightening: %q %v", back.Loosenings, back.Examples)
			}
			if c.loose == "" && c.tight != "" && back.Tightening() {
				t.Errorf("reversed, not a loosening: %q", back.Tightenings)
			}
		})
	}
}

// TestDifferentialNamesTheContainer: a change that decides only some containers' requests less
// restrictively is shown with the container; one that decides every container's alike, without.
func TestDifferentialNamesTheContainer(t *testing.T) {
	old := load(t, scopeBase)
	new := load(t, strings.Replace(scopeBase, `"pastebin.com"`, `"pastebin.org"`, 1))
	d := differential(old, new)
	if len(d.examples) == 0 {
		t.Fatal("no example")
	}
	for _, e := range d.examples {
		if e.Container != "" || strings.HasPrefix(e.String(), "from container") {
			t.Errorf("a change for every container is shown for one: %s", e)
		}
	}
}

// TestDocsScopedExample loads the example of docs/policy.md ("Rules and lists for some
// containers") and checks what its comments say, and the error it quotes for a misspelt
// container.
func TestDocsScopedExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "## Rules and lists for some containers\n")
	_, block, ok2 := strings.Cut(section, "```toml\n")
	block, _, ok3 := strings.Cut(block, "```\n")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/policy.md has no TOML block under \"Rules and lists for some containers\"")
	}
	src := "version = 1\n\n" + block
	p := load(t, src)
	cases := []struct {
		container string
		r         Request
		verdict   Verdict
		rule      string
	}{
		{"coder", Request{Host: "github.com", Method: "POST", Path: "/o/r.git/git-receive-pack"}, Free, "coder-push"},
		{"reviewer", Request{Host: "github.com", Method: "POST", Path: "/o/r.git/git-receive-pack"}, Ask, RuleDefault},
		{"reviewer", Request{Host: "gist.github.com", Method: "GET", Path: "/"}, Deny, "reviewer-no-gists"},
		{"coder", Request{Host: "gist.github.com", Method: "GET", Path: "/"}, Ask, RuleDefault},
		{"reviewer", Request{Host: "x.readthedocs.io", Method: "GET", Path: "/"}, Free, RuleTrusted},
		{"coder", Request{Host: "x.readthedocs.io", Method: "GET", Path: "/"}, Ask, RuleDefault},
		{"reviewer", Request{Host: "api.openai.com", Method: "POST", Path: "/v1/x"}, Deny, RuleDenyList},
	}
	for _, c := range cases {
		r := c.r
		r.Container = c.container
		if d := p.Evaluate(r); d.Verdict != c.verdict || d.Rule != c.rule {
			t.Errorf("%s %s%s from %s: %v %q; the docs say %v %q", r.Method, r.Host, r.Path, c.container, d.Verdict, d.Rule, c.verdict, c.rule)
		}
	}
	_, err = Load("policy.toml", []byte(strings.Replace(src, `containers = ["coder"]`, `containers = ["codr"]`, 1)))
	if err == nil || !strings.Contains(string(doc), "`"+err.Error()+"`") {
		t.Errorf("the docs do not quote the error\n%v", err)
	}
}
