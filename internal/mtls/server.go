package mtls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// ServerOptions configures a Server.
type ServerOptions struct {
	// Source is the server's identity and what it trusts. Required.
	Source *Source
	// Allow is the identities admitted; every other peer is refused in the handshake.
	Allow Allow
	// Name names the listener in the log ("console", "hub").
	Name string
	// Log gets a line per refused peer of the fleet, and one every 10 s counting the strangers.
	// Nil: none.
	Log *slog.Logger
	// Refused, when not nil, is told of every refused peer whose chain reaches the fleet's CA
	// (refused for its identity, expiry or revocation), and of every connection closed because
	// its peer became refused; strangers are counted in the log only.
	Refused func(remote string, r *Refusal)
}

// Server accepts TLS connections from the identities it admits. Its handshake requires a client
// certificate, checks it in VerifyConnection against the files as they are now (Source), and
// never resumes a session: no session ticket is ever issued, since Go would not check a resumed
// session's chain again (revocation, the allowed identities). Watch closes the connections whose
// peer became refused: revoked, no longer admitted, or expired.
type Server struct {
	o   ServerOptions
	log *slog.Logger

	mu      sync.Mutex
	conns   map[*conn]struct{} // guarded by mu: connections accepted and not closed
	unknown int                // guarded by mu: strangers refused since the last log line
	logged  time.Time          // guarded by mu: when strangers were last logged
}

// NewServer returns a server for o.
func NewServer(o ServerOptions) *Server {
	s := &Server{o: o, log: o.Log, conns: map[*conn]struct{}{}}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s
}

// conn is an accepted connection, under its TLS layer.
type conn struct {
	net.Conn
	s    *Server
	once sync.Once

	// guarded by s.mu:
	id       ID
	chain    []*x509.Certificate
	gen      uint64    // the Source's generation the peer was verified against
	notAfter time.Time // when the first certificate of its chain expires
	verified bool
}

func (c *conn) Close() error {
	err := net.ErrClosed
	c.once.Do(func() {
		c.s.mu.Lock()
		delete(c.s.conns, c)
		c.s.mu.Unlock()
		err = c.Conn.Close()
	})
	return err
}

// NetConn is the connection under it (connlimit's, whose caps it is counted in).
func (c *conn) NetConn() net.Conn { return c.Conn }

type listener struct {
	net.Listener
	s   *Server
	cfg *tls.Config
}

// Listener wraps l: its connections are TLS, served with the server's configuration. A
// connection of l with a Trust method (connlimit's) is trusted once its peer is verified.
func (s *Server) Listener(l net.Listener) net.Listener {
	return &listener{Listener: l, s: s, cfg: &tls.Config{
		MinVersion:             tls.VersionTLS13,
		SessionTicketsDisabled: true,
		ClientAuth:             tls.RequireAnyClientCert,
		GetConfigForClient:     s.configFor,
	}}
}

func (l *listener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	c := &conn{Conn: nc, s: l.s}
	l.s.mu.Lock()
	l.s.conns[c] = struct{}{}
	l.s.mu.Unlock()
	return tls.Server(c, l.cfg), nil
}

// configFor is the configuration of one handshake: the certificate and the trust as the files
// are now.
func (s *Server) configFor(hello *tls.ClientHelloInfo) (*tls.Config, error) {
	c, _ := hello.Conn.(*conn)
	return &tls.Config{
		MinVersion:             tls.VersionTLS13,
		SessionTicketsDisabled: true,
		Certificates:           []tls.Certificate{*s.o.Source.certificate()},
		ClientAuth:             tls.RequireAnyClientCert,
		NextProtos:             []string{"http/1.1"},
		VerifyConnection:       func(cs tls.ConnectionState) error { return s.verifyConn(c, cs) },
	}, nil
}

// errResumed refuses a resumed session, which the configuration never allows: a resumed
// session's chain is not checked again.
var errResumed = errors.New("a resumed TLS session; every connection must present its certificate")

func (s *Server) verifyConn(c *conn, cs tls.ConnectionState) error {
	remote := ""
	if c != nil {
		remote = c.RemoteAddr().String()
	}
	if cs.DidResume {
		s.refused(remote, &Refusal{Reason: errResumed.Error()})
		return errResumed
	}
	src := s.o.Source
	st := src.st.Load()
	id, notAfter, ref := st.verify(cs.PeerCertificates, x509.ExtKeyUsageClientAuth, s.o.Allow, src.now())
	if ref != nil {
		s.refused(remote, ref)
		return ref
	}
	if c != nil {
		s.mu.Lock()
		c.id, c.chain, c.gen, c.notAfter, c.verified = id, cs.PeerCertificates, st.gen, notAfter, true
		s.mu.Unlock()
		if t, ok := c.Conn.(interface{ Trust() }); ok {
			t.Trust()
		}
	}
	return nil
}

