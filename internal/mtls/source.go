package mtls

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"

	"github.com/lockhttp/lockhttp/internal/atomicfile"
)

// Files names the files of one process's identity and of the fleet it trusts.
type Files struct {
	// Cert is the process's certificate (PEM), then any intermediates. Required.
	Cert string
	// Key is its private key (PEM: PKCS#8, EC or PKCS#1). Required.
	Key string
	// CA holds the fleet's CA certificates (PEM): every peer's chain must reach one. Required.
	CA string
	// CRL is a certificate revocation list (PEM or DER) signed by a CA of CA; a certificate it
	// lists is refused, and once its next update has passed every peer is. Empty: none.
	CRL string
	// Deny is a deny list: one entry a line, an identity (every certificate naming it), serial:HEX
	// (a certificate's serial number) or sha256:HEX (a certificate's SHA-256); '#' starts a
	// comment. Empty: none.
	Deny string
}

// Options configures a Source.
type Options struct {
	Files Files
	// Now is the clock certificates are checked against. Nil: time.Now.
	Now func() time.Time
	// Log gets a line when the files are read again, or fail to. Nil: none.
	Log *slog.Logger
	// Every is how often at most Refresh looks at the files. Zero: a second.
	Every time.Duration
}

// maxFile bounds a read of one of the files.
const maxFile = 1 << 20

// Source holds an identity and what it trusts, from files it reads again when they change:
// checked at most every Options.Every by Refresh, which every handshake and the server's watch
// call. A certificate or key that no longer loads, or names another identity, leaves the last
// good one in use (Status says why); a revocation file that no longer loads refuses every peer
// until it loads again: a list that cannot be read cannot say who is revoked.
type Source struct {
	o   Options
	log *slog.Logger
	now func() time.Time

	st atomic.Pointer[state]

	mu      sync.Mutex         // serialises reloads
	checked time.Time          // guarded by mu: when the files were last looked at
	sigs    map[string]fileSig // guarded by mu: each file as last read
	gen     uint64             // guarded by mu: the generation of the last state
	errs    map[string]string  // guarded by mu: a file that does not load → why (for Status)
	logged  map[string]string  // guarded by mu: the error last logged per file
}

// state is one consistent reading of the files.
type state struct {
	gen     uint64
	cert    *tls.Certificate
	leaf    *x509.Certificate
	id      ID
	roots   []*x509.Certificate
	revoked map[string]bool // issuer (raw subject, hex) + "/" + serial (hex): listed by the CRL
	crlNext time.Time       // the CRL's next update; zero: no CRL
	crlName string
	deny    denyList
	// revErr is why a revocation file does not load: every peer is refused while it is set.
	revErr error
}

type fileSig struct {
	size, mtime int64
	ino, dev    uint64
}

func sigOf(path string) (fileSig, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileSig{}, err
	}
	s := fileSig{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.ino, s.dev = st.Ino, uint64(st.Dev)
	}
	return s, nil
}

