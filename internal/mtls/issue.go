package mtls

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/url"
	"time"
)

// CA is a fleet's certificate authority: it issues the identities and signs the revocation list.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// NewCA makes a CA named name, valid from now for validity, with a new P-256 key from rnd.
func NewCA(name string, now time.Time, validity time.Duration, rnd io.Reader) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rnd)
	if err != nil {
		return nil, err
	}
	serial, err := newSerial(rnd)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name, Organization: []string{"lockhttp fleet"}},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rnd, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key}, nil
}

// newSerial is a random 128-bit serial number.
func newSerial(rnd io.Reader) (*big.Int, error) {
	b := make([]byte, 16)
	if _, err := io.ReadFull(rnd, b); err != nil {
		return nil, err
	}
	b[0] &= 0x7f
	b[0] |= 0x40 // never a short or negative one
	return new(big.Int).SetBytes(b), nil
}

// Usage is what an identity's certificate may do in TLS.
type Usage int

const (
	// ClientOnly: a gate, a facade; it connects, it does not serve.
	ClientOnly Usage = iota
	// ClientAndServer: a console (it serves the gates and connects to nothing, but a server
	// identity may also be a client, as a fleet's signer will be).
	ClientAndServer
)

// UsageOf is the usage an identity of kind gets: a console's and a signer's serve.
func UsageOf(kind string) Usage {
	switch kind {
	case KindConsole, KindSigner:
		return ClientAndServer
	}
	return ClientOnly
}

// Issued is an identity's certificate and its new key.
type Issued struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// Issue makes a certificate for id, valid from now for validity (never past the CA's own
// expiry), with a new P-256 key; dnsNames are added as DNS SANs (for clients that check a host
// name; lockhttp's own check the identity).
func (ca *CA) Issue(id ID, usage Usage, dnsNames []string, now time.Time, validity time.Duration, rnd io.Reader) (*Issued, error) {
	if id.IsZero() {
		return nil, errors.New("issue: no identity")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rnd)
	if err != nil {
		return nil, err
	}
	serial, err := newSerial(rnd)
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(validity)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	eku := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if usage == ClientAndServer {
		eku = append(eku, x509.ExtKeyUsageServerAuth)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: id.Short()},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           eku,
		BasicConstraintsValid: true,
		URIs:                  []*url.URL{id.id.URL()},
		DNSNames:              dnsNames,
	}
	der, err := x509.CreateCertificate(rnd, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &Issued{Cert: cert, Key: key}, nil
}

// Revoke signs a revocation list listing serials (and the entries of prev, a list this CA signed
// before, when not nil), valid from now until now+validity, numbered one past prev's.
func (ca *CA) Revoke(prev *x509.RevocationList, serials []*big.Int, now time.Time, validity time.Duration, rnd io.Reader) ([]byte, error) {
	number := big.NewInt(1)
	var entries []x509.RevocationListEntry
	seen := map[string]bool{}
	if prev != nil {
		if err := prev.CheckSignatureFrom(ca.Cert); err != nil {
			return nil, fmt.Errorf("the revocation list there is not this CA's: %w", err)
		}
		if prev.Number != nil {
			number = new(big.Int).Add(prev.Number, big.NewInt(1))
		}
		for _, e := range prev.RevokedCertificateEntries {
			entries = append(entries, x509.RevocationListEntry{SerialNumber: e.SerialNumber, RevocationTime: e.RevocationTime})
			seen[e.SerialNumber.Text(16)] = true
		}
	}
	for _, s := range serials {
		if !seen[s.Text(16)] {
			entries = append(entries, x509.RevocationListEntry{SerialNumber: s, RevocationTime: now})
			seen[s.Text(16)] = true
		}
	}
	der, err := x509.CreateRevocationList(rnd, &x509.RevocationList{
		Number:                    number,
		ThisUpdate:                now.Add(-time.Minute),
		NextUpdate:                now.Add(validity),
		RevokedCertificateEntries: entries,
	}, ca.Cert, ca.Key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: der}), nil
}

// CertPEM is a certificate in PEM.
func CertPEM(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

// KeyPEM is a private key in PEM (PKCS#8).
func KeyPEM(k crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ParseCA reads a CA from its certificate's and key's PEM.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, errors.New("the CA certificate is not PEM")
	}
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil, err
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, errors.New("the CA key is not PEM")
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("the CA key: %w", err)
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, errors.New("the CA key cannot sign")
	}
	return &CA{Cert: cert, Key: signer}, nil
}

// ParseCertPEM reads the first certificate of a PEM file's content.
func ParseCertPEM(data []byte) (*x509.Certificate, error) {
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return nil, errors.New("no PEM certificate")
		}
		if b.Type == "CERTIFICATE" {
			return x509.ParseCertificate(b.Bytes)
		}
	}
}

// ParseCRLPEM reads a revocation list in PEM or DER.
func ParseCRLPEM(data []byte) (*x509.RevocationList, error) {
	if b, _ := pem.Decode(data); b != nil {
		data = b.Bytes
	}
	return x509.ParseRevocationList(data)
}

// IDOf is the identity a certificate names in its one URI SAN.
func IDOf(c *x509.Certificate) (ID, error) {
	if len(c.URIs) != 1 {
		return ID{}, fmt.Errorf("the certificate has %d URI SANs; an identity's has one", len(c.URIs))
	}
	return ParseID(c.URIs[0].String())
}
