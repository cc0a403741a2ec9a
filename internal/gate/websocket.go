package gate

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/lockhttp/lockhttp/internal/judge"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/transport"
	"github.com/lockhttp/lockhttp/internal/wsframe"
)

// A WebSocket session, once the origin has switched protocols: relaySwitched relays it (its two
// copies), and the gate stands on both of its ends. The agent's side is wrapped (wsClient): every
// frame the agent sends is read whole, unmasked and checked (wsframe), the payload of a data
// message is held until its last fragment (its frames, headers included, within buffer_limit and
// counted in the held bytes), and the message is decided (judge.DecideMessage) before any of it
// goes on. What goes on is the gate's own encoding of the message: one frame, in the shortest
// length encoding, masked with a key of the gate's (Config.Rand); a control frame likewise, at
// once. So nothing the agent chose in its frames (mask keys, length encodings, fragments) reaches
// the origin, only the payloads that were decided. A refused message never leaves: the gate
// writes its audit record, answers the agent with a close frame whose reason carries the code,
// and ends the session. The origin's frames pass as they come, followed only to count them and
// to know where a frame ends (a close frame of the gate's may only go between two frames).

// wsFrameTimeout bounds how long one frame's payload may take to arrive, once its header has. A
// data message, once begun, must arrive whole within the policy's body_timeout, as a body must.
const wsFrameTimeout = 60 * time.Second

// errWSRefused ends the agent's side of a session the gate closed.
var errWSRefused = errors.New("websocket: closed by the gate")

// wsSession is one WebSocket session through the gate.
type wsSession struct {
	g       *Gate
	up      io.ReadWriteCloser // the origin's connection, as the transport returned it
	upgrade *exchange          // the upgrade request's exchange
	start   time.Time
	rand    io.Reader // the mask keys of the gate's frames to the origin

	// The agent's side, set by Attach; read only by the proxy's copy toward the origin.
	client net.Conn
	cr     *bufio.Reader
	asm    wsframe.Assembler
	out    []byte // a decided frame, as the gate encoded it, not yet handed to the copy
	// msg is the data message being reassembled: wsframe.MaxHeader bytes of room for the
	// gate's header, then the payload so far, unmasked. Its capacity and its frames' headers
	// are held (hold) until it has gone on.
	msg  []byte
	ctl  [wsframe.MaxHeader + 125]byte // a control frame, laid out as msg
	due  time.Time                     // when the fragmented message begun must have ended
	rerr error
	// upClosed: a close frame went to the origin (the agent's, passed on); the gate sends none of
	// its own after it.
	upClosed bool

	hmu   sync.Mutex // guards hold and ended: the session may end while its agent's side reads on
	hold  bodyHold
	ended bool // the session ended: its held bytes were given back, and none are taken

	smu  sync.Mutex      // guards sent
	sent wsframe.Tracker // the frames written to the origin: the agent's messages as the gate sent them

	wmu    sync.Mutex      // guards writes to client, down and closed
	down   wsframe.Tracker // the origin's frames as written to the agent
	closed bool            // the gate's close frame was sent (or the session ended): nothing more is written

	once    sync.Once
	refusal *policy.Decision // set before the session's record when the gate closed it
}

// newWSSession wraps the origin's connection of a switched upgrade.
func (g *Gate) newWSSession(ex *exchange, up io.ReadWriteCloser) *wsSession {
	limit := int64(policy.DefaultBufferLimit)
	if pol := g.pol.Load(); pol != nil {
		limit = pol.Settings.BufferLimit
	}
	r := g.cfg.Rand
	if r == nil {
		r = rand.Reader
	}
	return &wsSession{g: g, up: up, upgrade: ex, start: g.now(), rand: r, asm: wsframe.Assembler{Client: true, Limit: limit}}
}

// The origin's side, as relaySwitched reads and writes it. What is written to it is followed
// (sent), for the session's record.
func (s *wsSession) Read(p []byte) (int, error) { return s.up.Read(p) }

