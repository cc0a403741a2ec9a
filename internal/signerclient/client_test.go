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
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/signer"
	"github.com/lockhttp/lockhttp/internal/signerapi"
	"github.com/lockhttp/lockhttp/internal/testkit"
	"github.com/lockhttp/lockhttp/internal/unixsock"
)

// t0 is the tests' "now".
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// shortDir makes a directory with a path short enough for a unix socket.
func shortDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// harness is a real signer on a unix socket, behind a wrapper that counts POST /sign calls and
// can hold them or answer 503 instead.
type harness struct {
	ca    *signer.CA
	sock  string
	clock *testkit.Clock
	calls atomic.Int64
	down  atomic.Bool              // answer 503
	hold  atomic.Pointer[chan any] // when set, a /sign call waits until the channel is closed
}

func startSigner(t testing.TB, edit func(*signer.ServerConfig)) *harness {
	t.Helper()
	ca, err := signer.InitCA(filepath.Join(t.TempDir(), "ca"), t0, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{ca: ca, sock: filepath.Join(shortDir(t), "signer.sock"), clock: testkit.NewClock(t0)}
	cfg := signer.ServerConfig{CA: ca, AllowUIDs: []int{os.Geteuid()}, Now: h.clock.Now, Rate: 1e9, Burst: 1 << 30}
	if edit != nil {
		edit(&cfg)
	}
	h.serve(t, h.wrap(signer.NewServer(cfg).Handler()), cfg.AllowUIDs)
	return h
}

func (h *harness) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/sign" {
			h.calls.Add(1)
			if ch := h.hold.Load(); ch != nil {
				<-*ch
			}
		}
		if h.down.Load() {
			http.Error(w, `{"error":"down for the test"}`, http.StatusServiceUnavailable)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// serve serves handler on h.sock as the signer does: uid checked at accept, peer in the context.
func (h *harness) serve(t testing.TB, handler http.Handler, uids []int) {
	t.Helper()
	l, err := unixsock.Listen(h.sock, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handler, ConnContext: unixsock.ConnContext}
	go srv.Serve(signer.AllowUIDs(l, uids, nil))
	t.Cleanup(func() { srv.Close() })
}

func (h *harness) client(t testing.TB, edit func(*Options)) *Client {
	t.Helper()
	o := Options{Socket: h.sock, Now: h.clock.Now}
	if edit != nil {
		edit(&o)
	}
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCertificate(t *testing.T) {
	h := startSigner(t, nil)
	c := h.client(t, nil)
	cert, err := c.Certificate(context.Background(), "api.example.com")
	if err != nil {
		t.Fatal(err)
	}
	if len(cert.Certificate) != 2 || string(cert.Certificate[1]) != string(h.ca.Cert().Raw) {
		t.Fatalf("chain of %d, want leaf then CA", len(cert.Certificate))
	}
	if cert.Leaf == nil || string(cert.Leaf.Raw) != string(cert.Certificate[0]) {
		t.Fatal("Leaf is not the first certificate")
	}
	if cert.PrivateKey != c.key || !c.key.PublicKey.Equal(cert.Leaf.PublicKey) {
		t.Error("the certificate is not for the gate's key")
	}

	// It serves a real TLS handshake that a client trusting only the CA accepts for that name.
	roots := x509.NewCertPool()
	roots.AddCert(h.ca.Cert())
	for _, tc := range []struct {
		name string
		ok   bool
	}{{"api.example.com", true}, {"www.example.com", false}} {
		t.Run(tc.name, func(t *testing.T) {
			sc, cc := net.Pipe()
			srv := tls.Server(sc, &tls.Config{Certificates: []tls.Certificate{*cert}})
			go srv.Handshake()
			cl := tls.Client(cc, &tls.Config{RootCAs: roots, ServerName: tc.name, Time: h.clock.Now})
			err := cl.Handshake()
			cc.Close() // the raw pipe: a TLS close_notify would wait for a reader
			sc.Close()
			if (err == nil) != tc.ok {
				t.Errorf("handshake for %s: %v, want ok=%v", tc.name, err, tc.ok)
			}
		})
	}

	if err := c.Health(context.Background()); err != nil {
		t.Errorf("Health: %v", err)
	}
}

func TestCacheHit(t *testing.T) {
	h := startSigner(t, nil)
	c := h.client(t, nil)
	a, err := c.Certificate(context.Background(), "example.com")
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Certificate(context.Background(), "example.com")
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Error("the second call returned another certificate")
	}
	if n := h.calls.Load(); n != 1 {
		t.Errorf("%d signer calls for two requests of one host, want 1", n)
	}
	if _, err := c.Certificate(context.Background(), "www.example.com"); err != nil {
		t.Fatal(err)
	}
	if n := h.calls.Load(); n != 2 {
		t.Errorf("%d signer calls for two hosts, want 2", n)
	}
}

func TestSingleflight(t *testing.T) {
	h := startSigner(t, nil)
	c := h.client(t, nil)
	release := make(chan any)
	h.hold.Store(&release)

	const n = 100
	var started, done sync.WaitGroup
	started.Add(n)
	done.Add(n)
	certs := make([]*tls.Certificate, n)
	errs := make([]error, n)
	for i := range n {
		go func() {
			defer done.Done()
			started.Done()
			certs[i], errs[i] = c.Certificate(context.Background(), "new.example.com")
		}()
	}
	started.Wait()
	// The signer has the first call and holds it: every caller so far is waiting on it.
	testkit.WaitFor(t, 10*time.Second, "the signer to get the first call", func() bool { return h.calls.Load() > 0 })
	close(release)
	done.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if certs[i] != certs[0] {
			t.Fatalf("caller %d got another certificate", i)
		}
	}
	if got := h.calls.Load(); got != 1 {
		t.Errorf("%d signer calls for %d concurrent first requests, want 1", got, n)
	}
}

