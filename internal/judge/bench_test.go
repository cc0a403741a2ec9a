package judge

import (
	"net/http"
	"net/netip"
	"net/url"
	"testing"
)

// BenchmarkSeeDecideFree is the whole decision of an ordinary FREE request as the gate makes
// it: the view (See, on a fresh header each time) and every step of Decide, the secret scan and
// the heuristics included.
func BenchmarkSeeDecideFree(b *testing.B) {
	env := viewEnv(&testing.T{})
	u, _ := url.Parse("http://docs.example.com/guide/install?lang=en")
	src := netip.MustParseAddr("10.0.0.5")
	b.ReportAllocs()
	for b.Loop() {
		h := http.Header{"User-Agent": {"curl/8.5.0"}, "Accept": {"*/*"}, "Proxy-Connection": {"keep-alive"}}
		res := Decide(env, See(&Arrival{Kind: Plain, Source: src, Method: "GET", URL: u, Host: u.Host, Header: h}))
		if res.Verdict != 0 {
			b.Fatal(res.Decision)
		}
	}
}
