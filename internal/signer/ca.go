// Package signer holds the lockhttp CA: it creates and loads the CA key, signs short-lived leaf
// certificates for the gate and serves them over a unix socket.
package signer

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"github.com/lockhttp/lockhttp/internal/atomicfile"
)

// The files of a CA directory.
const (
	// KeyFile holds the CA private key (PKCS#8 PEM, mode 0600): only the signer's user reads it.
	KeyFile = "ca-key.pem"
	// CertFile holds the CA certificate (PEM, mode 0644): the one file an agent needs to trust.
	CertFile = "ca.pem"
)

// CALifetime is how long a CA certificate made by InitCA is valid.
const CALifetime = 3 * 365 * 24 * time.Hour

// CAName is the common name of a CA made by InitCA.
const CAName = "lockhttp local CA"

// backdate is how far before now certificates start, to allow for clocks that disagree.
const backdate = time.Hour

// maxPEMFile bounds a read of the key or the certificate file.
const maxPEMFile = 64 << 10

// CA is a loaded certificate authority. Its private key is unexported and never printed: String,
// GoString and LogValue name the certificate only.
type CA struct {
	cert    *x509.Certificate
	certPEM []byte
	key     crypto.Signer
}

// Cert returns the CA certificate. The caller must not modify it.
func (ca *CA) Cert() *x509.Certificate { return ca.cert }

// CertPEM returns the CA certificate in PEM, the bytes of ca.pem.
func (ca *CA) CertPEM() []byte { return bytes.Clone(ca.certPEM) }

// String names the CA by its subject and expiry.
func (ca *CA) String() string {
	return fmt.Sprintf("CA %q (valid until %s)", ca.cert.Subject.String(), ca.cert.NotAfter.UTC().Format(time.RFC3339))
}

// GoString is String, so that %#v does not print the key either.
func (ca *CA) GoString() string { return ca.String() }

// LogValue logs the CA as its subject and expiry.
func (ca *CA) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("subject", ca.cert.Subject.String()),
		slog.String("not_after", ca.cert.NotAfter.UTC().Format(time.RFC3339)),
	)
}

// InitCA creates a CA in dir (created with mode 0700 if missing): an ECDSA P-256 key in
// dir/ca-key.pem (PKCS#8 PEM, mode 0600) and a self-signed certificate in dir/ca.pem (mode
// 0644), valid from now-1h for CALifetime. It creates nothing when either file exists
// (CheckFiles): a CA is replaced only on purpose, with ReplaceCA.
func InitCA(dir string, now time.Time, rand io.Reader) (*CA, error) {
	return initCA(dir, now, rand, false)
}

// RootCAName is the common name of a root made by InitRootCA.
const RootCAName = "lockhttp root CA"

// InitRootCA is InitCA for a root signer: its certificate has path length one, so that it signs
// the node signers' intermediates (each of path length zero) and agents trust it alone.
func InitRootCA(dir string, now time.Time, rand io.Reader) (*CA, error) {
	return initCA(dir, now, rand, true)
}