func TestCallerGivingUpDoesNotFailOthers(t *testing.T) {
	h := startSigner(t, nil)
	c := h.client(t, nil)
	release := make(chan any)
	h.hold.Store(&release)
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		_, err := c.Certificate(ctx, "example.com")
		first <- err
	}()
	testkit.WaitFor(t, 10*time.Second, "the signer to get the first call", func() bool { return h.calls.Load() > 0 })
	second := make(chan error, 1)
	go func() {
		_, err := c.Certificate(context.Background(), "example.com")
		second <- err
	}()
	cancel()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled caller: %v, want context.Canceled", err)
	}
	close(release)
	if err := <-second; err != nil {
		t.Errorf("the other caller: %v", err)
	}
	if n := h.calls.Load(); n != 1 {
		t.Errorf("%d signer calls, want 1", n)
	}
}

func TestLRU(t *testing.T) {
	h := startSigner(t, nil)
	c := h.client(t, func(o *Options) { o.MaxEntries = 10 })
	ctx := context.Background()
	host := func(i int) string { return fmt.Sprintf("h%d.example.com", i) }
	for i := range 25 {
		if _, err := c.Certificate(ctx, host(i)); err != nil {
			t.Fatal(err)
		}
	}
	if len(c.entries) != 10 || c.lru.Len() != 10 {
		t.Fatalf("%d entries, %d in the LRU list; want 10", len(c.entries), c.lru.Len())
	}
	calls := h.calls.Load()
	// h15..h24 are cached; touching h15 makes h16 the least recently used.
	if _, err := c.Certificate(ctx, host(15)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Certificate(ctx, host(25)); err != nil {
		t.Fatal(err)
	}
	if got := h.calls.Load() - calls; got != 1 {
		t.Errorf("%d signer calls for a cached host and a new one, want 1", got)
	}
	if _, ok := c.entries[host(15)]; !ok {
		t.Error("h15, recently used, was evicted")
	}
	if _, ok := c.entries[host(16)]; ok {
		t.Error("h16, the least recently used, is still cached")
	}
	if len(c.entries) != 10 {
		t.Errorf("%d entries, want 10", len(c.entries))
	}
	calls = h.calls.Load()
	if _, err := c.Certificate(ctx, host(0)); err != nil {
		t.Fatal(err)
	}
	if h.calls.Load() != calls+1 {
		t.Error("an evicted host was served without a signer call")
	}
}

// settle waits until no signer call is under way.
func settle(t *testing.T, c *Client) {
	t.Helper()
	testkit.WaitFor(t, 10*time.Second, "no signer call under way", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.inflight) == 0
	})
}

