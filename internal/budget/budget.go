// Package budget counts what each container sends against the policy's [[budget]] sections, in
// sliding windows, with a bound on what it remembers.
package budget

import (
	"slices"
	"sync"
	"time"

	"github.com/lockhttp/lockhttp/internal/policy"
)

// Defaults for the zero values of Config.
const (
	DefaultMaxCounts = 4096
	DefaultMaxHosts  = 65536
)

// The limits a request can be over, as the policy names them.
const (
	LimitRequests = "requests_per_minute"
	LimitBytes    = "bytes_up_per_hour"
	LimitHosts    = "new_hosts_per_hour"
)

// A window is counted in 60 slices of its length, kept in a ring of 61: what was counted in a
// slice counts until a whole window has passed after the slice's end, so for one window and at
// most one slice longer, never less.
const ring = 60 + 1

// Config is what a Counter needs.
type Config struct {
	// Now is the clock. Nil: time.Now.
	Now func() time.Time
	// MaxCounts bounds the container × budget counts kept. Zero: DefaultMaxCounts.
	MaxCounts int
	// MaxHosts bounds the hosts remembered for new_hosts_per_hour, all counts together. Zero:
	// DefaultMaxHosts.
	MaxHosts int
}

// Counter holds the counts of every container against every budget. It is safe for concurrent
// use; the zero Counter is not ready, use New.
type Counter struct {
	now       func() time.Time
	maxCounts int
	maxHosts  int

	mu     sync.Mutex
	counts map[key]*count // guarded by mu
	hosts  int            // guarded by mu: the hosts remembered in all counts
}

type key struct{ budget, container string }

// count is one container's use of one budget.
type count struct {
	requests window // slices of a second
	bytes    window // slices of a minute
	refused  window // slices of a minute
	// hosts maps each host sent to in the last hour to the minute slice it was last counted in.
	// It is kept only under a new_hosts_per_hour limit, and holds at most that many live hosts.
	hosts map[string]int64
}

const (
	requestSlice = time.Minute / (ring - 1)
	hourSlice    = time.Hour / (ring - 1)
)

// New returns an empty Counter.
func New(cfg Config) *Counter {
	c := &Counter{now: cfg.Now, maxCounts: cfg.MaxCounts, maxHosts: cfg.MaxHosts, counts: make(map[key]*count)}
	if c.now == nil {
		c.now = time.Now
	}
	if c.maxCounts <= 0 {
		c.maxCounts = DefaultMaxCounts
	}
	if c.maxHosts <= 0 {
		c.maxHosts = DefaultMaxHosts
	}
	return c
}

// Over says why a request does not fit a budget.
type Over struct {
	// Budget is the budget's name; Limit the limit it would pass (LimitRequests, LimitBytes or
	// LimitHosts), or "" when the Counter's memory is full and it cannot count the request.
	Budget string
	Limit  string
	// Used is what the window holds, Max the limit and Amount what the request would add.
	Used, Max, Amount int64
	// RetryAfter is how long until the request fits; zero: waiting does not make it fit (it is
	// over the limit by itself, or the memory is full).
	RetryAfter time.Duration
}

// Take counts a request of container to host that sends bytes against every budget in bs, if it
// fits them all; otherwise it counts nothing but the refusal and says why, naming the first
// budget (in the order of bs) it does not fit.
func (c *Counter) Take(bs []*policy.Budget, container, host string, bytes int64) *Over {
	if len(bs) == 0 {
		return nil
	}
	now := c.now()
	t, h := slot(now, requestSlice), slot(now, hourSlice)
	c.mu.Lock()
	defer c.mu.Unlock()
	counts := make([]*count, len(bs))
	newHosts := 0
	for i, b := range bs {
		ct := c.get(key{b.Name, container}, t, h)
		if ct == nil {
			return &Over{Budget: b.Name}
		}
		counts[i] = ct
		isNew := b.NewHostsPerHour > 0 && !ct.live(host, h)
		if isNew {
			c.hosts -= ct.expire(h)
		}
		if over := ct.fits(b, now, t, h, isNew, bytes); over != nil {
			ct.refused.add(h, 1)
			return over
		}
		if isNew {
			newHosts++
		}
	}
	if c.hosts+newHosts > c.maxHosts {
		c.forgetHosts(h)
		if c.hosts+newHosts > c.maxHosts {
			counts[0].refused.add(h, 1)
			return &Over{Budget: bs[0].Name}
		}
	}
	for i, b := range bs {
		ct := counts[i]
		ct.requests.add(t, 1)
		ct.bytes.add(h, bytes)
		if b.NewHostsPerHour > 0 {
			if ct.hosts == nil {
				ct.hosts = make(map[string]int64)
			}
			if _, ok := ct.hosts[host]; !ok {
				c.hosts++
			}
			ct.hosts[host] = h
		}
	}
	return nil
}

