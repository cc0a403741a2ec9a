package main

import (
	"crypto/rand"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/lockhttp/lockhttp/internal/atomicfile"
	"github.com/lockhttp/lockhttp/internal/mtls"
)

const fleetUsage = `usage:
  lockhttp fleet init [--dir DIR] [--days N]
      make the fleet's CA: DIR/ca.pem (every process trusts it: -tls-ca) and DIR/ca-key.pem
      (mode 0600; keep it off the fleet's machines); never over an existing one
  lockhttp fleet issue [--dir DIR] [--days N] [--dns NAME]... [--replace] KIND NAME
      make the identity spiffe://lockhttp/KIND/NAME: DIR/KIND-NAME.pem (-tls-cert) and
      DIR/KIND-NAME-key.pem (-tls-key, mode 0600). KIND is gate, facade (a person's lox),
      console (a console with its hub) or signer
  lockhttp fleet revoke [--dir DIR] [--days N] [--cert FILE] [KIND NAME]
      sign DIR/crl.pem (-tls-crl) listing the certificate of KIND NAME (or --cert FILE) with those
      it listed before; with neither, sign it again as it is. Every process refuses every peer
      once the list is past its next update (--days from now), so sign it again before then

For testing and small deployments: the CA's key signs every identity of the fleet.
`

// fleetKinds are the kinds lockhttp fleet issues.
var fleetKinds = []string{mtls.KindGate, mtls.KindFacade, mtls.KindConsole, mtls.KindSigner}

// maxFleetFile bounds a read of a certificate, key or revocation list.
const maxFleetFile = 1 << 20

const (
	fleetCACert = "ca.pem"
	fleetCAKey  = "ca-key.pem"
	fleetCRL    = "crl.pem"
)

func runFleet(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, fleetUsage)
		return 2
	}
	switch args[0] {
	case "init":
		return runFleetInit(args[1:], stdout, stderr)
	case "issue":
		return runFleetIssue(args[1:], stdout, stderr)
	case "revoke":
		return runFleetRevoke(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, fleetUsage)
		return 0
	}
	fmt.Fprintf(stderr, "lockhttp fleet: unknown command %q\n%s", args[0], fleetUsage)
	return 2
}

// fleetFlags parses a fleet command's flags (before and after its arguments) and returns the
// arguments; code >= 0 is the exit status to return at once.
func fleetFlags(fs *flag.FlagSet, args []string, stderr io.Writer) (pos []string, code int) {
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, fleetUsage) }
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, 0
			}
			return nil, 2
		}
		if fs.NArg() == 0 {
			return pos, -1
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func runFleetInit(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lockhttp fleet init", flag.ContinueOnError)
	dir := fs.String("dir", "fleet", "the fleet's `DIR` (made with mode 0700 if missing)")
	days := fs.Int("days", 1826, "the CA's validity in `DAYS`")
	pos, code := fleetFlags(fs, args, stderr)
	if code >= 0 {
		return code
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "lockhttp fleet init: "+format+"\n", a...)
		return 1
	}
	if len(pos) > 0 || *days < 1 {
		fmt.Fprint(stderr, fleetUsage)
		return 2
	}
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		return fail("%v", err)
	}
	for _, f := range []string{fleetCACert, fleetCAKey} {
		if _, err := os.Lstat(filepath.Join(*dir, f)); err == nil {
			return fail("%s already holds %s: a fleet's CA is never replaced by init (every identity of the fleet names it); use another --dir", *dir, f)
		}
	}
	ca, err := mtls.NewCA("lockhttp fleet CA", time.Now(), time.Duration(*days)*24*time.Hour, rand.Reader)
	if err != nil {
		return fail("%v", err)
	}
	keyPEM, err := mtls.KeyPEM(ca.Key)
	if err != nil {
		return fail("%v", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(*dir, fleetCAKey), keyPEM, 0o600); err != nil {
		return fail("%v", err)
	}
	clear(keyPEM)
	if err := atomicfile.WriteFile(filepath.Join(*dir, fleetCACert), mtls.CertPEM(ca.Cert), 0o644); err != nil {
		return fail("%v", err)
	}
	fmt.Fprintf(stdout, "fleet CA %s (valid until %s) and its key %s (mode 0600)\n"+
		"Give %s to every process (-tls-ca); keep the key on the machine that issues identities only.\n",
		filepath.Join(*dir, fleetCACert), ca.Cert.NotAfter.UTC().Format(time.RFC3339), filepath.Join(*dir, fleetCAKey), fleetCACert)
	return 0
}

