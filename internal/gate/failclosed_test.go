package gate

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/policy"
)

// TestGateFailsClosed breaks, in turn, each file the gate builds its checks from beside the
// policy: a secrets file it was given that does not load, and the Claude credentials file the
// policy names. Each refuses what it would have checked, and the agent reads no internal cause.
func TestGateFailsClosed(t *testing.T) {
	t.Run("a secrets file that does not load refuses every request", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "secrets.toml")
		os.WriteFile(f, []byte("version = 1\n[secrets]\nk = \"0123456789abcdef0123\"\n"), 0o644) // readable by others
		tg := startGateWith(t, nil, func(c *Config) { c.SecretsFile = f })
		resp, err := tg.client().Get(tg.url("/docs"))
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(resp)
		if resp.StatusCode != 403 || resp.Header.Get(HeaderCode) != "E_INJECT" || resp.Header.Get(HeaderRule) != "secret:injected-unloaded" || tg.origin.count() != 0 {
			t.Fatalf("got %d %s %s, origin reached %d times", resp.StatusCode, resp.Header.Get(HeaderCode), resp.Header.Get(HeaderRule), tg.origin.count())
		}
		if strings.Contains(body, f) || strings.Contains(body, "0644") {
			t.Errorf("the body names an internal cause: %q", body)
		}
	})
	t.Run("a Claude credentials file that does not load refuses every Claude credential", func(t *testing.T) {
		tg := startGate(t, nil)
		p := tg.g.Policy()
		missing := filepath.Join(t.TempDir(), "no-such-credentials.toml")
		pol := policyWith(t, tg, "[claude]\ncredentials = \""+missing+"\"\n")
		tg.g.SetPolicy(pol)
		defer tg.g.SetPolicy(p)
		req, _ := http.NewRequest("GET", tg.url("/v1/models"), nil)
		req.Header.Set("X-Api-Key", "sk-ant-api03-"+strings.Repeat("Xy7_", 20)+"AA")
		// The Claude checks govern the Claude hosts: ask as api.anthropic.com, answered by
		// the test origin through [floor.hosts].
		req.Host = fmt.Sprintf("api.anthropic.com:%d", tg.port)
		req.URL.Host = req.Host
		resp, err := tg.client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(resp)
		if resp.StatusCode != 403 || resp.Header.Get(HeaderCode) != "E_SECRET_EGRESS" || tg.origin.count() != 0 {
			t.Fatalf("got %d %s %s: %s", resp.StatusCode, resp.Header.Get(HeaderCode), resp.Header.Get(HeaderRule), body)
		}
		if strings.Contains(body, missing) {
			t.Errorf("the body names the file: %q", body)
		}
	})
}

func readAll(resp *http.Response) string {
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}

// policyWith is the test gate's policy with api.anthropic.com answered by its origin, and extra
// TOML at the end.
func policyWith(t *testing.T, tg *testGate, extra string) *policy.Policy {
	t.Helper()
	text := strings.Replace(fmt.Sprintf(gatePolicy, tg.port), `"gone.test" = "127.0.0.1"`, `"gone.test" = "127.0.0.1"`+"\n"+`"api.anthropic.com" = "127.0.0.1"`, 1) + extra
	p, err := policy.Load("gate.toml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return p
}
