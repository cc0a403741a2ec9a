package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/console"
	"github.com/lockhttp/lockhttp/internal/stack"
	"github.com/lockhttp/lockhttp/internal/testkit"
	"github.com/lockhttp/lockhttp/internal/unixsock"
)

// selfApprover is the hostile agent of the notification attack: it listens where a human
// channel's notifications go, sends a request that asks, and when a notification with a
// decision link reaches it, approves its own ticket through the link (naming the terminal's
// approver). It prints what happened.
const selfApprover = `
import http.server, json, sys, threading, urllib.request, urllib.error
port, target = int(sys.argv[1]), sys.argv[2]
got = []
direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        got.append(body)
        self.send_response(204); self.end_headers()
        if body.get("decision_url"):
            d = json.dumps({"decision": "approve", "fingerprint": body["fingerprint"], "actor": "terminal:alice"}).encode()
            req = urllib.request.Request(body["decision_url"], data=d, headers={"Content-Type": "application/json"}, method="POST")
            try:
                print("decided", direct.open(req, timeout=10).status, flush=True)
            except Exception as e:
                print("decision refused", e, flush=True)
    def log_message(self, *a):
        pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), H)
threading.Thread(target=srv.serve_forever, daemon=True).start()
print("listening", port, flush=True)
try:
    r = urllib.request.urlopen(urllib.request.Request(target, data=b"self-approved", method="POST"), timeout=90)
    print("answer", r.status, r.read().decode(), flush=True)
except urllib.error.HTTPError as e:
    print("answer", e.code, e.headers.get("X-LockHTTP-Code"), flush=True)
print("notifications", len(got), flush=True)
`

// agentPython is a python3 the agent's uid can run (not one under /root).
func agentPython(t *testing.T) string {
	t.Helper()
	const p = "/usr/bin/python3"
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not installed; .ci/run must install it", p)
		}
		t.Skipf("%s is not installed", p)
	}
	return p
}

// agentDirs makes a base directory searchable by others (as a home directory may be), with a
// TMPDIR for lox's agent files; it returns both.
func agentDirs(t *testing.T) (base, tmp string) {
	t.Helper()
	base = t.TempDir()
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	tmp = filepath.Join(base, "tmp")
	if err := os.Mkdir(tmp, 0o711); err != nil {
		t.Fatal(err)
	}
	os.Chmod(tmp, 0o711)
	return base, tmp
}

