package policy

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"
)

// loosePath is the servlet reading of LoosePaths, the one the older tests in this package name.
// For a path without parameters the three readings are one.
func loosePath(clean string) string { return LoosePaths(clean)[1] }

// TestReadings: the readings of paths with parameters, case, encoded and back slashes.
func TestReadings(t *testing.T) {
	cases := []struct {
		in, clean, cut string
		loose          [3]string
	}{
		{"/a/b", "/a/b", "/a/b", [3]string{"/a/b", "/a/b", "/a/b"}},
		{"/admin;x=1/users", "/admin;x=1/users", "/admin/users", [3]string{"/admin;x=1/users", "/admin/users", "/admin/users"}},
		{"/public/..;/admin", "/public/..;/admin", "/admin", [3]string{"/public/..;/admin", "/admin", "/admin"}},
		{"/public/%2e%2e;/admin", "/public/..;/admin", "/admin", [3]string{"/public/..;/admin", "/admin", "/admin"}},
		{"/ADMIN;X/Users", "/ADMIN;X/Users", "/ADMIN/Users", [3]string{"/admin;x/users", "/admin/users", "/admin/users"}},
		{"/a%3bb/c", "/a%3Bb/c", "/a/c", [3]string{"/a%3bb/c", "/a/c", "/a/c"}},
		{"/a;", "/a;", "/a", [3]string{"/a;", "/a", "/a"}},
		{"/a/;x/b", "/a/;x/b", "/a/b", [3]string{"/a/;x/b", "/a/b", "/a/b"}},
		{"/a/..;", "/a/..;", "/", [3]string{"/a/..;", "/", "/"}},
		// Whether parameters are cut before or after slashes are decoded changes the reading.
		{"/admin;x%2F..%2Fusers", "/admin;x%2F..%2Fusers", "/admin", [3]string{"/users", "/admin", "/users"}},
		{"/p/a;b%2F..;%2F..;%2Fadmin", "/p/a;b%2F..;%2F..;%2Fadmin", "/p/a", [3]string{"/p/a;b/..;/..;/admin", "/p/a", "/admin"}},
		{"/A\\..;\\b", "/A\\..;\\b", "/A\\..", [3]string{"/a/..;/b", "/", "/b"}},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			clean := CleanPath(c.in)
			if clean != c.clean {
				t.Fatalf("CleanPath(%q) = %q, want %q", c.in, clean, c.clean)
			}
			cut := clean
			if hasParams(clean) {
				cut = cutPath(clean)
			}
			if cut != c.cut {
				t.Errorf("cutPath(%q) = %q, want %q", clean, cut, c.cut)
			}
			if l := LoosePaths(clean); l != c.loose {
				t.Errorf("LoosePaths(%q) = %q, want %q", clean, l, c.loose)
			}
		})
	}
}

// TestGlobWithParameters: a free pattern written with parameters matches a path when it matches
// the path as sent and, with its own parameters cut, the path's parameter-cut reading.
func TestGlobWithParameters(t *testing.T) {
	cases := []struct {
		pattern, path string
		want          bool
	}{
		{"/session;v=1/**", "/session;v=1/x", true},
		{"/session;v=1/**", "/session/x", false},
		{"/session;v=1/**", "/session;v=1/..;/x", false},
		{"/**/*;jsessionid=*", "/a/b;jsessionid=1", true},
		{"/**/*;jsessionid=*", "/a/b", false},
		{"/a/*.git/info", "/a/x;y.git/info", false},
		{"/a/*.git/info", "/a/x.git/info;y", false},
		{"/a/*/info", "/a/x;y/info", true},
		{"/a/*.git/info", "/a/x.git;y/info", false},
		{"/a/b", "/a/b", true},
	}
	for _, c := range cases {
		t.Run(c.pattern+" "+c.path, func(t *testing.T) {
			g, err := compileGlob(c.pattern, false)
			if err != nil {
				t.Fatal(err)
			}
			cut := c.path
			if hasParams(cut) {
				cut = cutPath(cut)
			}
			if got := g.match(c.path) && g.matchCut(cut); got != c.want {
				t.Errorf("match %q and matchCut %q = %v, want %v", c.path, cut, got, c.want)
			}
		})
	}
}

// TestEvaluateAllocatesNothing: an ordinary path (no ';', '%', '\' or upper case) is decided
// without allocating, whichever tier decides it.
func TestEvaluateAllocatesNothing(t *testing.T) {
	p := mustLoad(t, pathParamPolicy)
	for _, r := range []Request{
		{Host: "api.example.com", Method: "GET", Path: "/admin/users"},
		{Host: "api.example.com", Method: "GET", Path: "/public/a/b"},
		{Host: "api.example.com", Method: "GET", Path: "/docs/x"},
		{Host: "llm.example.com", Method: "POST", Path: "/v1/messages"},
		{Host: "api.example.com", Method: "GET", Path: "/other/x"},
	} {
		if n := testing.AllocsPerRun(100, func() { p.Evaluate(r) }); n != 0 {
			t.Errorf("%s %s: %v allocations", r.Method, r.Path, n)
		}
	}
}