// Add counts bytes sent by container after the decision, against every budget in bs: a tunnel
// decided at the domain, whose bytes are known when it closes. It never refuses; bytes for a
// count the memory cannot hold are not counted.
func (c *Counter) Add(bs []*policy.Budget, container string, bytes int64) {
	if bytes <= 0 || len(bs) == 0 {
		return
	}
	now := c.now()
	t, h := slot(now, requestSlice), slot(now, hourSlice)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range bs {
		if ct := c.get(key{b.Name, container}, t, h); ct != nil {
			ct.bytes.add(h, bytes)
		}
	}
}

// TakeBytes counts bytes that container sends on a connection already decided (a WebSocket
// message) against the bytes_up_per_hour of every budget in bs, if they fit them all;
// otherwise it counts nothing but the refusal and says why. Requests and hosts are not counted:
// the upgrade was.
func (c *Counter) TakeBytes(bs []*policy.Budget, container string, bytes int64) *Over {
	if len(bs) == 0 {
		return nil
	}
	now := c.now()
	t, h := slot(now, requestSlice), slot(now, hourSlice)
	c.mu.Lock()
	defer c.mu.Unlock()
	counts := make([]*count, len(bs))
	for i, b := range bs {
		ct := c.get(key{b.Name, container}, t, h)
		if ct == nil {
			return &Over{Budget: b.Name}
		}
		counts[i] = ct
		if b.BytesUpPerHour > 0 {
			if free, ok := ct.bytes.fits(h, bytes, b.BytesUpPerHour); !ok {
				ct.refused.add(h, 1)
				o := &Over{Budget: b.Name, Limit: LimitBytes, Used: ct.bytes.sum(h), Max: b.BytesUpPerHour, Amount: bytes}
				if free != 0 {
					o.RetryAfter = until(now, free, hourSlice)
				}
				return o
			}
		}
	}
	for _, ct := range counts {
		ct.bytes.add(h, bytes)
	}
	return nil
}

// get returns the count of k, making it when there is room (forgetting idle counts if there is
// not), or nil when the memory is full.
func (c *Counter) get(k key, t, h int64) *count {
	if ct, ok := c.counts[k]; ok {
		return ct
	}
	if len(c.counts) >= c.maxCounts {
		for old, ct := range c.counts {
			if ct.idle(t, h) {
				c.hosts -= len(ct.hosts)
				delete(c.counts, old)
			}
		}
		if len(c.counts) >= c.maxCounts {
			return nil
		}
	}
	ct := &count{}
	c.counts[k] = ct
	return ct
}

// forgetHosts drops the hosts that have left their hour in every count.
func (c *Counter) forgetHosts(h int64) {
	for _, ct := range c.counts {
		c.hosts -= ct.expire(h)
	}
}

// fits checks a request against one budget's limits; t and h are the current second and minute
// slices, and isNew reports a host not live in the count (whose hosts have been expired).
func (ct *count) fits(b *policy.Budget, now time.Time, t, h int64, isNew bool, bytes int64) *Over {
	over := func(limit string, used, max, amount int64, free int64, width time.Duration) *Over {
		o := &Over{Budget: b.Name, Limit: limit, Used: used, Max: max, Amount: amount}
		if free != 0 {
			o.RetryAfter = until(now, free, width)
		}
		return o
	}
	if b.RequestsPerMinute > 0 {
		if free, ok := ct.requests.fits(t, 1, b.RequestsPerMinute); !ok {
			return over(LimitRequests, ct.requests.sum(t), b.RequestsPerMinute, 1, free, requestSlice)
		}
	}
	if b.BytesUpPerHour > 0 {
		if free, ok := ct.bytes.fits(h, bytes, b.BytesUpPerHour); !ok {
			return over(LimitBytes, ct.bytes.sum(h), b.BytesUpPerHour, bytes, free, hourSlice)
		}
	}
	if n := int64(len(ct.hosts)); isNew && n+1 > b.NewHostsPerHour {
		// It fits once enough hosts have left the hour to leave room for one more: the
		// (n-limit)-th oldest, counting from 0.
		lasts := make([]int64, 0, len(ct.hosts))
		for _, s := range ct.hosts {
			lasts = append(lasts, s)
		}
		slices.Sort(lasts)
		return over(LimitHosts, n, b.NewHostsPerHour, 1, lasts[n-b.NewHostsPerHour]+ring, hourSlice)
	}
	return nil
}

// live reports that host was counted in the last hour (it is then not new).
func (ct *count) live(host string, h int64) bool {
	s, ok := ct.hosts[host]
	return ok && s > h-ring
}