// strangersEvery is how often at most the log counts the strangers refused.
const strangersEvery = 10 * time.Second

func (s *Server) refused(remote string, r *Refusal) {
	if !r.Fleet {
		now := time.Now()
		s.mu.Lock()
		s.unknown++
		n := s.unknown
		due := now.Sub(s.logged) >= strangersEvery
		if due {
			s.unknown, s.logged = 0, now
		}
		s.mu.Unlock()
		if due {
			s.log.Warn("mtls: peers without a certificate of the fleet refused", "listener", s.o.Name, "count", n, "last_remote", remote, "last_reason", r.Error())
		}
		return
	}
	s.log.Warn("mtls: peer refused", "listener", s.o.Name, "remote", remote, "id", r.ID, "reason", r.Reason)
	if s.o.Refused != nil {
		s.o.Refused(remote, r)
	}
}

// Watch reads the files again when they change and closes every connection whose peer is now
// refused (revoked, no longer admitted) or whose chain has expired; it checks every second
// until ctx ends.
func (s *Server) Watch(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.Recheck()
		}
	}
}

// Recheck is one round of Watch.
func (s *Server) Recheck() {
	src := s.o.Source
	src.Refresh()
	st := src.st.Load()
	now := src.now()
	type closing struct {
		c   *conn
		ref *Refusal
	}
	var close []closing
	s.mu.Lock()
	for c := range s.conns {
		if !c.verified {
			continue
		}
		if c.gen != st.gen {
			_, notAfter, ref := st.verify(c.chain, x509.ExtKeyUsageClientAuth, s.o.Allow, now)
			if ref != nil {
				close = append(close, closing{c, ref})
				continue
			}
			c.gen, c.notAfter = st.gen, notAfter
		}
		if now.After(c.notAfter) {
			close = append(close, closing{c, &Refusal{ID: c.id.String(), Fleet: true, Reason: "the certificate expired at " + c.notAfter.UTC().Format(time.RFC3339) + " while connected"}})
		}
	}
	s.mu.Unlock()
	for _, cl := range close {
		cl.ref.Reason = "connection closed: " + cl.ref.Reason
		s.refused(cl.c.RemoteAddr().String(), cl.ref)
		cl.c.Close()
	}
}

// Connections is how many connections the server holds, verified or not.
func (s *Server) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

type peerKey struct{}

// ConnContext is an http.Server ConnContext that lets Peer find a request's verified identity.
func ConnContext(ctx context.Context, nc net.Conn) context.Context {
	if tc, ok := nc.(*tls.Conn); ok {
		if c, ok := tc.NetConn().(*conn); ok {
			return context.WithValue(ctx, peerKey{}, c)
		}
	}
	return ctx
}

// Peer is the verified identity of the peer a request came from (ctx is the request's), for a
// server whose listener is a Server's and whose ConnContext is this package's; ok is false for
// any other connection.
func Peer(ctx context.Context) (ID, bool) {
	c, ok := ctx.Value(peerKey{}).(*conn)
	if !ok {
		return ID{}, false
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if !c.verified {
		return ID{}, false
	}
	return c.id, true
}

// PeerOf is Peer for a request.
func PeerOf(r *http.Request) (ID, bool) { return Peer(r.Context()) }

// ClientConfig is a TLS client configuration that presents s's identity and admits only servers
// whose identity allow admits, their chain checked against the fleet's CA as the files are now
// (not against a host name: the identity is the name). It keeps no session to resume.
func (s *Source) ClientConfig(allow Allow) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		// The chain is verified in VerifyConnection, against the fleet's CA and the identities
		// allow admits, never a host name.
		InsecureSkipVerify: true,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return s.certificate(), nil
		},
		NextProtos: []string{"http/1.1"},
		VerifyConnection: func(cs tls.ConnectionState) error {
			if cs.DidResume {
				return errResumed
			}
			s.Refresh()
			_, _, ref := s.st.Load().verify(cs.PeerCertificates, x509.ExtKeyUsageServerAuth, allow, s.now())
			if ref != nil {
				return ref
			}
			return nil
		},
	}
}
