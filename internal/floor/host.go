package floor

import (
	"net/netip"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/lockhttp/lockhttp/internal/percent"
	"golang.org/x/net/idna"
)

// maxHostInput bounds the raw host read, before any mapping. A name is at
// most 253 bytes; the slack allows for non-ASCII input that maps shorter.
const maxHostInput = 1024

// profile maps non-ASCII names for lookup as UTS 46 does (width, case and
// compatibility mappings; U+3002, U+FF0E and U+FF61 become '.'), then
// encodes them as punycode. Unlike idna.Lookup it lets '_' through (real host
// names use it) and does not check hyphens, since labels such as
// "r3---sn-abc" are in common use; the characters allowed in the result are
// checked by asciiHost, not here. Like WHATWG URL it applies the Bidi and
// ContextJ rules.
var profile = idna.New(
	idna.MapForLookup(),
	idna.Transitional(false),
	idna.BidiRule(),
	idna.StrictDomainName(false),
	idna.CheckHyphens(false),
)

// Host normalises a host as found in a URL authority, a Host header or a
// CONNECT target (without the port; IPv6 literals come in brackets). It
// returns the lowercase ASCII (punycode) name without a trailing dot, or a
// refusal: Userinfo for any '@', IPLiteral for an IP address in any encoding
// (bracketed IPv6, and IPv4 as WHATWG URL and inet_aton read it: "127.1",
// "0x7f000001", "0177.0.0.1", full-width digits), Malformed for anything else
// that is not a plain name (percent-encoding, '\', '/', '?', '#', ':',
// whitespace, control characters, empty or long labels, a last label that
// starts with a digit but is no address, invalid punycode).
//
// A name that is already normal (lowercase ASCII, no trailing dot) is
// returned as is, without allocation.
func Host(raw string) (string, *Refusal) {
	if raw == "" {
		return "", refuse(Malformed, "the host is empty; use a host name")
	}
	if len(raw) > maxHostInput {
		return "", refuse(Malformed, "host %s is %d bytes long; a host name is at most 253", Shown(raw, MaxShown), len(raw))
	}
	if strings.IndexByte(raw, '@') >= 0 {
		return "", userinfo(raw)
	}
	if raw[0] == '[' {
		return "", bracketed(raw)
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] >= utf8.RuneSelf {
			return mapped(raw)
		}
	}
	return asciiHost(raw)
}

// HostOf is the host that s names, normalised by Host: s is a host, or a host and port as
// Authority splits them ("example.com:443", "[::1]:443"). It is "" when the floor refuses the
// host (an IP literal, userinfo, a malformed name or port). Every package that compares a host
// a caller hands it (claudeapi, secrets) reads it with HostOf, so that one host has one
// spelling: "EXAMPLE.com.", "example.com:443" and "ｅxample.com" are "example.com".
func HostOf(s string) string {
	if h, r := Host(s); r == nil {
		return h
	}
	if h, _, r := Authority(s, 443); r == nil {
		return h
	}
	return ""
}

// NamesHost reports whether a TLS server name (SNI) names host, a host as Host returns it: the
// name, read by Host, is host, and it is ASCII, as a server name is sent (an internationalised
// name goes as its xn-- A-label). A server name carries no port.
func NamesHost(serverName, host string) bool {
	for i := 0; i < len(serverName); i++ {
		if serverName[i] >= utf8.RuneSelf {
			return false
		}
	}
	h, r := Host(serverName)
	return r == nil && h == host
}

// userinfo refuses a host with an '@'. What stands before the last '@' may be
// a credential, so the reason repeats only what follows it.
func userinfo(raw string) *Refusal {
	after := raw[strings.LastIndexByte(raw, '@')+1:]
	return refuse(Userinfo, "host %s carries userinfo (text before an '@'); send credentials in headers, never in the host", Shown(after, MaxShown))
}

// bracketed refuses a host in brackets: a valid IPv6 (or IPv4) address is an
// IP literal, anything else is malformed. Zones are refused.
func bracketed(raw string) *Refusal {
	if len(raw) < 2 || raw[len(raw)-1] != ']' || strings.IndexByte(raw[1:len(raw)-1], ']') >= 0 || strings.IndexByte(raw[1:], '[') >= 0 {
		return refuse(Malformed, "host %s has unbalanced brackets; use a host name", Shown(raw, MaxShown))
	}
	inner := raw[1 : len(raw)-1]
	if strings.IndexByte(inner, '%') >= 0 {
		return refuse(Malformed, "host %s has an IPv6 zone; use a host name", Shown(raw, MaxShown))
	}
	a, err := netip.ParseAddr(inner)
	if err != nil {
		return refuse(Malformed, "host %s is in brackets but is not an IPv6 address; use a host name", Shown(raw, MaxShown))
	}
	return ipLiteral(a)
}

