package gatefiles

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, text string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secrets.toml")
	os.WriteFile(p, []byte(text), mode)
	os.Chmod(p, mode)
	return p
}

func TestSecrets(t *testing.T) {
	value := "tok_" + strings.Repeat("x7", 10)
	good := write(t, "version = 1\n[secrets]\ngithub = \""+value+"\"\n", 0o600)
	m, err := Secrets(good)
	if err != nil || m["github"] != value {
		t.Fatalf("%v %v", m, err)
	}
	cases := []struct {
		name, text, want string
		mode             os.FileMode
	}{
		{"readable by others", "version = 1\n[secrets]\na = \"" + value + "\"\n", "chmod 600", 0o644},
		{"short", "version = 1\n[secrets]\na = \"short\"\n", "shorter than 8 bytes", 0o600},
		{"no version", "[secrets]\na = \"" + value + "\"\n", "version = 1", 0o600},
		{"unknown key", "version = 1\nsecret = 1\n", "unknown key", 0o600},
		{"bad TOML", "version = 1\n[secrets\n", ":3:", 0o600},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Secrets(write(t, c.text, c.mode))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want %q", err, c.want)
			}
			if strings.Contains(err.Error(), value) {
				t.Fatal("the error shows a secret")
			}
		})
	}
}
