package signer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/metrics"
	"github.com/lockhttp/lockhttp/internal/testkit"
	"github.com/lockhttp/lockhttp/internal/unixsock"
)

// logLines returns the JSON log lines in b whose msg is msg.
func logLines(t *testing.T, b *testkit.Buffer, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// shortDir makes a directory with a path short enough for a unix socket.
func shortDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "signer")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// serve runs a Server for cfg on a real unix socket with the given mode and returns its path.
// It stops the server when the test ends and checks that Serve returned nil.
func serve(t testing.TB, cfg ServerConfig, sock string, mode os.FileMode) {
	t.Helper()
	l, err := unixsock.Listen(sock, mode)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- NewServer(cfg).Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
}

type testServer struct {
	ca    *CA
	sock  string
	logs  *testkit.Buffer
	http  *http.Client
	clock *testkit.Clock
}

func startServer(t *testing.T, edit func(*ServerConfig)) *testServer {
	t.Helper()
	ca, _ := newCA(t)
	ts := &testServer{ca: ca, sock: filepath.Join(shortDir(t), "s.sock"), logs: &testkit.Buffer{}, clock: testkit.NewClock(t0)}
	cfg := ServerConfig{CA: ca, AllowUIDs: []int{os.Geteuid()}, Logger: slog.New(slog.NewJSONHandler(ts.logs, nil)), Now: ts.clock.Now}
	if edit != nil {
		edit(&cfg)
	}
	serve(t, cfg, ts.sock, 0o600)
	ts.http = unixsock.Client(ts.sock, 10*time.Second)
	return ts
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func (ts *testServer) do(t *testing.T, method, path, body string) reply {
	t.Helper()
	req, err := http.NewRequest(method, "http://signer"+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := ts.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, b}
}

func signBody(t testing.TB, host string) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(p256(t).Public())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(SignRequest{Host: host, PublicKey: base64.StdEncoding.EncodeToString(der)})
	return string(b)
}

func TestServerSigns(t *testing.T) {
	ts := startServer(t, nil)
	r := ts.do(t, "POST", "/sign", signBody(t, "api.example.com"))
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("content type %q", ct)
	}
	var sr SignResponse
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sr); err != nil {
		t.Fatal(err)
	}
	if sr.CA != string(ts.ca.CertPEM()) {
		t.Error("ca is not the CA's PEM")
	}
	block, rest := pem.Decode([]byte(sr.Certificate))
	if block == nil || block.Type != "CERTIFICATE" || len(bytes.TrimSpace(rest)) != 0 {
		t.Fatalf("certificate is not one PEM certificate: %q", sr.Certificate)
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ts.ca.Cert())
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "api.example.com", CurrentTime: t0}); err != nil {
		t.Errorf("the leaf does not verify: %v", err)
	}
	if sr.Serial != leaf.SerialNumber.Text(16) {
		t.Errorf("serial %q, leaf has %x", sr.Serial, leaf.SerialNumber)
	}
	if want := t0.Add(LeafLifetime).Format(time.RFC3339); sr.NotAfter != want || !leaf.NotAfter.Equal(t0.Add(LeafLifetime)) {
		t.Errorf("not_after %q, want %q", sr.NotAfter, want)
	}

	issued := logLines(t, ts.logs, "sign")
	if len(issued) != 1 {
		t.Fatalf("%d sign log lines, want 1:\n%s", len(issued), ts.logs)
	}
	l := issued[0]
	if l["outcome"] != "issued" || l["host"] != "api.example.com" || l["serial"] != sr.Serial || l["uid"] != float64(os.Geteuid()) {
		t.Errorf("log line %v", l)
	}
	if _, ok := l["pid"]; !ok {
		t.Errorf("log line has no pid: %v", l)
	}
}

