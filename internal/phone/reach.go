package phone

import (
	"net/netip"
	"net/url"
	"strings"
)

// ReachFix is what to do when pairing links name this machine's loopback: the fix a warning
// about it gives, wherever it is given (lox pair, the terminal's pairing code, the doctor).
const ReachFix = "make the hub reachable from the phone and name that address: " +
	"lox run --hub-listen ADDRESS:3131 with this machine's LAN or VPN address (a hub on every address, 0.0.0.0, " +
	"needs --phone-url http://ADDRESS:3131 too), or --phone-url URL for a TLS reverse proxy or a tunnel in front of " +
	"127.0.0.1:3131 (LOCKHTTP_PHONE_URL under compose); " +
	`see docs/phone.md, "Reaching the hub from the phone"`

// LoopbackOnly reports whether a link (a pairing link, the page's public URL) names this
// machine's loopback: 127.0.0.0/8, ::1 or localhost. Such a link opens on this machine alone,
// never on a phone, unless the phone reaches this machine's loopback through a tunnel of its
// own (adb reverse, ssh -R).
func LoopbackOnly(link string) bool {
	u, err := url.Parse(link)
	if err != nil {
		return false
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}
