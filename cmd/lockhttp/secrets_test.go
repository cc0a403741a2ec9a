package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/gatefiles"
)

// TestSecretsAdd drives lockhttp secrets add: the value from a file or stdin, its final newline
// dropped, other entries kept, the file 0600, and the value in no output.
func TestSecretsAdd(t *testing.T) {
	key := "sk-ant-api03-" + strings.Repeat("Rt5_", 12)
	other := "ghp_" + strings.Repeat("a1", 18)
	dir := t.TempDir()
	path := filepath.Join(dir, "secrets.toml")
	if err := os.WriteFile(path, []byte("version = 1\n[secrets]\ngithub = \""+other+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		args   []string
		stdin  string
		code   int
		stdout string // exact; "" for the failures
		err    string // part of stderr
		want   map[string]string
	}{
		{name: "from a file", args: []string{"add", "anthropic", "--secrets", path, "--from-file", keyFile}, code: 0,
			stdout: "secret anthropic written to " + path + "\n", want: map[string]string{"github": other, "anthropic": key}},
		{name: "from stdin, name after the flags", args: []string{"add", "--secrets", path, "second"}, stdin: key + "2\r\n", code: 0,
			stdout: "secret second written to " + path + "\n", want: map[string]string{"github": other, "anthropic": key, "second": key + "2"}},
		{name: "too short", args: []string{"add", "anthropic", "--secrets", path}, stdin: "q7Zk\n", code: 1, err: "shorter than 8 bytes"},
		{name: "empty", args: []string{"add", "anthropic", "--secrets", path}, stdin: "\n", code: 1, err: "standard input is empty"},
		{name: "two lines", args: []string{"add", "anthropic", "--secrets", path}, stdin: key + "\n" + key + "\n", code: 1, err: "more than one line"},
		{name: "a bad name", args: []string{"add", "a/b", "--secrets", path}, stdin: key, code: 1, err: `secret name "a/b"`},
		{name: "no --secrets", args: []string{"add", "anthropic"}, stdin: key, code: 2, err: "usage: lockhttp secrets add"},
		{name: "no name", args: []string{"add", "--secrets", path}, stdin: key, code: 2, err: "usage: lockhttp secrets add"},
		{name: "no add", args: []string{"anthropic"}, code: 2, err: "usage: lockhttp secrets add"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := os.ReadFile(path)
			var stdout, stderr bytes.Buffer
			code := run(append([]string{"secrets"}, tc.args...), strings.NewReader(tc.stdin), &stdout, &stderr)
			if code != tc.code || stdout.String() != tc.stdout || !strings.Contains(stderr.String(), tc.err) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want %d, %q, %q", code, stdout.String(), stderr.String(), tc.code, tc.stdout, tc.err)
			}
			if strings.Contains(stdout.String()+stderr.String(), key) {
				t.Error("the output holds the value")
			}
			if tc.want == nil {
				if after, _ := os.ReadFile(path); !bytes.Equal(after, before) {
					t.Error("a refused value changed the file")
				}
				return
			}
			fi, err := os.Stat(path)
			if err != nil || fi.Mode().Perm() != 0o600 {
				t.Fatalf("mode %v, %v", fi.Mode(), err)
			}
			got, err := gatefiles.Secrets(path)
			if err != nil || len(got) != len(tc.want) {
				t.Fatalf("%d entries, %v", len(got), err)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("entry %s is not the value given", k)
				}
			}
		})
	}
}

// TestSecretsAddCreates: a missing file is created, 0600.
func TestSecretsAddCreates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secrets.toml")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"secrets", "add", "anthropic", "--secrets", path}, strings.NewReader("sk-ant-"+strings.Repeat("k", 40)+"\n"), &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%v %v", fi, err)
	}
	if m, err := gatefiles.Secrets(path); err != nil || m["anthropic"] != "sk-ant-"+strings.Repeat("k", 40) {
		t.Fatalf("%v", err)
	}
}
