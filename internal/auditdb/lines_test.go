package auditdb

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// verifyCopy loads the database's one copy and verifies it against the key of the audit in
// dir: it must be clean, with records records.
func verifyCopy(t *testing.T, dsn, dir string, records int) {
	t.Helper()
	copies, err := Load(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	if len(copies) != 1 {
		t.Fatalf("%d copies, want 1", len(copies))
	}
	pub, err := audit.ReadPublicKey(filepath.Join(dir, audit.KeyFileName+audit.PubSuffix))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := audit.VerifyDir(copies[0].Sources, audit.VerifyOptions{Keys: []ed25519.PublicKey{pub}, Head: copies[0].Head, HeadName: "the database's head"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Worst() != audit.Note || rep.Records != records {
		t.Fatalf("verify: %d records, findings %+v; want %d, clean", rep.Records, rep.Findings, records)
	}
}

// TestAgentValuesCopied: a NUL in a record's fields (written \u0000 in the line) is copied: in
// the fields an agent chooses (url, agent, mcp_tool) line and record keep it as it is; in the
// columns read from the record, which PostgreSQL's text type holds no NUL in (the gate's and the
// policy's values today, so a NUL there is one refactor away), it is U+FFFD, and the copy
// verifies against the gate's key. A line the database refuses for a constraint of its own is
// kept as bytes, with the refusal, and the copy goes on past it.
func TestAgentValuesCopied(t *testing.T) {
	pg := testkit.StartPostgres(t)
	t.Run("NUL in fields", func(t *testing.T) {
		dsn := newDatabase(t, pg, "nul")
		recs := testRecords()
		recs[0].Container, recs[0].Rule, recs[0].URL, recs[0].Agent = "c\x00", "r\x00x", "http://h/a%00\x00b", "a\x00"
		recs[0].MCP = audit.MCP{Endpoint: "e", Tool: "t\x00", Method: "tools/call"}
		recs[1].Event, recs[1].ID, recs[1].Verdict, recs[1].Code = "request\x00", "r2\x00", "DENY\x00", "E_\x00"
		dir := copyTo(t, dsn, recs)
		got := query1(t, dsn, `SELECT line_no, container, rule, event, id, verdict, code, strpos(record::text, '"mcp_tool":"t\u0000"') > 0, raw IS NULL, note IS NULL FROM lockhttp_audit ORDER BY line_no`)
		want := [][]string{
			{"1", "c\uFFFD", "r\uFFFDx", "request", "r1", "FREE", "", "t", "t", "t"},
			{"2", "c1", "deny-all", "request\uFFFD", "r2\uFFFD", "DENY\uFFFD", "E_\uFFFD", "f", "t", "t"},
			{"3", "NULL", "NULL", "policy", "NULL", "", "", "f", "t", "t"},
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("rows:\n%q\nwant:\n%q", got, want)
		}
		verifyCopy(t, dsn, dir, 3)
	})
	t.Run("a line the database refuses", func(t *testing.T) {
		dsn := newDatabase(t, pg, "refuses")
		if err := Migrate(context.Background(), dsn); err != nil {
			t.Fatal(err)
		}
		execSQL(t, dsn, `ALTER TABLE lockhttp_audit ADD CONSTRAINT no_poison CHECK (line NOT LIKE '%poison%')`)
		recs := testRecords()
		recs[1].Reason = "poison"
		dir := copyTo(t, dsn, recs)
		got := query1(t, dsn, `SELECT line_no, raw IS NULL, coalesce(note, 'NULL'), container FROM lockhttp_audit ORDER BY line_no`)
		if len(got) != 3 || got[1][1] != "f" || !strings.Contains(got[1][2], "no_poison") || got[1][3] != "NULL" || got[0][2] != "NULL" || got[2][2] != "NULL" {
			t.Fatalf("rows %q; want line 2 kept as bytes, with the refusal", got)
		}
		verifyCopy(t, dsn, dir, 3)
	})
}

// TestOddLinesCopied: lines of a day file the gate never writes (not UTF-8, a NUL byte, past
// the audit's bound of a line) neither stop the copy nor vanish from it: the lines the text
// column cannot hold are copied byte for byte, the line past the bound is read in bounded
// memory and its place says why it is missing, and the lines after them are copied.
func TestOddLinesCopied(t *testing.T) {
	pg := testkit.StartPostgres(t)
	dir := t.TempDir()
	long := append(bytes.Repeat([]byte("x"), maxLine+1), '\n')
	var file bytes.Buffer
	file.WriteString(`{"seq":1,"event":"request"}` + "\n")
	file.WriteString("{\"seq\":2,\"event\":\"\xff\xfe\"}\n")
	file.WriteString("{\"seq\":3,\"event\":\"a\x00b\"}\n")
	file.WriteString("not json \xc3\x28\n")
	file.Write(long)
	file.WriteString(`{"seq":4,"event":"after"}` + "\n")
	path := filepath.Join(dir, "2026-03-01.jsonl")
	if err := os.WriteFile(path, file.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	s := New(Options{Dir: dir, DSN: pg.DSN, Gate: testGate, Retry: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	s.Durable(4, "2026-03-01.jsonl")
	testkit.WaitFor(t, 30*time.Second, "the sink to copy every line", func() bool {
		st := s.Status()
		return st.Rows == 6 && st.Behind == 0
	})
	got := query1(t, pg.DSN, `SELECT line_no, coalesce(seq::text, 'NULL'), raw IS NULL, coalesce(note, 'NULL'), coalesce(event, 'NULL') FROM lockhttp_audit ORDER BY line_no`)
	notText := "the line is not UTF-8 text free of NUL bytes, which the text column holds"
	want := [][]string{
		{"1", "1", "t", "NULL", "request"},
		{"2", "2", "f", notText, "NULL"},
		{"3", "NULL", "f", notText, "NULL"}, // a raw NUL: not JSON
		{"4", "NULL", "f", notText, "NULL"},
		{"5", "NULL", "t", fmt.Sprintf("the line is %d bytes long, past the audit's bound of %d: not copied", maxLine+1, maxLine), "NULL"},
		{"6", "4", "t", "NULL", "after"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("rows:\n%q\nwant:\n%q", got, want)
	}
	copies, err := Load(context.Background(), pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := copies[0].Sources[0].Open()
	if err != nil {
		t.Fatal(err)
	}
	back, _ := io.ReadAll(rc)
	wantBack := bytes.Replace(file.Bytes(), long, []byte("auditdb: line 5 of 2026-03-01.jsonl is not in the copy: "+want[4][3]+"\n"), 1)
	if !bytes.Equal(back, wantBack) {
		t.Fatalf("the copy read back:\n%q\nwant:\n%q", back, wantBack)
	}
}

// TestReadFromBounded: a read of a file is bounded in bytes (and lines), and lines without a
// record number, more than one read holds, are still copied on, not read again for ever.
func TestReadFromBounded(t *testing.T) {
	big := `{"event":"` + strings.Repeat("y", 1<<20) + `"}` + "\n"
	for _, c := range []struct {
		name  string
		file  string
		lines int
	}{
		{"long lines", strings.Repeat(big, 40) + `{"seq":1}` + "\n", 41},
		{"lines without a number", strings.Repeat("{}\n", maxRows+5), maxRows},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "2026-03-01.jsonl")
			if err := os.WriteFile(path, []byte(c.file), 0o600); err != nil {
				t.Fatal(err)
			}
			var pos position
			var lines int
			for range 10 {
				rows, next, full, err := readFrom(path, pos, 100)
				if err != nil {
					t.Fatal(err)
				}
				size := 0
				for _, r := range rows {
					size += len(r.line) + 1
				}
				if size > maxReadBytes+len(big) {
					t.Fatalf("one read of %d bytes, past %d and a line", size, maxReadBytes)
				}
				lines += len(rows)
				pos = next
				if !full {
					break
				}
			}
			if lines != c.lines || pos.lineNo != c.lines {
				t.Fatalf("%d lines read, at line %d; want %d", lines, pos.lineNo, c.lines)
			}
		})
	}
}

// TestLockedDatabaseRetried: a database that holds the copy waiting (here a lock on its table)
// is a failure within the sink's Timeout, shown in its status, and the copy resumes once it
// answers: never a copy stalled for good with its status "ok".
func TestLockedDatabaseRetried(t *testing.T) {
	pg := testkit.StartPostgres(t)
	if err := Migrate(context.Background(), pg.DSN); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	locker, err := connect(ctx, pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close(ctx)
	if err := exec(ctx, locker, `BEGIN; LOCK TABLE lockhttp_audit IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "2026-03-01.jsonl"), []byte(`{"seq":1}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := New(Options{Dir: dir, DSN: pg.DSN, Retry: 10 * time.Millisecond, Timeout: 300 * time.Millisecond})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { s.Run(rctx); close(done) }()
	defer func() { cancel(); <-done }()
	s.Durable(1, "2026-03-01.jsonl")
	testkit.WaitFor(t, 20*time.Second, "the sink to report the database down", func() bool {
		st := s.Status()
		return st.State == "down" && strings.Contains(st.Error, "did not finish a step of the copy within 300ms")
	})
	if err := exec(ctx, locker, `ROLLBACK`); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, "the sink to copy the line", func() bool {
		st := s.Status()
		return st.State == "ok" && st.Rows == 1 && st.Behind == 0
	})
}

// BenchmarkReadFromLongLine: the memory one read of a file takes when it holds a line past the
// audit's bound (dropped as it is read) and lines after it: bench/RESULTS.md.
func BenchmarkReadFromLongLine(b *testing.B) {
	path := filepath.Join(b.TempDir(), "2026-03-01.jsonl")
	data := append(bytes.Repeat([]byte("x"), maxLine+(1<<20)), '\n')
	data = append(data, `{"seq":1}`+"\n"...)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		rows, _, _, err := readFrom(path, position{}, 1)
		if err != nil || len(rows) != 2 || rows[0].note == "" {
			b.Fatalf("%d rows, %v", len(rows), err)
		}
	}
}

// TestLoadBeforeRaw: verify-log reads a database whose tables are at a version before raw (2),
// copied by an earlier gate, as it did.
func TestLoadBeforeRaw(t *testing.T) {
	pg := testkit.StartPostgres(t)
	dir := copyTo(t, pg.DSN, testRecords())
	execSQL(t, pg.DSN, `ALTER TABLE lockhttp_audit DROP COLUMN raw, DROP COLUMN note; UPDATE lockhttp_audit_schema SET version = 2`)
	verifyCopy(t, pg.DSN, dir, 3)
}