// loadFleetCA reads the CA of dir.
func loadFleetCA(dir string) (*mtls.CA, error) {
	certPEM, err := atomicfile.ReadFile(filepath.Join(dir, fleetCACert), maxFleetFile)
	if err != nil {
		return nil, fmt.Errorf("%v: make the fleet's CA first (lockhttp fleet init --dir %s)", err, dir)
	}
	keyPEM, err := atomicfile.ReadFile(filepath.Join(dir, fleetCAKey), maxFleetFile)
	if err != nil {
		return nil, fmt.Errorf("%v: the CA's key is needed to sign; run this where it is kept", err)
	}
	defer clear(keyPEM)
	ca, err := mtls.ParseCA(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return ca, nil
}

type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(s string) error { *l = append(*l, s); return nil }

// identityFiles are the files of KIND NAME in dir.
func identityFiles(dir, kind, name string) (cert, key string) {
	base := filepath.Join(dir, kind+"-"+name)
	return base + ".pem", base + "-key.pem"
}

func runFleetIssue(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lockhttp fleet issue", flag.ContinueOnError)
	dir := fs.String("dir", "fleet", "the fleet's `DIR` (lockhttp fleet init)")
	days := fs.Int("days", 365, "the certificate's validity in `DAYS` (never past the CA's)")
	replace := fs.Bool("replace", false, "issue a new certificate and key over the identity's files (the old certificate stays valid until it expires: revoke it first with lockhttp fleet revoke)")
	var dns stringList
	fs.Var(&dns, "dns", "a DNS `NAME` to add to the certificate (repeatable; lockhttp's processes check the identity, not a name)")
	pos, code := fleetFlags(fs, args, stderr)
	if code >= 0 {
		return code
	}
	fail := func(c int, format string, a ...any) int {
		fmt.Fprintf(stderr, "lockhttp fleet issue: "+format+"\n", a...)
		return c
	}
	if len(pos) != 2 || *days < 1 {
		fmt.Fprint(stderr, fleetUsage)
		return 2
	}
	kind, name := pos[0], pos[1]
	if !slices.Contains(fleetKinds, kind) {
		return fail(2, "unknown kind %q: use one of %s", kind, strings.Join(fleetKinds, ", "))
	}
	id, err := mtls.NewID(kind, name)
	if err != nil {
		return fail(2, "%v", err)
	}
	certPath, keyPath := identityFiles(*dir, kind, name)
	if !*replace {
		for _, p := range []string{certPath, keyPath} {
			if _, err := os.Lstat(p); err == nil {
				return fail(1, "%s exists: %s was issued before; --replace issues a new certificate and key (revoke the old one first: lockhttp fleet revoke %s %s)", p, id, kind, name)
			}
		}
	}
	ca, err := loadFleetCA(*dir)
	if err != nil {
		return fail(1, "%v", err)
	}
	is, err := ca.Issue(id, mtls.UsageOf(kind), dns, time.Now(), time.Duration(*days)*24*time.Hour, rand.Reader)
	if err != nil {
		return fail(1, "%v", err)
	}
	keyPEM, err := mtls.KeyPEM(is.Key)
	if err != nil {
		return fail(1, "%v", err)
	}
	if err := atomicfile.WriteFile(keyPath, keyPEM, 0o600); err != nil {
		return fail(1, "%v", err)
	}
	clear(keyPEM)
	if err := atomicfile.WriteFile(certPath, mtls.CertPEM(is.Cert), 0o644); err != nil {
		return fail(1, "%v", err)
	}
	fmt.Fprintf(stdout, "%s: %s (serial:%s, valid until %s) and its key %s (mode 0600)\n",
		id, certPath, is.Cert.SerialNumber.Text(16), is.Cert.NotAfter.UTC().Format(time.RFC3339), keyPath)
	return 0
}

func runFleetRevoke(args []string, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("lockhttp fleet revoke", flag.ContinueOnError)
	dir := flags.String("dir", "fleet", "the fleet's `DIR` (lockhttp fleet init)")
	days := flags.Int("days", 365, "the list's next update, in `DAYS` from now: past it every process refuses every peer until it is signed again")
	certFile := flags.String("cert", "", "revoke the certificate in `FILE` (one replaced since, say) rather than KIND NAME's")
	pos, code := fleetFlags(flags, args, stderr)
	if code >= 0 {
		return code
	}
	fail := func(c int, format string, a ...any) int {
		fmt.Fprintf(stderr, "lockhttp fleet revoke: "+format+"\n", a...)
		return c
	}
	if (len(pos) != 0 && len(pos) != 2) || (len(pos) == 2 && *certFile != "") || *days < 1 {
		fmt.Fprint(stderr, fleetUsage)
		return 2
	}
	var revoke []*x509.Certificate
	switch {
	case len(pos) == 2:
		c, _ := identityFiles(*dir, pos[0], pos[1])
		*certFile = c
		fallthrough
	case *certFile != "":
		data, err := atomicfile.ReadFile(*certFile, maxFleetFile)
		if err != nil {
			return fail(1, "%v", err)
		}
		c, err := mtls.ParseCertPEM(data)
		if err != nil {
			return fail(1, "%s: %v", *certFile, err)
		}
		revoke = append(revoke, c)
	}
	ca, err := loadFleetCA(*dir)
	if err != nil {
		return fail(1, "%v", err)
	}
	var serials []*big.Int
	for _, c := range revoke {
		if c.CheckSignatureFrom(ca.Cert) != nil {
			return fail(1, "%s was not issued by %s's CA", *certFile, *dir)
		}
		serials = append(serials, c.SerialNumber)
	}
	crlPath := filepath.Join(*dir, fleetCRL)
	var prev *x509.RevocationList
	if data, err := atomicfile.ReadFile(crlPath, maxFleetFile); err == nil {
		if prev, err = mtls.ParseCRLPEM(data); err != nil {
			return fail(1, "%s: %v; move it aside to start a new list", crlPath, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fail(1, "%v", err)
	}
	pemData, err := ca.Revoke(prev, serials, time.Now(), time.Duration(*days)*24*time.Hour, rand.Reader)
	if err != nil {
		return fail(1, "%v", err)
	}
	if err := atomicfile.WriteFile(crlPath, pemData, 0o644); err != nil {
		return fail(1, "%v", err)
	}
	crl, _ := mtls.ParseCRLPEM(pemData)
	for _, c := range revoke {
		id, _ := mtls.IDOf(c)
		fmt.Fprintf(stdout, "revoked %s (serial:%s)\n", id, c.SerialNumber.Text(16))
	}
	fmt.Fprintf(stdout, "%s: %d certificates revoked, next update %s; give it to every process that admits peers (-tls-crl): they read it again within a second and close the connections of the certificates it lists\n",
		crlPath, len(crl.RevokedCertificateEntries), crl.NextUpdate.UTC().Format(time.RFC3339))
	return 0
}
