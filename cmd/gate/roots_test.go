package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestSystemRoots: where the system has roots the gate verifies origins against them and never
// parses the bundle it carries; where it has none, or GODEBUG asks, against the bundle, which
// then is Go's fallback for the process's other verifiers too. Each case runs in a process of
// its own: Go reads the system's roots once a process.
func TestSystemRoots(t *testing.T) {
	dir := t.TempDir()
	one := filepath.Join(dir, "one.pem")
	if err := os.WriteFile(one, testRootPEM(t), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "none")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, file, godebug, want string
	}{
		{"system roots", one, "", "system"},
		{"no system roots", filepath.Join(empty, "absent.pem"), "", "bundle"},
		{"fallback forced", one, "x509usefallbackroots=1", "bundle"},
		{"forced then unforced", one, "x509usefallbackroots=1,x509usefallbackroots=0", "system"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run", "^TestSystemRootsChild$")
			cmd.Env = append(os.Environ(), "LOCKHTTP_ROOTS_CHILD="+one, "SSL_CERT_FILE="+c.file, "SSL_CERT_DIR="+empty, "GODEBUG="+c.godebug)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("child: %v\n%s", err, out)
			}
			if !strings.Contains(string(out), "roots: "+c.want+"\n") {
				t.Fatalf("child said:\n%s\nwant roots: %s", out, c.want)
			}
		})
	}
}

// TestSystemRootsChild is TestSystemRoots's child: it prints which roots systemRoots gave and
// fails when they are not what it says.
func TestSystemRootsChild(t *testing.T) {
	one := os.Getenv("LOCKHTTP_ROOTS_CHILD")
	if one == "" {
		t.Skip("run by TestSystemRoots")
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	roots, fromBundle := systemRoots()
	runtime.ReadMemStats(&after)
	pem, err := os.ReadFile(one)
	if err != nil {
		t.Fatal(err)
	}
	system := x509.NewCertPool()
	system.AppendCertsFromPEM(pem)
	switch {
	case !fromBundle:
		if !roots.Equal(system) {
			t.Fatal("not from the bundle, yet not the system's one root")
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > 200<<10 {
			t.Fatalf("%d bytes allocated for one system root: the bundle was parsed", n)
		}
		os.Stdout.WriteString("roots: system\n")
	default:
		b := bundlePool()
		if !roots.Equal(b) {
			t.Fatal("from the bundle, yet not the bundle")
		}
		if p, err := x509.SystemCertPool(); err != nil || !p.Equal(b) {
			t.Fatalf("the process's system pool is not the bundle (%v): other verifiers have no roots", err)
		}
		os.Stdout.WriteString("roots: bundle\n")
	}
}

// testRootPEM is a self-signed CA certificate.
func testRootPEM(t *testing.T) []byte {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "roots test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
