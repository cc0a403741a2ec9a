package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestLoxEnv: what lox env prints sets up a shell for an agent started by hand. docs/trust-ca.md's
// lox-env block, run as a user types it in sh, reaches the gate and trusts its CA; so does fish
// with --format fish; a .env file (--format dotenv) read by docker-compose holds the same
// variables as the shell, and curl run with exactly them does the same. The agent's name is in
// the proxy URL and the audit.
func TestLoxEnv(t *testing.T) {
	curl := requireTool(t, "curl")
	dir := t.TempDir()
	if err := os.Symlink(binDir, filepath.Join(dir, "bin")); err != nil {
		t.Fatal(err)
	}
	r := startStackAt(t, mkdirAll(t, filepath.Join(dir, ".lockfamily")), doctorPolicy, nil, nil)
	root, _ := filepath.Abs("../..")
	blocks, err := readDocBlocks(filepath.Join(root, "docs", "trust-ca.md"))
	if err != nil {
		t.Fatal(err)
	}
	var block string
	for _, b := range blocks {
		if b.Name == "lox-env" {
			block = b.Script
		}
	}
	if block == "" {
		t.Fatal("docs/trust-ca.md has no lox-env test block")
	}
	// A shell of the operator's, its proxy and CA variables none of lox's.
	shellEnv := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "LANG=C.UTF-8", "SSL_CERT_FILE=/nonexistent", "HTTPS_PROXY=http://127.0.0.1:9"}
	sh := func(t *testing.T, shell string, args ...string) string {
		t.Helper()
		cmd := exec.Command(shell, args...)
		cmd.Dir, cmd.Env = dir, shellEnv
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %q: %v\n%s", shell, args, err, out)
		}
		return string(out)
	}
	decrypted := `"gate":"lockhttp","decrypted":true`

	t.Run("sh, as docs/trust-ca.md says", func(t *testing.T) {
		out := sh(t, "sh", "-c", block)
		if !strings.Contains(out, decrypted) || !strings.Contains(out, "lox env: an agent started by hand with these settings is not enclosed") {
			t.Fatalf("the block printed:\n%s", out)
		}
		// Plain http:// too (curl's lower-case http_proxy), with the agent's name in the record.
		out = sh(t, "sh", "-c", `eval "$(bin/lox env --name by-hand 2>/dev/null)" && curl -sS http://lockhttp.internal/`)
		if !strings.Contains(out, `"gate":"lockhttp","decrypted":false`) {
			t.Fatalf("plain http://lockhttp.internal/: %s", out)
		}
		named := false
		for _, m := range r.auditRecords() {
			named = named || m["url"] == "http://lockhttp.internal/" && m["agent"] == "by-hand" && m["rule"] == "self"
		}
		if !named {
			t.Error("no record of http://lockhttp.internal/ from the agent by-hand")
		}
	})
	t.Run("fish", func(t *testing.T) {
		fish := requireTool(t, "fish")
		out := sh(t, fish, "-c", "bin/lox env --format fish 2>/dev/null | source; and "+curl+" -sS https://lockhttp.internal/")
		if !strings.Contains(out, decrypted) {
			t.Fatalf("fish:\n%s", out)
		}
	})
	t.Run("a .env file read by docker-compose", func(t *testing.T) {
		compose := requireTool(t, "docker-compose")
		py := python(t, "yaml")
		sh(t, "sh", "-c", "bin/lox env --format dotenv > lox.env")
		os.WriteFile(filepath.Join(dir, "compose.yaml"), []byte("version: \"3\"\nservices:\n  agent:\n    image: agent\n    env_file: lox.env\n"), 0o644)
		cfg := sh(t, compose, "-f", "compose.yaml", "config")
		cmd := exec.Command(py, "-c", "import json, sys, yaml; print(json.dumps(yaml.safe_load(sys.stdin)['services']['agent']['environment']))")
		cmd.Stdin = strings.NewReader(cfg)
		data, err := cmd.Output()
		if err != nil {
			t.Fatalf("reading docker-compose config: %v\n%s", err, cfg)
		}
		var fromFile map[string]string
		if err := json.Unmarshal(data, &fromFile); err != nil {
			t.Fatal(err)
		}
		// The shell's variables, as eval "$(lox env)" sets them.
		fromShell := map[string]string{}
		for _, l := range strings.Split(sh(t, "sh", "-c", `eval "$(bin/lox env 2>/dev/null)" && env`), "\n") {
			if k, v, ok := strings.Cut(l, "="); ok {
				fromShell[k] = v
			}
		}
		var names []string
		for k, v := range fromFile {
			names = append(names, k)
			if fromShell[k] != v {
				t.Errorf("%s: the .env file says %q, the shell %q", k, v, fromShell[k])
			}
		}
		slices.Sort(names)
		if !slices.Contains(names, "HTTPS_PROXY") || !slices.Contains(names, "npm_config_cafile") || !slices.Contains(names, "NODE_EXTRA_CA_CERTS") || fromFile["NO_PROXY"] != "" {
			t.Errorf("the .env file's variables: %q", names)
		}
		env := []string{"PATH=" + os.Getenv("PATH")}
		for k, v := range fromFile {
			env = append(env, k+"="+v)
		}
		c := exec.Command(curl, "-sS", "https://lockhttp.internal/")
		c.Env = env
		if out, err := c.CombinedOutput(); err != nil || !strings.Contains(string(out), decrypted) {
			t.Fatalf("curl with the .env file's variables: %v\n%s", err, out)
		}
	})
}

func mkdirAll(t *testing.T, dir string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}
