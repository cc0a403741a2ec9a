package audit

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/testkit"
)

// signedWriter opens a writer with a fresh key on a fake clock.
func signedWriter(t *testing.T, dir string, clk *testkit.Clock) *Writer {
	t.Helper()
	w, err := Open(Options{Dir: dir, Now: clk.Now, KeyFile: filepath.Join(dir, KeyFileName), CreateKey: true, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func countSigned(lines []string) int {
	n := 0
	for _, l := range lines {
		if strings.Contains(l, sigPrefix) {
			n++
		}
	}
	return n
}

// TestSignedAtMostOncePerInterval: batches written within signEvery of each other share one
// record signature (the first), the head covers the rest, and the log verifies clean; once
// signEvery has passed, the next batch's last record is signed again.
func TestSignedAtMostOncePerInterval(t *testing.T) {
	dir := t.TempDir()
	clk := testkit.NewClock(day1.Add(-time1h))
	w := signedWriter(t, dir, clk)
	ctx := context.Background()
	for i := range 10 { // ten batches of one record each: Append waits for its batch
		if err := w.Append(ctx, &Record{ID: "r" + string(rune('a'+i))}); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "2026-11-30.jsonl")
	if n := countSigned(readLines(t, path)); n != 1 {
		t.Errorf("%d signed records among 10 batches within a second, want 1", n)
	}
	clk.Advance(signEvery)
	if err := w.Append(ctx, &Record{ID: "later"}); err != nil {
		t.Fatal(err)
	}
	lines := readLines(t, path)
	if n := countSigned(lines); n != 2 || !strings.Contains(lines[len(lines)-1], sigPrefix) {
		t.Errorf("after signEvery: %d signed, last %q; want the new batch signed", n, lines[len(lines)-1])
	}
	w.Append(ctx, &Record{ID: "tail"}) // unsigned: only the head covers it
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if rep := verifyDir(t, dir); rep.Worst() != Note || rep.Records != 12 {
		t.Errorf("verify: %d records, %+v", rep.Records, rep.Findings)
	}
	// A clean stop left the tail under the head: the next start needs no seal.
	w = signedWriter(t, dir, clk)
	w.Close()
	if lines := readLines(t, path); len(lines) != 12 {
		t.Errorf("%d lines after a restart, want 12 (no seal): %q", len(lines), lines[len(lines)-1])
	}
}

// TestAppendsSyncedUnderSteadyLoad: Appends that never leave the committer a quiet moment are
// still fsync'ed, and the head written, once syncDelay has passed on the clock. (Each Append's
// batch is committed before the next is queued, so the committer's timer, in real time, never
// fires: only the clock tells it that syncDelay has passed.)
func TestAppendsSyncedUnderSteadyLoad(t *testing.T) {
	dir := t.TempDir()
	clk := testkit.NewClock(day1.Add(-time1h))
	w, err := Open(Options{Dir: dir, Now: clk.Now, KeyFile: filepath.Join(dir, KeyFileName), CreateKey: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ctx := context.Background()
	for i := range 200 {
		clk.Advance(syncDelay / 10)
		if err := w.Append(ctx, &Record{ID: "x"}); err != nil {
			t.Fatal(err)
		}
		if h, err := ReadHead(filepath.Join(dir, HeadName)); err == nil && h.Seq > 1 {
			if i > 50 {
				t.Errorf("the first head after %d Appends (%v on the clock), want within about %v", i, time.Duration(i)*syncDelay/10, syncDelay)
			}
			return
		}
	}
	t.Fatal("no head (no fsync) after 200 Appends over 20 × syncDelay")
}

// TestVerifyCoverage: the head vouches for the lines up to the record it names; lines after it
// that no signature covers are pending (a running gate covers them soon), across day files too.
func TestVerifyCoverage(t *testing.T) {
	dir := t.TempDir()
	clk := testkit.NewClock(day1.Add(-time1h))
	w := signedWriter(t, dir, clk)
	ctx := context.Background()
	w.Append(ctx, &Record{ID: "a"}) // signed
	w.Append(ctx, &Record{ID: "b"})
	w.Close()
	headPath := filepath.Join(dir, HeadName)
	head, _ := os.ReadFile(headPath)

	// More records after the head, unsigned: a live log's tail, or lines added by hand.
	w = signedWriter(t, dir, clk)
	w.lastSig = clk.Now() // as if a record had just been signed
	w.Append(ctx, &Record{ID: "c"})
	w.Close()
	os.WriteFile(headPath, head, 0o600) // the head as it was before c
	rep := verifyDir(t, dir)
	if rep.Worst() != Tampered || !rep.OnlyPending() {
		t.Fatalf("a tail after the head: %+v; want only pending findings", rep.Findings)
	}
	if !strings.Contains(rep.Findings[len(rep.Findings)-1].Text, "verify again") && !anyText(rep, "verify again") {
		t.Errorf("findings %+v: want the advice to verify again", rep.Findings)
	}

	// Day files: the last record of one day unsigned, the next day's first batch signed: the
	// signature covers the day before through prev_file.
	dir2 := t.TempDir()
	clk2 := testkit.NewClock(day1.Add(-time1s))
	w = signedWriter(t, dir2, clk2)
	w.Append(ctx, &Record{ID: "d1-signed"})
	w.Append(ctx, &Record{ID: "d1-unsigned"})
	clk2.Advance(2 * time1s) // the next day, and past signEvery
	w.Append(ctx, &Record{ID: "d2-signed"})
	w.Append(ctx, &Record{ID: "d2-tail"})
	w.Close()
	if rep := verifyDir(t, dir2); rep.Worst() != Note || rep.Records != 4 {
		t.Errorf("across days: %d records, %+v", rep.Records, rep.Findings)
	}
	// Without the next day's signature and head, the day before's tail stays uncovered.
	os.Remove(filepath.Join(dir2, HeadName))
	lines := readLines(t, filepath.Join(dir2, "2026-12-01.jsonl"))
	os.WriteFile(filepath.Join(dir2, "2026-12-01.jsonl"), []byte(strings.Join(lines[1:], "\n")+"\n"), 0o600)
	if rep := verifyDir(t, dir2); rep.Worst() != Tampered {
		t.Errorf("the signed first line of a day removed: %+v", rep.Findings)
	}
}

func anyText(rep *VerifyReport, s string) bool {
	for _, f := range rep.Findings {
		if strings.Contains(f.Text, s) {
			return true
		}
	}
	return false
}