func TestRenewal(t *testing.T) {
	h := startSigner(t, nil)
	c := h.client(t, nil) // Renew: 2h
	ctx := context.Background()
	get := func(step string) *tls.Certificate {
		t.Helper()
		cert, err := c.Certificate(ctx, "example.com")
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		return cert
	}
	first := get("first")
	expires := first.Leaf.NotAfter // t0 + 24h

	h.clock.Set(expires.Add(-DefaultRenew - time.Minute))
	if get("before the renewal window") != first || h.calls.Load() != 1 {
		t.Fatal("renewed too early")
	}

	h.clock.Set(expires.Add(-DefaultRenew + time.Minute))
	if get("in the renewal window") != first {
		t.Error("the renewal window did not serve the cached certificate at once")
	}
	settle(t, c)
	second := get("after the renewal")
	if h.calls.Load() != 2 || second == first || !second.Leaf.NotAfter.After(expires) {
		t.Fatalf("not renewed: %d calls, expires %s", h.calls.Load(), second.Leaf.NotAfter)
	}

	// The signer fails: the cached certificate is served until it expires, with a new attempt
	// every renewRetry, never at every request.
	h.down.Store(true)
	expires = second.Leaf.NotAfter
	now := expires.Add(-DefaultRenew + time.Minute)
	h.clock.Set(now)
	if get("renewal failing") != second {
		t.Fatal("a failing renewal did not serve the cached certificate")
	}
	settle(t, c)
	if get("renewal failed") != second || h.calls.Load() != 3 {
		t.Fatalf("after a failed renewal: %d calls, want 3", h.calls.Load())
	}
	settle(t, c)
	if h.calls.Load() != 3 {
		t.Errorf("retried at once: %d calls, want 3", h.calls.Load())
	}
	h.clock.Set(now.Add(renewRetry))
	if get("retry") != second {
		t.Fatal("the retry did not serve the cached certificate")
	}
	settle(t, c)
	if h.calls.Load() != 4 {
		t.Errorf("no retry after renewRetry: %d calls, want 4", h.calls.Load())
	}
	h.clock.Set(expires.Add(-time.Second))
	if get("a second before expiry") != second {
		t.Error("the cached certificate was not served up to its expiry")
	}
	settle(t, c)

	h.clock.Set(expires)
	if _, err := c.Certificate(ctx, "example.com"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("expired and the signer down: %v, want ErrUnavailable", err)
	}
	h.down.Store(false)
	if third := get("signer back"); third == second || !third.Leaf.NotAfter.After(expires) {
		t.Error("not renewed once the signer is back")
	}
}

func TestSignerUnavailable(t *testing.T) {
	ctx := context.Background()
	t.Run("no socket", func(t *testing.T) {
		c, err := New(Options{Socket: filepath.Join(shortDir(t), "none.sock")})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Certificate(ctx, "example.com"); !errors.Is(err, ErrUnavailable) {
			t.Errorf("Certificate: %v, want ErrUnavailable", err)
		}
		if err := c.Health(ctx); !errors.Is(err, ErrUnavailable) {
			t.Errorf("Health: %v, want ErrUnavailable", err)
		}
	})
	t.Run("5xx", func(t *testing.T) {
		h := startSigner(t, nil)
		h.down.Store(true)
		_, err := h.client(t, nil).Certificate(ctx, "example.com")
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "503") {
			t.Errorf("%v, want ErrUnavailable naming 503", err)
		}
	})
	t.Run("rate limited", func(t *testing.T) {
		h := startSigner(t, func(c *signer.ServerConfig) { c.Rate, c.Burst = 0.001, 1 })
		c := h.client(t, nil)
		if _, err := c.Certificate(ctx, "a.example.com"); err != nil {
			t.Fatal(err)
		}
		_, err := c.Certificate(ctx, "b.example.com")
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "rate limiting") {
			t.Errorf("%v, want ErrUnavailable for rate limiting", err)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		h := startSigner(t, nil)
		release := make(chan any)
		h.hold.Store(&release)
		defer close(release)
		_, err := h.client(t, func(o *Options) { o.Timeout = 50 * time.Millisecond }).Certificate(ctx, "example.com")
		if !errors.Is(err, ErrUnavailable) {
			t.Errorf("%v, want ErrUnavailable", err)
		}
	})
	t.Run("uid not allowed", func(t *testing.T) {
		h := startSigner(t, func(c *signer.ServerConfig) { c.AllowUIDs = []int{os.Geteuid() + 4242} })
		_, err := h.client(t, nil).Certificate(ctx, "example.com")
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), fmt.Sprintf("--allow-uid %d", os.Geteuid())) {
			t.Errorf("%v, want ErrUnavailable naming --allow-uid", err)
		}
	})
}

