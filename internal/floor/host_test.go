package floor

import (
	"strings"
	"testing"
)

// hostCase is one Host input: either a normalised name (check empty) or the
// check that refuses it and a fragment of the reason.
type hostCase struct {
	name   string
	in     string
	want   string
	check  Check
	reason string
}

var hostCases = []hostCase{
	// Names that pass.
	{name: "plain", in: "github.com", want: "github.com"},
	{name: "mixed case and trailing dot", in: "Registry.NPMJS.org.", want: "registry.npmjs.org"},
	{name: "punycode", in: "xn--80ak6aa92e.com", want: "xn--80ak6aa92e.com"},
	{name: "punycode upper case", in: "XN--BCHER-KVA.de", want: "xn--bcher-kva.de"},
	{name: "unicode", in: "bücher.de", want: "xn--bcher-kva.de"},
	{name: "unicode upper case", in: "BÜCHER.de", want: "xn--bcher-kva.de"},
	{name: "underscore", in: "a_b.example.com", want: "a_b.example.com"},
	{name: "hyphens in third and fourth place", in: "r3---sn-4g5e6nsz.googlevideo.com", want: "r3---sn-4g5e6nsz.googlevideo.com"},
	{name: "starts with digits", in: "1e100.net", want: "1e100.net"},
	{name: "numeric first labels", in: "123.example.com", want: "123.example.com"},
	{name: "dotted numbers then a name", in: "1.2.3.4.example", want: "1.2.3.4.example"},
	{name: "single label passes Host", in: "intranet", want: "intranet"},
	{name: "ideographic full stop", in: "example\u3002com", want: "example.com"},
	{name: "full-width full stop", in: "example\uff0ecom", want: "example.com"},
	{name: "halfwidth ideographic full stop", in: "example\uff61com", want: "example.com"},
	{name: "full-width letters", in: "ｅｘａｍｐｌｅ.com", want: "example.com"},
	{name: "trailing ideographic full stop", in: "example.com\u3002", want: "example.com"},
	{name: "soft hyphen is ignored", in: "exa\u00admple.com", want: "example.com"},
	{name: "label of 63", in: strings.Repeat("a", 63) + ".com", want: strings.Repeat("a", 63) + ".com"},
	{name: "name of 253", in: long(253), want: long(253)},
	{name: "name of 253 and a trailing dot", in: long(253) + ".", want: long(253)},

	// Userinfo.
	{name: "userinfo", in: "evil.com@good.com", check: Userinfo, reason: `"good.com" carries userinfo`},
	{name: "user and password", in: "user:secret@github.com", check: Userinfo, reason: `"github.com"`},
	{name: "trailing at", in: "github.com@", check: Userinfo, reason: "userinfo"},
	{name: "at in brackets", in: "[::1@x]", check: Userinfo, reason: "userinfo"},
	{name: "full-width commercial at", in: "evil.com\uff20good.com", check: Userinfo, reason: `"good.com"`},

	// IPv4 literals in every encoding.
	{name: "dotted decimal", in: "127.0.0.1", check: IPLiteral, reason: "IPv4 address 127.0.0.1"},
	{name: "dotted with trailing dot", in: "127.0.0.1.", check: IPLiteral, reason: "127.0.0.1"},
	{name: "two parts", in: "127.1", check: IPLiteral, reason: "127.0.0.1"},
	{name: "three parts", in: "127.0.1", check: IPLiteral, reason: "127.0.0.1"},
	{name: "one decimal number", in: "2130706433", check: IPLiteral, reason: "127.0.0.1"},
	{name: "hex part", in: "0x7f.1", check: IPLiteral, reason: "127.0.0.1"},
	{name: "upper-case hex", in: "0X7F.0X0.0X0.0X1", check: IPLiteral, reason: "127.0.0.1"},
	{name: "octal part", in: "0177.0.0.1", check: IPLiteral, reason: "127.0.0.1"},
	{name: "one hex number", in: "0x7f000001", check: IPLiteral, reason: "127.0.0.1"},
	{name: "one octal number", in: "017700000001", check: IPLiteral, reason: "127.0.0.1"},
	{name: "zero", in: "0", check: IPLiteral, reason: "0.0.0.0"},
	{name: "bare 0x", in: "0x", check: IPLiteral, reason: "0.0.0.0"},
	{name: "bare 0x last", in: "127.0.0.0x", check: IPLiteral, reason: "127.0.0.0"},
	{name: "leading zeros", in: "000000000127.0.0.1", check: IPLiteral, reason: "87.0.0.1"},
	{name: "metadata as one number", in: "2852039166", check: IPLiteral, reason: "169.254.169.254"},
	{name: "full-width digits and dots", in: "１２７．０．０．１", check: IPLiteral, reason: "127.0.0.1"},
	{name: "ideographic dots", in: "127\u30020\u30020\u30021", check: IPLiteral, reason: "127.0.0.1"},
	{name: "full-width single number", in: "２１３０７０６４３３", check: IPLiteral, reason: "127.0.0.1"},
	{name: "max", in: "255.255.255.255", check: IPLiteral, reason: "255.255.255.255"},
	{name: "max single number", in: "4294967295", check: IPLiteral, reason: "255.255.255.255"},

	// Numbers that are no address.
	{name: "five parts", in: "1.2.3.4.5", check: Malformed, reason: "ends in a number but is not an address"},
	{name: "part over 255", in: "999.1.1.1", check: Malformed, reason: "not an address"},
	{name: "bad hex", in: "1.0x1g", check: Malformed, reason: "not an address"},
	{name: "bad octal", in: "1.2.3.08", check: Malformed, reason: "not an address"},
	{name: "single number too big", in: "4294967296", check: Malformed, reason: "not an address"},
	{name: "last part too big", in: "1.2.65536", check: Malformed, reason: "not an address"},
	{name: "huge number", in: "99999999999999999999999999999", check: Malformed, reason: "not an address"},
	{name: "last label starts with a digit", in: "example.1com", check: Malformed, reason: "not an address"},

	// IPv6 literals.
	{name: "loopback", in: "[::1]", check: IPLiteral, reason: `"::1" is an IPv6 address literal`},
	{name: "mapped dotted", in: "[::ffff:127.0.0.1]", check: IPLiteral, reason: `"::ffff:127.0.0.1"`},
	{name: "mapped hex", in: "[::ffff:7f00:1]", check: IPLiteral, reason: `"::ffff:127.0.0.1"`},
	{name: "compatible", in: "[::127.0.0.1]", check: IPLiteral, reason: "embeds IPv4 127.0.0.1"},
	{name: "nat64", in: "[64:ff9b::a9fe:a9fe]", check: IPLiteral, reason: "embeds IPv4 169.254.169.254"},
	{name: "6to4", in: "[2002:a9fe:a9fe::1]", check: IPLiteral, reason: "embeds IPv4 169.254.169.254"},
	{name: "upper case", in: "[FD00:EC2::254]", check: IPLiteral, reason: `"fd00:ec2::254"`},
	{name: "IPv4 in brackets", in: "[127.0.0.1]", check: IPLiteral, reason: "127.0.0.1"},
	{name: "unbracketed IPv6", in: "::1", check: IPLiteral, reason: `"::1"`},
	{name: "unbracketed mapped", in: "::ffff:169.254.169.254", check: IPLiteral, reason: "169.254.169.254"},
	{name: "full-width brackets", in: "\uff3b::1\uff3d", check: IPLiteral, reason: `"::1"`},
	{name: "full-width colons", in: "\uff1a\uff1a1", check: IPLiteral, reason: `"::1"`},
	{name: "full-width brackets around a name", in: "\uff3bgithub.com\uff3d", check: Malformed, reason: "not an IPv6 address"},
	{name: "zone", in: "[fe80::1%25eth0]", check: Malformed, reason: "zone"},
	{name: "unclosed bracket", in: "[::1", check: Malformed, reason: "brackets"},
	{name: "bracket then port", in: "[::1]:443", check: Malformed, reason: "brackets"},
	{name: "not an address in brackets", in: "[github.com]", check: Malformed, reason: "not an IPv6 address"},
	{name: "empty brackets", in: "[]", check: Malformed, reason: "not an IPv6 address"},
	{name: "IPvFuture", in: "[v1.x]", check: Malformed, reason: "not an IPv6 address"},

	// Malformed.
	{name: "empty", in: "", check: Malformed, reason: "empty"},
	{name: "only a dot", in: ".", check: Malformed, reason: "no name"},
	{name: "two trailing dots", in: "github.com..", check: Malformed, reason: "empty label"},
	{name: "empty label", in: "a..b", check: Malformed, reason: "empty label"},
	{name: "leading dot", in: ".a.com", check: Malformed, reason: "empty label"},
	{name: "label of 64", in: strings.Repeat("a", 64) + ".com", check: Malformed, reason: "label of 64 bytes"},
	{name: "name of 254", in: long(254), check: Malformed, reason: "at most 253"},
	{name: "huge input", in: strings.Repeat("a.", 600), check: Malformed, reason: "at most 253"},
	{name: "percent", in: "%31%32%37.0.0.1", check: Malformed, reason: "percent-encoded"},
	{name: "backslash", in: `github.com\evil.com`, check: Malformed, reason: `contains "\\"`},
	{name: "slash", in: "github.com/x", check: Malformed, reason: `contains "/"`},
	{name: "question mark", in: "github.com?x", check: Malformed, reason: `contains "?"`},
	{name: "hash", in: "github.com#x", check: Malformed, reason: `contains "#"`},
	{name: "space", in: "github .com", check: Malformed, reason: "whitespace"},
	{name: "tab", in: "github.com\t", check: Malformed, reason: "whitespace"},
	{name: "newline", in: "github.com\nX-Evil: 1", check: Malformed, reason: "whitespace"},
	{name: "nul", in: "github.com\x00.evil.com", check: Malformed, reason: "control"},
	{name: "del", in: "github.com\x7f", check: Malformed, reason: "control"},
	{name: "port", in: "github.com:443", check: Malformed, reason: "':' outside brackets"},
	{name: "star", in: "*.github.com", check: Malformed, reason: `contains "*"`},
	{name: "comma", in: "a.com,b.com", check: Malformed, reason: `contains ","`},
	{name: "non-ASCII space", in: "github\u00a0.com", check: Malformed, reason: "whitespace"},
	{name: "ideographic space", in: "github\u3000.com", check: Malformed, reason: "whitespace"},
	{name: "C1 control", in: "github\u0085.com", check: Malformed, reason: "control"},
	{name: "invalid UTF-8", in: "github\xff.com", check: Malformed, reason: "UTF-8"},
	{name: "full-width slash", in: "github.com\uff0fevil", check: Malformed, reason: `contains "/"`},
	{name: "full-width colon", in: "github.com\uff1a443", check: Malformed, reason: "':'"},
	{name: "disallowed rune", in: "a\u2488.com", check: Malformed, reason: "internationalised"},
	{name: "right-to-left override", in: "moc.\u202eevil.com", check: Malformed, reason: "internationalised"},
	{name: "invalid punycode", in: "xn--zz.com", check: Malformed, reason: "punycode"},
	{name: "punycode of ASCII", in: "xn--example-.com", check: Malformed, reason: "punycode"},
	{name: "punycode of a full-width digit", in: "xn--8g7c.com", check: Malformed, reason: "punycode"},
	{name: "empty label after mapping", in: "a\u3002\u3002b", check: Malformed, reason: "empty label"},
}

