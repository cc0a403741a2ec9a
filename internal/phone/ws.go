package phone

import (
	"bytes"
	"encoding/json"
	"net/http"
	"time"

	"github.com/gorilla/websocket"
	"github.com/lockhttp/lockhttp/internal/connlimit"
	"github.com/lockhttp/lockhttp/internal/hub"
)

// Websocket close codes the page acts on.
const (
	// CloseUnauthorized: the token was missing, wrong or revoked; the page forgets it.
	CloseUnauthorized = 4401
	// CloseBehind: the phone fell behind the hub's events; the page reconnects and rereads.
	CloseBehind = 4409
	// CloseTooMany: the session has MaxSockets websockets open already; the page retries later
	// (a dead one is found out within wsPongWait).
	CloseTooMany = 4429
)

// MaxSockets is the most websockets one paired phone holds open at once.
const MaxSockets = 4

const (
	wsWriteWait = 10 * time.Second
	wsPingEvery = 25 * time.Second
	wsPongWait  = 60 * time.Second
	wsReadLimit = 4 << 10
)

// eventMsg is one hub event as the page gets it. Type is the hub's: "ticket" (new), "decided",
// "expired", "gate".
type eventMsg struct {
	Type   string      `json:"type"`
	NowMS  int64       `json:"now_ms"`
	Ticket *ticketView `json:"ticket,omitempty"`
	Gate   *gateView   `json:"gate,omitempty"`
}

func (s *Server) upgrader() *websocket.Upgrader {
	return &websocket.Upgrader{
		HandshakeTimeout: wsWriteWait,
		ReadBufferSize:   1024,
		WriteBufferSize:  8192,
		CheckOrigin:      s.originOK,
		Error: func(w http.ResponseWriter, r *http.Request, status int, reason error) {
			if status == http.StatusForbidden {
				s.badOrigin(w, r)
				return
			}
			writeError(w, status, "a websocket upgrade is expected here", "")
		},
	}
}

// openSocket counts one more websocket for ss, unless it has MaxSockets open.
func (s *Server) openSocket(ss *session) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss.sockets >= MaxSockets {
		return false
	}
	ss.sockets++
	return true
}

func (s *Server) closeSocket(ss *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss.sockets--
}

// serveWS streams the hub's events to a phone. A browser cannot set headers on a websocket and
// the token must stay out of the URL, so the session token is the first message:
// {"type":"auth","token":"…"}. Then the server sends a "snapshot" and the hub's events as they
// happen; the phone sends nothing more.
func (s *Server) serveWS(w http.ResponseWriter, r *http.Request) {
	key := remoteKey(r)
	if !s.limit.allow(key) {
		tooMany(w)
		return
	}
	c, err := s.upgrader().Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader answered (403 for another Origin)
	}
	defer c.Close()
	c.SetReadLimit(wsReadLimit)
	closeWith := func(code int, text string) {
		c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, text), time.Now().Add(time.Second))
	}

	c.SetReadDeadline(time.Now().Add(s.authWait))
	_, data, err := c.ReadMessage()
	if err != nil {
		infoOf(r).err = "no auth message"
		closeWith(websocket.ClosePolicyViolation, "no auth message")
		return
	}
	var auth struct {
		Type  string `json:"type"`
		Token string `json:"token"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var ss *session
	if dec.Decode(&auth) == nil && auth.Type == "auth" {
		ss = s.authenticate(auth.Token, r.RemoteAddr)
	}
	if ss == nil {
		s.limit.fail(key)
		infoOf(r).err = "bad auth message"
		closeWith(CloseUnauthorized, "unpaired")
		return
	}
	infoOf(r).session = ss.ID
	if !s.openSocket(ss) {
		infoOf(r).err = "too many websockets for this session"
		closeWith(CloseTooMany, "too many live connections for this phone")
		return
	}
	defer s.closeSocket(ss)
	connlimit.Trust(r.Context())

	// Subscribe before the snapshot so that no event falls between them; the page applies an
	// event twice harmlessly.
	events, cancel := s.hub.Subscribe()
	defer cancel()
	// The snapshot carries the newest page of the pending tickets; the page reads the rest.
	first, next := s.hub.PendingPage(hub.DefaultPage, "")
	snap := stateMsg{Type: "snapshot", Session: ss.ID, Device: ss.Device, NowMS: ms(s.now()),
		Gate: gateViewOf(s.hub.GateState()), Pending: viewsOf(first), PendingNext: next, Recent: viewsOf(s.hub.Recent(recentN))}
	if snap.Pending == nil {
		snap.Pending = []ticketView{}
	}
	if write(c, snap) != nil {
		return
	}

	// The reader only sees pongs and the close; anything the phone sends after auth is ignored.
	readerDone := make(chan struct{})
	c.SetReadDeadline(time.Now().Add(wsPongWait))
	c.SetPongHandler(func(string) error {
		s.seen(ss)
		return c.SetReadDeadline(time.Now().Add(wsPongWait))
	})
	go func() {
		defer close(readerDone)
		for {
			if _, _, err := c.ReadMessage(); err != nil {
				return
			}
		}
	}()

	ping := time.NewTicker(wsPingEvery)
	defer ping.Stop()
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				closeWith(CloseBehind, "fell behind; reconnect")
				return
			}
			if write(c, s.eventMsg(ev)) != nil {
				return
			}
		case <-ping.C:
			if c.WriteControl(websocket.PingMessage, nil, time.Now().Add(wsWriteWait)) != nil {
				return
			}
		case <-ss.revoked:
			closeWith(CloseUnauthorized, "unpaired")
			return
		case <-s.done:
			closeWith(websocket.CloseGoingAway, "hub stopping")
			return
		case <-readerDone:
			return
		}
	}
}

func (s *Server) eventMsg(ev hub.Event) eventMsg {
	m := eventMsg{Type: ev.Type, NowMS: ms(s.now())}
	if ev.Ticket != nil {
		v := viewOf(*ev.Ticket)
		m.Ticket = &v
	}
	if ev.Gate != nil {
		g := gateViewOf(*ev.Gate)
		m.Gate = &g
	}
	return m
}

func write(c *websocket.Conn, v any) error {
	c.SetWriteDeadline(time.Now().Add(wsWriteWait))
	return c.WriteJSON(v)
}
