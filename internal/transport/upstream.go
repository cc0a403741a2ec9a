package transport

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The gate's own HTTP/1.1 client to origins: a request is written to a pooled connection and
// its answer read on the goroutine that serves the agent's request. net/http's transport does
// the same work on two more goroutines per connection (a read loop and a write loop) and hands
// every request and answer between them; on keep-alive traffic those hand-offs are a tenth of
// the gate's CPU. The transport stays for what this client does not do: HTTP/2 to origins that
// offer it (a connection to an https origin offers h2 and http/1.1 by ALPN; an origin that
// picks h2 is remembered and its requests go to the transport), WebSocket upgrades,
// Expect: 100-continue, and bodies over upMaxBody. Both dial through the floor
// (egress.Dialer.DialContext, with the request's checked target) and verify an origin's
// certificate with the same TLS configuration.

// The upstream pool: idle connections kept in all and per host (net/http's transport, for the
// origins it serves, keeps as many), and TLS sessions remembered.
const (
	UpstreamIdle        = 1024
	UpstreamIdlePerHost = 256
	UpstreamSessions    = 1024
)

// IsTimeout reports an error of a deadline passed.
func IsTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// upMaxBody is the largest request body this client sends (written whole before the answer is
// read: a body that fits the socket's buffers cannot block on an origin that answers first).
const upMaxBody = 64 << 10

// UpstreamIdleTimeout is how long an idle pooled connection is kept (the transport's
// IdleConnTimeout).
const UpstreamIdleTimeout = 90 * time.Second

// Upstream is the pool of HTTP/1.1 connections to origins.
type Upstream struct {
	dial    func(ctx context.Context, network, addr string) (net.Conn, error)
	tlsConf *tls.Config // the transport's: roots, the weak-key check, the session cache
	now     func() time.Time

	mu      sync.Mutex
	idle    map[string][]*upConn // guarded by mu: per origin ("https://host:port"), the last put last
	total   int                  // guarded by mu: idle connections in all
	sweeper bool                 // guarded by mu: the sweep of expired connections is scheduled
	gen     uint64               // guarded by mu: CloseIdle's count; a connection of an older one is not pooled
	// speaks is what each https origin chose by ALPN: speaksH1 or speaksH2; guarded by mu, at
	// most upstreamKnown (then it starts again).
	speaks map[string]uint8
}

const (
	speaksUnknown uint8 = iota
	speaksH1
	speaksH2
)

// ErrSpeaksH2 is an origin that chose HTTP/2: the request goes to net/http's transport.
var ErrSpeaksH2 = errors.New("the origin speaks HTTP/2")

// upstreamKnown bounds the https origins remembered by what they speak.
const upstreamKnown = 4096

// The bounds on what an origin sends before its answer's body.
const (
	upMaxHead = 1 << 20 // the answer's head, 1xx answers included
	upMax1xx  = 5       // informational answers before the final one
)

// upConn is one pooled connection to an origin.
type upConn struct {
	key    string
	conn   net.Conn        // TLS or TCP
	raw    syscall.RawConn // the TCP connection under it, for the check before reuse; nil: none
	tls    bool
	br     *bufio.Reader
	bw     *bufio.Writer
	idleAt time.Time
	reused bool
	gen    uint64 // the pool's generation when it was dialled
	head   *headLimit
	// The check before reuse: peek is bound once at the dial (a closure made at each check
	// would cost three allocations a request), and leaves its result in peeked and peekErr.
	peek    func(fd uintptr) bool
	peeked  int
	peekErr error
}

// peekFD looks, without waiting, for a byte waiting on the socket.
func (pc *upConn) peekFD(fd uintptr) bool {
	var b [1]byte
	pc.peeked, _, pc.peekErr = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return true
}

// headLimit bounds the bytes read from a connection while an answer's head is read.
type headLimit struct {
	r    io.Reader
	left int64 // < 0: no bound (the body is being read)
}

var errHeadTooLarge = errors.New("the origin's answer head is over 1 MiB")

