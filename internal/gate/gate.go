// Package gate is the forward proxy that every agent request goes through: it decides each
// request against the policy the console serves and lets out only what is free.
package gate

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/budget"
	"github.com/lockhttp/lockhttp/internal/connlimit"
	"github.com/lockhttp/lockhttp/internal/egress"
	"github.com/lockhttp/lockhttp/internal/exfil"
	"github.com/lockhttp/lockhttp/internal/framing"
	"github.com/lockhttp/lockhttp/internal/judge"
	"github.com/lockhttp/lockhttp/internal/metrics"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/transport"
)

// Auditor keeps the audit records. *audit.Writer is one.
type Auditor interface {
	// Write returns once the record is on disk.
	Write(ctx context.Context, r *audit.Record) error
	// Append returns once the record is in its file (the kernel has it: a killed gate loses
	// it not), its fsync following soon.
	Append(ctx context.Context, r *audit.Record) error
	// Submit queues the record without waiting.
	Submit(r *audit.Record)
	// Healthy is nil while writes succeed.
	Healthy() error
}

// Config is what a Gate needs.
type Config struct {
	Logger *slog.Logger
	Audit  Auditor
	Dialer *egress.Dialer
	// RootCAs verifies origins' certificates. Nil: the system roots.
	RootCAs *x509.CertPool
	// Now is the clock. Nil: time.Now.
	Now func() time.Time
	// ReadHeaderTimeout bounds how long a client may take to send a request head. Zero: 30s.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes a client connection idle between requests. Zero: 2m.
	IdleTimeout time.Duration
	// BodyStall refuses a request body that sends nothing for this long (E_BODY_TIMEOUT).
	// Zero: 10s.
	BodyStall time.Duration
	// BodyGrace is how long a body may take before the policy's body_min_rate applies. Zero: 5s.
	BodyGrace time.Duration
	// MaxConns bounds the client connections the gate holds; at it, a new one takes the place
	// of the oldest. Zero: 4096.
	MaxConns int
	// MaxConnsPerSource bounds them per source address (an IPv6 /64); past it, that source's
	// oldest connection is closed. Zero: 256.
	MaxConnsPerSource int
	// Certs issues certificates for decrypted tunnels. Nil: no decryption; every CONNECT is
	// decided at the domain.
	Certs Certs
	// Hub holds ASK tickets. Nil: every ASK is refused at once with E_NO_CONSOLE.
	Hub Hub
	// SecretsFile is the gate's secrets file (the values it injects). Empty: none; an inject
	// rule then refuses with E_INJECT.
	SecretsFile string
	// Refresh fetches the policy from the console at once and returns when it is applied (or
	// ctx ends): after an approval that bound a credential, so that the container's next
	// request finds the binding. Nil: the next poll brings it.
	Refresh func(ctx context.Context)
	// Metrics counts requests, decisions and upstream answers (metrics.go). Nil: nothing counted.
	Metrics *metrics.Gate
	// Tracer exports a span of every finished request (tracing.go). Nil: none.
	Tracer Tracer
	// Rand is the randomness of the mask keys of the WebSocket frames the gate sends to origins
	// (websocket.go); safe for concurrent use. Nil: crypto/rand.Reader.
	Rand io.Reader
	// HeldDir is the journal of held requests (heldjournal.go): a file for each request held
	// for a human, so that a killed gate's next start records what it held (RecordCut). Empty:
	// no journal; the requests a killed gate held have no record.
	HeldDir string
}

// Gate decides and forwards requests. Create it with New, give it a policy with SetPolicy and
// serve it with Serve.
type Gate struct {
	log       *slog.Logger
	srvLog    *log.Logger // net/http's error log, into log at debug level
	audit     Auditor
	certs     Certs
	hub       Hub
	dialer    *egress.Dialer
	now       func() time.Time
	cfg       Config
	pol       atomic.Pointer[policy.Policy]
	insp      atomic.Pointer[judge.Checks] // the policy's detector, injected values and Claude credentials
	transport *http.Transport
	upstream  *transport.Upstream // HTTP/1.1 to origins on the request's goroutine
	h1        transport.H1Config  // the HTTP/1.1 server's, on the listener and in tunnels
	idPrefix  string
	idSeq     atomic.Uint64
	// waits counts the requests started (idSeq) that went on to wait: held for a human, or a
	// CONNECT whose tunnel now waits for its own requests. ReturnMemoryWhenQuiet tells them from
	// requests at work.
	waits atomic.Uint64
	// unrecorded counts the answers whose audit record could not be written since start: cut
	// (a forwarded answer) or refused without a request id (an answer of the gate's own).
	unrecorded atomic.Uint64

	exfil  *exfil.Scorer   // the exfiltration heuristics' memory of hosts, subdomains and bytes
	budget *budget.Counter // each container's counts against the policy's [[budget]] sections
	held   heldBytes       // the body bytes held for decisions
	holds  *heldJournal    // the requests held for a human, and their journal
	mcp    *mcpState       // the MCP tools' pins and the injection phrases for tickets (mcppins.go)

	// stopCtx ends when Serve's context does: the requests held for a human are then answered
	// and recorded as cut by the restart (askHuman1).
	stopCtx context.Context
	stopNow context.CancelFunc

	mu      sync.Mutex
	tunnels map[net.Conn]struct{} // guarded by mu: hijacked client connections, closed on shutdown
	// tunnelTLS is what every decrypted tunnel's TLS configuration is cloned from: its
	// session-ticket keys, so that a client's next tunnel resumes its session (openTunnel).
	tunnelTLS *tls.Config

	conns atomic.Pointer[connlimit.Listener] // the client connections Serve holds, for the metrics
	// policyChanged is signalled when a policy of another version is set: the transparent
	// listeners follow its allow_ports.
	policyChanged chan struct{}
	// transparentPorts are the ports the transparent listeners serve now (ServeTransparent).
	transparentPorts atomic.Pointer[[]int]
}

