package tracing

import (
	"compress/gzip"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/lockhttp/lockhttp/internal/testkit"
	"github.com/lockhttp/lockhttp/internal/tracing/tracingtest"
)

// post is one export a collector received.
type post struct {
	header http.Header
	spans  int
	at     time.Time
}

// scripted is a collector that answers each post with the next of its answers (200 after the
// last) and keeps what it received.
type scripted struct {
	mu      sync.Mutex
	answers []func(http.ResponseWriter) // guarded by mu
	posts   []post                      // guarded by mu
	t       testing.TB
}

func (c *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			c.t.Errorf("a gzip body that does not read: %v", err)
			return
		}
		body = zr
	}
	data, _ := io.ReadAll(body)
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(data, &req); err != nil {
		c.t.Errorf("not an ExportTraceServiceRequest: %v", err)
	}
	n := 0
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			n += len(ss.GetSpans())
		}
	}
	c.mu.Lock()
	c.posts = append(c.posts, post{header: r.Header.Clone(), spans: n, at: time.Now()})
	var answer func(http.ResponseWriter)
	if len(c.answers) > 0 {
		answer, c.answers = c.answers[0], c.answers[1:]
	}
	c.mu.Unlock()
	if answer != nil {
		answer(w)
	}
}

func (c *scripted) got() []post {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]post(nil), c.posts...)
}

// status answers code with the headers kv (key, value, …).
func status(code int, kv ...string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		for i := 0; i+1 < len(kv); i += 2 {
			w.Header().Set(kv[i], kv[i+1])
		}
		w.WriteHeader(code)
	}
}

// oneSpan is an encoded export of one span.
func oneSpan() []byte {
	s := full()
	return appendRequest(nil, appendResource(nil, "v1"), appendSpan(nil, &s, randomIDs))
}

// env is a getenv of m.
func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// TestExportEnv: the OTEL_EXPORTER_OTLP_ variables' headers (percent-decoded, the _TRACES_ one
// first) and compression reach the collector.
func TestExportEnv(t *testing.T) {
	for _, c := range []struct {
		name   string
		env    map[string]string
		header map[string]string // "" for absent
	}{
		{"headers, percent-decoded", map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": " Authorization = Bearer%20a%2Cb%3D%25 , x-tenant=t1,"},
			map[string]string{"Authorization": "Bearer a,b=%", "X-Tenant": "t1", "Content-Encoding": "", "Content-Type": "application/x-protobuf"}},
		{"the traces headers win", map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "a=general,b=general", "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "a=traces"},
			map[string]string{"A": "traces", "B": ""}},
		{"an empty value", map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "x-empty="}, map[string]string{"X-Empty": ""}},
		{"gzip", map[string]string{"OTEL_EXPORTER_OTLP_COMPRESSION": "gzip"}, map[string]string{"Content-Encoding": "gzip"}},
		{"the traces compression wins", map[string]string{"OTEL_EXPORTER_OTLP_COMPRESSION": "none", "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "gzip"},
			map[string]string{"Content-Encoding": "gzip"}},
		{"none", map[string]string{"OTEL_EXPORTER_OTLP_COMPRESSION": "none"}, map[string]string{"Content-Encoding": ""}},
	} {
		t.Run(c.name, func(t *testing.T) {
			col := &scripted{t: t}
			srv := httptest.NewServer(col)
			defer srv.Close()
			p, err := newPoster(srv.URL+"/v1/traces", "v1", env(c.env))
			if err != nil {
				t.Fatal(err)
			}
			for range 2 { // the gzip writer is reused
				if err := p.export(context.Background(), nil, oneSpan()); err != nil {
					t.Fatal(err)
				}
			}
			for _, got := range col.got() {
				if got.spans != 1 {
					t.Errorf("%d spans decoded, want 1", got.spans)
				}
				for k, v := range c.header {
					if got.header.Get(k) != v {
						t.Errorf("header %s: %q, want %q", k, got.header.Get(k), v)
					}
				}
			}
		})
	}
}

