package doctor

import (
	"bytes"
	"strings"
	"testing"
)

// Phones paired to a hub whose pairing links name this machine's loopback: a WARN with the fix;
// nothing when no phone is paired, or when the links name an address a phone reaches (a LAN or
// VPN address, a TLS reverse proxy in front of a loopback hub).
func TestPhonesPairedToALoopbackHub(t *testing.T) {
	const want = "2 phone(s) paired, but pairing links name http://127.0.0.1:3131, this machine's loopback, which no phone reaches but through a tunnel of its own (adb reverse, ssh -R); fix: make the hub reachable from the phone"
	cases := []struct {
		name     string
		phones   int
		url      string
		hubErr   string
		wantWarn bool
	}{
		{"phones paired, links on 127.0.0.1", 2, "http://127.0.0.1:3131", "", true},
		{"phones paired, links on ::1", 1, "http://[::1]:3131", "", true},
		{"phones paired, links on localhost", 1, "http://localhost:3131", "", true},
		{"no phone paired", 0, "http://127.0.0.1:3131", "", false},
		{"links on the LAN", 2, "http://192.168.1.20:3131", "", false},
		{"links on a TLS reverse proxy", 2, "https://hub.example.net", "", false},
		{"no phone page", 0, "", "", false},
		{"hub down", 2, "http://127.0.0.1:3131", "connection refused", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := healthy()
			f.Hub.Phones, f.Hub.PhoneURL, f.Hub.Err = tc.phones, tc.url, tc.hubErr
			r := Assess(f)
			var b bytes.Buffer
			r.Write(&b)
			warned := false
			for _, l := range r.Find("phone") {
				if l.Level == Warn && strings.Contains(l.Text, "phone(s) paired") {
					warned = true
					if tc.phones == 2 && !strings.Contains(l.Text, want) || !strings.Contains(l.Text, `docs/phone.md, "Reaching the hub from the phone"`) {
						t.Errorf("the WARN does not say what is wrong and the fix:\n%s", b.String())
					}
				}
			}
			if warned != tc.wantWarn {
				t.Fatalf("warned: %v, want %v:\n%s", warned, tc.wantWarn, b.String())
			}
			if !tc.wantWarn && tc.hubErr == "" && r.Worst() != OK {
				t.Fatalf("worst is %s, want OK:\n%s", r.Worst(), b.String())
			}
		})
	}
}
