package signer

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/lockhttp/lockhttp/internal/floor"
)

// DefaultIntermediateLifetime is how long a root signer's intermediates live unless
// RootPolicy.Lifetime says otherwise.
const DefaultIntermediateLifetime = 8 * time.Hour

// MinIntermediateLifetime is the shortest intermediate lifetime a root accepts: a node renews at
// two thirds of it and must have time to.
const MinIntermediateLifetime = 30 * time.Second

// intermediateBackdate is how far before now an intermediate starts, for clocks that disagree.
const intermediateBackdate = 5 * time.Minute

// RootPolicy is what a root signer puts in every intermediate it issues.
type RootPolicy struct {
	// Lifetime is how long an intermediate is valid from its issue (never past the root's own
	// expiry). Zero means DefaultIntermediateLifetime.
	Lifetime time.Duration
	// PermittedDNS are the only DNS names (and their subdomains) an intermediate may certify: a
	// name constraint, marked critical, that every client checks on the path. Nil: any name.
	PermittedDNS []string
	// ExcludedDNS are names (and their subdomains) an intermediate may never certify. Nil: none.
	ExcludedDNS []string
}

// Check says what is wrong with p: a lifetime too short, a constraint that is not a host name.
func (p RootPolicy) Check() error {
	if p.Lifetime != 0 && p.Lifetime < MinIntermediateLifetime {
		return fmt.Errorf("intermediate lifetime %s is under %s: a node renews at two thirds of it; use a few hours (default %s)", p.Lifetime, MinIntermediateLifetime, DefaultIntermediateLifetime)
	}
	for _, d := range append(append([]string(nil), p.PermittedDNS...), p.ExcludedDNS...) {
		if norm, r := floor.Host(d); r != nil || norm != d || strings.Contains(d, "*") {
			return fmt.Errorf("name constraint %q: write a lower-case DNS name such as example.com (it covers its subdomains), without '*'", d)
		}
	}
	return nil
}

func (p RootPolicy) lifetime() time.Duration {
	if p.Lifetime == 0 {
		return DefaultIntermediateLifetime
	}
	return p.Lifetime
}

// ErrNotRoot is in CheckRoot's error when the CA cannot sign intermediates.
var ErrNotRoot = errors.New("the CA cannot sign intermediates")

// CheckRoot says whether ca may be a root signer's: its path length must allow one intermediate
// (InitRootCA makes such a CA; InitCA's, of path length zero, signs leaves only).
func CheckRoot(ca *CA, dir string) error {
	c := ca.cert
	if c.MaxPathLenZero || c.MaxPathLen == 0 {
		return fmt.Errorf("%w: %s has path length zero (a single signer's CA, which signs leaves only); make a root once with `signer init --root --dir DIR` and have every agent trust its ca.pem", ErrNotRoot, dir)
	}
	return nil
}

// IssueIntermediate signs, with root, an intermediate CA for a node signer's public key pub
// (ECDSA P-256): path length zero, the name constraints of p, server authentication only,
// valid from now-5m for p's lifetime and never past the root's own expiry. node names the node
// (its identity) in the subject.
func IssueIntermediate(root *CA, node string, pub crypto.PublicKey, p RootPolicy, now time.Time, rand io.Reader) (*x509.Certificate, []byte, error) {
	k, ok := pub.(*ecdsa.PublicKey)
	if !ok || k.Curve != elliptic.P256() {
		return nil, nil, &GuardError{GuardPublicKey, fmt.Sprintf("an intermediate's key must be ECDSA P-256, not %T", pub)}
	}
	if err := p.Check(); err != nil {
		return nil, nil, err
	}
	if !now.Before(root.cert.NotAfter) {
		return nil, nil, fmt.Errorf("intermediate for %s: the root certificate expired at %s", node, root.cert.NotAfter.UTC().Format(time.RFC3339))
	}
	serial, err := randomSerial(rand)
	if err != nil {
		return nil, nil, fmt.Errorf("intermediate for %s: %w", node, err)
	}
	skid, err := subjectKeyID(pub)
	if err != nil {
		return nil, nil, fmt.Errorf("intermediate for %s: %w", node, err)
	}
	notBefore, notAfter := now.Add(-intermediateBackdate), now.Add(p.lifetime())
	if notBefore.Before(root.cert.NotBefore) {
		notBefore = root.cert.NotBefore
	}
	if notAfter.After(root.cert.NotAfter) {
		notAfter = root.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "lockhttp intermediate " + node, Organization: []string{"lockhttp"}},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		SubjectKeyId:          skid,
		AuthorityKeyId:        root.cert.SubjectKeyId,
		PermittedDNSDomains:   p.PermittedDNS,
		ExcludedDNSDomains:    p.ExcludedDNS,
	}
	tmpl.PermittedDNSDomainsCritical = len(p.PermittedDNS)+len(p.ExcludedDNS) > 0
	der, err := x509.CreateCertificate(rand, tmpl, root.cert, pub, root.key)
	if err != nil {
		return nil, nil, fmt.Errorf("intermediate for %s: %w", node, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("intermediate for %s: reading back the certificate: %w", node, err)
	}
	return cert, der, nil
}
