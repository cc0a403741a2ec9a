package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/auditdb"
	"github.com/lockhttp/lockhttp/internal/console"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// The gates of the database copy in these tests.
const (
	proposeGate1 = "spiffe://lockhttp/gate/g1"
	proposeGate2 = "spiffe://lockhttp/gate/g2"
)

// askRecords are asks of container approved by a human, one a second from now, of the paths
// /v1/items/N.
func askRecords(container, prefix string, ns ...int) []*audit.Record {
	now := time.Now().UTC()
	var recs []*audit.Record
	for i, n := range ns {
		id := prefix + string(rune('a'+i))
		recs = append(recs, &audit.Record{Time: now.Add(time.Duration(i) * time.Second), Event: "tunnel-request", Verdict: "ASK", Rule: "default",
			Approver: "cli:root", ID: id, Ticket: id, Container: container, Method: "GET", URL: "https://api.example.com/v1/items/" + string(rune('0'+n))})
	}
	return recs
}

// copiedAudit writes recs to a new signed audit in dir, as gate@instance, copying it to the
// database at dsn through the gate's sink (auditdb), and waits until the database holds every
// line and the head.
func copiedAudit(t *testing.T, dir, dsn, gate, instance string, recs []*audit.Record) {
	t.Helper()
	s := auditdb.New(auditdb.Options{Dir: dir, DSN: dsn, Gate: gate, Instance: instance, Retry: 10 * time.Millisecond})
	w, err := audit.Open(audit.Options{Dir: dir, NoSync: true, KeyFile: filepath.Join(dir, audit.KeyFileName), CreateKey: true, Sink: s})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	for _, r := range recs {
		if err := w.Write(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	head, err := audit.ReadHead(filepath.Join(dir, audit.HeadName))
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, "the database to hold "+gate+"'s lines and head", func() bool {
		copies, err := auditdb.Load(context.Background(), dsn)
		if err != nil {
			return false
		}
		for _, c := range copies {
			if c.Gate == gate && c.Instance == instance && c.Head != nil && c.Head.Seq == head.Seq {
				return true
			}
		}
		return false
	})
}

// sqlExec runs sql on the database at dsn.
func sqlExec(t *testing.T, dsn, sql string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgconn.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql).ReadAll(); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func proposeRun(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(append([]string{"propose"}, args...), nil, &out, &errb)
	return code, out.String(), errb.String()
}

// TestProposeDatabaseCopy: propose --dsn-file reads the gates' audit from their PostgreSQL copy,
// verified as verify-log verifies it: a copy of an audit proposes what its directory proposes,
// every gate's or --gate's alone, and a copy edited in the database is refused, naming the chain,
// the file and the line, with nothing proposed.
func TestProposeDatabaseCopy(t *testing.T) {
	pg := testkit.StartPostgres(t)
	state := t.TempDir()
	st := map[string]any{"version": 1, "approved": console.Approved{Version: policy.Hash([]byte(proposeTOML)), Name: "policy.toml", TOML: proposeTOML, By: "operator", At: time.Now()}}
	data, _ := json.Marshal(st)
	if err := os.WriteFile(filepath.Join(state, consoleStateFile), data, 0o600); err != nil {
		t.Fatal(err)
	}
	dsnFile := filepath.Join(t.TempDir(), "dsn")
	if err := os.WriteFile(dsnFile, []byte(pg.DSN+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Gate 1 is lox run's gate of the state directory; gate 2 another gate of the fleet, whose
	// asks of container other were approved twice.
	dir1 := filepath.Join(state, "audit")
	copiedAudit(t, dir1, pg.DSN, proposeGate1, "host-1", append(askRecords("local", "t1", 1, 2), askRecords("other", "t1o", 3)...))
	dir2 := t.TempDir()
	copiedAudit(t, dir2, pg.DSN, proposeGate2, "host-2", askRecords("other", "t2", 4, 5))
	pub1, pub2 := filepath.Join(dir1, audit.KeyFileName+audit.PubSuffix), filepath.Join(dir2, audit.KeyFileName+audit.PubSuffix)
	keys := []string{"--pub", proposeGate1 + "=" + pub1, "--pub", proposeGate2 + "=" + pub2}

	code, fromDir, e := proposeRun(t, "--state", state)
	if code != 0 || !strings.Contains(fromDir, "proposals: 1.") || !strings.Contains(fromDir, "free GET api.example.com /v1/items/* for container local") {
		t.Fatalf("from the directory: exit %d, %s\n%s", code, e, fromDir)
	}
	t.Run("one gate's copy proposes what its directory does", func(t *testing.T) {
		since := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339) // one period for both
		for _, form := range [][]string{nil, {"--json"}, {"--container", "local", "--json"}} {
			form = append(form, "--since", since)
			_, want, _ := proposeRun(t, append([]string{"--state", state}, form...)...)
			code, got, e := proposeRun(t, append(append([]string{"--state", state, "--dsn-file", dsnFile, "--gate", proposeGate1}, keys...), form...)...)
			if code != 0 || got != want {
				t.Errorf("%v: exit %d, %s; the copy proposes:\n%s\nthe directory:\n%s", form, code, e, got, want)
			}
		}
		// The gate named as GATE@INSTANCE, with a key for every gate.
		_, want, _ := proposeRun(t, "--state", state, "--since", since)
		code, got, e := proposeRun(t, "--state", state, "--dsn-file", dsnFile, "--gate", proposeGate1+"@host-1", "--pub", pub1, "--since", since)
		if code != 0 || got != want {
			t.Errorf("--gate GATE@INSTANCE: exit %d, %s\n%s", code, e, got)
		}
	})
	t.Run("every gate's copy", func(t *testing.T) {
		code, out, e := proposeRun(t, append([]string{"--state", state, "--dsn-file", dsnFile}, keys...)...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, e)
		}
		for _, want := range []string{"proposals: 2.", "free GET api.example.com /v1/items/* for container local", "free GET api.example.com /v1/items/* for container other"} {
			if !strings.Contains(out, want) {
				t.Errorf("no %q in:\n%s", want, out)
			}
		}
		// Without a key for gate 2, nothing is read unverified.
		code, out, e = proposeRun(t, "--state", state, "--dsn-file", dsnFile, "--pub", proposeGate1+"="+pub1)
		if code != 1 || out != "" || !strings.Contains(e, "no key for "+proposeGate2) {
			t.Errorf("no key for gate 2: exit %d, %s%s", code, out, e)
		}
	})
	t.Run("a copy edited in the database is refused", func(t *testing.T) {
		// Someone who can write the database turns the other container's ask of gate 1 into a
		// third ask of local.
		sqlExec(t, pg.DSN, `UPDATE lockhttp_audit SET line = replace(line, '"container":"other"', '"container":"local"') WHERE gate = '`+proposeGate1+`' AND line LIKE '%"container":"other"%'`)
		day := time.Now().UTC().Format("2006-01-02") + ".jsonl"
		for _, args := range [][]string{{"--gate", proposeGate1}, nil} {
			code, out, e := proposeRun(t, append(append([]string{"--state", state, "--dsn-file", dsnFile}, keys...), args...)...)
			if code != 1 || out != "" {
				t.Errorf("%v: exit %d, proposed:\n%s", args, code, out)
			}
			for _, want := range []string{"the database copy of " + proposeGate1 + "@host-1 is TAMPERED, nothing is proposed from it", "the signed head does not match record 3 (" + day + ":3)"} {
				if !strings.Contains(e, want) {
					t.Errorf("%v: no %q in: %s", args, want, e)
				}
			}
		}
		// The other gate's copy still verifies, and proposes alone.
		code, out, e := proposeRun(t, append([]string{"--state", state, "--dsn-file", dsnFile, "--gate", proposeGate2}, keys...)...)
		if code != 0 || !strings.Contains(out, "proposals: 1.") || !strings.Contains(out, "for container other") {
			t.Errorf("gate 2: exit %d, %s\n%s", code, e, out)
		}
	})
}

// TestProposeDSNFileErrors: a DSN file that is missing, unreadable or empty, and the flags of the
// database copy without it, are refused naming the flag, before any database is reached.
func TestProposeDSNFileErrors(t *testing.T) {
	state := proposeState(t)
	empty := filepath.Join(t.TempDir(), "dsn")
	os.WriteFile(empty, []byte(" \n"), 0o600)
	missing := filepath.Join(t.TempDir(), "nothing")
	unreadable := t.TempDir() // a directory: it cannot be read as a file, even by root
	pub := []string{"--pub", filepath.Join(t.TempDir(), "k.pub")}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"missing", append([]string{"--state", state, "--dsn-file", missing}, pub...), "--dsn-file: open " + missing + ": no such file or directory"},
		{"unreadable", append([]string{"--state", state, "--dsn-file", unreadable}, pub...), "--dsn-file: read " + unreadable + ": is a directory"},
		{"empty", append([]string{"--state", state, "--dsn-file", empty}, pub...), "--dsn-file " + empty + " is empty: put the DSN in it"},
		{"no key", []string{"--state", state, "--dsn-file", empty}, "the database copy needs --pub"},
		{"and --audit", append([]string{"--state", state, "--audit", state + "/audit", "--dsn-file", empty}, pub...), "--audit and --dsn-file: give one"},
		{"--gate without it", []string{"--state", state, "--gate", proposeGate1}, "--gate and --pub are for the database copy (--dsn-file)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, e := proposeRun(t, tc.args...)
			if code != 2 || out != "" || !strings.Contains(e, "lockhttp propose: "+tc.want) {
				t.Errorf("exit %d, %s%s; want 2 and %q", code, out, e, tc.want)
			}
		})
	}
}