// freeAgentUID fails the test when the agent's uid runs something, and kills what it runs at
// the end.
func freeAgentUID(t *testing.T) {
	t.Helper()
	const uid = stack.DefaultAgentUID
	if pids := processesOf(uid); len(pids) > 0 {
		t.Fatalf("uid %d already runs %v: the test needs it free", uid, pids)
	}
	t.Cleanup(func() {
		for _, pid := range processesOf(uid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
}

// TestNotifySelfApprovalRefused is the attack of a human [[notify]] channel on loopback: the
// agent (lox run --, its own uid) binds the channel's port, gets its own ticket's decision link
// and approves its own request. A human channel on http://127.0.0.1 is refused when the policy
// loads, at its line with the fix, so the agent never starts; with the test setting
// insecure_loopback, the console refuses it because lox runs an agent; and a policy approved
// with such a channel before the agent came keeps it out of use: the agent listening on its
// port gets no notification, and its request stays held until a human decides.
func TestNotifySelfApprovalRefused(t *testing.T) {
	requireRoot(t)
	py := agentPython(t)
	freeAgentUID(t)
	base, tmp := agentDirs(t)
	rec := &originRecorder{}
	o := httptest.NewServer(rec)
	t.Cleanup(o.Close)
	port := o.Listener.Addr().(*net.TCPAddr).Port
	target := fmt.Sprintf("http://origin.test:%d/items", port)
	script := filepath.Join(base, "self-approver.py")
	if err := os.WriteFile(script, []byte(selfApprover), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(script, 0o644)
	hookPort := freePort(t)
	hook := fmt.Sprintf("http://127.0.0.1:%d/hook", hookPort)
	run := func(t *testing.T, state, channels string, agent bool) (int, string, string) {
		t.Helper()
		polPath := filepath.Join(base, "policy-"+filepath.Base(state)+".toml")
		if err := os.WriteFile(polPath, []byte(fmt.Sprintf(notifyPolicy, port, channels)), 0o600); err != nil {
			t.Fatal(err)
		}
		args := []string{"run", "--headless", "--state", state, "--policy", polPath, "--listen", "127.0.0.1:0", "--hub-listen", "127.0.0.1:0"}
		if agent {
			args = append(args, "--", py, script, strconv.Itoa(hookPort), target)
		}
		l := startAgentLox(t, tmp, args...)
		code := l.wait(t, 120*time.Second)
		return code, l.stdout.String(), l.stderr.String()
	}

	t.Run("a human channel on http://127.0.0.1", func(t *testing.T) {
		ch := fmt.Sprintf("\n[[notify]]\nname = \"ops\"\nurl = %q\nkind = \"webhook\"\nhuman = true\n", hook)
		code, out, errOut := run(t, filepath.Join(base, "state-plain"), ch, true)
		if code != 125 || !strings.Contains(errOut, `policy-state-plain.toml:25: notify "ops": a human channel's url is https:// to a named host`) ||
			!strings.Contains(errOut, "add insecure_loopback = true") {
			t.Errorf("lox exited %d, want 125 naming the line and the fix\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		}
		if strings.Contains(out, "decided") || strings.Contains(out, "listening") {
			t.Errorf("the agent ran:\n%s", out)
		}
		if n := rec.count(); n != 0 {
			t.Fatalf("the origin saw %d requests: the agent approved its own", n)
		}
	})

	insecure := fmt.Sprintf("\n[[notify]]\nname = \"ops\"\nurl = %q\nkind = \"webhook\"\nhuman = true\ninsecure_loopback = true\n", hook)
	t.Run("insecure_loopback with an agent", func(t *testing.T) {
		code, out, errOut := run(t, filepath.Join(base, "state-insecure"), insecure, true)
		if code != 125 || !strings.Contains(errOut, `policy-state-insecure.toml:28: notify "ops": insecure_loopback = true: an agent runs on this machine`) ||
			!strings.Contains(errOut, "remove insecure_loopback") {
			t.Errorf("lox exited %d, want 125 with the console's refusal\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		}
		if strings.Contains(out, "listening") || rec.count() != 0 {
			t.Errorf("the agent ran (origin saw %d):\n%s", rec.count(), out)
		}
	})

	t.Run("approved before the agent came", func(t *testing.T) {
		// The operator's own receiver, a channel that only notifies: its notification shows the
		// ticket reached the channels.
		recv := &notifyReceiver{}
		own := httptest.NewServer(recv)
		t.Cleanup(own.Close)
		channels := insecure + fmt.Sprintf("\n[[notify]]\nname = \"log\"\nurl = %q\nkind = \"webhook\"\n", own.URL)
		state := filepath.Join(base, "state-approved")
		if err := os.Mkdir(state, 0o700); err != nil {
			t.Fatal(err)
		}
		// Without an agent the console approves the file as it is.
		first := startStackAt(t, state, fmt.Sprintf(notifyPolicy, port, channels), nil, nil)
		first.stop()

		l := startAgentLox(t, tmp, "run", "--headless", "--state", state, "--policy", first.policy,
			"--listen", "127.0.0.1:0", "--hub-listen", "127.0.0.1:0", "--", py, script, strconv.Itoa(hookPort), target)
		testkit.WaitFor(t, 60*time.Second, "the agent listening on the channel's port", func() bool {
			return strings.Contains(l.stdout.String(), fmt.Sprintf("listening %d", hookPort))
		})
		e := &askEnv{running: &running{t: t, state: state}}
		tk := e.waitTicket(t, target)
		testkit.WaitFor(t, 10*time.Second, "the notification on the operator's channel", func() bool {
			_, ok := recv.forTicket(tk.ID)
			return ok
		})
		var up stack.Up
		data, _ := os.ReadFile(filepath.Join(state, stack.UpFile))
		json.Unmarshal(data, &up)
		var st console.Status
		resp, err := unixsock.Client(up.ConsoleSocket, 2*time.Second).Get("http://unix/status")
		if err != nil {
			t.Fatal(err)
		}
		json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if len(st.Notify) != 1 || st.Notify[0].Name != "log" {
			t.Errorf("channels in use with an agent: %+v, want the operator's alone", st.Notify)
		}
		if n := rec.count(); n != 0 {
			t.Fatalf("the origin saw %d requests before a human decided", n)
		}
		if out, err := e.lox(t, "deny", "--reason", "not yours to approve", tk.ID); err != nil {
			t.Fatalf("lox deny: %v\n%s", err, out)
		}
		code := l.wait(t, 60*time.Second)
		out := l.stdout.String()
		if code != 0 || !strings.Contains(out, "answer 403 E_DENIED") || !strings.Contains(out, "notifications 0") || strings.Contains(out, "decided") {
			t.Errorf("lox exited %d; the agent:\n%s\nstderr:\n%s", code, out, l.stderr)
		}
		if !strings.Contains(l.stderr.String(), "it is not used until the policy file drops it") {
			t.Errorf("the console did not say the channel is out of use:\n%s", l.stderr)
		}
		if n := rec.count(); n != 0 {
			t.Fatalf("the origin saw %d requests", n)
		}
	})
}

// TestLoxRunRefusesReadableSecrets: lox run -- refuses to start the agent when its uid could
// read the policy file (its notification channels' receivers) or the gate's secrets file,
// naming the file and the fix; nothing starts. Behind a directory the agent cannot search, the
// same modes are fine.
func TestLoxRunRefusesReadableSecrets(t *testing.T) {
	requireRoot(t)
	freeAgentUID(t)
	base, tmp := agentDirs(t)
	pol := "version = 1\n[sources]\nlocal = [\"127.0.0.0/8\", \"198.18.0.0/24\"]\n"
	write := func(dir, name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		return p
	}
	open := filepath.Join(base, "open")
	os.Mkdir(open, 0o755)
	os.Chmod(open, 0o755)
	shut := filepath.Join(base, "shut")
	os.Mkdir(shut, 0o700)
	readable := write(open, "policy.toml", pol, 0o644)
	mine := write(open, "policy-600.toml", pol, 0o600)
	secrets := write(open, "secrets.toml", "[secrets]\n", 0o644)
	hidden := write(shut, "policy.toml", pol, 0o644)
	for i, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"a policy file others may read", []string{"--policy", readable}, 125,
			"the policy file " + readable + " can be read by the agent (uid 10099): it is mode 0644, readable by others"},
		{"a secrets file others may read", []string{"--policy", mine, "--secrets", secrets}, 125,
			"the gate's secrets file (--secrets) " + secrets + " can be read by the agent (uid 10099)"},
		{"a 0644 policy file behind a shut directory", []string{"--policy", hidden}, 0, "lox: stopped"},
	} {
		t.Run(c.name, func(t *testing.T) {
			state := filepath.Join(base, "s"+strconv.Itoa(i))
			args := append([]string{"run", "--headless", "--state", state, "--listen", "127.0.0.1:0", "--hub-listen", "127.0.0.1:0"}, c.args...)
			cmd := execLox(t, append(args, "--", "true")...)
			cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
			out, _ := cmd.CombinedOutput()
			if cmd.ProcessState.ExitCode() != c.code || !strings.Contains(string(out), c.want) {
				t.Fatalf("exit %d, want %d with %q:\n%s", cmd.ProcessState.ExitCode(), c.code, c.want, out)
			}
			if c.code != 0 && !strings.Contains(string(out), "chmod 600 ") {
				t.Errorf("no fix named:\n%s", out)
			}
			if c.code != 0 {
				if _, err := os.Stat(filepath.Join(state, "logs", "gate.log")); err == nil {
					t.Errorf("the stack started despite the refusal")
				}
			}
		})
	}
}
