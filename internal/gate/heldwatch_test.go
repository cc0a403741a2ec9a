package gate

import (
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/testkit"
)

// TestHeldRequestsOneGoroutineEach: requests held for a human on plain connections cost the gate
// one goroutine each (their connection's), none for the client-gone watch; a client that closes
// its connection still ends its request's hold at once (E_PENDING, "the client went away"), and
// the others stay held.
func TestHeldRequestsOneGoroutineEach(t *testing.T) {
	const n = 40 // under the policy's 50 pending tickets per container
	tg, h, _, _, _, stop := askGate(t, "60s")
	defer stop()
	// Settle the gate's own goroutines with one held request first.
	dial := func(i int) net.Conn {
		c, err := net.Dial("tcp", tg.addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "DELETE %s HTTP/1.1\r\nHost: origin.test:%d\r\n\r\n", tg.url(fmt.Sprintf("/held/%d", i)), tg.port)
		return c
	}
	first := dial(n)
	defer first.Close()
	testkit.WaitFor(t, 5*time.Second, "the first ticket", func() bool { return len(h.Pending()) == 1 })
	g0 := gateGoroutines()
	conns := make([]net.Conn, n)
	for i := range conns {
		conns[i] = dial(i) // raw sockets: the client side runs no goroutine
		defer conns[i].Close()
	}
	testkit.WaitFor(t, 10*time.Second, "a ticket per request", func() bool { return len(h.Pending()) == n+1 })
	// The hub runs in this process too, with its HTTP connections: count the gate's goroutines
	// alone.
	var extra int
	testkit.WaitFor(t, 5*time.Second, "the goroutines of the holds", func() bool {
		extra = gateGoroutines() - g0
		return extra <= n
	})
	if extra < n {
		t.Fatalf("%d more goroutines of the gate for %d held requests: fewer than the connections", extra, n)
	}
	// Half the clients go away: their holds end, and only theirs.
	for i := 0; i < n/2; i++ {
		conns[i].Close()
	}
	testkit.WaitFor(t, 5*time.Second, "the records of the clients gone", func() bool {
		gone := 0
		for _, r := range tg.records(t) {
			if r["method"] == "DELETE" && r["code"] == "E_PENDING" && strings.Contains(fmt.Sprint(r["reason"]), "the client went away") {
				gone++
			}
		}
		return gone == n/2
	})
	// The others are still held: no record yet.
	deletes := 0
	for _, r := range tg.records(t) {
		if r["method"] == "DELETE" {
			deletes++
		}
	}
	if deletes != n/2 {
		t.Fatalf("%d held requests ended, want the %d whose clients went away", deletes, n/2)
	}
}

// gateGoroutines counts the goroutines running code of this package or transport (a function of either on their
// stack).
func gateGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if (strings.Contains(g, "lockhttp/internal/gate.") || strings.Contains(g, "lockhttp/internal/transport.")) && !strings.Contains(g, "testing.tRunner") {
			count++
		}
	}
	return count
}
