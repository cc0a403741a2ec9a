package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/stack"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// binDir holds the binaries built once for the whole test run.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "lockhttp-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// As README.md builds them: static, no C library.
	build := exec.Command("go", "build", "-o", dir+"/", "github.com/lockhttp/lockhttp/cmd/...")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building the binaries: %v\n%s", err, out)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// requireTool returns the path of a tool the test needs; it skips when the tool is absent,
// except under CI=true, where a missing tool is a failure (.ci/run installs it).
func requireTool(t *testing.T, name string) string {
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

// running is a local stack started with lox run --headless.
type running struct {
	t      *testing.T
	state  string
	policy string
	up     stack.Up
	cmd    *exec.Cmd
	out    *testkit.Buffer
	done   chan struct{}
}

// startStack writes policyText to a file and runs lox run --headless on it.
func startStack(t *testing.T, policyText string) *running {
	t.Helper()
	return startStackWith(t, policyText, nil, nil)
}

// startStackWith is startStack with more lox flags and environment variables.
func startStackWith(t *testing.T, policyText string, flags, env []string) *running {
	t.Helper()
	return startStackAt(t, t.TempDir(), policyText, flags, env)
}

// startStackAt is startStackWith on a state directory the test made (one whose audit
// directory, STATE/audit, it mounted a file system on).
func startStackAt(t *testing.T, state, policyText string, flags, env []string) *running {
	t.Helper()
	polPath := filepath.Join(state, "test-policy.toml")
	if err := os.WriteFile(polPath, []byte(policyText), 0o600); err != nil {
		t.Fatal(err)
	}
	r := &running{t: t, state: state, policy: polPath, out: &testkit.Buffer{}, done: make(chan struct{})}
	args := append([]string{"run", "--headless", "--state", state, "--policy", polPath, "--listen", "127.0.0.1:0", "--hub-listen", "127.0.0.1:0"}, flags...)
	r.cmd = exec.Command(filepath.Join(binDir, "lox"), args...)
	r.cmd.Stdout, r.cmd.Stderr = r.out, r.out
	if env != nil {
		r.cmd.Env = append(os.Environ(), env...)
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.cmd.Wait(); close(r.done) }()
	t.Cleanup(r.stop)
	upPath := filepath.Join(state, stack.UpFile)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if data, err := os.ReadFile(upPath); err == nil && json.Unmarshal(data, &r.up) == nil {
			break
		}
		select {
		case <-r.done:
			t.Fatalf("lox exited before up.json was written:\n%s", r.out)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no up.json after 30s:\n%s", r.out)
		}
	}
	return r
}

func (r *running) stop() {
	select {
	case <-r.done:
		return
	default:
	}
	r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		r.cmd.Process.Kill()
		<-r.done
		r.t.Errorf("lox did not stop within 10s of SIGTERM:\n%s", r.out)
	}
}

// auditRecords reads every record the gate wrote, but its intent records (testkit.AuditIntents).
func (r *running) auditRecords() []map[string]any {
	r.t.Helper()
	files, _ := filepath.Glob(filepath.Join(r.up.AuditDir, "*.jsonl"))
	var out []map[string]any
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			r.t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				r.t.Fatalf("audit line %q: %v", sc.Text(), err)
			}
			if m["event"] == "intent" {
				continue
			}
			out = append(out, m)
		}
	}
	return out
}

// recordFor returns the audit record of request id, waiting for it to be written.
func (r *running) recordFor(id string) map[string]any {
	r.t.Helper()
	var rec map[string]any
	testkit.WaitFor(r.t, 5*time.Second, "audit record "+id, func() bool {
		for _, m := range r.auditRecords() {
			if m["id"] == id {
				rec = m
				return true
			}
		}
		return false
	})
	return rec
}

// rawExchange sends raw bytes to the gate and returns everything it answers until it closes
// the connection or goes quiet.
func rawExchange(t *testing.T, addr string, raw string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	var b bytes.Buffer
	io.Copy(&b, c)
	return b.String()
}

// originRecorder is an httptest handler that records what reached the origin.
type originRecorder struct {
	mu   sync.Mutex
	reqs []recorded
}

type recorded struct {
	Method, Path, Host string
	Header             http.Header
	Body               []byte
}

func (o *originRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	o.mu.Lock()
	o.reqs = append(o.reqs, recorded{r.Method, r.URL.RequestURI(), r.Host, r.Header.Clone(), body})
	o.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain")
	fmt.Fprintf(w, "origin saw %s %s (%d bytes)", r.Method, r.URL.RequestURI(), len(body))
}

func (o *originRecorder) all() []recorded {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]recorded(nil), o.reqs...)
}

func (o *originRecorder) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.reqs)
}

var _ = context.Background
var _ = strings.Contains

func bufioReader(s string) *bufio.Reader { return bufio.NewReader(strings.NewReader(s)) }

func execLox(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	return exec.Command(filepath.Join(binDir, "lox"), args...)
}