func TestServerHealth(t *testing.T) {
	ts := startServer(t, nil)
	r := ts.do(t, "GET", "/health", "")
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var h Health
	if err := json.Unmarshal(r.body, &h); err != nil {
		t.Fatal(err)
	}
	if h.CASubject != "CN=lockhttp local CA,O=lockhttp" || h.CANotAfter != t0.Add(CALifetime).Format(time.RFC3339) ||
		h.CASHA256 != fmt.Sprintf("%x", sha256.Sum256(ts.ca.Cert().Raw)) {
		t.Errorf("health %+v", h)
	}
}

// TestServerMetrics: with a registry, GET /metrics on the socket is the signer's page, its
// sign requests counted; nothing but GET and HEAD; without one, no such endpoint.
func TestServerMetrics(t *testing.T) {
	ts := startServer(t, func(c *ServerConfig) {
		reg := metrics.NewRegistry("signer", "test")
		c.Registry, c.Metrics = reg, metrics.NewSigner(reg)
	})
	if r := ts.do(t, "POST", "/sign", signBody(t, "api.example.com")); r.status != 200 {
		t.Fatalf("sign: %d %s", r.status, r.body)
	}
	r := ts.do(t, "GET", "/metrics", "")
	if r.status != 200 || !bytes.Contains(r.body, []byte(`lockhttp_signer_requests_total{outcome="issued"} 1`)) ||
		!bytes.Contains(r.body, []byte(`lockhttp_build_info{process="signer"`)) {
		t.Fatalf("GET /metrics: %d\n%.2000s", r.status, r.body)
	}
	if r := ts.do(t, "POST", "/metrics", ""); r.status != 405 || r.header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /metrics: %d %s", r.status, r.body)
	}
	if r := ts.do(t, "GET", "/nope", ""); r.status != 404 || !bytes.Contains(r.body, []byte("GET /metrics")) {
		t.Errorf("GET /nope: %d %s", r.status, r.body)
	}

	bare := startServer(t, nil)
	if r := bare.do(t, "GET", "/metrics", ""); r.status != 404 || bytes.Contains(r.body, []byte("lockhttp_")) {
		t.Errorf("GET /metrics without a registry: %d %s", r.status, r.body)
	}
}

func TestServerRefuses(t *testing.T) {
	ts := startServer(t, nil)
	good := signBody(t, "example.com")
	var goodReq SignRequest
	json.Unmarshal([]byte(good), &goodReq)
	rsa1024 := func() string {
		_, k := rsaKeys(t)
		der, _ := x509.MarshalPKIXPublicKey(&k.PublicKey)
		b, _ := json.Marshal(SignRequest{Host: "example.com", PublicKey: base64.StdEncoding.EncodeToString(der)})
		return string(b)
	}()
	cases := []struct {
		name   string
		method string
		path   string
		body   string
		status int
		want   string
	}{
		{"IP literal", "POST", "/sign", signBody(t, "169.254.169.254"), 400, "floor:ip-literal"},
		{"wildcard", "POST", "/sign", signBody(t, "*.example.com"), 400, "wildcard"},
		{"metadata", "POST", "/sign", signBody(t, "metadata.google.internal"), 400, "floor:metadata"},
		{"upper case", "POST", "/sign", signBody(t, "Example.com"), 400, "not-normalised"},
		{"weak RSA key", "POST", "/sign", rsa1024, 400, "RSA key of 1024 bits"},
		{"unknown field", "POST", "/sign", `{"host":"example.com","public_key":"` + goodReq.PublicKey + `","sans":["x.com"]}`, 400, `unknown field "sans"`},
		{"two values", "POST", "/sign", good + good, 400, "more than one JSON value"},
		{"not JSON", "POST", "/sign", "host=example.com", 400, "bad request body"},
		{"empty body", "POST", "/sign", "", 400, "bad request body"},
		{"no key", "POST", "/sign", `{"host":"example.com"}`, 400, "public_key is empty"},
		{"key not base64", "POST", "/sign", `{"host":"example.com","public_key":"!!"}`, 400, "not standard base64"},
		{"key not PKIX", "POST", "/sign", `{"host":"example.com","public_key":"AAAA"}`, 400, "not a PKIX public key"},
		{"body too large", "POST", "/sign", `{"host":"` + strings.Repeat("a", MaxRequestBytes) + `"}`, 413, "over 16384 bytes"},
		{"GET /sign", "GET", "/sign", "", 405, "use POST /sign"},
		{"POST /health", "POST", "/health", "", 405, "use GET /health"},
		{"unknown path", "GET", "/key", "", 404, "no such endpoint"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := ts.do(t, tc.method, tc.path, tc.body)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d: %s", r.status, tc.status, r.body)
			}
			var er ErrorResponse
			if err := json.Unmarshal(r.body, &er); err != nil {
				t.Fatalf("body %q is not an error response: %v", r.body, err)
			}
			if !strings.Contains(er.Error, tc.want) {
				t.Errorf("error %q does not say %q", er.Error, tc.want)
			}
			if r.status == 405 && r.header.Get("Allow") == "" {
				t.Error("405 without Allow")
			}
		})
	}
	for _, l := range logLines(t, ts.logs, "sign") {
		if l["outcome"] == "issued" {
			t.Errorf("issued on a refused request: %v", l)
		}
	}
}

