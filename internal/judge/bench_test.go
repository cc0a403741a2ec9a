package judge

import (
	"net/http"
	"net/netip"
	"net/url"
	"strings"
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

// BenchmarkDecideMCP is the whole decision of a request to an [[mcp]] endpoint: a call as the
// SDK sends it, one with 1 MiB of arguments (about 10,000 small objects), and 8 MiB of text
// inside 125 nested objects (the worst shape for canonical JSON, stopped at its copy bound),
// the secret scan of the body included.
func BenchmarkDecideMCP(b *testing.B) {
	p, in := mcpSetup(&testing.T{})
	many := strings.Repeat(`{"k":"value","n":12345,"ok":true},`, 1<<20/34)
	deep := strings.Repeat(`{"a":`, 125) + `"` + strings.Repeat("x", 8<<20-1000) + `"` + strings.Repeat("}", 125)
	for _, c := range []struct{ name, body string }{
		{"sdk-call", mcpCall("1", "read", `{"path":"/notes/a.txt"}`)},
		{"1MiB-arguments", mcpCall("1", "read", `{"items":[`+many[:len(many)-1]+`]}`)},
		{"8MiB-nested", mcpCall("1", "read", deep)},
	} {
		b.Run(c.name, func(b *testing.B) {
			body := []byte(c.body)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				r := &Request{Kind: Tunnel, Container: "agent", Method: "POST", Scheme: "https", Authority: "mcp.example.com",
					Path: "/mcp", Header: http.Header{}, Body: body, BodySize: int64(len(body))}
				if res := Decide(&Env{Policy: p, Checks: in}, r); res.MCP == nil {
					b.Fatal(res.Decision)
				}
			}
		})
	}
}
