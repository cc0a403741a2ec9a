package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/signer"
	"github.com/lockhttp/lockhttp/internal/signerclient"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// mainEnv, when "1", makes the test binary run main() with its arguments: the tests drive the
// real binary, signals included.
const mainEnv = "LOCKHTTP_SIGNER_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) == "1" {
		main()
	}
	os.Exit(m.Run())
}

// notRoot is a uid the tests run the signer as, whatever the real one.
const notRoot = 10004

func testEnv(euid int) (env, *testkit.Buffer, *testkit.Buffer) {
	out, errs := &testkit.Buffer{}, &testkit.Buffer{}
	return env{stdout: out, stderr: errs, euid: euid, now: time.Now}, out, errs
}

// shortDir makes a directory with a path short enough for a unix socket.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "signer")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func initCA(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ca")
	e, _, errs := testEnv(notRoot)
	if code := run(context.Background(), []string{"init", "--dir", dir}, e); code != 0 {
		t.Fatalf("init: exit %d: %s", code, errs)
	}
	return dir
}

func TestUsage(t *testing.T) {
	ca := initCA(t)
	sock := filepath.Join(shortDir(t), "s.sock")
	serve := []string{"serve", "--ca", ca, "--socket", sock, "--allow-uid", "10003"}
	with := func(extra ...string) []string { return append(append([]string{}, serve...), extra...) }
	cases := []struct {
		name   string
		args   []string
		euid   int
		code   int
		stdout string
		stderr string
	}{
		{"no arguments", nil, notRoot, 2, "", "usage:"},
		{"help", []string{"-h"}, notRoot, 0, "signer init --dir DIR", ""},
		{"help word", []string{"help"}, notRoot, 0, "signer serve --ca DIR", ""},
		{"unknown command", []string{"frobnicate"}, notRoot, 2, "", `unknown command "frobnicate"`},
		{"init help", []string{"init", "-h"}, notRoot, 0, "", "usage: signer init --dir DIR"},
		{"init without dir", []string{"init"}, notRoot, 2, "", "--dir is required"},
		{"init dir without value", []string{"init", "--dir"}, notRoot, 2, "", "flag needs an argument"},
		{"init extra argument", []string{"init", "--dir", ca, "again"}, notRoot, 2, "", `unexpected argument "again"`},
		{"init unknown flag", []string{"init", "--force"}, notRoot, 2, "", "flag provided but not defined: -force"},
		{"serve help", []string{"serve", "-h"}, notRoot, 0, "", "--allow-uid UID"},
		{"serve without ca", []string{"serve"}, notRoot, 2, "", "--ca is required"},
		{"serve without socket", []string{"serve", "--ca", ca}, notRoot, 2, "", "--socket is required"},
		{"serve without allowed uid", []string{"serve", "--ca", ca, "--socket", sock}, notRoot, 2, "", "no --allow-uid: name the gate's uid"},
		{"plain flags mean serve", []string{"--ca", ca, "--socket", sock}, notRoot, 2, "", "no --allow-uid: name the gate's uid"},
		{"bad uid", with("--allow-uid", "gate"), notRoot, 2, "", `"gate" is not a uid`},
		{"negative uid", with("--allow-uid", "-1"), notRoot, 2, "", `"-1" is not a uid`},
		{"socket mode not octal", with("--socket-mode", "0999"), notRoot, 2, "", `--socket-mode "0999"`},
		{"socket mode too large", with("--socket-mode", "01777"), notRoot, 2, "", `--socket-mode "01777"`},
		{"zero rate", with("--rate", "0"), notRoot, 2, "", "--rate 0"},
		{"zero burst", with("--burst", "0"), notRoot, 2, "", "--burst 0"},
		{"bad log level", with("--log-level", "loud"), notRoot, 2, "", `--log-level "loud"`},
		{"extra argument", with("now"), notRoot, 2, "", `unexpected argument "now"`},
		{"root", serve, 0, 1, "", "refusing to run as root"},
		{"root names --dev", serve, 0, 1, "", "--dev allows root for local development"},
		{"no CA", []string{"serve", "--ca", filepath.Join(ca, "none"), "--socket", sock, "--allow-uid", "10003"}, notRoot, 1, "", "no CA in " + filepath.Join(ca, "none") + " (neither ca.pem nor ca-key.pem is there); create it once with `signer init --dir"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, out, errs := testEnv(tc.euid)
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // a serve that got this far would stop at once
			code := run(ctx, tc.args, e)
			if code != tc.code {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.code, out, errs)
			}
			if !strings.Contains(out.String(), tc.stdout) {
				t.Errorf("stdout %q does not say %q", out, tc.stdout)
			}
			if !strings.Contains(errs.String(), tc.stderr) {
				t.Errorf("stderr %q does not say %q", errs, tc.stderr)
			}
			if _, err := os.Lstat(sock); err == nil {
				t.Error("a refused serve left a socket")
			}
		})
	}
}

