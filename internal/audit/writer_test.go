package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/testkit"
)

// logLines returns the lines of the log that the committer goroutine writes to b.
func logLines(b *testkit.Buffer) []string {
	return strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
}

// readLines returns the file's lines without newlines; it fails the test if the file does not
// end with a newline.
func readLines(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) == 0 {
		return nil
	}
	if data[len(data)-1] != '\n' {
		t.Fatalf("%s does not end with a newline", path)
	}
	return strings.Split(string(data[:len(data)-1]), "\n")
}

func mustWrite(t *testing.T, w *Writer, r Record) {
	t.Helper()
	if err := w.Write(context.Background(), &r); err != nil {
		t.Fatalf("Write(%s): %v", r.ID, err)
	}
}

func mustVerify(t *testing.T, path string, want int) {
	t.Helper()
	n, err := Verify(path)
	if err != nil || n != want {
		t.Fatalf("Verify(%s) = %d, %v; want %d, nil", path, n, err, want)
	}
}

var day1 = time.Date(2026, 11, 30, 23, 59, 59, 0, time.UTC)

func TestWriteConcurrent(t *testing.T) {
	const writers, each = 50, 100
	dir := t.TempDir()
	clk := testkit.NewClock(day1.Add(-time.Hour))
	w, err := Open(Options{Dir: dir, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for g := range writers {
		wg.Go(func() {
			for i := range each {
				r := Record{Event: "request", ID: fmt.Sprintf("g%d-%d", g, i), URL: "https://example.com/\"\n", Status: 200}
				if err := w.Write(context.Background(), &r); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d records in %d batches", w.records, w.batches)

	path := filepath.Join(dir, "2026-11-30.jsonl")
	lines := readLines(t, path)
	if len(lines) != writers*each {
		t.Fatalf("%d lines, want %d", len(lines), writers*each)
	}
	seen := map[string]bool{}
	for i, l := range lines {
		var d decoded
		if err := json.Unmarshal([]byte(l), &d); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if seen[d.ID] {
			t.Fatalf("line %d: id %s twice", i+1, d.ID)
		}
		seen[d.ID] = true
		if !d.Time.Equal(clk.Now()) {
			t.Fatalf("line %d: time %v, want the clock's %v", i+1, d.Time, clk.Now())
		}
	}
	mustVerify(t, path, writers*each)
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("file mode = %v, %v; want 0600", fi.Mode(), err)
	}
}

func TestOpenCreatesDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "audit")
	w, err := Open(Options{Dir: dir, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("dir mode = %v, %v; want 0700", fi.Mode(), err)
	}
	if err := w.Healthy(); err != nil {
		t.Errorf("Healthy() = %v on a fresh writer", err)
	}
}

func TestOpenErrors(t *testing.T) {
	clk := testkit.NewClock(day1)
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string) string // returns Options.Dir
		want  string
	}{
		{
			name:  "no dir",
			setup: func(t *testing.T, dir string) string { return "" },
			want:  "no directory given",
		},
		{
			name: "dir under a regular file",
			setup: func(t *testing.T, dir string) string {
				if err := os.WriteFile(filepath.Join(dir, "f"), nil, 0o600); err != nil {
					t.Fatal(err)
				}
				return filepath.Join(dir, "f", "audit")
			},
			want: "not a directory",
		},
		{
			name: "today's file is a directory",
			setup: func(t *testing.T, dir string) string {
				if err := os.Mkdir(filepath.Join(dir, "2026-11-30.jsonl"), 0o700); err != nil {
					t.Fatal(err)
				}
				return dir
			},
			want: "2026-11-30.jsonl: is a directory",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := Open(Options{Dir: tt.setup(t, t.TempDir()), Now: clk.Now})
			if err == nil {
				w.Close()
				t.Fatalf("Open succeeded, want an error with %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "audit: ") {
				t.Errorf("Open error = %q, want it to start with \"audit: \" and contain %q", err, tt.want)
			}
		})
	}
}

func TestDayRollover(t *testing.T) {
	dir := t.TempDir()
	clk := testkit.NewClock(day1)
	w, err := Open(Options{Dir: dir, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, w, Record{ID: "a"}) // zero Time: the clock's
	clk.Set(day1.Add(2 * time.Second))
	mustWrite(t, w, Record{ID: "b"})
	// A late record of the old day after the switch, and one for a third day.
	mustWrite(t, w, Record{ID: "c", Time: day1.Add(500 * time.Millisecond)})
	mustWrite(t, w, Record{ID: "d", Time: day1.Add(48 * time.Hour)})
	mustWrite(t, w, Record{ID: "e"})

	// One batch that straddles midnight.
	for _, err := range commitBatch(w, []Record{
		{ID: "batch0", Time: day1},
		{ID: "batch1", Time: day1.Add(time.Second)},
		{ID: "batch2", Time: day1},
		{ID: "batch3", Time: day1.Add(time.Second)},
	}) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	want := map[string][]string{
		"2026-11-30.jsonl": {"a", "c", "batch0", "batch2"},
		"2026-12-01.jsonl": {"b", "e", "batch1", "batch3"},
		"2026-12-02.jsonl": {"d"},
	}
	for name, ids := range want {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name)
			var got []string
			for _, l := range readLines(t, path) {
				var d decoded
				if err := json.Unmarshal([]byte(l), &d); err != nil {
					t.Fatal(err)
				}
				if dayOf(d.Time).fileName() != name {
					t.Errorf("record %s at %v is in %s", d.ID, d.Time, name)
				}
				got = append(got, d.ID)
			}
			if strings.Join(got, ",") != strings.Join(ids, ",") {
				t.Errorf("ids = %v, want %v", got, ids)
			}
			mustVerify(t, path, len(ids))
		})
	}
}

