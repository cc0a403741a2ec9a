package policy

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

func mustAddr(t testing.TB, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// bigPolicy has n rules: a mix of exact hosts, suffix patterns, methods and path globs, plus
// trusted and deny lists, as a large organisation's policy might.
func bigPolicy(n int) string {
	var b strings.Builder
	b.WriteString("version = 1\ntrusted = [")
	for i := 0; i < n/4; i++ {
		fmt.Fprintf(&b, "\"t%d.example.com\", ", i)
	}
	b.WriteString("\"github.com\"]\ndeny = [")
	for i := 0; i < n/4; i++ {
		fmt.Fprintf(&b, "\"*.d%d.example.net\", ", i)
	}
	b.WriteString("\"pastebin.com\"]\n")
	verdicts := []string{"free", "ask", "deny"}
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "[[rule]]\nname = \"r%d\"\n", i)
		switch i % 4 {
		case 0:
			fmt.Fprintf(&b, "hosts = [\"h%d.example.com\"]\n", i)
		case 1:
			fmt.Fprintf(&b, "hosts = [\"*.s%d.example.org\"]\n", i)
		case 2:
			fmt.Fprintf(&b, "hosts = [\"github.com\"]\npaths = [\"/org%d/**/git-receive-pack\"]\n", i)
		case 3:
			fmt.Fprintf(&b, "hosts = [\"h%d.example.com\", \"*.github.com\"]\nmethods = [\"POST\", \"PUT\"]\npaths = [\"/v%d/*/items/**\"]\n", i, i)
		}
		fmt.Fprintf(&b, "verdict = %q\n", verdicts[i%3])
	}
	return b.String()
}

func BenchmarkEvaluate1000(b *testing.B)  { benchmarkEvaluate(b, bigPolicy(1000), nil) }
func BenchmarkEvaluate10000(b *testing.B) { benchmarkEvaluate(b, bigPolicy(10000), nil) }

// BenchmarkEvaluateScoped10000 is the same policy with 16 containers: half the rules scoped to
// one or two of them, and a [container.NAME] section for each. The requests of
// BenchmarkEvaluate10000 come from each container in turn, and four more meet a scoped rule or
// a section's list of their container.
func BenchmarkEvaluateScoped10000(b *testing.B) {
	benchmarkEvaluate(b, bigScopedPolicy(10000, 16), []Request{
		{Host: "api.github.com", Method: "POST", Path: "/v3/x/items/1", Container: "c2"}, // rule r3, scoped to c4 and c2
		{Host: "x.s1.example.org", Method: "GET", Path: "/", Container: "c1"},            // rule r1, scoped to c2 and c1
		{Host: "docs5.example.com", Method: "GET", Path: "/", Container: "c5"},           // [container.c5] trusted
		{Host: "a.d7.example.io", Method: "GET", Path: "/", Container: "c7"},             // [container.c7] deny
	})
}

// bigScopedPolicy is bigPolicy(n) with k containers: every odd rule scoped to one or two of
// them, and a [container.NAME] section for each, trusting and denying a few hosts.
func bigScopedPolicy(n, k int) string {
	var b strings.Builder
	for i, part := range strings.SplitAfter(bigPolicy(n), "[[rule]]\n") {
		if i > 1 && i%2 == 0 { // the part holding rule i-1
			a, c := i%k, (i/2)%k
			list := fmt.Sprintf("[\"c%d\", \"c%d\"]", a, c)
			if a == c {
				list = fmt.Sprintf("[\"c%d\"]", a)
			}
			part = strings.Replace(part, "verdict = ", "containers = "+list+"\nverdict = ", 1)
		}
		b.WriteString(part)
	}
	b.WriteString("\n[sources]\n")
	for c := 0; c < k; c++ {
		fmt.Fprintf(&b, "c%d = [\"10.0.%d.0/24\"]\n", c, c)
	}
	for c := 0; c < k; c++ {
		fmt.Fprintf(&b, "[container.c%d]\ntrusted = [\"docs%d.example.com\", \"*.c%d.example.org\"]\ndeny = [\"*.d%d.example.io\"]\n", c, c, c, c)
	}
	return b.String()
}

// benchmarkEvaluate decides, in turn, seven requests of the policy src (from each of its
// containers in turn) and the requests of more (from the container each names).
func benchmarkEvaluate(b *testing.B, src string, more []Request) {
	p := mustLoad(b, src)
	containers := p.Containers()
	reqs := []Request{
		{Host: "github.com", Method: "GET", Path: "/lockhttp/lockhttp/pulls"},
		{Host: "github.com", Method: "POST", Path: "/org2/repo.git/git-receive-pack"},
		{Host: "api.github.com", Method: "POST", Path: "/v3/x/items/1"},
		{Host: "x.s1.example.org", Method: "GET", Path: "/"},
		{Host: "h500.example.com", Method: "GET", Path: "/index.html"},
		{Host: "unknown.example.io", Method: "GET", Path: "/a/b/c"},
		{Host: "a.d7.example.net", Method: "GET", Path: "/"},
	}
	for i := range reqs {
		if len(containers) > 0 {
			reqs[i].Container = containers[i%len(containers)]
		}
	}
	reqs = append(reqs, more...)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p.Evaluate(reqs[i%len(reqs)])
	}
}

func BenchmarkLoad1000(b *testing.B) {
	src := []byte(bigPolicy(1000))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := Load("big.toml", src); err != nil {
			b.Fatal(err)
		}
	}
}

func FuzzLoad(f *testing.F) {
	f.Add([]byte(testPolicy))
	f.Add([]byte("version = 1\n[floor.hosts]\n\"a.b\" = \"1.2.3.4\"\n"))
	f.Add([]byte("version = 1\n[[rule]]\nname=\"x\"\nhosts=[\"*\"]\npaths=[\"/**/a*b\"]\nverdict=\"deny\"\n"))
	f.Add([]byte("version = 1\n[[notify]]\nname=\"t\"\nurl=\"http://[::1]:9/h\"\nkind=\"ntfy\"\nhuman=true\ninsecure_loopback=true\ntoken_file=\"/t\"\n"))
	f.Add([]byte(scopeBase))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Load("fuzz.toml", data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		// A loaded policy evaluates without panicking, for each of its containers and one it
		// does not name.
		for _, ct := range append(p.Containers(), "") {
			for _, r := range []Request{
				{Host: "github.com", Method: "GET", Path: "/a/b"},
				{Host: "x.y.z", Method: "POST", Path: "/%2e%2e/a//b/"},
				{Host: "github.com", Method: "CONNECT", Connect: true},
			} {
				r.Container = ct
				p.Evaluate(r)
				p.EvaluateIntercept(r.Host, ct)
			}
		}
	})
}