// long is a valid name of n bytes: labels of 50 bytes, then the rest.
func long(n int) string {
	var b strings.Builder
	for b.Len()+51 < n {
		b.WriteString(strings.Repeat("a", 50) + ".")
	}
	b.WriteString(strings.Repeat("b", n-b.Len()))
	return b.String()
}

func TestHost(t *testing.T) {
	for _, c := range hostCases {
		t.Run(c.name, func(t *testing.T) {
			got, r := Host(c.in)
			if c.check == "" {
				if r != nil {
					t.Fatalf("Host(%q) refused: %v", c.in, r)
				}
				if got != c.want {
					t.Fatalf("Host(%q) = %q, want %q", c.in, got, c.want)
				}
				return
			}
			if r == nil {
				t.Fatalf("Host(%q) = %q, want refusal %s", c.in, got, c.check)
			}
			if got != "" {
				t.Errorf("Host(%q) returned %q with a refusal", c.in, got)
			}
			if r.Check != c.check || !strings.Contains(r.Reason, c.reason) {
				t.Fatalf("Host(%q) = %v, want %s with %q", c.in, r, c.check, c.reason)
			}
			checkReason(t, r)
		})
	}
}

// checkReason asserts what every reason keeps to: one line, and the prefix of
// Error.
func checkReason(t *testing.T, r *Refusal) {
	t.Helper()
	if strings.ContainsAny(r.Reason, "\r\n") {
		t.Errorf("reason has a line break: %q", r.Reason)
	}
	if want := "floor: " + string(r.Check) + ": "; !strings.HasPrefix(r.Error(), want) {
		t.Errorf("Error() = %q, want prefix %q", r.Error(), want)
	}
}

