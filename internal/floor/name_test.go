package floor

import (
	"strings"
	"testing"
)

func TestName(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		check  Check // "" means allowed
		reason string
	}{
		{name: "public", in: "github.com"},
		{name: "public subdomain", in: "registry.npmjs.org"},
		{name: "test names are not local", in: "gate.test"},
		{name: "test subdomain", in: "a.b.test"},
		{name: "name that contains localhost", in: "localhost.example.com"},
		{name: "label that ends like local", in: "foo.notlocal"},
		{name: "google but not dns.google", in: "www.google"},
		{name: "subdomain of an exact DoH host", in: "x.dns.google"},
		{name: "dns.google.com lookalike", in: "dns.google.com.evil.net"},
		{name: "metadata lookalike", in: "metadata.google.internal.example.com"},
		{name: "internal not at the end", in: "internal.example.com"},

		{name: "single label", in: "intranet", check: SingleLabel, reason: `"intranet" is a single-label name`},
		{name: "single label with underscore", in: "my_host", check: SingleLabel, reason: "single-label"},

		{name: "localhost", in: "localhost", check: LocalName, reason: `"localhost" is a local name`},
		{name: "under localhost", in: "app.localhost", check: LocalName, reason: "(localhost)"},
		{name: "mdns", in: "printer.local", check: LocalName, reason: "(local)"},
		{name: "internal", in: "db.corp.internal", check: LocalName, reason: "(internal)"},
		{name: "home.arpa", in: "nas.home.arpa", check: LocalName, reason: "(home.arpa)"},
		{name: "bare home.arpa", in: "home.arpa", check: LocalName, reason: "(home.arpa)"},
		{name: "invalid", in: "x.invalid", check: LocalName, reason: "(invalid)"},
		{name: "onion", in: "duckduckgogg42xjoc72x3sjasowoarfbgcmvfimaftt6twagswzczad.onion", check: LocalName, reason: "(onion)"},
		{name: "localdomain", in: "localhost.localdomain", check: LocalName, reason: "(localdomain)"},

		{name: "gcp", in: "metadata.google.internal", check: Metadata, reason: `"metadata.google.internal" is a cloud metadata service`},
		{name: "under gcp", in: "x.metadata.google.internal", check: Metadata, reason: "metadata"},
		{name: "gcp goog", in: "metadata.goog", check: Metadata, reason: "metadata"},
		{name: "single-label metadata", in: "metadata", check: Metadata, reason: "metadata"},
		{name: "aws", in: "instance-data", check: Metadata, reason: "metadata"},
		{name: "aws ec2", in: "instance-data.ec2.internal", check: Metadata, reason: "metadata"},
		{name: "tencent", in: "metadata.tencentyun.com", check: Metadata, reason: "metadata"},
		{name: "equinix", in: "metadata.platformequinix.com", check: Metadata, reason: "metadata"},
		{name: "packet", in: "metadata.packet.net", check: Metadata, reason: "metadata"},
		{name: "ibm", in: "api.metadata.cloud.ibm.com", check: Metadata, reason: "metadata"},
		{name: "kubernetes", in: "kubernetes.default", check: Metadata, reason: "metadata"},
		{name: "kubernetes svc", in: "kubernetes.default.svc", check: Metadata, reason: "metadata"},
		{name: "kubernetes cluster.local", in: "kubernetes.default.svc.cluster.local", check: Metadata, reason: "metadata"},
		{name: "kubernetes custom domain", in: "kubernetes.default.svc.k8s.example.com", check: Metadata, reason: "metadata"},

		{name: "google doh", in: "dns.google", check: DoH, reason: `"dns.google" is a DNS-over-HTTPS resolver`},
		{name: "google doh old", in: "dns.google.com", check: DoH, reason: "DNS-over-HTTPS"},
		{name: "cloudflare", in: "cloudflare-dns.com", check: DoH, reason: "DNS-over-HTTPS"},
		{name: "cloudflare mozilla", in: "mozilla.cloudflare-dns.com", check: DoH, reason: "DNS-over-HTTPS"},
		{name: "one.one.one.one", in: "one.one.one.one", check: DoH, reason: "DNS-over-HTTPS"},
		{name: "quad9", in: "dns.quad9.net", check: DoH, reason: "DNS-over-HTTPS"},
		{name: "quad9 11", in: "dns11.quad9.net", check: DoH, reason: "DNS-over-HTTPS"},
		{name: "nextdns", in: "dns.nextdns.io", check: DoH, reason: "DNS-over-HTTPS"},
		{name: "nextdns customer", in: "abc123.dns.nextdns.io", check: DoH, reason: "DNS-over-HTTPS"},
		{name: "nextdns anycast", in: "anycast.dns.nextdns.io", check: DoH, reason: "DNS-over-HTTPS"},
		{name: "mullvad", in: "adblock.dns.mullvad.net", check: DoH, reason: "DNS-over-HTTPS"},
		{name: "cloudflare gateway", in: "abc.cloudflare-gateway.com", check: DoH, reason: "DNS-over-HTTPS"},
		{name: "adguard", in: "dns.adguard-dns.com", check: DoH, reason: "DNS-over-HTTPS"},
		{name: "controld", in: "freedns.controld.com", check: DoH, reason: "DNS-over-HTTPS"},

		{name: "empty", in: "", check: Malformed, reason: "empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Name(tt.in)
			if tt.check == "" {
				if r != nil {
					t.Fatalf("Name(%q) = %v, want nil", tt.in, r)
				}
				return
			}
			if r == nil || r.Check != tt.check || !strings.Contains(r.Reason, tt.reason) {
				t.Fatalf("Name(%q) = %v, want %s with %q", tt.in, r, tt.check, tt.reason)
			}
			checkReason(t, r)
		})
	}
}

