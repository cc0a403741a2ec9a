package floor_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/claudeapi"
	"github.com/lockhttp/lockhttp/internal/floor"
	"github.com/lockhttp/lockhttp/internal/secrets"
)

// spellings are tricky ways to write host (a lowercase ASCII name): case, a final dot, a port,
// brackets, full-width letters, an IDN and its A-label, and hosts that are none.
func spellings(host string) []string {
	first, rest := host[:1], host[1:]
	return []string{
		host,
		strings.ToUpper(host),
		strings.ToUpper(first) + rest + ".",
		host + ":443",
		host + ".:443",
		strings.ToUpper(host) + ".:8443",
		"[" + host + "]:443",
		host + ":",
		host + ":0443",
		host + ":443:443",
		"\uff41" + host,                      // full-width 'a' before the name: another host
		string(rune(first[0])+0xfee0) + rest, // the first letter full-width: the same host
		"user@" + host,
		host + "..",
		"[::1]:443",
		"[::1]",
		"127.0.0.1:443",
		"bücher." + host,
		"xn--bcher-kva." + host,
		"XN--BCHER-KVA." + host + ".:443",
		"xn--zz." + host,
		"",
	}
}

// TestHostsAgree: every place that reads a host a caller hands it reads it as floor does. For
// the same spellings, the canonical reading (floor.HostOf) decides whether claudeapi governs a
// Claude host, whether the secrets detector lets a credential go to the host it belongs to, and
// whether a TLS server name names the host (floor.NamesHost, the gate's check, which takes no
// port and no non-ASCII); the hooks.slack.com mask follows the same reading, and masks a refused
// spelling of the host too.
func TestHostsAgree(t *testing.T) {
	const token = "acme_0123456789abcdef0123456789abcdef"
	d, err := secrets.NewDetector(secrets.Config{Custom: []secrets.Custom{
		{Name: "acme", Pattern: `acme_[0-9a-f]{32}`, Hosts: []string{"api.acme.com", "bücher.example"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"api.anthropic.com", "claude.ai", "api.acme.com", "xn--bcher-kva.example", "hooks.slack.com"} {
		for _, s := range spellings(host) {
			canon := floor.HostOf(s)
			same := canon == host
			// The canonical reading: a spelling of host is host, anything else is not.
			if h, r := floor.Host(s); r == nil && h != canon {
				t.Errorf("HostOf(%q) = %q, but Host reads %q", s, canon, h)
			}
			if _, known := claudeapi.Governs(s); known != (same && (host == "api.anthropic.com" || host == "claude.ai")) {
				t.Errorf("claudeapi.Governs(%q): known %v; floor.HostOf reads %q", s, known, canon)
			}
			f := d.Egress(&secrets.Request{Host: s, Path: "/", Header: http.Header{"X-Key": {token}}})
			allowed := host == "api.acme.com" || host == "xn--bcher-kva.example"
			if (f == nil) != (same && allowed) {
				t.Errorf("secrets Egress of a credential of api.acme.com and bücher.example to %q: %v; floor.HostOf reads %q", s, f, canon)
			}
			names := floor.NamesHost(s, host)
			h, r := floor.Host(s)
			ascii := strings.IndexFunc(s, func(r rune) bool { return r >= 0x80 }) < 0
			if names != (r == nil && h == host && ascii) {
				t.Errorf("NamesHost(%q, %q) = %v; floor.Host reads %q (refused: %v)", s, host, names, h, r != nil)
			}
			if host == "hooks.slack.com" {
				u := &url.URL{Scheme: "https", Host: s, Path: "/services/T0/B0/" + strings.Repeat("x", 24)}
				// Masking takes the wider reading: a host the floor refuses never goes out, but
				// its record is kept, so a webhook at a refused spelling of the host is masked too.
				want := same || canon == "" && strings.EqualFold(strings.TrimRight(u.Hostname(), "."), host)
				masked := !strings.Contains(d.MaskURL(u), strings.Repeat("x", 24))
				if masked != want {
					t.Errorf("MaskURL of a Slack webhook at %q: masked %v; floor.HostOf reads %q", s, masked, canon)
				}
			}
		}
	}
	// What each spelling reads as, for the record: these are the canonical readings.
	for s, want := range map[string]string{
		"[::1]:443":                 "",
		"EXAMPLE.com.":              "example.com",
		"example.com:443":           "example.com",
		"example.com.:443":          "example.com",
		"ｅxample.com":               "example.com",
		"bücher.example":            "xn--bcher-kva.example",
		"XN--BCHER-KVA.example.:80": "xn--bcher-kva.example",
		"xn--zz.example":            "",
		"example.com:0443":          "",
		"user@example.com":          "",
	} {
		if got := floor.HostOf(s); got != want {
			t.Errorf("HostOf(%q) = %q, want %q", s, got, want)
		}
	}
}
