package signer

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// t0 is the tests' "now", with whole seconds as certificates hold them.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newCA(t testing.TB) (*CA, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ca")
	ca, err := InitCA(dir, t0, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return ca, dir
}

func readKeyFile(t testing.TB, dir string) *ecdsa.PrivateKey {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		t.Fatalf("key file holds no PRIVATE KEY block")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	ek, ok := k.(*ecdsa.PrivateKey)
	if !ok || ek.Curve != elliptic.P256() {
		t.Fatalf("key is %T, want ECDSA P-256", k)
	}
	return ek
}

func TestInitCA(t *testing.T) {
	ca, dir := newCA(t)

	for _, f := range []struct {
		path string
		mode os.FileMode
	}{
		{dir, os.ModeDir | 0o700},
		{filepath.Join(dir, KeyFile), 0o600},
		{filepath.Join(dir, CertFile), 0o644},
	} {
		fi, err := os.Stat(f.path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != f.mode {
			t.Errorf("%s: mode %v, want %v", f.path, fi.Mode(), f.mode)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("the CA directory holds %d entries, want ca-key.pem and ca.pem only", len(entries))
	}

	c := ca.Cert()
	key := readKeyFile(t, dir)
	if !key.PublicKey.Equal(c.PublicKey) {
		t.Error("the key file does not hold the certificate's key")
	}
	if c.Subject.CommonName != CAName || len(c.Subject.Organization) != 1 || c.Subject.Organization[0] != "lockhttp" {
		t.Errorf("subject %q", c.Subject)
	}
	if !c.NotBefore.Equal(t0.Add(-time.Hour)) || !c.NotAfter.Equal(t0.Add(CALifetime)) {
		t.Errorf("valid %s to %s", c.NotBefore, c.NotAfter)
	}
	if !c.IsCA || !c.BasicConstraintsValid || c.MaxPathLen != 0 || !c.MaxPathLenZero {
		t.Errorf("basic constraints: IsCA %v valid %v MaxPathLen %d zero %v", c.IsCA, c.BasicConstraintsValid, c.MaxPathLen, c.MaxPathLenZero)
	}
	if want := x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature; c.KeyUsage != want {
		t.Errorf("key usage %v, want %v", c.KeyUsage, want)
	}
	if c.SerialNumber.Sign() <= 0 || c.SerialNumber.BitLen() > 128 || c.SerialNumber.BitLen() < 64 {
		t.Errorf("serial %x: want a random positive 128-bit number", c.SerialNumber)
	}
	if len(c.SubjectKeyId) != 20 {
		t.Errorf("subject key id %x", c.SubjectKeyId)
	}
	if err := c.CheckSignatureFrom(c); err != nil {
		t.Errorf("not self-signed: %v", err)
	}
	file, _ := os.ReadFile(filepath.Join(dir, CertFile))
	if !bytes.Equal(file, ca.CertPEM()) {
		t.Error("CertPEM is not the content of ca.pem")
	}

	loaded, err := loadCA(dir, t0)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(loaded.Cert().Raw, c.Raw) || !bytes.Equal(loaded.CertPEM(), ca.CertPEM()) {
		t.Error("LoadCA reads another certificate than InitCA wrote")
	}
	if _, err := LoadCA(dir); err != nil {
		t.Errorf("LoadCA with the real clock: %v", err)
	}
}

func TestInitCASerialsDiffer(t *testing.T) {
	a, _ := newCA(t)
	b, _ := newCA(t)
	if a.Cert().SerialNumber.Cmp(b.Cert().SerialNumber) == 0 {
		t.Error("two CAs share a serial number")
	}
}

func TestInitCARefusesToOverwrite(t *testing.T) {
	ca, dir := newCA(t)
	keyBefore, _ := os.ReadFile(filepath.Join(dir, KeyFile))
	_, err := InitCA(dir, t0, rand.Reader)
	if err == nil {
		t.Fatal("a second InitCA in the same directory succeeded")
	}
	for _, want := range []string{"already exists", "the CA exists", "Never regenerate", filepath.Join(dir, KeyFile)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	keyAfter, _ := os.ReadFile(filepath.Join(dir, KeyFile))
	certAfter, _ := os.ReadFile(filepath.Join(dir, CertFile))
	if !bytes.Equal(keyBefore, keyAfter) || !bytes.Equal(certAfter, ca.CertPEM()) {
		t.Error("the refused InitCA changed the CA files")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("the refused InitCA left files behind: %d entries", len(entries))
	}
}

// Half a CA is never completed or replaced by InitCA: a ca.pem without its key is still the
// certificate every agent trusts, and a key without its ca.pem signed what they trust.
func TestInitCARefusesHalfACA(t *testing.T) {
	for _, tc := range []struct {
		name    string
		keep    string // the file left of a CA
		missing string
		want    []string
	}{
		{"only ca.pem", CertFile, KeyFile, []string{"the CA's key is lost", "restore", "from your backup", "lockhttp ca init --replace --dir"}},
		{"only ca-key.pem", KeyFile, CertFile, []string{"the certificate agents trust is lost", "restore", "lockhttp ca init --replace --dir"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, dir := newCA(t)
			os.Remove(filepath.Join(dir, tc.missing))
			kept, _ := os.ReadFile(filepath.Join(dir, tc.keep))
			_, err := InitCA(dir, t0, rand.Reader)
			if err == nil {
				t.Fatal("InitCA made a CA next to half of one")
			}
			for _, w := range append(tc.want, filepath.Join(dir, tc.keep), filepath.Join(dir, tc.missing)) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if errors.Is(err, ErrNoCA) {
				t.Errorf("error %v is ErrNoCA", err)
			}
			after, _ := os.ReadFile(filepath.Join(dir, tc.keep))
			if !bytes.Equal(kept, after) {
				t.Errorf("%s changed", tc.keep)
			}
			if _, err := os.Lstat(filepath.Join(dir, tc.missing)); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s was created: %v", tc.missing, err)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 1 {
				t.Errorf("the refused InitCA left %d entries", len(entries))
			}
		})
	}
}

func TestCheckFiles(t *testing.T) {
	for _, tc := range []struct {
		name   string
		files  []string
		noCA   bool
		errNil bool
	}{
		{"both", []string{CertFile, KeyFile}, false, true},
		{"neither", nil, true, false},
		{"only ca.pem", []string{CertFile}, false, false},
		{"only ca-key.pem", []string{KeyFile}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range tc.files {
				writeFile(t, filepath.Join(dir, f), []byte("x"), 0o600)
			}
			err := CheckFiles(dir)
			if (err == nil) != tc.errNil || errors.Is(err, ErrNoCA) != tc.noCA {
				t.Fatalf("CheckFiles = %v; want nil %v, ErrNoCA %v", err, tc.errNil, tc.noCA)
			}
		})
	}
	if err := CheckFiles(filepath.Join(t.TempDir(), "absent")); !errors.Is(err, ErrNoCA) {
		t.Fatalf("a missing directory: %v, want ErrNoCA", err)
	}
}

func TestReplaceCA(t *testing.T) {
	for _, tc := range []struct {
		name   string
		remove string // a file of the old CA removed first; "" none
	}{
		{"a whole CA", ""},
		{"only ca.pem left", KeyFile},
		{"only ca-key.pem left", CertFile},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old, dir := newCA(t)
			if tc.remove != "" {
				os.Remove(filepath.Join(dir, tc.remove))
			}
			before := map[string][]byte{}
			for _, f := range []string{KeyFile, CertFile} {
				if data, err := os.ReadFile(filepath.Join(dir, f)); err == nil {
					before[f] = data
				}
			}
			ca, r, err := ReplaceCA(dir, t0.Add(time.Hour), rand.Reader)
			if err != nil {
				t.Fatal(err)
			}
			if filepath.Dir(r.Dir) != dir || !strings.HasPrefix(filepath.Base(r.Dir), "replaced-20260301T130000Z-") {
				t.Fatalf("moved aside to %q", r.Dir)
			}
			if fi, err := os.Stat(r.Dir); err != nil || fi.Mode().Perm() != 0o700 {
				t.Fatalf("aside directory: %v %v", fi, err)
			}
			for f, data := range before {
				got, err := os.ReadFile(filepath.Join(r.Dir, f))
				if err != nil || !bytes.Equal(got, data) {
					t.Errorf("old %s not moved aside intact: %v", f, err)
				}
			}
			wantOld := ""
			if _, ok := before[CertFile]; ok {
				wantOld = fmt.Sprintf("%X", sha256.Sum256(old.Cert().Raw))
			}
			if r.OldSHA256 != wantOld {
				t.Errorf("old fingerprint %q, want %q", r.OldSHA256, wantOld)
			}
			loaded, err := loadCA(dir, t0.Add(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			if !loaded.Cert().Equal(ca.Cert()) || loaded.Cert().Equal(old.Cert()) {
				t.Error("the directory does not serve the new CA")
			}
			var b bytes.Buffer
			WriteReplaceSummary(&b, ca, dir, r, false)
			for _, w := range []string{"nothing was deleted", r.Dir, "every agent must now trust the new " + filepath.Join(dir, CertFile),
				fmt.Sprintf("%X", sha256.Sum256(ca.Cert().Raw)), "restart the signer"} {
				if !strings.Contains(b.String(), w) {
					t.Errorf("summary lacks %q:\n%s", w, b.String())
				}
			}
		})
	}
	t.Run("no CA yet", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "ca")
		if _, r, err := ReplaceCA(dir, t0, rand.Reader); err != nil || r.Dir != "" {
			t.Fatalf("ReplaceCA = %+v, %v", r, err)
		}
		if _, err := loadCA(dir, t0); err != nil {
			t.Fatal(err)
		}
	})
}

