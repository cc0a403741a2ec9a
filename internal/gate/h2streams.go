package gate

import (
	"context"
	"fmt"
	"net/netip"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"

	"github.com/lockhttp/lockhttp/internal/display"
	"github.com/lockhttp/lockhttp/internal/framing"
	"github.com/lockhttp/lockhttp/internal/judge"
)

// h2Streams is what the gate knows of the streams of one HTTP/2 connection inside a tunnel,
// from its frames (h2Conn) and its handler: which streams the client opened, which a handler
// claimed, and which the HTTP/2 server ended itself first. Those are the streams x/net refused
// (a header block it would not take: a reset, or a 400 or 431 of its own), and each gets an
// audit record (rule framing:h2-stream) before the frame that ends it leaves, up to
// h2StreamRecords on one connection; past h2MaxResets of them the gate closes the connection.
// The connection's own record (event h2-refused, rule framing:h2-connection) says what has no
// record of its own: written when x/net closes the connection with an error (before its GOAWAY
// leaves), or when the connection ends with refused streams past the bound, or closed by the
// gate. An attack costs the audit at most h2StreamRecords+2 records per connection.
type h2Streams struct {
	g       *Gate
	source  netip.Addr
	tun     *judge.Binding
	connect string // the CONNECT's id
	close   func() // closes the connection
	// pace: a header block that opens a stream is passed to the HTTP/2 server only once every
	// stream opened before it has its handler (awaitHandlers); serveH2 sets it.
	pace bool

	answeringN atomic.Int32 // len(answers), read without mu on every DATA frame

	mu         sync.Mutex          // guards the fields below
	open       map[uint32]bool     // streams opened and neither claimed by a handler nor ended by x/net
	late       map[uint32]bool     // streams the client reset before a handler claimed them
	ended      map[uint32]bool     // streams x/net ended before a handler claimed them
	answers    map[uint32]*h2Reply // streams x/net is answering itself, until the answer ends
	refused    int                 // streams x/net refused before any handler
	recorded   int                 // of those, how many have a record of their own
	nCancelled int                 // streams the client reset before any handler claimed them
	untracked  int                 // streams opened while h2MaxOpen were followed
	errs       map[string]int      // x/net's CountError tally, at most maxErrKinds kinds
	goAwayErr  http2.ErrCode       // the error code of x/net's GOAWAY (0: none, or NO_ERROR)
	closedBy   string              // why the gate closed the connection
	last       string              // the reason of the connection's last record
	busy       int                 // streams claimed whose refusal E_BUSY is not written yet
	wake       chan struct{}       // closed when a stream leaves open or busy, or the pacing ends; nil: no one waits
	unpaced    bool                // the pacing is over: the server sent GOAWAY, or the connection closed
}

// h2Reply is an answer x/net writes itself to a stream no handler saw.
type h2Reply struct {
	status int
	text   []byte // its body's first bytes
}

// maxErrKinds bounds the kinds of CountError the connection's record tallies; maxReplyText the
// bytes of x/net's answer kept for a stream's record.
const (
	maxErrKinds  = 32
	maxReplyText = 200
)

// h2PaceWait bounds how long awaitHandlers waits: a stream whose handler the HTTP/2 server
// queues behind others that outlive their streams may wait long, and the connection must not
// stop for good.
const h2PaceWait = 5 * time.Second

// h2BusyAtOnce is how many streams of one connection may wait for their E_BUSY refusal's
// record at once before the next header block waits for one of them.
const h2BusyAtOnce = 16

// AwaitHandlers waits, on a paced connection, until no stream the client opened is waiting for
// its handler (claim) or the server's refusal (take), and fewer than h2BusyAtOnce are being
// refused E_BUSY, before the header block of the next one reaches the server. The server
// decodes a block (x/net joins the Cookie fields into one new string: HPACK-indexed, 40 bytes
// on the wire are 60 KiB of it) and holds it until the stream's handler runs, and the handler
// is where the gate charges it (chargeStream): pacing keeps what the server holds uncharged to
// one stream's header per connection, where a burst of header blocks would otherwise wait in
// their handlers' goroutines, 100 a connection, before any was counted. And a stream the held
// bytes cannot take waits, with its goroutine and buffers (its header let go), for its record
// to be on disk (up to a second when refusals are summarised): a connection has at most
// h2BusyAtOnce such streams, not 100. What waits meanwhile is the client's bytes, in the
// kernel's socket buffers.
func (s *h2Streams) AwaitHandlers() {
	if !s.pace {
		return
	}
	var timeout <-chan time.Time
	for {
		s.mu.Lock()
		if len(s.open) == 0 && s.busy < h2BusyAtOnce || s.unpaced {
			s.mu.Unlock()
			return
		}
		if s.wake == nil {
			s.wake = make(chan struct{})
		}
		wake := s.wake
		s.mu.Unlock()
		if timeout == nil {
			t := time.NewTimer(h2PaceWait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-wake:
		case <-timeout:
			return
		}
	}
}

// busyDone notes that a stream claimed busy has its refusal written.
func (s *h2Streams) busyDone() {
	s.mu.Lock()
	s.busy--
	s.wakeUp()
	s.mu.Unlock()
}

// wakeUp wakes awaitHandlers. (s.mu held.)
func (s *h2Streams) wakeUp() {
	if s.wake != nil {
		close(s.wake)
		s.wake = nil
	}
}

// Unpace ends the pacing: the server sent GOAWAY (it ignores the streams opened after it) or
// the connection is closed.
func (s *h2Streams) Unpace() {
	s.mu.Lock()
	s.unpaced = true
	s.wakeUp()
	s.mu.Unlock()
}

// Opened notes a stream the client opened (its first HEADERS).
func (s *h2Streams) Opened(id uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.open) >= h2MaxOpen {
		s.untracked++
		return
	}
	s.open[id] = true
}