// naiveReadings is the meaning of the rules over the readings of a path, without indexes: a
// restrictive rule matches when a pattern matches any of LoosePaths, a free rule when patterns
// match both CleanPath and cutPath; the most restrictive matching rule wins, the first in file
// order among equals.
func naiveReadings(f *File, r Request) (Verdict, string) {
	clean := CleanPath(r.Path)
	cut := clean
	if hasParams(clean) {
		cut = cutPath(clean)
	}
	loose := LoosePaths(clean)
	best := -1
	for i, fr := range f.Rules {
		if fr.Hosts[0] != r.Host || len(fr.Methods) > 0 && fr.Methods[0] != r.Method {
			continue
		}
		restrictive := fr.Verdict != "free"
		var gs []glob
		for _, pat := range fr.Paths {
			g, _ := compileGlob(pat, restrictive)
			gs = append(gs, g)
		}
		some := func(path string, cutPattern bool) bool {
			for i := range gs {
				if !cutPattern && gs[i].match(path) || cutPattern && gs[i].matchCut(path) {
					return true
				}
			}
			return false
		}
		ok := len(gs) == 0
		if !ok && restrictive {
			ok = some(loose[0], false) || some(loose[1], false) || some(loose[2], false)
		} else if !ok {
			ok = !escapesBySlash(clean) && some(clean, false) && some(cut, true)
		}
		if ok && (best < 0 || verdicts[fr.Verdict] > verdicts[f.Rules[best].Verdict]) {
			best = i
		}
	}
	if best < 0 {
		return Ask, RuleDefault
	}
	return verdicts[f.Rules[best].Verdict], f.Rules[best].Name
}

// TestReadingsIndexAgreesWithNaive checks the compiled indexes against naiveReadings on random
// rules and paths full of parameters, dot-dot segments, case and encoded slashes: the index must
// find a restrictive rule by the first segment of whichever reading it matches.
func TestReadingsIndexAgreesWithNaive(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	patSegs := []string{"a", "b", "A", "*", "**", "a;v=1", "*;x", "c"}
	reqSegs := []string{"a", "b", "c", "A", "a;v=1", "a;x", ";x", "..;", "..;x", "%2e%2e;", "%2F", "..", "b%3Bx", "a%2F..;"}
	vs := []string{"free", "ask", "deny"}
	for iter := 0; iter < 300; iter++ {
		var b strings.Builder
		b.WriteString("version = 1\n")
		for i := 0; i < 1+rng.Intn(8); i++ {
			fmt.Fprintf(&b, "[[rule]]\nname = \"r%d\"\nhosts = [\"h.example.com\"]\n", i)
			if rng.Intn(3) == 0 {
				b.WriteString("methods = [\"POST\"]\n")
			}
			if k := rng.Intn(3); k > 0 {
				b.WriteString("paths = [")
				for j := 0; j < k; j++ {
					var segs []string
					for s := 0; s < 1+rng.Intn(3); s++ {
						segs = append(segs, patSegs[rng.Intn(len(patSegs))])
					}
					fmt.Fprintf(&b, "%q, ", "/"+strings.Join(segs, "/"))
				}
				b.WriteString("]\n")
			}
			fmt.Fprintf(&b, "verdict = %q\n", vs[rng.Intn(3)])
		}
		src := b.String()
		doc, err := Decode("r.toml", []byte(src))
		if err != nil {
			t.Fatalf("%v\n%s", err, src)
		}
		p, err := doc.Compile()
		if err != nil {
			continue // a pattern listed twice, say
		}
		for q := 0; q < 40; q++ {
			var segs []string
			for s := 0; s < rng.Intn(5); s++ {
				segs = append(segs, reqSegs[rng.Intn(len(reqSegs))])
			}
			method := [...]string{"GET", "POST"}[rng.Intn(2)]
			r := Request{Host: "h.example.com", Method: method, Path: "/" + strings.Join(segs, "/")}
			got := p.Evaluate(r)
			v, rule := naiveReadings(&doc.File, r)
			if got.Verdict != v || got.Rule != rule {
				t.Fatalf("%s %s: got %v %q, want %v %q\n%s", r.Method, r.Path, got.Verdict, got.Rule, v, rule, src)
			}
		}
	}
}
