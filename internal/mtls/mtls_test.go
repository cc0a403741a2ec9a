package mtls

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/testkit"
)

// fleet is a CA and its files in a directory, for the tests.
type fleet struct {
	t   *testing.T
	dir string
	ca  *CA
	now time.Time
}

func newFleet(t *testing.T) *fleet {
	t.Helper()
	now := time.Now()
	ca, err := NewCA("test fleet", now, 24*time.Hour, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	f := &fleet{t: t, dir: t.TempDir(), ca: ca, now: now}
	f.write("ca.pem", CertPEM(ca.Cert))
	return f
}

func (f *fleet) write(name string, data []byte) string {
	f.t.Helper()
	p := filepath.Join(f.dir, name)
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		f.t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		f.t.Fatal(err)
	}
	return p
}

// certOpts bends an issued certificate out of shape.
type certOpts struct {
	notBefore, notAfter time.Time
	usage               []x509.ExtKeyUsage
	uris                []string // instead of the identity's
	ca                  *CA      // another CA
}

// issue writes NAME.pem and NAME-key.pem for id and returns their Files (with the fleet's CA).
func (f *fleet) issue(name, id string, o certOpts) (Files, *x509.Certificate) {
	f.t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	serial, _ := newSerial(rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		NotBefore: f.now.Add(-time.Hour), NotAfter: f.now.Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
	}
	if !o.notBefore.IsZero() {
		tmpl.NotBefore = o.notBefore
	}
	if !o.notAfter.IsZero() {
		tmpl.NotAfter = o.notAfter
	}
	if o.usage != nil {
		tmpl.ExtKeyUsage = o.usage
	}
	uris := o.uris
	if uris == nil {
		uris = []string{id}
	}
	for _, u := range uris {
		pu, _ := url.Parse(u)
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	ca := f.ca
	if o.ca != nil {
		ca = o.ca
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		f.t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	kp, _ := KeyPEM(key)
	return Files{Cert: f.write(name+".pem", CertPEM(cert)), Key: f.write(name+"-key.pem", kp), CA: filepath.Join(f.dir, "ca.pem")}, cert
}

// server is a Server on loopback answering "ok <identity>".
type server struct {
	s     *Server
	addr  string
	mu    sync.Mutex
	seen  []string   // identities that reached the handler
	refs  []*Refusal // refusals told to Refused
	close func()
}

func (f *fleet) serve(files Files, allow Allow, clock *testkit.Clock) *server {
	f.t.Helper()
	o := Options{Files: files}
	if clock != nil {
		o.Now = clock.Now
		o.Every = time.Nanosecond
	}
	src, err := Load(o)
	if err != nil {
		f.t.Fatal(err)
	}
	sv := &server{}
	sv.s = NewServer(ServerOptions{Source: src, Allow: allow, Name: "test", Refused: func(remote string, r *Refusal) {
		sv.mu.Lock()
		sv.refs = append(sv.refs, r)
		sv.mu.Unlock()
	}})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.t.Fatal(err)
	}
	hs := &http.Server{ConnContext: ConnContext, ReadHeaderTimeout: 5 * time.Second, ErrorLog: log.New(io.Discard, "", 0), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := PeerOf(r)
		if !ok {
			http.Error(w, "no identity", 500)
			return
		}
		sv.mu.Lock()
		sv.seen = append(sv.seen, id.String())
		sv.mu.Unlock()
		io.WriteString(w, "ok "+id.String())
	})}
	go hs.Serve(sv.s.Listener(l))
	sv.addr = l.Addr().String()
	sv.close = func() { hs.Close() }
	f.t.Cleanup(sv.close)
	return sv
}

func (sv *server) refusals() []*Refusal {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	return append([]*Refusal(nil), sv.refs...)
}

func (sv *server) reached() []string {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	return append([]string(nil), sv.seen...)
}

