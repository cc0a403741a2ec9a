package traffic

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Sizes and times of the gate's side.
const (
	// MaxBatch is the most entries one batch carries, and the most the hub takes in one.
	MaxBatch = 256
	// maxQueued is the most entries waiting to be sent; past it, new ones are dropped (and
	// counted).
	maxQueued = 4096
	// gather is how long the sender waits after the first entry for more to join its batch.
	gather = 100 * time.Millisecond
	// maxBackoff bounds the wait after a failed send.
	maxBackoff = 5 * time.Second
	// MaxForwardedPerSecond is how many forwarded requests (FREE, sent on) a second the gate
	// queues; past it only refusals and asks are, and the rest counted (Batch.Sampled). Nobody
	// reads thousands of lines a second, and sending and decoding each one cost the gate and
	// the hub more than the rest of the request's way through the gate.
	MaxForwardedPerSecond = 200
)

// Queue holds the gate's entries until they are sent. Add never blocks: it is on every
// request's path.
type Queue struct {
	wake chan struct{} // cap 1: an entry was added to an empty queue

	mu      sync.Mutex
	entries []Entry // guarded by mu: waiting, oldest first
	dropped int     // guarded by mu: entries dropped since the last delivered batch
	sampled int     // guarded by mu: forwarded requests left out since the last batch taken
	second  int64   // guarded by mu: the Unix second forwarded counts
	fwd     int     // guarded by mu: forwarded requests queued in second
}

// NewQueue returns an empty queue; Run sends what it holds.
func NewQueue() *Queue {
	return &Queue{wake: make(chan struct{}, 1)}
}

// Add queues e, or drops it (counted) when maxQueued are waiting.
func (q *Queue) Add(e Entry) {
	q.mu.Lock()
	if e.Verdict == "FREE" && e.Code == "" {
		if s := e.Time.Unix(); s != q.second {
			q.second, q.fwd = s, 0
		}
		if q.fwd >= MaxForwardedPerSecond {
			q.sampled++
			q.mu.Unlock()
			return
		}
		q.fwd++
	}
	if len(q.entries) >= maxQueued {
		q.dropped++
		q.mu.Unlock()
		return
	}
	q.entries = append(q.entries, e)
	first := len(q.entries) == 1
	q.mu.Unlock()
	if first {
		select {
		case q.wake <- struct{}{}:
		default:
		}
	}
}

// take removes the next batch (at most MaxBatch entries) and the dropped count.
func (q *Queue) take() Batch {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := min(len(q.entries), MaxBatch)
	b := Batch{Entries: append([]Entry(nil), q.entries[:n]...), Dropped: q.dropped, Sampled: q.sampled}
	q.entries = append(q.entries[:0], q.entries[n:]...)
	q.dropped, q.sampled = 0, 0
	return b
}

// giveBack puts a batch that could not be sent back in front, as far as room allows, or counts
// it dropped (lost: the hub refused it).
func (q *Queue) giveBack(b Batch, lost bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.dropped += b.Dropped
	q.sampled += b.Sampled
	if lost {
		q.dropped += len(b.Entries)
		return
	}
	room := max(0, maxQueued-len(q.entries))
	keep := b.Entries
	if len(keep) > room {
		q.dropped += len(keep) - room
		keep = keep[len(keep)-room:] // the newest ones
	}
	q.entries = append(keep, q.entries...)
}

func (q *Queue) pending() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.entries) > 0 || q.dropped > 0 || q.sampled > 0
}

// ErrRefused wraps a send's error when the hub will never take the batch (it answered 4xx): the
// batch is dropped instead of sent again.
var ErrRefused = errors.New("traffic: the hub refused the batch")

// Run sends the queued entries with send until ctx ends: a batch gathers for up to 100 ms after
// its first entry. A failed send is tried again after a backoff (up to 5 s), the entries kept
// in the queue as far as it has room; one that wraps ErrRefused is dropped.
func (q *Queue) Run(ctx context.Context, send func(context.Context, Batch) error) {
	backoff := 200 * time.Millisecond
	for {
		if !q.pending() {
			select {
			case <-ctx.Done():
				return
			case <-q.wake:
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(gather):
		}
		for q.pending() && ctx.Err() == nil {
			b := q.take()
			err := send(ctx, b)
			if err == nil {
				backoff = 200 * time.Millisecond
				continue
			}
			q.giveBack(b, errors.Is(err, ErrRefused))
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, maxBackoff)
		}
	}
}