// Load reads the files; any that does not load is an error naming it and the fix.
func Load(o Options) (*Source, error) {
	f := o.Files
	switch {
	case f.Cert == "" || f.Key == "":
		return nil, errors.New("a certificate and its key are required (-tls-cert, -tls-key; lockhttp fleet issue makes them)")
	case f.CA == "":
		return nil, errors.New("the fleet's CA certificate is required (-tls-ca; lockhttp fleet init makes it)")
	}
	s := &Source{o: o, log: o.Log, now: o.Now, sigs: map[string]fileSig{}, errs: map[string]string{},
		logged: map[string]string{}}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.o.Every <= 0 {
		s.o.Every = time.Second
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.paths() { // before the read: a change after it is seen by Refresh
		sig, err := sigOf(p)
		if err != nil {
			sig = fileSig{size: -1}
		}
		s.sigs[p] = sig
	}
	st, err := s.readLocked(nil)
	if err != nil {
		return nil, err
	}
	if st.revErr != nil {
		return nil, st.revErr
	}
	s.st.Store(st)
	s.checked = s.now()
	return s, nil
}

// readFile reads a file, bounded.
func readFile(path string) ([]byte, error) { return atomicfile.ReadFile(path, maxFile) }

// readLocked reads every file into a new state; prev (nil at start) is what a file that does
// not load now leaves in place. The caller holds mu. An error is returned at start only.
func (s *Source) readLocked(prev *state) (*state, error) {
	f := s.o.Files
	st := &state{}
	if prev != nil {
		*st = *prev
	}
	// Our certificate and key, and the CA they must reach.
	cert, leaf, id, rootsOK, err := s.loadIdentity()
	if err != nil {
		if prev == nil {
			return nil, err
		}
		s.noteLocked(f.Cert, err)
	} else {
		if prev != nil && prev.id != id {
			s.noteLocked(f.Cert, fmt.Errorf("%s now names %s, not %s: a process keeps its identity; restart it to take another", f.Cert, id, prev.id))
		} else {
			st.cert, st.leaf, st.id, st.roots = cert, leaf, id, rootsOK
			s.noteLocked(f.Cert, nil)
		}
	}
	st.revErr = nil
	st.revoked, st.crlNext, st.crlName = nil, time.Time{}, ""
	if f.CRL != "" {
		if err := s.loadCRL(st); err != nil {
			st.revErr = err
		}
	}
	st.deny = denyList{}
	if f.Deny != "" {
		d, err := loadDeny(f.Deny)
		if err != nil {
			st.revErr = errors.Join(st.revErr, err)
		}
		st.deny = d
	}
	if st.revErr != nil {
		s.noteLocked("revocation", st.revErr)
	} else {
		s.noteLocked("revocation", nil)
	}
	s.gen++
	st.gen = s.gen
	return st, nil
}

// noteLocked records (and logs once) that a file does or no longer does fail to load.
func (s *Source) noteLocked(what string, err error) {
	if err == nil {
		if s.errs[what] != "" {
			s.log.Info("mtls: the files load again", "file", what)
		}
		delete(s.errs, what)
		delete(s.logged, what)
		return
	}
	s.errs[what] = err.Error()
	if s.logged[what] != err.Error() {
		s.logged[what] = err.Error()
		s.log.Error("mtls: a file does not load", "file", what, "err", err.Error())
	}
}

// loadIdentity reads the certificate, key and CA, and checks that the certificate names one
// identity and reaches the CA.
func (s *Source) loadIdentity() (*tls.Certificate, *x509.Certificate, ID, []*x509.Certificate, error) {
	f := s.o.Files
	certPEM, err := readFile(f.Cert)
	if err != nil {
		return nil, nil, ID{}, nil, fmt.Errorf("certificate: %w", err)
	}
	keyPEM, err := readFile(f.Key)
	if err != nil {
		return nil, nil, ID{}, nil, fmt.Errorf("key: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	clear(keyPEM)
	if err != nil {
		return nil, nil, ID{}, nil, fmt.Errorf("%s and %s: %w; give the certificate lockhttp fleet issue made and its key", f.Cert, f.Key, err)
	}
	leaf := pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, nil, ID{}, nil, fmt.Errorf("%s: %w", f.Cert, err)
		}
	}
	sid, err := x509svid.IDFromCert(leaf)
	if err != nil {
		return nil, nil, ID{}, nil, fmt.Errorf("%s: %w; a certificate names its identity in one URI SAN, spiffe://%s/KIND/NAME (lockhttp fleet issue)", f.Cert, err, TrustDomain)
	}
	roots, err := loadCerts(f.CA)
	if err != nil {
		return nil, nil, ID{}, nil, err
	}
	chain := []*x509.Certificate{leaf}
	for _, der := range pair.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			chain = append(chain, c)
		}
	}
	// The chain is checked at a time the certificate is valid: an expired one is still this
	// process's identity (its peers refuse it, and Status says so) until a renewed file replaces
	// it, which is read without a restart.
	at := s.now()
	if at.Before(leaf.NotBefore) || at.After(leaf.NotAfter) {
		at = leaf.NotBefore.Add(leaf.NotAfter.Sub(leaf.NotBefore) / 2)
	}
	if _, _, err := x509svid.Verify(chain, bundleOf(roots), x509svid.WithTime(at)); err != nil {
		return nil, nil, ID{}, nil, fmt.Errorf("%s does not verify against %s: %w; issue it with that CA (lockhttp fleet issue), or give the CA that issued it", f.Cert, f.CA, err)
	}
	return &pair, leaf, ID{sid}, roots, nil
}

