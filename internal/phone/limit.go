package phone

import (
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Failed authentication (a bad pairing or session token) costs a remote address one token of a
// bucket that refills failRate a second up to failBurst; with the bucket empty every request from
// that address is refused (429) before any token is looked at, so guessing runs at failRate.
const (
	failRate   = 2.0
	failBurst  = 10
	maxBuckets = 10000 // addresses tracked at once; past that, the rest share one bucket
)

// overflowKey is the bucket shared by the addresses past maxBuckets.
const overflowKey = "overflow"

// limiter counts failed authentication per remote address (an IPv6 address by its /64), one
// rate.Limiter each, read at the injected clock's times.
type limiter struct {
	now func() time.Time

	mu sync.Mutex
	m  map[string]*rate.Limiter // guarded by mu
}

func newLimiter(now func() time.Time) *limiter {
	return &limiter{now: now, m: map[string]*rate.Limiter{}}
}

// get returns key's bucket, made full when key has none; the caller holds mu. With maxBuckets
// tracked, the full ones (which say nothing a new bucket would not) are dropped first; if none
// is, key shares the overflow bucket.
func (l *limiter) get(key string, now time.Time) *rate.Limiter {
	if b, ok := l.m[key]; ok {
		return b
	}
	if len(l.m) >= maxBuckets {
		for k, b := range l.m {
			if b.TokensAt(now) >= failBurst {
				delete(l.m, k)
			}
		}
	}
	if len(l.m) >= maxBuckets {
		key = overflowKey
		if b, ok := l.m[key]; ok {
			return b
		}
	}
	b := rate.NewLimiter(failRate, failBurst)
	l.m[key] = b
	return b
}

// allow reports whether key may try to authenticate now.
func (l *limiter) allow(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	return l.get(key, now).TokensAt(now) >= 1
}

// fail takes one token from key's bucket. Failures that passed allow together each cost a token:
// the bucket goes into debt rather than letting the extra ones go free.
func (l *limiter) fail(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.get(key, now).ReserveN(now, 1)
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