func TestInit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	e, out, errs := testEnv(notRoot)
	if code := run(context.Background(), []string{"init", "--dir", dir}, e); code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{filepath.Join(dir, "ca-key.pem"), filepath.Join(dir, "ca.pem"), "the one file agents trust", "SHA-256 fingerprint"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("init output does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out.String(), "belong to root") {
		t.Error("the root hint printed for another user")
	}
	if _, err := signer.LoadCA(dir); err != nil {
		t.Fatal(err)
	}

	e, _, errs = testEnv(notRoot)
	if code := run(context.Background(), []string{"init", "--dir", dir}, e); code != 1 {
		t.Errorf("second init: exit %d, want 1", code)
	}
	if !strings.Contains(errs.String(), "already exists") || !strings.Contains(errs.String(), "Never regenerate") {
		t.Errorf("second init: %s", errs)
	}

	e, out, _ = testEnv(0)
	if code := run(context.Background(), []string{"init", "--dir", filepath.Join(t.TempDir(), "ca")}, e); code != 0 || !strings.Contains(out.String(), "chown -R") {
		t.Errorf("init as root: exit %d, output %s", code, out)
	}
}

// waitSocket waits until something accepts connections on sock.
func waitSocket(t *testing.T, sock string, exited <-chan int) {
	t.Helper()
	testkit.WaitFor(t, 10*time.Second, "the signer to serve", func() bool {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return true
		}
		select {
		case code := <-exited:
			t.Fatalf("the signer exited (%d) before serving", code)
		default:
		}
		return false
	})
}

func TestServe(t *testing.T) {
	ca := initCA(t)
	cases := []struct {
		name  string
		extra []string
		euid  int
		mode  os.FileMode
	}{
		{"default mode", nil, notRoot, 0o660},
		{"socket mode 0666", []string{"--socket-mode", "0666"}, notRoot, 0o666},
		{"root with --dev", []string{"--dev"}, 0, 0o660},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sock := filepath.Join(shortDir(t), "s.sock")
			args := append([]string{"serve", "--ca", ca, "--socket", sock, "--allow-uid", "10003", "--allow-uid", itoa(os.Geteuid())}, tc.extra...)
			e, _, errs := testEnv(tc.euid)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			exited := make(chan int, 1)
			go func() { exited <- run(ctx, args, e) }()
			waitSocket(t, sock, exited)

			fi, err := os.Stat(sock)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != tc.mode {
				t.Errorf("socket mode %04o, want %04o", fi.Mode().Perm(), tc.mode)
			}
			c, err := signerclient.New(signerclient.Options{Socket: sock})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Health(context.Background()); err != nil {
				t.Fatal(err)
			}
			cert, err := c.Certificate(context.Background(), "api.example.com")
			if err != nil {
				t.Fatal(err)
			}
			if cert.Leaf.DNSNames[0] != "api.example.com" {
				t.Errorf("certificate for %q", cert.Leaf.DNSNames)
			}
			cancel()
			select {
			case code := <-exited:
				if code != 0 {
					t.Errorf("exit %d: %s", code, errs)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("serve did not stop")
			}
			if _, err := os.Lstat(sock); err == nil {
				t.Error("the socket is left behind")
			}
			for _, want := range []string{`"msg":"signer serving"`, `"outcome":"issued"`, `"host":"api.example.com"`, `"msg":"signer stopped"`} {
				if !strings.Contains(errs.String(), want) {
					t.Errorf("log lacks %s:\n%s", want, errs)
				}
			}
		})
	}
}

