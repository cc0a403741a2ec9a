package auditdb

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

const testGate = "spiffe://lockhttp/gate/g1"

// copyTo writes recs to a signed audit in a new directory, runs a sink to the database at dsn
// until it has them all and their head, and returns the directory.
func copyTo(t *testing.T, dsn string, recs []audit.Record) string {
	t.Helper()
	dir := t.TempDir()
	s := New(Options{Dir: dir, DSN: dsn, Gate: testGate, Instance: "host-1", Retry: 10 * time.Millisecond})
	w, err := audit.Open(audit.Options{Dir: dir, NoSync: true, KeyFile: filepath.Join(dir, audit.KeyFileName), CreateKey: true, Sink: s})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	for i := range recs {
		if err := w.Write(ctx, &recs[i]); err != nil {
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
	testkit.WaitFor(t, 20*time.Second, "the database to have every record and the head", func() bool {
		st := s.Status()
		rows := query1(t, dsn, `SELECT coalesce((SELECT (head->>'seq')::text FROM lockhttp_audit_head), '0')`)
		return st.Rows >= int64(len(recs)) && st.Behind == 0 && len(rows) == 1 && rows[0][0] == fmt.Sprint(head.Seq)
	})
	return dir
}

// query1 runs sql on the database at dsn and returns its rows as text ("NULL" for a NULL);
// none when the tables are not there yet.
func query1(t *testing.T, dsn, sql string) [][]string {
	t.Helper()
	ctx := context.Background()
	conn, err := connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var out [][]string
	rr := conn.ExecParams(ctx, sql, nil, nil, nil, nil)
	for rr.NextRow() {
		var row []string
		for _, v := range rr.Values() {
			if v == nil {
				row = append(row, "NULL")
			} else {
				row = append(row, string(v))
			}
		}
		out = append(out, row)
	}
	if _, err := rr.Close(); err != nil && !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("%s: %v", sql, err)
	}
	return out
}

// execSQL runs statements on the database at dsn.
func execSQL(t *testing.T, dsn, sql string) {
	t.Helper()
	ctx := context.Background()
	conn, err := connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := exec(ctx, conn, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// newDatabase creates a database of its own on pg and returns its DSN.
func newDatabase(t *testing.T, pg *testkit.Postgres, name string) string {
	t.Helper()
	execSQL(t, pg.DSN, `CREATE DATABASE `+name)
	return strings.Replace(pg.DSN, "dbname=postgres", "dbname="+name, 1)
}

// testRecords are records of every column the copy fills, the times in other zones than UTC
// and to the nanosecond (the column keeps microseconds).
func testRecords() []audit.Record {
	east := time.FixedZone("east", 2*3600)
	return []audit.Record{
		{Time: time.Date(2026, 3, 1, 14, 0, 0, 123456789, east), Event: "request", ID: "r1", Container: "c1", Verdict: "FREE", Rule: "gh", Status: 200},
		{Time: time.Date(2026, 3, 1, 12, 0, 1, 0, time.UTC), Event: "request", ID: "r2", Container: "c1", Verdict: "DENY", Code: "E_POLICY", Rule: "deny-all", Status: 403},
		{Time: time.Date(2026, 3, 1, 12, 0, 2, 5000, time.UTC), Event: "policy"},
	}
}

// TestCopyAndLoad: the sink copies a signed audit with each column as the line says (the time
// in UTC to the microsecond, the status, the record number, whether the line is signed), and
// Load reads back a copy that verifies clean against the gate's key, under the gate's identity
// and instance.
func TestCopyAndLoad(t *testing.T) {
	pg := testkit.StartPostgres(t)
	recs := testRecords()
	dir := copyTo(t, pg.DSN, recs)

	got := query1(t, pg.DSN, `SELECT gate, instance, line_no, seq, (time AT TIME ZONE 'UTC')::text, event, id, container, verdict, code, rule, status, record->>'id'
		FROM lockhttp_audit ORDER BY line_no`)
	want := [][]string{
		{testGate, "host-1", "1", "1", "2026-03-01 12:00:00.123456", "request", "r1", "c1", "FREE", "", "gh", "200", "r1"},
		{testGate, "host-1", "2", "2", "2026-03-01 12:00:01", "request", "r2", "c1", "DENY", "E_POLICY", "deny-all", "403", "r2"},
		{testGate, "host-1", "3", "3", "2026-03-01 12:00:02.000005", "policy", "NULL", "NULL", "", "", "NULL", "0", "NULL"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("rows:\n%q\nwant:\n%q", got, want)
	}
	// signed says whether the line carries a signature of its own, as in the file.
	data, err := os.ReadFile(filepath.Join(dir, "2026-03-01.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var wantSigned []string
	for _, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		wantSigned = append(wantSigned, map[bool]string{true: "t", false: "f"}[strings.Contains(line, `,"sig":"`)])
	}
	var gotSigned []string
	for _, r := range query1(t, pg.DSN, `SELECT signed FROM lockhttp_audit ORDER BY line_no`) {
		gotSigned = append(gotSigned, r[0])
	}
	if !slices.Contains(wantSigned, "t") || !slices.Equal(gotSigned, wantSigned) {
		t.Fatalf("signed: %v, want %v (at least one t)", gotSigned, wantSigned)
	}

	copies, err := Load(context.Background(), pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	if len(copies) != 1 || copies[0].Gate != testGate || copies[0].Instance != "host-1" || copies[0].Head == nil || copies[0].Head.Seq != 3 {
		t.Fatalf("copies: %+v, want one of %s@host-1 with a head at 3", copies, testGate)
	}
	pub, err := audit.ReadPublicKey(filepath.Join(dir, audit.KeyFileName+audit.PubSuffix))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := audit.VerifyDir(copies[0].Sources, audit.VerifyOptions{Keys: []ed25519.PublicKey{pub}, Head: copies[0].Head, HeadName: "the database's head"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Worst() != audit.Note || rep.Records != 3 {
		t.Fatalf("verify: %d records, findings %+v; want 3, clean", rep.Records, rep.Findings)
	}
}

// TestOddValuesRefused: a value the database should not hold, read back, is an error that
// names it: never a panic, never taken as something else.
func TestOddValuesRefused(t *testing.T) {
	pg := testkit.StartPostgres(t)
	cases := []struct {
		name   string
		tamper string
		read   string // "load", "positions" or "migrate"
		want   string
	}{
		{"a head that is no head", `UPDATE lockhttp_audit_head SET head = '[1,2]'`, "load",
			`auditdb: read the heads: the head of ` + testGate + `@host-1 is "[1,2]", not a head the gate writes`},
		{"a head that is NULL", `ALTER TABLE lockhttp_audit_head ALTER head DROP NOT NULL; UPDATE lockhttp_audit_head SET head = NULL`, "load",
			`the head of ` + testGate + `@host-1 is NULL`},
		{"a line that is NULL", `ALTER TABLE lockhttp_audit ALTER line DROP NOT NULL; UPDATE lockhttp_audit SET line = NULL WHERE line_no = 2`, "load",
			`auditdb: read the copy: file "2026-03-01.jsonl" of ` + testGate + `@host-1: column line is NULL`},
		{"a line past the bound of a message", `UPDATE lockhttp_audit SET line = repeat('x', 8192) WHERE line_no = 2`, "load",
			`auditdb: read the copy: `},
		{"a line number past an integer", `ALTER TABLE lockhttp_audit ALTER line_no TYPE bigint; UPDATE lockhttp_audit SET line_no = 10000000000 WHERE line_no = 3`, "positions",
			`auditdb: read where the copy stands: file "2026-03-01.jsonl": column line_no holds "10000000000", want an integer from 0 to 2147483647`},
		{"a record number that is text", `ALTER TABLE lockhttp_audit ALTER seq TYPE text; UPDATE lockhttp_audit SET seq = 'x' || seq`, "positions",
			`column seq holds "x3", want an integer`},
		{"a huge record number", `ALTER TABLE lockhttp_audit ALTER seq TYPE numeric; UPDATE lockhttp_audit SET seq = 1e30 WHERE line_no = 3`, "positions",
			`column seq holds "1000000000000000000000000000000", want an integer`},
		{"a schema version below 0", `UPDATE lockhttp_audit_schema SET version = -1`, "migrate",
			`auditdb: migrate: read lockhttp_audit_schema: column version holds "-1", want an integer from 0 to 2147483647`},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dsn := newDatabase(t, pg, fmt.Sprintf("odd%d", i))
			copyTo(t, dsn, testRecords())
			execSQL(t, dsn, c.tamper)
			ctx := context.Background()
			var err error
			switch c.read {
			case "load":
				if strings.Contains(c.name, "bound") {
					defer func(n int) { maxMessage = n }(maxMessage)
					maxMessage = 4096
				}
				_, err = Load(ctx, dsn)
			case "positions":
				conn, cerr := connect(ctx, dsn)
				if cerr != nil {
					t.Fatal(cerr)
				}
				defer conn.Close(ctx)
				_, err = New(Options{Gate: testGate, Instance: "host-1"}).positions(ctx, conn)
			case "migrate":
				err = Migrate(ctx, dsn)
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one with %q", err, c.want)
			}
		})
	}
}

// TestTimestamptz: the time column's text for the years PostgreSQL writes otherwise (BC, and
// past 9999 once in UTC).
func TestTimestamptz(t *testing.T) {
	for _, c := range []struct {
		in   time.Time
		want string
	}{
		{time.Date(2026, 3, 1, 12, 0, 0, 999, time.UTC), "2026-03-01 12:00:00.000000+00"},
		{time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), "0001-01-01 00:00:00.000000+00 BC"},
		{time.Date(9999, 12, 31, 23, 0, 0, 0, time.FixedZone("w", -5*3600)), "10000-01-01 04:00:00.000000+00"},
	} {
		if got := timestamptz(c.in); got != c.want {
			t.Errorf("timestamptz(%v) = %q, want %q", c.in, got, c.want)
		}
	}
	if _, ok := int4(math.MaxInt32 + 1); ok {
		t.Error("int4 takes a status past the column's range")
	}
}
