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
	"github.com/lockhttp/lockhttp/internal/wsframe"
)

// A WebSocket session, once the origin has switched protocols: relaySwitched relays it (its two
// copies), and the gate stands on both of its ends. The agent's side is wrapped (wsClient): every
// frame the agent sends is read whole, unmasked and checked (wsframe), the fragments of a
// message are held until the message is complete (within buffer_limit, counted in the held
// bytes), and the message is decided (judge.DecideMessage) before any of its bytes go on. A
// refused message never leaves: the gate writes its audit record, answers the agent with a close
// frame whose reason carries the code, and ends the session. The origin's frames pass as they
// come, followed only to count them and to know where a frame ends (a close frame of the gate's
// may only go between two frames).

// wsFrameTimeout bounds how long one frame's payload may take to arrive, once its header has.
const wsFrameTimeout = 60 * time.Second

// errWSRefused ends the agent's side of a session the gate closed.
var errWSRefused = errors.New("websocket: closed by the gate")

// wsSession is one WebSocket session through the gate.
type wsSession struct {
	g       *Gate
	up      io.ReadWriteCloser // the origin's connection, as the transport returned it
	upgrade *exchange          // the upgrade request's exchange
	start   time.Time

	// The agent's side, set by attach; read only by the proxy's copy toward the origin.
	client net.Conn
	cr     *bufio.Reader
	asm    wsframe.Assembler
	out    []byte // decided bytes not yet handed to the copy
	raw    []byte // the frames of the message being reassembled, as sent (masked)
	msg    []byte // its payload, unmasked
	hold   bodyHold
	rerr   error
	upMsgs int64
	upLen  int64

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
	return &wsSession{g: g, up: up, upgrade: ex, start: g.now(), asm: wsframe.Assembler{Client: true, Limit: limit}}
}

// The origin's side, as relaySwitched reads and writes it.
func (s *wsSession) Read(p []byte) (int, error)  { return s.up.Read(p) }
func (s *wsSession) Write(p []byte) (int, error) { return s.up.Write(p) }

// Close ends the session (forward closes the origin's side when either copy ends): both
// connections close, and the session's record is written.
func (s *wsSession) Close() error {
	err := s.up.Close()
	s.end()
	return err
}

