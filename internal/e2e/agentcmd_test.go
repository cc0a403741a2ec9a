package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/stack"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// requireRoot skips a test that must switch uids unless it runs as root, except under CI=true,
// where not being root is a failure (.ci/run runs the tests as root).
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("this test starts the agent as another uid and must run as root; .ci/run runs it so")
		}
		t.Skip("needs root: lox run -- switches the agent to a uid of its own")
	}
}

// processesOf lists the pids running with uid as their real or effective uid.
func processesOf(uid int) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "Uid:"); ok {
				f := strings.Fields(v)
				if len(f) >= 2 && (f[0] == strconv.Itoa(uid) || f[1] == strconv.Itoa(uid)) {
					pids = append(pids, pid)
				}
			}
		}
	}
	return pids
}

// agentLox is a lox run -- COMMAND under test.
type agentLox struct {
	cmd            *exec.Cmd
	stdout, stderr *testkit.Buffer
	done           chan struct{}
}

func startAgentLox(t *testing.T, tmp string, args ...string) *agentLox {
	t.Helper()
	l := &agentLox{stdout: &testkit.Buffer{}, stderr: &testkit.Buffer{}, done: make(chan struct{})}
	l.cmd = execLox(t, args...)
	l.cmd.Stdout, l.cmd.Stderr = l.stdout, l.stderr
	l.cmd.Env = append(os.Environ(), "TMPDIR="+tmp, "LOCKHTTP_TEST_SECRET=operator-only")
	if err := l.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { l.cmd.Wait(); close(l.done) }()
	t.Cleanup(func() {
		select {
		case <-l.done:
		default:
			l.cmd.Process.Kill()
			<-l.done
		}
	})
	return l
}

func (l *agentLox) wait(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-l.done:
	case <-time.After(within):
		t.Fatalf("lox still running after %s\nstdout:\n%s\nstderr:\n%s", within, l.stdout, l.stderr)
	}
	return l.cmd.ProcessState.ExitCode()
}