// commitBatch queues recs at once, so that the idle committer takes them as one batch, and
// returns each one's result.
func commitBatch(w *Writer, recs []Record) []error {
	w.mu.Lock()
	var items []*item
	for _, r := range recs {
		it := w.items.Get().(*item)
		it.rec = r
		it.refs.Store(2)
		it.wait, it.sync = true, true
		items = append(items, it)
	}
	w.queue = append(w.queue, items...)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	errs := make([]error, len(items))
	for i, it := range items {
		errs[i] = <-it.done
		w.release(it)
	}
	return errs
}

func TestBigBatch(t *testing.T) {
	dir := t.TempDir()
	fs := &faultFS{writeLimit: -1}
	w, err := open(Options{Dir: dir, Now: testkit.NewClock(day1).Now}, fs)
	if err != nil {
		t.Fatal(err)
	}
	fs.mu.Lock()
	writes0, syncs0 := fs.writes, fs.syncs
	fs.mu.Unlock()
	// Every field of a record is bounded, so a batch grows big by its number of records: a
	// thousand of the largest records there are, about 5 MiB.
	big := strings.Repeat("\x01", 100<<10)
	var recs []Record
	for i := range 1000 {
		recs = append(recs, Record{Time: day1, ID: fmt.Sprint(i), URL: big, Reason: big, Detail: big, Findings: big})
	}
	for _, err := range commitBatch(w, recs) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	fs.mu.Lock()
	writes, syncs := fs.writes-writes0, fs.syncs-syncs0
	fs.mu.Unlock()
	fi, err := os.Stat(filepath.Join(dir, "2026-11-30.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if want := int(fi.Size()/maxWrite) + 1; writes != want || syncs != 1 {
		t.Errorf("%d writes and %d fsyncs for %d bytes in one batch, want %d (1 MiB each) and 1", writes, syncs, fi.Size(), want)
	}
	if cap(w.buf) > 4*maxWrite {
		t.Errorf("buffer kept at %d bytes", cap(w.buf))
	}
	mustVerify(t, filepath.Join(dir, "2026-11-30.jsonl"), 1000)
}

func TestRestartContinuesChain(t *testing.T) {
	tests := []struct {
		name      string
		tail      string // appended to the file between the runs, as a crash would leave it
		wantGood  int
		wantError string
	}{
		{name: "clean", wantGood: 6},
		{name: "torn line", tail: `{"time":"2026-11-30T23:59:59.0000`, wantGood: 6, wantError: ".jsonl:4: not JSON"},
		{name: "torn long line", tail: strings.Repeat("x", 100<<10), wantGood: 6, wantError: ".jsonl:4: not JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			clk := testkit.NewClock(day1)
			path := filepath.Join(dir, "2026-11-30.jsonl")
			for run := range 2 {
				w, err := Open(Options{Dir: dir, Now: clk.Now})
				if err != nil {
					t.Fatal(err)
				}
				for i := range 3 {
					mustWrite(t, w, Record{ID: fmt.Sprintf("run%d-%d", run, i)})
				}
				if err := w.Close(); err != nil {
					t.Fatal(err)
				}
				if run == 0 && tt.tail != "" {
					f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
					if err != nil {
						t.Fatal(err)
					}
					f.WriteString(tt.tail)
					f.Close()
				}
			}
			lines := readLines(t, path) // also checks the torn line was completed
			wantLines := 6
			if tt.tail != "" {
				wantLines++
				if lines[3] != tt.tail {
					t.Errorf("line 4 = %.40q, want the torn bytes", lines[3])
				}
			}
			if len(lines) != wantLines {
				t.Errorf("%d lines, want %d", len(lines), wantLines)
			}
			n, err := Verify(path)
			if n != tt.wantGood {
				t.Errorf("Verify good = %d, want %d", n, tt.wantGood)
			}
			if tt.wantError == "" && err != nil || tt.wantError != "" && (err == nil || !strings.Contains(err.Error(), tt.wantError)) {
				t.Errorf("Verify error = %v, want %q", err, tt.wantError)
			}
		})
	}
}