func TestLong(t *testing.T) {
	for _, n := range []int{253, 254} {
		if got := len(long(n)); got != n {
			t.Fatalf("len(long(%d)) = %d", n, got)
		}
	}
}

func TestHostKeepsUserinfoSecret(t *testing.T) {
	_, r := Host("agent:hunter2@github.com")
	if r == nil || strings.Contains(r.Reason, "hunter2") || strings.Contains(r.Reason, "agent") {
		t.Fatalf("reason repeats the userinfo: %v", r)
	}
	_, _, r = Authority("agent:hunter2@github.com:443", 0)
	if r == nil || strings.Contains(r.Reason, "hunter2") {
		t.Fatalf("reason repeats the userinfo: %v", r)
	}
}

func TestHostReturnsNormalInput(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, in := range []string{"github.com", "registry.npmjs.org", "registry.npmjs.org."} {
		if n := testing.AllocsPerRun(100, func() {
			if _, r := Host(in); r != nil {
				t.Fatal(r)
			}
		}); n != 0 {
			t.Errorf("Host(%q) allocates %v times, want 0", in, n)
		}
	}
}

func TestParseIPv4(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string // "" means no address
	}{
		{"four parts", "1.2.3.4", "1.2.3.4"},
		{"three parts", "1.2.772", "1.2.3.4"},
		{"two parts", "1.131844", "1.2.3.4"},
		{"one part", "16909060", "1.2.3.4"},
		{"mixed bases", "0x1.02.0x3.4", "1.2.3.4"},
		{"hex without digits", "0x.0x.0x.0x", "0.0.0.0"},
		{"octal zero", "00.00.00.00", "0.0.0.0"},
		{"five parts", "1.2.3.4.5", ""},
		{"empty part", "1..2", ""},
		{"empty", "", ""},
		{"letter", "1.2.3.a", ""},
		{"hex letter beyond f", "0xg", ""},
		{"octal 8", "08", ""},
		{"part over 255", "256.1", ""},
		{"last over its room", "1.16777216", ""},
		{"overflow", "18446744073709551617", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, ok := parseIPv4(tt.in)
			if tt.want == "" {
				if ok {
					t.Fatalf("parseIPv4(%q) = %v, want no address", tt.in, a)
				}
				return
			}
			if !ok || a.String() != tt.want {
				t.Fatalf("parseIPv4(%q) = %v, %v, want %s", tt.in, a, ok, tt.want)
			}
		})
	}
}

