package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/buildinfo"
	"github.com/lockhttp/lockhttp/internal/signer"
	"github.com/lockhttp/lockhttp/internal/stack"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// opsTimeout bounds each command of these tests: a refusal comes at once, a hang fails the test.
const opsTimeout = 60 * time.Second

// runBin runs one of the built binaries with args and returns its combined output and exit
// status, killing it at opsTimeout.
func runBin(t *testing.T, name string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opsTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, name), args...)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s %q did not end within %s:\n%s", name, args, opsTimeout, out)
	}
	if err != nil && cmd.ProcessState == nil {
		t.Fatal(err)
	}
	return string(out), cmd.ProcessState.ExitCode()
}

// loxRun runs lox run --headless on state with loopback addresses the system picks, and returns
// when it exits (a stack that comes up is a failure of these tests: it is stopped at opsTimeout).
func loxRun(t *testing.T, state string, flags ...string) (string, int) {
	t.Helper()
	args := append([]string{"run", "--headless", "--state", state, "--listen", "127.0.0.1:0", "--hub-listen", "127.0.0.1:0"}, flags...)
	return runBin(t, "lox", args...)
}

// treeState is what a directory holds: each path with its kind, mode, owner, inode and, for
// regular files, a hash of the content. Of the logs, the audit and the console's and hub's
// state, which a running stack writes (replacing some), only the kind, mode and owner count.
func treeState(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		desc := fmt.Sprintf("%s %04o %d:%d", fi.Mode().Type(), fi.Mode().Perm(), st.Uid, st.Gid)
		dir := strings.SplitN(rel, string(filepath.Separator), 2)[0]
		volatile := dir == "logs" || dir == "audit" || dir == "console-audit" || rel == "hub.json" || rel == "console-state.json"
		if volatile {
			out[rel] = desc
			return nil
		}
		desc += fmt.Sprintf(" ino=%d", st.Ino)
		if fi.Mode().IsRegular() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += fmt.Sprintf(" size=%d sha256=%x", len(data), sha256.Sum256(data))
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func diffTrees(before, after map[string]string) []string {
	var d []string
	for k, v := range before {
		if w, ok := after[k]; !ok {
			d = append(d, "removed "+k)
		} else if w != v {
			d = append(d, fmt.Sprintf("changed %s: %s -> %s", k, v, w))
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			d = append(d, "added "+k)
		}
	}
	slices.Sort(d)
	return d
}

// TestOpsSecondRunChangesNothing: a second lox run on a running stack's state directory exits
// at once with the first one's pid and proxy, and leaves the directory as it was: up.json, the
// sockets (the same inodes: nothing took them over), the CA, the tokens. The first stack still
// answers its commands, and its up.json goes away only when it stops.
func TestOpsSecondRunChangesNothing(t *testing.T) {
	r := startStack(t, minimalPolicy)
	before := treeState(t, r.state)
	upBefore, _ := os.ReadFile(filepath.Join(r.state, stack.UpFile))

	out, code := loxRun(t, r.state, "--policy", r.policy)
	want := fmt.Sprintf("a stack is already running here (pid %d, proxy %s); stop it or use --state DIR", r.cmd.Process.Pid, r.up.Gate)
	if code == 0 || !strings.Contains(out, want) || !strings.Contains(out, r.state) {
		t.Fatalf("second lox run: exit %d, want non-zero with %q:\n%s", code, want, out)
	}
	if d := diffTrees(before, treeState(t, r.state)); len(d) > 0 {
		t.Errorf("the second lox run changed the state directory:\n%s", strings.Join(d, "\n"))
	}
	if upAfter, _ := os.ReadFile(filepath.Join(r.state, stack.UpFile)); !bytes.Equal(upBefore, upAfter) {
		t.Errorf("up.json changed:\n%s\n->\n%s", upBefore, upAfter)
	}
	if out, code := runBin(t, "lox", "tickets", "--state", r.state); code != 0 {
		t.Errorf("lox tickets on the first stack after the refused second run: exit %d\n%s", code, out)
	}
	for name, pid := range r.up.PIDs {
		if !alive(pid) {
			t.Errorf("the first stack's %s (pid %d) is gone", name, pid)
		}
	}

	// Once the first stack stopped, the directory is free again.
	r.stop()
	if _, err := os.Stat(filepath.Join(r.state, stack.UpFile)); !os.IsNotExist(err) {
		t.Fatalf("up.json after the first stack stopped: %v", err)
	}
	if _, err := os.Stat(filepath.Join(r.state, stack.LockFile)); err != nil {
		t.Fatalf("the lock file is gone: %v", err)
	}
}

// halfCA makes a CA in state/ca, then takes it apart as remove says ("key", "cert", or
// "mismatch": the key of another CA).
func halfCA(t *testing.T, state, remove string) {
	t.Helper()
	dir := filepath.Join(state, "ca")
	if _, err := signer.InitCA(dir, time.Now(), rand.Reader); err != nil {
		t.Fatal(err)
	}
	switch remove {
	case "key":
		os.Remove(filepath.Join(dir, signer.KeyFile))
	case "cert":
		os.Remove(filepath.Join(dir, signer.CertFile))
	case "mismatch":
		other := filepath.Join(t.TempDir(), "other")
		if _, err := signer.InitCA(other, time.Now(), rand.Reader); err != nil {
			t.Fatal(err)
		}
		key, _ := os.ReadFile(filepath.Join(other, signer.KeyFile))
		if err := os.WriteFile(filepath.Join(dir, signer.KeyFile), key, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestOpsCANeverReplaced: half a CA, or a key that does not match its certificate, is refused
// with the files and the fix by lox run, lockhttp ca init and the compose signer's first-start
// command; none of them writes a CA file. lockhttp ca init --replace replaces it on purpose,
// keeping the old pair, and lox run then starts with the new one.
func TestOpsCANeverReplaced(t *testing.T) {
	fix := []string{"from your backup", "lockhttp ca init --replace --dir"}
	cases := []struct {
		name   string
		remove string
		want   []string // besides fix and the CA directory
	}{
		{"ca.pem without its key", "key", []string{"ca.pem is there but", "ca-key.pem is not: the CA's key is lost"}},
		{"a key without its ca.pem", "cert", []string{"ca-key.pem is there but", "ca.pem is not: the certificate agents trust is lost"}},
		{"a key of another CA", "mismatch", []string{"does not match the certificate in", "restore the pair"}},
	}
	for _, tc := range cases {
		t.Run("lox run: "+tc.name, func(t *testing.T) {
			state := t.TempDir()
			halfCA(t, state, tc.remove)
			caBefore := treeState(t, filepath.Join(state, "ca"))
			out, code := loxRun(t, state)
			if code == 0 {
				t.Fatalf("lox run started:\n%s", out)
			}
			for _, w := range append(append(tc.want, fix...), filepath.Join(state, "ca")) {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if strings.Contains(out, "created the lockhttp CA") {
				t.Errorf("lox run made a CA:\n%s", out)
			}
			if d := diffTrees(caBefore, treeState(t, filepath.Join(state, "ca"))); len(d) > 0 {
				t.Errorf("the CA directory changed:\n%s", strings.Join(d, "\n"))
			}
			if _, err := os.Stat(filepath.Join(state, stack.UpFile)); !os.IsNotExist(err) {
				t.Errorf("up.json: %v", err)
			}
		})
		t.Run("signer serve --init: "+tc.name, func(t *testing.T) {
			state := t.TempDir()
			halfCA(t, state, tc.remove)
			dir := filepath.Join(state, "ca")
			caBefore := treeState(t, dir)
			sock := filepath.Join(shortTemp(t), "s.sock")
			// The compose signer's command (compose/compose.yaml), on this directory.
			out, code := runBin(t, "signer", "serve", "--init", "--ca", dir, "--export-ca", t.TempDir(),
				"--socket", sock, "--allow-uid", strconv.Itoa(os.Geteuid()), "--dev")
			if code == 0 {
				t.Fatalf("the signer served:\n%s", out)
			}
			for _, w := range append(append(tc.want, fix...), dir) {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if d := diffTrees(caBefore, treeState(t, dir)); len(d) > 0 {
				t.Errorf("the CA directory changed:\n%s", strings.Join(d, "\n"))
			}
		})
	}
	t.Run("lockhttp volumes with only ca.pem", func(t *testing.T) {
		// The compose setup's first service (compose/compose.yaml): it runs as root.
		if os.Geteuid() != 0 {
			t.Skip("lockhttp volumes chowns: it runs as root")
		}
		root := t.TempDir()
		halfCA(t, root, "key")
		before := treeState(t, root)
		out, code := runBin(t, "lockhttp", "volumes", "--root", root)
		if code == 0 || !strings.Contains(out, "the CA's key is lost") || !strings.Contains(out, "volumes ca init --replace --dir "+filepath.Join(root, "ca")) {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		if d := diffTrees(before, treeState(t, root)); len(d) > 0 {
			t.Errorf("the volumes changed:\n%s", strings.Join(d, "\n"))
		}
	})
	t.Run("lockhttp ca init with only ca.pem", func(t *testing.T) {
		state := t.TempDir()
		halfCA(t, state, "key")
		dir := filepath.Join(state, "ca")
		caBefore := treeState(t, dir)
		out, code := runBin(t, "lockhttp", "ca", "init", "--dir", dir)
		if code == 0 || !strings.Contains(out, "the CA's key is lost") || !strings.Contains(out, "lockhttp ca init --replace --dir "+dir) {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		if d := diffTrees(caBefore, treeState(t, dir)); len(d) > 0 {
			t.Errorf("the CA directory changed:\n%s", strings.Join(d, "\n"))
		}
	})
	t.Run("lockhttp ca init --replace", func(t *testing.T) {
		state := t.TempDir()
		halfCA(t, state, "mismatch")
		dir := filepath.Join(state, "ca")
		oldCert, _ := os.ReadFile(filepath.Join(dir, signer.CertFile))
		oldKey, _ := os.ReadFile(filepath.Join(dir, signer.KeyFile))
		out, code := runBin(t, "lockhttp", "ca", "init", "--replace", "--dir", dir)
		if code != 0 {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		aside, _ := filepath.Glob(filepath.Join(dir, "replaced-*"))
		if len(aside) != 1 {
			t.Fatalf("old pair moved to %q:\n%s", aside, out)
		}
		for f, data := range map[string][]byte{signer.CertFile: oldCert, signer.KeyFile: oldKey} {
			if got, err := os.ReadFile(filepath.Join(aside[0], f)); err != nil || !bytes.Equal(got, data) {
				t.Errorf("the old %s is not kept in %s: %v", f, aside[0], err)
			}
		}
		for _, w := range []string{"nothing was deleted", aside[0], "every agent must now trust the new " + filepath.Join(dir, signer.CertFile)} {
			if !strings.Contains(out, w) {
				t.Errorf("output lacks %q:\n%s", w, out)
			}
		}
		r := startStackIn(t, state, minimalPolicy)
		newCert, _ := os.ReadFile(r.up.CACert)
		if bytes.Equal(newCert, oldCert) || strings.Contains(r.out.String(), "created the lockhttp CA") {
			t.Fatalf("the stack does not serve the replacing CA:\n%s", r.out)
		}
	})
}

// shortTemp is a directory with a path short enough for a unix socket.
func shortTemp(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ops")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// startStackIn is startStack on a state directory the test prepared.
func startStackIn(t *testing.T, state, policyText string) *running {
	t.Helper()
	polPath := filepath.Join(state, "test-policy.toml")
	if err := os.WriteFile(polPath, []byte(policyText), 0o600); err != nil {
		t.Fatal(err)
	}
	r := &running{t: t, state: state, policy: polPath, out: &testkit.Buffer{}, done: make(chan struct{})}
	r.cmd = exec.Command(filepath.Join(binDir, "lox"), "run", "--headless", "--state", state, "--policy", polPath, "--listen", "127.0.0.1:0", "--hub-listen", "127.0.0.1:0")
	r.cmd.Stdout, r.cmd.Stderr = r.out, r.out
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.cmd.Wait(); close(r.done) }()
	t.Cleanup(r.stop)
	exited := false
	testkit.WaitFor(t, 30*time.Second, "up.json", func() bool {
		select {
		case <-r.done:
			exited = true
			return true
		default:
		}
		data, err := os.ReadFile(filepath.Join(state, stack.UpFile))
		return err == nil && json.Unmarshal(data, &r.up) == nil
	})
	if exited {
		t.Fatalf("lox exited before up.json was written:\n%s", r.out)
	}
	return r
}

// TestOpsStartErrorsShowTheCause: when a child does not come up, lox run prints its last lines
// and the fix, and without a terminal it says to use --headless before it starts anything.
func TestOpsStartErrorsShowTheCause(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	addr := taken.Addr().String()
	cases := []struct {
		name  string
		flags []string
		want  []string
	}{
		{"the gate's address is taken", []string{"--listen", addr},
			[]string{"the gate did not come up", "gate.log:", "bind: address already in use", "fix: another process listens on " + addr, "another address with --listen"}},
		{"the hub's address is taken", []string{"--hub-listen", addr},
			[]string{"the console did not come up", "console.log:", "bind: address already in use", "fix: another process listens on " + addr, "another address with --hub-listen"}},
		{"no --roots file", []string{"--roots", "/nonexistent/roots.pem"},
			[]string{"the gate did not come up", "no such file or directory", "fix: --roots /nonexistent/roots.pem does not exist"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			out, code := loxRun(t, state, tc.flags...)
			if code == 0 {
				t.Fatalf("lox run succeeded:\n%s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if _, err := os.Stat(filepath.Join(state, stack.UpFile)); !os.IsNotExist(err) {
				t.Errorf("up.json: %v", err)
			}
		})
	}
	t.Run("the signer refuses its CA", func(t *testing.T) {
		state := t.TempDir()
		halfCA(t, state, "mismatch")
		out, _ := loxRun(t, state)
		for _, w := range []string{"the signer did not come up", "signer.log:", "does not match the certificate"} {
			if !strings.Contains(out, w) {
				t.Errorf("output lacks %q:\n%s", w, out)
			}
		}
	})
	t.Run("no terminal", func(t *testing.T) {
		state := filepath.Join(t.TempDir(), "state")
		// No --headless; stdin is /dev/null and the output a pipe.
		out, code := runBin(t, "lox", "run", "--state", state, "--listen", "127.0.0.1:0", "--hub-listen", "127.0.0.1:0")
		if code == 0 || !strings.Contains(out, "lox: no terminal: use --headless") || strings.Contains(out, "epoll") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		if _, err := os.Stat(state); !os.IsNotExist(err) {
			t.Errorf("the state directory was made: %v", err)
		}
	})
}

// TestOpsVersion: every binary prints its build on one line with --version, what the toolchain
// recorded in it (go version -m); up.json and lockhttp doctor name the same build.
func TestOpsVersion(t *testing.T) {
	var build string
	for _, name := range []string{"lox", "lockhttp", "gate", "signer", "console"} {
		out, code := runBin(t, name, "--version")
		line, ok := strings.CutSuffix(out, "\n")
		if code != 0 || !ok || strings.Contains(line, "\n") {
			t.Fatalf("%s --version: exit %d, want one line:\n%s", name, code, out)
		}
		want := name + " " + buildinfo.From(builtWith(t, name)).String()
		if line != want {
			t.Errorf("%s --version:\n%s\nwant\n%s", name, line, want)
		}
		if name == "lox" {
			build = strings.TrimPrefix(line, "lox ")
		}
	}
	r := startStack(t, doctorPolicy)
	var up map[string]any
	data, _ := os.ReadFile(filepath.Join(r.state, stack.UpFile))
	if err := json.Unmarshal(data, &up); err != nil || up["version"] != build {
		t.Errorf("up.json version %q (%v), want %q", up["version"], err, build)
	}
	out, _ := runDoctor(t, "--state", r.state)
	if !hasLine(out, "OK", "version", "lockhttp "+build+", the stack runs the same build") {
		t.Errorf("no version line with %q:\n%s", build, out)
	}
}

// builtWith is the build information the toolchain recorded in a built binary.
func builtWith(t *testing.T, name string) *debug.BuildInfo {
	t.Helper()
	out, err := exec.Command("go", "version", "-m", filepath.Join(binDir, name)).Output()
	if err != nil {
		t.Fatalf("go version -m %s: %v", name, err)
	}
	// "FILE: go1.26.8" and then the lines of BuildInfo.String, each indented by a tab.
	first, rest, _ := strings.Cut(string(out), "\n")
	_, goVersion, _ := strings.Cut(first, ": ")
	var b strings.Builder
	for _, l := range strings.Split(rest, "\n") {
		if l != "" {
			b.WriteString(strings.TrimPrefix(l, "\t") + "\n")
		}
	}
	bi, err := debug.ParseBuildInfo(b.String())
	if err != nil {
		t.Fatalf("go version -m %s: %v\n%s", name, err, out)
	}
	bi.GoVersion = strings.TrimSpace(goVersion) // ParseBuildInfo leaves it out
	return bi
}
