package stack

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/gatefiles"
)

// TestClaudeKey: --claude-key-file puts the key in STATE/secrets.toml (or the --secrets file,
// keeping its entries), mode 0600; the gate gets -secrets with that file; the agent gets the
// placeholder, never the key; a key file others can read is used with a warning.
func TestClaudeKey(t *testing.T) {
	key := "sk-ant-api03-" + strings.Repeat("Lk9_", 20) + "QQ"
	other := "ghp_" + strings.Repeat("b2", 18)
	up := &Up{ConsoleSocket: "/s/console.sock", AuditDir: "/s/audit", GateSocket: "/s/gate.sock", SignerSocket: "/s/signer.sock", Hub: "http://127.0.0.1:1"}
	tests := []struct {
		name     string
		mode     os.FileMode
		secrets  string // the --secrets file's content; "" no --secrets
		warn     bool
		wantMore map[string]string // entries besides anthropic
	}{
		{name: "into the state directory", mode: 0o600},
		{name: "into the --secrets file, its entries kept", mode: 0o400, secrets: "version = 1\n[secrets]\ngithub = \"" + other + "\"\n", wantMore: map[string]string{"github": other}},
		{name: "a key file others can read warns", mode: 0o644, warn: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			state, dir := t.TempDir(), t.TempDir()
			keyFile := filepath.Join(dir, "anthropic-key")
			if err := os.WriteFile(keyFile, []byte(key+"\n"), tc.mode); err != nil {
				t.Fatal(err)
			}
			os.Chmod(keyFile, tc.mode)
			var stderr bytes.Buffer
			o := Options{ClaudeKeyFile: keyFile, Stderr: &stderr, Listen: "127.0.0.1:0", Agent: &Agent{Argv: []string{"claude"}}}
			want := filepath.Join(state, "secrets.toml")
			if tc.secrets != "" {
				want = filepath.Join(dir, "gate-secrets.toml")
				if err := os.WriteFile(want, []byte(tc.secrets), 0o600); err != nil {
					t.Fatal(err)
				}
				o.Secrets = want
			}
			if err := claudeKey(&o, state); err != nil {
				t.Fatal(err)
			}
			if o.Secrets != want {
				t.Fatalf("secrets file %q, want %q", o.Secrets, want)
			}
			fi, err := os.Stat(want)
			if err != nil || fi.Mode().Perm() != 0o600 {
				t.Fatalf("mode %v, %v", fi.Mode(), err)
			}
			m, err := gatefiles.Secrets(want)
			if err != nil || m[ClaudeSecret] != key || len(m) != 1+len(tc.wantMore) {
				t.Fatalf("%d entries, anthropic set: %v, %v", len(m), m[ClaudeSecret] == key, err)
			}
			for k, v := range tc.wantMore {
				if m[k] != v {
					t.Errorf("entry %s lost", k)
				}
			}
			args, err := gateArgs(o, o.Listen, up, "/s/tok", "/s/hub-key.pem")
			if err != nil {
				t.Fatal(err)
			}
			if i := slices.Index(args, "-secrets"); i < 0 || i+1 >= len(args) || args[i+1] != want {
				t.Errorf("gate args %q lack -secrets %s", args, want)
			}
			if got := strings.Contains(stderr.String(), "others can read the Claude key"); got != tc.warn {
				t.Errorf("warning %v, want %v: %q", got, tc.warn, stderr.String())
			}
			if strings.Contains(stderr.String(), key) {
				t.Error("the warning holds the key")
			}
			env := agentEnv([]string{"ANTHROPIC_API_KEY=" + key}, []string{"ANTHROPIC_API_KEY"}, o.Agent.Set, AgentVars("http://a:@127.0.0.1:1", "/ca.pem", "/b.pem"), "/home")
			var got []string
			for _, kv := range env {
				if v, ok := strings.CutPrefix(kv, "ANTHROPIC_API_KEY="); ok {
					got = append(got, v)
				}
			}
			if len(got) != 1 || got[0] != ClaudePlaceholder {
				t.Errorf("the agent's ANTHROPIC_API_KEY is %d values, placeholder: %v", len(got), len(got) == 1 && got[0] == ClaudePlaceholder)
			}
		})
	}
	for _, c := range []struct{ name, content, want string }{
		{"empty", "\n", "is empty"},
		{"two lines", key + "\n" + key + "\n", "more than one line"},
		{"too short", "sk-a\n", "shorter than 8 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			keyFile := filepath.Join(t.TempDir(), "k")
			os.WriteFile(keyFile, []byte(c.content), 0o600)
			o := Options{ClaudeKeyFile: keyFile, Stderr: &bytes.Buffer{}}
			err := claudeKey(&o, t.TempDir())
			if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), key) {
				t.Fatalf("err %v, want %q", err, c.want)
			}
		})
	}
	o := Options{Listen: "127.0.0.1:0"}
	if args, _ := gateArgs(o, o.Listen, up, "/s/tok", "/s/k.pem"); slices.Contains(args, "-secrets") {
		t.Errorf("-secrets without a secrets file: %q", args)
	}
}