func TestAuthority(t *testing.T) {
	tests := []struct {
		name        string
		in          string
		defaultPort int
		host        string
		port        int
		check       Check
		reason      string
	}{
		{name: "connect", in: "github.com:443", host: "github.com", port: 443},
		{name: "normalised", in: "GitHub.com.:443", host: "github.com", port: 443},
		{name: "unicode", in: "bücher.de:443", host: "xn--bcher-kva.de", port: 443},
		{name: "default port", in: "github.com", defaultPort: 80, host: "github.com", port: 80},
		{name: "explicit port over default", in: "github.com:8080", defaultPort: 80, host: "github.com", port: 8080},
		{name: "highest port", in: "github.com:65535", host: "github.com", port: 65535},
		{name: "lowest port", in: "github.com:1", host: "github.com", port: 1},
		{name: "connect without port", in: "github.com", check: Port, reason: "no port"},
		{name: "leading zero", in: "github.com:0443", check: Port, reason: `port "0443"`},
		{name: "plus sign", in: "github.com:+443", check: Port, reason: "malformed"},
		{name: "minus sign", in: "github.com:-1", check: Port, reason: "malformed"},
		{name: "port zero", in: "github.com:0", check: Port, reason: "malformed"},
		{name: "too big", in: "github.com:65536", check: Port, reason: "malformed"},
		{name: "six digits", in: "github.com:100000", check: Port, reason: "malformed"},
		{name: "hex port", in: "github.com:0x1bb", check: Port, reason: "malformed"},
		{name: "full-width digits", in: "github.com:４４３", check: Port, reason: "malformed"},
		{name: "space in port", in: "github.com: 443", check: Port, reason: "malformed"},
		{name: "empty port", in: "github.com:", check: Malformed, reason: "no port"},
		{name: "two ports", in: "github.com:443:1", check: Malformed, reason: "more than one ':'"},
		{name: "IPv6", in: "[::1]:443", check: IPLiteral, reason: `"::1"`},
		{name: "IPv6 default port", in: "[::1]", defaultPort: 443, check: IPLiteral, reason: `"::1"`},
		{name: "IPv6 unbracketed", in: "::1", defaultPort: 443, check: IPLiteral, reason: `"::1"`},
		{name: "IPv6 unclosed", in: "[::1:443", check: Malformed, reason: "unclosed"},
		{name: "IPv6 junk after bracket", in: "[::1]x:443", check: Malformed, reason: "not a port"},
		{name: "IPv6 empty port", in: "[::1]:", check: IPLiteral, reason: `"::1"`},
		{name: "IPv4", in: "127.0.0.1:443", check: IPLiteral, reason: "127.0.0.1"},
		{name: "IPv4 as a number", in: "2130706433:443", check: IPLiteral, reason: "127.0.0.1"},
		{name: "userinfo", in: "evil.com@github.com:443", check: Userinfo, reason: "github.com"},
		{name: "empty", in: "", check: Malformed, reason: "empty"},
		{name: "empty host", in: ":443", check: Malformed, reason: "empty"},
		{name: "bad host", in: "git hub.com:443", check: Malformed, reason: "whitespace"},
		{name: "bad default port", in: "github.com", defaultPort: -1, check: Port, reason: "out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			host, port, r := Authority(tt.in, tt.defaultPort)
			if tt.check == "" {
				if r != nil {
					t.Fatalf("Authority(%q, %d) refused: %v", tt.in, tt.defaultPort, r)
				}
				if host != tt.host || port != tt.port {
					t.Fatalf("Authority(%q, %d) = %q, %d, want %q, %d", tt.in, tt.defaultPort, host, port, tt.host, tt.port)
				}
				return
			}
			if r == nil {
				t.Fatalf("Authority(%q, %d) = %q, %d, want refusal %s", tt.in, tt.defaultPort, host, port, tt.check)
			}
			if host != "" || port != 0 {
				t.Errorf("Authority(%q) returned %q, %d with a refusal", tt.in, host, port)
			}
			if r.Check != tt.check || !strings.Contains(r.Reason, tt.reason) {
				t.Fatalf("Authority(%q, %d) = %v, want %s with %q", tt.in, tt.defaultPort, r, tt.check, tt.reason)
			}
			checkReason(t, r)
		})
	}
}
