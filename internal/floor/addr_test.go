package floor

import (
	"net/netip"
	"strings"
	"testing"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		name string
		addr string
		want Class
	}{
		{"public v4", "8.8.8.8", ClassPublic},
		{"public v4 edge of private", "172.32.0.1", ClassPublic},
		{"public v4 below cgnat", "100.63.255.255", ClassPublic},
		{"public v4 above cgnat", "100.128.0.0", ClassPublic},
		{"this network", "0.0.0.0", ClassUnspecified},
		{"this network host", "0.1.2.3", ClassUnspecified},
		{"private 10", "10.1.2.3", ClassPrivate},
		{"private 172", "172.16.0.1", ClassPrivate},
		{"private 172 top", "172.31.255.255", ClassPrivate},
		{"private 192", "192.168.1.1", ClassPrivate},
		{"loopback", "127.0.0.1", ClassLoopback},
		{"loopback range", "127.255.0.9", ClassLoopback},
		{"link-local", "169.254.1.1", ClassLinkLocal},
		{"cgnat", "100.64.0.1", ClassCGNAT},
		{"cgnat top", "100.127.255.254", ClassCGNAT},
		{"ietf protocol", "192.0.0.9", ClassIETFProtocol},
		{"documentation 1", "192.0.2.1", ClassDocumentation},
		{"documentation 2", "198.51.100.1", ClassDocumentation},
		{"documentation 3", "203.0.113.1", ClassDocumentation},
		{"benchmarking", "198.18.0.1", ClassBenchmarking},
		{"benchmarking top", "198.19.255.255", ClassBenchmarking},
		{"6to4 relay", "192.88.99.1", ClassTunnel},
		{"multicast", "224.0.0.1", ClassMulticast},
		{"multicast top", "239.255.255.250", ClassMulticast},
		{"reserved", "240.0.0.1", ClassReserved},
		{"broadcast", "255.255.255.255", ClassBroadcast},

		{"metadata", "169.254.169.254", ClassMetadata},
		{"ecs", "169.254.170.2", ClassMetadata},
		{"eks pod identity", "169.254.170.23", ClassMetadata},
		{"alibaba in cgnat", "100.100.100.200", ClassMetadata},
		{"azure wireserver is public otherwise", "168.63.129.16", ClassMetadata},
		{"oracle classic in ietf protocol", "192.0.0.192", ClassMetadata},
		{"aws v6", "fd00:ec2::254", ClassMetadata},
		{"gcp v6", "fd20:ce::254", ClassMetadata},
		{"metadata mapped", "::ffff:169.254.169.254", ClassMetadata},
		{"metadata compatible", "::a9fe:a9fe", ClassMetadata},
		{"metadata nat64", "64:ff9b::a9fe:a9fe", ClassMetadata},
		{"metadata 6to4", "2002:a9fe:a9fe::1", ClassMetadata},
		{"metadata teredo server", "2001:0:a9fe:a9fe::1", ClassMetadata},
		{"metadata teredo client", "2001:0:4136:e378:8000:63bf:5601:5601", ClassMetadata},
		{"metadata v6 with zone", "fe80::a9fe:a9fe%eth0", ClassMetadata},

		{"public v6", "2606:4700:4700::1111", ClassPublic},
		{"public v6 amt", "2001:3::1", ClassIETFProtocol},
		{"unspecified v6", "::", ClassUnspecified},
		{"loopback v6", "::1", ClassLoopback},
		{"link-local v6", "fe80::1", ClassLinkLocal},
		{"link-local v6 with zone", "fe80::1%eth0", ClassLinkLocal},
		{"site-local", "fec0::1", ClassSiteLocal},
		{"unique-local fc", "fc00::1", ClassUniqueLocal},
		{"unique-local fd", "fd12:3456::1", ClassUniqueLocal},
		{"multicast v6", "ff02::1", ClassMulticast},
		{"documentation v6", "2001:db8::1", ClassDocumentation},
		{"documentation v6 3fff", "3fff::1", ClassDocumentation},
		{"discard", "100::1", ClassReserved},
		{"benchmarking v6", "2001:2::1", ClassBenchmarking},
		{"ietf protocol v6", "2001:1::1", ClassIETFProtocol},
		{"ietf protocol v6 top", "2001:1ff::1", ClassIETFProtocol},
		{"teredo", "2001::1", ClassTunnel},
		{"6to4", "2002:808:808::1", ClassTunnel},
		{"outside global unicast", "4000::1", ClassReserved},
		{"srv6 sid", "5f00::1", ClassReserved},
		{"old ipv4-translated", "::ffff:0:808:808", ClassReserved},

		{"mapped loopback", "::ffff:127.0.0.1", ClassLoopback},
		{"mapped private", "::ffff:10.0.0.1", ClassPrivate},
		{"mapped public", "::ffff:8.8.8.8", ClassPublic},
		{"compatible loopback", "::127.0.0.1", ClassLoopback},
		{"compatible low", "::2", ClassUnspecified},
		{"compatible public", "::8.8.8.8", ClassPublic},
		{"nat64 public", "64:ff9b::808:808", ClassPublic},
		{"nat64 private", "64:ff9b::a00:1", ClassPrivate},
		{"nat64 loopback", "64:ff9b::7f00:1", ClassLoopback},
		{"local-use nat64", "64:ff9b:1::808:808", ClassReserved},

		{"invalid", "", ClassInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var a netip.Addr
			if tt.addr != "" {
				a = netip.MustParseAddr(tt.addr)
			}
			if got := Classify(a); got != tt.want {
				t.Fatalf("Classify(%s) = %s, want %s", tt.addr, got, tt.want)
			}
		})
	}
}

