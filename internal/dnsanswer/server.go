package dnsanswer

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"
)

// Bounds of what a source can make the server do.
const (
	// MaxMessage is the largest query read, over UDP or TCP (a query is a header and one
	// question: at most 12+255+4 bytes, and an EDNS record); a larger one is dropped, and
	// closes its TCP connection.
	MaxMessage = 1232
	// DefaultRate is how many queries one source gets answered in one second of the clock;
	// the rest of that second are dropped unanswered (a resolver asks again).
	DefaultRate = 200
	// maxPending bounds the queries answered whose record is still being written: past it a
	// query is dropped unanswered (no answer without its record under way).
	maxPending = 1024
	// TCP: connections in all and per source, and how long one may take to send a whole
	// query (the first, or the next after an answer) before it is closed.
	maxTCPConns          = 256
	maxTCPConnsPerSource = 16
	tcpIdle              = 10 * time.Second
)

// Query is one answered query, for its record: where it came from and what it got.
type Query struct {
	Source netip.Addr
	// TCP reports a query that came over TCP.
	TCP bool
	Outcome
}

// Config is what a Server needs.
type Config struct {
	// Addr is the address every A query is answered with: the gate's transparent address.
	Addr netip.Addr
	// Status says how the server stands toward a source: Known, Unknown (REFUSED) or Failing
	// (SERVFAIL). Nil: every source is Known.
	Status func(netip.Addr) Status
	// Record writes the record of an answered query; it may block (the audit's fsync). It runs
	// on a goroutine of its own, at most maxPending at once. Nil: none.
	Record func(Query)
	// Rate is the queries one source gets answered per second. Zero: DefaultRate.
	Rate int
	// Now is the clock. Nil: time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

// Server answers DNS queries over UDP (ServeUDP) and TCP (ServeTCP) with Answer.
type Server struct {
	cfg     Config
	log     *slog.Logger
	pending chan struct{} // one token per record being written

	mu      sync.Mutex
	sec     int64              // guarded by mu: the second the counts are of
	counts  map[netip.Addr]int // guarded by mu: queries per source in sec
	dropped int                // guarded by mu: queries dropped since the last log line
	logged  time.Time          // guarded by mu: when the last drop was logged
	tcp     map[netip.Addr]int // guarded by mu: open TCP connections per source
	tcpAll  int                // guarded by mu
}

// New builds a Server. It does not listen.
func New(cfg Config) *Server {
	s := &Server{cfg: cfg, log: cfg.Logger, pending: make(chan struct{}, maxPending),
		counts: map[netip.Addr]int{}, tcp: map[netip.Addr]int{}}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.cfg.Now == nil {
		s.cfg.Now = time.Now
	}
	if s.cfg.Rate <= 0 {
		s.cfg.Rate = DefaultRate
	}
	return s
}

// allow counts a query of src against its rate.
func (s *Server) allow(src netip.Addr) bool {
	now := s.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if sec := now.Unix(); sec != s.sec {
		s.sec = sec
		clear(s.counts)
	}
	if s.counts[src] >= s.cfg.Rate {
		s.dropLocked(now, src, "over its rate")
		return false
	}
	s.counts[src]++
	return true
}

// dropLocked counts a dropped query, and says so at most every 10 s.
func (s *Server) dropLocked(now time.Time, src netip.Addr, why string) {
	s.dropped++
	if now.Sub(s.logged) >= 10*time.Second {
		s.log.Warn("dns: queries dropped unanswered", "dropped", s.dropped, "last_source", src.String(), "why", why)
		s.dropped, s.logged = 0, now
	}
}

// answer answers one message from src, or returns nil to drop it; the record is started once
// the reply is built (the caller sends it).
func (s *Server) answer(msg []byte, src netip.Addr, tcp bool) []byte {
	if len(msg) > MaxMessage || !s.allow(src) {
		return nil
	}
	st := Known
	if s.cfg.Status != nil {
		st = s.cfg.Status(src)
	}
	reply, o := Answer(msg, s.cfg.Addr, st)
	if reply == nil {
		return nil
	}
	if s.cfg.Record != nil {
		select {
		case s.pending <- struct{}{}:
		default:
			s.mu.Lock()
			s.dropLocked(s.cfg.Now(), src, "too many records being written")
			s.mu.Unlock()
			return nil
		}
		q := Query{Source: src, TCP: tcp, Outcome: o}
		go func() {
			defer func() { <-s.pending }()
			s.cfg.Record(q)
		}()
	}
	return reply
}

// ServeUDP answers the queries pc receives until ctx ends (then it closes pc).
func (s *Server) ServeUDP(ctx context.Context, pc net.PacketConn) error {
	stop := context.AfterFunc(ctx, func() { pc.Close() })
	defer stop()
	buf := make([]byte, MaxMessage+1)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		ap, ok := addrOf(from)
		if !ok {
			continue
		}
		if reply := s.answer(buf[:n], ap.Addr(), false); reply != nil {
			pc.WriteTo(reply, from)
		}
	}
}

