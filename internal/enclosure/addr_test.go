package enclosure

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestCheckSubnet(t *testing.T) {
	for _, tc := range []struct {
		in, err string
	}{
		{"198.18.0.0/24", ""},
		{"10.99.0.0/30", ""},
		{"198.18.0.0/31", "narrower than a /30"},
		{"fd00::/64", "is not IPv4"},
		{"198.18.0.1/24", "did you mean 198.18.0.0/24"},
	} {
		err := CheckSubnet(netip.MustParsePrefix(tc.in))
		if (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v, want %q", tc.in, err, tc.err)
		}
	}
}

func TestCandidates(t *testing.T) {
	p := netip.MustParsePrefix
	got := candidates(p("198.18.0.0/28"), []netip.Prefix{p("198.18.0.4/30"), p("198.18.0.9/32"), p("10.0.0.0/8")})
	want := []netip.Prefix{p("198.18.0.0/30"), p("198.18.0.12/30")}
	if !slices.Equal(got, want) {
		t.Errorf("candidates: %v, want %v", got, want)
	}
	if got := candidates(p("198.18.0.0/24"), []netip.Prefix{p("198.16.0.0/14")}); len(got) != 0 {
		t.Errorf("a subnet inside a prefix in use: %v, want none", got)
	}
	gate, agent := addrs(p("198.18.0.12/30"))
	if gate.String() != "198.18.0.13" || agent.String() != "198.18.0.14" {
		t.Errorf("addresses %s %s", gate, agent)
	}
	if n := linkName(p("198.18.0.12/30")); n != "lox-c612000c" || len(n) > 15 {
		t.Errorf("link name %q", n)
	}
	if staleLink(tableName("lox-c612000c")) != "lox-c612000c" || staleLink("lockhttp") != "" || staleLink("lockhttp-other") != "" {
		t.Error("staleLink")
	}
}