// get makes one request over a new connection with cfg.
func get(addr string, cfg *tls.Config) (string, error) {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
	resp, err := c.Get("https://" + addr + "/")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b), nil
}

// rawClient is a client configuration from files, with no check of the server's identity (the
// tests of the server).
func rawClient(t *testing.T, files Files) *tls.Config {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(files.Cert, files.Key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}
}

const (
	gateA   = "spiffe://lockhttp/gate/a"
	console = "spiffe://lockhttp/console/main"
)

// TestServerRefuses: the server admits a gate of the fleet and refuses every other peer in the
// handshake; none reaches the handler, and each refusal of a fleet certificate is told with its
// identity and why.
func TestServerRefuses(t *testing.T) {
	f := newFleet(t)
	srvFiles, _ := f.issue("console", console, certOpts{})
	other, _ := NewCA("another fleet", f.now, time.Hour, rand.Reader)
	revokedFiles, revokedCert := f.issue("gate-revoked", "spiffe://lockhttp/gate/revoked", certOpts{})
	crl, err := f.ca.Revoke(nil, []*big.Int{revokedCert.SerialNumber}, f.now, time.Hour, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	srvFiles.CRL = f.write("crl.pem", crl)
	serialFiles, deniedSerial := f.issue("gate-deny-serial", "spiffe://lockhttp/gate/deny-serial", certOpts{})
	sumFiles, deniedSum := f.issue("gate-deny-sum", "spiffe://lockhttp/gate/deny-sum", certOpts{})
	sum := sha256.Sum256(deniedSum.Raw)
	srvFiles.Deny = f.write("deny.txt", []byte("# revoked by hand\nspiffe://lockhttp/gate/deny-id\nserial:"+deniedSerial.SerialNumber.Text(16)+"\nsha256:"+hex.EncodeToString(sum[:])+"  # the laptop\n"))
	sv := f.serve(srvFiles, MustAllow("spiffe://lockhttp/gate/*"), nil)

	good, _ := f.issue("gate-a", gateA, certOpts{})
	body, err := get(sv.addr, rawClient(t, good))
	if err != nil || body != "ok "+gateA {
		t.Fatalf("a gate of the fleet: %q, %v", body, err)
	}

	cases := []struct {
		name   string
		id     string
		o      certOpts
		fleet  bool   // the refusal is told (a certificate of the fleet)
		reason string // in the refusal
		use    *Files // these files rather than a new certificate
	}{
		{"expired", "spiffe://lockhttp/gate/old", certOpts{notBefore: f.now.Add(-3 * time.Hour), notAfter: f.now.Add(-time.Hour)}, true, "expired", nil},
		{"not yet valid", "spiffe://lockhttp/gate/early", certOpts{notBefore: f.now.Add(time.Hour), notAfter: f.now.Add(2 * time.Hour)}, true, "expired or is not yet valid", nil},
		{"foreign CA, same identity", gateA, certOpts{ca: other}, false, "unknown authority", nil},
		{"revoked (CRL)", "spiffe://lockhttp/gate/revoked", certOpts{}, true, "revoked", &revokedFiles},
		{"deny list: identity", "spiffe://lockhttp/gate/deny-id", certOpts{}, true, "identity is on the deny list", nil},
		{"deny list: serial", "spiffe://lockhttp/gate/deny-serial", certOpts{}, true, "serial " + deniedSerial.SerialNumber.Text(16) + " is on the deny list", &serialFiles},
		{"deny list: sha256", "spiffe://lockhttp/gate/deny-sum", certOpts{}, true, "SHA-256 " + hex.EncodeToString(sum[:]) + " is on the deny list", &sumFiles},
		{"another kind", "spiffe://lockhttp/facade/alice", certOpts{}, true, "not one this side admits", nil},
		{"a gate one level deeper", "spiffe://lockhttp/gate/a/b", certOpts{}, true, "not one this side admits", nil},
		{"a look-alike kind", "spiffe://lockhttp/gatex/a", certOpts{}, true, "not one this side admits", nil},
		{"another trust domain", "spiffe://example.org/gate/a", certOpts{}, true, "not one this side admits", nil},
		{"no URI SAN", "", certOpts{uris: []string{}}, false, "no URI SAN", nil},
		{"two URI SANs", gateA, certOpts{uris: []string{gateA, "spiffe://lockhttp/gate/b"}}, false, "more than one URI SAN", nil},
		{"not a SPIFFE URI", "", certOpts{uris: []string{"https://lockhttp/gate/a"}}, false, "scheme is missing or invalid", nil},
		{"server usage only", "spiffe://lockhttp/gate/srv", certOpts{usage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, true, "not for a client", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := len(sv.refusals())
			reachedBefore := len(sv.reached())
			files, _ := f.issue("peer", c.id, c.o)
			if c.use != nil {
				files = *c.use
			}
			if _, err := get(sv.addr, rawClient(t, files)); err == nil {
				t.Fatal("the server admitted it")
			}
			if n := len(sv.reached()); n != reachedBefore {
				t.Errorf("%d requests reached the handler", n-reachedBefore)
			}
			refs := sv.refusals()[before:]
			if !c.fleet {
				if len(refs) != 0 {
					t.Errorf("a stranger's refusal was told as the fleet's: %v", refs[0])
				}
				return
			}
			if len(refs) != 1 {
				t.Fatalf("%d refusals told, want 1", len(refs))
			}
			if refs[0].ID != c.id || !strings.Contains(refs[0].Reason, c.reason) {
				t.Errorf("refusal %q for %q; want one for %s saying %q", refs[0].Reason, refs[0].ID, c.id, c.reason)
			}
		})
	}
	t.Run("no certificate", func(t *testing.T) {
		if _, err := get(sv.addr, &tls.Config{InsecureSkipVerify: true}); err == nil {
			t.Fatal("the server admitted a client without a certificate")
		}
	})
}

// TestNoResumption: a client that keeps sessions gets none to resume (no ticket is issued), so
// a certificate revoked after its first connection is refused on the next, session cache and
// all.
func TestNoResumption(t *testing.T) {
	f := newFleet(t)
	srvFiles, _ := f.issue("console", console, certOpts{})
	srvFiles.Deny = f.write("deny.txt", nil)
	clock := testkit.NewClock(f.now)
	sv := f.serve(srvFiles, MustAllow("spiffe://lockhttp/gate/*"), clock)
	gate, _ := f.issue("gate-a", gateA, certOpts{})
	cache := &recordingCache{ClientSessionCache: tls.NewLRUClientSessionCache(8)}
	cfg := rawClient(t, gate)
	cfg.ClientSessionCache = cache
	dial := func() (*tls.Conn, error) {
		c, err := tls.Dial("tcp", sv.addr, cfg)
		if err != nil {
			return nil, err
		}
		// The ticket, if any, comes after the handshake: a request and its answer read it.
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		_, err = io.ReadAll(c)
		return c, err
	}
	for i := range 2 {
		c, err := dial()
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		if c.ConnectionState().DidResume {
			t.Fatalf("connection %d resumed a session", i)
		}
		c.Close()
	}
	if n := cache.puts(); n != 0 {
		t.Fatalf("the server issued %d session tickets; it must issue none", n)
	}
	// Revoked now: the client tries again with its cache.
	f.write("deny.txt", []byte(gateA+"\n"))
	clock.Advance(2 * time.Second)
	c, err := dial()
	if err == nil {
		t.Fatalf("a revoked gate was admitted (resumed: %v)", c.ConnectionState().DidResume)
	}
}

// recordingCache counts the sessions a server gave the client to resume.
type recordingCache struct {
	tls.ClientSessionCache
	mu sync.Mutex
	n  int
}

func (r *recordingCache) Put(key string, cs *tls.ClientSessionState) {
	if cs != nil {
		r.mu.Lock()
		r.n++
		r.mu.Unlock()
	}
	r.ClientSessionCache.Put(key, cs)
}

func (r *recordingCache) puts() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// TestReloadClosesRevoked: a connection open when its certificate is revoked (a new CRL), or
// when it expires, is closed by the watch; a deny list that stops loading refuses every peer
// until it loads again.
func TestReloadClosesRevoked(t *testing.T) {
	f := newFleet(t)
	srvFiles, _ := f.issue("console", console, certOpts{})
	crl, _ := f.ca.Revoke(nil, nil, f.now, 24*time.Hour, rand.Reader)
	srvFiles.CRL = f.write("crl.pem", crl)
	srvFiles.Deny = f.write("deny.txt", nil)
	clock := testkit.NewClock(f.now)
	sv := f.serve(srvFiles, MustAllow("spiffe://lockhttp/gate/*"), clock)
	gateFiles, gateCert := f.issue("gate-a", gateA, certOpts{})
	short, _ := f.issue("gate-short", "spiffe://lockhttp/gate/short", certOpts{notAfter: f.now.Add(10 * time.Minute)})

	open := func(files Files) net.Conn {
		c, err := tls.Dial("tcp", sv.addr, rawClient(t, files))
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		buf := make([]byte, 1024)
		if _, err := c.Read(buf); err != nil {
			t.Fatalf("the first answer: %v", err)
		}
		return c
	}
	closed := func(c net.Conn) bool {
		c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		var ne net.Error
		return err != nil && !(errors.As(err, &ne) && ne.Timeout())
	}
	a, s := open(gateFiles), open(short)
	sv.s.Recheck()
	if closed(a) || closed(s) {
		t.Fatal("a connection was closed with nothing revoked")
	}

	clock.Advance(11 * time.Minute) // past the short one's expiry
	sv.s.Recheck()
	if !closed(s) {
		t.Error("the connection whose certificate expired is still open")
	}
	if closed(a) {
		t.Fatal("the other connection was closed")
	}

	crl, _ = f.ca.Revoke(nil, []*big.Int{gateCert.SerialNumber}, clock.Now(), 24*time.Hour, rand.Reader)
	f.write("crl.pem", crl)
	clock.Advance(time.Second)
	sv.s.Recheck()
	if !closed(a) {
		t.Fatal("the connection of a revoked certificate is still open")
	}
	if _, err := get(sv.addr, rawClient(t, gateFiles)); err == nil {
		t.Fatal("a revoked certificate was admitted")
	}

	other, _ := f.issue("gate-b", "spiffe://lockhttp/gate/b", certOpts{})
	if _, err := get(sv.addr, rawClient(t, other)); err != nil {
		t.Fatalf("another gate: %v", err)
	}
	f.write("deny.txt", []byte("serial:not-hex\n"))
	clock.Advance(time.Second)
	if _, err := get(sv.addr, rawClient(t, other)); err == nil {
		t.Fatal("a deny list that does not load admitted a peer")
	}
	if st := sv.s.o.Source.Status(); len(st.Errors) == 0 || !strings.Contains(strings.Join(st.Errors, ";"), "deny.txt:1") {
		t.Errorf("status errors %q; want the deny list's line", st.Errors)
	}
	f.write("deny.txt", nil)
	clock.Advance(time.Second)
	if _, err := get(sv.addr, rawClient(t, other)); err != nil {
		t.Fatalf("the deny list loads again, and the gate is refused: %v", err)
	}

	// A revocation list past its next update refuses everyone.
	clock.Advance(25 * time.Hour)
	if _, err := get(sv.addr, rawClient(t, other)); err == nil {
		t.Fatal("a peer was admitted under a revocation list past its next update")
	}
}

// TestCertificateRotation: a new certificate for the same identity is presented from the next
// handshake; one that names another identity is not taken.
func TestCertificateRotation(t *testing.T) {
	f := newFleet(t)
	srvFiles, first := f.issue("console", console, certOpts{})
	clock := testkit.NewClock(f.now)
	sv := f.serve(srvFiles, MustAllow("spiffe://lockhttp/gate/*"), clock)
	gate, _ := f.issue("gate-a", gateA, certOpts{})
	presented := func() *x509.Certificate {
		c, err := tls.Dial("tcp", sv.addr, rawClient(t, gate))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0]
	}
	if !presented().Equal(first) {
		t.Fatal("not the first certificate")
	}
	_, second := f.issue("console", console, certOpts{})
	clock.Advance(time.Second)
	if !presented().Equal(second) {
		t.Fatal("the renewed certificate is not presented")
	}
	f.issue("console", "spiffe://lockhttp/console/other", certOpts{})
	clock.Advance(time.Second)
	if !presented().Equal(second) {
		t.Fatal("a certificate naming another identity was taken")
	}
	if st := sv.s.o.Source.Status(); st.ID != console || len(st.Errors) == 0 {
		t.Errorf("status %+v; want %s and the error", st, console)
	}
}