func initCA(dir string, now time.Time, rand io.Reader, root bool) (*CA, error) {
	keyPath := filepath.Join(dir, KeyFile)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("init CA: %w", err)
	}
	switch err := CheckFiles(dir); {
	case err == nil:
		return nil, errCAExists(dir)
	case !errors.Is(err, ErrNoCA):
		// Half a CA is still a CA that agents trust (or a key that signed what they trust).
		return nil, fmt.Errorf("init CA: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand)
	if err != nil {
		return nil, fmt.Errorf("init CA: generating the key: %w", err)
	}
	serial, err := randomSerial(rand)
	if err != nil {
		return nil, fmt.Errorf("init CA: %w", err)
	}
	skid, err := subjectKeyID(key.Public())
	if err != nil {
		return nil, fmt.Errorf("init CA: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: CAName, Organization: []string{"lockhttp"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(CALifetime),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		SubjectKeyId:          skid,
	}
	if root {
		tmpl.Subject.CommonName = RootCAName
		tmpl.MaxPathLen, tmpl.MaxPathLenZero = 1, false
	}
	der, err := x509.CreateCertificate(rand, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("init CA: signing the CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("init CA: reading back the CA certificate: %w", err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("init CA: encoding the key: %w", err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8})
	clear(pkcs8)
	err = writeNew(dir, keyPath, keyPEM)
	clear(keyPEM)
	if err != nil {
		return nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := atomicfile.WriteFile(filepath.Join(dir, CertFile), certPEM, 0o644); err != nil {
		// Nobody can trust a certificate that was never written: take back the key made for it,
		// so that init can run again.
		os.Remove(keyPath)
		return nil, fmt.Errorf("init CA: %w", err)
	}
	return &CA{cert: cert, certPEM: certPEM, key: key}, nil
}

func errCAExists(dir string) error {
	return fmt.Errorf("init CA: %s already exists: the CA exists; serve it with `signer serve --ca %s`. "+
		"Never regenerate the CA to fix a problem: every agent trusts its ca.pem; read the error that led here instead. "+
		"To replace it on purpose, %s",
		filepath.Join(dir, KeyFile), dir, replaceFix(dir))
}

// ErrNoCA is in CheckFiles' error when the directory holds neither ca.pem nor ca-key.pem: a
// first start, where InitCA may create the CA.
var ErrNoCA = errors.New("no CA")

// CheckFiles says from the files' presence alone, reading neither, whether dir holds a CA: nil
// when ca.pem and ca-key.pem are both there (LoadCA then checks that they match); an error
// wrapping ErrNoCA when neither is (nor dir); otherwise an error that names the missing file and
// the fix. On any error but ErrNoCA, no CA may be made in dir implicitly: agents trust the
// ca.pem that is there, or one signed by the key that is.
func CheckFiles(dir string) error {
	keyPath, certPath := filepath.Join(dir, KeyFile), filepath.Join(dir, CertFile)
	key, err := present(keyPath)
	if err != nil {
		return err
	}
	cert, err := present(certPath)
	if err != nil {
		return err
	}
	switch {
	case key && cert:
		return nil
	case !key && !cert:
		return fmt.Errorf("%w in %s (neither %s nor %s is there); create it once with `signer init --dir %s` (lox run does on its first start)",
			ErrNoCA, dir, CertFile, KeyFile, dir)
	case cert:
		return fmt.Errorf("%s is there but %s is not: the CA's key is lost, and a new CA would break every agent that trusts this ca.pem; "+
			"fix: restore %s from your backup, or %s", certPath, keyPath, keyPath, replaceFix(dir))
	default:
		return fmt.Errorf("%s is there but %s is not: the certificate agents trust is lost; "+
			"fix: restore %s from your backup (any copy an agent trusts will do: it is public), or %s", keyPath, certPath, certPath, replaceFix(dir))
	}
}

// replaceFix is the end of every error that leaves replacing the CA to the operator.
func replaceFix(dir string) string {
	return fmt.Sprintf("make a new CA on purpose with `lockhttp ca init --replace --dir %s` (it moves the old pair aside) and have every agent trust the new ca.pem", dir)
}

// present reports whether path exists (as anything, a dangling link included).
func present(path string) (bool, error) {
	_, err := os.Lstat(path)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("CA: %w", err)
}

// Replaced says where ReplaceCA put the old CA.
type Replaced struct {
	// Dir holds the old ca.pem and ca-key.pem (those that existed); "" when there were none.
	Dir string
	// OldSHA256 is the SHA-256 of the old certificate (DER, upper-case hex, as WriteInitSummary
	// prints it); "" when there was none or it did not parse.
	OldSHA256 string
}

// ReplaceCA makes a new CA in dir on purpose. It moves the CA files there (whichever of ca.pem
// and ca-key.pem exist) into a new directory dir/replaced-TIME-N, mode 0700, deleting nothing,
// then runs InitCA. When InitCA fails it moves the old files back.
func ReplaceCA(dir string, now time.Time, rand io.Reader) (*CA, Replaced, error) {
	var r Replaced
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, r, fmt.Errorf("replace CA: %w", err)
	}
	var old []string
	for _, name := range []string{KeyFile, CertFile} {
		ok, err := present(filepath.Join(dir, name))
		if err != nil {
			return nil, r, fmt.Errorf("replace CA: %w", err)
		}
		if ok {
			old = append(old, name)
		}
	}
	if len(old) == 0 {
		ca, err := InitCA(dir, now, rand)
		return ca, r, err
	}
	if data, err := atomicfile.ReadFile(filepath.Join(dir, CertFile), maxPEMFile); err == nil {
		if block, _ := pem.Decode(data); block != nil && block.Type == "CERTIFICATE" {
			r.OldSHA256 = fmt.Sprintf("%X", sha256.Sum256(block.Bytes))
		}
	}
	aside, err := os.MkdirTemp(dir, "replaced-"+now.UTC().Format("20060102T150405Z")+"-")
	if err != nil {
		return nil, r, fmt.Errorf("replace CA: %w", err)
	}
	back := func(moved []string) {
		for _, name := range moved {
			os.Rename(filepath.Join(aside, name), filepath.Join(dir, name))
		}
		os.Remove(aside)
	}
	for i, name := range old {
		if err := os.Rename(filepath.Join(dir, name), filepath.Join(aside, name)); err != nil {
			back(old[:i])
			return nil, r, fmt.Errorf("replace CA: moving %s aside: %w", name, err)
		}
	}
	ca, err := InitCA(dir, now, rand)
	if err != nil {
		back(old)
		return nil, r, fmt.Errorf("replace CA: %w (the old files are back in %s)", err, dir)
	}
	r.Dir = aside
	return ca, r, nil
}

// writeNew writes the key atomically and without replacing a file that appeared meanwhile: it
// writes a temporary file in a private directory and hard-links it into place, which fails if
// the name is taken. The directory is synced when ca.pem is written next to it.
func writeNew(dir, keyPath string, data []byte) error {
	tmpDir, err := os.MkdirTemp(dir, ".init-")
	if err != nil {
		return fmt.Errorf("init CA: %w", err)
	}
	defer os.RemoveAll(tmpDir)
	tmp := filepath.Join(tmpDir, KeyFile)
	if err := atomicfile.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("init CA: %w", err)
	}
	if err := os.Link(tmp, keyPath); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return errCAExists(dir)
		}
		return fmt.Errorf("init CA: %w", err)
	}
	return nil
}

// randomSerial returns a random positive 128-bit serial number.
func randomSerial(rand io.Reader) (*big.Int, error) {
	var b [16]byte
	for {
		if _, err := io.ReadFull(rand, b[:]); err != nil {
			return nil, fmt.Errorf("reading randomness for a serial number: %w", err)
		}
		if n := new(big.Int).SetBytes(b[:]); n.Sign() > 0 {
			return n, nil
		}
	}
}

// subjectKeyID is the truncated SHA-256 of the subjectPublicKey bits (RFC 7093 method 1).
func subjectKeyID(pub crypto.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("encoding the public key: %w", err)
	}
	var spki struct {
		Algorithm pkix.AlgorithmIdentifier
		PublicKey asn1.BitString
	}
	if _, err := asn1.Unmarshal(der, &spki); err != nil {
		return nil, fmt.Errorf("reading the public key: %w", err)
	}
	sum := sha256.Sum256(spki.PublicKey.Bytes)
	return sum[:20], nil
}