func (s *wsSession) Write(p []byte) (int, error) {
	n, err := s.up.Write(p)
	s.smu.Lock()
	s.sent.Feed(p[:n])
	s.smu.Unlock()
	return n, err
}

// Close ends the session (forward closes the origin's side when either copy ends): both
// connections close, and the session's record is written.
func (s *wsSession) Close() error {
	err := s.up.Close()
	s.end()
	return err
}

// Attach wraps the hijacked agent connection c, whose reader may hold bytes already.
func (s *wsSession) Attach(c net.Conn, brw *bufio.ReadWriter) net.Conn {
	var ahead *bufio.Reader
	if brw != nil {
		ahead = brw.Reader
	}
	s.client = c
	s.cr = bufio.NewReaderSize(transport.WithBuffered(ahead, c), 64<<10)
	return &wsClient{Conn: c, s: s}
}

// wsClient is the agent's connection as relaySwitched sees it: what it reads has been decided.
type wsClient struct {
	net.Conn
	s *wsSession
}

func (c *wsClient) Read(p []byte) (int, error) {
	s := c.s
	for len(s.out) == 0 {
		if s.rerr != nil {
			return 0, s.rerr
		}
		s.rerr = s.nextFrame()
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	if len(s.out) == 0 && s.asm.Pending() == 0 {
		// The last message has gone on (or a control frame, outside a message): its buffer
		// and held bytes are given back before the next frame is waited for.
		s.msg = nil
		s.hmu.Lock()
		s.hold.release()
		s.hmu.Unlock()
	}
	return n, nil
}

func (c *wsClient) Write(p []byte) (int, error) {
	s := c.s
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed {
		return 0, net.ErrClosed
	}
	n, err := s.client.Write(p)
	s.down.Feed(p[:n])
	return n, err
}

// nextFrame reads the agent's next frame and decides what it completes; a decided message goes
// to s.out as the gate's frame. It returns the error that ends the agent's side (its own, or
// errWSRefused).
func (s *wsSession) nextFrame() error {
	// Between messages the agent may stay quiet as long as it likes; inside one, the rest of
	// the message is due.
	open := s.asm.Pending() > 0
	if open {
		s.client.SetReadDeadline(s.due)
		defer s.client.SetReadDeadline(time.Time{})
	}
	b, err := s.cr.Peek(2)
	if err == nil {
		b, err = s.cr.Peek(wsframe.HeaderLen(b[0], b[1]))
	}
	if err != nil {
		return s.late(open, err)
	}
	n := len(b)
	h, _, err := wsframe.Parse(b)
	if err == nil {
		err = s.asm.Begin(h)
	}
	var we *wsframe.Error
	if errors.As(err, &we) {
		return s.refuse(judge.WebSocketFrame(we.Reason), we.Code)
	}
	pol := s.g.pol.Load()
	if pol == nil {
		return s.refuse(judge.DecisionNoPolicy, wsframe.ClosePolicy)
	}
	s.cr.Discard(n)
	// The payload is read into its place after the room for the gate's header: a control
	// frame's (at most 125 bytes) into ctl, a data frame's onto the message, which first takes
	// the frame's header and any capacity it grows by from the held bytes.
	var payload []byte
	if h.Op.Control() {
		payload = s.ctl[wsframe.MaxHeader : wsframe.MaxHeader+h.Length]
	} else {
		if err := s.grow(h, &pol.Settings); err != nil {
			if d, ok := bodyRefusal(err); ok {
				return s.refuse(d, wsframe.ClosePolicy)
			}
			return err
		}
		payload = s.msg[len(s.msg) : len(s.msg)+int(h.Length)]
	}
	if !open && !h.Op.Control() {
		// A data message begins: all of it is due within body_timeout, as a body is.
		s.due = time.Now().Add(pol.Settings.BodyTimeout)
	}
	open = open || !h.Op.Control()
	due := time.Now().Add(wsFrameTimeout)
	if open && s.due.Before(due) {
		due = s.due
	}
	s.client.SetReadDeadline(due)
	_, err = io.ReadFull(s.cr, payload)
	s.client.SetReadDeadline(time.Time{})
	if err != nil {
		return s.late(open, err)
	}
	wsframe.Unmask(payload, h.Key, 0)
	done, op := s.asm.End(h)
	if h.Op.Control() {
		// A control frame is a message of its own, and may come between the fragments of a
		// data message: it is decided and passed on at once (a close frame's reason and a
		// ping's data are text the agent chose too).
		return s.pass(op, s.ctl[:wsframe.MaxHeader+h.Length], h.FrameLen())
	}
	s.msg = s.msg[:len(s.msg)+len(payload)]
	if !done {
		return nil
	}
	return s.pass(op, s.msg, s.asm.Size())
}

// late is the end of the agent's side after the read error err: a data message (open: begun)
// that did not arrive whole within body_timeout is refused (E_BODY_TIMEOUT), as is a control
// frame's payload past its 60 s; anything else ends the session as the agent's connection did.
func (s *wsSession) late(open bool, err error) error {
	switch {
	case open && isTimeout(err):
		return s.refuse(judge.DecisionMessageLate, wsframe.ClosePolicy)
	case isTimeout(err):
		return s.refuse(judge.DecisionControlLate, wsframe.ClosePolicy)
	}
	return err
}

// grow makes room on the message for the payload of the data frame h. The frame's header (the
// message's bookkeeping: an empty frame costs its 6 bytes or more) and the capacity the buffer
// grows by are taken from the held bytes before anything is allocated; the buffer doubles, up to
// the room and buffer_limit, so that a message of many fragments is copied a few times only.
func (s *wsSession) grow(h wsframe.Header, set *policy.Settings) error {
	have := max(len(s.msg), wsframe.MaxHeader)
	need := int64(have) + h.Length
	take, size := h.FrameLen()-h.Length, int64(cap(s.msg))
	if need > size {
		size = max(need, min(2*size, wsframe.MaxHeader+s.asm.Limit))
		take += size - int64(cap(s.msg))
	}
	s.hmu.Lock()
	err := net.ErrClosed
	if !s.ended {
		err = s.hold.take(&s.g.held, s.upgrade.rec.Container, take, set)
	}
	s.hmu.Unlock()
	if err != nil {
		return err
	}
	if size > int64(cap(s.msg)) {
		m := make([]byte, have, size)
		copy(m, s.msg)
		s.msg = m
	}
	return nil
}

// pass decides a whole message of the agent's (op; buf: wsframe.MaxHeader bytes of room, then
// the payload, unmasked; cost: its frames as the agent sent them, headers included) and, when it
// may go on, writes the gate's frame of it in place: its header in the room, the payload masked
// with a fresh key. The frame goes to s.out.
func (s *wsSession) pass(op wsframe.Opcode, buf []byte, cost int64) error {
	payload := buf[wsframe.MaxHeader:]
	var we *wsframe.Error
	if errors.As(wsframe.CheckPayload(op, payload), &we) {
		return s.refuse(judge.WebSocketFrame(we.Reason), we.Code)
	}
	text := payload
	if op == wsframe.Close && len(text) >= 2 {
		text = text[2:]
	}
	if d := s.decide(op, text, cost); d.Verdict != policy.Free {
		return s.refuse(d, wsframe.ClosePolicy)
	}
	var key [4]byte
	if _, err := io.ReadFull(s.rand, key[:]); err != nil {
		s.g.log.Error("websocket: no randomness for a mask key; the session ends", logID, s.upgrade.rec.ID, "err", err)
		return fmt.Errorf("websocket: a mask key: %w", err)
	}
	var hb [wsframe.MaxHeader]byte
	hdr := wsframe.AppendHeader(hb[:0], op, &key, int64(len(payload)))
	start := wsframe.MaxHeader - len(hdr)
	copy(buf[start:], hdr)
	wsframe.Unmask(payload, key, 0)
	s.out = buf[start:]
	s.upClosed = s.upClosed || op == wsframe.Close
	return nil
}

// decide is the decision on one message of the agent's, whose frames took size bytes.
func (s *wsSession) decide(op wsframe.Opcode, payload []byte, size int64) policy.Decision {
	m := &judge.Message{Container: s.upgrade.rec.Container, Host: s.upgrade.target.Host, Kind: op.String(), Payload: payload, Size: size}
	return judge.DecideMessage(s.g.env(s.g.pol.Load()), m)
}

// refuse closes the session for d: its record first (on disk), then a close frame to the agent
// with the code in its reason (when the origin's frames are at a boundary; otherwise the
// connection just closes), and a close frame to the origin, which never saw the message.
func (s *wsSession) refuse(d policy.Decision, code uint16) error {
	s.refusal = &d
	rec := s.record()
	reason := fmt.Sprintf("lockhttp %s %s %s", d.Code, d.Rule, rec.rec.ID)
	if err := rec.finishSync(context.Background(), 0, ""); err != nil {
		nd := judge.NoAudit(err) // no id: no record holds it
		reason = fmt.Sprintf("lockhttp %s %s", nd.Code, nd.Rule)
	}
	s.client.SetWriteDeadline(time.Now().Add(transport.DrainTimeout))
	s.wmu.Lock()
	if !s.closed && s.down.AtBoundary() {
		s.client.Write(wsframe.AppendFrame(nil, wsframe.Close, nil, wsframe.ClosePayload(code, reason)))
	}
	s.closed = true // the origin's answer to its own close frame, below, is not the agent's
	s.wmu.Unlock()
	var key [4]byte
	if _, err := io.ReadFull(s.rand, key[:]); err == nil && !s.upClosed {
		s.up.Write(wsframe.AppendFrame(nil, wsframe.Close, &key, wsframe.ClosePayload(code, "lockhttp")))
	}
	return errWSRefused
}

// record is the exchange of the session's record: the upgrade's request, the session's counts
// (the frames as the gate wrote them each way, headers included), and the gate's decision when
// it closed the session.
func (s *wsSession) record() *exchange {
	u := s.upgrade
	ex := &exchange{g: s.g, source: u.source, target: u.target}
	ex.rec = u.rec
	ex.rec.Time, ex.rec.ID, ex.rec.Event = s.start, s.g.newID(), "websocket"
	ex.rec.Status, ex.rec.Detail, ex.rec.Ticket, ex.rec.Approver = 0, "", "", ""
	ex.rec.Score, ex.rec.Findings = 0, ""
	s.smu.Lock()
	upMsgs, upBytes := s.sent.Messages, s.sent.Bytes
	s.smu.Unlock()
	ex.bytesIn.Store(upBytes)
	if s.refusal != nil {
		ex.refused(*s.refusal, s.g.pol.Load())
		ex.rec.Container = u.rec.Container
	}
	s.wmu.Lock()
	ex.rec.Detail = fmt.Sprintf("session of request %s: %d messages up (%d bytes), %d down (%d bytes)", u.rec.ID, upMsgs, upBytes, s.down.Messages, s.down.Bytes)
	ex.rec.BytesOut = s.down.Bytes
	s.wmu.Unlock()
	return ex
}

// end closes the agent's side and writes the session's record, once.
func (s *wsSession) end() {
	s.once.Do(func() {
		s.wmu.Lock()
		s.closed = true
		s.wmu.Unlock()
		if s.client != nil {
			transport.CloseWrite(s.client)
			s.client.Close()
		}
		s.hmu.Lock()
		s.ended = true
		s.hold.release()
		s.hmu.Unlock()
		if s.refusal == nil {
			ex := s.record()
			ex.finish(http.StatusSwitchingProtocols, ex.rec.BytesOut, ex.rec.Detail)
		}
	})
}
