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
