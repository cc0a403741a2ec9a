package propose

import (
	"fmt"
	"strings"
	"testing"
)

// TestCheckAsked: a rule an agent asks for is read strictly, for its own container alone, and
// held to what a proposal may be; what the floor or the comparison refuses is refused with a
// reason, and nothing of the agent's text but the rule's own values reaches the block.
func TestCheckAsked(t *testing.T) {
	good := "[[rule]]\nhosts = [\"api.example.com\"]\nmethods = [\"GET\"]\npaths = [\"/v1/items/*\"]\n"
	a, err := CheckAsked("p.toml", []byte(testPolicy), "agent", good)
	if err != nil {
		t.Fatalf("a good rule: %v", err)
	}
	if a.Loosens == "" || !strings.Contains(a.Loosens, "api.example.com") {
		t.Errorf("loosens: %q", a.Loosens)
	}
	if !strings.Contains(a.Block, `containers = ["agent"]`) || !strings.Contains(a.Block, `reason = "asked for by an agent of container agent"`) {
		t.Errorf("block:\n%s", a.Block)
	}
	if !strings.Contains(a.Diff, "+ [[rule]]") {
		t.Errorf("diff:\n%s", a.Diff)
	}
	for _, tc := range []struct{ name, rule, want string }{
		{"metadata host", "[[rule]]\nhosts = [\"169.254.169.254\"]\nmethods = [\"GET\"]\n", "floor"},
		{"metadata name", "[[rule]]\nhosts = [\"metadata.google.internal\"]\nmethods = [\"GET\"]\n", "floor"},
		{"localhost", "[[rule]]\nhosts = [\"localhost\"]\nmethods = [\"GET\"]\n", "floor"},
		{"wildcard host", "[[rule]]\nhosts = [\"*.example.com\"]\nmethods = [\"GET\"]\n", "exact host"},
		{"every host", "[[rule]]\nhosts = [\"*\"]\nmethods = [\"GET\"]\n", "exact host"},
		{"two hosts", "[[rule]]\nhosts = [\"a.example.com\", \"b.example.com\"]\nmethods = [\"GET\"]\n", "exact host"},
		{"connect", "[[rule]]\nhosts = [\"api.example.com\"]\nmethods = [\"CONNECT\"]\n", "method"},
		{"every method", "[[rule]]\nhosts = [\"api.example.com\"]\n", "method"},
		{"another container", "[[rule]]\nhosts = [\"api.example.com\"]\nmethods = [\"GET\"]\ncontainers = [\"other\"]\n", "asking container alone"},
		{"two containers", "[[rule]]\nhosts = [\"api.example.com\"]\nmethods = [\"GET\"]\ncontainers = [\"agent\", \"other\"]\n", "asking container alone"},
		{"a deny", "[[rule]]\nhosts = [\"api.example.com\"]\nmethods = [\"GET\"]\nverdict = \"deny\"\n", "verdict"},
		{"a trusted host", "trusted = [\"evil.example.com\"]\n[[rule]]\nhosts = [\"api.example.com\"]\nmethods = [\"GET\"]\n", "trusted"},
		{"a splice", "splice = [\"evil.example.com\"]\n", "splice"},
		{"floor opening", "[floor]\nallow_cidrs = [\"10.0.0.0/8\"]\n", "floor"},
		{"two rules", good + good, "2 [[rule]] tables"},
		{"no rule", "", "0 [[rule]] tables"},
		{"unknown key", "[[rule]]\nhosts = [\"api.example.com\"]\nmethods = [\"GET\"]\nsplice = true\n", "rule.splice"},
		{"not toml", "[[rule]\nhosts = ", "not TOML"},
		{"escape in name", "[[rule]]\nname = \"x\\u001b[31m\"\nhosts = [\"api.example.com\"]\nmethods = [\"GET\"]\n", "character"},
		{"a denied host", "[[rule]]\nhosts = [\"paste.example.com\"]\nmethods = [\"GET\"]\n", ""},
		{"doh path", "[[rule]]\nhosts = [\"api.example.com\"]\nmethods = [\"GET\"]\npaths = [\"/dns-query\"]\n", "floor"},
		{"too long", "[[rule]]\nname = \"" + strings.Repeat("a", MaxAskedRule) + "\"\n", "at most"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := CheckAsked("p.toml", []byte(testPolicy), "agent", tc.rule)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CheckAsked: %v, want an error holding %q", err, tc.want)
			}
		})
	}
}

// BenchmarkCheckAsked: the console's check of a rule an agent asks for, near its bound (2 KiB:
// 60 exact paths), against a small policy.
func BenchmarkCheckAsked(b *testing.B) {
	var paths []string
	for i := range 60 {
		paths = append(paths, fmt.Sprintf("\"/v1/items/%06d/a\"", i))
	}
	rule := "[[rule]]\nhosts = [\"api.example.com\"]\nmethods = [\"GET\"]\npaths = [" + strings.Join(paths, ", ") + "]\n"
	if len(rule) > MaxAskedRule {
		b.Fatalf("the rule is %d bytes", len(rule))
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := CheckAsked("p.toml", []byte(testPolicy), "agent", rule); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(rule)), "rule-bytes")
}

// FuzzCheckAsked: whatever text an agent sends, CheckAsked answers without a panic, and what
// it accepts is one free rule of the asking container for one exact host, whose block reads
// back as that rule.
func FuzzCheckAsked(f *testing.F) {
	f.Add("[[rule]]\nhosts = [\"api.example.com\"]\nmethods = [\"GET\"]\npaths = [\"/v1/items/*\"]\n")
	f.Add("[[rule]]\nhosts = [\"*\"]\n")
	f.Add("trusted = [\"x.example.com\"]\n[[rule]]\nhosts = [\"api.example.com\"]\nmethods = [\"GET\"]\n")
	f.Add("[[rule]]\nname = \"a\\u001b\"\nhosts = [\"api.example.com\"]\nmethods = [\"GET\"]\ncontainers = [\"other\"]\n")
	f.Fuzz(func(t *testing.T, text string) {
		a, err := CheckAsked("p.toml", []byte(testPolicy), "agent", text)
		if err != nil {
			return
		}
		r := a.Rule
		if len(r.Hosts) != 1 || strings.Contains(r.Hosts[0], "*") || len(r.Containers) != 1 || r.Containers[0] != "agent" || r.Verdict != "free" ||
			len(r.Methods) != 1 || r.Methods[0] == "CONNECT" {
			t.Fatalf("accepted %q as %+v", text, r)
		}
		again, err := CheckAsked("p.toml", []byte(testPolicy), "agent", a.Block)
		if err != nil || again.Block != a.Block {
			t.Fatalf("the block of %q does not read back: %v\n%s", text, err, a.Block)
		}
	})
}
