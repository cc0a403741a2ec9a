package testkit

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestClock(t *testing.T) {
	var zero Clock
	if !zero.Now().IsZero() {
		t.Fatalf("zero Clock reads %v", zero.Now())
	}
	c := NewClock(t0)
	steps := []struct {
		name string
		move func()
		want time.Time
	}{
		{"new", func() {}, t0},
		{"advance", func() { c.Advance(90 * time.Second) }, t0.Add(90 * time.Second)},
		{"advance back", func() { c.Advance(-time.Hour) }, t0.Add(90*time.Second - time.Hour)},
		{"set forward", func() { c.Set(t0.Add(48 * time.Hour)) }, t0.Add(48 * time.Hour)},
		{"set back", func() { c.Set(t0) }, t0},
	}
	for _, s := range steps {
		s.move()
		if got := c.Now(); !got.Equal(s.want) {
			t.Fatalf("%s: Now() = %v, want %v", s.name, got, s.want)
		}
	}
}

// TestClockConcurrent moves and reads the clock from many goroutines; under -race it fails if
// a method is not guarded, and without it no step may be lost.
func TestClockConcurrent(t *testing.T) {
	c := NewClock(t0)
	const n, steps = 8, 100
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for range steps {
				c.Advance(time.Second)
				_ = c.Now()
			}
		})
	}
	// A reader beside the writers (Set of a read value would lose the Advances between them).
	wg.Go(func() {
		for range steps {
			_ = c.Now()
		}
	})
	wg.Wait()
	if got, want := c.Now(), t0.Add(n*steps*time.Second); !got.Equal(want) {
		t.Fatalf("Now() = %v, want %v", got, want)
	}
}

func TestBuffer(t *testing.T) {
	var b Buffer
	if b.String() != "" {
		t.Fatalf("zero Buffer holds %q", b.String())
	}
	var w io.Writer = &b
	if n, err := fmt.Fprintf(w, "a=%d ", 1); n != 4 || err != nil {
		t.Fatalf("Fprintf: %d, %v", n, err)
	}
	io.WriteString(w, "b=2")
	if got := b.String(); got != "a=1 b=2" {
		t.Fatalf("String() = %q", got)
	}
}

// TestBufferConcurrent writes lines from many goroutines while another reads; every line
// arrives whole.
func TestBufferConcurrent(t *testing.T) {
	var b Buffer
	const n, lines = 8, 100
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			for j := range lines {
				fmt.Fprintf(&b, "writer %d line %d\n", i, j)
			}
		})
	}
	wg.Go(func() {
		for range lines {
			_ = b.String()
		}
	})
	wg.Wait()
	got := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(got) != n*lines {
		t.Fatalf("%d lines, want %d", len(got), n*lines)
	}
	for i := range n {
		for j := range lines {
			if !slices.Contains(got, fmt.Sprintf("writer %d line %d", i, j)) {
				t.Fatalf("writer %d line %d is missing or torn", i, j)
			}
		}
	}
}