// ipLiteral refuses an address written as a host, naming it canonically and
// the IPv4 address it embeds, if any.
func ipLiteral(a netip.Addr) *Refusal {
	if a.Is4() {
		return refuse(IPLiteral, "host %q is an IPv4 address literal; use a host name", a.String())
	}
	if v4, ok := embedded4(a); ok {
		return refuse(IPLiteral, "host %q is an IPv6 address literal (it embeds IPv4 %s); use a host name", a.String(), v4)
	}
	return refuse(IPLiteral, "host %q is an IPv6 address literal; use a host name", a.String())
}

// mapped normalises a non-ASCII host: UTS 46 mapping, then punycode, then the
// same checks as an ASCII host (so mapped digits and dots are read as IPv4).
func mapped(raw string) (string, *Refusal) {
	if !utf8.ValidString(raw) {
		return "", refuse(Malformed, "host %s is not valid UTF-8; use a host name", Shown(raw, MaxShown))
	}
	for _, r := range raw {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return "", refuse(Malformed, "host %s contains whitespace or a control character", Shown(raw, MaxShown))
		}
	}
	out, err := profile.ToASCII(raw)
	if err != nil {
		return "", refuse(Malformed, "host %s is not a valid internationalised domain name", Shown(raw, MaxShown))
	}
	if strings.IndexByte(out, '@') >= 0 {
		return "", userinfo(out)
	}
	if strings.HasPrefix(out, "[") {
		// Full-width brackets around an address.
		return "", bracketed(out)
	}
	return asciiHost(out)
}

// asciiHost checks and normalises an ASCII host: it lowercases, strips one
// trailing dot, checks characters and labels, refuses IPv4 in the forms that
// WHATWG URL and inet_aton accept, and checks punycode labels.
func asciiHost(s string) (string, *Refusal) {
	upper, colon := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_', c == '.':
		case 'A' <= c && c <= 'Z':
			upper = true
		case c == ':':
			colon = true
		case c == '%':
			return "", refuse(Malformed, "host %s is percent-encoded; send the plain host name", Shown(s, MaxShown))
		case c <= ' ' || c == 0x7f:
			return "", refuse(Malformed, "host %s contains whitespace or a control character", Shown(s, MaxShown))
		default:
			return "", refuse(Malformed, "host %s contains %q; a host name has only letters, digits, '-', '_' and dots", Shown(s, MaxShown), string(rune(c)))
		}
	}
	if colon {
		// Unbracketed IPv6 is still an IP literal; any other colon is a port
		// in the wrong place or junk.
		if a, err := netip.ParseAddr(s); err == nil {
			return "", ipLiteral(a)
		}
		return "", refuse(Malformed, "host %s contains ':' outside brackets; the port belongs in the authority", Shown(s, MaxShown))
	}
	if upper {
		s = strings.ToLower(s)
	}
	name := strings.TrimSuffix(s, ".")
	if name == "" {
		return "", refuse(Malformed, "host %s has no name; use a host name", Shown(s, MaxShown))
	}
	if len(name) > 253 {
		return "", refuse(Malformed, "host %s is %d bytes long; a host name is at most 253", Shown(name, MaxShown), len(name))
	}
	start, punycode := 0, false
	for i := 0; i <= len(name); i++ {
		if i < len(name) && name[i] != '.' {
			continue
		}
		label := name[start:i]
		switch {
		case label == "":
			return "", refuse(Malformed, "host %s has an empty label; use a host name", Shown(s, MaxShown))
		case len(label) > 63:
			return "", refuse(Malformed, "host %s has a label of %d bytes; a label is at most 63", Shown(name, MaxShown), len(label))
		case strings.HasPrefix(label, "xn--"):
			punycode = true
		}
		if i < len(name) {
			start = i + 1
		}
	}
	// name[start:] is the last label. No top-level domain starts with a
	// digit: a name whose last label does is read as an IPv4 address, and
	// refused as malformed when it is none.
	if c := name[start]; '0' <= c && c <= '9' {
		if a, ok := parseIPv4(name); ok {
			return "", refuse(IPLiteral, "host %s is the IPv4 address %s; use a host name", Shown(name, MaxShown), a)
		}
		return "", refuse(Malformed, "host %s ends in a number but is not an address; use a host name", Shown(name, MaxShown))
	}
	if punycode {
		// A punycode label must decode to a valid name and encode back to
		// itself, so that one name has one spelling.
		if out, err := profile.ToASCII(name); err != nil || out != name {
			return "", refuse(Malformed, "host %s has an invalid punycode (xn--) label", Shown(name, MaxShown))
		}
	}
	return name, nil
}

