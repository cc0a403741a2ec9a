package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/stack"
)

// shell returns the path of a shell the test needs; it skips when it is absent, except under
// CI=true (.ci/run installs it).
func shell(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not installed; .ci/run must install it", name)
		}
		t.Skipf("%s is not installed", name)
	}
	return p
}

// awkward are values a state directory's path could hold: each must reach the shell as it is.
var awkward = []stack.Var{
	{Name: "A_PLAIN", Value: "/home/alice/.lockfamily/ca-bundle.pem"},
	{Name: "A_SPACE", Value: "/home/alice/my state/ca.pem"},
	{Name: "A_QUOTES", Value: `/tmp/it's "here"/ca.pem`},
	{Name: "A_SHELL", Value: "/tmp/$HOME/`id`/$(id)/;rm -rf x;/\\n/ca.pem"},
	{Name: "A_FISH", Value: `/tmp/\'\\/{a,b}/(echo x)/*/ca.pem`},
	{Name: "A_EMPTY", Value: ""},
}

// TestEnvFormatsInRealShells: what lox env prints for sh and fish, read by sh, bash and fish,
// sets each variable to its value byte for byte, and exports it.
func TestEnvFormatsInRealShells(t *testing.T) {
	for _, c := range []struct{ format, shell, read string }{
		{"sh", "sh", `eval "$(cat "$1")"; env`},
		{"sh", "bash", `eval "$(cat "$1")"; env`},
		{"fish", "fish", `source $argv[1]; env`},
	} {
		t.Run(c.format+" in "+c.shell, func(t *testing.T) {
			sh := shell(t, c.shell)
			out, err := envFormats[c.format](awkward, "http://agent:@127.0.0.1:3130")
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(t.TempDir(), "env")
			os.WriteFile(file, []byte(out), 0o644)
			args := []string{"-c", c.read, "x", file}
			if c.shell == "fish" {
				args = []string{"-c", c.read, file}
			}
			// The script's environment holds none of them: what env prints is what the output
			// exported.
			cmd := exec.Command(sh, args...)
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
			got, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v\n%s\n%s", c.shell, err, got, out)
			}
			lines := map[string]bool{}
			for _, l := range strings.Split(string(got), "\n") {
				lines[l] = true
			}
			for _, v := range awkward {
				if !lines[v.Name+"="+v.Value] {
					t.Errorf("%s did not export %s=%q; it printed:\n%s", c.shell, v.Name, v.Value, got)
				}
			}
		})
	}
}

func TestEnvDotenv(t *testing.T) {
	out, err := envFormats["dotenv"]([]stack.Var{{Name: "A", Value: "/x y/ca.pem"}, {Name: "B", Value: ""}, {Name: "C", Value: "http://agent:@127.0.0.1:1"}}, "http://agent:@127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(out, "A=/x y/ca.pem\nB=\nC=http://agent:@127.0.0.1:1\n") || !strings.Contains(out, "NOT enclosed") {
		t.Errorf("dotenv:\n%s", out)
	}
	for _, bad := range []string{"/a\nB=evil", "/a #b", " /a", "/a ", "'/a'", `"/a"`, "/a\r"} {
		if _, err := envFormats["dotenv"]([]stack.Var{{Name: "A", Value: bad}}, "p"); err == nil {
			t.Errorf("%q written in a .env file", bad)
		}
	}
}

// TestHandVars: the variables of an agent started by hand are stack.AgentVars with the gate's
// listen address (the loopback for a gate on every address), up.json's ca.pem and bundle.
func TestHandVars(t *testing.T) {
	for listen, want := range map[string]string{
		"127.0.0.1:3130": "http://me:@127.0.0.1:3130",
		"0.0.0.0:3130":   "http://me:@127.0.0.1:3130",
		"[::]:3130":      "http://me:@[::1]:3130",
		"[::1]:40000":    "http://me:@[::1]:40000",
	} {
		state := t.TempDir()
		up, _ := json.Marshal(stack.Up{Listen: listen, CACert: "/s/ca/ca.pem", CABundle: "/s/ca-bundle.pem"})
		os.WriteFile(filepath.Join(state, stack.UpFile), up, 0o600)
		vars, proxy, err := handVars(state, "me")
		if err != nil || proxy != want {
			t.Errorf("%s: %q %v, want %s", listen, proxy, err, want)
			continue
		}
		if got, want := vars, stack.AgentVars(want, "/s/ca/ca.pem", "/s/ca-bundle.pem"); len(got) != len(want) || got[0] != want[0] || got[len(got)-1] != want[len(want)-1] {
			t.Errorf("%s: %v, want %v", listen, got, want)
		}
	}
	state := t.TempDir()
	if _, _, err := handVars(state, "me"); err == nil || !strings.Contains(err.Error(), "no running stack in "+state) {
		t.Errorf("no up.json: %v", err)
	}
	up, _ := json.Marshal(stack.Up{Listen: "127.0.0.1:3130", CACert: "/s/ca/ca.pem"})
	os.WriteFile(filepath.Join(state, stack.UpFile), up, 0o600)
	if _, _, err := handVars(state, "me"); err == nil || !strings.Contains(err.Error(), "stop lox run and start it again") {
		t.Errorf("an older up.json: %v", err)
	}
}

func TestRunEnvFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"--format", "csh"}, 2, "use sh, fish or dotenv"},
		{[]string{"--name", "a b"}, 2, "--name"},
		{[]string{"extra"}, 2, "unexpected argument"},
		{[]string{"--state", "/nonexistent"}, 1, "no running stack in /nonexistent"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(append([]string{"env"}, c.args...), &stdout, &stderr); code != c.code || !strings.Contains(stderr.String(), c.err) || stdout.Len() > 0 {
			t.Errorf("lox env %v: exit %d, stderr %q, stdout %q; want %d and %q", c.args, code, stderr.String(), stdout.String(), c.code, c.err)
		}
	}
}