func TestRefusedName(t *testing.T) {
	h := startSigner(t, nil)
	c := h.client(t, nil)
	for i := range 2 {
		_, err := c.Certificate(context.Background(), "169.254.169.254")
		var re *RefusedError
		if !errors.As(err, &re) || errors.Is(err, ErrUnavailable) {
			t.Fatalf("%v, want a *RefusedError", err)
		}
		if !strings.Contains(re.Reason, "floor:ip-literal") {
			t.Errorf("reason %q does not name the check", re.Reason)
		}
		if n := h.calls.Load(); n != int64(i+1) {
			t.Errorf("a refusal was cached: %d calls after %d requests", n, i+1)
		}
	}
}

// testCA is a CA made in the test, for a fake signer that issues what the signer never would.
type testCA struct {
	key  *ecdsa.PrivateKey
	cert *x509.Certificate
	pem  string
}

func newTestCA(t *testing.T, isCA bool) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: t0.Add(-time.Hour), NotAfter: t0.Add(1000 * time.Hour), IsCA: isCA, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{key, cert, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))}
}

func (ca *testCA) issue(t *testing.T, tmpl *x509.Certificate, pub any) []byte {
	t.Helper()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func TestRejectsBadCertificates(t *testing.T) {
	ca := newTestCA(t, true)
	otherCA := newTestCA(t, true)
	notCA := newTestCA(t, false)
	otherKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	pemOf := func(ders ...[]byte) string {
		var s string
		for _, d := range ders {
			s += string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: d}))
		}
		return s
	}
	leafTmpl := func(host string) *x509.Certificate {
		return &x509.Certificate{SerialNumber: big.NewInt(42), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
			NotBefore: t0.Add(-time.Hour), NotAfter: t0.Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true}
	}
	// Each case changes what a well-behaved signer would send for the request.
	cases := []struct {
		name   string
		modify func(tmpl *x509.Certificate, pub *any, issuer **testCA, resp *signerapi.SignResponse)
		after  func(resp *signerapi.SignResponse) // after the certificate is filled in
		want   string
	}{
		{"good (control)", nil, nil, ""},
		{"another name", func(tm *x509.Certificate, _ *any, _ **testCA, _ *signerapi.SignResponse) {
			tm.DNSNames = []string{"evil.example.net"}
		}, nil, `names ["evil.example.net"]`},
		{"a second name", func(tm *x509.Certificate, _ *any, _ **testCA, _ *signerapi.SignResponse) {
			tm.DNSNames = append(tm.DNSNames, "evil.example.net")
		}, nil, "not exactly"},
		{"an IP address too", func(tm *x509.Certificate, _ *any, _ **testCA, _ *signerapi.SignResponse) {
			tm.IPAddresses = []net.IP{net.IPv4(10, 0, 0, 1)}
		}, nil, "IP addresses"},
		{"another key", func(_ *x509.Certificate, pub *any, _ **testCA, _ *signerapi.SignResponse) {
			*pub = otherKey.Public()
		}, nil, "another public key"},
		{"a CA certificate", func(tm *x509.Certificate, _ *any, _ **testCA, _ *signerapi.SignResponse) {
			tm.IsCA = true
			tm.KeyUsage |= x509.KeyUsageCertSign
		}, nil, "is a CA certificate"},
		{"expired", func(tm *x509.Certificate, _ *any, _ **testCA, _ *signerapi.SignResponse) {
			tm.NotBefore, tm.NotAfter = t0.Add(-48*time.Hour), t0.Add(-time.Second)
		}, nil, "expired"},
		{"not yet valid", func(tm *x509.Certificate, _ *any, _ **testCA, _ *signerapi.SignResponse) {
			tm.NotBefore = t0.Add(time.Hour)
		}, nil, "not yet valid"},
		{"client auth only", func(tm *x509.Certificate, _ *any, _ **testCA, _ *signerapi.SignResponse) {
			tm.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		}, nil, "incompatible key usage"},
		{"signed by another CA", func(_ *x509.Certificate, _ *any, is **testCA, _ *signerapi.SignResponse) {
			*is = otherCA
		}, nil, "unknown authority"},
		{"issuer not a CA", func(_ *x509.Certificate, _ *any, is **testCA, _ *signerapi.SignResponse) {
			*is = notCA
		}, nil, "not a CA certificate"},
		{"two certificates", nil, func(r *signerapi.SignResponse) { r.Certificate += r.Certificate }, "not exactly one PEM"},
		{"garbage certificate", nil, func(r *signerapi.SignResponse) { r.Certificate = "hello" }, "not exactly one PEM"},
		{"garbage CA", nil, func(r *signerapi.SignResponse) { r.CA = "" }, "ca is not exactly one PEM"},
		{"serial differs", nil, func(r *signerapi.SignResponse) { r.Serial = "1" }, "serial"},
		{"not_after differs", nil, func(r *signerapi.SignResponse) { r.NotAfter = t0.Format(time.RFC3339) }, "not_after"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int64
			fake := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				var req signerapi.SignRequest
				json.NewDecoder(r.Body).Decode(&req)
				der, _ := base64.StdEncoding.DecodeString(req.PublicKey)
				pub, err := x509.ParsePKIXPublicKey(der)
				if err != nil {
					http.Error(w, err.Error(), 500)
					return
				}
				tmpl, issuer := leafTmpl(req.Host), ca
				resp := signerapi.SignResponse{}
				if tc.modify != nil {
					tc.modify(tmpl, &pub, &issuer, &resp)
				}
				leaf := issuer.issue(t, tmpl, pub)
				resp.Certificate, resp.CA = pemOf(leaf), issuer.pem
				resp.Serial, resp.NotAfter = tmpl.SerialNumber.Text(16), tmpl.NotAfter.UTC().Format(time.RFC3339)
				if issuer == otherCA {
					resp.CA = ca.pem // the CA the client is told about is not the one that signed
				}
				if tc.after != nil {
					tc.after(&resp)
				}
				json.NewEncoder(w).Encode(resp)
			})
			h := &harness{sock: filepath.Join(shortDir(t), "fake.sock"), clock: testkit.NewClock(t0)}
			h.serve(t, fake, []int{os.Geteuid()})
			c := h.client(t, nil)
			for i := range 2 {
				cert, err := c.Certificate(context.Background(), "example.com")
				if tc.want == "" {
					if err != nil {
						t.Fatalf("the control was rejected: %v", err)
					}
					if cert.Leaf.DNSNames[0] != "example.com" {
						t.Fatal("bad control")
					}
					return
				}
				if err == nil {
					t.Fatal("accepted")
				}
				var re *RefusedError
				if errors.Is(err, ErrUnavailable) || errors.As(err, &re) {
					t.Errorf("%v: a bad certificate is neither unavailability nor a refusal", err)
				}
				if !strings.Contains(err.Error(), tc.want) {
					t.Errorf("error %q does not say %q", err, tc.want)
				}
				if calls.Load() != int64(i+1) {
					t.Errorf("a rejected certificate was cached")
				}
			}
			if len(c.entries) != 0 {
				t.Error("a rejected certificate is in the cache")
			}
		})
	}
}