// New builds a Gate. It does not listen.
func New(cfg Config) *Gate {
	g := &Gate{
		log:     cfg.Logger,
		audit:   cfg.Audit,
		certs:   cfg.Certs,
		hub:     cfg.Hub,
		dialer:  cfg.Dialer,
		now:     cfg.Now,
		cfg:     cfg,
		tunnels: make(map[net.Conn]struct{}),

		policyChanged: make(chan struct{}, 1),
	}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if g.now == nil {
		g.now = time.Now
	}
	g.srvLog = slog.NewLogLogger(g.log.Handler(), slog.LevelDebug)
	g.h1 = transport.H1Config{Log: g.log, ReadHeaderTimeout: cfg.ReadHeaderTimeout, IdleTimeout: cfg.IdleTimeout}
	g.tunnelTLS = transport.NewTunnelTLS()
	g.exfil = exfil.New(exfil.Config{Now: g.now})
	g.budget = budget.New(budget.Config{Now: g.now})
	g.holds = newHeldJournal(cfg.HeldDir, g.log)
	g.mcp = newMCPState(cfg.HeldDir, g.log)
	g.stopCtx, g.stopNow = context.WithCancel(context.Background())
	var b [4]byte
	rand.Read(b[:])
	g.idPrefix = "r" + hex.EncodeToString(b[:]) + "-"
	g.transport = &http.Transport{
		Proxy:       nil, // the gate's own HTTP(S)_PROXY is ignored: it dials through the floor
		DialContext: g.dialer.DialContext,
		TLSClientConfig: &tls.Config{RootCAs: cfg.RootCAs, MinVersion: tls.VersionTLS12, VerifyConnection: transport.RefuseWeakCertificates,
			// Resumed sessions skip the handshake's key exchange and the chain's verification;
			// VerifyConnection still sees the chain the session was made with.
			ClientSessionCache: tls.NewLRUClientSessionCache(transport.UpstreamSessions)},
		TLSHandshakeTimeout: 15 * time.Second,
		// Agents send to few hosts over many connections: the pool keeps as many idle
		// connections to one host as tunnels a busy agent keeps open, so that keep-alive traffic
		// never pays a new upstream handshake per request.
		MaxIdleConns:          transport.UpstreamIdle,
		MaxIdleConnsPerHost:   transport.UpstreamIdlePerHost,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true, // pass the client's Accept-Encoding and the origin's encoding through
		// HTTP/2 to origins that offer it by ALPN, HTTP/1.1 to the others (and always for a
		// WebSocket upgrade): the dial is still DialContext's, through the floor, and the
		// origin's certificate still passes RootCAs and VerifyConnection.
		ForceAttemptHTTP2: true,
	}
	g.upstream = transport.NewUpstream(g.dialer.DialContext, g.transport.TLSClientConfig)
	return g
}

// SetPolicy swaps the compiled policy atomically; requests already decided keep theirs. Pooled
// upstream connections are dropped, so that every new connection is checked under the new floor.
// The secrets file and the Claude credentials file the policy names are read again.
func (g *Gate) SetPolicy(p *policy.Policy) {
	if p != nil {
		g.insp.Store(g.loadChecks(p))
	}
	old := g.pol.Swap(p)
	if p != nil && (old == nil || old.Version != p.Version) {
		select {
		case g.policyChanged <- struct{}{}:
		default:
		}
	}
	if old != nil && p != nil && old.Version != p.Version {
		g.transport.CloseIdleConnections()
		g.upstream.CloseIdle()
	}
}

// Policy returns the current policy, or nil before the console has served one.
func (g *Gate) Policy() *policy.Policy { return g.pol.Load() }

func (g *Gate) newID() string {
	return g.idPrefix + strconv.FormatUint(g.idSeq.Add(1), 36)
}

