package signer

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/mtls"
	"github.com/lockhttp/lockhttp/internal/signerapi"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// rootCA makes a root with InitRootCA, valid from t0.
func rootCA(t *testing.T) *CA {
	t.Helper()
	ca, err := InitRootCA(filepath.Join(t.TempDir(), "root"), t0, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// fakeRoot answers a node's requests with root's intermediates, in process; fail makes it
// fail, calls counts the requests.
type fakeRoot struct {
	root   *CA
	policy RootPolicy
	clock  *testkit.Clock

	mu    sync.Mutex
	fail  error
	calls int
}

func (f *fakeRoot) fetch(_ context.Context, req signerapi.IntermediateRequest) (signerapi.IntermediateResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.fail != nil {
		return signerapi.IntermediateResponse{}, f.fail
	}
	pub, err := parsePublicKey(req.PublicKey)
	if err != nil {
		return signerapi.IntermediateResponse{}, err
	}
	_, der, err := IssueIntermediate(f.root, "spiffe://lockhttp/signer/n1", pub, f.policy, f.clock.Now(), rand.Reader)
	if err != nil {
		return signerapi.IntermediateResponse{}, err
	}
	return signerapi.IntermediateResponse{Certificate: string(pemCert(der)), Root: string(f.root.certPEM)}, nil
}

func (f *fakeRoot) setFail(err error) {
	f.mu.Lock()
	f.fail = err
	f.mu.Unlock()
}

func (f *fakeRoot) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func newTestNode(t *testing.T, f *fakeRoot) *Node {
	t.Helper()
	n, err := NewNode(NodeConfig{RootPEM: f.root.certPEM, Fetch: f.fetch, Now: f.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestRenewalSchedule: with an injected clock, a node asks the root at once, then not before
// two thirds of its intermediate's lifetime less the jitter; while renewals fail it signs with
// the current intermediate until that expires and then refuses (503), and it comes back at the
// next successful renewal.
func TestRenewalSchedule(t *testing.T) {
	const life = time.Hour
	clock := testkit.NewClock(t0.Add(time.Minute))
	f := &fakeRoot{root: rootCA(t), policy: RootPolicy{Lifetime: life}, clock: clock}
	n := newTestNode(t, f)
	srv := NewServer(ServerConfig{Node: n, AllowUIDs: []int{1}, Now: clock.Now})
	sign := func() (int, SignResponse) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		der, _ := x509.MarshalPKIXPublicKey(key.Public())
		body, _ := json.Marshal(SignRequest{Host: "api.example.com", PublicKey: base64.StdEncoding.EncodeToString(der)})
		rec := httptest.NewRecorder()
		srv.routes().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/sign", bytes.NewReader(body)))
		var sr SignResponse
		json.Unmarshal(rec.Body.Bytes(), &sr)
		return rec.Code, sr
	}
	if code, _ := sign(); code != http.StatusServiceUnavailable {
		t.Fatalf("a node holding no intermediate answered %d, want 503", code)
	}

	next := n.Step(context.Background())
	first := n.Current(clock.Now())
	if first == nil || f.count() != 1 {
		t.Fatalf("after the first step: intermediate %v, %d requests", first, f.count())
	}
	got := clock.Now()
	lo, hi := got.Add(life*2/3-life/10), got.Add(life*2/3)
	if next.Before(lo) || next.After(hi) {
		t.Fatalf("next renewal at %s, want between %s and %s (two thirds, less up to a tenth of jitter)", next, lo, hi)
	}
	if code, sr := sign(); code != http.StatusOK || sr.Chain == "" || sr.CA != string(f.root.certPEM) {
		t.Fatalf("sign: %d, chain %q, CA is the root: %v", code, sr.Chain, sr.CA == string(f.root.certPEM))
	}

	clock.Set(next.Add(-time.Second))
	if n.Step(context.Background()); f.count() != 1 {
		t.Fatalf("the node asked the root %d times before its renewal time", f.count())
	}
	clock.Set(next)
	next = n.Step(context.Background())
	second := n.Current(clock.Now())
	if f.count() != 2 || second == nil || second == first {
		t.Fatalf("at the renewal time: %d requests, renewed %v", f.count(), second != first)
	}

	// The root goes away: the node keeps the current intermediate until it expires, retrying.
	f.setFail(errors.New("root unreachable"))
	expiry := second.cert.NotAfter
	clock.Set(next)
	retry := n.Step(context.Background())
	if d := retry.Sub(clock.Now()); d < minRetry || d > life/30 {
		t.Errorf("retry in %s, want between %s and %s", d, minRetry, life/30)
	}
	if n.Current(clock.Now()) != second {
		t.Fatal("a failed renewal dropped the current intermediate")
	}
	h := n.Health()
	if h.Error == "" || h.Failed == "" || h.NotAfter != stamp(expiry) || h.Renewed == "" {
		t.Errorf("health after a failure: %+v", h)
	}
	for clock.Now().Before(expiry.Add(-time.Second)) {
		clock.Set(n.Step(context.Background()))
		if clock.Now().Before(expiry) {
			if code, sr := sign(); code != http.StatusOK {
				t.Fatalf("at %s, before the intermediate's expiry %s, sign answered %d", clock.Now(), expiry, code)
			} else if leaf := parseLeaf(t, sr.Certificate); leaf.NotAfter.After(expiry) {
				t.Fatalf("a leaf expires at %s, after its intermediate (%s)", leaf.NotAfter, expiry)
			}
		}
	}
	clock.Set(expiry)
	if n.Current(clock.Now()) != nil {
		t.Fatal("an expired intermediate is still current")
	}
	if code, _ := sign(); code != http.StatusServiceUnavailable {
		t.Fatalf("sign with an expired intermediate answered %d, want 503", code)
	}
	rec := httptest.NewRecorder()
	srv.routes().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/health", nil))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), `"role":"node"`) {
		t.Errorf("health with an expired intermediate: %d %s", rec.Code, rec.Body)
	}

	// The root is back: the next retry renews.
	f.setFail(nil)
	clock.Set(n.Step(context.Background()))
	n.Step(context.Background())
	if n.Current(clock.Now()) == nil {
		t.Fatal("the node did not renew once the root came back")
	}
	if code, _ := sign(); code != http.StatusOK {
		t.Fatalf("sign after the root came back: %d", code)
	}
}

func TestRenewAtAndRetryAfter(t *testing.T) {
	got := t0
	for _, tc := range []struct {
		name string
		life time.Duration
		j    float64
		want time.Duration
	}{
		{"8h, no jitter", 8 * time.Hour, 0, 8 * time.Hour * 2 / 3},
		{"8h, most jitter", 8 * time.Hour, 0.999999, 8*time.Hour*2/3 - 48*time.Minute},
		{"60s, half jitter", time.Minute, 0.5, 40*time.Second - 3*time.Second},
		{"expired", -time.Second, 0.5, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d := RenewAt(got, got.Add(tc.life), tc.j).Sub(got); d.Round(time.Second) != tc.want.Round(time.Second) {
				t.Errorf("RenewAt after %s, want %s", d, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name     string
		life     time.Duration
		failures int
		want     time.Duration
	}{
		{"8h: capped at a minute", 8 * time.Hour, 1, time.Minute},
		{"60s: a thirtieth", time.Minute, 5, 2 * time.Second},
		{"none held, first failure", 0, 1, time.Second},
		{"none held, third failure", 0, 3, 4 * time.Second},
		{"none held, many failures", 0, 40, time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d := RetryAfter(tc.life, tc.failures, 0); d != tc.want {
				t.Errorf("RetryAfter = %s, want %s", d, tc.want)
			}
			if d := RetryAfter(tc.life, tc.failures, 0.999); d < tc.want*4/5 || d > tc.want {
				t.Errorf("RetryAfter with jitter = %s, want within a fifth under %s", d, tc.want)
			}
		})
	}
}

func parseLeaf(t *testing.T, certPEM string) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode([]byte(certPEM))
	if block == nil {
		t.Fatalf("no PEM in %q", certPEM)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func bigOne() *big.Int { return big.NewInt(1) }

func rsaKeyB64(t *testing.T) string {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(k.Public())
	return base64.StdEncoding.EncodeToString(der)
}

// intermediate issues an intermediate of root for a new key, at now.
func intermediate(t *testing.T, root *CA, p RootPolicy, now time.Time) *CA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	cert, der, err := IssueIntermediate(root, "spiffe://lockhttp/signer/n1", key.Public(), p, now, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{cert: cert, certPEM: pemCert(der), key: key}
}

// verify checks leaf as a client trusting only root does at now, with the intermediate sent.
func verify(root, inter, leaf *x509.Certificate, host string, now time.Time) error {
	roots, inters := x509.NewCertPool(), x509.NewCertPool()
	roots.AddCert(root)
	inters.AddCert(inter)
	_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inters, DNSName: host, CurrentTime: now})
	return err
}

// TestLeafNeverOutlivesIntermediate: a leaf signed with a 60-second intermediate ends with it
// (not 24 h later) and starts no earlier; a client trusting the root accepts it until then and
// refuses it after.
func TestLeafNeverOutlivesIntermediate(t *testing.T) {
	root := rootCA(t)
	now := t0.Add(time.Hour)
	inter := intermediate(t, root, RootPolicy{Lifetime: time.Minute}, now)
	if inter.cert.NotAfter != now.Add(time.Minute) || !inter.cert.MaxPathLenZero || !inter.cert.IsCA {
		t.Fatalf("intermediate: until %s, path length zero %v", inter.cert.NotAfter, inter.cert.MaxPathLenZero)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	for _, at := range []time.Duration{0, 30 * time.Second, 59 * time.Second} {
		leaf, _, err := Sign(inter, "api.example.com", key.Public(), now.Add(at), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		if leaf.NotAfter.After(inter.cert.NotAfter) || leaf.NotBefore.Before(inter.cert.NotBefore) {
			t.Fatalf("signed at +%s: leaf valid %s..%s, its intermediate %s..%s", at, leaf.NotBefore, leaf.NotAfter, inter.cert.NotBefore, inter.cert.NotAfter)
		}
		if err := verify(root.cert, inter.cert, leaf, "api.example.com", now.Add(at)); err != nil {
			t.Fatalf("a client trusting the root refuses the leaf signed at +%s: %v", at, err)
		}
		if err := verify(root.cert, inter.cert, leaf, "api.example.com", inter.cert.NotAfter.Add(time.Second)); err == nil {
			t.Fatal("a client accepts a leaf after its intermediate expired")
		}
	}
	if _, _, err := Sign(inter, "api.example.com", key.Public(), inter.cert.NotAfter.Add(time.Second), rand.Reader); err == nil {
		t.Fatal("Sign issued a leaf with an expired intermediate")
	}
	// Never past the root either.
	late := intermediate(t, root, RootPolicy{Lifetime: 8 * time.Hour}, root.cert.NotAfter.Add(-time.Hour))
	if !late.cert.NotAfter.Equal(root.cert.NotAfter) {
		t.Errorf("an intermediate issued an hour before the root's expiry lasts until %s, past the root's %s", late.cert.NotAfter, root.cert.NotAfter)
	}
}

// TestNameConstraints: a root's permitted and excluded names go in the intermediate, critical;
// the node refuses to sign outside them, and a client refuses a leaf outside them even if a
// stolen intermediate key signed it.
func TestNameConstraints(t *testing.T) {
	root := rootCA(t)
	now := t0.Add(time.Hour)
	p := RootPolicy{PermittedDNS: []string{"example.com"}, ExcludedDNS: []string{"secret.example.com"}}
	inter := intermediate(t, root, p, now)
	if !inter.cert.PermittedDNSDomainsCritical || len(inter.cert.PermittedDNSDomains) != 1 || len(inter.cert.ExcludedDNSDomains) != 1 {
		t.Fatalf("constraints: permitted %v excluded %v critical %v", inter.cert.PermittedDNSDomains, inter.cert.ExcludedDNSDomains, inter.cert.PermittedDNSDomainsCritical)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	for _, tc := range []struct {
		host string
		ok   bool
	}{
		{"example.com", true},
		{"api.example.com", true},
		{"notexample.com", false},
		{"example.com.evil.org", false},
		{"other.org", false},
		{"secret.example.com", false},
		{"db.secret.example.com", false},
	} {
		t.Run(tc.host, func(t *testing.T) {
			leaf, _, err := Sign(inter, tc.host, key.Public(), now, rand.Reader)
			var ge *GuardError
			switch {
			case tc.ok && err != nil:
				t.Fatalf("Sign: %v", err)
			case tc.ok:
				if err := verify(root.cert, inter.cert, leaf, tc.host, now); err != nil {
					t.Fatalf("a client refuses %s: %v", tc.host, err)
				}
			case !errors.As(err, &ge) || ge.Guard != GuardNameConstraint:
				t.Fatalf("Sign %s: %v, want the %s guard", tc.host, err, GuardNameConstraint)
			}
			if tc.ok {
				return
			}
			// What a thief of the intermediate's key could sign, bypassing the guard.
			tmpl := &x509.Certificate{SerialNumber: bigOne(), Subject: pkix.Name{CommonName: tc.host}, DNSNames: []string{tc.host},
				NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Minute), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
			der, err := x509.CreateCertificate(rand.Reader, tmpl, inter.cert, key.Public(), inter.key)
			if err != nil {
				t.Fatal(err)
			}
			forged, _ := x509.ParseCertificate(der)
			if err := verify(root.cert, inter.cert, forged, tc.host, now); err == nil {
				t.Fatalf("a client accepts %s, outside the intermediate's constraints", tc.host)
			}
		})
	}
	for _, bad := range []RootPolicy{
		{Lifetime: time.Second},
		{PermittedDNS: []string{"*.example.com"}},
		{PermittedDNS: []string{"Example.COM"}},
		{ExcludedDNS: []string{"exa mple.com"}},
	} {
		if err := bad.Check(); err == nil {
			t.Errorf("policy %+v passed Check", bad)
		}
	}
}

// TestRootRefusesUnknownIdentities: over real mutual TLS, a node whose identity is on the root's
// list gets an intermediate; a node of the same fleet not on it, and a gate, get nothing (refused
// in the handshake, and by the handler should the listener admit them). A single signer's CA
// (path length zero) cannot be a root.
func TestRootRefusesUnknownIdentities(t *testing.T) {
	dir := t.TempDir()
	fleet, err := mtls.NewCA("test fleet", time.Now(), time.Hour, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ident := func(kind, name string) *mtls.Source {
		id, _ := mtls.NewID(kind, name)
		is, err := fleet.Issue(id, mtls.UsageOf(kind), nil, time.Now(), time.Hour, rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		kp, _ := mtls.KeyPEM(is.Key)
		base := filepath.Join(dir, kind+"-"+name)
		writeFile(t, base+".pem", mtls.CertPEM(is.Cert), 0o644)
		writeFile(t, base+"-key.pem", kp, 0o600)
		writeFile(t, filepath.Join(dir, "ca.pem"), mtls.CertPEM(fleet.Cert), 0o644)
		src, err := mtls.Load(mtls.Options{Files: mtls.Files{Cert: base + ".pem", Key: base + "-key.pem", CA: filepath.Join(dir, "ca.pem")}})
		if err != nil {
			t.Fatal(err)
		}
		return src
	}
	rootID, listed, unlisted, gate := ident("signer", "root"), ident("signer", "n1"), ident("signer", "n9"), ident("gate", "g")
	root, err := InitRootCA(filepath.Join(dir, "root"), time.Now(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	nodes := mtls.MustAllow("spiffe://lockhttp/signer/n1")
	rs := NewRootServer(RootConfig{CA: root, Policy: RootPolicy{Lifetime: time.Minute}})
	serve := func(tlsAllow mtls.Allow) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ms := mtls.NewServer(mtls.ServerOptions{Source: rootID, Allow: tlsAllow, Name: "root"})
		hs := &http.Server{Handler: rs.Handler(func(r *http.Request) (string, bool) {
			id, ok := mtls.PeerOf(r)
			return id.String(), ok && nodes.Admits(id)
		}), ConnContext: mtls.ConnContext}
		go hs.Serve(ms.Listener(l))
		t.Cleanup(func() { hs.Close() })
		return "https://" + l.Addr().String()
	}
	strict, loose := serve(nodes), serve(mtls.MustAllow("spiffe://lockhttp/signer/*", "spiffe://lockhttp/gate/*"))
	rootAllow := mtls.MustAllow("spiffe://lockhttp/signer/root")
	for _, tc := range []struct {
		name string
		src  *mtls.Source
		url  string
		want bool
		body string // what the refusal says, "" for a refusal in the handshake
	}{
		{"listed node", listed, strict, true, ""},
		{"unlisted node", unlisted, strict, false, ""},
		{"gate", gate, strict, false, ""},
		{"unlisted node, past the handshake", unlisted, loose, false, "403 Forbidden"},
		{"gate, past the handshake", gate, loose, false, "403 Forbidden"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := NewNode(NodeConfig{Root: tc.url, TLS: tc.src.ClientConfig(rootAllow), RootPEM: root.certPEM, Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			n.Step(context.Background())
			got := n.Current(time.Now())
			if (got != nil) != tc.want {
				t.Fatalf("intermediate %v, want %v (error %q)", got != nil, tc.want, n.Health().Error)
			}
			if !tc.want && !strings.Contains(n.Health().Error, tc.body) {
				t.Errorf("error %q, want it to say %q", n.Health().Error, tc.body)
			}
			if tc.want {
				if err := verifyCA(root.cert, got.cert); err != nil {
					t.Fatal(err)
				}
			}
		})
	}

	single, err := InitCA(filepath.Join(dir, "single"), time.Now(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckRoot(single, "single"); !errors.Is(err, ErrNotRoot) {
		t.Errorf("CheckRoot of a single signer's CA: %v", err)
	}
	if _, err := NewNode(NodeConfig{RootPEM: single.certPEM, Fetch: func(context.Context, signerapi.IntermediateRequest) (signerapi.IntermediateResponse, error) {
		return signerapi.IntermediateResponse{}, nil
	}}); err == nil {
		t.Error("NewNode took a root of path length zero")
	}
}

func verifyCA(root, inter *x509.Certificate) error {
	roots := x509.NewCertPool()
	roots.AddCert(root)
	_, err := inter.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return err
}

// TestNodeRefusesBadAnswers: a node keeps nothing that is not an intermediate of its root for
// its own key.
func TestNodeRefusesBadAnswers(t *testing.T) {
	clock := testkit.NewClock(t0.Add(time.Minute))
	root, other := rootCA(t), rootCA(t)
	for _, tc := range []struct {
		name string
		make func(req signerapi.IntermediateRequest) signerapi.IntermediateResponse
	}{
		{"another key", func(signerapi.IntermediateRequest) signerapi.IntermediateResponse {
			key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
			_, der, _ := IssueIntermediate(root, "n", key.Public(), RootPolicy{}, clock.Now(), rand.Reader)
			return signerapi.IntermediateResponse{Certificate: string(pemCert(der)), Root: string(root.certPEM)}
		}},
		{"another root", func(req signerapi.IntermediateRequest) signerapi.IntermediateResponse {
			pub, _ := parsePublicKey(req.PublicKey)
			_, der, _ := IssueIntermediate(other, "n", pub, RootPolicy{}, clock.Now(), rand.Reader)
			return signerapi.IntermediateResponse{Certificate: string(pemCert(der)), Root: string(other.certPEM)}
		}},
		{"signed by another root, sent with ours", func(req signerapi.IntermediateRequest) signerapi.IntermediateResponse {
			pub, _ := parsePublicKey(req.PublicKey)
			_, der, _ := IssueIntermediate(other, "n", pub, RootPolicy{}, clock.Now(), rand.Reader)
			return signerapi.IntermediateResponse{Certificate: string(pemCert(der)), Root: string(root.certPEM)}
		}},
		{"a leaf", func(req signerapi.IntermediateRequest) signerapi.IntermediateResponse {
			pub, _ := parsePublicKey(req.PublicKey)
			_, der, _ := Sign(root, "api.example.com", pub, clock.Now(), rand.Reader)
			return signerapi.IntermediateResponse{Certificate: string(pemCert(der)), Root: string(root.certPEM)}
		}},
		{"two certificates", func(req signerapi.IntermediateRequest) signerapi.IntermediateResponse {
			pub, _ := parsePublicKey(req.PublicKey)
			_, der, _ := IssueIntermediate(root, "n", pub, RootPolicy{}, clock.Now(), rand.Reader)
			return signerapi.IntermediateResponse{Certificate: string(pemCert(der)) + string(pemCert(der)), Root: string(root.certPEM)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := NewNode(NodeConfig{RootPEM: root.certPEM, Now: clock.Now, Fetch: func(_ context.Context, req signerapi.IntermediateRequest) (signerapi.IntermediateResponse, error) {
				return tc.make(req), nil
			}})
			if err != nil {
				t.Fatal(err)
			}
			n.Step(context.Background())
			if n.Current(clock.Now()) != nil || n.Health().Error == "" {
				t.Fatalf("the node kept it (error %q)", n.Health().Error)
			}
		})
	}
}

// TestRootServesNoLeaf: the root's handler signs intermediates only.
func TestRootServesNoLeaf(t *testing.T) {
	rs := NewRootServer(RootConfig{CA: rootCA(t), Now: func() time.Time { return t0.Add(time.Hour) }})
	h := rs.Handler(func(*http.Request) (string, bool) { return "spiffe://lockhttp/signer/n1", true })
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/sign", strings.NewReader(`{"host":"a.example","public_key":"x"}`)))
	if rec.Code != http.StatusNotFound {
		t.Errorf("POST /sign at the root: %d", rec.Code)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/intermediate", strings.NewReader(`{"public_key":"`+rsaKeyB64(t)+`"}`)))
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "P-256") {
		t.Errorf("an RSA intermediate key: %d %s", rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/intermediate", strings.NewReader(`{"public_key":"","extra":1}`)))
	if rec.Code != http.StatusBadRequest {
		t.Errorf("an unknown field: %d", rec.Code)
	}
}
