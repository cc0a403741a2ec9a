package policy

import (
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"
)

// naiveEvaluate is the policy's meaning without indexes: every rule is tried in file order. A
// rule with containers decides for those containers; for a container [sources] does not name,
// only if it is not free.
func naiveEvaluate(p *Policy, f *File, r Request) Decision {
	hostMatch := func(pat, host string) bool {
		switch {
		case pat == "*":
			return true
		case strings.HasPrefix(pat, "*."):
			return strings.HasSuffix(host, pat[1:])
		}
		return pat == host
	}
	clean := CleanPath(r.Path)
	loose := loosePath(clean)
	best := -1
	for i, fr := range f.Rules {
		if _, known := f.Sources[r.Container]; fr.Containers != nil && !slices.Contains(fr.Containers, r.Container) && (known || fr.Verdict == "free") {
			continue
		}
		hm := false
		for _, h := range fr.Hosts {
			hm = hm || hostMatch(h, r.Host)
		}
		if !hm {
			continue
		}
		if len(fr.Methods) > 0 {
			mm := false
			for _, m := range fr.Methods {
				mm = mm || m == r.Method
			}
			if !mm {
				continue
			}
		}
		if len(fr.Paths) > 0 {
			pm := false
			for _, pat := range fr.Paths {
				g, _ := compileGlob(pat, fr.Verdict != "free")
				path := clean
				if fr.Verdict != "free" {
					path = loose
				}
				pm = pm || g.match(path)
			}
			if !pm {
				continue
			}
		}
		if best < 0 || verdicts[fr.Verdict] > verdicts[f.Rules[best].Verdict] {
			best = i
		}
	}
	if best >= 0 {
		return Decision{Verdict: verdicts[f.Rules[best].Verdict], Rule: f.Rules[best].Name}
	}
	return Decision{Verdict: Ask, Rule: "none"}
}

// TestIndexAgreesWithNaive checks the compiled indexes against the plain meaning of the rules on
// random policies and requests, from either container of [sources] or one it does not name.
func TestIndexAgreesWithNaive(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	hosts := []string{"a.example.com", "b.example.com", "x.a.example.com", "example.com", "c.org"}
	patterns := []string{"a.example.com", "*.example.com", "*.a.example.com", "example.com", "c.org", "*"}
	methods := []string{"GET", "POST", "PUT", "DELETE"}
	segs := []string{"a", "b", "x.git", "A", "*", "**", "*.git", "y"}
	reqSegs := []string{"a", "b", "x.git", "A", "B", "y", "z", "%2F", "..", "."}
	vs := []string{"free", "ask", "deny"}
	containers := []string{"a", "b", "unnamed"}
	for iter := 0; iter < 300; iter++ {
		var b strings.Builder
		b.WriteString("version = 1\n[sources]\na = [\"10.0.0.1\"]\nb = [\"10.0.0.2\"]\n")
		n := 1 + rng.Intn(12)
		for i := 0; i < n; i++ {
			fmt.Fprintf(&b, "[[rule]]\nname = \"r%d\"\nhosts = [%q", i, patterns[rng.Intn(len(patterns))])
			if rng.Intn(3) == 0 {
				fmt.Fprintf(&b, ", %q", patterns[rng.Intn(len(patterns))])
			}
			b.WriteString("]\n")
			if rng.Intn(2) == 0 {
				fmt.Fprintf(&b, "methods = [%q]\n", methods[rng.Intn(len(methods))])
			}
			if k := rng.Intn(3); k > 0 {
				b.WriteString("paths = [")
				for j := 0; j < k; j++ {
					var segsOut []string
					for s := 0; s < 1+rng.Intn(3); s++ {
						segsOut = append(segsOut, segs[rng.Intn(len(segs))])
					}
					fmt.Fprintf(&b, "%q, ", "/"+strings.Join(segsOut, "/"))
				}
				b.WriteString("]\n")
			}
			fmt.Fprintf(&b, "verdict = %q\n", vs[rng.Intn(3)])
			switch rng.Intn(4) {
			case 0:
				b.WriteString("containers = [\"a\"]\n")
			case 1:
				b.WriteString("containers = [\"b\", \"a\"]\n")
			}
		}
		src := b.String()
		doc, err := Decode("r.toml", []byte(src))
		if err != nil {
			t.Fatalf("%v\n%s", err, src)
		}
		p, err := doc.Compile()
		if err != nil {
			if strings.Contains(err.Error(), "listed twice") {
				continue
			}
			t.Fatalf("%v\n%s", err, src)
		}
		for q := 0; q < 40; q++ {
			var ps []string
			for s := 0; s < rng.Intn(4); s++ {
				ps = append(ps, reqSegs[rng.Intn(len(reqSegs))])
			}
			r := Request{Host: hosts[rng.Intn(len(hosts))], Method: methods[rng.Intn(len(methods))], Path: "/" + strings.Join(ps, "/"),
				Container: containers[rng.Intn(len(containers))]}
			got := p.Evaluate(r)
			want := naiveEvaluate(p, &doc.File, r)
			if want.Rule == "none" {
				if got.Rule != RuleDefault && got.Rule != RuleTrusted {
					t.Fatalf("request %+v: got rule %q, want no rule\n%s", r, got.Rule, src)
				}
				continue
			}
			if got.Verdict != want.Verdict || got.Rule != want.Rule {
				t.Fatalf("request %+v: got %v %q, want %v %q\n%s", r, got.Verdict, got.Rule, want.Verdict, want.Rule, src)
			}
		}
	}
}
