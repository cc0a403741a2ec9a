package floor

import (
	"net/http"
	"net/netip"
	"testing"
)

// BenchmarkHostName is the hot path: a typical name, already normal.
func BenchmarkHostName(b *testing.B) {
	for _, in := range []string{"registry.npmjs.org", "Registry.NPMJS.org.", "bücher.de"} {
		b.Run(in, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				name, r := Host(in)
				if r != nil {
					b.Fatal(r)
				}
				if r := Name(name); r != nil {
					b.Fatal(r)
				}
			}
		})
	}
}

func BenchmarkAuthority(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, _, r := Authority("registry.npmjs.org:443", 0); r != nil {
			b.Fatal(r)
		}
	}
}

func BenchmarkRequest(b *testing.B) {
	h := http.Header{"Accept": {"application/vnd.npm.install-v1+json; q=1.0, application/json; q=0.8, */*"}}
	b.ReportAllocs()
	for b.Loop() {
		if r := Request("GET", "/@types%2fnode", h); r != nil {
			b.Fatal(r)
		}
	}
}

func BenchmarkCheckAddr(b *testing.B) {
	a := netip.MustParseAddr("104.16.3.35")
	allow := []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	own := []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:3130")}
	b.ReportAllocs()
	for b.Loop() {
		if r := CheckAddr(a, 443, allow, own); r != nil {
			b.Fatal(r)
		}
	}
}
