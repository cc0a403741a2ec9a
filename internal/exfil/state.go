package exfil

import (
	"strings"

	"golang.org/x/net/publicsuffix"
)

// lru is a map with a bound: adding a key past max forgets the least recently used one and
// hands its entry back for reuse. It is not safe for concurrent use.
type lru[V any] struct {
	max  int
	m    map[string]*entry[V]
	root entry[V] // root.next is the most recently used, root.prev the least
}

type entry[V any] struct {
	key        string
	prev, next *entry[V]
	val        V
}

func newLRU[V any](max int) *lru[V] {
	l := &lru[V]{max: max, m: make(map[string]*entry[V], min(max, 1024))}
	l.root.next, l.root.prev = &l.root, &l.root
	return l
}

func (l *lru[V]) len() int { return len(l.m) }

// get returns the value of key, marked as just used, or nil.
func (l *lru[V]) get(key string) *V {
	e := l.m[key]
	if e == nil {
		return nil
	}
	if l.root.next != e {
		l.unlink(e)
		l.pushFront(e)
	}
	return &e.val
}

// add inserts key, which must be absent, as the most recently used. The value it returns is
// either zero or the value of the key it forgot: the caller resets it.
func (l *lru[V]) add(key string) *V {
	var e *entry[V]
	if len(l.m) >= l.max {
		e = l.root.prev
		l.unlink(e)
		delete(l.m, e.key)
	} else {
		e = new(entry[V])
	}
	e.key = key
	l.m[key] = e
	l.pushFront(e)
	return &e.val
}

func (l *lru[V]) unlink(e *entry[V]) {
	e.prev.next, e.next.prev = e.next, e.prev
}

func (l *lru[V]) pushFront(e *entry[V]) {
	e.prev, e.next = &l.root, l.root.next
	l.root.next.prev = e
	l.root.next = e
}

// tallySlots is the number of slots a host's byte tally divides the window into: the tally
// covers between 9/10 of the window and all of it.
const tallySlots = 10

// maxTally bounds one slot's count, so that the sum of all slots cannot overflow.
const maxTally = 1 << 58

// host is what the scorer remembers of one host.
type host struct {
	domain string // its registrable domain (eTLD+1), "" when it has none
	tally  [tallySlots]slot
}

// slot holds the bytes sent to and received from a host in one slot of the window.
type slot struct {
	epoch      int64 // the slot's start, in slot lengths since the Unix epoch
	sent, recv int64
}

// count adds bytes sent and received at time now (in slot lengths) and returns the bytes
// sent less those received in the window.
func (h *host) count(epoch, sent, recv int64) (net int64) {
	t := &h.tally[((epoch%tallySlots)+tallySlots)%tallySlots]
	if t.epoch != epoch {
		*t = slot{epoch: epoch}
	}
	t.sent = min(t.sent+max(sent, 0), maxTally)
	t.recv = min(t.recv+max(recv, 0), maxTally)
	for _, t := range h.tally {
		if t.epoch <= epoch && t.epoch > epoch-tallySlots {
			net += t.sent - t.recv
		}
	}
	return net
}

// maxSubdomains bounds the subdomains remembered per registrable domain; it is above
// subdomainLimit, so that a domain at the bound keeps scoring.
const maxSubdomains = 32

// domain is what the scorer remembers of one registrable domain: the subdomains seen in the
// window, by a hash of their name (the names themselves are not kept).
type domain struct {
	subs []sub // at most maxSubdomains
}

type sub struct {
	hash uint64
	last int64 // Unix nanoseconds when last seen
}

// see records subdomain hash at now, forgetting those not seen in the window, and returns
// whether it is new and how many the window holds with it.
func (d *domain) see(hash uint64, now, window int64) (isNew bool, n int) {
	kept := d.subs[:0]
	for _, s := range d.subs {
		if now-s.last < window {
			kept = append(kept, s)
		}
	}
	d.subs = kept
	for i := range d.subs {
		if d.subs[i].hash == hash {
			d.subs[i].last = now
			return false, len(d.subs)
		}
	}
	if len(d.subs) < maxSubdomains {
		d.subs = append(d.subs, sub{hash: hash, last: now})
		return true, len(d.subs)
	}
	oldest := 0
	for i := range d.subs {
		if d.subs[i].last < d.subs[oldest].last {
			oldest = i
		}
	}
	d.subs[oldest] = sub{hash: hash, last: now}
	return true, len(d.subs)
}

// registrable returns the registrable domain (eTLD+1) of a host, or "" for a host that is a
// public suffix or malformed.
func registrable(host string) string {
	d, err := publicsuffix.EffectiveTLDPlusOne(host)
	if err != nil || !strings.HasSuffix(host, d) {
		return ""
	}
	return d
}