// connInfo is what the gate knows about one client connection.
type connInfo struct {
	fc     *framing.Conn
	source netip.Addr
	tunnel *judge.Binding // the decrypted tunnel the connection is inside, or nil
	// transparent is the port of the transparent listener the connection came to (transparent.go);
	// 0: the proxy listener, or a tunnel (whose Binding says whether it is transparent).
	transparent int
	// h2 reports an HTTP/2 connection (inside a decrypted tunnel): fc is nil, and each stream's
	// request has a streamInfo of its own.
	h2 bool
	// hold is the body bytes the request now on an HTTP/1.1 connection holds (one at a time),
	// given back when the proxy is done with it. An HTTP/2 stream's is in its streamInfo.
	hold bodyHold
	// counts is the metrics' counters the connection's last request was counted on.
	counts atomic.Pointer[connCounts]
	// watch returns a context cancelled when the client closes the connection, and the stop of
	// that watch, for a request that waits for a human (h1Conn.watch). Nil: the server's own
	// context says it (net/http's background read, HTTP/2's stream reset).
	watch func(context.Context) (context.Context, func())
}

// isTransparent reports a connection to a transparent listener, or a tunnel opened on one.
func (ci *connInfo) isTransparent() bool {
	return ci.transparent != 0 || ci.tunnel != nil && ci.tunnel.Transparent
}

type connInfoKey struct{}

func infoFrom(ctx context.Context) *connInfo {
	ci, _ := ctx.Value(connInfoKey{}).(*connInfo)
	return ci
}

// Serve accepts proxy clients on l until ctx ends, then shuts down: it stops accepting, lets
// requests in progress finish for a few seconds and closes open tunnels. Each connection is
// served by the gate's own HTTP/1.1 server (serveH1) behind the framing check.
func (g *Gate) Serve(ctx context.Context, l net.Listener) error {
	cl := connlimit.New(l, connlimit.Config{Max: orInt(g.cfg.MaxConns, defaultMaxConns), PerPeer: orInt(g.cfg.MaxConnsPerSource, defaultMaxConnsPerSource),
		Key: sourceKey, Log: g.log, Name: "gate"})
	g.conns.Store(cl)
	conns := transport.NewH1Conns()
	errc := make(chan error, 1)
	go func() { errc <- g.accept(cl, conns) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	cl.Close()
	<-errc
	// The requests held for a human are answered (E_PENDING) and recorded as cut by the
	// restart, before the connections, the tunnels and then the audit close.
	g.stopNow()
	conns.Shutdown(5 * time.Second)
	if !g.holds.waitCut(5 * time.Second) {
		g.log.Warn("gate: stopping before the records of some held requests were written; the next start records them as cut")
	}
	g.closeTunnels()
	return nil
}

// accept serves every connection l accepts until l is closed.
func (g *Gate) accept(l net.Listener, conns *transport.H1Conns) error {
	var backoff time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || isTemporary(err) {
				// Out of file descriptors and the like: wait and try again, as net/http does.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				g.log.Warn("gate: accept failed; retrying", "err", err, "in", backoff)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		fc := framing.NewConn(c, framing.Options{Token: transport.NewToken()})
		ci := &connInfo{fc: fc}
		if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
			ci.source = ap.Addr().Unmap()
		}
		g.serveH1(fc, ci, g, conns, func() {})
	}
}

// isTemporary reports an accept error worth retrying (EMFILE, ENFILE, ECONNABORTED…).
func isTemporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

// The bounds on client connections (Config's MaxConns and MaxConnsPerSource): idle and
// half-open connections from one source cannot take the gate's memory or its file descriptors.
const (
	defaultMaxConns          = 4096
	defaultMaxConnsPerSource = 256
)

// sourceKey is what the connection bounds count a client connection under: its address, as
// [sources] names containers (an IPv6 address by its /64).
func sourceKey(c net.Conn) string {
	ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
	if err != nil {
		return c.RemoteAddr().String()
	}
	a := ap.Addr().Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}

func orInt(n, def int) int {
	if n > 0 {
		return n
	}
	return def
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

func (g *Gate) trackTunnel(c net.Conn, add bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if add {
		g.tunnels[c] = struct{}{}
	} else {
		delete(g.tunnels, c)
	}
}

// tunnelCount is how many hijacked client connections the gate holds.
func (g *Gate) tunnelCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.tunnels)
}

func (g *Gate) closeTunnels() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for c := range g.tunnels {
		c.Close()
	}
}

// ServeHTTP routes: CONNECT to the gate's own tunnel handling, absolute-form requests to the
// proxy, anything else is refused.
func (g *Gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		g.serveConnect(w, r)
		return
	}
	if !r.URL.IsAbs() {
		g.serveNonProxy(w, r)
		return
	}
	g.serveProxy(w, r)
}

// serveProxy forwards r through a refusalWriter that writes a refusal with its reason phrase;
// then it gives back the body bytes r held.
func (g *Gate) serveProxy(w http.ResponseWriter, r *http.Request) {
	if h := holdOf(r.Context()); h != nil {
		defer h.release()
	}
	rw, r := transport.WithRefusalWriter(w, r)
	g.forward(rw, r)
}
