package audit

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/testkit"
)

// TestSubmitWritesWithoutFsyncPerRecord checks that submitted records are written at once, ride
// on the fsync of the next Write, and are fsync'ed within syncDelay when no Write comes.
func TestSubmitWritesWithoutFsyncPerRecord(t *testing.T) {
	dir := t.TempDir()
	fs := &faultFS{writeLimit: -1}
	w, err := open(Options{Dir: dir, Now: testkit.NewClock(day1).Now}, fs)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	path := filepath.Join(dir, "2026-11-30.jsonl")
	syncs := func() int {
		fs.mu.Lock()
		defer fs.mu.Unlock()
		return fs.syncs
	}
	s0 := syncs()
	for i := range 20 {
		w.Submit(&Record{Time: day1, ID: fmt.Sprint("s", i)})
	}
	testkit.WaitFor(t, 5*time.Second, "the 20 submitted records written", func() bool { return len(readLines(t, path)) >= 20 })
	// Within syncDelay of the last write, one fsync carries them all.
	testkit.WaitFor(t, 5*time.Second, "the submitted records fsync'ed", func() bool { return syncs() != s0 })
	if n := syncs() - s0; n > 3 {
		t.Errorf("%d fsyncs for 20 submitted records; want them to share", n)
	}
	// A Write fsyncs, and the records submitted before it are on disk with it.
	w.Submit(&Record{Time: day1, ID: "before-write"})
	if err := w.Write(context.Background(), &Record{Time: day1, ID: "w"}); err != nil {
		t.Fatal(err)
	}
	mustVerify(t, path, 22)
}

func TestSubmitAfterCloseIsLost(t *testing.T) {
	w, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	w.Submit(&Record{ID: "late"}) // must not panic or block
	if w.Healthy() != ErrClosed {
		t.Errorf("Healthy after Close = %v", w.Healthy())
	}
}

func TestCloseSyncsSubmitted(t *testing.T) {
	dir := t.TempDir()
	w, err := Open(Options{Dir: dir, Now: testkit.NewClock(day1).Now})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		w.Submit(&Record{Time: day1, ID: fmt.Sprint(i)})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	mustVerify(t, filepath.Join(dir, "2026-11-30.jsonl"), 5)
}