// fakeTB records a failure and, like the real Fatalf, ends the goroutine. It embeds a nil
// testing.TB: a call to any other method panics.
type fakeTB struct {
	testing.TB
	failure string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failure = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// wait runs WaitFor on a fakeTB in its own goroutine; it returns the failure, empty when
// WaitFor returned.
func wait(within time.Duration, what string, cond func() bool) (failure string) {
	f := &fakeTB{}
	done := make(chan struct{})
	returned := false
	go func() {
		defer close(done)
		WaitFor(f, within, what, cond)
		returned = true
	}()
	<-done
	if returned && f.failure != "" {
		return "returned after failing: " + f.failure
	}
	if !returned && f.failure == "" {
		return "ended without a failure"
	}
	return f.failure
}

func TestWaitFor(t *testing.T) {
	t.Run("holds at once", func(t *testing.T) {
		calls := 0
		if f := wait(0, "x", func() bool { calls++; return true }); f != "" {
			t.Fatal(f)
		}
		if calls != 1 {
			t.Fatalf("cond called %d times, want 1", calls)
		}
	})
	t.Run("holds after polling", func(t *testing.T) {
		calls := 0
		if f := wait(time.Minute, "x", func() bool { calls++; return calls == 3 }); f != "" {
			t.Fatal(f)
		}
		if calls != 3 {
			t.Fatalf("cond called %d times, want 3", calls)
		}
	})
	t.Run("holds when another goroutine makes it", func(t *testing.T) {
		asked := make(chan struct{})
		var ready atomic.Bool
		go func() {
			<-asked
			ready.Store(true)
		}()
		calls := 0
		cond := func() bool {
			if calls++; calls == 2 {
				close(asked)
			}
			return ready.Load()
		}
		if f := wait(time.Minute, "x", cond); f != "" {
			t.Fatal(f)
		}
	})
	t.Run("never holds", func(t *testing.T) {
		const within = 5 * pollInterval
		calls := 0
		start := time.Now()
		f := wait(within, "the widget to appear", func() bool { calls++; return false })
		if took := time.Since(start); took < within {
			t.Fatalf("failed after %s, before the deadline of %s", took, within)
		}
		if want := "the widget to appear: not within " + within.String(); f != want {
			t.Fatalf("failure %q, want %q", f, want)
		}
		if calls < 2 {
			t.Fatalf("cond called %d times: not polled", calls)
		}
	})
}

// TestOnlyTestsImport lists every package of the module and fails if a package's own (non-test)
// files import testkit: it is a test kit, never part of a binary.
func TestOnlyTestsImport(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list the packages")
	}
	const self = "github.com/lockhttp/lockhttp/internal/testkit"
	for _, goos := range []string{"linux", "darwin", "windows"} {
		t.Run(goos, func(t *testing.T) {
			cmd := exec.Command(goTool, "list", "-e", "-json=ImportPath,Imports,TestImports,XTestImports,Error", "github.com/lockhttp/lockhttp/...")
			cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH=amd64", "CGO_ENABLED=0")
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("go list: %v\n%s", err, stderr.String())
			}
			listed, testUsers := false, 0
			dec := json.NewDecoder(strings.NewReader(string(out)))
			for {
				var p struct {
					ImportPath                         string
					Imports, TestImports, XTestImports []string
					Error                              *struct{ Err string }
				}
				if err := dec.Decode(&p); errors.Is(err, io.EOF) {
					break
				} else if err != nil {
					t.Fatalf("go list output: %v", err)
				}
				if p.Error != nil {
					t.Fatalf("go list: %s: %s", p.ImportPath, p.Error.Err)
				}
				listed = listed || p.ImportPath == self
				if slices.Contains(p.Imports, self) {
					t.Errorf("%s imports %s outside its _test.go files; only tests may use it", p.ImportPath, self)
				}
				if slices.Contains(p.TestImports, self) || slices.Contains(p.XTestImports, self) {
					testUsers++
				}
			}
			// The listing must be the module's, read from the right fields: it holds this package
			// and the tests that use it.
			if !listed || testUsers == 0 {
				t.Fatalf("go list found testkit: %v; packages whose tests import it: %d", listed, testUsers)
			}
		})
	}
}

func TestAuditIDs(t *testing.T) {
	dir := t.TempDir()
	day := `{"event":"request","id":"r1","code":""}` + "\n" +
		`{"event":"summary","count":3,"ids":["r2","r3","r1"]}` + "\n" +
		"\n" +
		`{"event":"policy"}` + "\n" +
		`{"event":"request","id":"r4"`
	write := func(name, text string) {
		if err := os.WriteFile(dir+"/"+name, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("2026-03-01.jsonl", day)
	write("2026-03-02.jsonl", `{"event":"connect","id":"r5"}`+"\n")
	write("audit.key", `{"id":"not-a-record"}`+"\n")
	got := AuditIDs(t, dir)
	want := map[string]int{"r1": 2, "r2": 1, "r3": 1, "r5": 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("AuditIDs = %v; want %v (r4's line is not finished; audit.key is no day file)", got, want)
	}
	if ids := RecordIDs(map[string]any{"id": "a", "ids": []any{"b", 7, ""}}); !slices.Equal(ids, []string{"a", "b"}) {
		t.Fatalf("RecordIDs = %q", ids)
	}
}
