package signer

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// bucket is a token bucket (a rate.Limiter read at explicit times): it holds up to burst tokens
// and gains rate tokens a second. A clock that goes back gains nothing.
type bucket struct {
	lim *rate.Limiter

	mu   sync.Mutex
	last time.Time // guarded by mu: the latest time take was given; an earlier one is read as it
}

func newBucket(r float64, burst int) *bucket {
	return &bucket{lim: rate.NewLimiter(rate.Limit(r), burst)}
}

// bucketOr is newBucket of r and burst, each its default where zero.
func bucketOr(r float64, burst int, defRate float64, defBurst int) *bucket {
	if r == 0 {
		r = defRate
	}
	if burst == 0 {
		burst = defBurst
	}
	return newBucket(r, burst)
}

// take takes one token at now. When there is none it returns false and how long until there is.
func (b *bucket) take(now time.Time) (bool, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	// rate.Limiter gains nothing for a time before its last, but then moves its last back, so
	// that the same interval would be counted again when the clock comes forward.
	if now.Before(b.last) {
		now = b.last
	}
	b.last = now
	r := b.lim.ReserveN(now, 1)
	if !r.OK() {
		return false, rate.InfDuration
	}
	if wait := r.DelayFrom(now); wait > 0 {
		r.CancelAt(now)
		return false, wait
	}
	return true, 0
}
