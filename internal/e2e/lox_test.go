package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/stack"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// minimalPolicy names this machine as the container "local", and the enclosure subnet too: an
// agent lox run -- starts comes from there.
const minimalPolicy = "version = 1\n[sources]\nlocal = [\"127.0.0.0/8\", \"198.18.0.0/24\"]\n"

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func TestLoxStopsEverythingOnSIGTERM(t *testing.T) {
	r := startStack(t, minimalPolicy)
	pids := r.up.PIDs
	if pids["gate"] == 0 || pids["console"] == 0 || r.up.Gate == "" || r.up.AuditDir == "" || r.up.ConsoleSocket == "" {
		t.Fatalf("up.json lacks fields: %+v", r.up)
	}
	r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		t.Fatal("lox did not exit within 10s of SIGTERM")
	}
	if code := r.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("lox exit code %d:\n%s", code, r.out)
	}
	testkit.WaitFor(t, 5*time.Second, "gate and console gone", func() bool {
		return !alive(pids["gate"]) && !alive(pids["console"])
	})
	if _, err := os.Stat(filepath.Join(r.state, stack.UpFile)); !os.IsNotExist(err) {
		t.Errorf("up.json left behind: %v", err)
	}
}

func TestLoxRefusesAnInvalidPolicy(t *testing.T) {
	state := t.TempDir()
	pol := filepath.Join(state, "bad.toml")
	os.WriteFile(pol, []byte("version = 1\n[[rule]]\nname = \"x\"\nhosts = [\"a.example\"]\nverdict = \"maybe\"\n"), 0o600)
	cmd := execLox(t, "run", "--headless", "--state", state, "--policy", pol, "--listen", "127.0.0.1:0")
	out, _ := cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() == 0 || !strings.Contains(string(out), `bad.toml:5: rule "x": verdict "maybe" is unknown`) {
		t.Fatalf("exit %d:\n%s", cmd.ProcessState.ExitCode(), out)
	}
}
