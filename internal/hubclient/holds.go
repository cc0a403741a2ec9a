package hubclient

import (
	"context"
	"sort"
	"time"

	"github.com/lockhttp/lockhttp/internal/hubapi"
)

// holdingsEvery is how often the gate tells the hub what it holds while the event stream is up.
const holdingsEvery = 5 * time.Second

// holds is what this gate holds on the hub's tickets. A request is held on a ticket from the Ask
// answered pending until its Claim or its Leave is answered (whatever the answer), or until its
// Wait returns the ticket expired (nothing is claimed then).
type holds struct {
	held   map[string]int // ticket id → requests held on it
	asking map[string]int // fingerprint → asks on their way
	busy   map[string]int // ticket id → claims and leaves on their way
	cut    map[string]int // ticket id → requests a kill of the gate cut, not yet reported
	gen    uint64         // counts the changes
}

func newHolds() holds {
	return holds{held: map[string]int{}, asking: map[string]int{}, busy: map[string]int{}, cut: map[string]int{}}
}

// ReportCut queues, for the hub, the requests held on each ticket that a kill of the gate cut
// (gate.RecordCut found them): they go with the reports of what the gate holds until one is
// taken.
func (c *Client) ReportCut(cut map[string]int) {
	c.hmu.Lock()
	defer c.hmu.Unlock()
	for id, n := range cut {
		add(c.holds.cut, id, n)
	}
	c.holds.gen++
}

// cutReported takes the counts a report carried off the queue.
func (c *Client) cutReported(sent map[string]int) {
	c.hmu.Lock()
	defer c.hmu.Unlock()
	for id, n := range sent {
		add(c.holds.cut, id, -n)
	}
}

func add(m map[string]int, k string, d int) {
	if m[k] += d; m[k] <= 0 {
		delete(m, k)
	}
}

// askStart marks an ask for fingerprint on its way; askDone ends it, with the ticket it is held
// on when the hub answered pending ("" otherwise).
func (c *Client) askStart(fingerprint string) {
	c.hmu.Lock()
	defer c.hmu.Unlock()
	add(c.holds.asking, fingerprint, 1)
	c.holds.gen++
}

func (c *Client) askDone(fingerprint, heldOn string) {
	c.hmu.Lock()
	defer c.hmu.Unlock()
	add(c.holds.asking, fingerprint, -1)
	if heldOn != "" {
		add(c.holds.held, heldOn, 1)
	}
	c.holds.gen++
}

// releaseStart marks a claim or a leave of ticket id on its way; releaseDone ends it and the
// hold with it.
func (c *Client) releaseStart(id string) {
	c.hmu.Lock()
	defer c.hmu.Unlock()
	add(c.holds.busy, id, 1)
	c.holds.gen++
}

func (c *Client) releaseDone(id string) {
	c.hmu.Lock()
	defer c.hmu.Unlock()
	add(c.holds.busy, id, -1)
	add(c.holds.held, id, -1)
	c.holds.gen++
}

// release ends a hold without a call (the ticket expired while its request waited).
func (c *Client) release(id string) {
	c.hmu.Lock()
	defer c.hmu.Unlock()
	add(c.holds.held, id, -1)
	c.holds.gen++
}

// Holdings is what the gate holds now, as the hub takes it.
func (c *Client) Holdings() (hubapi.Holdings, uint64) {
	c.hmu.Lock()
	defer c.hmu.Unlock()
	s := hubapi.Holdings{Held: make(map[string]int, len(c.holds.held))}
	for id, n := range c.holds.held {
		s.Held[id] = n
	}
	for fp := range c.holds.asking {
		s.Asking = append(s.Asking, fp)
	}
	for id := range c.holds.busy {
		s.Busy = append(s.Busy, id)
	}
	for id, n := range c.holds.cut {
		if s.Cut == nil {
			s.Cut = map[string]int{}
		}
		s.Cut[id] = n
	}
	sort.Strings(s.Asking)
	sort.Strings(s.Busy)
	return s, c.holds.gen
}

func (c *Client) holdsGen() uint64 {
	c.hmu.Lock()
	defer c.hmu.Unlock()
	return c.holds.gen
}

// ReportHoldings tells the hub what the gate holds, so that it counts the held requests right
// whatever calls were lost. A call that began after the snapshot may reach the hub before it:
// while anything changed during the report, it reports again (three times at most; the next
// round does the rest).
func (c *Client) ReportHoldings(ctx context.Context) error {
	for range 3 {
		s, gen := c.Holdings()
		if err := c.call(ctx, "POST", "/v1/gate/holdings", s, nil); err != nil {
			return err
		}
		c.cutReported(s.Cut)
		if c.holdsGen() == gen {
			return nil
		}
	}
	return nil
}

// reportHoldings reports what the gate holds now and every holdingsEvery until ctx ends (the
// event stream is lost, or the gate stops).
func (c *Client) reportHoldings(ctx context.Context) {
	t := time.NewTicker(holdingsEvery)
	defer t.Stop()
	for {
		if err := c.ReportHoldings(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("hub: reporting the held requests failed; the next report tries again", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
