package floor

import "net/netip"

// Class says what an address is, for the floor. Only ClassPublic is dialled
// without an allow_cidrs entry; ClassMetadata never is.
type Class string

// The classes of address. IPv4-mapped (::ffff:0:0/96), IPv4-compatible
// (::/96) and NAT64 (64:ff9b::/96) addresses take the class of the IPv4
// address they embed.
const (
	// ClassPublic is global unicast: the only class dialled by default.
	ClassPublic Class = "public"
	// ClassLoopback is 127.0.0.0/8 and ::1.
	ClassLoopback Class = "loopback"
	// ClassPrivate is 10.0.0.0/8, 172.16.0.0/12 and 192.168.0.0/16.
	ClassPrivate Class = "private"
	// ClassLinkLocal is 169.254.0.0/16 and fe80::/10.
	ClassLinkLocal Class = "link-local"
	// ClassCGNAT is the shared address space 100.64.0.0/10.
	ClassCGNAT Class = "cgnat"
	// ClassUniqueLocal is fc00::/7.
	ClassUniqueLocal Class = "unique-local"
	// ClassSiteLocal is the deprecated fec0::/10.
	ClassSiteLocal Class = "site-local"
	// ClassMulticast is 224.0.0.0/4 and ff00::/8.
	ClassMulticast Class = "multicast"
	// ClassUnspecified is 0.0.0.0/8 ("this network") and ::.
	ClassUnspecified Class = "unspecified"
	// ClassBroadcast is 255.255.255.255.
	ClassBroadcast Class = "broadcast"
	// ClassReserved is 240.0.0.0/4, the discard prefix 100::/64, local-use
	// NAT64 64:ff9b:1::/48 and all IPv6 outside 2000::/3 not named above.
	ClassReserved Class = "reserved"
	// ClassDocumentation is 192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24,
	// 2001:db8::/32 and 3fff::/20.
	ClassDocumentation Class = "documentation"
	// ClassBenchmarking is 198.18.0.0/15 and 2001:2::/48.
	ClassBenchmarking Class = "benchmarking"
	// ClassIETFProtocol is 192.0.0.0/24 and 2001::/23 (less Teredo and
	// benchmarking).
	ClassIETFProtocol Class = "ietf-protocol"
	// ClassMetadata is an address in MetadataAddrs, whatever its range, and an
	// IPv6 address that embeds one (mapped, compatible, NAT64, 6to4, Teredo).
	ClassMetadata Class = "metadata"
	// ClassTunnel is 6to4 (2002::/16, and its relay anycast 192.88.99.0/24)
	// and Teredo (2001::/32): the far end is some IPv4 host the floor cannot
	// see.
	ClassTunnel Class = "tunnel"
	// ClassInvalid is the zero netip.Addr.
	ClassInvalid Class = "invalid"
)

// MetadataAddrs are the addresses of cloud metadata and credential services.
// CheckAddr refuses them (Metadata) even when an allow prefix contains them.
// Read at package initialisation: changing the list later has no effect.
var MetadataAddrs = []netip.Addr{
	// AWS, Google Cloud, Azure IMDS, Oracle Cloud, OpenStack, DigitalOcean,
	// Hetzner, Linode/Akamai, Vultr, Exoscale, IBM Cloud, Huawei Cloud, ...
	netip.MustParseAddr("169.254.169.254"),
	netip.MustParseAddr("169.254.170.2"),      // AWS ECS task metadata and credentials
	netip.MustParseAddr("169.254.170.23"),     // AWS EKS Pod Identity agent
	netip.MustParseAddr("169.254.0.23"),       // Tencent Cloud (metadata.tencentyun.com)
	netip.MustParseAddr("169.254.42.42"),      // Scaleway
	netip.MustParseAddr("100.100.100.200"),    // Alibaba Cloud
	netip.MustParseAddr("168.63.129.16"),      // Azure WireServer (a public address)
	netip.MustParseAddr("192.0.0.192"),        // Oracle Cloud Infrastructure Classic
	netip.MustParseAddr("fd00:ec2::254"),      // AWS IMDS over IPv6
	netip.MustParseAddr("fd00:ec2::23"),       // AWS EKS Pod Identity agent over IPv6
	netip.MustParseAddr("fd20:ce::254"),       // Google Cloud over IPv6
	netip.MustParseAddr("fd00:c1::a9fe:a9fe"), // Oracle Cloud Infrastructure over IPv6
	netip.MustParseAddr("fd00:42::42"),        // Scaleway over IPv6
	netip.MustParseAddr("fd00:a9fe:a9fe::1"),  // Linode/Akamai over IPv6
	netip.MustParseAddr("fd00:100::100:200"),  // Alibaba Cloud over IPv6
	netip.MustParseAddr("fe80::a9fe:a9fe"),    // OpenStack over IPv6
}

