package phone

import (
	"fmt"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/testkit"
)

func TestLimiterEviction(t *testing.T) {
	clk := testkit.NewClock(time.Unix(0, 0))
	l := newLimiter(clk.Now)
	for i := range maxBuckets {
		l.fail(fmt.Sprintf("k%d", i))
	}
	// Every tracked bucket has lost a token: none can go, so new addresses share one bucket.
	for range failBurst {
		l.fail("new-a")
	}
	if l.allow("new-b") {
		t.Fatal("with the table full, a new address got a bucket of its own")
	}
	if _, ok := l.m[overflowKey]; !ok || len(l.m) != maxBuckets+1 {
		t.Fatalf("%d buckets, overflow present %v; want maxBuckets and the overflow bucket", len(l.m), ok)
	}
	// Once the tracked buckets have refilled they are dropped, and a new address gets its own.
	clk.Advance(time.Second)
	if !l.allow("new-c") {
		t.Fatal("after the buckets refilled, a new address is refused")
	}
	if _, ok := l.m["new-c"]; !ok {
		t.Fatal("after the buckets refilled, a new address still shares the overflow bucket")
	}
	if len(l.m) >= maxBuckets {
		t.Fatalf("%d buckets after the refill, want the full ones dropped", len(l.m))
	}
}

// TestLimiterConcurrentFailures: failures that passed allow together each cost a token.
func TestLimiterConcurrentFailures(t *testing.T) {
	clk := testkit.NewClock(time.Unix(0, 0))
	l := newLimiter(clk.Now)
	for range failBurst - 1 {
		l.fail("a")
	}
	if !l.allow("a") || !l.allow("a") {
		t.Fatal("one token left: refused")
	}
	l.fail("a")
	l.fail("a")
	clk.Advance(time.Second / failRate) // one token: back to none, not to one
	if l.allow("a") {
		t.Fatal("the second failure was free")
	}
	clk.Advance(time.Second / failRate)
	if !l.allow("a") {
		t.Fatal("a token later: refused")
	}
}
