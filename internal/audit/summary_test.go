package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/testkit"
)

// TestSummariesBoundTheFlood is the audit half of issue 15's attack: one container's refusals,
// each repeating a 60 KB URL. Past SummarizeAfter a second they go into the second's summary:
// every Write returns nil only once its record or its summary is on disk, the file grows by a
// few bytes per summarised request, the fsyncs stay a handful, and every id is in the file once,
// counted.
func TestSummariesBoundTheFlood(t *testing.T) {
	dir := t.TempDir()
	fs := &faultFS{writeLimit: -1}
	clk := testkit.NewClock(time.Date(2026, 11, 30, 12, 0, 0, 500_000_000, time.UTC))
	w, err := open(Options{Dir: dir, Now: clk.Now, SummarizeAfter: 5}, fs)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	url := "https://example.com/?q=" + strings.Repeat("A", 60<<10)
	const flood, neighbour = 600, 3
	var wg sync.WaitGroup
	errs := make(chan error, flood+neighbour)
	write := func(container, id string) {
		defer wg.Done()
		errs <- w.Write(context.Background(), &Record{Event: "request", ID: id, Container: container, Method: "GET",
			URL: url, Verdict: "DENY", Code: "E_RULE", Rule: "deny-all", Status: 403})
	}
	for i := range flood {
		wg.Add(1)
		go write("c1", fmt.Sprintf("r-c1-%d", i))
	}
	for i := range neighbour {
		wg.Add(1)
		go write("c2", fmt.Sprintf("r-c2-%d", i))
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("Write = %v", err)
		}
	}
	fs.mu.Lock()
	syncs := fs.syncs
	fs.mu.Unlock()
	// The 5 + 3 records of their own share fsyncs; the summaries take one.
	if syncs > 5+3+1 {
		t.Errorf("%d fsyncs for %d refusals, want at most 9", syncs, flood+neighbour)
	}
	path := filepath.Join(dir, "2026-11-30.jsonl")
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	// 8 records of their own (the URL clipped to 2 KiB) and about 600 ids of 10 bytes.
	if limit := int64(8*3<<10 + flood*16 + 8<<10); fi.Size() > limit {
		t.Errorf("audit file is %d bytes after %d refusals of a 60 KB URL, want at most %d", fi.Size(), flood+neighbour, limit)
	}
	seen := map[string]int{}
	counted := map[string]int{}
	for _, l := range readLines(t, path) {
		var m struct {
			Event, ID, Container string
			Count                int
			IDs                  []string
		}
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		if m.Event == EventSummary {
			if m.Count != len(m.IDs) || m.Count > maxIDs {
				t.Errorf("summary counts %d and lists %d ids, want the same, at most %d", m.Count, len(m.IDs), maxIDs)
			}
			counted[m.Container] += m.Count
			for _, id := range m.IDs {
				seen[id]++
			}
			continue
		}
		counted[m.Container]++
		seen[m.ID]++
	}
	if counted["c1"] != flood || counted["c2"] != neighbour {
		t.Errorf("counted %v, want c1 %d and c2 %d", counted, flood, neighbour)
	}
	for i := range flood {
		if id := fmt.Sprintf("r-c1-%d", i); seen[id] != 1 {
			t.Errorf("id %s is in the audit %d times, want once", id, seen[id])
		}
	}
	mustVerify(t, path, len(readLines(t, path)))
}