func TestNewChecksOptions(t *testing.T) {
	cases := []struct {
		name string
		o    Options
		want string
	}{
		{"no socket", Options{}, "Options.Socket is empty"},
		{"negative timeout", Options{Socket: "/x", Timeout: -1}, "must not be negative"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v, want %q", err, tc.want)
			}
		})
	}
	c, err := New(Options{Socket: "/x"})
	if err != nil {
		t.Fatal(err)
	}
	if c.max != DefaultMaxEntries || c.renew != DefaultRenew || c.timeout != DefaultTimeout {
		t.Errorf("defaults: %d %s %s", c.max, c.renew, c.timeout)
	}
}

func TestRenewalFailureIsLogged(t *testing.T) {
	h := startSigner(t, nil)
	var logs strings.Builder
	var mu sync.Mutex
	c := h.client(t, func(o *Options) {
		o.Logger = slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			return logs.Write(p)
		}), nil))
	})
	cert, err := c.Certificate(context.Background(), "example.com")
	if err != nil {
		t.Fatal(err)
	}
	h.down.Store(true)
	h.clock.Set(cert.Leaf.NotAfter.Add(-time.Minute))
	c.Certificate(context.Background(), "example.com")
	settle(t, c)
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logs.String(), "certificate renewal failed") || !strings.Contains(logs.String(), "host=example.com") {
		t.Errorf("log: %s", logs.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

var _ io.Writer = writerFunc(nil)
