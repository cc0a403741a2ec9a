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

func TestPut(t *testing.T) {
	key := "sk-ant-api03-" + strings.Repeat("Qm4_", 10)
	other := "tok_" + strings.Repeat("y8", 10)
	t.Run("creates the file, 0600", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "secrets.toml")
		if err := Put(p, "anthropic", key); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("mode %v, %v", fi.Mode(), err)
		}
		m, err := Secrets(p)
		if err != nil || len(m) != 1 || m["anthropic"] != key {
			t.Fatalf("read back %d entries, %v", len(m), err)
		}
	})
	t.Run("keeps the other entries and replaces its own", func(t *testing.T) {
		p := write(t, "version = 1\n[secrets]\ngithub = \""+other+"\"\n\"a.b\" = \""+other+"\"\nanthropic = \"old-value-1234\"\n", 0o600)
		if err := Put(p, "anthropic", key); err != nil {
			t.Fatal(err)
		}
		if err := Put(p, "x.y", key+"\"\\ quoted"); err != nil {
			t.Fatal(err)
		}
		m, err := Secrets(p)
		if err != nil || len(m) != 4 || m["github"] != other || m["a.b"] != other || m["anthropic"] != key || m["x.y"] != key+"\"\\ quoted" {
			t.Fatalf("read back %q, %v", m, err)
		}
		if left, _ := filepath.Glob(filepath.Join(filepath.Dir(p), ".*")); len(left) != 0 {
			t.Errorf("temporary files left: %q", left)
		}
	})
	bad := []struct {
		name, file, secret, value, want string
	}{
		{name: "short value", secret: "anthropic", value: "q7Zk", want: "shorter than 8 bytes"},
		{name: "bad name", secret: "a b", value: key, want: "secret name"},
		{name: "not UTF-8", secret: "anthropic", value: key + "\xff", want: "not UTF-8"},
		{name: "a file that does not load", file: "version = 2\n[secrets]\n", secret: "anthropic", value: key, want: "version = 1"},
		{name: "no such directory", secret: "anthropic", value: key, want: "no such file"},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "secrets.toml")
			if c.file != "" {
				p = write(t, c.file, 0o600)
			}
			if c.name == "no such directory" {
				p = filepath.Join(t.TempDir(), "missing", "secrets.toml")
			}
			before, _ := os.ReadFile(p)
			err := Put(p, c.secret, c.value)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want %q", err, c.want)
			}
			if strings.Contains(err.Error(), c.value) {
				t.Errorf("the error holds the value: %v", err)
			}
			if after, _ := os.ReadFile(p); string(after) != string(before) {
				t.Errorf("the file changed: %q", after)
			}
		})
	}
}
