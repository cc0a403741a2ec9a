package signer

import (
	"testing"
	"time"
)

// TestBucketClockBack: a clock that goes back and comes forward again earns the interval once.
func TestBucketClockBack(t *testing.T) {
	b := newBucket(10, 3)
	for range 3 {
		if ok, _ := b.take(t0.Add(time.Hour)); !ok {
			t.Fatal("the burst is refused")
		}
	}
	if ok, _ := b.take(t0.Add(time.Hour - time.Second)); ok {
		t.Fatal("an empty bucket gave a token when the clock went back")
	}
	ok, wait := b.take(t0.Add(time.Hour))
	if ok || (wait-100*time.Millisecond).Abs() > time.Microsecond {
		t.Fatalf("back at the hour: %v %v, want false 100ms (the second back earned nothing)", ok, wait)
	}
	if ok, _ := b.take(t0.Add(time.Hour + 100*time.Millisecond)); !ok {
		t.Fatal("a token later: refused")
	}
}
