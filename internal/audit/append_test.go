package audit

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/testkit"
)

// TestAppendWritesBeforeItReturns: once Append returns, the record is in the file (a process
// killed then loses nothing), without an fsync of its own; the fsync follows within syncDelay.
func TestAppendWritesBeforeItReturns(t *testing.T) {
	dir := t.TempDir()
	// Every fsync waits until the test lets it go: Append must return before.
	fs := &faultFS{writeLimit: -1, syncGate: make(chan struct{}), syncEnter: make(chan struct{}, 64)}
	w, err := open(Options{Dir: dir, Now: testkit.NewClock(day1).Now}, fs)
	if err != nil {
		t.Fatal(err)
	}
	released := false
	release := func() {
		if !released {
			released = true
			close(fs.syncGate)
		}
	}
	defer func() { release(); w.Close() }()
	path := filepath.Join(dir, "2026-11-30.jsonl")
	if err := w.Append(context.Background(), &Record{Time: day1, ID: "a1"}); err != nil {
		t.Fatal(err)
	}
	if lines := readLines(t, path); len(lines) != 1 {
		t.Fatalf("%d lines in the file when Append returned, want 1", len(lines))
	}
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Append(context.Background(), &Record{Time: day1, ID: fmt.Sprint("c", i)}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if lines := readLines(t, path); len(lines) != 51 {
		t.Fatalf("%d lines after 51 Appends returned", len(lines))
	}
	// The fsync comes on its own, within syncDelay of the writes.
	select {
	case <-fs.syncEnter:
	case <-time.After(5 * time.Second):
		t.Fatal("the appended records were never fsync'ed")
	}
	release()
	mustVerify(t, path, 51)
}

func TestAppendAfterClose(t *testing.T) {
	w, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	if err := w.Append(context.Background(), &Record{ID: "late"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close: %v, want ErrClosed", err)
	}
}
