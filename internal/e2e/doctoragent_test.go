package e2e

import (
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/testkit"
)

// TestDoctorUnusedSecretAndRootAgent: the doctor of a local stack WARNs for a secret of the
// gate's secrets file that no [[inject]] rule names, and for a process running as root with the
// gate's proxy in its environment (an agent started by hand as root, as eval "$(lox env)" in a
// root shell makes one); with neither it says OK.
func TestDoctorUnusedSecretAndRootAgent(t *testing.T) {
	requireRoot(t)
	secrets := filepath.Join(t.TempDir(), "gate-secrets.toml")
	if err := os.WriteFile(secrets, []byte("version = 1\n[secrets]\nanthropic = \"sk-ant-api03-unused\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := startStackWith(t, doctorPolicy, []string{"--secrets", secrets}, nil)

	out, _ := runDoctor(t, "--state", r.state)
	t.Logf("doctor, no agent:\n%s", out)
	if !hasLine(out, "WARN", "secrets", `the secret "anthropic" in `+secrets+` is named by no [[inject]] rule of the served policy (the served policy has no [[inject]] rule)`) {
		t.Errorf("no WARN for the secret no rule uses")
	}
	if strings.Contains(out, "sk-ant-api03-unused") {
		t.Errorf("the doctor printed the secret's value")
	}
	if !hasLine(out, "OK", "agent-uid", "no process running as root has the gate's proxy in its environment") {
		t.Errorf("no OK agent-uid line")
	}

	// An agent started by hand, as root, with the gate's proxy (the URL lox env prints).
	u, _ := url.Parse(r.up.Gate)
	agent := exec.Command("sleep", "300")
	agent.Env = []string{"PATH=" + os.Getenv("PATH"), "HTTPS_PROXY=http://claude:@" + u.Host}
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.Process.Kill(); agent.Wait() })
	testkit.WaitFor(t, 5*time.Second, "the agent's environment", func() bool {
		env, _ := os.ReadFile("/proc/" + strconv.Itoa(agent.Process.Pid) + "/environ")
		return strings.Contains(string(env), "HTTPS_PROXY=")
	})
	out, _ = runDoctor(t, "--state", r.state)
	t.Logf("doctor, an agent as root:\n%s", out)
	if !hasLine(out, "WARN", "agent-uid", "process "+strconv.Itoa(agent.Process.Pid)+" (sleep) runs as root with HTTPS_PROXY naming the gate's proxy") ||
		!hasLine(out, "WARN", "agent-uid", "fix: stop it and start it with sudo lox run -- COMMAND") {
		t.Errorf("no WARN for the agent running as root")
	}
	agent.Process.Signal(syscall.SIGKILL)
}