// faultFS wraps the real file system with injectable write and fsync failures.
type faultFS struct {
	osFS
	mu         sync.Mutex    // guards the fields below
	writeLimit int           // bytes still accepted before ENOSPC; < 0 means no limit
	syncErr    error         // returned (once) by the next Sync
	syncGate   chan struct{} // when non-nil, Sync waits for it to be closed
	syncEnter  chan struct{} // when non-nil, Sync sends on it before waiting for syncGate
	writes     int           // Write calls so far
	syncs      int           // Sync calls so far
}

type faultFile struct {
	*os.File
	fs *faultFS
}

func (f *faultFS) OpenFile(path string) (file, error) {
	o, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	return faultFile{o, f}, nil
}

func (f faultFile) Write(p []byte) (int, error) {
	f.fs.mu.Lock()
	f.fs.writes++
	limit := f.fs.writeLimit
	if limit >= 0 && len(p) > limit {
		f.fs.writeLimit = 0
		f.fs.mu.Unlock()
		n, _ := f.File.Write(p[:limit])
		return n, &os.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
	}
	if limit >= 0 {
		f.fs.writeLimit -= len(p)
	}
	f.fs.mu.Unlock()
	return f.File.Write(p)
}

func (f faultFile) Sync() error {
	f.fs.mu.Lock()
	f.fs.syncs++
	err, gate, enter := f.fs.syncErr, f.fs.syncGate, f.fs.syncEnter
	f.fs.syncErr = nil
	f.fs.mu.Unlock()
	if enter != nil {
		enter <- struct{}{}
	}
	if gate != nil {
		<-gate
	}
	if err != nil {
		return err
	}
	return f.File.Sync()
}

func TestWriteFailure(t *testing.T) {
	tests := []struct {
		name      string
		fault     func(fs *faultFS)
		wantErr   error
		wantGood  int    // good records after: 2 before, the failed one (if it reached the file), 1 after
		wantBad   string // Verify's error, "" for none
		wantLines int
	}{
		{
			name:      "disk full, nothing written",
			fault:     func(fs *faultFS) { fs.writeLimit = 0 },
			wantErr:   syscall.ENOSPC,
			wantGood:  3,
			wantLines: 3,
		},
		{
			// The short write is cut off again: no torn line.
			name:      "disk full, short write",
			fault:     func(fs *faultFS) { fs.writeLimit = 20 },
			wantErr:   syscall.ENOSPC,
			wantGood:  3,
			wantLines: 3,
		},
		{
			// The Write was told it failed, so its record is cut off again.
			name:      "fsync fails",
			fault:     func(fs *faultFS) { fs.syncErr = &os.PathError{Op: "sync", Path: "x", Err: syscall.EIO} },
			wantErr:   syscall.EIO,
			wantGood:  3,
			wantLines: 3,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			fs := &faultFS{writeLimit: -1}
			var logs testkit.Buffer
			w, err := open(Options{Dir: dir, Now: testkit.NewClock(day1).Now, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, fs)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			mustWrite(t, w, Record{ID: "ok1"})
			mustWrite(t, w, Record{ID: "ok2"})

			fs.mu.Lock()
			tt.fault(fs)
			fs.mu.Unlock()
			err = w.Write(context.Background(), &Record{ID: "failed"})
			path := filepath.Join(dir, "2026-11-30.jsonl")
			if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), path) || !strings.HasPrefix(err.Error(), "audit: ") {
				t.Fatalf("Write error = %v, want %v naming %s", err, tt.wantErr, path)
			}
			if h := w.Healthy(); !errors.Is(h, tt.wantErr) {
				t.Errorf("Healthy() = %v after a failed write, want %v", h, tt.wantErr)
			}
			if l := logLines(&logs); len(l) != 1 || !strings.Contains(l[0], "level=ERROR") || !strings.Contains(l[0], tt.wantErr.Error()) {
				t.Errorf("log = %q, want one error line", l)
			}

			fs.mu.Lock()
			fs.writeLimit = -1
			fs.mu.Unlock()
			mustWrite(t, w, Record{ID: "ok3"})
			if h := w.Healthy(); h != nil {
				t.Errorf("Healthy() = %v after a later success, want nil", h)
			}
			if l := logLines(&logs); len(l) != 2 || !strings.Contains(l[1], "level=INFO") {
				t.Errorf("log = %q, want an error line then a recovery line", l)
			}

			if lines := readLines(t, path); len(lines) != tt.wantLines {
				t.Errorf("%d lines, want %d", len(lines), tt.wantLines)
			}
			n, err := Verify(path)
			if n != tt.wantGood || tt.wantBad == "" && err != nil || tt.wantBad != "" && (err == nil || !strings.Contains(err.Error(), tt.wantBad)) {
				t.Errorf("Verify = %d, %v; want %d, %q", n, err, tt.wantGood, tt.wantBad)
			}
		})
	}
}

