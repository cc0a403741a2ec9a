package gate

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/egress"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/signer"
	"github.com/lockhttp/lockhttp/internal/signerclient"
	"github.com/lockhttp/lockhttp/internal/wsframe"
)

// tlsGate is a decrypting gate with a real signer on a unix socket and an HTTPS origin whose
// certificate covers origin.test and *.bench.test.
type tlsGate struct {
	addr   string
	gate   *Gate
	caPool *x509.CertPool
	origin *httptest.Server
	port   int
	roots  *x509.CertPool // trusts the origin
	certs  *signerclient.Client
	audit  string // the audit directory
}

// anyTestResolver answers 127.0.0.1 for every name, so benchmarks can use many host names.
type anyTestResolver struct{}

func (anyTestResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
}

func startTLSGate(t testing.TB, handler http.Handler) *tlsGate {
	t.Helper()
	return startTLSGateWith(t, handler, nil)
}

// startTLSGateWith is startTLSGate with the gate's Config adjusted.
func startTLSGateWith(t testing.TB, handler http.Handler, adjust func(*Config)) *tlsGate {
	t.Helper()
	dir := t.TempDir()
	ca, err := signer.InitCA(filepath.Join(dir, "ca"), time.Now(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "signer.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := signer.NewServer(signer.ServerConfig{CA: ca, AllowUIDs: []int{os.Geteuid()}, Rate: 1e6, Burst: 1e6})
	ctx, cancel := context.WithCancel(context.Background())
	go srv.Serve(ctx, l)
	certs, err := signerclient.New(signerclient.Options{Socket: sock})
	if err != nil {
		t.Fatal(err)
	}
	// The origin's own root, which the gate trusts.
	rootKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	rootT := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "origin root"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	rootDER, _ := x509.CreateCertificate(rand.Reader, rootT, rootT, &rootKey.PublicKey, rootKey)
	root, _ := x509.ParseCertificate(rootDER)
	leafKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leafT := &x509.Certificate{SerialNumber: big.NewInt(2), DNSNames: []string{"origin.test", "*.bench.test"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	leafDER, _ := x509.CreateCertificate(rand.Reader, leafT, root, &leafKey.PublicKey, rootKey)
	origin := httptest.NewUnstartedServer(handler)
	origin.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{leafDER}, PrivateKey: leafKey}}}
	origin.StartTLS()
	port := origin.Listener.Addr().(*net.TCPAddr).Port
	roots := x509.NewCertPool()
	roots.AddCert(root)

	aw, err := audit.Open(audit.Options{Dir: filepath.Join(dir, "audit")})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Audit: aw, Dialer: &egress.Dialer{Resolver: anyTestResolver{}}, RootCAs: roots, Certs: certs, Metrics: benchMetrics}
	if adjust != nil {
		adjust(&cfg)
	}
	g := New(cfg)
	p, err := policy.Load("tls.toml", []byte(fmt.Sprintf(`version = 1
trusted = ["origin.test", "*.bench.test"]
[[rule]]
name = "no-posts"
hosts = ["origin.test"]
methods = ["POST"]
verdict = "deny"
[[rule]]
name = "puts"
hosts = ["origin.test"]
methods = ["PUT"]
verdict = "free"
[floor]
allow_cidrs = ["127.0.0.1/32"]
allow_ports = [%d]
[sources]
local = ["127.0.0.0/8"]
`, port)))
	if err != nil {
		t.Fatal(err)
	}
	g.SetPolicy(p)
	gl, _ := net.Listen("tcp", "127.0.0.1:0")
	done := make(chan struct{})
	go func() { g.Serve(ctx, gl); close(done) }()
	t.Cleanup(func() { cancel(); <-done; origin.Close(); aw.Close() })
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert())
	return &tlsGate{addr: gl.Addr().String(), gate: g, caPool: pool, origin: origin, port: port, roots: roots, certs: certs, audit: filepath.Join(dir, "audit")}
}

func (tg *tlsGate) client() *http.Client {
	u, _ := url.Parse("http://" + tg.addr)
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u), TLSClientConfig: &tls.Config{RootCAs: tg.caPool},
		MaxIdleConnsPerHost: 64}, Timeout: 10 * time.Second}
}

func TestWebSocketInsideATunnel(t *testing.T) {
	tg := startTLSGate(t, http.HandlerFunc(wsEchoOrigin))
	c, err := net.Dial("tcp", tg.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	o := fmt.Sprintf("origin.test:%d", tg.port)
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", o, o)
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"}); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	tc := tls.Client(c, &tls.Config{ServerName: "origin.test", RootCAs: tg.caPool})
	fmt.Fprintf(tc, "GET /ws HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", o)
	tbr := bufio.NewReader(tc)
	resp, err := http.ReadResponse(tbr, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade inside the tunnel: %v %v", resp, err)
	}
	wsWrite(tc, wsframe.Text, true, "frames pass")
	if _, p, err := wsRead(tbr); err != nil || p != "echo:frames pass" {
		t.Fatalf("after the upgrade: %q %v", p, err)
	}
}

func TestDecryptedKeepAliveDecidesEveryRequest(t *testing.T) {
	tg := startTLSGate(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	c := tg.client()
	url := fmt.Sprintf("https://origin.test:%d/x", tg.port)
	for i := 0; i < 5; i++ {
		resp, err := c.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET: %d", resp.StatusCode)
		}
		resp, err = c.Post(url, "text/plain", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 403 || resp.Header.Get(HeaderRule) != "no-posts" {
			t.Fatalf("POST: %d %s", resp.StatusCode, resp.Header.Get(HeaderRule))
		}
	}
}

// TestTunnelSessionsResume: a client that keeps its TLS sessions resumes on its next decrypted
// tunnel (the tunnels share the gate's session-ticket key), and the resumed tunnel is still
// bound to its host: a ClientHello naming another host is refused, resumed or not.
func TestTunnelSessionsResume(t *testing.T) {
	tg := startTLSGate(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	cache := tls.NewLRUClientSessionCache(8)
	o := fmt.Sprintf("origin.test:%d", tg.port)
	tunnel := func(sni string) (*tls.Conn, error) {
		c := dialGate(t, tg.addr)
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", o, o)
		br := bufio.NewReader(c)
		if resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"}); err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		tc := tls.Client(c, &tls.Config{ServerName: sni, RootCAs: tg.caPool, ClientSessionCache: cache, NextProtos: []string{"http/1.1"}})
		if err := tc.Handshake(); err != nil {
			return nil, err
		}
		// The session ticket comes after the handshake: a request and its answer read it.
		fmt.Fprintf(tc, "GET /x HTTP/1.1\r\nHost: %s\r\n\r\n", o)
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET in the tunnel: %v %v", resp, err)
		}
		resp.Body.Close()
		return tc, nil
	}
	first, err := tunnel("origin.test")
	if err != nil {
		t.Fatal(err)
	}
	if first.ConnectionState().DidResume {
		t.Fatal("the first tunnel resumed")
	}
	second, err := tunnel("origin.test")
	if err != nil {
		t.Fatal(err)
	}
	if !second.ConnectionState().DidResume {
		t.Error("the second tunnel did not resume the first one's session")
	}
	// The cache holds a session for origin.test; put it under another name and offer it there.
	if s, ok := cache.Get("origin.test"); ok {
		cache.Put("other.test", s)
	}
	if _, err := tunnel("other.test"); err == nil {
		t.Error("a tunnel to origin.test accepted a ClientHello naming other.test")
	}
}
