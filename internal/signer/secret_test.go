package signer

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/testkit"
	"github.com/lockhttp/lockhttp/internal/unixsock"
)

// failingReader fails every read, to make signing fail after the guards.
type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("no randomness today") }

// TestKeyNeverLeaks signs, makes every error path fire, and checks that no response, log line or
// error holds the CA key: its PEM, any line of it, its PKCS#8 DER or its private scalar (raw, hex,
// base64, decimal).
func TestKeyNeverLeaks(t *testing.T) {
	ca, dir := newCA(t)
	keyPEM, err := os.ReadFile(filepath.Join(dir, KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(keyPEM)
	scalar, err := readKeyFile(t, dir).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	needles := map[string][]byte{
		"key PEM":          keyPEM,
		"PKCS#8 DER":       block.Bytes,
		"scalar":           scalar,
		"scalar hex":       []byte(hex.EncodeToString(scalar)),
		"scalar HEX":       []byte(strings.ToUpper(hex.EncodeToString(scalar))),
		"scalar base64":    []byte(base64.StdEncoding.EncodeToString(scalar)),
		"scalar base64url": []byte(base64.RawURLEncoding.EncodeToString(scalar)),
		"scalar decimal":   []byte(readKeyFile(t, dir).D.String()),
	}
	for i, line := range strings.Split(string(keyPEM), "\n") {
		if len(line) > 16 && !strings.HasPrefix(line, "-----") {
			needles[fmt.Sprintf("key PEM line %d", i)] = []byte(line)
		}
	}

	var out bytes.Buffer // everything the signer said
	logs := &testkit.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	textLogs := &testkit.Buffer{}
	log.Info("the CA", "ca", ca)
	slog.New(slog.NewTextHandler(textLogs, nil)).Info("the CA", "ca", ca)
	fmt.Fprintf(&out, "%v %+v %#v %s\n", ca, ca, ca, ca)

	// The server: success, every refusal and a signing failure.
	clk := testkit.NewClock(t0)
	sockDir := shortDir(t)
	serveWith := func(name string, cfg ServerConfig) *http.Client {
		cfg.CA, cfg.Logger, cfg.Now = ca, log, clk.Now
		sock := filepath.Join(sockDir, name)
		serve(t, cfg, sock, 0o600)
		return unixsock.Client(sock, 5*time.Second)
	}
	me := []int{os.Geteuid()}
	good := serveWith("good.sock", ServerConfig{AllowUIDs: me, Rate: 1000, Burst: 1000})
	limited := serveWith("limited.sock", ServerConfig{AllowUIDs: me, Rate: 0.001, Burst: 1})
	broken := serveWith("broken.sock", ServerConfig{AllowUIDs: me, Rand: failingReader{}})
	closed := serveWith("closed.sock", ServerConfig{AllowUIDs: []int{os.Geteuid() + 1}})
	body := signBody(t, "example.com")
	requests := []struct {
		c      *http.Client
		method string
		path   string
		body   string
	}{
		{good, "POST", "/sign", body},
		{good, "POST", "/sign", signBody(t, "127.0.0.1")},
		{good, "POST", "/sign", signBody(t, "*.example.com")},
		{good, "POST", "/sign", signBody(t, "localhost")},
		{good, "POST", "/sign", signBody(t, "Example.com")},
		{good, "POST", "/sign", `{"host":"example.com","public_key":"AAAA"}`},
		{good, "POST", "/sign", `{"host":"example.com","public_key":"!"}`},
		{good, "POST", "/sign", `{"x":1}`},
		{good, "POST", "/sign", `{`},
		{good, "POST", "/sign", strings.Repeat(" ", MaxRequestBytes+1)},
		{good, "GET", "/sign", ""},
		{good, "GET", "/health", ""},
		{good, "PUT", "/health", ""},
		{good, "GET", "/ca-key.pem", ""},
		{limited, "POST", "/sign", body},
		{limited, "POST", "/sign", body},
		{broken, "POST", "/sign", body},
		{closed, "POST", "/sign", body},
	}
	statuses := map[int]bool{}
	for _, r := range requests {
		req, _ := http.NewRequest(r.method, "http://signer"+r.path, strings.NewReader(r.body))
		resp, err := r.c.Do(req)
		if err != nil {
			fmt.Fprintln(&out, err)
			statuses[0] = true
			continue
		}
		dump, _ := httputil.DumpResponse(resp, true)
		resp.Body.Close()
		out.Write(dump)
		statuses[resp.StatusCode] = true
	}
	for _, s := range []int{0, 200, 400, 404, 405, 413, 429, 500} {
		if !statuses[s] {
			t.Errorf("no request got status %d (0: closed connection); the test misses an error path", s)
		}
	}

	// The handler's own uid check (403).
	h := NewServer(ServerConfig{CA: ca, AllowUIDs: []int{os.Geteuid() + 1}, Logger: log}).Handler()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "http://signer/sign", strings.NewReader(body)))
	if rec.Code != 403 {
		t.Errorf("handler without peer: %d", rec.Code)
	}
	out.Write(rec.Body.Bytes())

	// Sign's errors.
	key := p256(t).Public()
	for _, host := range []string{"10.0.0.1", "*.a.com", "a", "localhost", "A.com", "metadata.google.internal", ""} {
		_, _, err := Sign(ca, host, key, t0, rand.Reader)
		fmt.Fprintln(&out, err)
	}
	_, _, err = Sign(ca, "example.com", nil, t0, rand.Reader)
	fmt.Fprintln(&out, err)
	_, _, err = Sign(ca, "example.com", key, t0, failingReader{})
	fmt.Fprintln(&out, err)
	_, _, err = Sign(ca, "example.com", key, t0.Add(CALifetime+time.Hour), rand.Reader)
	fmt.Fprintln(&out, err)

	// InitCA's and LoadCA's errors.
	_, err = InitCA(dir, t0, rand.Reader)
	fmt.Fprintln(&out, err)
	for _, mutate := range []func(d string){
		func(d string) { os.Chmod(filepath.Join(d, KeyFile), 0o644) },
		func(d string) {}, // the key does not match this directory's certificate
		func(d string) { os.WriteFile(filepath.Join(d, CertFile), keyPEM, 0o644) }, // the key where the certificate belongs
		func(d string) { os.WriteFile(filepath.Join(d, KeyFile), bytes.ToUpper(keyPEM), 0o600) },
		func(d string) {
			os.WriteFile(filepath.Join(d, KeyFile), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: block.Bytes[:len(block.Bytes)-3]}), 0o600)
		},
	} {
		d := filepath.Join(t.TempDir(), "ca")
		if _, err := InitCA(d, t0, rand.Reader); err != nil {
			t.Fatal(err)
		}
		// Put this CA's key in place, so that the errors are about the key under test.
		os.WriteFile(filepath.Join(d, KeyFile), keyPEM, 0o600)
		mutate(d)
		_, err := loadCA(d, t0)
		if err == nil {
			t.Errorf("a broken CA directory loaded")
		}
		fmt.Fprintln(&out, err)
	}
	_, err = loadCA(dir, t0.Add(CALifetime+time.Hour))
	fmt.Fprintln(&out, err)

	all := map[string][]byte{"responses and errors": out.Bytes(), "JSON log": []byte(logs.String()), "text log": []byte(textLogs.String())}
	for where, text := range all {
		for name, needle := range needles {
			if bytes.Contains(text, needle) {
				t.Errorf("the %s hold the CA key (%s)", where, name)
			}
		}
	}
	// The test must have seen what it checks.
	for _, want := range []string{"BEGIN CERTIFICATE", "floor:ip-literal", "rate limit", "signing failed", "has mode 0644", "does not match", "expired"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the collected output lacks %q", want)
		}
	}
	if !strings.Contains(logs.String(), "no randomness today") || !strings.Contains(logs.String(), "connection refused") {
		t.Errorf("the log lacks the signing failure or the refused connection:\n%s", logs)
	}
}