// parseIPv4 reads s as the WHATWG URL IPv4 parser and inet_aton do: one to
// four dot-separated parts, each decimal, octal (leading 0) or hex (0x, which
// may have no digits); the last part fills the bytes left. s has no trailing
// dot and no empty part.
func parseIPv4(s string) (netip.Addr, bool) {
	var parts [4]uint64
	n := 0
	for {
		if n == len(parts) {
			return netip.Addr{}, false
		}
		part := s
		dot := strings.IndexByte(s, '.')
		if dot >= 0 {
			part = s[:dot]
		}
		v, ok := parseIPv4Number(part)
		if !ok {
			return netip.Addr{}, false
		}
		parts[n] = v
		n++
		if dot < 0 {
			break
		}
		s = s[dot+1:]
	}
	for _, v := range parts[:n-1] {
		if v > 255 {
			return netip.Addr{}, false
		}
	}
	last := parts[n-1]
	if last >= 1<<(8*(5-n)) {
		return netip.Addr{}, false
	}
	v := uint32(last)
	for i, p := range parts[:n-1] {
		v |= uint32(p) << (8 * (3 - i))
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}

// parseIPv4Number reads one part of an IPv4 address. Values past 2^32 are
// held at 2^32 + 1, which no part may reach.
func parseIPv4Number(p string) (uint64, bool) {
	if p == "" {
		return 0, false
	}
	base := uint64(10)
	switch {
	case len(p) >= 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X'):
		base, p = 16, p[2:]
	case len(p) >= 2 && p[0] == '0':
		base, p = 8, p[1:]
	}
	var v uint64
	for i := 0; i < len(p); i++ {
		v8, ok := percent.Hex(p[i])
		d := uint64(v8)
		if !ok || d >= base {
			return 0, false
		}
		v = v*base + d
		if v > 1<<32 {
			v = 1<<32 + 1
		}
	}
	return v, true
}

// Authority splits "host:port" (or "[v6]:port") and normalises the host with
// Host. defaultPort is used when there is no port; defaultPort 0 means the
// port is required (CONNECT), and a missing one is refused (Port). A port is
// 1-65535, ASCII digits only, no sign, no leading zero, at most 5 digits
// (Port); "host:" is Malformed.
func Authority(authority string, defaultPort int) (host string, port int, r *Refusal) {
	if authority == "" {
		return "", 0, refuse(Malformed, "the authority is empty; use host:port")
	}
	if strings.IndexByte(authority, '@') >= 0 {
		return "", 0, userinfo(authority)
	}
	hostPart, portPart, hasPort := authority, "", false
	if authority[0] == '[' {
		end := strings.IndexByte(authority, ']')
		if end < 0 {
			return "", 0, refuse(Malformed, "authority %s has an unclosed bracket; use host:port", Shown(authority, MaxShown))
		}
		hostPart = authority[:end+1]
		switch rest := authority[end+1:]; {
		case rest == "":
		case rest[0] == ':':
			portPart, hasPort = rest[1:], true
		default:
			return "", 0, refuse(Malformed, "authority %s has text after the bracket that is not a port", Shown(authority, MaxShown))
		}
	} else if i := strings.LastIndexByte(authority, ':'); i >= 0 {
		if strings.IndexByte(authority[:i], ':') >= 0 {
			if a, err := netip.ParseAddr(authority); err == nil {
				return "", 0, ipLiteral(a)
			}
			return "", 0, refuse(Malformed, "authority %s has more than one ':'; use host:port, IPv6 in brackets", Shown(authority, MaxShown))
		}
		hostPart, portPart, hasPort = authority[:i], authority[i+1:], true
	}
	host, r = Host(hostPart)
	if r != nil {
		return "", 0, r
	}
	if !hasPort {
		if defaultPort == 0 {
			return "", 0, refuse(Port, "authority %s has no port; use %s", Shown(authority, MaxShown), Shown(host+":443", MaxShown))
		}
		if defaultPort < 1 || defaultPort > 65535 {
			return "", 0, refuse(Port, "default port %d is out of range 1-65535", defaultPort)
		}
		return host, defaultPort, nil
	}
	if portPart == "" {
		return "", 0, refuse(Malformed, "authority %s ends in ':' with no port", Shown(authority, MaxShown))
	}
	port, ok := parsePort(portPart)
	if !ok {
		return "", 0, refuse(Port, "port %s of %s is malformed; use a number from 1 to 65535, without sign or leading zero", Shown(portPart, MaxShown), Shown(host, MaxShown))
	}
	return host, port, nil
}

// parsePort reads 1-65535 in plain decimal: no sign, no leading zero.
func parsePort(s string) (int, bool) {
	if len(s) == 0 || len(s) > 5 || s[0] == '0' {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	if n > 65535 {
		return 0, false
	}
	return n, true
}
