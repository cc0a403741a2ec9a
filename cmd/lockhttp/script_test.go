package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// TestMain makes the test binary the lockhttp command as well: a script's "exec lockhttp"
// runs this package's main, as a user's shell runs the installed binary.
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){"lockhttp": main})
}

// TestScripts runs the CLI scenarios of testdata/script, one txtar script a file: what an
// operator types and what lockhttp answers (testscript's commands, plus exits and mkaudit
// below). Adding a scenario is adding a file.
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		RequireExplicitExec: true,
		Setup: func(env *testscript.Env) error {
			// The body of a credential-shaped value a script writes into its files.
			env.Setenv("TOKEN_BODY", strings.Repeat("a1B2", 9))
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"exits":   cmdExits,
			"mkaudit": cmdMkaudit,
			"replace": cmdReplace,
		},
	})
}

// cmdExits runs a command and checks its exit status: exits N COMMAND [ARGS...]; its stdout
// and stderr are then read by stdout and stderr as after exec.
func cmdExits(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exits N COMMAND [ARGS...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("exits: %q is not a status", args[0])
	}
	got := 0
	if err := ts.Exec(args[1], args[2:]...); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("exits: %v", err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("%s exited %d, want %d", args[1], got, want)
	}
}

// cmdMkaudit writes a signed audit log as the gate writes one: mkaudit DIR N makes DIR (with
// its key) and N request records, a second apart.
func cmdMkaudit(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: mkaudit DIR N")
	}
	n, err := strconv.Atoi(args[1])
	if err != nil {
		ts.Fatalf("mkaudit: %q is not a count", args[1])
	}
	dir := ts.MkAbs(args[0])
	if err := os.MkdirAll(dir, 0o700); err != nil {
		ts.Fatalf("mkaudit: %v", err)
	}
	clk := testkit.NewClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	w, err := audit.Open(audit.Options{Dir: dir, Now: clk.Now, KeyFile: filepath.Join(dir, audit.KeyFileName), CreateKey: true})
	if err != nil {
		ts.Fatalf("mkaudit: %v", err)
	}
	for i := range n {
		rec := &audit.Record{Event: "request", ID: fmt.Sprintf("r-%d", i+1), Container: "agent", Method: "GET", URL: "https://docs.example.com/", Verdict: "FREE", Status: 200}
		if err := w.Write(context.Background(), rec); err != nil {
			ts.Fatalf("mkaudit: %v", err)
		}
		clk.Advance(time.Second)
	}
	if err := w.Close(); err != nil {
		ts.Fatalf("mkaudit: %v", err)
	}
}

// cmdReplace edits a file as someone who can write it: replace FILE OLD NEW replaces the first
// OLD with NEW, and fails when FILE holds no OLD.
func cmdReplace(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: replace FILE OLD NEW")
	}
	path := ts.MkAbs(args[0])
	data, err := os.ReadFile(path)
	if err != nil {
		ts.Fatalf("replace: %v", err)
	}
	if !strings.Contains(string(data), args[1]) {
		ts.Fatalf("replace: %s holds no %q", args[0], args[1])
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(data), args[1], args[2], 1)), 0o600); err != nil {
		ts.Fatalf("replace: %v", err)
	}
}