// attach wraps the hijacked agent connection c, whose reader may hold bytes already.
func (s *wsSession) attach(c net.Conn, brw *bufio.ReadWriter) net.Conn {
	var ahead *bufio.Reader
	if brw != nil {
		ahead = brw.Reader
	}
	s.client = c
	s.cr = bufio.NewReaderSize(withBuffered(ahead, c), 64<<10)
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

// nextFrame reads the agent's next frame and decides what it completes; decided bytes go to
// s.out. It returns the error that ends the agent's side (its own, or errWSRefused).
func (s *wsSession) nextFrame() error {
	b, err := s.cr.Peek(2)
	if err != nil {
		return err
	}
	n := wsframe.HeaderLen(b[0], b[1])
	if b, err = s.cr.Peek(n); err != nil {
		return err
	}
	h, _, err := wsframe.Parse(b)
	if err == nil {
		err = s.asm.Begin(h)
	}
	var we *wsframe.Error
	if errors.As(err, &we) {
		return s.refuse(wsDecision(we), we.Code)
	}
	pol := s.g.pol.Load()
	if pol == nil {
		return s.refuse(judge.DecisionNoPolicy, wsframe.ClosePolicy)
	}
	// A data frame, as sent, and its payload unmasked: both are held until the message is
	// decided. (A control frame is at most 125 bytes, and passes at once.)
	if !h.Op.Control() {
		if err := s.hold.take(&s.g.held, s.upgrade.rec.Container, 2*h.Length, &pol.Settings); err != nil {
			d, _ := bodyRefusal(err)
			return s.refuse(d, wsframe.ClosePolicy)
		}
	}
	start := len(s.raw)
	s.raw = append(s.raw, make([]byte, n+int(h.Length))...)
	s.client.SetReadDeadline(time.Now().Add(wsFrameTimeout))
	_, err = io.ReadFull(s.cr, s.raw[start:])
	s.client.SetReadDeadline(time.Time{})
	if err != nil {
		return err
	}
	payload := append([]byte(nil), s.raw[start+n:]...)
	wsframe.Unmask(payload, h.Key, 0)
	if h.Op.Control() {
		// A control frame is a message of its own, and may come between the fragments of a
		// data message: it is decided and passed on at once (a close frame's reason and a
		// ping's data are text the agent chose too).
		frame := s.raw[start:]
		s.raw = s.raw[:start]
		text := payload
		if h.Op == wsframe.Close && len(text) >= 2 {
			text = text[2:]
		}
		if d := s.decide(h.Op, text); d.Verdict != policy.Free {
			return s.refuse(d, wsframe.ClosePolicy)
		}
		s.out = append(s.out, frame...)
		return nil
	}
	s.msg = append(s.msg, payload...)
	done, op := s.asm.End(h)
	if !done {
		return nil
	}
	d := s.decide(op, s.msg)
	if d.Verdict != policy.Free {
		return s.refuse(d, wsframe.ClosePolicy)
	}
	s.upMsgs++
	s.upLen += int64(len(s.msg))
	s.out = append(s.out, s.raw...)
	s.raw, s.msg = s.raw[:0], s.msg[:0]
	s.hold.release()
	return nil
}

// decide is the decision on one message of the agent's.
func (s *wsSession) decide(op wsframe.Opcode, payload []byte) policy.Decision {
	m := &judge.Message{Container: s.upgrade.rec.Container, Host: s.upgrade.target.Host, Kind: op.String(), Payload: payload}
	return judge.DecideMessage(s.g.env(s.g.pol.Load()), m)
}

// wsDecision is the refusal of a frame the gate cannot follow.
func wsDecision(e *wsframe.Error) policy.Decision {
	return policy.Decision{Verdict: policy.Deny, Code: policy.CodeFloor, Rule: "websocket:frame",
		Reason: e.Reason + "; the gate reads every message of a WebSocket and closes one it cannot read"}
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
	s.client.SetWriteDeadline(time.Now().Add(drainTimeout))
	s.wmu.Lock()
	if !s.closed && s.down.AtBoundary() {
		s.client.Write(wsframe.AppendFrame(nil, wsframe.Close, nil, wsframe.ClosePayload(code, reason)))
	}
	s.closed = true // the origin's answer to its own close frame, below, is not the agent's
	s.wmu.Unlock()
	var key [4]byte
	rand.Read(key[:])
	s.up.Write(wsframe.AppendFrame(nil, wsframe.Close, &key, wsframe.ClosePayload(code, "lockhttp")))
	return errWSRefused
}

// record is the exchange of the session's record: the upgrade's request, the session's counts,
// and the gate's decision when it closed the session.
func (s *wsSession) record() *exchange {
	u := s.upgrade
	ex := &exchange{g: s.g, source: u.source, target: u.target}
	ex.rec = u.rec
	ex.rec.Time, ex.rec.ID, ex.rec.Event = s.start, s.g.newID(), "websocket"
	ex.rec.Status, ex.rec.Detail, ex.rec.Ticket, ex.rec.Approver = 0, "", "", ""
	ex.rec.Score, ex.rec.Findings = 0, ""
	ex.bytesIn.Store(s.upLen)
	if s.refusal != nil {
		ex.refused(*s.refusal, s.g.pol.Load())
		ex.rec.Container = u.rec.Container
	}
	s.wmu.Lock()
	ex.rec.Detail = fmt.Sprintf("session of request %s: %d messages up (%d bytes), %d down (%d bytes)", u.rec.ID, s.upMsgs, s.upLen, s.down.Messages, s.down.Bytes)
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
			closeWrite(s.client)
			s.client.Close()
		}
		s.hold.release()
		if s.refusal == nil {
			ex := s.record()
			ex.finish(http.StatusSwitchingProtocols, ex.rec.BytesOut, ex.rec.Detail)
		}
	})
}