// loadCerts reads the PEM certificates of a CA file.
func loadCerts(path string) ([]*x509.Certificate, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, fmt.Errorf("CA: %w", err)
	}
	var out []*x509.Certificate
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("CA %s: %w", path, err)
		}
		if !c.IsCA {
			return nil, fmt.Errorf("CA %s: the certificate for %q is not a CA; give the fleet's ca.pem (lockhttp fleet init)", path, c.Subject)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("CA %s: no PEM certificate in it; give the fleet's ca.pem (lockhttp fleet init)", path)
	}
	return out, nil
}

// bundleOf is a bundle source that holds roots for every trust domain: the identity's trust
// domain is checked by the Allow lists, the chain by the roots.
type bundleOf []*x509.Certificate

func (b bundleOf) GetX509BundleForTrustDomain(td spiffeid.TrustDomain) (*x509bundle.Bundle, error) {
	return x509bundle.FromX509Authorities(td, b), nil
}

// loadCRL reads the CRL into st: signed by one of st's roots.
func (s *Source) loadCRL(st *state) error {
	path := s.o.Files.CRL
	data, err := readFile(path)
	if err != nil {
		return fmt.Errorf("revocation list: %w", err)
	}
	if b, _ := pem.Decode(data); b != nil {
		if b.Type != "X509 CRL" {
			return fmt.Errorf("revocation list %s: a PEM %q block, not an X509 CRL; give the crl.pem lockhttp fleet revoke writes", path, b.Type)
		}
		data = b.Bytes
	}
	crl, err := x509.ParseRevocationList(data)
	if err != nil {
		return fmt.Errorf("revocation list %s: %w", path, err)
	}
	signed := false
	for _, r := range st.roots {
		if crl.CheckSignatureFrom(r) == nil {
			signed = true
			break
		}
	}
	if !signed {
		return fmt.Errorf("revocation list %s is not signed by a CA of %s; sign it with the fleet's CA (lockhttp fleet revoke)", path, s.o.Files.CA)
	}
	st.revoked = map[string]bool{}
	issuer := hex.EncodeToString(crl.RawIssuer)
	for _, e := range crl.RevokedCertificateEntries {
		st.revoked[issuer+"/"+e.SerialNumber.Text(16)] = true
	}
	st.crlNext, st.crlName = crl.NextUpdate, path
	return nil
}

// denyList is the deny list file.
type denyList struct {
	ids     map[string]bool
	serials map[string]bool // lower-case hex, no leading zeros
	sha256  map[string]bool // lower-case hex
}

func loadDeny(path string) (denyList, error) {
	d := denyList{ids: map[string]bool{}, serials: map[string]bool{}, sha256: map[string]bool{}}
	data, err := readFile(path)
	if err != nil {
		return d, fmt.Errorf("deny list: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxFile)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		line = strings.TrimSpace(line)
		switch {
		case line == "":
		case strings.HasPrefix(line, "spiffe://"):
			id, err := ParseID(line)
			if err != nil {
				return d, fmt.Errorf("deny list %s:%d: %w", path, n, err)
			}
			d.ids[id.String()] = true
		case strings.HasPrefix(line, "serial:"):
			v := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(line, "serial:"), ":", ""))
			i, ok := new(big.Int).SetString(v, 16)
			if !ok {
				return d, fmt.Errorf("deny list %s:%d: %q is not a serial number in hex; write serial:HEX as lockhttp fleet issue prints it", path, n, line)
			}
			d.serials[i.Text(16)] = true
		case strings.HasPrefix(line, "sha256:"):
			v := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(line, "sha256:"), ":", ""))
			if b, err := hex.DecodeString(v); err != nil || len(b) != sha256.Size {
				return d, fmt.Errorf("deny list %s:%d: %q is not a SHA-256 in hex; write sha256: and 64 hex digits", path, n, line)
			}
			d.sha256[v] = true
		default:
			return d, fmt.Errorf("deny list %s:%d: %q is none of an identity (spiffe://...), serial:HEX or sha256:HEX", path, n, line)
		}
	}
	return d, nil
}

