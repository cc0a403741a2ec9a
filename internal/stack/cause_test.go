package stack

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestHint(t *testing.T) {
	o := Options{Listen: "127.0.0.1:3130", HubListen: "127.0.0.1:4141", Roots: "/etc/roots.pem", StateDir: "/a/long/state"}
	tests := []struct {
		name  string
		child string
		line  string
		o     Options
		want  string // part of the fix; "" no fix
	}{
		{"the gate's address taken", "gate", "gate: listen on 127.0.0.1:3130: listen tcp 127.0.0.1:3130: bind: address already in use", o,
			"another process listens on 127.0.0.1:3130 (another stack, perhaps): stop it, or give the gate another address with --listen"},
		{"the hub's address taken", "console", "console: hub: listen on 127.0.0.1:4141: listen tcp 127.0.0.1:4141: bind: address already in use", o,
			"another process listens on 127.0.0.1:4141"},
		{"the default hub address taken", "console", "bind: address already in use", Options{}, "listens on 127.0.0.1:3131"},
		{"the hub's flag", "console", "bind: address already in use", o, "--hub-listen"},
		{"no roots file", "gate", "gate: -roots: open /etc/roots.pem: no such file or directory", o,
			"--roots /etc/roots.pem does not exist: give the PEM file of the roots the gate trusts for origins"},
		{"roots without certificates", "gate", "gate: -roots /etc/roots.pem: no PEM certificates in it", o, "--roots /etc/roots.pem holds no certificate"},
		{"roots unreadable", "gate", "gate: -roots: open /etc/roots.pem: permission denied", o, "cannot be read"},
		{"a socket path too long", "signer", "signer serve: listen on /a/long/state/signer.sock: listen unix /a/long/state/signer.sock: bind: invalid argument", o,
			"longer than the 107 bytes the system allows: use a shorter --state"},
		{"the CA's key damaged", "signer", "signer serve: load CA: /a/long/state/ca/ca-key.pem holds no PRIVATE KEY (PKCS#8) PEM block", o,
			"the CA in /a/long/state/ca does not load: restore ca.pem and ca-key.pem together from your backup; never make a new CA"},
		{"a line that says its own fix", "signer", "signer serve: load CA: the key in ca-key.pem does not match; fix: restore", o, ""},
		{"the signer's socket is no address", "signer", "bind: address already in use", o, ""},
		{"the gate's metrics address taken", "gate", "gate: -metrics-listen 127.0.0.1:9464: listen tcp 127.0.0.1:9464: bind: address already in use",
			Options{MetricsListen: "127.0.0.1:9464"}, "the address of the gate's metrics (--metrics-listen 127.0.0.1:9464;"},
		{"the signer's metrics address taken", "signer", "signer serve: --metrics-listen 127.0.0.1:9466: listen tcp 127.0.0.1:9466: bind: address already in use",
			Options{MetricsListen: "127.0.0.1:9464"}, "start the stack with another --metrics-listen"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := hint(tc.child, []string{"INFO starting", tc.line}, tc.o)
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Fatalf("hint = %q, want one with %q", got, tc.want)
			}
		})
	}
}

func TestReadable(t *testing.T) {
	for _, tc := range [][2]string{
		{`{"time":"2026-03-01T12:00:00Z","level":"ERROR","msg":"audit","dir":"/x y","error":"disk full"}`, `ERROR audit dir="/x y" error="disk full"`},
		{`{"time":"2026-03-01T12:00:00Z","level":"INFO","msg":"signer serving","rate":50,"dev":true}`, "INFO signer serving dev=true rate=50"},
		{"gate: -roots: open x: no such file or directory", "gate: -roots: open x: no such file or directory"},
		{`{"not":"a log line"}`, `{"not":"a log line"}`},
		{`{broken`, `{broken`},
	} {
		if got := readable(tc[0]); got != tc[1] {
			t.Errorf("readable(%q) = %q, want %q", tc[0], got, tc[1])
		}
	}
}

func TestLogTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gate.log")
	earlier := "gate: an earlier run's failure\n"
	var b strings.Builder
	for i := range 20 {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	b.WriteString("a control \x1b[31m character\n\n")
	os.WriteFile(path, []byte(earlier+b.String()), 0o600)
	got := logTail(path, int64(len(earlier)))
	if len(got) != tailLines || got[0] != "line 13" || got[len(got)-1] != `a control \x1b[31m character` {
		t.Fatalf("logTail = %q", got)
	}
	// Only this run's lines: an earlier run's are never shown as this one's cause.
	os.WriteFile(path, []byte(earlier+"this run\n"), 0o600)
	if got := logTail(path, int64(len(earlier))); len(got) != 1 || got[0] != "this run" {
		t.Fatalf("logTail = %q", got)
	}
	// A log longer than the window: its first, cut line is dropped.
	os.WriteFile(path, []byte(strings.Repeat("x", tailBytes)+"\nlast\n"), 0o600)
	if got := logTail(path, 0); len(got) != 1 || got[0] != "last" {
		t.Fatalf("logTail of a long log = %q", got)
	}
}

func TestStartError(t *testing.T) {
	log := filepath.Join(t.TempDir(), "console.log")
	os.WriteFile(log, []byte("console: hub: listen on 127.0.0.1:3131: listen tcp 127.0.0.1:3131: bind: address already in use\n"), 0o600)
	err := startError(&child{name: "console", log: log}, "the console", errors.New("console exited: exit status 1"), Options{})
	want := "the console did not come up: console exited: exit status 1; the last lines of " + log + ":\n" +
		"  | console: hub: listen on 127.0.0.1:3131: listen tcp 127.0.0.1:3131: bind: address already in use\n" +
		"fix: another process listens on 127.0.0.1:3131"
	if !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("error:\n%s\nwant it to start with:\n%s", err, want)
	}
	os.WriteFile(log, nil, 0o600)
	if err := startError(&child{name: "console", log: log}, "the console", errors.New("console not ready after 15s"), Options{}); !strings.Contains(err.Error(), "holds nothing of this run") {
		t.Fatalf("error %v", err)
	}
}
