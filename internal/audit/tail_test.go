package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/testkit"
)

// tailIDs collects the ids of the records Tail passes on.
type tailIDs struct {
	mu  sync.Mutex
	ids []string
}

func (c *tailIDs) each(line []byte) {
	var m struct{ ID string }
	if json.Unmarshal(line, &m) != nil {
		m.ID = "BAD:" + string(line)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ids = append(c.ids, m.ID)
}

func (c *tailIDs) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.ids, " ")
}

func writeN(t *testing.T, w *Writer, at time.Time, from, to int) {
	t.Helper()
	for i := from; i <= to; i++ {
		mustWrite(t, w, Record{Time: at, ID: fmt.Sprintf("r%d", i), Verdict: "FREE"})
	}
}

// Without Follow, Tail passes the last records of the latest day and returns.
func TestTailLast(t *testing.T) {
	dir := t.TempDir()
	w, err := Open(Options{Dir: dir, NoSync: true, Now: func() time.Time { return day1 }})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	writeN(t, w, day1.Add(-24*time.Hour), 1, 3) // the day before
	writeN(t, w, day1, 4, 8)
	tests := []struct {
		last int
		want string
	}{
		{0, ""},
		{1, "r8"},
		{3, "r6 r7 r8"},
		{100, "r4 r5 r6 r7 r8"},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.last), func(t *testing.T) {
			var got tailIDs
			if err := Tail(context.Background(), dir, TailOptions{Last: tc.last}, got.each); err != nil {
				t.Fatal(err)
			}
			if got.String() != tc.want {
				t.Fatalf("got %q, want %q", got.String(), tc.want)
			}
		})
	}
}

// With Follow, Tail passes new records as they are written, into the next day's file, and not
// the rest of the day.
func TestTailFollow(t *testing.T) {
	dir := t.TempDir()
	w, err := Open(Options{Dir: dir, NoSync: true, Now: func() time.Time { return day1 }})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	writeN(t, w, day1, 1, 50)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var got tailIDs
	go func() {
		done <- Tail(ctx, dir, TailOptions{Last: 2, Follow: true, Poll: 5 * time.Millisecond}, got.each)
	}()
	testkit.WaitFor(t, 5*time.Second, "the last two", func() bool { return got.String() == "r49 r50" })
	writeN(t, w, day1, 51, 52)
	testkit.WaitFor(t, 5*time.Second, "the new ones", func() bool { return got.String() == "r49 r50 r51 r52" })
	writeN(t, w, day1.Add(time.Second), 53, 53) // the next day's file
	testkit.WaitFor(t, 5*time.Second, "the next day's", func() bool { return got.String() == "r49 r50 r51 r52 r53" })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Tail after its context ended: %v", err)
	}
}

// A line being written is passed once its newline is; a line too long is skipped; a directory
// without a file yet is waited for.
func TestTailLines(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "audit")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var got tailIDs
	done := make(chan error, 1)
	go func() {
		done <- Tail(ctx, dir, TailOptions{Last: 10, Follow: true, Poll: 5 * time.Millisecond}, got.each)
	}()
	os.Mkdir(dir, 0o700)
	f, err := os.OpenFile(filepath.Join(dir, "2026-11-30.jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.WriteString(`{"id":"a"}` + "\n" + `{"id":"b`)
	testkit.WaitFor(t, 5*time.Second, "the complete line", func() bool { return got.String() == "a" })
	f.WriteString(`"}` + "\n")
	testkit.WaitFor(t, 5*time.Second, "the completed line", func() bool { return got.String() == "a b" })
	f.WriteString(`{"id":"` + strings.Repeat("x", maxTailLine) + `"}` + "\n" + `{"id":"c"}` + "\n\n")
	testkit.WaitFor(t, 5*time.Second, "the line after the long one", func() bool { return got.String() == "a b c" })
	os.WriteFile(filepath.Join(dir, "notes.jsonl"), []byte(`{"id":"not a day file"}`+"\n"), 0o600)
	f.WriteString(`{"id":"d"}` + "\n")
	testkit.WaitFor(t, 5*time.Second, "the day file only", func() bool { return got.String() == "a b c d" })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestLastLines(t *testing.T) {
	tests := []struct {
		data string
		n    int
		want int64
	}{
		{"", 3, 0},
		{"a\nb\nc\n", 0, 6},
		{"a\nb\nc\n", 1, 4},
		{"a\nb\nc\n", 2, 2},
		{"a\nb\nc\n", 3, 0},
		{"a\nb\nc", 1, 2}, // c is being written: b is the last complete line
		{"a\nb\nc", 0, 4},
		{"abc", 1, 0},
		{strings.Repeat("x", 40<<10) + "\n" + strings.Repeat("y", 40<<10) + "\n", 1, 40<<10 + 1},
	}
	for _, tc := range tests {
		got, err := lastLines(strings.NewReader(tc.data), int64(len(tc.data)), tc.n)
		if err != nil || got != tc.want {
			t.Errorf("lastLines(%.10q…, %d) = %d, %v; want %d", tc.data, tc.n, got, err, tc.want)
		}
	}
}