// TestSummariesNextSecond: the rate is per second of the clock; a new second starts afresh and
// flushes the old second's summaries.
func TestSummariesNextSecond(t *testing.T) {
	dir := t.TempDir()
	clk := testkit.NewClock(day1.Add(-time.Hour))
	w, err := Open(Options{Dir: dir, Now: clk.Now, SummarizeAfter: 1, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, w, Record{ID: "a", Container: "c"})
	done := make(chan error, 1)
	go func() { done <- w.Write(context.Background(), &Record{ID: "b", Container: "c"}) }() // summarised
	testkit.WaitFor(t, 5*time.Second, "b in a summary", func() bool {
		w.smu.Lock()
		defer w.smu.Unlock()
		return w.sums != nil
	})
	clk.Advance(time.Second)
	mustWrite(t, w, Record{ID: "c", Container: "c"}) // first of its second: its own record
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range readLines(t, filepath.Join(dir, "2026-11-30.jsonl")) {
		var m struct {
			Event, ID string
			IDs       []string
		}
		json.Unmarshal([]byte(l), &m)
		got = append(got, m.Event+":"+m.ID+strings.Join(m.IDs, ","))
	}
	if !slices.Contains(got, ":a") || !slices.Contains(got, "summary:b") || !slices.Contains(got, ":c") || len(got) != 3 {
		t.Errorf("records %q, want a, a summary of b, and c", got)
	}
}

// TestBudget: past the budget nothing more is written, Healthy says so with the fix and the
// public reason; once old files leave the directory, writes succeed again.
func TestBudget(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, "2026-11-01.jsonl")
	if err := os.WriteFile(old, make([]byte, 3000), 0o600); err != nil {
		t.Fatal(err)
	}
	clk := testkit.NewClock(day1)
	w, err := Open(Options{Dir: dir, Now: clk.Now, Budget: 4000})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var werr error
	for i := 0; i < 100 && werr == nil; i++ {
		werr = w.Write(context.Background(), &Record{ID: fmt.Sprint(i), URL: strings.Repeat("u", 200)})
	}
	if !errors.Is(werr, ErrBudget) || !DiskFull(werr) || !strings.Contains(werr.Error(), "-audit-budget") {
		t.Fatalf("Write past the budget = %v, want ErrBudget naming -audit-budget", werr)
	}
	var pr interface{ PublicReason() string }
	if h := w.Healthy(); !errors.As(h, &pr) || !strings.Contains(pr.PublicReason(), "size budget") {
		t.Errorf("Healthy() = %v, want a public reason naming the size budget", h)
	}
	if u := w.Usage(); !u.Full || u.Budget != 4000 || u.Bytes > 4000 || u.Bytes < 3000 {
		t.Errorf("Usage() = %+v, want full, budget 4000, bytes under it", u)
	}
	if err := os.Remove(old); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Second) // the directory is counted again at most once a second
	mustWrite(t, w, Record{ID: "after"})
	if h := w.Healthy(); h != nil {
		t.Errorf("Healthy() = %v after space came back", h)
	}
	mustVerify(t, filepath.Join(dir, "2026-11-30.jsonl"), len(readLines(t, filepath.Join(dir, "2026-11-30.jsonl"))))
}

// tmpfs mounts a small tmpfs (root only) and returns its path; elsewhere it skips, except under
// CI=true, which runs as root.
func tmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI runs as root: the full-disk test needs a tmpfs")
		}
		t.Skip("mounting a tmpfs needs root (TestWriteFailure covers a full disk through a fake file system)")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	return dir
}

// TestDiskFull fills a real (tmpfs) disk: Write fails with a full-disk error that says so (and
// its public reason), the file keeps no torn line, and once space is freed writes succeed again.
func TestDiskFull(t *testing.T) {
	mnt := tmpfs(t, "256k")
	dir := filepath.Join(mnt, "audit")
	w, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	filler := filepath.Join(mnt, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	f.Close()
	werr := w.Write(context.Background(), &Record{ID: "full", URL: strings.Repeat("u", 2000)})
	var pr interface{ PublicReason() string }
	if !DiskFull(werr) || !errors.Is(werr, syscall.ENOSPC) || !errors.As(werr, &pr) || !strings.Contains(pr.PublicReason(), "disk is full") ||
		!strings.Contains(werr.Error(), "free space") {
		t.Fatalf("Write on a full disk = %v, want ENOSPC with the fix and a public reason", werr)
	}
	if !w.Usage().Full {
		t.Error("Usage().Full = false on a full disk")
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, w, Record{ID: "after"})
	if h := w.Healthy(); h != nil {
		t.Errorf("Healthy() = %v after space came back", h)
	}
	today := filepath.Join(dir, time.Now().UTC().Format("2006-01-02")+".jsonl")
	mustVerify(t, today, 1)
}
