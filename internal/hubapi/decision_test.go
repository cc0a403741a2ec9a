package hubapi

import (
	"crypto/ed25519"
	"strings"
	"testing"
	"time"
)

// TestSignedDecision: the signed bytes are the ones every gate and hub of this version agree on,
// and Verify takes a decision only with its signature, for its ticket and fingerprint.
func TestSignedDecision(t *testing.T) {
	d := SignedDecision{Ticket: "t0123456789ab", Fingerprint: "fp1:abc", Verdict: Approved, By: "cli:root", Reason: "ok",
		At: time.Unix(1_700_000_000, 5).UTC()}
	want := "lockhttp hub decision v1\n" +
		`{"Ticket":"t0123456789ab","Fingerprint":"fp1:abc","Verdict":"approved","By":"cli:root","Reason":"ok","At":1700000000000000005}`
	if got := string(d.Payload()); got != want {
		t.Fatalf("payload:\n%s\nwant:\n%s", got, want)
	}
	key := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	pub := key.Public().(ed25519.PublicKey)
	d.Signature = ed25519.Sign(key, d.Payload())
	if err := d.Verify(pub, d.Ticket, d.Fingerprint); err != nil {
		t.Fatalf("a good decision: %v", err)
	}
	other := ed25519.NewKeyFromSeed(append(make([]byte, ed25519.SeedSize-1), 1)).Public().(ed25519.PublicKey)
	for _, tc := range []struct {
		name       string
		edit       func(*SignedDecision)
		pub        ed25519.PublicKey
		ticket, fp string
		err        string
	}{
		{"denied for approved", func(d *SignedDecision) { d.Verdict = Denied }, pub, d.Ticket, d.Fingerprint, "bad signature"},
		{"another approver", func(d *SignedDecision) { d.By = "cli:eve" }, pub, d.Ticket, d.Fingerprint, "bad signature"},
		{"another reason", func(d *SignedDecision) { d.Reason = "" }, pub, d.Ticket, d.Fingerprint, "bad signature"},
		{"another time", func(d *SignedDecision) { d.At = d.At.Add(time.Nanosecond) }, pub, d.Ticket, d.Fingerprint, "bad signature"},
		{"no signature", func(d *SignedDecision) { d.Signature = nil }, pub, d.Ticket, d.Fingerprint, "bad signature"},
		{"another key", nil, other, d.Ticket, d.Fingerprint, "bad signature"},
		{"no key", nil, nil, d.Ticket, d.Fingerprint, "bad signature"},
		{"another ticket", nil, pub, "t999", d.Fingerprint, "another fingerprint"},
		{"another fingerprint", nil, pub, d.Ticket, "fp1:abd", "another fingerprint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := d
			if tc.edit != nil {
				tc.edit(&c)
			}
			err := c.Verify(tc.pub, tc.ticket, tc.fp)
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("Verify: %v, want %q", err, tc.err)
			}
		})
	}
}
