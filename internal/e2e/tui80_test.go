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

// TestTerminalAt80Columns runs the real lox run in an 80x24 tmux session: the terminal UI's
// header names the proxy's address and the CA certificate agents trust (as up.json has them),
// and a held request's long URL is on the screen to its end, wrapped rather than cut.
func TestTerminalAt80Columns(t *testing.T) {
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
	newTmuxSession(t, tmux, session, "80x24", cmdline)
	defer exec.Command(tmux, "kill-session", "-t", session).Run()
	screen := func() string {
		out, _ := exec.Command(tmux, "capture-pane", "-p", "-t", session).Output()
		return unwrapScreen(string(out))
	}
	var up stack.Up
	testkit.WaitFor(t, 30*time.Second, "up.json", func() bool {
		data, err := os.ReadFile(filepath.Join(state, stack.UpFile))
		return err == nil && json.Unmarshal(data, &up) == nil
	})
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) { // polling the terminal
		s := screen()
		if strings.Contains(s, "proxy "+up.Gate) && strings.Contains(s, "CA "+up.CACert) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("want the proxy %s and the CA %s in the header:\n%s", up.Gate, up.CACert, s)
		}
	}
	if s := screen(); strings.Index(s, up.CACert) > strings.Index(s, "Pending tickets") {
		t.Fatalf("the CA goes in the header, above the tickets:\n%s", s)
	}

	path := "/repos/an-owner/a-repository/git/refs/heads/" + strings.Repeat("a-long-branch-name-", 4) + "THE-END"
	url := fmt.Sprintf("http://origin.test:%d%s", port, path)
	e := &askEnv{running: &running{t: t, state: state, up: up}, origin: rec, port: port}
	e.send("POST", path, "hello")
	testkit.WaitFor(t, 15*time.Second, "the whole URL on the screen", func() bool {
		return strings.Contains(screen(), url)
	})
	out, _ := exec.Command(tmux, "capture-pane", "-p", "-t", session).Output()
	for _, l := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		if n := len([]rune(l)); n > 80 {
			t.Errorf("a line of %d characters on an 80-column terminal: %q", n, l)
		}
	}
	// q, then y to the question about the pending ticket: the stack stops.
	exec.Command(tmux, "send-keys", "-t", session, "q").Run()
	exec.Command(tmux, "send-keys", "-t", session, "y").Run()
	testkit.WaitFor(t, 15*time.Second, "the stack to stop", func() bool {
		_, err := os.Stat(filepath.Join(state, stack.UpFile))
		return os.IsNotExist(err)
	})
}

// unwrapScreen joins the lines the terminal UI wrapped a URL onto (they begin with six spaces)
// to the line before them.
func unwrapScreen(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		l = strings.TrimRight(l, " ")
		if c, ok := strings.CutPrefix(l, "      "); ok && len(out) > 0 && c != "" && c[0] != ' ' {
			out[len(out)-1] += c
			continue
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}
