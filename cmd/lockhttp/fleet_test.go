package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/mtls"
)

// TestFleetFiles: what lockhttp fleet writes is what the processes take: the keys are mode 0600,
// an identity loads with the CA, and the revocation list names the revoked certificate (a
// process given it refuses that one: internal/mtls's tests).
func TestFleetFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fl")
	fleet := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(append([]string{"fleet"}, args...), nil, &out, &errb); code != 0 {
			t.Fatalf("lockhttp fleet %s: exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errb.String())
		}
		return out.String()
	}
	fleet("init", "--dir", dir)
	fleet("issue", "--dir", dir, "gate", "a")
	fleet("issue", "--dir", dir, "console", "main")
	for _, f := range []string{"ca-key.pem", "gate-a-key.pem", "console-main-key.pem"} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", f, fi.Mode().Perm())
		}
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Errorf("the fleet's directory: mode %v, want 0700", fi.Mode().Perm())
	}
	files := func(kind, name string) mtls.Files {
		c, k := identityFiles(dir, kind, name)
		return mtls.Files{Cert: c, Key: k, CA: filepath.Join(dir, fleetCACert)}
	}
	src, err := mtls.Load(mtls.Options{Files: files("gate", "a")})
	if err != nil {
		t.Fatal(err)
	}
	if src.ID().String() != "spiffe://lockhttp/gate/a" {
		t.Errorf("identity %s", src.ID())
	}
	fleet("revoke", "--dir", dir, "gate", "a")
	f := files("console", "main")
	f.CRL = filepath.Join(dir, fleetCRL)
	if _, err := mtls.Load(mtls.Options{Files: f}); err != nil {
		t.Fatalf("the console with the revocation list: %v", err)
	}
	data, _ := os.ReadFile(f.CRL)
	crl, err := mtls.ParseCRLPEM(data)
	if err != nil {
		t.Fatal(err)
	}
	cdata, _ := os.ReadFile(files("gate", "a").Cert)
	cert, _ := mtls.ParseCertPEM(cdata)
	if len(crl.RevokedCertificateEntries) != 1 || crl.RevokedCertificateEntries[0].SerialNumber.Cmp(cert.SerialNumber) != 0 {
		t.Errorf("the list does not name the gate's certificate")
	}
}
