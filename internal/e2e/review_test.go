package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/stack"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// tmuxStack runs lox run with its terminal UI in a tmux session.
type tmuxStack struct {
	tmux, session, state, policy string
	up                           stack.Up
}

func startTmuxStack(t *testing.T, policyText string) *tmuxStack {
	t.Helper()
	tmux := requireTool(t, "tmux")
	state := t.TempDir()
	pol := filepath.Join(state, "policy.toml")
	os.WriteFile(pol, []byte(policyText), 0o600)
	s := &tmuxStack{tmux: tmux, session: fmt.Sprintf("lockhttp-e2e-%d", time.Now().UnixNano()), state: state, policy: pol}
	s.launch(t)
	return s
}

func (s *tmuxStack) launch(t *testing.T) {
	t.Helper()
	os.Remove(filepath.Join(s.state, stack.UpFile))
	cmdline := fmt.Sprintf("%s run --state %s --policy %s --listen 127.0.0.1:0 --hub-listen 127.0.0.1:0; sleep 60",
		filepath.Join(binDir, "lox"), s.state, s.policy)
	newTmuxSession(t, s.tmux, s.session, "180x50", cmdline)
	t.Cleanup(func() { exec.Command(s.tmux, "kill-session", "-t", s.session).Run() })
	testkit.WaitFor(t, 30*time.Second, "up.json", func() bool {
		data, err := os.ReadFile(filepath.Join(s.state, stack.UpFile))
		return err == nil && json.Unmarshal(data, &s.up) == nil
	})
}

// newTmuxSession starts a detached tmux session of the given size running cmdline. When the last
// session of tmux's server has just been killed (by this test or the one before it), the server
// is still exiting and a new client can reach it and fail with "server exited unexpectedly":
// that failure is retried until a new server answers.
func newTmuxSession(t *testing.T, tmux, session, size, cmdline string) {
	t.Helper()
	w, h, _ := strings.Cut(size, "x")
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := exec.Command(tmux, "new-session", "-d", "-s", session, "-x", w, "-y", h, cmdline).CombinedOutput()
		if err == nil {
			return
		}
		if !strings.Contains(string(out), "server exited unexpectedly") || time.Now().After(deadline) {
			t.Fatalf("tmux: %v\n%s", err, out)
		}
		time.Sleep(100 * time.Millisecond) // the old server is still on its way out
	}
}

func (s *tmuxStack) screen() string {
	out, _ := exec.Command(s.tmux, "capture-pane", "-p", "-t", s.session, "-S", "-200").Output()
	return string(out)
}

func (s *tmuxStack) keys(keys ...string) {
	exec.Command(s.tmux, append([]string{"send-keys", "-t", s.session}, keys...)...).Run()
}

// command types a : command in the terminal UI and presses Enter.
func (s *tmuxStack) command(cmd string) {
	s.keys(":")
	time.Sleep(100 * time.Millisecond) // the prompt opens on the next frame
	s.keys("-l", cmd)
	s.keys("Enter")
}