// TestLoxRunCommand runs an agent with lox run -- as the acceptance says: as a uid that is not
// the operator's, through the gate with the CA trusted, unable to read the state directory's
// tokens and keys, and lox exiting with the command's status.
func TestLoxRunCommand(t *testing.T) {
	requireRoot(t)
	requireTool(t, "curl")
	requireTool(t, "setsid")
	const uid = stack.DefaultAgentUID
	if pids := processesOf(uid); len(pids) > 0 {
		t.Fatalf("uid %d already runs %v: the test needs it free", uid, pids)
	}
	// Whatever runs as the uid at the end was started here (it ran nothing before): when a
	// failure leaves it, it must not outlive the test.
	t.Cleanup(func() {
		for _, pid := range processesOf(uid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	// The test's directories are searchable by others, as a home directory may be: only the
	// modes lox gives the state directory keep the agent out.
	base := t.TempDir()
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(base, "tmp")
	if err := os.Mkdir(tmp, 0o711); err != nil {
		t.Fatal(err)
	}
	os.Chmod(tmp, 0o711)
	state := filepath.Join(base, "state")
	pki := newTestPKI(t)
	rec := &originRecorder{}
	_, port := tlsOrigin(t, rec, pki.leaf(t, []string{"origin.test"}, time.Now().Add(24*time.Hour), false))
	polPath := filepath.Join(base, "policy.toml")
	pol := fmt.Sprintf("version = 1\ntrusted = [\"origin.test\"]\n[floor]\nallow_cidrs = [\"127.0.0.1/32\"]\nallow_ports = [%d]\n[floor.hosts]\n\"origin.test\" = \"127.0.0.1\"\n[sources]\nlocal = [\"127.0.0.0/8\", \"198.18.0.0/24\"]\n", port)
	if err := os.WriteFile(polPath, []byte(pol), 0o600); err != nil {
		t.Fatal(err)
	}
	loxArgs := func(extra ...string) []string {
		return append([]string{"run", "--headless", "--state", state, "--policy", polPath, "--listen", "127.0.0.1:0",
			"--hub-listen", "127.0.0.1:0", "--roots", pki.rootPEM}, extra...)
	}
	secrets := []string{"hub-cli.token", "hub-key.pem", "hub-gate.token", "ca/ca-key.pem", "up.json"}

	t.Run("agent", func(t *testing.T) {
		script := fmt.Sprintf(`id -u; id -G
curl -sS --max-time 10 https://origin.test:%d/agent-check; echo
echo "no_proxy=[$NO_PROXY] secret=[${LOCKHTTP_TEST_SECRET:-}] home=$HOME"
echo made > ./written && echo "wrote in $(pwd)"
for f in %s; do cat "%s/$f" >/dev/null && echo "READ $f"; done
setsid sh -c 'echo $$ > escaped; exec sleep 300' </dev/null >/dev/null 2>&1 &
while [ ! -s escaped ]; do sleep 0.05; done
exit 3`, port, strings.Join(secrets, " "), state)
		l := startAgentLox(t, tmp, loxArgs("--agent-name", "e2e-agent", "--", "sh", "-c", script)...)
		code := l.wait(t, 90*time.Second)
		out, errOut := l.stdout.String(), l.stderr.String()
		t.Logf("stdout:\n%s\nstderr:\n%s", out, errOut)
		if code != 3 {
			t.Errorf("lox exited %d, want the command's 3", code)
		}
		lines := strings.Split(out, "\n")
		if len(lines) < 5 {
			t.Fatalf("the command printed %d lines", len(lines))
		}
		if lines[0] != strconv.Itoa(uid) || lines[0] == "0" || lines[0] == strconv.Itoa(os.Getuid()) {
			t.Errorf("the command ran as uid %q, want %d", lines[0], uid)
		}
		if lines[1] != strconv.Itoa(uid) {
			t.Errorf("the command's groups are %q, want only %d", lines[1], uid)
		}
		if lines[2] != "origin saw GET /agent-check (0 bytes)" {
			t.Errorf("curl through the gate got %q", lines[2])
		}
		if !strings.HasPrefix(lines[3], "no_proxy=[] secret=[] home=") {
			t.Errorf("environment: %q (NO_PROXY must be empty, lox's own variables must not reach the agent)", lines[3])
		}
		home := strings.TrimPrefix(lines[3], "no_proxy=[] secret=[] home=")
		if !strings.HasPrefix(lines[4], "wrote in "+home) || !strings.HasPrefix(home, tmp+"/lox-agent-") {
			t.Errorf("working directory: %q, home %q, want a fresh one under %s", lines[4], home, tmp)
		} else if fi, err := os.Stat(filepath.Join(home, "written")); err != nil || fi.Sys().(*syscall.Stat_t).Uid != uid {
			t.Errorf("the agent's file: %v", err)
		}
		if strings.Contains(out, "READ ") {
			t.Errorf("the agent read a secret of the state directory:\n%s", out)
		}
		for _, f := range secrets {
			if !strings.Contains(errOut, filepath.Join(state, f)+": Permission denied") {
				t.Errorf("no permission denied for %s", f)
			}
		}
		if strings.Contains(out, "lockhttp is up") || !strings.Contains(errOut, "lockhttp is up") {
			t.Error("lox's own lines must go to stderr: the command has stdout")
		}
		// The audit has the request, with the agent's name on its CONNECT and on the request
		// inside the tunnel.
		r := &running{t: t, up: stack.Up{AuditDir: filepath.Join(state, "audit")}}
		var named, inside bool
		for _, m := range r.auditRecords() {
			named = named || (m["event"] == "connect" && m["agent"] == "e2e-agent" && strings.HasPrefix(fmt.Sprint(m["url"]), "origin.test:"))
			inside = inside || (m["event"] == "tunnel-request" && m["agent"] == "e2e-agent" && m["url"] == fmt.Sprintf("https://origin.test:%d/agent-check", port) && m["verdict"] == "FREE")
		}
		if !named || !inside {
			t.Errorf("audit: CONNECT with the agent's name %v, the request inside %v", named, inside)
		}
		if rec.count() != 1 {
			t.Errorf("the origin saw %d requests, want 1", rec.count())
		}
		// What the agent left running in a session of its own is gone with it, and so is the
		// stack.
		escaped, err := os.ReadFile(filepath.Join(home, "escaped"))
		if err != nil || strings.TrimSpace(string(escaped)) == "" {
			t.Errorf("the escaped process's pid: %v", err)
		}
		testkit.WaitFor(t, 5*time.Second, "no process left as the agent's uid", func() bool { return len(processesOf(uid)) == 0 })
		if _, err := os.Stat(filepath.Join(state, stack.UpFile)); !os.IsNotExist(err) {
			t.Errorf("up.json left behind: %v", err)
		}
	})

	t.Run("SIGTERM goes to the command", func(t *testing.T) {
		script := `trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 0.1; done`
		l := startAgentLox(t, tmp, loxArgs("--", "sh", "-c", script)...)
		testkit.WaitFor(t, 60*time.Second, "the command to start", func() bool { return strings.Contains(l.stdout.String(), "ready") })
		l.cmd.Process.Signal(syscall.SIGTERM)
		if code := l.wait(t, 30*time.Second); code != 7 || !strings.Contains(l.stdout.String(), "got-term") {
			t.Errorf("exit %d, want the command's 7 after its trap\nstdout:\n%s\nstderr:\n%s", code, l.stdout, l.stderr)
		}
	})

	t.Run("a signal's status", func(t *testing.T) {
		l := startAgentLox(t, tmp, loxArgs("--", "sh", "-c", "kill -KILL $$")...)
		if code := l.wait(t, 60*time.Second); code != 128+9 {
			t.Errorf("exit %d, want 137\nstderr:\n%s", code, l.stderr)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		open := filepath.Join(base, "open-state")
		os.Mkdir(open, 0o755)
		os.Chmod(open, 0o755)
		notMine := filepath.Join(base, "operators-dir")
		os.Mkdir(notMine, 0o755)
		// A policy whose [sources] lack the enclosure subnet, on a first start: the gate would
		// refuse every request of the agent.
		noSubnet := filepath.Join(base, "no-subnet.toml")
		os.WriteFile(noSubnet, []byte("version = 1\n[sources]\nlocal = [\"127.0.0.0/8\"]\n"), 0o600)
		noSubnetArgs := []string{"run", "--headless", "--state", filepath.Join(base, "state-no-subnet"), "--policy", noSubnet, "--listen", "127.0.0.1:0",
			"--hub-listen", "127.0.0.1:0", "--", "sh", "-c", "touch " + filepath.Join(tmp, "ran")}
		for _, tc := range []struct {
			name string
			args []string
			code int
			want string
		}{
			{"a state directory others may enter", []string{"run", "--headless", "--state", open, "--", "true"}, 125, "chmod 700 " + open},
			{"a working directory that is not the agent's", loxArgs("--agent-dir", notMine, "--", "true"), 125, "chown -R 10099 " + notMine},
			{"the working directory in the state directory", loxArgs("--agent-dir", filepath.Join(state, "work"), "--", "true"), 125, "one inside the other"},
			{"a command not found", loxArgs("--", "no-such-command-lockhttp"), 127, "no-such-command-lockhttp"},
			{"a policy that maps no container to the agent", noSubnetArgs, 125, `the approved policy maps no container to the agent's address 198.18.0.`},
		} {
			t.Run(tc.name, func(t *testing.T) {
				cmd := exec.CommandContext(ctx, filepath.Join(binDir, "lox"), tc.args...)
				cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
				out, _ := cmd.CombinedOutput()
				if cmd.ProcessState.ExitCode() != tc.code || !strings.Contains(string(out), tc.want) {
					t.Errorf("exit %d, want %d with %q:\n%s", cmd.ProcessState.ExitCode(), tc.code, tc.want, out)
				}
				if _, err := os.Stat(filepath.Join(tmp, "ran")); err == nil {
					t.Error("the command ran")
				}
			})
		}
	})
}