// TestClientConfig: the client admits the consoles it is told, by identity and the fleet's CA,
// not by host name, and keeps no session.
func TestClientConfig(t *testing.T) {
	f := newFleet(t)
	srvFiles, _ := f.issue("console", console, certOpts{})
	sv := f.serve(srvFiles, MustAllow("spiffe://lockhttp/gate/*"), nil)
	gateFiles, _ := f.issue("gate-a", gateA, certOpts{})
	src, err := Load(Options{Files: gateFiles})
	if err != nil {
		t.Fatal(err)
	}
	if src.ID().String() != gateA {
		t.Fatalf("ID %s", src.ID())
	}
	body, err := get(sv.addr, src.ClientConfig(MustAllow("spiffe://lockhttp/console/*")))
	if err != nil || body != "ok "+gateA {
		t.Fatalf("%q, %v", body, err)
	}
	if _, err := get(sv.addr, src.ClientConfig(MustAllow("spiffe://lockhttp/console/other"))); err == nil || !strings.Contains(err.Error(), "not one this side admits") {
		t.Errorf("a console not admitted: %v", err)
	}
	// A server of another CA, naming the console.
	other, _ := NewCA("another", f.now, time.Hour, rand.Reader)
	fake, _ := f.issue("fake", console, certOpts{ca: other})
	fakeCA := f.write("other-ca.pem", CertPEM(other.Cert))
	fake.CA = fakeCA
	fs := f.serve(fake, MustAllow("spiffe://lockhttp/gate/*"), nil)
	if _, err := get(fs.addr, src.ClientConfig(MustAllow("spiffe://lockhttp/console/*"))); err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Errorf("a console of another CA: %v", err)
	}
	// A gate's certificate, serving: not for a server.
	gateServing, _ := f.issue("gate-serving", console, certOpts{usage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	gs := f.serve(gateServing, MustAllow("spiffe://lockhttp/gate/*"), nil)
	if _, err := get(gs.addr, src.ClientConfig(MustAllow("spiffe://lockhttp/console/*"))); err == nil || !strings.Contains(err.Error(), "not for a server") {
		t.Errorf("a client certificate serving: %v", err)
	}
}

func TestLoadErrors(t *testing.T) {
	f := newFleet(t)
	good, _ := f.issue("gate-a", gateA, certOpts{})
	other, _ := NewCA("another", f.now, time.Hour, rand.Reader)
	foreign, _ := f.issue("foreign", gateA, certOpts{ca: other})
	noURI, _ := f.issue("nouri", "", certOpts{uris: []string{}})
	cases := []struct {
		name  string
		files Files
		want  string
	}{
		{"no certificate", Files{CA: good.CA}, "-tls-cert"},
		{"no CA", Files{Cert: good.Cert, Key: good.Key}, "-tls-ca"},
		{"key of another certificate", Files{Cert: good.Cert, Key: foreign.Key, CA: good.CA}, "private key does not match"},
		{"not the CA's", Files{Cert: foreign.Cert, Key: foreign.Key, CA: good.CA}, "does not verify against"},
		{"no identity", Files{Cert: noURI.Cert, Key: noURI.Key, CA: good.CA}, "one URI SAN"},
		{"CA is a leaf", Files{Cert: good.Cert, Key: good.Key, CA: good.Cert}, "is not a CA"},
		{"CRL of another CA", Files{Cert: good.Cert, Key: good.Key, CA: good.CA, CRL: func() string {
			crl, _ := other.Revoke(nil, nil, f.now, time.Hour, rand.Reader)
			return f.write("other.crl", crl)
		}()}, "not signed by a CA of"},
		{"deny list line", Files{Cert: good.Cert, Key: good.Key, CA: good.CA, Deny: f.write("bad-deny", []byte("\n\ngate/a\n"))}, "bad-deny:3"},
		{"missing file", Files{Cert: good.Cert, Key: good.Key, CA: filepath.Join(f.dir, "nope.pem")}, "no such file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(Options{Files: c.files})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Load: %v; want an error saying %q", err, c.want)
			}
		})
	}
}