func (l *headLimit) Read(p []byte) (int, error) {
	if l.left == 0 {
		return 0, errHeadTooLarge
	}
	if l.left > 0 && int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	if l.left > 0 {
		l.left -= int64(n)
	}
	return n, err
}

func NewUpstream(dial func(ctx context.Context, network, addr string) (net.Conn, error), tlsConf *tls.Config) *Upstream {
	return &Upstream{dial: dial, tlsConf: tlsConf, now: time.Now, idle: map[string][]*upConn{}, speaks: map[string]uint8{}}
}

// originKey is the pool's key of r's origin, and the address dialled.
func originKey(r *http.Request) (key, addr string) {
	host := r.URL.Host
	if _, _, err := net.SplitHostPort(host); err != nil {
		port := "80"
		if r.URL.Scheme == "https" {
			port = "443"
		}
		host = net.JoinHostPort(strings.Trim(host, "[]"), port)
	}
	return r.URL.Scheme + "://" + host, host
}

// Takes reports whether this client sends r: an http origin, or an https origin not known to
// speak HTTP/2, and a request with no upgrade, no Expect and a body of known length up to
// upMaxBody.
func (c *Upstream) Takes(r *http.Request) bool {
	switch {
	case r.URL.Scheme != "http" && r.URL.Scheme != "https",
		r.Header.Get("Upgrade") != "" || r.Header.Get("Expect") != "",
		r.Body != nil && r.Body != http.NoBody && (r.ContentLength < 0 || r.ContentLength > upMaxBody),
		len(r.TransferEncoding) > 0:
		return false
	case r.URL.Scheme == "http":
		return true
	}
	key, _ := originKey(r)
	return c.speaksOf(key) != speaksH2
}

func (c *Upstream) speaksOf(key string) uint8 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.speaks[key]
}

func (c *Upstream) remember(key string, v uint8) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.speaks) >= upstreamKnown {
		clear(c.speaks)
	}
	c.speaks[key] = v
}

// errUpstreamClosed is an origin that closed a pooled connection before answering.
var errUpstreamClosed = errors.New("the origin closed the connection before answering")

// RoundTrip sends r and reads its answer's head; the body is read from the connection as the
// caller reads it, and the connection pooled again at its end.
func (c *Upstream) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil && r.Body != http.NoBody {
		b, err := io.ReadAll(io.LimitReader(r.Body, upMaxBody+1))
		r.Body.Close()
		if err != nil {
			return nil, err
		}
		if int64(len(b)) != r.ContentLength {
			return nil, errors.New("the request body is not as long as its Content-Length")
		}
		body = b
	}
	ctx := r.Context()
	for attempt := 0; ; attempt++ {
		pc, err := c.get(ctx, r)
		if errors.Is(err, ErrSpeaksH2) && body != nil {
			r.Body = io.NopCloser(bytes.NewReader(body)) // for the transport
		}
		if err != nil {
			return nil, err
		}
		resp, err := c.send(ctx, pc, r, body)
		if err == nil {
			return resp, nil
		}
		pc.conn.Close()
		// A pooled connection the origin closed while it idled: once more on a new one, for a
		// request that may be sent twice (as net/http's transport retries).
		if attempt == 0 && pc.reused && errors.Is(err, errUpstreamClosed) && replayable(r) && ctx.Err() == nil {
			continue
		}
		return nil, err
	}
}

// replayable: a request that can be sent again when a reused connection failed under it.
func replayable(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return r.Header.Get("Idempotency-Key") != "" || r.Header.Get("X-Idempotency-Key") != ""
}

