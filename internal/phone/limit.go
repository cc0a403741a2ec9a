package phone

import (
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// Failed authentication (a bad pairing or session token) costs a remote address one token of a
// bucket that refills failRate a second up to failBurst; with the bucket empty every request from
// that address is refused (429) before any token is looked at, so guessing runs at failRate.
const (
	failRate   = 2.0
	failBurst  = 10.0
	maxBuckets = 10000 // addresses tracked at once; past that, the rest share one bucket
)

type bucket struct {
	tokens float64
	last   time.Time
}

// limiter counts failed authentication per remote address (an IPv6 address by its /64).
type limiter struct {
	now func() time.Time

	mu sync.Mutex
	m  map[string]*bucket // guarded by mu
}

func newLimiter(now func() time.Time) *limiter {
	return &limiter{now: now, m: map[string]*bucket{}}
}

// get returns key's bucket, refilled to now; the caller holds mu.
func (l *limiter) get(key string) *bucket {
	now := l.now()
	b, ok := l.m[key]
	if !ok {
		if len(l.m) >= maxBuckets {
			for k, b := range l.m {
				if b.tokens+now.Sub(b.last).Seconds()*failRate >= failBurst {
					delete(l.m, k)
				}
			}
		}
		if len(l.m) >= maxBuckets {
			key = "overflow"
			if b, ok = l.m[key]; ok {
				return l.refill(b, now)
			}
		}
		b = &bucket{tokens: failBurst, last: now}
		l.m[key] = b
		return b
	}
	return l.refill(b, now)
}

func (l *limiter) refill(b *bucket, now time.Time) *bucket {
	if d := now.Sub(b.last).Seconds(); d > 0 {
		b.tokens = min(failBurst, b.tokens+d*failRate)
	}
	b.last = now
	return b
}

// allow reports whether key may try to authenticate now.
func (l *limiter) allow(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.get(key).tokens >= 1
}

// fail takes one token from key's bucket.
func (l *limiter) fail(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.get(key)
	b.tokens = max(0, b.tokens-1)
}

// remoteKey is the limiter's key for the request's peer: its IP address, an IPv6 one cut to
// its /64. Behind a reverse proxy every phone shares the proxy's key (X-Forwarded-For is not
// trusted: anyone can send it).
func remoteKey(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	a = a.Unmap().WithZone("")
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}
