package signer

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/metrics"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// childEnv, when set to a socket path, makes the test binary a tiny client instead: it asks
// that socket for a certificate and prints what happened (see childClient).
const childEnv = "LOCKHTTP_SIGNER_TEST_CLIENT"

// childMetricsEnv, when set too, makes the child ask GET /metrics instead.
const childMetricsEnv = "LOCKHTTP_SIGNER_TEST_METRICS"

// nobody is the uid and gid the child runs as.
const nobody = 65534

func TestMain(m *testing.M) {
	if sock := os.Getenv(childEnv); sock != "" {
		fmt.Println(childClient(sock, os.Getenv(childMetricsEnv) != ""))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// childClient sends one POST /sign (or GET /metrics) over a raw connection and reports "status
// N" when an HTTP answer came (with "certificate" or "metrics" when it held one), "closed: ..."
// when the signer closed the connection without answering, or "dial: ..." when it could not
// connect.
func childClient(sock string, askMetrics bool) string {
	c, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		return "dial: " + err.Error()
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	body := signBody(nopTB{}, "example.com")
	req := fmt.Sprintf("POST /sign HTTP/1.1\r\nHost: signer\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	if askMetrics {
		req = "GET /metrics HTTP/1.1\r\nHost: signer\r\nConnection: close\r\n\r\n"
	}
	if _, err := io.WriteString(c, req); err != nil {
		if closedByPeer(err) {
			return "closed: " + err.Error()
		}
		return "write: " + err.Error()
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		if closedByPeer(err) {
			return "closed: " + err.Error()
		}
		return "read: " + err.Error()
	}
	b, _ := io.ReadAll(resp.Body)
	out := fmt.Sprintf("status %d", resp.StatusCode)
	if strings.Contains(string(b), "BEGIN CERTIFICATE") {
		out += " certificate"
	}
	if strings.Contains(string(b), "lockhttp_signer_") {
		out += " metrics"
	}
	return out
}

// closedByPeer reports whether err says the other end closed the connection. net/http's
// Transport may notice the close before it writes, and says so in words only.
func closedByPeer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		strings.Contains(err.Error(), "server closed idle connection")
}

// nopTB lets the child use the test helpers that take a testing.TB.
type nopTB struct{ testing.TB }

func (nopTB) Helper()               {}
func (nopTB) Fatal(args ...any)     { panic(fmt.Sprint(args...)) }
func (nopTB) Fatalf(string, ...any) { panic("fatal") }

// TestOtherUIDRefusedAtAccept runs a client as another uid (nobody) against a socket anyone may
// connect to (mode 0666): the signer closes the connection without a certificate and logs the
// uid and pid. As a control, the same child gets a certificate from a signer that allows it.
func TestOtherUIDRefusedAtAccept(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("this test must run as root in CI: it starts a client as another uid")
		}
		t.Skip("not root: cannot start a client as another uid")
	}
	dir := shortDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The test binary lives in a private build directory: copy it where nobody can run it.
	bin := filepath.Join(dir, "client")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}

	ca, _ := newCA(t)
	runChild := func(sock string, env ...string) (string, int) {
		cmd := exec.Command(bin)
		cmd.Env = append([]string{childEnv + "=" + sock}, env...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}}
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("child: %v: %s", err, out.String())
		}
		return strings.TrimSpace(out.String()), cmd.Process.Pid
	}

	t.Run("refused", func(t *testing.T) {
		logs := &testkit.Buffer{}
		sock := filepath.Join(dir, "refuse.sock")
		serve(t, ServerConfig{CA: ca, AllowUIDs: []int{os.Geteuid()}, Logger: slog.New(slog.NewJSONHandler(logs, nil))}, sock, 0o666)
		got, pid := runChild(sock)
		if !strings.HasPrefix(got, "closed: ") {
			t.Fatalf("child as uid %d: %q, want the connection closed without an answer", nobody, got)
		}
		refused := logLines(t, logs, "connection refused: uid not allowed")
		if len(refused) != 1 {
			t.Fatalf("%d refusals logged, want 1:\n%s", len(refused), logs)
		}
		if refused[0]["uid"] != float64(nobody) || refused[0]["pid"] != float64(pid) {
			t.Errorf("refusal logged as %v, want uid %d pid %d", refused[0], nobody, pid)
		}
		if n := len(logLines(t, logs, "sign")); n != 0 {
			t.Errorf("the refused connection reached the handler (%d sign lines)", n)
		}
		// The signer keeps accepting: its own uid still gets a certificate.
		if got := childClient(sock, false); got != "status 200 certificate" {
			t.Errorf("allowed uid after the refusal: %q", got)
		}
	})

	// GET /metrics on the socket: the same refusal at accept for another uid, the page for an
	// allowed one.
	withMetrics := func(cfg ServerConfig) ServerConfig {
		reg := metrics.NewRegistry("signer", "test")
		cfg.Registry, cfg.Metrics = reg, metrics.NewSigner(reg)
		return cfg
	}
	t.Run("metrics refused", func(t *testing.T) {
		logs := &testkit.Buffer{}
		sock := filepath.Join(dir, "mrefuse.sock")
		serve(t, withMetrics(ServerConfig{CA: ca, AllowUIDs: []int{os.Geteuid()}, Logger: slog.New(slog.NewJSONHandler(logs, nil))}), sock, 0o666)
		got, pid := runChild(sock, childMetricsEnv+"=1")
		if !strings.HasPrefix(got, "closed: ") {
			t.Fatalf("GET /metrics as uid %d: %q, want the connection closed without an answer", nobody, got)
		}
		refused := logLines(t, logs, "connection refused: uid not allowed")
		if len(refused) != 1 || refused[0]["uid"] != float64(nobody) || refused[0]["pid"] != float64(pid) {
			t.Errorf("refusals logged %v, want one of uid %d pid %d", refused, nobody, pid)
		}
		if got := childClient(sock, true); got != "status 200 metrics" {
			t.Errorf("GET /metrics as the allowed uid: %q", got)
		}
	})
	t.Run("control: metrics allowed", func(t *testing.T) {
		sock := filepath.Join(dir, "mallow.sock")
		serve(t, withMetrics(ServerConfig{CA: ca, AllowUIDs: []int{nobody}}), sock, 0o666)
		if got, _ := runChild(sock, childMetricsEnv+"=1"); got != "status 200 metrics" {
			t.Errorf("GET /metrics as allowed uid %d: %q, want the page", nobody, got)
		}
	})

	t.Run("control: allowed", func(t *testing.T) {
		sock := filepath.Join(dir, "allow.sock")
		serve(t, ServerConfig{CA: ca, AllowUIDs: []int{nobody}}, sock, 0o666)
		if got, _ := runChild(sock); got != "status 200 certificate" {
			t.Errorf("child as allowed uid %d: %q, want a certificate", nobody, got)
		}
	})
}
