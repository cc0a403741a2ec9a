package gate

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/lockhttp/lockhttp/internal/judge"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/transport"
)

// How a body read is paced besides the policy's body_timeout and body_min_rate (Config's
// BodyGrace and BodyStall when they are set): the rate is measured after bodyGrace, and a body
// that sends nothing for bodyStall is stalled.
const (
	bodyGrace = 5 * time.Second
	bodyStall = 10 * time.Second
	// bodyChunk is the first buffer of a body of unknown length, and the step it grows by
	// until it doubles.
	bodyChunk = 32 << 10
)

// heldBytes counts the request bytes the gate holds for decisions: in all, and by container.
// A body's bytes are taken before the buffer that holds them is allocated, and given back when
// its request is done (a WebSocket message's likewise, websocket.go); an open HTTP/2 stream's
// header is taken when its handler starts, and given back when the stream ends (streamCharge).
type heldBytes struct {
	mu    sync.Mutex
	total int64            // guarded by mu
	by    map[string]int64 // guarded by mu
}

// errBusy: taking the bytes would pass held_limit or held_per_container.
type errBusy struct{ container bool }

func (e *errBusy) Error() string {
	if e.container {
		return "held_per_container"
	}
	return "held_limit"
}

// take takes n bytes for container, or refuses them with *errBusy.
func (h *heldBytes) take(container string, n int64, s *policy.Settings) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.total+n > s.HeldLimit {
		return &errBusy{}
	}
	if h.by[container]+n > s.HeldPerContainer {
		return &errBusy{container: true}
	}
	if h.by == nil {
		h.by = make(map[string]int64)
	}
	h.total += n
	h.by[container] += n
	return nil
}

func (h *heldBytes) give(container string, n int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.total -= n
	if h.by[container] -= n; h.by[container] <= 0 {
		delete(h.by, container)
	}
}

// HeldBytes is how many bytes the gate holds for decisions now, in all: bodies, WebSocket
// messages, and what open HTTP/2 streams are charged.
func (g *Gate) HeldBytes() int64 {
	g.held.mu.Lock()
	defer g.held.mu.Unlock()
	return g.held.total
}

// bodyHold is the bytes one request took; release gives them back. An HTTP/1.1 connection
// carries one request at a time, so its connInfo holds its request's bodyHold; an HTTP/2
// stream's streamInfo holds its own.
type bodyHold struct {
	h         *heldBytes
	container string
	n         int64
}

func (b *bodyHold) take(h *heldBytes, container string, n int64, s *policy.Settings) error {
	if err := h.take(container, n, s); err != nil {
		return err
	}
	b.h, b.container, b.n = h, container, b.n+n
	return nil
}

func (b *bodyHold) release() {
	if b.h != nil && b.n > 0 {
		b.h.give(b.container, b.n)
	}
	b.n = 0
}

// errBodyTimeout: the body did not arrive in time; d is its refusal, whose reason says which
// bound it passed.
type errBodyTimeout struct{ d policy.Decision }

func (e *errBodyTimeout) Error() string { return e.d.Reason }

// readDeadliner is the client connection as readBody paces it.
type readDeadliner interface{ SetReadDeadline(time.Time) error }

// bodyReader reads one request body for the decision, bounded: at most buffer_limit+1 bytes,
// taken from the held bytes before they are allocated, within body_timeout, at body_min_rate
// after grace, never stalled for stall.
type bodyReader struct {
	s         *policy.Settings
	held      *heldBytes
	hold      *bodyHold // nil: nothing is counted (a caller without a connection)
	container string
	conn      readDeadliner // nil: no deadlines
	now       func() time.Time
	grace     time.Duration
	stall     time.Duration
}

// read reads r's body and puts what it read back as the body. It returns the body, how many
// bytes it read, and an error: *errBusy, *errBodyTimeout, or the read's own.
func (br *bodyReader) read(r *http.Request) (_ []byte, _ int64, err error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, 0, nil
	}
	if br.conn != nil {
		defer func() {
			if err != nil {
				// The request is refused and its connection closed: the server must not wait
				// for the rest of the body (it reads on to reuse the connection).
				br.conn.SetReadDeadline(time.Unix(1, 0))
				return
			}
			br.conn.SetReadDeadline(time.Time{})
		}()
	}
	limit := br.s.BufferLimit + 1
	size := int64(bodyChunk)
	if r.ContentLength > 0 {
		size = r.ContentLength
	}
	size = min(size, limit)
	if err := br.take(size); err != nil {
		return nil, 0, err
	}
	buf := make([]byte, 0, size)
	start := br.now()
	for int64(len(buf)) < limit {
		if len(buf) == cap(buf) {
			grow := min(int64(cap(buf)), limit-int64(cap(buf)))
			if err := br.take(grow); err != nil {
				return nil, 0, err
			}
			buf = append(buf[:cap(buf)], make([]byte, grow)...)[:len(buf)]
		}
		if br.conn != nil {
			br.conn.SetReadDeadline(br.deadline(start, int64(len(buf))))
		}
		n, err := r.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if isTimeout(err) {
				return nil, 0, br.late(start, int64(len(buf)))
			}
			return nil, 0, err
		}
	}
	r.Body.Close()
	r.Body = io.NopCloser(bytes.NewReader(buf))
	r.ContentLength = int64(len(buf))
	r.TransferEncoding = nil
	if len(buf) == 0 {
		r.Body = http.NoBody
	}
	return buf, int64(len(buf)), nil
}

func (br *bodyReader) take(n int64) error {
	if br.hold == nil {
		return nil
	}
	return br.hold.take(br.held, br.container, n, br.s)
}

// deadline is when the next byte must have arrived, with got bytes read since start: the
// earliest of the overall limit, the stall limit and the time at which the body would fall
// below the minimum rate.
func (br *bodyReader) deadline(start time.Time, got int64) time.Time {
	d := start.Add(br.s.BodyTimeout)
	if stall := br.now().Add(br.stall); stall.Before(d) {
		d = stall
	}
	if br.s.BodyMinRate > 0 {
		rate := start.Add(br.grace + time.Duration(float64(got)/float64(br.s.BodyMinRate)*float64(time.Second)))
		if rate.Before(d) {
			d = rate
		}
	}
	return d
}

// late says which bound a body that timed out passed.
func (br *bodyReader) late(start time.Time, got int64) error {
	elapsed := br.now().Sub(start)
	switch {
	case elapsed >= br.s.BodyTimeout:
		return &errBodyTimeout{judge.BodyLate(br.s.BodyTimeout, got)}
	case br.s.BodyMinRate > 0 && elapsed > br.grace && float64(got) < float64(br.s.BodyMinRate)*(elapsed-br.grace).Seconds():
		return &errBodyTimeout{judge.BodySlow(br.s.BodyMinRate, got, elapsed)}
	}
	return &errBodyTimeout{judge.BodyStalled(br.stall, got)}
}

func isTimeout(err error) bool { return transport.IsTimeout(err) }

// bodyRefusal is the refusal of a body that could not be read for the decision, or false for a
// read error that is not one of the bounds.
func bodyRefusal(err error) (policy.Decision, bool) {
	if err == nil {
		return policy.Decision{}, false // and errors.As's targets are not made at each request
	}
	var busy *errBusy
	var late *errBodyTimeout
	switch {
	case errors.As(err, &busy) && busy.container:
		return judge.DecisionHeldPerContainer, true
	case errors.As(err, &busy):
		return judge.DecisionHeldLimit, true
	case errors.As(err, &late):
		return late.d, true
	}
	return policy.Decision{}, false
}