// TestNewEnvErrors: a variable that does not read stops New with the variable named and the fix,
// never the value (it may be a credential).
func TestNewEnvErrors(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	os.WriteFile(notPEM, []byte("s3cret"), 0o600)
	for _, c := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"a header with no =", map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "a=1,s3cret"}, "OTEL_EXPORTER_OTLP_HEADERS: entry 2 is not key=value"},
		{"a bad percent", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "authorization=s3cret%zz"}, "OTEL_EXPORTER_OTLP_TRACES_HEADERS: entry 1 (\"authorization\"): its value is not percent-encoded"},
		{"a bad name", map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "a b=s3cret"}, "is not a header name"},
		{"a line break", map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "a=s3cret%0d%0aX-Evil: 1"}, "holds a line break"},
		{"an empty name", map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "=s3cret"}, "entry 1 is not key=value"},
		{"zstd", map[string]string{"OTEL_EXPORTER_OTLP_COMPRESSION": "zstd"}, `OTEL_EXPORTER_OTLP_COMPRESSION="zstd": write gzip or none`},
		{"no CA file", map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": filepath.Join(dir, "none.pem")}, "OTEL_EXPORTER_OTLP_CERTIFICATE: open"},
		{"a CA file with no PEM", map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": notPEM}, "no PEM certificate in the file"},
		{"a client certificate without its key", map[string]string{"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": notPEM}, "set both"},
		{"a client key that does not read", map[string]string{"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": notPEM, "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY": notPEM}, "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY="},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := newPoster("http://127.0.0.1:4318/v1/traces", "", env(c.env))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("newPoster: %v; want an error with %q", err, c.want)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("the error quotes the value: %v", err)
			}
		})
	}
}

// TestExportRetry: 429, 502, 503 and 504 are retried, honouring Retry-After, until the retry time
// is spent; other answers are not retried.
func TestExportRetry(t *testing.T) {
	for _, c := range []struct {
		name    string
		answers []func(http.ResponseWriter)
		posts   int
		err     string // "" for success
	}{
		{"each retried status, then success", []func(http.ResponseWriter){status(429), status(502), status(503), status(504)}, 5, ""},
		{"400 is not retried", []func(http.ResponseWriter){status(400)}, 1, "the collector answered 400 Bad Request"},
		{"500 is not retried", []func(http.ResponseWriter){status(500)}, 1, "500 Internal Server Error"},
		{"a Retry-After past the retry time fails now", []func(http.ResponseWriter){status(503, "Retry-After", "3600")}, 1, "503 Service Unavailable"},
		{"a Retry-After date past it too", []func(http.ResponseWriter){status(429, "Retry-After", time.Now().Add(time.Hour).UTC().Format(http.TimeFormat))}, 1, "429 Too Many Requests"},
		{"a redirect is not followed", []func(http.ResponseWriter){status(307, "Location", "/elsewhere")}, 1, "307 Temporary Redirect"},
	} {
		t.Run(c.name, func(t *testing.T) {
			col := &scripted{t: t, answers: c.answers}
			srv := httptest.NewServer(col)
			defer srv.Close()
			p, err := newPoster(srv.URL+"/v1/traces", "", env(nil))
			if err != nil {
				t.Fatal(err)
			}
			p.first = time.Millisecond
			err = p.export(context.Background(), nil, oneSpan())
			if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
				t.Fatalf("export: %v; want %q", err, c.err)
			}
			if n := len(col.got()); n != c.posts {
				t.Errorf("%d posts, want %d", n, c.posts)
			}
		})
	}
	t.Run("Retry-After is waited for", func(t *testing.T) {
		col := &scripted{t: t, answers: []func(http.ResponseWriter){status(503, "Retry-After", "1")}}
		srv := httptest.NewServer(col)
		defer srv.Close()
		p, _ := newPoster(srv.URL+"/v1/traces", "", env(nil))
		p.first = time.Millisecond
		if err := p.export(context.Background(), nil, oneSpan()); err != nil {
			t.Fatal(err)
		}
		got := col.got()
		if len(got) != 2 || got[1].at.Sub(got[0].at) < 900*time.Millisecond {
			t.Fatalf("%d posts; want 2, the second a second after the first", len(got))
		}
	})
	t.Run("no collector: retried within the retry time", func(t *testing.T) {
		srv := httptest.NewServer(http.NotFoundHandler())
		url := srv.URL
		srv.Close()
		p, _ := newPoster(url+"/v1/traces", "", env(nil))
		p.first, p.total = time.Millisecond, 50*time.Millisecond
		if err := p.export(context.Background(), nil, oneSpan()); err == nil || !strings.Contains(err.Error(), "connection refused") {
			t.Fatalf("export to a closed port: %v", err)
		}
	})
}

