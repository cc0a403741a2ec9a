package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// testPKI is a root the tests' origins use; the gate trusts it through -roots.
type testPKI struct {
	root    *x509.Certificate
	key     *ecdsa.PrivateKey
	rootPEM string // path of the root certificate, PEM
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "lockhttp tests origin root"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	root, _ := x509.ParseCertificate(der)
	p := filepath.Join(t.TempDir(), "origin-root.pem")
	os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	return &testPKI{root: root, key: key, rootPEM: p}
}

// leaf issues a server certificate; notAfter and a weak RSA key make bad ones on purpose.
func (k *testPKI) leaf(t *testing.T, names []string, notAfter time.Time, weakRSA bool) tls.Certificate {
	t.Helper()
	var pub any
	var priv any
	if weakRSA {
		rk, _ := rsa.GenerateKey(rand.Reader, 1024)
		pub, priv = &rk.PublicKey, rk
	} else {
		ek, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		pub, priv = &ek.PublicKey, ek
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: names[0]},
		DNSNames: names, NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, k.root, pub, k.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv}
}

// tlsOrigin starts an HTTPS origin on loopback with cert.
func tlsOrigin(t *testing.T, h http.Handler, cert tls.Certificate) (*httptest.Server, int) {
	t.Helper()
	s := httptest.NewUnstartedServer(h)
	s.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	s.StartTLS()
	t.Cleanup(s.Close)
	return s, s.Listener.Addr().(*net.TCPAddr).Port
}

func ecdsaScalar(t *testing.T, key any) []byte {
	t.Helper()
	k, ok := key.(*ecdsa.PrivateKey)
	if !ok {
		t.Fatalf("CA key is %T, want ECDSA", key)
	}
	return k.D.FillBytes(make([]byte, 32))
}
