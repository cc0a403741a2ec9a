package cmdmain

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
)

// TestFlags: -log-level picks the logger's level, an unknown one is an error that names the
// levels; -version is read.
func TestFlags(t *testing.T) {
	for _, tt := range []struct {
		args    []string
		debug   bool
		version bool
		err     string
	}{
		{nil, false, false, ""},
		{[]string{"-log-level", "debug"}, true, false, ""},
		{[]string{"--log-level=warn", "-version"}, false, true, ""},
		{[]string{"-log-level", "loud"}, false, false, `"loud" is no log level: use debug, info, warn or error`},
	} {
		var f Flags
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		f.Define(fs, "x")
		if code, ok := Parse(fs, tt.args); !ok {
			t.Fatalf("%q: Parse ends the run with %d", tt.args, code)
		}
		var out bytes.Buffer
		log, err := f.Logger(&out)
		if tt.err != "" {
			if err == nil || err.Error() != tt.err {
				t.Errorf("%q: Logger error %v, want %s", tt.args, err, tt.err)
			}
			continue
		}
		if err != nil || f.Version != tt.version {
			t.Fatalf("%q: Logger %v, Version %v", tt.args, err, f.Version)
		}
		log.Debug("d")
		if got := strings.Contains(out.String(), `"msg":"d"`); got != tt.debug {
			t.Errorf("%q: a debug line logged: %v, want %v", tt.args, got, tt.debug)
		}
	}
}

// TestExits: -h ends the run with 0, a refused flag or a bad command line with 2 and the
// program's name before the error.
func TestExits(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if code, ok := Parse(fs, []string{"-h"}); ok || code != 0 {
		t.Errorf("-h: %d, %v", code, ok)
	}
	if code, ok := Parse(fs, []string{"-nope"}); ok || code != 2 {
		t.Errorf("-nope: %d, %v", code, ok)
	}
	var stderr bytes.Buffer
	if code := UsageExit("gate", flag.ErrHelp, &stderr); code != 0 || stderr.Len() != 0 {
		t.Errorf("UsageExit(ErrHelp) = %d, %q", code, stderr.String())
	}
	if code := UsageExit("gate", errors.New("-console is required"), &stderr); code != 2 || stderr.String() != "gate: -console is required\n" {
		t.Errorf("UsageExit = %d, %q", code, stderr.String())
	}
	var out bytes.Buffer
	PrintVersion(&out, "gate")
	if !strings.HasPrefix(out.String(), "gate ") || !strings.HasSuffix(out.String(), "\n") {
		t.Errorf("PrintVersion: %q", out.String())
	}
}

// TestStart: -version prints the build line and ends the run with 0; a bad level ends it with 2
// and the flag named; otherwise the logger.
func TestStart(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if _, code, ok := (&Flags{Version: true, LogLevel: "loud"}).Start("gate", &stdout, &stderr); ok || code != 0 || !strings.HasPrefix(stdout.String(), "gate ") {
		t.Errorf("-version: %d, %v, %q", code, ok, stdout.String())
	}
	stdout.Reset()
	if _, code, ok := (&Flags{LogLevel: "loud"}).Start("gate", &stdout, &stderr); ok || code != 2 || !strings.Contains(stderr.String(), `gate: -log-level "loud" is no log level`) {
		t.Errorf("bad level: %d, %v, %q", code, ok, stderr.String())
	}
	if log, _, ok := (&Flags{LogLevel: "info"}).Start("gate", &stdout, &stderr); !ok || log == nil || stdout.Len() != 0 {
		t.Errorf("start: %v, %v", log, ok)
	}
}