// Cancelled notes the client's reset of a stream.
func (s *h2Streams) Cancelled(id uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.open[id] {
		return
	}
	delete(s.open, id)
	s.wakeUp()
	s.nCancelled++
	if s.late == nil || len(s.late) >= h2MaxOpen {
		s.late = map[uint32]bool{}
	}
	s.late[id] = true
}

// claim is a handler's claim to stream id; false when x/net has ended the stream already (and
// its record is written). busy: the handler refuses the stream because the held bytes cannot
// take it, and the pacing waits for that refusal (busyDone) as for a handler.
func (s *h2Streams) claim(id uint32, busy bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended[id] {
		delete(s.ended, id)
		return false
	}
	delete(s.open, id)
	if busy {
		s.busy++
	} else {
		s.wakeUp()
	}
	if s.late[id] {
		delete(s.late, id)
		s.nCancelled--
	}
	return true
}

// take ends stream id as one x/net refused, if no handler claimed it: true when it did so.
// (s.mu held.)
func (s *h2Streams) take(id uint32) bool {
	if !s.open[id] {
		return false
	}
	delete(s.open, id)
	s.wakeUp()
	if s.ended == nil || len(s.ended) >= h2MaxOpen {
		s.ended = map[uint32]bool{}
	}
	s.ended[id] = true
	s.refused++
	return true
}

// Reset notes x/net's reset of stream id with code.
func (s *h2Streams) Reset(id uint32, code http2.ErrCode) {
	s.mu.Lock()
	took := s.take(id)
	s.mu.Unlock()
	if took {
		s.refusedStream(id, 0, "it reset the stream ("+code.String()+")", "")
	}
}

// Answered notes a response header block x/net writes on stream id, with its status when
// known; an answer to a stream no handler claimed is x/net's own.
func (s *h2Streams) Answered(id uint32, status int, endStream bool) {
	s.mu.Lock()
	if !s.take(id) {
		s.mu.Unlock()
		return
	}
	if endStream {
		s.mu.Unlock()
		s.refusedStream(id, status, answerWords(status), "")
		return
	}
	if s.answers == nil {
		s.answers = map[uint32]*h2Reply{}
	}
	s.answers[id] = &h2Reply{status: status}
	s.answeringN.Add(1)
	s.mu.Unlock()
}

// Answering reports whether x/net is answering stream id itself.
func (s *h2Streams) Answering(id uint32) bool {
	if s.answeringN.Load() == 0 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.answers[id] != nil
}

// AnswerText keeps the first bytes of x/net's answer on stream id.
func (s *h2Streams) AnswerText(id uint32, b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a := s.answers[id]; a != nil && len(a.text) < maxReplyText {
		a.text = append(a.text, b[:min(len(b), maxReplyText-len(a.text))]...)
	}
}

// AnswerEnded notes the end of x/net's answer on stream id: its record is written.
func (s *h2Streams) AnswerEnded(id uint32) {
	s.mu.Lock()
	a := s.answers[id]
	if a != nil {
		delete(s.answers, id)
		s.answeringN.Add(-1)
	}
	s.mu.Unlock()
	if a != nil {
		s.refusedStream(id, a.status, answerWords(a.status), string(a.text))
	}
}

func answerWords(status int) string {
	if status == 0 {
		return "it answered the stream itself"
	}
	return "it answered " + strconv.Itoa(status) + " itself"
}

// GoAway notes x/net's GOAWAY: one with an error code closes the connection, and its record is
// written before the frame leaves.
func (s *h2Streams) GoAway(code http2.ErrCode) {
	s.Unpace()
	s.mu.Lock()
	if code == http2.ErrCodeNo || s.goAwayErr != 0 {
		s.mu.Unlock()
		return
	}
	s.goAwayErr = code
	s.mu.Unlock()
	s.report()
}

// countError tallies x/net's CountError.
func (s *h2Streams) countError(kind string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.errs == nil {
		s.errs = map[string]int{}
	}
	if _, ok := s.errs[kind]; ok || len(s.errs) < maxErrKinds {
		s.errs[kind]++
	}
}

