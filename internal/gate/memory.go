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

func (g *Gate) returnMemoryWhenQuiet(ctx context.Context, every time.Duration, free func()) {
	t := time.NewTicker(every)
	defer t.Stop()
	last, quiet, returned := g.idSeq.Load(), 0, true
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n := g.idSeq.Load()
		if n != last {
			last, quiet, returned = n, 0, false
			continue
		}
		if quiet++; quiet >= 2 && !returned {
			free()
			returned = true
		}
	}
}