// Refresh reads the files again when one changed since they were last looked at, at most every
// Options.Every.
func (s *Source) Refresh() {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.Sub(s.checked) < s.o.Every && !now.Before(s.checked) {
		return
	}
	s.checked = now
	changed := false
	for _, p := range s.paths() {
		sig, err := sigOf(p)
		if err != nil {
			sig = fileSig{size: -1}
		}
		if old, ok := s.sigs[p]; !ok || old != sig {
			s.sigs[p] = sig
			changed = changed || ok
		}
	}
	if !changed {
		return
	}
	st, _ := s.readLocked(s.st.Load())
	s.st.Store(st)
	s.log.Info("mtls: files read again", "id", st.id.String(), "generation", st.gen, "revocation_error", errString(st.revErr))
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func (s *Source) paths() []string {
	f := s.o.Files
	out := []string{f.Cert, f.Key, f.CA}
	if f.CRL != "" {
		out = append(out, f.CRL)
	}
	if f.Deny != "" {
		out = append(out, f.Deny)
	}
	return out
}

// ID is the identity this process proves.
func (s *Source) ID() ID { return s.st.Load().id }

// Status is what a Source holds: the identity, its certificate's expiry, and the files that do
// not load as they are now.
type Status struct {
	ID       string    `json:"id"`
	NotAfter time.Time `json:"not_after"`
	// CRLNextUpdate is the revocation list's next update: past it every peer is refused.
	CRLNextUpdate time.Time `json:"crl_next_update,omitzero"`
	// Errors are the files that do not load, and why; a revocation file among them refuses
	// every peer.
	Errors []string `json:"errors,omitempty"`
}

// Status reports the source's state.
func (s *Source) Status() Status {
	st := s.st.Load()
	out := Status{ID: st.id.String(), NotAfter: st.leaf.NotAfter, CRLNextUpdate: st.crlNext}
	switch now := s.now(); {
	case now.After(st.leaf.NotAfter):
		out.Errors = append(out.Errors, fmt.Sprintf("%s expired at %s: every peer refuses it; issue a new one (lockhttp fleet issue --replace), which is read without a restart", s.o.Files.Cert, st.leaf.NotAfter.UTC().Format(time.RFC3339)))
	case now.Before(st.leaf.NotBefore):
		out.Errors = append(out.Errors, fmt.Sprintf("%s is valid from %s only: every peer refuses it until then; check this machine's clock", s.o.Files.Cert, st.leaf.NotBefore.UTC().Format(time.RFC3339)))
	}
	s.mu.Lock()
	for _, e := range s.errs {
		out.Errors = append(out.Errors, e)
	}
	s.mu.Unlock()
	slices.Sort(out.Errors[min(len(out.Errors), 1):])
	return out
}

// certificate is the certificate to present.
func (s *Source) certificate() *tls.Certificate {
	s.Refresh()
	return s.st.Load().cert
}

// Refusal is why a peer was refused.
type Refusal struct {
	// ID is the identity its certificate names, "" when none could be read.
	ID string
	// Fleet reports that its chain reaches the fleet's CA: a peer of the fleet refused for its
	// identity, its revocation or its expiry, rather than a stranger.
	Fleet bool
	// Reason says why, without any secret.
	Reason string
}

func (r *Refusal) Error() string {
	if r.ID != "" {
		return r.ID + ": " + r.Reason
	}
	return r.Reason
}

// verify checks a peer's chain as presented: it reaches the fleet's CA at now, names one
// identity in one URI SAN, is for usage (client or server authentication), is not revoked, and
// the identity is one allow admits. It returns the identity and when the first certificate of the
// verified chain expires.
func (st *state) verify(chain []*x509.Certificate, usage x509.ExtKeyUsage, allow Allow, now time.Time) (ID, time.Time, *Refusal) {
	if len(chain) == 0 {
		return ID{}, time.Time{}, &Refusal{Reason: "no certificate"}
	}
	sid, chains, err := x509svid.Verify(chain, bundleOf(st.roots), x509svid.WithTime(now))
	id := ID{sid}
	if err != nil {
		var inv x509.CertificateInvalidError
		fleet := errors.As(err, &inv) && inv.Reason == x509.Expired && st.reaches(chain)
		return id, time.Time{}, &Refusal{ID: id.String(), Fleet: fleet, Reason: "certificate refused: " + err.Error()}
	}
	leaf := chain[0]
	if !hasUsage(leaf, usage) {
		return id, time.Time{}, &Refusal{ID: id.String(), Fleet: true, Reason: fmt.Sprintf("the certificate is not for %s; issue one with lockhttp fleet issue", usageName(usage))}
	}
	if st.revErr != nil {
		return id, time.Time{}, &Refusal{ID: id.String(), Fleet: true, Reason: "every peer is refused while the revocation list does not load: " + st.revErr.Error()}
	}
	if !st.crlNext.IsZero() && now.After(st.crlNext) {
		return id, time.Time{}, &Refusal{ID: id.String(), Fleet: true, Reason: fmt.Sprintf("every peer is refused: the revocation list %s was due for its next update at %s; sign it again (lockhttp fleet revoke)", st.crlName, st.crlNext.UTC().Format(time.RFC3339))}
	}
	notAfter := leaf.NotAfter
	for _, c := range chains[0] {
		if c.NotAfter.Before(notAfter) {
			notAfter = c.NotAfter
		}
		if st.revoked[hex.EncodeToString(c.RawIssuer)+"/"+c.SerialNumber.Text(16)] {
			return id, time.Time{}, &Refusal{ID: id.String(), Fleet: true, Reason: "the certificate with serial " + c.SerialNumber.Text(16) + " is revoked (" + st.crlName + ")"}
		}
		if st.deny.serials[c.SerialNumber.Text(16)] {
			return id, time.Time{}, &Refusal{ID: id.String(), Fleet: true, Reason: "the certificate with serial " + c.SerialNumber.Text(16) + " is on the deny list"}
		}
		sum := sha256.Sum256(c.Raw)
		if st.deny.sha256[hex.EncodeToString(sum[:])] {
			return id, time.Time{}, &Refusal{ID: id.String(), Fleet: true, Reason: "the certificate with SHA-256 " + hex.EncodeToString(sum[:]) + " is on the deny list"}
		}
	}
	if st.deny.ids[id.String()] {
		return id, time.Time{}, &Refusal{ID: id.String(), Fleet: true, Reason: "the identity is on the deny list"}
	}
	if !allow.Admits(id) {
		return id, time.Time{}, &Refusal{ID: id.String(), Fleet: true, Reason: "the identity is not one this side admits (" + allow.String() + ")"}
	}
	return id, notAfter, nil
}

// reaches reports whether chain's signatures lead to one of the roots, whatever the time: an
// expired certificate of the fleet, rather than a stranger's.
func (st *state) reaches(chain []*x509.Certificate) bool {
	cert := chain[0]
	for range len(chain) {
		for _, r := range st.roots {
			if cert.CheckSignatureFrom(r) == nil {
				return true
			}
		}
		next := (*x509.Certificate)(nil)
		for _, c := range chain[1:] {
			if c.IsCA && cert.CheckSignatureFrom(c) == nil {
				next = c
				break
			}
		}
		if next == nil {
			return false
		}
		cert = next
	}
	return false
}

func hasUsage(c *x509.Certificate, u x509.ExtKeyUsage) bool {
	for _, e := range c.ExtKeyUsage {
		if e == u {
			return true
		}
	}
	return false
}

func usageName(u x509.ExtKeyUsage) string {
	if u == x509.ExtKeyUsageServerAuth {
		return "a server (TLS server authentication)"
	}
	return "a client (TLS client authentication)"
}