// send writes r on pc and reads the answer's head.
func (c *Upstream) send(ctx context.Context, pc *upConn, r *http.Request, body []byte) (*http.Response, error) {
	stop := context.AfterFunc(ctx, func() { pc.conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if body != nil {
		r.Body = io.NopCloser(bytes.NewReader(body))
	} else {
		r.Body = http.NoBody
	}
	werr := r.Write(pc.bw)
	if werr == nil {
		werr = pc.bw.Flush()
	}
	// The origin may have answered (and closed) before taking the whole request: its answer
	// is read even when the write failed.
	var resp *http.Response
	var err error
	pc.head.left = upMaxHead
	for n := 0; ; n++ {
		resp, err = http.ReadResponse(pc.br, r)
		if err != nil || resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		if n == upMax1xx {
			err = errors.New("the origin sent too many informational (1xx) answers")
			break
		}
	}
	pc.head.left = -1
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if werr != nil || errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
			return nil, errors.Join(errUpstreamClosed, err)
		}
		return nil, err
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		resp.Body.Close()
		return nil, errors.New("the origin switched protocols on a request that asked for no upgrade")
	}
	keep := werr == nil && !resp.Close && !r.Close
	resp.Body = &upBody{c: c, pc: pc, rc: resp.Body, keep: keep}
	return resp, nil
}

// upBody is an answer's body read from its pooled connection: at its end the connection goes
// back to the pool (when the answer and the request let it); closed before its end, the
// connection is closed.
type upBody struct {
	c    *Upstream
	pc   *upConn
	rc   io.ReadCloser
	keep bool
	done bool
}

func (b *upBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	n, err := b.rc.Read(p)
	if err != nil {
		b.finish(errors.Is(err, io.EOF))
	}
	return n, err
}

func (b *upBody) Close() error {
	b.finish(false)
	return nil
}

func (b *upBody) finish(atEnd bool) {
	if b.done {
		return
	}
	b.done = true
	b.rc.Close()
	if atEnd && b.keep && b.pc.br.Buffered() == 0 {
		b.c.put(b.pc)
		return
	}
	b.pc.conn.Close()
}

// get returns a live pooled connection to r's origin or dials a new one.
func (c *Upstream) get(ctx context.Context, r *http.Request) (*upConn, error) {
	key, addr := originKey(r)
	for {
		pc := c.take(key)
		if pc == nil {
			break
		}
		if c.alive(pc) {
			pc.reused = true
			return pc, nil
		}
		pc.conn.Close()
	}
	return c.dialConn(ctx, key, addr, r.URL.Scheme == "https", r.URL.Hostname())
}

func (c *Upstream) take(key string) *upConn {
	c.mu.Lock()
	defer c.mu.Unlock()
	list := c.idle[key]
	for len(list) > 0 {
		pc := list[len(list)-1]
		list = list[:len(list)-1]
		c.total--
		if c.now().Sub(pc.idleAt) < UpstreamIdleTimeout {
			c.setList(key, list)
			return pc
		}
		pc.conn.Close()
	}
	c.setList(key, list)
	return nil
}

func (c *Upstream) setList(key string, list []*upConn) {
	if len(list) == 0 {
		delete(c.idle, key)
		return
	}
	c.idle[key] = list
}

// put pools pc, unless its origin already has UpstreamIdlePerHost idle or the pool has
// UpstreamIdle.
func (c *Upstream) put(pc *upConn) {
	pc.idleAt = c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	list := c.idle[pc.key]
	if len(list) >= UpstreamIdlePerHost || c.total >= UpstreamIdle || pc.gen != c.gen {
		pc.conn.Close()
		return
	}
	c.idle[pc.key] = append(list, pc)
	c.total++
	if !c.sweeper {
		c.sweeper = true
		time.AfterFunc(UpstreamIdleTimeout, c.sweep)
	}
}

// sweep closes the connections idle past UpstreamIdleTimeout.
func (c *Upstream) sweep() {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	for key, list := range c.idle {
		c.retain(key, list, func(_ int, pc *upConn) bool { return now.Sub(pc.idleAt) < UpstreamIdleTimeout })
	}
	c.sweeper = c.total > 0
	if c.sweeper {
		time.AfterFunc(UpstreamIdleTimeout/2, c.sweep)
	}
}