// LoadCA reads the CA from dir (ca-key.pem and ca.pem). It refuses a key file that group or
// others may access, a key that does not match the certificate, and a certificate that is not a
// CA or is not valid now.
func LoadCA(dir string) (*CA, error) {
	return loadCA(dir, time.Now())
}

func loadCA(dir string, now time.Time) (*CA, error) {
	keyPath := filepath.Join(dir, KeyFile)
	certPath := filepath.Join(dir, CertFile)
	if err := CheckFiles(dir); err != nil {
		return nil, fmt.Errorf("load CA: %w", err)
	}
	key, err := readKey(keyPath)
	if err != nil {
		return nil, err
	}
	certPEM, err := atomicfile.ReadFile(certPath, maxPEMFile)
	if err != nil {
		return nil, fmt.Errorf("load CA: %w", err)
	}
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("load CA: %s holds no CERTIFICATE PEM block; it should be the ca.pem written by `signer init`", certPath)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("load CA: %s: %w", certPath, err)
	}
	switch {
	case !cert.BasicConstraintsValid || !cert.IsCA:
		return nil, fmt.Errorf("load CA: %s is not a CA certificate (basic constraints CA:TRUE missing); use the ca.pem written by `signer init`", certPath)
	case cert.KeyUsage != 0 && cert.KeyUsage&x509.KeyUsageCertSign == 0:
		return nil, fmt.Errorf("load CA: %s may not sign certificates (key usage lacks certSign)", certPath)
	case now.After(cert.NotAfter):
		return nil, fmt.Errorf("load CA: %s expired at %s; %s",
			certPath, cert.NotAfter.UTC().Format(time.RFC3339), replaceFix(dir))
	case now.Before(cert.NotBefore):
		return nil, fmt.Errorf("load CA: %s is not valid before %s; check this machine's clock", certPath, cert.NotBefore.UTC().Format(time.RFC3339))
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("load CA: the key in %s does not match the certificate in %s; fix: restore the pair from your backup "+
			"(ca.pem and ca-key.pem are written together), or %s", keyPath, certPath, replaceFix(dir))
	}
	return &CA{cert: cert, certPEM: pem.EncodeToMemory(block), key: key}, nil
}