func TestAllow(t *testing.T) {
	a := MustAllow("spiffe://lockhttp/gate/*", "spiffe://lockhttp/facade/alice")
	cases := map[string]bool{
		"spiffe://lockhttp/gate/a":       true,
		"spiffe://lockhttp/gate/ci-7.x_": true,
		"spiffe://lockhttp/facade/alice": true,
		"spiffe://lockhttp/facade/bob":   false,
		"spiffe://lockhttp/gate":         false,
		"spiffe://lockhttp/gate/a/b":     false,
		"spiffe://lockhttp/gatex/a":      false,
		"spiffe://lockhttp2/gate/a":      false,
		"spiffe://example.org/gate/a":    false,
	}
	for s, want := range cases {
		id, err := ParseID(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := a.Admits(id); got != want {
			t.Errorf("Admits(%s) = %v, want %v", s, got, want)
		}
	}
	if (Allow{}).Admits(mustID(t, "gate", "a")) {
		t.Error("the zero Allow admits")
	}
	for _, bad := range []string{"lockhttp/gate/*", "spiffe://lockhttp/gate/../x", "spiffe://LOCKHTTP/gate/a", "spiffe://lockhttp/gate/a?x", "spiffe://u@lockhttp/gate/a", "spiffe://lockhttp:1/gate/a", "spiffe://lockhttp/gate//a"} {
		if _, err := ParseAllow(bad); err == nil {
			t.Errorf("ParseAllow(%q) took it", bad)
		}
	}
	for _, bad := range [][2]string{{"gate", ""}, {"gate", ".."}, {"gate", "a/b"}, {"", "a"}, {"gate", "a b"}} {
		if _, err := NewID(bad[0], bad[1]); err == nil {
			t.Errorf("NewID(%q, %q) took it", bad[0], bad[1])
		}
	}
	id := mustID(t, "gate", "ci-1")
	if id.String() != "spiffe://lockhttp/gate/ci-1" || id.Kind() != "gate" || id.Name() != "ci-1" || id.Short() != "gate/ci-1" {
		t.Errorf("%s %s %s %s", id, id.Kind(), id.Name(), id.Short())
	}
}

func mustID(t *testing.T, kind, name string) ID {
	t.Helper()
	id, err := NewID(kind, name)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestWatchStops: Watch ends with its context.
func TestWatchStops(t *testing.T) {
	f := newFleet(t)
	files, _ := f.issue("console", console, certOpts{})
	src, err := Load(Options{Files: files})
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(ServerOptions{Source: src, Allow: MustAllow("spiffe://lockhttp/gate/*")})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Watch(ctx); close(done) }()
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Watch did not stop")
	}
}
