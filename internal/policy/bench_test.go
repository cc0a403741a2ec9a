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

func BenchmarkEvaluate1000(b *testing.B)  { benchmarkEvaluate(b, 1000) }
func BenchmarkEvaluate10000(b *testing.B) { benchmarkEvaluate(b, 10000) }

func benchmarkEvaluate(b *testing.B, n int) {
	p := mustLoad(b, bigPolicy(n))
	reqs := []Request{
		{Host: "github.com", Method: "GET", Path: "/lockhttp/lockhttp/pulls"},
		{Host: "github.com", Method: "POST", Path: "/org2/repo.git/git-receive-pack"},
		{Host: "api.github.com", Method: "POST", Path: "/v3/x/items/1"},
		{Host: "x.s1.example.org", Method: "GET", Path: "/"},
		{Host: "h500.example.com", Method: "GET", Path: "/index.html"},
		{Host: "unknown.example.io", Method: "GET", Path: "/a/b/c"},
		{Host: "a.d7.example.net", Method: "GET", Path: "/"},
	}
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
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Load("fuzz.toml", data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		// A loaded policy evaluates without panicking.
		for _, r := range []Request{
			{Host: "github.com", Method: "GET", Path: "/a/b"},
			{Host: "x.y.z", Method: "POST", Path: "/%2e%2e/a//b/"},
			{Host: "github.com", Method: "CONNECT", Connect: true},
		} {
			p.Evaluate(r)
		}
	})
}