// closing notes that the gate closes the connection, and why.
func (s *h2Streams) closing(why string) {
	s.mu.Lock()
	if s.closedBy == "" {
		s.closedBy = why
	}
	s.mu.Unlock()
}

// finish writes the connection's record at its end when something has no record yet.
func (s *h2Streams) finish() {
	s.mu.Lock()
	need := s.refused > s.recorded || s.closedBy != "" || s.untracked > 0
	s.mu.Unlock()
	if need {
		s.report()
	}
}

// refusedStream writes the record of stream id, which x/net refused (what: how, in words;
// reply: the first bytes of its answer), or counts it past the bound.
func (s *h2Streams) refusedStream(id uint32, status int, what, reply string) {
	s.mu.Lock()
	own := s.recorded < h2StreamRecords
	if own {
		s.recorded++
	}
	over := s.refused > h2MaxResets && s.closedBy == ""
	if over {
		s.closedBy = fmt.Sprintf("the gate closed the connection: the HTTP/2 server refused more than %d of its streams", h2MaxResets)
	}
	s.mu.Unlock()
	if own {
		detail := fmt.Sprintf("stream %d of the HTTP/2 connection inside CONNECT %s", id, s.connect)
		if reply = strings.TrimSpace(strings.Trim(reply, "\x00")); reply != "" {
			detail += "; the HTTP/2 server's answer: " + display.Escape(reply, false)
		}
		s.write("tunnel-request", id, judge.H2Stream,
			"the HTTP/2 server refused this stream before the gate's handler saw it: "+what, status, detail)
	}
	if over {
		s.g.log.Info("http2: too many streams refused; closing the connection", logID, s.connect, "host", s.tun.Host)
		s.report()
		s.close()
	}
}

// report writes the connection's record: what x/net refused on it that has no record of its
// own, and how the connection ended; nothing when it would say what the last one said.
func (s *h2Streams) report() {
	s.mu.Lock()
	var parts []string
	if s.goAwayErr != 0 {
		parts = append(parts, "the HTTP/2 server closed the connection (GOAWAY "+s.goAwayErr.String()+")")
	}
	if s.closedBy != "" {
		parts = append(parts, s.closedBy)
	}
	if len(s.open) > 0 {
		ids := make([]int, 0, len(s.open))
		for id := range s.open {
			ids = append(ids, int(id))
		}
		sort.Ints(ids)
		var words []string
		for i, id := range ids {
			if i == 8 {
				words = append(words, fmt.Sprintf("and %d more", len(ids)-i))
				break
			}
			words = append(words, "stream "+strconv.Itoa(id))
		}
		parts = append(parts, "opened and never answered: "+strings.Join(words, ", "))
	}
	if s.refused > 0 {
		parts = append(parts, fmt.Sprintf("%d streams refused by the HTTP/2 server, %d of them with a record of their own", s.refused, s.recorded))
	}
	if s.nCancelled > 0 {
		parts = append(parts, fmt.Sprintf("%d streams reset by the client before a handler saw them", s.nCancelled))
	}
	if s.untracked > 0 {
		parts = append(parts, fmt.Sprintf("%d streams opened past the %d the gate follows", s.untracked, h2MaxOpen))
	}
	why := strings.Join(parts, "; ")
	if why == "" || why == s.last {
		s.mu.Unlock()
		return
	}
	s.last = why
	kinds := make([]string, 0, len(s.errs))
	for k, n := range s.errs {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
	}
	s.mu.Unlock()
	sort.Strings(kinds)
	detail := "the HTTP/2 connection inside CONNECT " + s.connect
	if len(kinds) > 0 {
		detail += "; the HTTP/2 server's error counts: " + strings.Join(kinds, ", ")
	}
	s.write("h2-refused", 0, judge.H2Connection, why, 0, detail)
}

// write writes one record of what x/net refused on the connection, decided by the one Decide
// as a framing refusal of kind, on disk before it returns.
func (s *h2Streams) write(event string, stream uint32, kind framing.Kind, why string, status int, detail string) {
	g := s.g
	ex := &exchange{g: g, source: s.source}
	ex.rec.Time, ex.rec.ID, ex.rec.Event, ex.rec.Stream = g.now(), g.newID(), event, stream
	ex.rec.Method = "-"
	u := &url.URL{Scheme: "https", Host: s.tun.Authority(), Path: "/"}
	if chk := g.insp.Load(); chk != nil {
		ex.rec.URL = recordURL(chk.Secrets, u)
	} else {
		ex.rec.URL = recordURL(nil, u)
	}
	a := &judge.Arrival{Kind: judge.Tunnel, Source: s.source, Tunnel: s.tun, HTTP2: true, Framing: judge.H2Refused(kind, why)}
	pol := g.pol.Load()
	v := judge.See(a)
	res := g.decide(g.env(pol), v, event)
	g.decided(ex, v, res, pol)
	ex.finishSync(context.Background(), status, detail)
}
