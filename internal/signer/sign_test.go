package signer

import (
	"crypto"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }

func p256(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSignGuardsHost(t *testing.T) {
	ca, _ := newCA(t)
	pub := p256(t).Public()
	cases := []struct {
		host  string
		guard string // "" means signed
	}{
		{"example.com", ""},
		{"api.github.com", ""},
		{"xn--bcher-kva.de", ""},
		{"a_b.example.com", ""},
		// IP literals, in several encodings.
		{"127.0.0.1", "floor:ip-literal"},
		{"10.0.0.1", "floor:ip-literal"},
		{"2130706433", "floor:ip-literal"},
		{"0x7f000001", "floor:ip-literal"},
		{"0177.0.0.1", "floor:ip-literal"},
		{"127.1", "floor:ip-literal"},
		{"0x7f.1", "floor:ip-literal"},
		{"[::1]", "floor:ip-literal"},
		{"::1", "floor:ip-literal"},
		{"[::ffff:169.254.169.254]", "floor:ip-literal"},
		{"１２７.０.０.１", "floor:ip-literal"},
		// Wildcards.
		{"*.example.com", GuardWildcard},
		{"*", GuardWildcard},
		{"www*.example.com", GuardWildcard},
		// By name.
		{"intranet", "floor:single-label"},
		{"localhost", "floor:local-name"},
		{"app.localhost", "floor:local-name"},
		{"printer.local", "floor:local-name"},
		{"gate.internal", "floor:local-name"},
		{"x.lockhttp.internal", "floor:local-name"},
		{"lockhttp.internal", ""}, // the gate's own name, which it answers itself
		{"metadata.google.internal", "floor:metadata"},
		{"metadata", "floor:metadata"},
		{"kubernetes.default.svc", "floor:metadata"},
		{"dns.google", "floor:doh"},
		{"abc.dns.nextdns.io", "floor:doh"},
		// Not normalised.
		{"Example.com", GuardNormalised},
		{"EXAMPLE.COM", GuardNormalised},
		{"example.com.", GuardNormalised},
		{"bücher.de", GuardNormalised},
		// Malformed.
		{"", "floor:malformed-host"},
		{"exa mple.com", "floor:malformed-host"},
		{"a..example.com", "floor:malformed-host"},
		{"example.com:443", "floor:malformed-host"},
		{"example.com/x", "floor:malformed-host"},
		{"%65xample.com", "floor:malformed-host"},
		{"user@example.com", "floor:userinfo"},
		{strings.Repeat("a", 64) + ".com", "floor:malformed-host"},
	}
	for _, tc := range cases {
		t.Run(tc.host, func(t *testing.T) {
			cert, der, err := Sign(ca, tc.host, pub, t0, rand.Reader)
			if tc.guard == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if len(der) == 0 || cert.DNSNames[0] != tc.host {
					t.Fatalf("bad certificate for %q", tc.host)
				}
				return
			}
			var ge *GuardError
			if !errors.As(err, &ge) {
				t.Fatalf("got %v (cert %v), want a refusal by %s", err, cert != nil, tc.guard)
			}
			if ge.Guard != tc.guard {
				t.Errorf("refused by %s (%s), want %s", ge.Guard, ge.Reason, tc.guard)
			}
			if cert != nil || der != nil {
				t.Error("a refusal returned a certificate")
			}
			if !strings.Contains(err.Error(), tc.guard) {
				t.Errorf("error %q does not name the guard", err)
			}
		})
	}
}

func TestSignGuardsPublicKey(t *testing.T) {
	ca, _ := newCA(t)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	edPub, _, _ := ed25519.GenerateKey(rand.Reader)
	rsa2048, rsa1024 := rsaKeys(t)
	x25519, _ := ecdh.X25519().GenerateKey(rand.Reader)
	cases := []struct {
		name string
		pub  crypto.PublicKey
		ok   bool
		want string
	}{
		{"ECDSA P-256", p256(t).Public(), true, ""},
		{"Ed25519", edPub, true, ""},
		{"RSA 2048", &rsa2048.PublicKey, true, ""},
		{"RSA 1024", &rsa1024.PublicKey, false, "RSA key of 1024 bits"},
		{"ECDSA P-384", p384.Public(), false, "curve P-384"},
		{"Ed25519 short", ed25519.PublicKey(edPub[:16]), false, "16 bytes"},
		{"X25519", x25519.PublicKey(), false, "key type *ecdh.PublicKey"},
		{"nil", nil, false, "key type <nil>"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cert, _, err := Sign(ca, "example.com", tc.pub, t0, rand.Reader)
			if tc.ok {
				if err != nil {
					t.Fatal(err)
				}
				if err := cert.CheckSignatureFrom(ca.Cert()); err != nil {
					t.Fatal(err)
				}
				return
			}
			var ge *GuardError
			if !errors.As(err, &ge) || ge.Guard != GuardPublicKey {
				t.Fatalf("got %v, want a %s refusal", err, GuardPublicKey)
			}
			if !strings.Contains(ge.Reason, tc.want) {
				t.Errorf("reason %q does not say %q", ge.Reason, tc.want)
			}
		})
	}
}