// TestLists holds the exported lists to their promise: every entry is in the
// form Host returns, and Name refuses it with the list's check.
func TestLists(t *testing.T) {
	lists := []struct {
		name  string
		names []string
		check Check
	}{
		{"MetadataNames", MetadataNames, Metadata},
		{"DoHHosts", DoHHosts, DoH},
		{"DoHDomains", DoHDomains, DoH},
		{"LocalSuffixes", LocalSuffixes, LocalName},
	}
	seen := map[string]string{}
	for _, l := range lists {
		for _, n := range l.names {
			t.Run(l.name+"/"+n, func(t *testing.T) {
				if other, ok := seen[n]; ok && other != l.name && !(l.name == "DoHDomains" && other == "DoHHosts") {
					t.Errorf("%q is in %s and %s", n, other, l.name)
				}
				seen[n] = l.name
				if got, r := Host(n); r != nil || got != n {
					t.Errorf("Host(%q) = %q, %v: the list entry is not normal", n, got, r)
				}
				if r := Name(n); r == nil || r.Check != l.check {
					t.Errorf("Name(%q) = %v, want %s", n, r, l.check)
				}
			})
		}
	}
}

func TestPortAllowed(t *testing.T) {
	web := []int{80, 443}
	tests := []struct {
		name    string
		port    int
		allowed []int
		reason  string // "" means allowed
	}{
		{"http", 80, web, ""},
		{"https", 443, web, ""},
		{"other", 8080, web, "port 8080 is not allowed; use 80, 443"},
		{"ssh", 22, web, "port 22"},
		{"zero", 0, web, "port 0"},
		{"extra allowed", 8443, []int{443, 8443}, ""},
		{"nothing allowed", 443, nil, "no port is allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := PortAllowed(tt.port, tt.allowed)
			if tt.reason == "" {
				if r != nil {
					t.Fatalf("PortAllowed(%d, %v) = %v, want nil", tt.port, tt.allowed, r)
				}
				return
			}
			if r == nil || r.Check != Port || !strings.Contains(r.Reason, tt.reason) {
				t.Fatalf("PortAllowed(%d, %v) = %v, want %s with %q", tt.port, tt.allowed, r, Port, tt.reason)
			}
			checkReason(t, r)
		})
	}
}

func TestNameDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, in := range []string{"github.com", "a.b.c.registry.npmjs.org"} {
		if n := testing.AllocsPerRun(100, func() {
			if r := Name(in); r != nil {
				t.Fatal(r)
			}
		}); n != 0 {
			t.Errorf("Name(%q) allocates %v times, want 0", in, n)
		}
	}
}
