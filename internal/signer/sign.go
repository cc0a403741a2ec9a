package signer

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/lockhttp/lockhttp/internal/display"
	"github.com/lockhttp/lockhttp/internal/floor"
)

// LeafLifetime is how long a leaf certificate is valid (from now; it starts an hour earlier).
const LeafLifetime = 24 * time.Hour

// MinRSABits is the smallest RSA public key Sign accepts.
const MinRSABits = 2048

// maxShownHost bounds how much of a caller's host a reason or a log line repeats.
const maxShownHost = 80

// The guards that Sign runs; a GuardError names one.
const (
	// GuardWildcard refuses a host with '*'.
	GuardWildcard = "wildcard"
	// GuardNormalised refuses a host that floor.Host would change (case, trailing dot, Unicode).
	GuardNormalised = "not-normalised"
	// GuardPublicKey refuses a public key that is not ECDSA P-256, Ed25519 or RSA of at least
	// MinRSABits bits.
	GuardPublicKey = "public-key"
	// GuardNameConstraint refuses a host outside the name constraints of the issuing CA (a
	// node signer's intermediate, as the root's policy set them).
	GuardNameConstraint = "name-constraint"
	// Floor refusals are reported as "floor:<check>", for example "floor:ip-literal".
)

// GuardError says which guard refused to sign, and why. It names the host, never key material.
type GuardError struct {
	Guard  string
	Reason string
}

// Error returns "refused to sign: <guard>: <reason>".
func (e *GuardError) Error() string { return "refused to sign: " + e.Guard + ": " + e.Reason }

// Sign issues a leaf certificate for host and pub, valid from now-1h for LeafLifetime (never past
// the CA's own expiry), for TLS servers only. Just before signing it checks the host (already
// normalised by floor.Host, no '*', and passing floor.Name) and the public key; a refusal is a
// *GuardError. It returns the parsed certificate and its DER.
func Sign(ca *CA, host string, pub crypto.PublicKey, now time.Time, rand io.Reader) (*x509.Certificate, []byte, error) {
	if err := checkHost(host); err != nil {
		return nil, nil, err
	}
	if err := checkPublicKey(pub); err != nil {
		return nil, nil, err
	}
	if err := checkConstraints(ca.cert, host); err != nil {
		return nil, nil, err
	}
	if now.After(ca.cert.NotAfter) {
		return nil, nil, fmt.Errorf("sign %q: the CA certificate expired at %s; make a new CA with `signer init` in a new directory",
			host, ca.cert.NotAfter.UTC().Format(time.RFC3339))
	}
	serial, err := randomSerial(rand)
	if err != nil {
		return nil, nil, fmt.Errorf("sign %q: %w", host, err)
	}
	notAfter := now.Add(LeafLifetime)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	// A leaf never outlives its issuer, nor starts before it (a node's intermediate is short).
	notBefore := now.Add(-backdate)
	if notBefore.Before(ca.cert.NotBefore) {
		notBefore = ca.cert.NotBefore
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: host},
		DNSNames:              []string{host},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  false,
		AuthorityKeyId:        ca.cert.SubjectKeyId,
	}
	der, err := x509.CreateCertificate(rand, tmpl, ca.cert, pub, ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("sign %q: %w", host, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("sign %q: reading back the certificate: %w", host, err)
	}
	return cert, der, nil
}

// checkHost accepts only a name that floor.Host leaves as it is and that floor.Name passes.
func checkHost(host string) error {
	if strings.IndexByte(host, '*') >= 0 {
		return &GuardError{GuardWildcard, fmt.Sprintf("host %q has a '*'; the signer issues certificates for exact names only", display.Truncate(host, maxShownHost))}
	}
	norm, r := floor.Host(host)
	if r != nil {
		return &GuardError{"floor:" + string(r.Check), r.Reason}
	}
	if norm != host {
		return &GuardError{GuardNormalised, fmt.Sprintf("host %q is not normalised; send %q", display.Truncate(host, maxShownHost), norm)}
	}
	if r := floor.Name(host); r != nil && host != floor.SelfName {
		return &GuardError{"floor:" + string(r.Check), r.Reason}
	}
	return nil
}

// checkConstraints refuses a host outside the issuer's DNS name constraints, which every client
// would refuse on the path anyway.
func checkConstraints(issuer *x509.Certificate, host string) error {
	within := func(d string) bool { return host == d || strings.HasSuffix(host, "."+strings.TrimPrefix(d, ".")) }
	for _, d := range issuer.ExcludedDNSDomains {
		if within(d) {
			return &GuardError{GuardNameConstraint, fmt.Sprintf("host %q is under %q, which the root excludes from this signer's intermediate", display.Truncate(host, maxShownHost), d)}
		}
	}
	if len(issuer.PermittedDNSDomains) == 0 {
		return nil
	}
	for _, d := range issuer.PermittedDNSDomains {
		if within(d) {
			return nil
		}
	}
	return &GuardError{GuardNameConstraint, fmt.Sprintf("host %q is outside the names the root permits this signer's intermediate (%s)", display.Truncate(host, maxShownHost), strings.Join(issuer.PermittedDNSDomains, ", "))}
}

// checkPublicKey accepts ECDSA P-256, Ed25519 and RSA keys of at least MinRSABits bits.
func checkPublicKey(pub crypto.PublicKey) error {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() {
			return &GuardError{GuardPublicKey, fmt.Sprintf("ECDSA key on curve %s; use P-256", k.Curve.Params().Name)}
		}
		return nil
	case ed25519.PublicKey:
		if len(k) != ed25519.PublicKeySize {
			return &GuardError{GuardPublicKey, fmt.Sprintf("Ed25519 key of %d bytes; an Ed25519 key has %d", len(k), ed25519.PublicKeySize)}
		}
		return nil
	case *rsa.PublicKey:
		if k.N == nil || k.N.BitLen() < MinRSABits {
			bits := 0
			if k.N != nil {
				bits = k.N.BitLen()
			}
			return &GuardError{GuardPublicKey, fmt.Sprintf("RSA key of %d bits; use at least %d, or ECDSA P-256", bits, MinRSABits)}
		}
		return nil
	default:
		return &GuardError{GuardPublicKey, fmt.Sprintf("key type %T; use ECDSA P-256, Ed25519 or RSA of at least %d bits", pub, MinRSABits)}
	}
}