// cert is a self-signed certificate for 127.0.0.1, written as PEM files.
func cert(t *testing.T, dir, name string, usage x509.ExtKeyUsage) (tls.Certificate, string, string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		BasicConstraintsValid: true, IsCA: true, DNSNames: []string{"localhost"}}
	tmpl.IPAddresses = append(tmpl.IPAddresses, []byte{127, 0, 0, 1})
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	certFile, keyFile := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600)
	c, err := tls.X509KeyPair(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}))
	if err != nil {
		t.Fatal(err)
	}
	return c, certFile, keyFile
}

// TestExportTLS: the collector's CA and the client certificate come from the variables; without
// them the handshake fails.
func TestExportTLS(t *testing.T) {
	dir := t.TempDir()
	serverCert, caFile, _ := cert(t, dir, "collector", x509.ExtKeyUsageServerAuth)
	clientCert, clientFile, clientKey := cert(t, dir, "gate", x509.ExtKeyUsageClientAuth)
	clients := x509.NewCertPool()
	clients.AddCert(clientCert.Leaf)
	col := &scripted{t: t}
	srv := httptest.NewUnstartedServer(col)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clients}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes are the test
	srv.StartTLS()
	defer srv.Close()
	for _, c := range []struct {
		name string
		env  map[string]string
		err  string
	}{
		{"the CA and the client certificate", map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": caFile,
			"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": clientFile, "OTEL_EXPORTER_OTLP_CLIENT_KEY": clientKey}, ""},
		{"the traces variables", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE": caFile,
			"OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE": clientFile, "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY": clientKey}, ""},
		{"no CA", map[string]string{"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": clientFile, "OTEL_EXPORTER_OTLP_CLIENT_KEY": clientKey}, "certificate"},
		{"no client certificate", map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": caFile}, "certificate"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := newPoster(srv.URL+"/v1/traces", "", env(c.env))
			if err != nil {
				t.Fatal(err)
			}
			p.total = 0 // no retry
			err = p.export(context.Background(), nil, oneSpan())
			if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
				t.Fatalf("export: %v; want %q", err, c.err)
			}
		})
	}
}

// TestBatches: an export holds batchMax spans at most; what is queued when Run stops is exported.
func TestBatches(t *testing.T) {
	col := tracingtest.Start(t)
	e, err := New(Options{Endpoint: col.URL, Batch: time.Hour, Queue: 2000})
	if err != nil {
		t.Fatal(err)
	}
	for range 1000 {
		e.Finished(record("r"), "")
	}
	stop := run(e)
	testkit.WaitFor(t, 10*time.Second, "a full batch at the collector", func() bool { return col.Posts() == 1 })
	if n := len(col.Spans()); n != batchMax {
		t.Fatalf("%d spans in the first export, want %d", n, batchMax)
	}
	stop()
	if n, p := len(col.Spans()), col.Posts(); n != 1000 || p != 2 {
		t.Fatalf("%d spans in %d exports after Run stopped, want 1000 in 2", n, p)
	}
	if st := e.Status(); st.Exported != 1000 || st.Failed != 0 || st.LastOK.IsZero() {
		t.Errorf("status %+v", st)
	}
}