// ServeTCP answers queries on the connections l accepts until ctx ends (then it closes l and
// them): each query and answer with its two-byte length (RFC 1035 4.2.2), several on one
// connection, each query whole within tcpIdle of the connection's start or the last answer.
func (s *Server) ServeTCP(ctx context.Context, l net.Listener) error {
	var wg sync.WaitGroup
	conns := map[net.Conn]struct{}{}
	var cmu sync.Mutex
	stop := context.AfterFunc(ctx, func() {
		l.Close()
		cmu.Lock()
		for c := range conns {
			c.Close()
		}
		cmu.Unlock()
	})
	defer func() { stop(); wg.Wait() }()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			time.Sleep(10 * time.Millisecond) // out of file descriptors and the like
			continue
		}
		ap, ok := addrOf(c.RemoteAddr())
		if !ok || !s.openTCP(ap.Addr()) {
			c.Close()
			continue
		}
		cmu.Lock()
		conns[c] = struct{}{}
		cmu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.serveConn(c, ap.Addr())
			c.Close()
			s.closeTCP(ap.Addr())
			cmu.Lock()
			delete(conns, c)
			cmu.Unlock()
		}()
	}
}

func (s *Server) openTCP(src netip.Addr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tcpAll >= maxTCPConns || s.tcp[src] >= maxTCPConnsPerSource {
		s.dropLocked(s.cfg.Now(), src, "too many TCP connections")
		return false
	}
	s.tcpAll++
	s.tcp[src]++
	return true
}

func (s *Server) closeTCP(src netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tcpAll--
	if s.tcp[src]--; s.tcp[src] <= 0 {
		delete(s.tcp, src)
	}
}

// serveConn answers the queries of one TCP connection until it ends, sends a query over
// MaxMessage, or one the server drops.
func (s *Server) serveConn(c net.Conn, src netip.Addr) {
	buf := make([]byte, MaxMessage)
	for {
		c.SetReadDeadline(time.Now().Add(tcpIdle))
		var l [2]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint16(l[:]))
		if n > MaxMessage {
			return
		}
		if _, err := io.ReadFull(c, buf[:n]); err != nil {
			return
		}
		reply := s.answer(buf[:n], src, true)
		if reply == nil {
			return
		}
		c.SetWriteDeadline(time.Now().Add(tcpIdle))
		out := binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(reply)), uint16(len(reply)))
		if _, err := c.Write(append(out, reply...)); err != nil {
			return
		}
	}
}

func addrOf(a net.Addr) (netip.AddrPort, bool) {
	switch a := a.(type) {
	case *net.UDPAddr:
		ap := a.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), true
	case *net.TCPAddr:
		ap := a.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), true
	}
	ap, err := netip.ParseAddrPort(a.String())
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), err == nil
}