// expire drops the hosts that have left the hour and returns how many.
func (ct *count) expire(h int64) int {
	n := 0
	for host, s := range ct.hosts {
		if s <= h-ring {
			delete(ct.hosts, host)
			n++
		}
	}
	return n
}

// idle reports that nothing is left in the count's windows: forgetting it changes nothing.
func (ct *count) idle(t, h int64) bool {
	if ct.requests.sum(t) != 0 || ct.bytes.sum(h) != 0 || ct.refused.sum(h) != 0 {
		return false
	}
	for _, s := range ct.hosts {
		if s > h-ring {
			return false
		}
	}
	return true
}

// slot is the number of the slice of width d that now falls in.
func slot(now time.Time, d time.Duration) int64 { return now.UnixNano() / int64(d) }

// until is the time from now to the start of slice s of width d, at least a nanosecond (the
// clock may stand still).
func until(now time.Time, s int64, d time.Duration) time.Duration {
	w := time.Duration(s*int64(d) - now.UnixNano())
	return max(w, 1)
}

// window is a sliding count over the last ring slices.
type window struct {
	slot [ring]int64 // the slice number each entry holds
	n    [ring]int64
}

// sum is what the window holds at slice cur.
func (w *window) sum(cur int64) int64 {
	var total int64
	for i := range w.n {
		if w.slot[i] > cur-ring && w.slot[i] <= cur {
			total += w.n[i]
		}
	}
	return total
}

// add counts v in slice cur.
func (w *window) add(cur, v int64) {
	i := cur % ring
	if w.slot[i] != cur {
		w.slot[i], w.n[i] = cur, 0
	}
	w.n[i] += v
}

// fits reports whether v more fits under limit at slice cur; when it does not, free is the first
// slice at which it will (ok false and free 0: never, v alone is over the limit).
func (w *window) fits(cur, v, limit int64) (free int64, ok bool) {
	total := w.sum(cur)
	if total+v <= limit {
		return 0, true
	}
	if v > limit {
		return 0, false
	}
	for s := cur - ring + 1; s <= cur; s++ {
		if i := s % ring; w.slot[i] == s {
			total -= w.n[i]
		}
		if total+v <= limit {
			return s + ring, false
		}
	}
	return 0, false // not reached: with every slice gone the total is v
}

// Use is what one container has used of one budget, for the gate's status and the doctor.
type Use struct {
	Budget    string `json:"budget"`
	Container string `json:"container"`
	// Requests were counted in the last minute, BytesUp in the last hour; Hosts are the hosts sent
	// to in the last hour (remembered under a new_hosts_per_hour limit only).
	Requests int64 `json:"requests"`
	BytesUp  int64 `json:"bytes_up"`
	Hosts    int64 `json:"hosts"`
	// The budget's limits; zero: none.
	RequestsPerMinute int64 `json:"requests_per_minute,omitempty"`
	BytesUpPerHour    int64 `json:"bytes_up_per_hour,omitempty"`
	NewHostsPerHour   int64 `json:"new_hosts_per_hour,omitempty"`
	// Refused is how many requests the budget refused in the last hour.
	Refused int64 `json:"refused"`
}

// Percent is the largest share of a limit the container has used, in percent (100: the next
// request that needs more is refused).
func (u Use) Percent() int {
	p := 0
	for _, l := range [][2]int64{{u.Requests, u.RequestsPerMinute}, {u.BytesUp, u.BytesUpPerHour}, {u.Hosts, u.NewHostsPerHour}} {
		if l[1] > 0 {
			p = max(p, int(l[0]*100/l[1]))
		}
	}
	return p
}

// Usage reports, for each budget of p in file order and each container it counts, what the
// container has used of it.
func (c *Counter) Usage(p *policy.Policy) []Use {
	if p == nil {
		return nil
	}
	now := c.now()
	t, h := slot(now, requestSlice), slot(now, hourSlice)
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Use
	bs := p.Budgets()
	for i := range bs {
		b := &bs[i]
		for _, name := range p.BudgetContainers(b) {
			u := Use{Budget: b.Name, Container: name, RequestsPerMinute: b.RequestsPerMinute,
				BytesUpPerHour: b.BytesUpPerHour, NewHostsPerHour: b.NewHostsPerHour}
			if ct, ok := c.counts[key{b.Name, name}]; ok {
				u.Requests, u.BytesUp, u.Refused = ct.requests.sum(t), ct.bytes.sum(h), ct.refused.sum(h)
				for _, s := range ct.hosts {
					if s > h-ring {
						u.Hosts++
					}
				}
			}
			out = append(out, u)
		}
	}
	return out
}
