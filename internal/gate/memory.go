package gate

import (
	"context"
	"runtime"
	"runtime/debug"
	"time"
)

// quietCheck is how often ReturnMemoryWhenQuiet looks at the request count.
const quietCheck = 10 * time.Second

// ReturnMemoryWhenQuiet gives the memory a burst left behind back to the system once the gate
// has started no request for two checks in a row (10 to 20 s), once per quiet spell, until ctx
// ends. Go's runtime returns it by itself only after collections, which an idle process makes
// every two minutes: a gate that served a thousand tunnels at once would hold the burst's memory
// that long while its tunnels idle.
func (g *Gate) ReturnMemoryWhenQuiet(ctx context.Context) {
	g.returnMemoryWhenQuiet(ctx, quietCheck, g.returnMemory)
}

// quietKeep is how many idle connections to each origin a quiet gate keeps.
const quietKeep = 4

// returnMemory closes the upstream connections a quiet gate does not need, past quietKeep per
// origin, then collects twice: each collection halves the goroutine stacks a burst grew (an
// idle tunnel's is a few KiB in use), the second returns the freed pages.
func (g *Gate) returnMemory() {
	g.upstream.TrimIdle(quietKeep)
	g.transport.CloseIdleConnections()
	runtime.GC()
	debug.FreeOSMemory()
}

// Requests that went on to wait do not break a quiet spell: held for a human, or a CONNECT whose
// tunnel now waits for its requests. A gate whose every request since the last check waits
// (1,000 agents retrying their held requests together, each retry in a tunnel of its own since
// E_PENDING closes its connection) is as idle as one that started none, and the garbage their
// retries left is returned at that check, each time such a burst has come.
func (g *Gate) returnMemoryWhenQuiet(ctx context.Context, every time.Duration, free func()) {
	t := time.NewTicker(every)
	defer t.Stop()
	q := newQuietSpell(g.idSeq.Load(), g.waits.Load())
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if q.check(g.idSeq.Load(), g.waits.Load()) {
			free()
		}
	}
}

// quietSpell follows the gate's counts from one check to the next: the requests started and
// those of them that went on to wait (Gate.waits).
type quietSpell struct {
	busy     int64  // the requests started that did not go on to wait, at the last check
	held     uint64 // the requests that went on to wait, at the last check
	quiet    int    // checks since the last request that was not held
	returned bool   // the memory was returned since the last request
}

func newQuietSpell(started, held uint64) *quietSpell {
	return &quietSpell{busy: int64(started - held), held: held, returned: true}
}

// check takes the counts at a check: true when the memory is to be returned now. A request that
// did not go on to wait starts the wait again: the memory is returned at the second check in a
// row with none, once. Waits that began since the last check, with no other request, return it
// at once: the requests that started are all waiting, and their garbage is there to return. (A
// request counted at the last check that waits since makes the requests at work fewer.)
func (q *quietSpell) check(started, held uint64) bool {
	busy, began := int64(started-held), held != q.held
	grew := busy > q.busy
	q.busy, q.held = busy, held
	switch {
	case grew:
		q.quiet, q.returned = 0, false
		return false
	case began:
		q.quiet, q.returned = 2, true
		return true
	}
	if q.quiet++; q.quiet >= 2 && !q.returned {
		q.returned = true
		return true
	}
	return false
}
