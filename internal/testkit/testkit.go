// Package testkit holds what the tests of every package share, for _test.go files only: a
// settable clock, a buffer safe for concurrent writes, a wait for a condition with a deadline,
// the request ids an audit directory records and a PostgreSQL server of a test's own.
package testkit

import (
	"bytes"
	"sync"
	"testing"
	"time"
)

// Clock is a clock that moves only when told; its Now method stands in for time.Now. It is safe
// for concurrent use. The zero Clock reads the zero time.
type Clock struct {
	mu sync.Mutex
	t  time.Time // guarded by mu
}

// NewClock returns a Clock that reads t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set moves the clock to t, backwards or forwards.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// Advance moves the clock by d; a negative d moves it back.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Buffer is an io.Writer that keeps what is written, safe for a goroutine to write while the
// test reads. The zero Buffer is empty and ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer // guarded by mu
}

// Write appends p; it never fails.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// pollInterval is how often WaitFor asks its condition again.
const pollInterval = 10 * time.Millisecond

// WaitFor returns as soon as cond holds; when it still does not hold within the given time, it
// fails the test with what, which says what was waited for. cond is called from the caller's
// goroutine, every pollInterval, and once more at the deadline. Like t.Fatal, WaitFor must be
// called from the goroutine running the test.
func WaitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if cond() {
		return
	}
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if cond() {
				return
			}
		case <-deadline.C:
			if cond() {
				return
			}
			t.Fatalf("%s: not within %s", what, within)
			return
		}
	}
}