var rsaOnce struct {
	sync.Once
	k2048, k1024 *rsa.PrivateKey
}

func rsaKeys(t *testing.T) (*rsa.PrivateKey, *rsa.PrivateKey) {
	rsaOnce.Do(func() {
		rsaOnce.k2048, _ = rsa.GenerateKey(rand.Reader, 2048)
		rsaOnce.k1024, _ = rsa.GenerateKey(rand.Reader, 1024)
	})
	if rsaOnce.k2048 == nil || rsaOnce.k1024 == nil {
		t.Fatal("generating RSA keys failed")
	}
	return rsaOnce.k2048, rsaOnce.k1024
}

func TestLeaf(t *testing.T) {
	ca, _ := newCA(t)
	key := p256(t)
	now := t0.Add(10 * time.Minute)
	leaf, der, err := Sign(ca, "api.example.com", key.Public(), now, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if string(der) != string(leaf.Raw) {
		t.Error("the DER is not the certificate's")
	}
	if leaf.Subject.CommonName != "api.example.com" || len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != "api.example.com" {
		t.Errorf("names: CN %q SANs %q", leaf.Subject.CommonName, leaf.DNSNames)
	}
	if len(leaf.IPAddresses)+len(leaf.URIs)+len(leaf.EmailAddresses) != 0 {
		t.Error("the leaf names more than its host")
	}
	if !leaf.NotBefore.Equal(now.Add(-time.Hour)) || !leaf.NotAfter.Equal(now.Add(LeafLifetime)) {
		t.Errorf("valid %s to %s", leaf.NotBefore, leaf.NotAfter)
	}
	if leaf.KeyUsage != x509.KeyUsageDigitalSignature {
		t.Errorf("key usage %v", leaf.KeyUsage)
	}
	if len(leaf.ExtKeyUsage) != 1 || leaf.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth {
		t.Errorf("extended key usage %v", leaf.ExtKeyUsage)
	}
	if leaf.IsCA {
		t.Error("the leaf is a CA")
	}
	if leaf.SerialNumber.Sign() <= 0 || leaf.SerialNumber.BitLen() > 128 || leaf.SerialNumber.BitLen() < 64 {
		t.Errorf("serial %x", leaf.SerialNumber)
	}
	if string(leaf.AuthorityKeyId) != string(ca.Cert().SubjectKeyId) {
		t.Errorf("authority key id %x, want %x", leaf.AuthorityKeyId, ca.Cert().SubjectKeyId)
	}
	if !key.PublicKey.Equal(leaf.PublicKey) {
		t.Error("the leaf certifies another key")
	}

	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert())
	verify := func(name string, at time.Time) error {
		_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name, CurrentTime: at, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		return err
	}
	cases := []struct {
		name string
		host string
		at   time.Time
		ok   bool
	}{
		{"its name", "api.example.com", now, true},
		{"its name, an hour before", "api.example.com", now.Add(-59 * time.Minute), true},
		{"its name, nearly a day later", "api.example.com", now.Add(LeafLifetime - time.Minute), true},
		{"another name", "www.example.com", now, false},
		{"the parent domain", "example.com", now, false},
		{"after expiry", "api.example.com", now.Add(LeafLifetime + time.Second), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := verify(tc.host, tc.at)
			if (err == nil) != tc.ok {
				t.Errorf("verify %s at %s: %v, want ok=%v", tc.host, tc.at, err, tc.ok)
			}
		})
	}

	other, _ := newCA(t)
	otherRoots := x509.NewCertPool()
	otherRoots.AddCert(other.Cert())
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: otherRoots, DNSName: "api.example.com", CurrentTime: now}); err == nil {
		t.Error("the leaf verifies against another CA")
	}
}

func TestLeafNeverOutlivesCA(t *testing.T) {
	ca, _ := newCA(t)
	caEnd := ca.Cert().NotAfter
	leaf, _, err := Sign(ca, "example.com", p256(t).Public(), caEnd.Add(-time.Hour), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if !leaf.NotAfter.Equal(caEnd) {
		t.Errorf("leaf ends %s, want the CA's end %s", leaf.NotAfter, caEnd)
	}
	if _, _, err := Sign(ca, "example.com", p256(t).Public(), caEnd.Add(time.Second), rand.Reader); err == nil || !strings.Contains(err.Error(), "CA certificate expired") {
		t.Errorf("signing with an expired CA: %v", err)
	}
}

// BenchmarkSign is the signing alone: guards, template, ECDSA signature (and the check of it that
// crypto/x509 makes), parse.
func BenchmarkSign(b *testing.B) {
	ca, _ := newCA(b)
	pub := p256(b).Public()
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Sign(ca, "api.example.com", pub, t0, rand.Reader); err != nil {
			b.Fatal(err)
		}
	}
}