func TestServerRateLimit(t *testing.T) {
	ts := startServer(t, func(c *ServerConfig) { c.Rate, c.Burst = 0.5, 2 })
	body := signBody(t, "example.com")
	for i := range 2 {
		if r := ts.do(t, "POST", "/sign", body); r.status != 200 {
			t.Fatalf("request %d in the burst: %d %s", i, r.status, r.body)
		}
	}
	r := ts.do(t, "POST", "/sign", body)
	if r.status != 429 {
		t.Fatalf("over the burst: %d %s", r.status, r.body)
	}
	if got := r.header.Get("Retry-After"); got != "2" {
		t.Errorf("Retry-After %q, want 2 (one token at 0.5/s)", got)
	}
	ts.clock.Advance(time.Second)
	if r := ts.do(t, "POST", "/sign", body); r.status != 429 {
		t.Errorf("half a token later: %d, want 429", r.status)
	}
	ts.clock.Advance(time.Second)
	if r := ts.do(t, "POST", "/sign", body); r.status != 200 {
		t.Errorf("a token later: %d %s", r.status, r.body)
	}
	if len(logLines(t, ts.logs, "sign")) != 5 {
		t.Errorf("want one log line per request:\n%s", ts.logs)
	}
}

func TestBucket(t *testing.T) {
	b := newBucket(10, 3)
	steps := []struct {
		at   time.Duration
		ok   bool
		wait time.Duration
	}{
		{0, true, 0}, {0, true, 0}, {0, true, 0},
		{0, false, 100 * time.Millisecond},
		{50 * time.Millisecond, false, 50 * time.Millisecond},
		{100 * time.Millisecond, true, 0},
		{time.Hour, true, 0}, {time.Hour, true, 0}, {time.Hour, true, 0},
		{time.Hour, false, 100 * time.Millisecond},
		{time.Hour - time.Second, false, 100 * time.Millisecond}, // a clock going back gains nothing
	}
	for i, s := range steps {
		ok, wait := b.take(t0.Add(s.at))
		if ok != s.ok || (wait-s.wait).Abs() > time.Microsecond {
			t.Errorf("step %d at %v: %v %v, want %v %v", i, s.at, ok, wait, s.ok, s.wait)
		}
	}
}

