package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/buildinfo"
	"github.com/lockhttp/lockhttp/internal/stack"
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