func TestMetadataAddrs(t *testing.T) {
	for _, a := range MetadataAddrs {
		t.Run(a.String(), func(t *testing.T) {
			if c := Classify(a); c != ClassMetadata {
				t.Fatalf("Classify(%s) = %s", a, c)
			}
			if a.Is4() {
				if c := Classify(netip.AddrFrom16(a.As16())); c != ClassMetadata {
					t.Fatalf("Classify(mapped %s) = %s", a, c)
				}
			}
			r := CheckAddr(a, 80, []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}, nil)
			if r == nil || r.Check != Metadata {
				t.Fatalf("CheckAddr(%s) with everything allowed = %v, want %s", a, r, Metadata)
			}
		})
	}
}

func TestCheckAddr(t *testing.T) {
	p := netip.MustParsePrefix
	ap := netip.MustParseAddrPort
	loopback := []netip.Prefix{p("127.0.0.1/32")}
	gate := []netip.AddrPort{ap("127.0.0.1:3130"), ap("[fd00::10]:3130")}
	tests := []struct {
		name   string
		addr   string
		port   int
		allow  []netip.Prefix
		own    []netip.AddrPort
		check  Check // "" means allowed
		reason string
	}{
		{name: "public", addr: "140.82.112.3", port: 443},
		{name: "public v6", addr: "2606:4700:4700::1111", port: 443},
		{name: "public mapped", addr: "::ffff:140.82.112.3", port: 443},
		{name: "public nat64", addr: "64:ff9b::8c52:7003", port: 443},

		{name: "loopback", addr: "127.0.0.1", port: 80, check: Address, reason: "address 127.0.0.1 is loopback; open it with [floor] allow_cidrs if intended"},
		{name: "private", addr: "10.0.0.7", port: 443, check: Address, reason: "10.0.0.7 is private"},
		{name: "link-local", addr: "169.254.1.1", port: 443, check: Address, reason: "is link-local"},
		{name: "cgnat", addr: "100.64.0.1", port: 443, check: Address, reason: "is cgnat"},
		{name: "unspecified", addr: "0.0.0.0", port: 443, check: Address, reason: "is unspecified"},
		{name: "broadcast", addr: "255.255.255.255", port: 443, check: Address, reason: "is broadcast"},
		{name: "multicast", addr: "224.0.0.1", port: 443, check: Address, reason: "is multicast"},
		{name: "reserved", addr: "240.0.0.1", port: 443, check: Address, reason: "is reserved"},
		{name: "documentation", addr: "192.0.2.1", port: 443, check: Address, reason: "is documentation"},
		{name: "benchmarking", addr: "198.18.0.1", port: 443, check: Address, reason: "is benchmarking"},
		{name: "ietf protocol", addr: "192.0.0.9", port: 443, check: Address, reason: "is ietf-protocol"},
		{name: "v6 loopback", addr: "::1", port: 443, check: Address, reason: "::1 is loopback"},
		{name: "unique-local", addr: "fd12::1", port: 443, check: Address, reason: "is unique-local"},
		{name: "site-local", addr: "fec0::1", port: 443, check: Address, reason: "is site-local"},
		{name: "v6 link-local with zone", addr: "fe80::1%eth0", port: 443, check: Address, reason: "fe80::1 is link-local"},
		{name: "mapped loopback", addr: "::ffff:127.0.0.1", port: 443, check: Address, reason: "::ffff:127.0.0.1 (IPv4 127.0.0.1) is loopback"},
		{name: "compatible loopback", addr: "::127.0.0.1", port: 443, check: Address, reason: "::7f00:1 (IPv4 127.0.0.1) is loopback"},
		{name: "nat64 private", addr: "64:ff9b::a00:1", port: 443, check: Address, reason: "(IPv4 10.0.0.1) is private"},
		{name: "local-use nat64", addr: "64:ff9b:1::1", port: 443, check: Address, reason: "is reserved"},
		{name: "6to4", addr: "2002:808:808::1", port: 443, check: Address, reason: "(IPv4 8.8.8.8) is tunnel"},
		{name: "teredo", addr: "2001::1", port: 443, check: Address, reason: "is tunnel"},
		{name: "invalid", addr: "", port: 443, check: Address, reason: "invalid"},

		{name: "metadata", addr: "169.254.169.254", port: 80, check: Metadata, reason: "address 169.254.169.254 is a cloud metadata address; the floor never opens it"},
		{name: "metadata mapped", addr: "::ffff:169.254.169.254", port: 80, check: Metadata, reason: "(IPv4 169.254.169.254) is a cloud metadata address"},
		{name: "metadata nat64", addr: "64:ff9b::a9fe:a9fe", port: 80, check: Metadata, reason: "metadata"},
		{name: "metadata v6", addr: "fd00:ec2::254", port: 80, check: Metadata, reason: "metadata"},
		{name: "metadata allowed by prefix", addr: "169.254.169.254", port: 80, allow: []netip.Prefix{p("169.254.0.0/16")}, check: Metadata, reason: "never opens"},
		{name: "metadata allowed exactly", addr: "169.254.169.254", port: 80, allow: []netip.Prefix{p("169.254.169.254/32")}, check: Metadata, reason: "never opens"},
		{name: "azure wireserver allowed", addr: "168.63.129.16", port: 80, allow: []netip.Prefix{p("0.0.0.0/0")}, check: Metadata, reason: "never opens"},

		{name: "allowed loopback", addr: "127.0.0.1", port: 8080, allow: loopback},
		{name: "allowed loopback mapped", addr: "::ffff:127.0.0.1", port: 8080, allow: loopback},
		{name: "allowed by mapped prefix", addr: "127.0.0.1", port: 8080, allow: []netip.Prefix{p("::ffff:127.0.0.1/128")}},
		{name: "allowed private range", addr: "10.1.2.3", port: 443, allow: []netip.Prefix{p("10.0.0.0/8")}},
		{name: "allowed v6", addr: "fd12::1", port: 443, allow: []netip.Prefix{p("fd12::/16")}},
		{name: "other loopback not allowed", addr: "127.0.0.2", port: 8080, allow: loopback, check: Address, reason: "127.0.0.2 is loopback"},
		{name: "v6 loopback not opened by v4", addr: "::1", port: 8080, allow: loopback, check: Address, reason: "::1 is loopback"},

		{name: "own", addr: "127.0.0.1", port: 3130, own: gate, check: OwnAddress, reason: "address 127.0.0.1:3130 is the gate's own listen address"},
		{name: "own even when allowed", addr: "127.0.0.1", port: 3130, allow: loopback, own: gate, check: OwnAddress, reason: "own listen address"},
		{name: "own mapped", addr: "::ffff:127.0.0.1", port: 3130, allow: loopback, own: gate, check: OwnAddress, reason: "own listen address"},
		{name: "own v6", addr: "fd00::10", port: 3130, allow: []netip.Prefix{p("fd00::/8")}, own: gate, check: OwnAddress, reason: "[fd00::10]:3130"},
		{name: "own transparent, any port", addr: "10.213.10.2", port: 8443, allow: []netip.Prefix{p("10.0.0.0/8")}, own: []netip.AddrPort{ap("10.213.10.2:0")}, check: OwnAddress, reason: "10.213.10.2:8443 is the gate's own"},
		{name: "own listed mapped", addr: "10.0.0.5", port: 3130, allow: []netip.Prefix{p("10.0.0.0/8")}, own: []netip.AddrPort{ap("[::ffff:10.0.0.5]:3130")}, check: OwnAddress, reason: "own"},
		{name: "own wildcard", addr: "10.0.0.5", port: 3130, allow: []netip.Prefix{p("10.0.0.0/8")}, own: []netip.AddrPort{ap("0.0.0.0:3130")}, check: OwnAddress, reason: "own"},
		{name: "own v6 wildcard", addr: "140.82.112.3", port: 3130, own: []netip.AddrPort{ap("[::]:3130")}, check: OwnAddress, reason: "own"},
		{name: "own address other port", addr: "127.0.0.1", port: 8080, allow: loopback, own: gate},
		{name: "own port other address", addr: "127.0.0.2", port: 3130, allow: []netip.Prefix{p("127.0.0.0/8")}, own: gate},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var a netip.Addr
			if tt.addr != "" {
				a = netip.MustParseAddr(tt.addr)
			}
			r := CheckAddr(a, tt.port, tt.allow, tt.own)
			if tt.check == "" {
				if r != nil {
					t.Fatalf("CheckAddr(%s, %d) = %v, want nil", tt.addr, tt.port, r)
				}
				return
			}
			if r == nil || r.Check != tt.check || !strings.Contains(r.Reason, tt.reason) {
				t.Fatalf("CheckAddr(%s, %d) = %v, want %s with %q", tt.addr, tt.port, r, tt.check, tt.reason)
			}
			if tt.check == Metadata && strings.Contains(r.Reason, "allow_cidrs") {
				t.Errorf("metadata reason offers allow_cidrs: %q", r.Reason)
			}
			checkReason(t, r)
		})
	}
}
