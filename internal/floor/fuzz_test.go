package floor

import (
	"net/netip"
	"strings"
	"testing"
)

// FuzzHost holds Host to what the gate relies on: it never panics, and a name
// it accepts is lowercase ASCII from [a-z0-9._-], has no empty label and no
// long one, has a dot or is refused by Name, is stable under Host, and is no
// address to netip.ParseAddr or to the IPv4 reader.
func FuzzHost(f *testing.F) {
	for _, c := range hostCases {
		f.Add(c.in)
	}
	for _, s := range []string{"evil.com@good.com", "[::ffff:7f00:1]", "１２７．０．０．１", "0x7f.1", "bücher.de"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		name, r := Host(in)
		if r != nil {
			if name != "" {
				t.Fatalf("Host(%q) returned %q with %v", in, name, r)
			}
			if r.Check == "" || r.Reason == "" || strings.ContainsAny(r.Reason, "\r\n") {
				t.Fatalf("Host(%q): bad refusal %#v", in, r)
			}
			return
		}
		if name == "" || len(name) > 253 {
			t.Fatalf("Host(%q) = %q: empty or over 253 bytes", in, name)
		}
		for i := 0; i < len(name); i++ {
			c := name[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '.' || c == '-' || c == '_') {
				t.Fatalf("Host(%q) = %q: byte %q outside [a-z0-9._-]", in, name, c)
			}
		}
		for _, label := range strings.Split(name, ".") {
			if label == "" || len(label) > 63 {
				t.Fatalf("Host(%q) = %q: label %q is empty or over 63 bytes", in, name, label)
			}
		}
		if !strings.Contains(name, ".") {
			if nr := Name(name); nr == nil || (nr.Check != SingleLabel && nr.Check != LocalName && nr.Check != Metadata) {
				t.Fatalf("Host(%q) = %q has no dot, and Name gives %v", in, name, nr)
			}
		}
		if again, r := Host(name); r != nil || again != name {
			t.Fatalf("Host(%q) = %q but Host(%q) = %q, %v", in, name, name, again, r)
		}
		if a, err := netip.ParseAddr(name); err == nil {
			t.Fatalf("Host(%q) = %q, which netip reads as %v", in, name, a)
		}
		if a, ok := parseIPv4(name); ok {
			t.Fatalf("Host(%q) = %q, which the IPv4 reader reads as %v", in, name, a)
		}
	})
}

// FuzzAuthority holds Authority to Host: the host it returns is what Host
// returns for it, and the port is in range.
func FuzzAuthority(f *testing.F) {
	for _, s := range []string{"github.com:443", "github.com", "[::1]:443", "github.com:0443", "github.com:", "a:b:c", "bücher.de:80"} {
		f.Add(s, 0)
		f.Add(s, 443)
	}
	f.Fuzz(func(t *testing.T, in string, defaultPort int) {
		host, port, r := Authority(in, defaultPort)
		if r != nil {
			if host != "" || port != 0 || r.Check == "" || strings.ContainsAny(r.Reason, "\r\n") {
				t.Fatalf("Authority(%q, %d) = %q, %d, %#v", in, defaultPort, host, port, r)
			}
			return
		}
		if port < 1 || port > 65535 {
			t.Fatalf("Authority(%q, %d): port %d out of range", in, defaultPort, port)
		}
		if again, r := Host(host); r != nil || again != host {
			t.Fatalf("Authority(%q) host %q, but Host gives %q, %v", in, host, again, r)
		}
	})
}
