// Package connlimit caps the connections a listener hands to an HTTP server: in all, per peer,
// and how long one may stay open before a request on it proves who sent it.
package connlimit

import (
	"container/list"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// Config is a Listener's limits. A connection is on probation from its accept until a handler
// calls Trust for a request on it (the request carried a valid token); Trusted connections
// start trusted.
type Config struct {
	// Max is the most connections held at once. At Max a new connection takes the place of the
	// oldest on probation; with none on probation it is closed at once. Zero: no cap.
	Max int
	// MaxProbation is the most connections on probation at once; past it the oldest on probation
	// is closed. Zero: no cap but Max.
	MaxProbation int
	// PerPeer is the most connections on probation from one peer (PeerKey); past it that peer's
	// oldest on probation is closed. Zero: no cap.
	PerPeer int
	// Probation is how long a connection may stay on probation: past it, it is closed as soon as
	// no request is being read or answered on it. Zero: no limit.
	Probation time.Duration
	// Trusted, when not nil, tells at accept whether a connection starts trusted (a unix peer
	// whose uid is allowed). Nil: every connection starts on probation.
	Trusted func(net.Conn) bool
	// Key names a connection's peer. Nil: PeerKey.
	Key func(net.Conn) string
	// Log gets a line when connections were closed or refused, at most one every logEvery. Nil:
	// none.
	Log *slog.Logger
	// Name is the listener's name in the log (e.g. "hub").
	Name string
}

// logEvery is how often at most the listener says it closed or refused connections.
const logEvery = 10 * time.Second

// Field names of the log line.
const (
	logListener = "listener"
	logEvicted  = "evicted"
	logExpired  = "expired"
	logRefused  = "refused"
	logPeer     = "last_peer"
	logHeld     = "held"
)

// Listener is a net.Listener that applies a Config. Serve it with ConnContext and ConnState
// set to the Listener's (Server does it), and call Trust from the handlers that authenticate.
type Listener struct {
	net.Listener
	cfg Config
	log *slog.Logger

	mu        sync.Mutex
	held      int                   // guarded by mu: connections open
	probation list.List             // guarded by mu: *Conn on probation, oldest first
	peers     map[string]*list.List // guarded by mu: peer key → its *Conn on probation, oldest first
	counts    [3]int                // guarded by mu: evicted, expired, refused since the last log line
	lastPeer  string                // guarded by mu: the peer of the last connection counted
	logged    time.Time             // guarded by mu: when the last log line was written
}

// New wraps l.
func New(l net.Listener, cfg Config) *Listener {
	if cfg.Key == nil {
		cfg.Key = PeerKey
	}
	lg := cfg.Log
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	return &Listener{Listener: l, cfg: cfg, log: lg, peers: map[string]*list.List{}}
}

// Conn is a connection the Listener accepted.
type Conn struct {
	net.Conn
	l    *Listener
	key  string
	once sync.Once

	// guarded by l.mu:
	trusted bool
	gone    bool           // closed, or chosen to be closed
	state   http.ConnState // as the server last reported it
	expired bool           // on probation past Probation while busy: closed when idle
	all     *list.Element  // in l.probation
	peer    *list.Element  // in l.peers[key]
	timer   *time.Timer
}

// NetConn is the accepted connection (unixsock.PeerOf reads the peer's credentials through it).
func (c *Conn) NetConn() net.Conn { return c.Conn }

// CloseWrite shuts down the writing side of the accepted connection when it has one: a server
// half-closes before it closes (so that its last answer is not lost to a reset), and a spliced
// tunnel passes one side's end to the other. Without it, the error says so.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errNoHalfClose
}

// CloseRead shuts down the reading side of the accepted connection when it has one.
func (c *Conn) CloseRead() error {
	if cr, ok := c.Conn.(interface{ CloseRead() error }); ok {
		return cr.CloseRead()
	}
	return errNoHalfClose
}

var errNoHalfClose = errors.New("connlimit: the connection cannot be half-closed")

// Peer is the key the connection is counted under.
func (c *Conn) Peer() string { return c.key }

// Close closes the connection and stops counting it.
func (c *Conn) Close() error {
	c.l.mu.Lock()
	c.l.dropLocked(c)
	c.l.mu.Unlock()
	return c.closeNet()
}

func (c *Conn) closeNet() error {
	err := net.ErrClosed
	c.once.Do(func() { err = c.Conn.Close() })
	return err
}

// Accept returns the next connection the limits admit. A connection over them is closed here
// and Accept waits for the next one; making room closes another connection without waiting.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if c := l.admit(nc); c != nil {
			return c, nil
		}
	}
}