func TestHandlerRechecksUID(t *testing.T) {
	// Without the listener wrapper, the handler alone still refuses a uid that is not allowed.
	ca, _ := newCA(t)
	logs := &testkit.Buffer{}
	reg := metrics.NewRegistry("signer", "test")
	s := NewServer(ServerConfig{CA: ca, AllowUIDs: []int{os.Geteuid() + 4242}, Logger: slog.New(slog.NewJSONHandler(logs, nil)), Now: func() time.Time { return t0 },
		Registry: reg, Metrics: metrics.NewSigner(reg)})
	sock := filepath.Join(shortDir(t), "s.sock")
	l, err := unixsock.Listen(sock, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: s.Handler(), ConnContext: unixsock.ConnContext}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	resp, err := unixsock.Client(sock, 5*time.Second).Post("http://signer/sign", "application/json", strings.NewReader(signBody(t, "example.com")))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 403 || strings.Contains(string(body), "CERTIFICATE") {
		t.Fatalf("got %d %q, want 403", resp.StatusCode, body)
	}
	// GET /metrics is refused alike.
	resp, err = unixsock.Client(sock, 5*time.Second).Get("http://signer/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 403 || strings.Contains(string(body), "lockhttp_") {
		t.Fatalf("GET /metrics: %d %q, want 403", resp.StatusCode, body)
	}
	refused := logLines(t, logs, "request refused: uid not allowed")
	if len(refused) != 2 || refused[0]["uid"] != float64(os.Geteuid()) || refused[1]["path"] != "/metrics" {
		t.Errorf("refusal log: %v\n%s", refused, logs)
	}

	// And without ConnContext it knows no peer, and refuses too.
	srv2 := &http.Server{Handler: NewServer(ServerConfig{CA: ca, AllowUIDs: []int{os.Geteuid()}, Logger: slog.New(slog.NewJSONHandler(logs, nil))}).Handler()}
	sock2 := filepath.Join(shortDir(t), "s.sock")
	l2, err := unixsock.Listen(sock2, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	go srv2.Serve(l2)
	t.Cleanup(func() { srv2.Close() })
	resp, err = unixsock.Client(sock2, 5*time.Second).Get("http://signer/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Errorf("no peer credentials: %d, want 403", resp.StatusCode)
	}
}

func TestAllowUIDsClosesOthers(t *testing.T) {
	// As the same uid, a wrapper that allows only another uid closes the connection before
	// HTTP, and keeps accepting.
	ca, _ := newCA(t)
	logs := &testkit.Buffer{}
	sock := filepath.Join(shortDir(t), "s.sock")
	serve(t, ServerConfig{CA: ca, AllowUIDs: []int{os.Geteuid() + 4242}, Logger: slog.New(slog.NewJSONHandler(logs, nil))}, sock, 0o600)
	c := unixsock.Client(sock, 5*time.Second)
	for i := range 3 {
		resp, err := c.Post("http://signer/sign", "application/json", strings.NewReader(signBody(t, "example.com")))
		if err == nil {
			resp.Body.Close()
			t.Fatalf("attempt %d: got %d, want the connection closed", i, resp.StatusCode)
		}
		if !closedByPeer(err) {
			t.Errorf("attempt %d: %v, want EOF or reset", i, err)
		}
	}
	// The server logs each refusal as it closes the connection: the last line may come a
	// moment after the client saw its close.
	var refused []map[string]any
	testkit.WaitFor(t, 5*time.Second, "3 refusals logged", func() bool {
		refused = logLines(t, logs, "connection refused: uid not allowed")
		return len(refused) >= 3
	})
	if len(refused) != 3 {
		t.Fatalf("%d refusals logged, want 3:\n%s", len(refused), logs)
	}
	if refused[0]["uid"] != float64(os.Geteuid()) || refused[0]["pid"] != float64(os.Getpid()) {
		t.Errorf("refusal %v", refused[0])
	}
}

func TestServeStopsOnCancel(t *testing.T) {
	ca, _ := newCA(t)
	sock := filepath.Join(shortDir(t), "s.sock")
	l, err := unixsock.Listen(sock, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- NewServer(ServerConfig{CA: ca, AllowUIDs: []int{os.Geteuid()}}).Serve(ctx, l) }()
	resp, err := unixsock.Client(sock, 5*time.Second).Get("http://signer/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket file left behind: %v", err)
	}
}

func TestNewServerNeedsCA(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "CA is nil") {
			t.Errorf("panic %v", r)
		}
	}()
	NewServer(ServerConfig{})
}