// readKey reads and parses the CA key, refusing a file that group or others may access. Its
// errors never carry the file's content.
func readKey(path string) (crypto.Signer, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("load CA: %s does not exist; create the CA once with `signer init --dir %s`: %w", path, filepath.Dir(path), err)
		}
		return nil, fmt.Errorf("load CA: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("load CA: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("load CA: %s is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("load CA: %s has mode %04o, which lets group or others read the CA key; run chmod 600 %s", path, perm, path)
	}
	data, err := atomicfile.Read(f, path, maxPEMFile)
	switch {
	case errors.Is(err, atomicfile.ErrTooLarge):
		return nil, fmt.Errorf("load CA: %s is larger than %d bytes; it is not a key file", path, maxPEMFile)
	case err != nil:
		return nil, fmt.Errorf("load CA: %s: %w", path, err)
	}
	defer clear(data)
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("load CA: %s holds no PRIVATE KEY (PKCS#8) PEM block; it should be the ca-key.pem written by `signer init`", path)
	}
	defer clear(block.Bytes)
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		// The parser's message describes the structure, never the bytes; still, say only that.
		return nil, fmt.Errorf("load CA: %s is not a valid PKCS#8 private key", path)
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("load CA: %s holds a key of type %T, which cannot sign", path, k)
	}
	return signer, nil
}

// WriteReplaceSummary tells the operator what ReplaceCA did in dir, and what every agent must
// now trust.
func WriteReplaceSummary(w io.Writer, ca *CA, dir string, r Replaced, asRoot bool) {
	if r.Dir == "" {
		WriteInitSummary(w, ca, dir, asRoot)
		return
	}
	sum := sha256.Sum256(ca.Cert().Raw)
	old := "the old certificate did not parse"
	if r.OldSHA256 != "" {
		old = "SHA-256 fingerprint of the old ca.pem: " + r.OldSHA256
	}
	fmt.Fprintf(w, `replaced the lockhttp CA in %s; nothing was deleted
  %s  the old CA, moved aside (%s): keep it with your backups
  %s  the new CA certificate (valid until %s)
  SHA-256 fingerprint of the new ca.pem: %X
every agent must now trust the new %s instead of the old one (docs/trust-ca.md): until it does it refuses every connection the gate decrypts.
restart the signer and the gate so that they sign with the new key: stop lox run and start it again; in compose: docker-compose restart signer gate (the signer exports the new ca.pem to ca-public)
`, dir, r.Dir, old, filepath.Join(dir, CertFile), ca.Cert().NotAfter.UTC().Format(time.DateOnly), sum, filepath.Join(dir, CertFile))
	if asRoot {
		fmt.Fprintf(w, "the new files belong to root: give them to the signer's user (chown -R <signer user> %s) before serving\n", dir)
	}
}

// WriteInitSummary tells the operator what InitCA created in dir and what to do next.
func WriteInitSummary(w io.Writer, ca *CA, dir string, asRoot bool) {
	sum := sha256.Sum256(ca.Cert().Raw)
	fmt.Fprintf(w, `created the lockhttp CA in %s (valid until %s)
  %s  the CA private key (mode 0600): only the signer's user may read it; never copy it
  %s  the CA certificate: the one file agents trust (add it to their CA bundle)
  SHA-256 fingerprint of ca.pem: %X
next: signer serve --ca %s --socket PATH --allow-uid <the gate's uid>
`, dir, ca.Cert().NotAfter.UTC().Format(time.DateOnly),
		filepath.Join(dir, KeyFile), filepath.Join(dir, CertFile), sum, dir)
	if asRoot {
		fmt.Fprintf(w, "the files belong to root: give them to the signer's user (chown -R <signer user> %s) before serving\n", dir)
	}
}
