package gate

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// TestAuditCannotSignRefusesTraffic: a gate whose audit key cannot be read (not a key, or not a
// file) refuses every request with 503 E_NO_AUDIT, as when it cannot write, and passes traffic
// again, without a restart, once the key can be read.
func TestAuditCannotSignRefusesTraffic(t *testing.T) {
	for _, tc := range []struct {
		name   string
		break_ func(t *testing.T, key string)
	}{
		{"not a key", func(t *testing.T, key string) { os.WriteFile(key, []byte("not a key\n"), 0o600) }},
		{"a directory", func(t *testing.T, key string) { os.Mkdir(key, 0o700) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := filepath.Join(t.TempDir(), "audit.key")
			tc.break_(t, key)
			aw, err := audit.Open(audit.Options{Dir: t.TempDir(), KeyFile: key})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { aw.Close() })
			tg := startGateWith(t, nil, func(c *Config) { c.Audit = aw })
			get := func() (int, string, string) {
				resp, err := tg.client().Get(tg.url("/x"))
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				body, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, resp.Header.Get(HeaderCode), string(body)
			}
			s, code, body := get()
			if s != 503 || code != "E_NO_AUDIT" || !strings.Contains(body, "the gate cannot sign its audit") {
				t.Fatalf("with an unreadable key: %d %s\n%s", s, code, body)
			}
			if strings.Contains(body, key) {
				t.Errorf("the refusal names the key's path:\n%s", body)
			}
			if n := tg.origin.count(); n != 0 {
				t.Fatalf("the origin was reached %d times", n)
			}
			if h := aw.Healthy(); h == nil || !strings.Contains(h.Error(), key) || !strings.Contains(h.Error(), "fix:") {
				t.Errorf("Healthy() = %v, want the key's path and the fix", h)
			}
			os.RemoveAll(key)
			if _, err := audit.GenerateKey(key, nil); err != nil {
				t.Fatal(err)
			}
			testkit.WaitFor(t, 5*time.Second, "traffic to pass once the key is readable", func() bool {
				s, _, _ := get()
				return s == 200
			})
		})
	}
}