func TestLoadCAExpiredWithRealClock(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	if _, err := InitCA(dir, time.Now().Add(-CALifetime-time.Hour), rand.Reader); err != nil {
		t.Fatal(err)
	}
	_, err := LoadCA(dir)
	if err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("LoadCA of an expired CA: %v, want an expiry error", err)
	}
}

func TestLoadCARefuses(t *testing.T) {
	other, otherDir := newCA(t)
	_ = other
	otherKey, _ := os.ReadFile(filepath.Join(otherDir, KeyFile))

	cases := []struct {
		name  string
		now   time.Time
		setup func(t *testing.T, dir string)
		want  []string
	}{
		{"key readable by group", t0, chmodKey(0o640), []string{"has mode 0640", "chmod 600", KeyFile}},
		{"key readable by others", t0, chmodKey(0o604), []string{"has mode 0604", "chmod 600"}},
		{"key writable by group", t0, chmodKey(0o620), []string{"has mode 0620", "chmod 600"}},
		{"key of another CA", t0, func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, KeyFile), otherKey, 0o600)
		}, []string{"does not match", KeyFile, CertFile, "restore the pair from your backup", "lockhttp ca init --replace --dir"}},
		{"expired", t0.Add(CALifetime + time.Second), nil, []string{"expired at", "lockhttp ca init --replace"}},
		{"not yet valid", t0.Add(-2 * time.Hour), nil, []string{"not valid before", "clock"}},
		{"not a CA", t0, func(t *testing.T, dir string) {
			key := readKeyFile(t, dir)
			tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "leaf"},
				NotBefore: t0.Add(-time.Hour), NotAfter: t0.Add(time.Hour), BasicConstraintsValid: true}
			der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(dir, CertFile), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
		}, []string{"not a CA certificate"}},
		{"no key file", t0, func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, KeyFile)) }, []string{KeyFile, "the CA's key is lost"}},
		{"no certificate file", t0, func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, CertFile)) }, []string{CertFile, "the certificate agents trust is lost"}},
		{"no CA at all", t0, func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, CertFile))
			os.Remove(filepath.Join(dir, KeyFile))
		}, []string{"no CA in", "signer init --dir"}},
		{"key file not PEM", t0, func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, KeyFile), []byte("not a key"), 0o600)
		}, []string{"no PRIVATE KEY"}},
		{"key file wrong PEM type", t0, func(t *testing.T, dir string) {
			key := readKeyFile(t, dir)
			der, _ := x509.MarshalECPrivateKey(key)
			writeFile(t, filepath.Join(dir, KeyFile), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
		}, []string{"no PRIVATE KEY (PKCS#8)"}},
		{"key file corrupt", t0, func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, KeyFile), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{0x30, 0x03, 1, 2, 3}}), 0o600)
		}, []string{"not a valid PKCS#8 private key"}},
		{"certificate file not PEM", t0, func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, CertFile), []byte("junk"), 0o644)
		}, []string{"no CERTIFICATE"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, dir := newCA(t)
			if tc.setup != nil {
				tc.setup(t, dir)
			}
			_, err := loadCA(dir, tc.now)
			if err == nil {
				t.Fatal("loaded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

func chmodKey(mode os.FileMode) func(t *testing.T, dir string) {
	return func(t *testing.T, dir string) {
		if err := os.Chmod(filepath.Join(dir, KeyFile), mode); err != nil {
			t.Fatal(err)
		}
	}
}

func writeFile(t *testing.T, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func TestCAPrintsNoKey(t *testing.T) {
	ca, _ := newCA(t)
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		got := sprintf(format, ca)
		if !strings.HasPrefix(got, "CA \"CN=lockhttp local CA,O=lockhttp\"") {
			t.Errorf("%s: %q", format, got)
		}
	}
}
