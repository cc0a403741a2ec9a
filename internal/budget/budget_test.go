package budget

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// t0 is half a second into a second and into no particular minute: the windows' slices start on
// whole seconds and minutes.
var t0 = time.Date(2026, 3, 1, 10, 20, 30, 500_000_000, time.UTC)

func budgets(t *testing.T, src string) *policy.Policy {
	t.Helper()
	p, err := policy.Load("b.toml", []byte("version = 1\n[sources]\nx = [\"10.0.0.1\"]\ny = [\"10.0.0.2\"]\nz = [\"10.0.0.3\"]\n"+src))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// take is Take with the budgets p applies to container and host.
func take(c *Counter, p *policy.Policy, container, host string, bytes int64) *Over {
	return c.Take(p.BudgetsFor(container, host), container, host, bytes)
}

func mustFit(t *testing.T, o *Over, what string) {
	t.Helper()
	if o != nil {
		t.Fatalf("%s: refused %+v", what, *o)
	}
}

func mustOver(t *testing.T, o *Over, what, limit string, retry time.Duration) {
	t.Helper()
	if o == nil {
		t.Fatalf("%s: fits, want over %s", what, limit)
	}
	if o.Limit != limit || o.RetryAfter != retry {
		t.Fatalf("%s: over %q retry %s, want %q retry %s (%+v)", what, o.Limit, o.RetryAfter, limit, retry, *o)
	}
}

// TestRequestsWindow: requests count for a whole minute from the start of their second, and a
// little longer, never less; a refused request is not counted; Retry-After is when the oldest
// request leaves.
func TestRequestsWindow(t *testing.T) {
	p := budgets(t, "[[budget]]\nname = \"rpm\"\nrequests_per_minute = 3\n")
	clk := testkit.NewClock(t0)
	c := New(Config{Now: clk.Now})
	mustFit(t, take(c, p, "x", "a.test", 0), "first")
	clk.Advance(30 * time.Second)
	mustFit(t, take(c, p, "x", "a.test", 0), "second")
	mustFit(t, take(c, p, "x", "b.test", 0), "third")
	clk.Advance(10 * time.Second) // t0+40s
	// The first request's second began at t0-0.5s; it counts until 61 s after that.
	mustOver(t, take(c, p, "x", "a.test", 0), "fourth", LimitRequests, 20500*time.Millisecond)
	clk.Advance(20499 * time.Millisecond)
	mustOver(t, take(c, p, "x", "a.test", 0), "a millisecond early", LimitRequests, time.Millisecond)
	clk.Advance(time.Millisecond)
	mustFit(t, take(c, p, "x", "a.test", 0), "once the first has left")
	// The refusals were not counted: the window holds the two of t0+30s and this one.
	mustOver(t, take(c, p, "x", "a.test", 0), "fifth", LimitRequests, 30*time.Second)
	// Another container has a count of its own.
	for i := 0; i < 3; i++ {
		mustFit(t, take(c, p, "y", "a.test", 0), "container y")
	}
	us := c.Usage(p)
	if len(us) != 3 || us[0].Container != "x" || us[0].Requests != 3 || us[0].Refused != 3 || us[0].Percent() != 100 || us[1].Requests != 3 || us[2].Requests != 0 {
		t.Fatalf("usage %+v", us)
	}
}

// TestBytesWindow: bytes count for an hour from the start of their minute; a request over the
// whole budget by itself never fits and says so with no Retry-After.
func TestBytesWindow(t *testing.T) {
	p := budgets(t, "[[budget]]\nname = \"up\"\nbytes_up_per_hour = 1000\n")
	clk := testkit.NewClock(t0)
	c := New(Config{Now: clk.Now})
	mustFit(t, take(c, p, "x", "a.test", 600), "600 bytes")
	clk.Advance(10 * time.Minute)
	o := take(c, p, "x", "a.test", 500)
	// t0's minute began 30.5 s before t0; it leaves 61 minutes after that.
	mustOver(t, o, "500 more", LimitBytes, 51*time.Minute-30500*time.Millisecond)
	if o.Used != 600 || o.Max != 1000 || o.Amount != 500 || o.Budget != "up" {
		t.Fatalf("over %+v", *o)
	}
	mustFit(t, take(c, p, "x", "a.test", 400), "400 more: exactly the limit")
	mustOver(t, take(c, p, "x", "a.test", 1), "one byte more", LimitBytes, 51*time.Minute-30500*time.Millisecond)
	mustOver(t, take(c, p, "y", "a.test", 1001), "more than the whole budget", LimitBytes, 0)
	mustFit(t, take(c, p, "y", "a.test", 1000), "the whole budget at once")
	c.Add(p.BudgetsFor("x", "a.test"), "x", 50)
	if us := c.Usage(p); us[0].BytesUp != 1050 {
		t.Fatalf("bytes added after the fact: usage %+v", us[0])
	}
}

// TestNewHosts: a host is new when the container sent it nothing counted in the last hour; a
// request to a known host passes the limit.
func TestNewHosts(t *testing.T) {
	p := budgets(t, "[[budget]]\nname = \"hosts\"\nnew_hosts_per_hour = 2\n")
	clk := testkit.NewClock(t0)
	c := New(Config{Now: clk.Now})
	mustFit(t, take(c, p, "x", "a.test", 0), "a")
	clk.Advance(time.Minute)
	mustFit(t, take(c, p, "x", "b.test", 0), "b")
	clk.Advance(time.Minute)
	mustFit(t, take(c, p, "x", "a.test", 0), "a again: not new")
	// b (counted at t0+1m, in the minute that began at t0+29.5s) leaves first, 61 minutes later.
	mustOver(t, take(c, p, "x", "c.test", 0), "c", LimitHosts, 61*time.Minute+29500*time.Millisecond-2*time.Minute)
	clk.Advance(61*time.Minute + 29500*time.Millisecond - 2*time.Minute)
	mustFit(t, take(c, p, "x", "c.test", 0), "c once b has left")
	mustOver(t, take(c, p, "x", "b.test", 0), "b is new again", LimitHosts, time.Minute)
	mustFit(t, take(c, p, "y", "c.test", 0), "another container")
	if us := c.Usage(p); us[0].Hosts != 2 || us[0].Refused != 2 || us[1].Hosts != 1 {
		t.Fatalf("usage %+v", us)
	}
}

// TestEveryBudgetOrNone: a request counts against every budget it matches or, refused by one,
// against none.
func TestEveryBudgetOrNone(t *testing.T) {
	p := budgets(t, "[[budget]]\nname = \"wide\"\nrequests_per_minute = 10\n\n[[budget]]\nname = \"narrow\"\nhosts = [\"*.example.com\"]\nrequests_per_minute = 1\n")
	clk := testkit.NewClock(t0)
	c := New(Config{Now: clk.Now})
	mustFit(t, take(c, p, "x", "a.example.com", 0), "first")
	o := take(c, p, "x", "b.example.com", 0)
	if o == nil || o.Budget != "narrow" {
		t.Fatalf("second: %+v, want refused by narrow", o)
	}
	mustFit(t, take(c, p, "x", "other.test", 0), "another host: only wide counts it")
	us := c.Usage(p)
	if us[0].Requests != 2 || us[3].Requests != 1 {
		t.Fatalf("the refused request was counted: usage %+v", us)
	}
}

// TestMemoryBound: with its memory full the counter forgets idle counts and hosts; when there
// are none it refuses (no Retry-After) rather than let a request out uncounted.
func TestMemoryBound(t *testing.T) {
	t.Run("counts", func(t *testing.T) {
		p := budgets(t, "[[budget]]\nname = \"rpm\"\nrequests_per_minute = 100\n")
		clk := testkit.NewClock(t0)
		c := New(Config{Now: clk.Now, MaxCounts: 2})
		mustFit(t, take(c, p, "x", "a.test", 0), "x")
		mustFit(t, take(c, p, "y", "a.test", 0), "y")
		o := take(c, p, "z", "a.test", 0)
		if o == nil || o.Limit != "" || o.Budget != "rpm" || o.RetryAfter != 0 {
			t.Fatalf("a third count: %+v, want refused for memory", o)
		}
		mustFit(t, take(c, p, "x", "a.test", 0), "a known count")
		clk.Advance(61 * time.Second) // x and y idle now: nothing left in their windows
		mustFit(t, take(c, p, "z", "a.test", 0), "z once the others are idle")
		if len(c.counts) > 2 {
			t.Fatalf("%d counts kept, at most 2", len(c.counts))
		}
	})
	t.Run("hosts", func(t *testing.T) {
		p := budgets(t, "[[budget]]\nname = \"hosts\"\nnew_hosts_per_hour = 100\n")
		clk := testkit.NewClock(t0)
		c := New(Config{Now: clk.Now, MaxHosts: 3})
		for _, h := range []string{"a.test", "b.test"} {
			mustFit(t, take(c, p, "x", h, 0), h)
		}
		mustFit(t, take(c, p, "y", "c.test", 0), "c")
		o := take(c, p, "y", "d.test", 0)
		if o == nil || o.Limit != "" || o.RetryAfter != 0 {
			t.Fatalf("a fourth host: %+v, want refused for memory", o)
		}
		mustFit(t, take(c, p, "x", "a.test", 0), "a known host")
		clk.Advance(62 * time.Minute) // every host has left its hour
		mustFit(t, take(c, p, "y", "d.test", 0), "d once the others have left")
		if c.hosts > 3 {
			t.Fatalf("%d hosts kept, at most 3", c.hosts)
		}
	})
}

// TestNoBudget: with no budget nothing is counted or kept.
func TestNoBudget(t *testing.T) {
	c := New(Config{Now: testkit.NewClock(t0).Now})
	if o := c.Take(nil, "x", "a.test", 1<<30); o != nil {
		t.Fatalf("refused with no budget: %+v", *o)
	}
	if len(c.counts) != 0 {
		t.Fatal("a count was kept")
	}
}

// TestConcurrentTakes: requests decided at once never pass more than the limit between them.
func TestConcurrentTakes(t *testing.T) {
	p := budgets(t, "[[budget]]\nname = \"rpm\"\nrequests_per_minute = 100\n")
	c := New(Config{Now: testkit.NewClock(t0).Now})
	var wg sync.WaitGroup
	var passed atomic.Int64
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 50; j++ {
				if take(c, p, "x", "a.test", 0) == nil {
					passed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := passed.Load(); n != 100 {
		t.Fatalf("%d of 400 passed, want exactly 100", n)
	}
}

// TestTakeBytes: a WebSocket message's bytes count against bytes_up_per_hour when they fit, and
// not at all when they do not; they are not requests.
func TestTakeBytes(t *testing.T) {
	p := budgets(t, "[[budget]]\nname = \"up\"\nbytes_up_per_hour = 1000\nrequests_per_minute = 1\n")
	c := New(Config{Now: testkit.NewClock(t0).Now})
	bs := p.BudgetsFor("x", "a.test")
	mustFit(t, c.TakeBytes(bs, "x", 600), "600 bytes")
	mustFit(t, c.TakeBytes(bs, "x", 300), "300 more")
	if o := c.TakeBytes(bs, "x", 200); o == nil || o.Limit != LimitBytes || o.Used != 900 {
		t.Fatalf("200 more: %+v", o)
	}
	mustFit(t, c.TakeBytes(bs, "x", 100), "100 more: exactly the limit")
	mustFit(t, take(c, p, "x", "a.test", 0), "a request: messages are not requests")
}