var metadataAddrs = func() map[netip.Addr]bool {
	m := make(map[netip.Addr]bool, len(MetadataAddrs))
	for _, a := range MetadataAddrs {
		m[a.Unmap()] = true
	}
	return m
}()

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// v4Classes are the IPv4 special ranges, in the order they are matched.
var v4Classes = []struct {
	p netip.Prefix
	c Class
}{
	{pfx("255.255.255.255/32"), ClassBroadcast},
	{pfx("0.0.0.0/8"), ClassUnspecified},
	{pfx("10.0.0.0/8"), ClassPrivate},
	{pfx("100.64.0.0/10"), ClassCGNAT},
	{pfx("127.0.0.0/8"), ClassLoopback},
	{pfx("169.254.0.0/16"), ClassLinkLocal},
	{pfx("172.16.0.0/12"), ClassPrivate},
	{pfx("192.0.0.0/24"), ClassIETFProtocol},
	{pfx("192.0.2.0/24"), ClassDocumentation},
	{pfx("192.88.99.0/24"), ClassTunnel},
	{pfx("192.168.0.0/16"), ClassPrivate},
	{pfx("198.18.0.0/15"), ClassBenchmarking},
	{pfx("198.51.100.0/24"), ClassDocumentation},
	{pfx("203.0.113.0/24"), ClassDocumentation},
	{pfx("224.0.0.0/4"), ClassMulticast},
	{pfx("240.0.0.0/4"), ClassReserved},
}

// v6Classes are the IPv6 special ranges, in the order they are matched, after
// the embedded forms have been handled.
var v6Classes = []struct {
	p netip.Prefix
	c Class
}{
	{pfx("64:ff9b:1::/48"), ClassReserved},
	{pfx("100::/64"), ClassReserved},
	{pfx("2001::/32"), ClassTunnel},
	{pfx("2001:2::/48"), ClassBenchmarking},
	{pfx("2001::/23"), ClassIETFProtocol},
	{pfx("2001:db8::/32"), ClassDocumentation},
	{pfx("2002::/16"), ClassTunnel},
	{pfx("3fff::/20"), ClassDocumentation},
	{pfx("fc00::/7"), ClassUniqueLocal},
	{pfx("fe80::/10"), ClassLinkLocal},
	{pfx("fec0::/10"), ClassSiteLocal},
	{pfx("ff00::/8"), ClassMulticast},
	{pfx("2000::/3"), ClassPublic},
}

var nat64 = pfx("64:ff9b::/96")

// Classify says what an address is, for the floor; see the Class constants.
// A zone is ignored.
func Classify(a netip.Addr) Class {
	if !a.IsValid() {
		return ClassInvalid
	}
	a = a.WithZone("")
	if metadataAddrs[a] {
		return ClassMetadata
	}
	if a.Is4() || a.Is4In6() {
		return classify4(a.Unmap())
	}
	switch a {
	case netip.IPv6Unspecified():
		return ClassUnspecified
	case netip.IPv6Loopback():
		return ClassLoopback
	}
	if v4, ok := compatible4(a); ok {
		return classify4(v4)
	}
	if nat64.Contains(a) {
		return classify4(low4(a))
	}
	for _, t := range v6Classes {
		if t.p.Contains(a) {
			if t.c == ClassTunnel {
				for _, v4 := range tunnel4(a) {
					if metadataAddrs[v4] {
						return ClassMetadata
					}
				}
			}
			return t.c
		}
	}
	return ClassReserved
}

