package e2e

import (
	"context"
	"crypto/rand"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/signer"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// doctorPolicy has no floor exception (each would be a WARN) and one rule that asks.
const doctorPolicy = `version = 1
[[rule]]
name = "ask-everything"
hosts = ["ask.example"]
verdict = "ask"
[sources]
local = ["127.0.0.0/8"]
`

// runDoctor runs lockhttp doctor and returns its output and exit status.
func runDoctor(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "lockhttp"), append([]string{"doctor"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil && cmd.ProcessState == nil {
		t.Fatal(err)
	}
	return string(out), cmd.ProcessState.ExitCode()
}

// hasLine reports whether out has a line of level for check that contains want.
func hasLine(out, level, check, want string) bool {
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && f[0] == level && f[1] == check && strings.Contains(l, want) {
			return true
		}
	}
	return false
}

func TestDoctorLocalStack(t *testing.T) {
	r := startStack(t, doctorPolicy)

	// Sound, but no agent runs in an enclosure of lox's (clients set up by hand): one WARN.
	out, code := runDoctor(t, "--state", r.state)
	if code != 0 || !strings.Contains(out, "1 WARN, 0 ERROR") || !hasLine(out, "WARN", "enclosure", "sudo lox run -- COMMAND") {
		t.Fatalf("healthy stack: exit %d\n%s", code, out)
	}
	for _, l := range []struct{ check, want string }{
		{"ca-key", "mode 0600"},
		{"signer", "the gate reaches it"},
		{"console", "serves " + r.policy},
		{"hub", "no ticket pending"},
		{"gate", "decides with the console's policy"},
		{"ca", "a decrypted request through the gate succeeded"},
		{"audit", "being written"},
	} {
		if !hasLine(out, "OK", l.check, l.want) {
			t.Errorf("no OK %s line with %q:\n%s", l.check, l.want, out)
		}
	}

	t.Run("a pending ticket", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		pu, _ := url.Parse(r.up.Gate)
		c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
		go func() {
			req, _ := http.NewRequestWithContext(ctx, "GET", "http://ask.example/held", nil)
			if resp, err := c.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
		var out string
		testkit.WaitFor(t, 10*time.Second, "the doctor sees the ticket", func() bool {
			out, _ = runDoctor(t, "--state", r.state)
			return hasLine(out, "WARN", "hub", "1 ticket(s) pending")
		})
	})

	t.Run("an invalid policy file", func(t *testing.T) {
		good, _ := os.ReadFile(r.policy)
		defer func() {
			os.WriteFile(r.policy, good, 0o600)
			testkit.WaitFor(t, 10*time.Second, "the file loads again", func() bool {
				out, _ := runDoctor(t, "--state", r.state)
				return !strings.Contains(out, "does not load")
			})
		}()
		os.WriteFile(r.policy, append(append([]byte{}, good...), "[[rule]]\nname = \"x\"\nhosts = [\"a.example\"]\nverdict = \"maybe\"\n"...), 0o600)
		var out string
		var code int
		testkit.WaitFor(t, 10*time.Second, "the doctor sees the bad file", func() bool {
			out, code = runDoctor(t, "--state", r.state)
			return hasLine(out, "WARN", "console", `verdict "maybe" is unknown`)
		})
		if code != 0 || !hasLine(out, "OK", "gate", "decides with the console's policy") {
			t.Fatalf("the approved policy still serves, so only a WARN: exit %d\n%s", code, out)
		}
	})

	t.Run("a wrong key mode", func(t *testing.T) {
		key := filepath.Join(r.state, "ca", "ca-key.pem")
		os.Chmod(key, 0o644)
		defer os.Chmod(key, 0o600)
		out, code := runDoctor(t, "--state", r.state)
		if code != 2 || !hasLine(out, "ERROR", "ca-key", "mode 0644") || !strings.Contains(out, "chmod 600 "+key) {
			t.Fatalf("exit %d\n%s", code, out)
		}
	})

	t.Run("a stopped signer", func(t *testing.T) {
		pid := r.up.PIDs["signer"]
		if pid == 0 {
			t.Fatalf("up.json has no signer pid: %+v", r.up.PIDs)
		}
		syscall.Kill(pid, syscall.SIGSTOP)
		defer syscall.Kill(pid, syscall.SIGCONT)
		out, code := runDoctor(t, "--state", r.state)
		if code != 2 || !hasLine(out, "ERROR", "signer", "E_NO_SIGNER") {
			t.Fatalf("exit %d\n%s", code, out)
		}
	})
}

func TestDoctorExpiredCA(t *testing.T) {
	state := t.TempDir()
	if _, err := signer.InitCA(filepath.Join(state, "ca"), time.Now().Add(-signer.CALifetime-48*time.Hour), rand.Reader); err != nil {
		t.Fatal(err)
	}
	out, code := runDoctor(t, "--state", state)
	if code != 2 || !hasLine(out, "ERROR", "ca", "expired on") || !hasLine(out, "ERROR", "stack", "lox run --state "+state) {
		t.Fatalf("exit %d\n%s", code, out)
	}
}