func (s *tmuxStack) quit(t *testing.T) {
	// An Escape and the ':' after it can reach the UI in one read, which a terminal reads as
	// alt+':' rather than two keys: on a busy machine the command is typed again until the
	// stack stops.
	stopped := func() bool {
		_, err := os.Stat(filepath.Join(s.state, stack.UpFile))
		return os.IsNotExist(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !stopped() && time.Now().Before(deadline) {
		s.keys("Escape")
		s.command("q!")
		for end := time.Now().Add(4 * time.Second); !stopped() && time.Now().Before(end); {
			time.Sleep(50 * time.Millisecond) // polling the state directory
		}
	}
	if !stopped() {
		t.Fatal("the stack did not stop within 20s of :q!")
	}
	exec.Command(s.tmux, "kill-session", "-t", s.session).Run()
}

var versionRE = regexp.MustCompile(`:review approve ([0-9a-f]{12})`)

// TestLooseningWaitsForTheConsolesTerminal: an edit that turns an ask rule into a free one does
// not change the gate's decisions until it is approved with :review in the console's terminal;
// a restart with an unapproved loosening serves the approved policy.
func TestLooseningWaitsForTheConsolesTerminal(t *testing.T) {
	rec := &originRecorder{}
	o := httptest.NewServer(rec)
	defer o.Close()
	port := o.Listener.Addr().(*net.TCPAddr).Port
	s := startTmuxStack(t, fmt.Sprintf(askPolicy, port, "1s"))
	e := &askEnv{running: &running{t: t, state: s.state, up: s.up}, origin: rec, port: port}
	if r := <-e.send("POST", "/x", "a"); r.code != "E_PENDING" {
		t.Fatalf("before the edit: %+v", r)
	}
	orig, _ := os.ReadFile(s.policy)
	loose := strings.Replace(string(orig), `verdict = "ask"`, `verdict = "free"`, 1)
	os.WriteFile(s.policy, []byte(loose), 0o600)
	testkit.WaitFor(t, 10*time.Second, "the console to show the waiting review", func() bool {
		return strings.Contains(s.screen(), "WAIT FOR REVIEW")
	})
	// Once the gate has asked the console again, it still asks.
	gatePolledAfter(t, s.up, time.Now())
	if r := <-e.send("POST", "/x", "a"); r.code != "E_PENDING" {
		t.Fatalf("a loosening applied without review: %+v", r)
	}
	// lockhttp explain --state decides as the gate does, with the approved policy; --policy
	// with the edited file says what approving it would change.
	target := fmt.Sprintf("http://origin.test:%d/x", port)
	for _, tc := range []struct {
		args    []string
		verdict string
	}{
		{[]string{"--state", s.state}, "ASK"},
		{[]string{"--policy", s.policy}, "FREE"},
	} {
		args := append(append([]string{"explain"}, tc.args...), "POST", target, "-d", "a")
		out, err := exec.Command(filepath.Join(binDir, "lockhttp"), args...).Output()
		var got struct{ Verdict, Rule string }
		if err != nil || json.Unmarshal(out, &got) != nil || got.Verdict != tc.verdict || got.Rule != "ask-writes" {
			t.Errorf("lockhttp %v: %v %s; want %s by ask-writes", args, err, out, tc.verdict)
		}
	}
	s.command("review")
	var version string
	testkit.WaitFor(t, 10*time.Second, "the review on the screen", func() bool {
		m := versionRE.FindStringSubmatch(s.screen())
		if m != nil {
			version = m[1]
		}
		return m != nil && strings.Contains(s.screen(), "verdict ask → free")
	})
	s.keys("Escape")
	s.command("review approve " + version)
	approved := time.Now()
	// The gate takes the approved policy at its next poll of the console (every 2 s); on a
	// loaded machine the typed command and the poll both take their time, so the test waits for
	// the gate to hold the approved version, then sends the request once.
	testkit.WaitFor(t, 60*time.Second, "the gate to decide with the approved policy "+version, func() bool {
		return strings.Contains(gateStatus(t, s.up).PolicyVersion, version)
	})
	t.Logf("applied %s after the approval", time.Since(approved))
	if r := <-e.send("POST", "/x", "a"); r.status != 200 {
		t.Fatalf("after the approval: %+v", r)
	}

	// Another loosening, rejected: it never applies, and the console says the file differs.
	looser := strings.Replace(loose, `methods = ["POST", "DELETE"]`, `methods = ["POST", "DELETE", "PUT"]`, 1)
	os.WriteFile(s.policy, []byte(looser), 0o600)
	testkit.WaitFor(t, 10*time.Second, "the second review", func() bool { return strings.Contains(s.screen(), "WAIT FOR REVIEW") })
	s.command("review")
	testkit.WaitFor(t, 10*time.Second, "its version", func() bool {
		m := versionRE.FindAllStringSubmatch(s.screen(), -1)
		if len(m) > 0 && m[len(m)-1][1] != version {
			version = m[len(m)-1][1]
			return true
		}
		return false
	})
	s.keys("Escape")
	s.command("review reject " + version + " no PUT for now")
	testkit.WaitFor(t, 10*time.Second, "the rejection on the screen", func() bool { return strings.Contains(s.screen(), "DIFFERS") })
	gatePolledAfter(t, s.up, time.Now())
	if r := <-e.send("PUT", "/x", "a"); r.code != "E_PENDING" {
		t.Fatalf("a rejected loosening applied: %+v", r)
	}

	// A restart with the loosened file: the approved policy is served, and the rejection kept.
	s.quit(t)
	s.launch(t)
	e.running.up = s.up
	testkit.WaitFor(t, 10*time.Second, "the console to say the file differs", func() bool { return strings.Contains(s.screen(), "DIFFERS") })
	if r := <-e.send("PUT", "/x", "a"); r.code != "E_PENDING" {
		t.Fatalf("after a restart, the rejected loosening applied: %+v", r)
	}
	if r := <-e.send("POST", "/x", "a"); r.status != 200 {
		t.Fatalf("after a restart, the approved policy is not served: %+v", r)
	}
}

// gatePolledAfter waits until the gate has fetched the console's policy after since.
func gatePolledAfter(t *testing.T, up stack.Up, since time.Time) {
	t.Helper()
	testkit.WaitFor(t, 10*time.Second, "the gate to ask the console again", func() bool {
		return gateStatus(t, up).ConsoleChecked.After(since)
	})
}
