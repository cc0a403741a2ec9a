package enclosure

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// DefaultSubnet is where enclosures take their /30 without --enclosure-subnet: 198.18.0.0/15 is
// the benchmarking range, which real networks do not use.
var DefaultSubnet = netip.MustParsePrefix("198.18.0.0/24")

// Link and table names. The host's side of the veth pair is named for its /30 (linkPrefix and
// the network address in hex: lox-c6120000), so the name is unique on the host and acts as the
// /30's lock: a second lox that picked the same /30 fails to create it and takes the next. The
// host's table is named for the link (tablePrefix and the link's name), so that a table whose
// link is gone is known to be stale.
const (
	linkPrefix  = "lox-"
	tablePrefix = "lockhttp-"
	// agentLink is the name of the agent's side of the pair, inside its namespace.
	agentLink = "gate0"
	// agentTable is the table of rules inside the agent's namespace.
	agentTable = "lockhttp"
)

// CheckSubnet refuses a subnet the enclosures cannot be carved from: not IPv4, or narrower
// than a /30.
func CheckSubnet(p netip.Prefix) error {
	switch {
	case !p.IsValid():
		return errors.New("--enclosure-subnet: give an IPv4 CIDR such as 198.18.0.0/24")
	case !p.Addr().Is4():
		return fmt.Errorf("--enclosure-subnet %s is not IPv4: the agent's link has no IPv6; give an IPv4 CIDR such as %s", p, DefaultSubnet)
	case p.Bits() > 30:
		return fmt.Errorf("--enclosure-subnet %s is narrower than a /30: each enclosure takes a /30 (the gate's address and the agent's); give a /30 or wider", p)
	case p.Masked() != p:
		return fmt.Errorf("--enclosure-subnet %s has host bits set; did you mean %s?", p, p.Masked())
	}
	return nil
}

// candidates are subnet's /30s in order, less those that overlap a prefix in use on the host.
func candidates(subnet netip.Prefix, used []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	base := subnet.Masked().Addr().As4()
	start := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	n := uint32(1) << (30 - subnet.Bits())
	for i := uint32(0); i < n; i++ {
		a := start + i*4
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)}), 30)
		free := true
		for _, u := range used {
			if u.Overlaps(p) {
				free = false
				break
			}
		}
		if free {
			out = append(out, p)
		}
	}
	return out
}

// addrs are a /30's gate address (its first host) and the agent's (its second).
func addrs(p netip.Prefix) (gate, agent netip.Addr) {
	gate = p.Addr().Next()
	return gate, gate.Next()
}

// linkName is the name of the host's side of the veth pair for the /30 p.
func linkName(p netip.Prefix) string {
	b := p.Addr().As4()
	return fmt.Sprintf("%s%02x%02x%02x%02x", linkPrefix, b[0], b[1], b[2], b[3])
}

// tableName is the name of the host's table for the link.
func tableName(link string) string { return tablePrefix + link }

// staleLink is the link a host table of an enclosure belongs to, or "" when name is no
// enclosure's table.
func staleLink(name string) string {
	link, ok := strings.CutPrefix(name, tablePrefix)
	if !ok || !strings.HasPrefix(link, linkPrefix) {
		return ""
	}
	return link
}

func ipnet(a netip.Addr, bits int) *net.IPNet {
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, a.BitLen())}
}