func TestSignalStops(t *testing.T) {
	ca := initCA(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			sock := filepath.Join(shortDir(t), "s.sock")
			cmd := exec.Command(self, "serve", "--ca", ca, "--socket", sock, "--allow-uid", itoa(os.Geteuid()), "--dev")
			cmd.Env = append(os.Environ(), mainEnv+"=1")
			var errs testkit.Buffer
			cmd.Stderr = &errs
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan int, 1)
			go func() {
				cmd.Wait()
				exited <- cmd.ProcessState.ExitCode()
			}()
			waitSocket(t, sock, exited)
			cmd.Process.Signal(sig)
			select {
			case code := <-exited:
				if code != 0 {
					t.Errorf("exit %d after %s, want 0: %s", code, sig, errs.String())
				}
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				t.Fatalf("no exit 10s after %s", sig)
			}
			if !strings.Contains(errs.String(), "signer stopped") {
				t.Errorf("log lacks the stop: %s", errs.String())
			}
			if _, err := os.Lstat(sock); err == nil {
				t.Error("the socket is left behind")
			}
		})
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestServeInitNeverReplacesACA runs serve --init, the compose signer's first-start command, on
// half a CA and on a pair that does not match: it refuses with the fix, and the files stay as
// they were, no key made.
func TestServeInitNeverReplacesACA(t *testing.T) {
	other := initCA(t)
	otherKey, _ := os.ReadFile(filepath.Join(other, signer.KeyFile))
	cases := []struct {
		name  string
		setup func(dir string)
		want  []string
	}{
		{"only ca.pem", func(dir string) { os.Remove(filepath.Join(dir, signer.KeyFile)) },
			[]string{"ca-key.pem is not: the CA's key is lost", "restore", "lockhttp ca init --replace --dir"}},
		{"only ca-key.pem", func(dir string) { os.Remove(filepath.Join(dir, signer.CertFile)) },
			[]string{"ca.pem is not: the certificate agents trust is lost", "lockhttp ca init --replace --dir"}},
		{"a key of another CA", func(dir string) { os.WriteFile(filepath.Join(dir, signer.KeyFile), otherKey, 0o600) },
			[]string{"does not match the certificate", "restore the pair from your backup", "lockhttp ca init --replace --dir"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := initCA(t)
			tc.setup(dir)
			before := snapshot(t, dir)
			sock := filepath.Join(shortDir(t), "s.sock")
			e, _, errs := testEnv(notRoot)
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // a serve that got this far would stop at once
			code := run(ctx, []string{"serve", "--init", "--ca", dir, "--export-ca", t.TempDir(), "--socket", sock, "--allow-uid", "10003"}, e)
			if code != 1 {
				t.Fatalf("exit %d, want 1: %s", code, errs)
			}
			for _, w := range append(tc.want, dir) {
				if !strings.Contains(errs.String(), w) {
					t.Errorf("stderr %q does not say %q", errs, w)
				}
			}
			if after := snapshot(t, dir); after != before {
				t.Errorf("the CA directory changed:\nbefore %s\nafter  %s", before, after)
			}
			if _, err := os.Lstat(sock); err == nil {
				t.Error("a refused serve left a socket")
			}
		})
	}
}

// snapshot is the names and contents of dir's files, as one string.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, en := range entries {
		data, _ := os.ReadFile(filepath.Join(dir, en.Name()))
		b.WriteString(en.Name() + "=" + strconv.Quote(string(data)) + ";")
	}
	return b.String()
}

// TestHealth: signer health passes only while a signer listens, and the health check's
// connections (from the signer's own uid, which it does not serve) leave no log line.
func TestHealth(t *testing.T) {
	ca := initCA(t)
	sock := filepath.Join(shortDir(t), "s.sock")
	health := func() (int, string) {
		e, out, errs := testEnv(os.Geteuid())
		code := run(context.Background(), []string{"health", "--socket", sock}, e)
		return code, out.String() + errs.String()
	}
	if code, out := health(); code != 1 || !strings.Contains(out, "no signer listens on "+sock) {
		t.Fatalf("before the signer: exit %d: %s", code, out)
	}
	// A socket file a stopped signer left behind is no signer.
	os.WriteFile(sock, nil, 0o600)
	if code, out := health(); code != 1 {
		t.Fatalf("a stale file: exit %d: %s", code, out)
	}
	os.Remove(sock)
	args := []string{"serve", "--ca", ca, "--socket", sock, "--allow-uid", "10003"}
	if os.Geteuid() == 0 {
		args = append(args, "--dev")
	}
	e, _, errs := testEnv(os.Geteuid())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	exited := make(chan int, 1)
	go func() { exited <- run(ctx, args, e) }()
	waitSocket(t, sock, exited)
	for range 3 {
		if code, out := health(); code != 0 {
			t.Fatalf("while serving: exit %d: %s", code, out)
		}
	}
	// The signer's own uid is not served: a request from it is refused.
	c, _ := signerclient.New(signerclient.Options{Socket: sock})
	if err := c.Health(context.Background()); err == nil {
		t.Fatal("the signer served its own uid, which --allow-uid does not name")
	}
	cancel()
	<-exited
	if strings.Contains(errs.String(), "connection refused") {
		t.Errorf("the health check's connections were logged:\n%s", errs)
	}
	if code, _ := health(); code != 1 {
		t.Errorf("after the signer stopped: exit %d", code)
	}
}
