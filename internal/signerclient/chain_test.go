package signerclient

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/signer"
	"github.com/lockhttp/lockhttp/internal/signerapi"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// TestChainFromNodeSigner: from a node signer, the certificate chain is the leaf, its
// intermediate and the root; a client trusting only the root accepts it; the leaf ends with the
// intermediate and is renewed before; once the node holds no valid intermediate the client gets
// none (unavailable), never an expired one.
func TestChainFromNodeSigner(t *testing.T) {
	root, err := signer.InitRootCA(filepath.Join(t.TempDir(), "root"), t0.Add(-time.Hour), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	clock := testkit.NewClock(t0)
	var fail bool
	node, err := signer.NewNode(signer.NodeConfig{RootPEM: root.CertPEM(), Now: clock.Now,
		Fetch: func(_ context.Context, req signerapi.IntermediateRequest) (signerapi.IntermediateResponse, error) {
			if fail {
				return signerapi.IntermediateResponse{}, errors.New("root unreachable")
			}
			der, _ := base64.StdEncoding.DecodeString(req.PublicKey)
			pub, _ := x509.ParsePKIXPublicKey(der)
			_, c, err := signer.IssueIntermediate(root, "n1", pub, signer.RootPolicy{Lifetime: time.Minute}, clock.Now(), rand.Reader)
			return signerapi.IntermediateResponse{Certificate: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c})), Root: string(root.CertPEM())}, err
		}})
	if err != nil {
		t.Fatal(err)
	}
	node.Step(context.Background())
	h := &harness{sock: filepath.Join(shortDir(t), "signer.sock"), clock: clock}
	h.serve(t, h.wrap(signer.NewServer(signer.ServerConfig{Node: node, AllowUIDs: []int{os.Geteuid()}, Now: clock.Now}).Handler()), []int{os.Geteuid()})
	c := h.client(t, nil)
	cert, err := c.Certificate(context.Background(), "api.example.com")
	if err != nil {
		t.Fatal(err)
	}
	if len(cert.Certificate) != 3 || string(cert.Certificate[2]) != string(root.Cert().Raw) {
		t.Fatalf("chain of %d, want leaf, intermediate, root", len(cert.Certificate))
	}
	inter, _ := x509.ParseCertificate(cert.Certificate[1])
	if !cert.Leaf.NotAfter.Equal(inter.NotAfter) {
		t.Errorf("the leaf ends at %s, its intermediate at %s", cert.Leaf.NotAfter, inter.NotAfter)
	}
	roots := x509.NewCertPool()
	roots.AddCert(root.Cert())
	handshake := func(cert *tls.Certificate) error {
		sc, cc := net.Pipe()
		go tls.Server(sc, &tls.Config{Certificates: []tls.Certificate{*cert}}).Handshake()
		err := tls.Client(cc, &tls.Config{RootCAs: roots, ServerName: "api.example.com", Time: clock.Now}).Handshake()
		cc.Close()
		sc.Close()
		return err
	}
	if err := handshake(cert); err != nil {
		t.Fatalf("a client trusting only the root: %v", err)
	}
	// Past two thirds of what was left, the cached leaf is renewed in the background.
	clock.Advance(45 * time.Second)
	c.Certificate(context.Background(), "api.example.com")
	settle(t, c)
	if h.calls.Load() != 2 {
		t.Errorf("%d sign calls after two thirds of the leaf's life, want 2", h.calls.Load())
	}
	// The root is gone and the intermediate expires: no certificate, and the old one is refused.
	fail = true
	clock.Set(inter.NotAfter.Add(time.Second))
	node.Step(context.Background())
	if _, err := c.Certificate(context.Background(), "api.example.com"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("with the intermediate expired: %v, want unavailable", err)
	}
	if err := handshake(cert); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("a client took a leaf of an expired intermediate: %v", err)
	}
}

// TestRejectsBadChains: the intermediates a signer sends are CAs, at most two, and outlive the
// leaf.
func TestRejectsBadChains(t *testing.T) {
	root := newTestCA(t, true)
	mkInter := func(notAfter time.Time, isCA bool) (*testCA, string) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "inter"}, NotBefore: t0.Add(-time.Hour), NotAfter: notAfter,
			IsCA: isCA, BasicConstraintsValid: true, MaxPathLenZero: isCA, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
		der := root.issue(t, tmpl, key.Public())
		cert, _ := x509.ParseCertificate(der)
		p := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
		return &testCA{key, cert, p}, p
	}
	for _, tc := range []struct {
		name     string
		interEnd time.Time
		leafEnd  time.Time
		isCA     bool
		times    int
		want     string
	}{
		{"good (control)", t0.Add(time.Hour), t0.Add(time.Hour), true, 1, ""},
		{"leaf outlives its intermediate", t0.Add(time.Minute), t0.Add(time.Hour), true, 1, "outlives its intermediate"},
		{"intermediate not a CA", t0.Add(time.Hour), t0.Add(time.Minute), false, 1, "not a CA"},
		{"three intermediates", t0.Add(time.Hour), t0.Add(time.Minute), true, 3, "more than 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inter, interPEM := mkInter(tc.interEnd, tc.isCA)
			fake := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var req signerapi.SignRequest
				json.NewDecoder(r.Body).Decode(&req)
				der, _ := base64.StdEncoding.DecodeString(req.PublicKey)
				pub, _ := x509.ParsePKIXPublicKey(der)
				tmpl := &x509.Certificate{SerialNumber: big.NewInt(42), Subject: pkix.Name{CommonName: req.Host}, DNSNames: []string{req.Host},
					NotBefore: t0.Add(-time.Hour), NotAfter: tc.leafEnd, KeyUsage: x509.KeyUsageDigitalSignature,
					ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true}
				leaf := inter.issue(t, tmpl, pub)
				json.NewEncoder(w).Encode(signerapi.SignResponse{Certificate: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf})),
					CA: root.pem, Chain: strings.Repeat(interPEM, tc.times), Serial: "2a", NotAfter: tc.leafEnd.UTC().Format(time.RFC3339)})
			})
			h := &harness{sock: filepath.Join(shortDir(t), "fake.sock"), clock: testkit.NewClock(t0)}
			h.serve(t, fake, []int{os.Geteuid()})
			_, err := h.client(t, nil).Certificate(context.Background(), "example.com")
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("the control was rejected: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want it to say %q", err, tc.want)
			}
		})
	}
}