// admit counts nc in, closing what must go to make room, or closes nc and returns nil.
func (l *Listener) admit(nc net.Conn) *Conn {
	c := &Conn{Conn: nc, l: l, key: l.cfg.Key(nc)}
	c.trusted = l.cfg.Trusted != nil && l.cfg.Trusted(nc)
	var victims []*Conn
	evict := func(e *list.Element) {
		v := e.Value.(*Conn)
		l.dropLocked(v)
		victims = append(victims, v)
		l.countLocked(0, v.key)
	}
	l.mu.Lock()
	if l.cfg.Max > 0 && l.held >= l.cfg.Max {
		if l.probation.Len() == 0 {
			l.countLocked(2, c.key)
			l.mu.Unlock()
			nc.Close()
			return nil
		}
		evict(l.probation.Front())
	}
	if !c.trusted {
		pl := l.peers[c.key]
		if pl == nil {
			pl = &list.List{}
			l.peers[c.key] = pl
		}
		if l.cfg.PerPeer > 0 && pl.Len() >= l.cfg.PerPeer {
			evict(pl.Front())
		}
		if l.cfg.MaxProbation > 0 && l.probation.Len() >= l.cfg.MaxProbation {
			evict(l.probation.Front())
		}
		c.all = l.probation.PushBack(c)
		c.peer = pl.PushBack(c)
		if l.cfg.Probation > 0 {
			c.timer = time.AfterFunc(l.cfg.Probation, func() { l.expire(c) })
		}
	}
	l.held++
	l.mu.Unlock()
	for _, v := range victims {
		v.closeNet()
	}
	return c
}

// dropLocked stops counting c; the caller holds mu and closes c's connection.
func (l *Listener) dropLocked(c *Conn) {
	if c.gone {
		return
	}
	c.gone = true
	l.held--
	l.unprobeLocked(c)
}

// unprobeLocked takes c off probation; the caller holds mu.
func (l *Listener) unprobeLocked(c *Conn) {
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	if c.all != nil {
		l.probation.Remove(c.all)
		c.all = nil
	}
	if c.peer != nil {
		if pl := l.peers[c.key]; pl != nil {
			pl.Remove(c.peer)
			if pl.Len() == 0 {
				delete(l.peers, c.key)
			}
		}
		c.peer = nil
	}
}

// expire ends c's probation time: closed now when nothing is being served on it, else when it
// next goes idle (a request in progress is bounded by the server's timeouts; a hijacked
// connection by its new owner).
func (l *Listener) expire(c *Conn) {
	l.mu.Lock()
	if c.gone || c.trusted {
		l.mu.Unlock()
		return
	}
	if c.state != http.StateNew && c.state != http.StateIdle {
		c.expired = true
		l.mu.Unlock()
		return
	}
	l.dropLocked(c)
	l.countLocked(1, c.key)
	l.mu.Unlock()
	c.closeNet()
}

// countLocked counts a connection closed (kind 0 evicted, 1 expired, 2 refused) and writes the
// log line when it is due; the caller holds mu.
func (l *Listener) countLocked(kind int, peer string) {
	l.counts[kind]++
	l.lastPeer = peer
	now := time.Now()
	if now.Sub(l.logged) < logEvery {
		return
	}
	l.log.Warn("connlimit: connections closed to stay within the limits", logListener, l.cfg.Name,
		logEvicted, l.counts[0], logExpired, l.counts[1], logRefused, l.counts[2], logPeer, l.lastPeer, logHeld, l.held)
	l.counts = [3]int{}
	l.logged = now
}

// ConnState is the http.Server ConnState hook: a connection on probation past its time is
// closed when it goes idle.
func (l *Listener) ConnState(nc net.Conn, s http.ConnState) {
	c, ok := nc.(*Conn)
	if !ok {
		return
	}
	l.mu.Lock()
	c.state = s
	if s != http.StateIdle || !c.expired || c.gone || c.trusted {
		l.mu.Unlock()
		return
	}
	l.dropLocked(c)
	l.countLocked(1, c.key)
	l.mu.Unlock()
	c.closeNet()
}

type connKey struct{}

// ConnContext is an http.Server ConnContext that lets Trust find the request's connection.
func ConnContext(ctx context.Context, nc net.Conn) context.Context {
	if c, ok := nc.(*Conn); ok {
		return context.WithValue(ctx, connKey{}, c)
	}
	return ctx
}

// Trust ends the probation of the connection a request came on (ctx is the request's): call it
// once the request has proved who sent it. Without a Conn in ctx it does nothing.
func Trust(ctx context.Context) {
	c, ok := ctx.Value(connKey{}).(*Conn)
	if !ok {
		return
	}
	c.Trust()
}

// Trust ends c's probation: its peer proved who it is (a TLS layer above it verified the peer's
// certificate, say).
func (c *Conn) Trust() {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	if c.gone || c.trusted {
		return
	}
	c.trusted = true
	c.l.unprobeLocked(c)
}

// Counts is what a Listener holds.
type Counts struct {
	Held, Probation int
}

// Counts reports the connections held and those on probation.
func (l *Listener) Counts() Counts {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Counts{Held: l.held, Probation: l.probation.Len()}
}

// Server sets s's ConnContext and ConnState to l's, keeping any s already has, and returns s.
func (l *Listener) Server(s *http.Server) *http.Server {
	cc, cs := s.ConnContext, s.ConnState
	s.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if cc != nil {
			ctx = cc(ctx, c)
		}
		return ConnContext(ctx, c)
	}
	s.ConnState = func(c net.Conn, st http.ConnState) {
		l.ConnState(c, st)
		if cs != nil {
			cs(c, st)
		}
	}
	return s
}
