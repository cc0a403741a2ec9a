package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/lockhttp/lockhttp/internal/gate"
	"github.com/lockhttp/lockhttp/internal/gatefiles"
	"github.com/lockhttp/lockhttp/internal/stack"
)

// startClaudeKey starts the stand-in and lox run with policy/default.toml (its inject rule for
// the Claude API) and loxFlags.
func startClaudeKey(t *testing.T, loxFlags ...string) *anthropicEnv {
	t.Helper()
	pki := newTestPKI(t)
	api := &anthropicStandIn{}
	_, port := tlsOrigin(t, api, pki.leaf(t, []string{"api.anthropic.com"}, time.Now().Add(time.Hour), false))
	r := startStackWith(t, shippedWithFloor(t, port, "api.anthropic.com"), append([]string{"--roots", pki.rootPEM}, loxFlags...), nil)
	data, err := os.ReadFile(r.up.CACert)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		t.Fatalf("%s holds no certificate", r.up.CACert)
	}
	return &anthropicEnv{running: r, api: api, port: port, caPool: pool}
}

// TestClaudeKeyFile: with lox run --claude-key-file, an agent holding the placeholder in
// x-api-key reaches api.anthropic.com with the real key, which is in the gate's secrets file
// (0600) and nowhere the stack writes a request down; without it, the gate refuses E_INJECT and
// says how to give it.
func TestClaudeKeyFile(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	if stack.ClaudePlaceholder != sdkPlaceholder {
		t.Fatalf("lox's placeholder %q is not the one TestAnthropicSDK proves the detectors pass over", stack.ClaudePlaceholder)
	}

	t.Run("the key from the file reaches the stand-in", func(t *testing.T) {
		keyFile := filepath.Join(t.TempDir(), "anthropic-key")
		if err := os.WriteFile(keyFile, []byte(sdkInjectedKey+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		e := startClaudeKey(t, "--claude-key-file", keyFile)
		secretsPath := filepath.Join(e.state, "secrets.toml")
		if fi, err := os.Stat(secretsPath); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v", secretsPath, fi, err)
		}
		if m, err := gatefiles.Secrets(secretsPath); err != nil || m["anthropic"] != sdkInjectedKey {
			t.Fatalf("%s does not hold the key as \"anthropic\": %v", secretsPath, err)
		}
		c := e.client(option.WithHeader("x-api-key", sdkPlaceholder))
		msg, err := c.Messages.New(ctx, helloParams())
		if err != nil {
			t.Fatalf("Messages.New: %v\n%s", err, e.out)
		}
		if got := messageText(msg); got != standInText {
			t.Fatalf("the SDK read %q", got)
		}
		reqs := e.api.all()
		if len(reqs) != 1 {
			t.Fatalf("the stand-in saw %d requests", len(reqs))
		}
		if got := reqs[0].Header.Values("X-Api-Key"); len(got) != 1 || got[0] != sdkInjectedKey {
			t.Errorf("the stand-in got x-api-key %d values, the real key alone: %v", len(got), len(got) == 1 && got[0] == sdkInjectedKey)
		}
		if reqs[0].Header.Get("Authorization") != "" {
			t.Error("the stand-in got an Authorization header too")
		}
		if strings.Contains(msg.RawJSON(), sdkInjectedKey) {
			t.Error("the answer the SDK read holds the key")
		}
		(&secretsEnv{running: e.running}).noLeak(t, "the Claude key", sdkInjectedKey)
		if up, _ := os.ReadFile(filepath.Join(e.state, stack.UpFile)); len(up) == 0 || strings.Contains(string(up), sdkInjectedKey) {
			t.Errorf("up.json is missing or holds the key (%d bytes)", len(up))
		}
		if strings.Contains(e.out.String(), sdkInjectedKey) {
			t.Error("lox's output holds the key")
		}
	})

	t.Run("without the key, E_INJECT says how to give it", func(t *testing.T) {
		e := startClaudeKey(t)
		gateURL, _ := url.Parse(e.up.Gate)
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.Proxy = http.ProxyURL(gateURL)
		ca, err := os.ReadFile(e.up.CACert)
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(ca)
		tr.TLSClientConfig = &tls.Config{RootCAs: pool}
		cl := &http.Client{Transport: tr, Timeout: 15 * time.Second}
		req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("https://api.anthropic.com:%d/v1/models", e.port), nil)
		req.Header.Set("x-api-key", sdkPlaceholder)
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		if resp.StatusCode != 403 || resp.Header.Get(gate.HeaderCode) != "E_INJECT" || !strings.Contains(string(body), "lacks it") ||
			!strings.Contains(string(body), "lox run --claude-key-file FILE") {
			t.Fatalf("%d %s:\n%s", resp.StatusCode, resp.Header.Get(gate.HeaderCode), body)
		}
		if e.api.count() != 0 {
			t.Error("the request reached the stand-in")
		}
	})
}
