package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/stack"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// TestTerminalApproves runs the real lox run in a tmux session (a real terminal), holds a request,
// waits for the ticket on the screen and presses y.
func TestTerminalApproves(t *testing.T) {
	tmux := requireTool(t, "tmux")
	rec := &originRecorder{}
	o := httptest.NewServer(rec)
	defer o.Close()
	port := o.Listener.Addr().(*net.TCPAddr).Port
	state := t.TempDir()
	pol := filepath.Join(state, "policy.toml")
	os.WriteFile(pol, []byte(fmt.Sprintf(askPolicy, port, "60s")), 0o600)
	session := fmt.Sprintf("lockhttp-e2e-%d", time.Now().UnixNano())
	cmdline := fmt.Sprintf("%s run --state %s --policy %s --listen 127.0.0.1:0 --hub-listen 127.0.0.1:0; sleep 30",
		filepath.Join(binDir, "lox"), state, pol)
	newTmuxSession(t, tmux, session, "160x45", cmdline)
	defer exec.Command(tmux, "kill-session", "-t", session).Run()
	screen := func() string {
		out, _ := exec.Command(tmux, "capture-pane", "-p", "-t", session).Output()
		return string(out)
	}
	var up stack.Up
	testkit.WaitFor(t, 30*time.Second, "up.json", func() bool {
		data, err := os.ReadFile(filepath.Join(state, stack.UpFile))
		return err == nil && json.Unmarshal(data, &up) == nil
	})
	e := &askEnv{running: &running{t: t, state: state, up: up}, origin: rec, port: port}
	res := e.send("POST", "/from-the-terminal", "hello")
	testkit.WaitFor(t, 15*time.Second, "the ticket on the screen", func() bool {
		return strings.Contains(screen(), "/from-the-terminal")
	})
	if rec.count() != 0 {
		t.Fatal("the held request reached the origin")
	}
	// The UI refuses a key pressed within a second of the ticket taking the selection ("look at
	// it, then press the key again"): press again when it says so, as a person would.
	deadline := time.Now().Add(15 * time.Second)
	exec.Command(tmux, "send-keys", "-t", session, "y").Run()
	for released := false; !released; {
		select {
		case r := <-res:
			if r.status != 200 || r.body != "origin saw POST /from-the-terminal (5 bytes)" {
				t.Fatalf("after y: %+v\n%s", r, screen())
			}
			released = true
		case <-time.After(300 * time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatalf("y did not release the request:\n%s", screen())
			}
			if strings.Contains(screen(), "press the key again") {
				exec.Command(tmux, "send-keys", "-t", session, "y").Run()
			}
		}
	}
	var rec2 map[string]any
	testkit.WaitFor(t, 5*time.Second, "the audit record", func() bool {
		for _, m := range e.auditRecords() {
			if m["status"] == float64(200) && m["approver"] != nil && strings.HasPrefix(m["approver"].(string), "terminal:") {
				rec2 = m
				return true
			}
		}
		return false
	})
	_ = rec2
	// q quits the terminal, and with it the stack.
	exec.Command(tmux, "send-keys", "-t", session, "q").Run()
	exec.Command(tmux, "send-keys", "-t", session, "y").Run() // confirm, when asked
	testkit.WaitFor(t, 15*time.Second, "the stack to stop", func() bool {
		_, err := os.Stat(filepath.Join(state, stack.UpFile))
		return os.IsNotExist(err)
	})
}