func classify4(a netip.Addr) Class {
	if metadataAddrs[a] {
		return ClassMetadata
	}
	for _, t := range v4Classes {
		if t.p.Contains(a) {
			return t.c
		}
	}
	return ClassPublic
}

// low4 is the IPv4 address in the last 32 bits of a.
func low4(a netip.Addr) netip.Addr {
	b := a.As16()
	return netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
}

// compatible4 returns the IPv4 address of an IPv4-compatible address
// (::a.b.c.d, less :: and ::1).
func compatible4(a netip.Addr) (netip.Addr, bool) {
	if !a.Is6() || a.Is4In6() || a == netip.IPv6Unspecified() || a == netip.IPv6Loopback() {
		return netip.Addr{}, false
	}
	b := a.As16()
	for _, x := range b[:12] {
		if x != 0 {
			return netip.Addr{}, false
		}
	}
	return low4(a), true
}

// tunnel4 returns the IPv4 addresses a 6to4 or Teredo address carries: the
// 6to4 gateway, or the Teredo server and (de-obfuscated) client.
func tunnel4(a netip.Addr) []netip.Addr {
	b := a.As16()
	if b[0] == 0x20 && b[1] == 0x02 {
		return []netip.Addr{netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]})}
	}
	return []netip.Addr{
		netip.AddrFrom4([4]byte{b[4], b[5], b[6], b[7]}),
		netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]}),
	}
}

// embedded4 returns the IPv4 address an IPv6 address embeds, for reasons:
// mapped, compatible, NAT64 or 6to4.
func embedded4(a netip.Addr) (netip.Addr, bool) {
	a = a.WithZone("")
	switch {
	case a.Is4In6():
		return a.Unmap(), true
	case nat64.Contains(a):
		return low4(a), true
	case a.Is6() && a.As16()[0] == 0x20 && a.As16()[1] == 0x02:
		return tunnel4(a)[0], true
	}
	return compatible4(a)
}

// CheckAddr refuses an address the gate must not dial, given the port it
// would dial, the operator's allow prefixes ([floor] allow_cidrs) and the
// gate's own listen addresses:
//   - own (the same address, after Unmap, and port; an unspecified own
//     address such as 0.0.0.0 or :: matches every address on its port, and
//     port 0 every port of its address: the gate's transparent address)
//     → OwnAddress, even when allowed;
//   - ClassMetadata → Metadata, never opened by allow;
//   - any class but ClassPublic → Address, unless a prefix in allow contains
//     the address (unmapped; an IPv4-mapped prefix counts as IPv4).
func CheckAddr(a netip.Addr, port int, allow []netip.Prefix, own []netip.AddrPort) *Refusal {
	if !a.IsValid() {
		return refuse(Address, "the address is invalid")
	}
	a = a.WithZone("")
	u := a.Unmap()
	for _, o := range own {
		oa := o.Addr().WithZone("").Unmap()
		if (o.Port() == 0 || int(o.Port()) == port) && (oa == u || oa.IsUnspecified()) {
			return refuse(OwnAddress, "address %s is the gate's own listen address; the gate never dials itself", netip.AddrPortFrom(a, uint16(port)))
		}
	}
	c := Classify(a)
	switch c {
	case ClassPublic:
		return nil
	case ClassMetadata:
		return refuse(Metadata, "address %s%s is a cloud metadata address; the floor never opens it", a, embeddedNote(a))
	}
	for _, p := range allow {
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		if p.Contains(u) || p.Contains(a) {
			return nil
		}
	}
	return refuse(Address, "address %s%s is %s; open it with [floor] allow_cidrs if intended", a, embeddedNote(a), c)
}

// embeddedNote names the IPv4 address an IPv6 address embeds, for a reason.
func embeddedNote(a netip.Addr) string {
	if a.Is4() {
		return ""
	}
	if v4, ok := embedded4(a); ok {
		return " (IPv4 " + v4.String() + ")"
	}
	return ""
}