// TestWriteFailureRealFile uses a failure that root hits too: the next day's file is a directory.
func TestWriteFailureRealFile(t *testing.T) {
	dir := t.TempDir()
	clk := testkit.NewClock(day1)
	w, err := Open(Options{Dir: dir, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	mustWrite(t, w, Record{ID: "a"})

	next := filepath.Join(dir, "2026-12-01.jsonl")
	if err := os.Mkdir(next, 0o700); err != nil {
		t.Fatal(err)
	}
	clk.Set(day1.Add(time.Hour))
	err = w.Write(context.Background(), &Record{ID: "b"})
	if !errors.Is(err, syscall.EISDIR) || !strings.Contains(err.Error(), next) {
		t.Fatalf("Write = %v, want EISDIR naming %s", err, next)
	}
	if w.Healthy() == nil {
		t.Fatal("Healthy() = nil after a failed write")
	}
	if err := os.Remove(next); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, w, Record{ID: "c"})
	if err := w.Healthy(); err != nil {
		t.Fatalf("Healthy() = %v after a later success", err)
	}
	mustVerify(t, next, 1)
	mustVerify(t, filepath.Join(dir, "2026-11-30.jsonl"), 1)
}

func TestCloseFlushesQueue(t *testing.T) {
	dir := t.TempDir()
	fs := &faultFS{writeLimit: -1}
	w, err := open(Options{Dir: dir, Now: testkit.NewClock(day1).Now}, fs)
	if err != nil {
		t.Fatal(err)
	}
	// Hold the committer inside the first batch's fsync while more records queue up.
	gate, enter := make(chan struct{}), make(chan struct{}, 1)
	fs.mu.Lock()
	fs.syncGate, fs.syncEnter = gate, enter
	fs.mu.Unlock()
	first := make(chan error)
	go func() { first <- w.Write(context.Background(), &Record{ID: "first"}) }()
	<-enter // the committer is in the fsync of "first"

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := Record{ID: "queued", URL: "https://example.com/original"}
	for i := range 10 {
		r.ID = fmt.Sprintf("queued%d", i)
		if err := w.Write(ctx, &r); !errors.Is(err, context.Canceled) {
			t.Fatalf("Write with a cancelled context = %v, want context.Canceled", err)
		}
	}
	r.URL = "https://example.com/changed" // Write copied the record

	closed := make(chan error)
	go func() { closed <- w.Close() }()
	close(gate)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}

	path := filepath.Join(dir, "2026-11-30.jsonl")
	lines := readLines(t, path)
	if len(lines) != 11 {
		t.Fatalf("%d lines after Close, want 11", len(lines))
	}
	for _, l := range lines[1:] {
		if !strings.Contains(l, `"url":"https://example.com/original"`) {
			t.Errorf("line %s lacks the original URL", l)
		}
	}
	mustVerify(t, path, 11)

	if err := w.Write(context.Background(), &Record{ID: "late"}); !errors.Is(err, ErrClosed) {
		t.Errorf("Write after Close = %v, want ErrClosed", err)
	}
	if err := w.Healthy(); !errors.Is(err, ErrClosed) {
		t.Errorf("Healthy after Close = %v, want ErrClosed", err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

func TestWriteAllocs(t *testing.T) {
	w, err := Open(Options{Dir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	r := Record{Time: time.Now(), Event: "request", URL: "https://example.com/", Status: 200}
	ctx := context.Background()
	n := testing.AllocsPerRun(1000, func() {
		if err := w.Write(ctx, &r); err != nil {
			t.Fatal(err)
		}
	})
	// The pool may be emptied by a GC; on average a Write allocates nothing.
	if n > 0.1 {
		t.Errorf("Write allocates %v times per call, want ~0", n)
	}
}
