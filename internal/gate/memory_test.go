package gate

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/testkit"
)

// TestMemoryReturnedOncePerQuietSpell: after requests, two quiet checks return the memory, once;
// new requests and another quiet spell return it again; a gate that served nothing never does.
func TestMemoryReturnedOncePerQuietSpell(t *testing.T) {
	g := New(Config{Audit: nil})
	var freed atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go g.returnMemoryWhenQuiet(ctx, 5*time.Millisecond, func() { freed.Add(1) })
	time.Sleep(50 * time.Millisecond)
	if n := freed.Load(); n != 0 {
		t.Fatalf("a gate that served nothing returned its memory %d times", n)
	}
	g.newID()
	testkit.WaitFor(t, 5*time.Second, "the memory returned", func() bool { return freed.Load() == 1 })
	time.Sleep(50 * time.Millisecond)
	if n := freed.Load(); n != 1 {
		t.Fatalf("one quiet spell returned the memory %d times", n)
	}
	g.newID()
	testkit.WaitFor(t, 5*time.Second, "the memory returned again", func() bool { return freed.Load() == 2 })
}

// TestMemoryReturnedWhileHoldsBegin: requests that go on to wait for a human do not break a quiet
// spell (1,000 agents retrying their held requests together keep starting requests, yet the gate
// is idle): at the first check after such a burst the memory is returned; a request that is not
// held starts the wait for two quiet checks again.
func TestMemoryReturnedWhileHoldsBegin(t *testing.T) {
	q := newQuietSpell(0, 0)
	var started, held uint64
	steps := []struct {
		name        string
		plain, hold uint64 // requests started since the last check, not held and held
		heldLate    uint64 // requests counted at the last check, held since
		want        bool
	}{
		{"nothing yet", 0, 0, 0, false},
		{"requests", 1000, 0, 0, false},
		{"first quiet check", 0, 0, 0, false},
		{"second quiet check", 0, 0, 0, true},
		{"still quiet", 0, 0, 0, false},
		{"a burst of holds", 0, 1000, 0, true},
		{"nothing since", 0, 0, 0, false},
		{"a burst of holds, some still on their way", 20, 980, 0, false},
		{"the rest held", 0, 0, 20, true},
		{"holds and one plain request", 1, 1000, 0, false},
		{"first quiet check after it", 0, 0, 0, false},
		{"second quiet check after it", 0, 0, 0, true},
		{"requests again", 3, 0, 0, false},
		{"holds after them", 0, 2, 0, true},
	}
	for _, s := range steps {
		started += s.plain + s.hold
		held += s.hold + s.heldLate
		if got := q.check(started, held); got != s.want {
			t.Fatalf("%s: return %v, want %v", s.name, got, s.want)
		}
	}
}