// TrimIdle closes each origin's idle connections past the keep it put back last: after a burst,
// a quiet gate need not hold a connection (and its TLS state and buffers) for every client the
// burst had.
func (c *Upstream) TrimIdle(keep int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key, list := range c.idle {
		if n := len(list) - keep; n > 0 {
			c.retain(key, list, func(i int, _ *upConn) bool { return i >= n })
		}
	}
}

// CloseIdle closes every pooled connection (a new policy: new connections are checked under it).
func (c *Upstream) CloseIdle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	for key, list := range c.idle {
		c.retain(key, list, func(int, *upConn) bool { return false })
	}
}

// retain keeps, in order, the idle connections of key's list for which keep says so (given each
// one's index), and closes the others. Called with c.mu held.
func (c *Upstream) retain(key string, list []*upConn, keep func(i int, pc *upConn) bool) {
	kept := list[:0]
	for i, pc := range list {
		if keep(i, pc) {
			kept = append(kept, pc)
			continue
		}
		pc.conn.Close()
		c.total--
	}
	clear(list[len(kept):]) // the closed ones are not kept alive by the list's array
	c.setList(key, kept)
}

// alive checks a pooled connection before it carries a request: one the origin has closed (or
// that has bytes no request asked for) is not used. On TLS, bytes waiting may be the origin's
// session tickets: they are read, and what follows decides.
func (c *Upstream) alive(pc *upConn) bool {
	if pc.br.Buffered() > 0 {
		return pc.tls && c.drainTLS(pc)
	}
	if pc.raw == nil {
		return true
	}
	if err := pc.raw.Read(pc.peek); err != nil {
		return false
	}
	n, perr := pc.peeked, pc.peekErr
	switch {
	case errors.Is(perr, syscall.EAGAIN):
		return true // nothing waiting: open
	case perr != nil || n == 0:
		return false // closed or failed
	case pc.tls:
		return c.drainTLS(pc)
	}
	return false // plain HTTP: bytes no request asked for
}

// drainTLS reads what is waiting on a pooled TLS connection: post-handshake messages leave it
// usable; a close or application data does not.
func (c *Upstream) drainTLS(pc *upConn) bool {
	pc.conn.SetReadDeadline(time.Now().Add(time.Millisecond))
	_, err := pc.br.Peek(1)
	pc.conn.SetReadDeadline(time.Time{})
	return err != nil && IsTimeout(err)
}

// dialConn dials addr through the floor (the request's checked target is in ctx) and, for https,
// completes the TLS handshake: ErrSpeaksH2 when the origin chose h2.
func (c *Upstream) dialConn(ctx context.Context, key, addr string, https bool, host string) (*upConn, error) {
	c.mu.Lock()
	gen := c.gen
	c.mu.Unlock()
	conn, err := c.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	pc := &upConn{key: key, conn: conn, tls: https, gen: gen}
	if sc, ok := rawTCP(conn); ok {
		pc.raw, pc.peek = sc, pc.peekFD
	}
	if https {
		conf := c.tlsConf.Clone()
		conf.ServerName = host
		// Both, always: an origin that picks h2 goes to the transport from now on.
		conf.NextProtos = []string{"h2", "http/1.1"}
		tc := tls.Client(conn, conf)
		hctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			conn.Close()
			return nil, err
		}
		if tc.ConnectionState().NegotiatedProtocol == "h2" {
			c.remember(key, speaksH2)
			tc.Close()
			return nil, ErrSpeaksH2
		}
		c.remember(key, speaksH1)
		pc.conn = tc
	}
	pc.head = &headLimit{r: pc.conn, left: -1}
	pc.br = bufio.NewReaderSize(pc.head, 4<<10)
	pc.bw = bufio.NewWriterSize(pc.conn, 4<<10)
	return pc, nil
}

// rawTCP finds the TCP connection under the dialler's wrappers.
func rawTCP(c net.Conn) (syscall.RawConn, bool) {
	for i := 0; i < 4; i++ {
		if tc, ok := c.(*net.TCPConn); ok {
			rc, err := tc.SyscallConn()
			return rc, err == nil
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return nil, false
		}
		c = u.NetConn()
	}
	return nil, false
}
