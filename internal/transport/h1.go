package transport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/lockhttp/lockhttp/internal/framing"
)

// The gate's HTTP/1.1 server, on its listener and inside decrypted tunnels: one goroutine reads a
// request, runs the handler on it and writes the answer, then reads the next. net/http's server
// does the same with a second goroutine per request (its background read, which waits on the
// connection while the handler runs) and buffers held for the connection's life; the gate needs
// neither: the framing check (framing.Conn) has already vetted every head before this server
// reads it, the client-gone watch runs only while a request waits for a human (watch), and while
// a connection is idle it holds no buffer of this server's.
//
// What it keeps of net/http's server: the header read and idle timeouts, a 400 for a head
// net/http's parser refuses (no Host, a header name or value it rejects), 505 for another HTTP
// version, 417 for an Expect other than 100-continue, "100 Continue" sent when the handler first
// reads a body that expects it, the answer framed by its Content-Length or chunked (with
// trailers), none for HEAD, 1xx, 204 and 304, Connection: close honoured both ways, Flush, Hijack
// with what was read ahead, read and write deadlines through http.ResponseController, and a
// handler's panic closes its connection only. A body the handler did not read to its end closes
// the connection after the answer (its bytes would be read as the next request).

// H1Config is what the HTTP/1.1 server reads of the gate's configuration.
type H1Config struct {
	Log *slog.Logger
	// ReadHeaderTimeout bounds the wait for a request's head; 0: 30 s.
	ReadHeaderTimeout time.Duration
	// IdleTimeout bounds the wait for the next request on a connection; 0: 2 min.
	IdleTimeout time.Duration
}

// H1Conn is one HTTP/1.1 connection served by Serve.
type H1Conn struct {
	cfg  *H1Config
	all  *H1Conns // the listener's connections, for its shutdown; nil inside a tunnel
	fc   *framing.Conn
	conn *closeSignalConn // fc, running the tunnel's end when closed
	base context.Context  // the requests' parent: it carries what the gate knows of the connection
	h    http.Handler
	src  firstByteReader // what br reads: the byte the idle wait read, then fc
	br   *bufio.Reader   // nil while idle
	bw   *bufio.Writer   // nil while idle
	// hijacked: a handler took the connection over; the server no longer touches it.
	hijacked bool
	body     *h1Body // the current request's body
}

var (
	h1Readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4<<10) }}
	h1Writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4<<10) }}
)

// errClientGone is the cause of a request's context when its client closed the connection
// while the request waited.
var errClientGone = errors.New("the client closed its connection")

// NewH1Conn is the connection fc, whose requests h serves with base as their context's parent;
// end runs once the connection is closed, by this server or by whoever hijacked it. all, when
// not nil, is the set of connections a shutdown closes.
func NewH1Conn(cfg *H1Config, fc *framing.Conn, base context.Context, h http.Handler, all *H1Conns, end func()) *H1Conn {
	c := &H1Conn{cfg: cfg, all: all, fc: fc, conn: &closeSignalConn{Conn: fc, end: end}, base: base, h: h}
	c.src.r = fc
	return c
}

// Serve serves c's requests on a goroutine of its own and returns at once.
func (c *H1Conn) Serve() {
	if c.all != nil && !c.all.add(c) {
		c.conn.Close() // shutting down
		return
	}
	go c.serve()
}

// H1Conns is the connections of one listener, idle or busy, for its shutdown.
type H1Conns struct {
	mu      sync.Mutex
	conns   map[*H1Conn]bool // guarded by mu: connection → idle
	closing bool             // guarded by mu
	empty   chan struct{}    // closed when closing and no connection is left; guarded by mu
}

func NewH1Conns() *H1Conns {
	return &H1Conns{conns: map[*H1Conn]bool{}, empty: make(chan struct{})}
}

func (s *H1Conns) add(c *H1Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.conns[c] = false
	return true
}

// setIdle marks c idle or busy: false when the listener is shutting down and c must close.
func (s *H1Conns) setIdle(c *H1Conn, idle bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.conns[c] = idle
	return !s.closing
}

func (s *H1Conns) remove(c *H1Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
	if s.closing && len(s.conns) == 0 {
		select {
		case <-s.empty:
		default:
			close(s.empty)
		}
	}
}

// shutdown closes the idle connections at once and lets the busy ones finish their request for
// up to timeout; then it closes what is left. Hijacked connections are not its (their owners
// close them).
func (s *H1Conns) Shutdown(timeout time.Duration) {
	s.mu.Lock()
	s.closing = true
	for c, idle := range s.conns {
		if idle {
			c.conn.Close()
		}
	}
	if len(s.conns) == 0 {
		close(s.empty)
	}
	s.mu.Unlock()
	select {
	case <-s.empty:
		return
	case <-time.After(timeout):
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.conn.Close()
	}
}

func (c *H1Conn) serve() {
	defer func() {
		p := recover()
		if p != nil && p != http.ErrAbortHandler {
			c.cfg.Log.Error("panic serving a request; its connection is closed", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		}
		if c.hijacked {
			c.br = nil // the hijacker's now
		}
		c.release()
		if c.all != nil {
			c.all.remove(c)
		}
		if !c.hijacked {
			if p != nil {
				// An answer cut short (forward aborts one whose record could not be
				// written): the client must see it fail, not end.
				resetConn(c.conn)
			}
			c.conn.Close()
		}
	}()
	headerTimeout := orDefault(c.cfg.ReadHeaderTimeout, 30*time.Second)
	idleTimeout := orDefault(c.cfg.IdleTimeout, 2*time.Minute)
	for first := true; ; first = false {
		if !first && !c.idle(idleTimeout) {
			return
		}
		c.fc.SetReadDeadline(time.Now().Add(headerTimeout))
		c.acquireReader()
		req, err := http.ReadRequest(c.br)
		if err != nil {
			c.badRequest(err)
			return
		}
		c.fc.SetReadDeadline(time.Time{})
		ok := c.serveOne(req)
		c.body = nil // the request is done: an idle connection keeps neither it nor its answer
		if !ok {
			return
		}
	}
}

// idle waits up to timeout for the first byte of the next request, holding no buffer: false
// when none came (the client closed, or was idle too long).
func (c *H1Conn) idle(timeout time.Duration) bool {
	if c.all != nil && !c.all.setIdle(c, true) {
		return false // shutting down
	}
	if c.br == nil || c.br.Buffered() == 0 {
		c.release()
		c.fc.SetReadDeadline(time.Now().Add(timeout))
		if c.src.fill() != nil {
			return false
		}
	} // else pipelined: the next request is already read
	return c.all == nil || c.all.setIdle(c, false)
}

func (c *H1Conn) acquireReader() {
	if c.br == nil {
		c.br = h1Readers.Get().(*bufio.Reader)
		c.br.Reset(&c.src)
	}
}

// release gives the connection's buffers back: only between requests, when they hold nothing.
func (c *H1Conn) release() {
	if c.br != nil && c.br.Buffered() == 0 {
		c.br.Reset(nil)
		h1Readers.Put(c.br)
		c.br = nil
	}
	if c.bw != nil {
		c.bw.Reset(nil)
		h1Writers.Put(c.bw)
		c.bw = nil
	}
}

func (c *H1Conn) writer() *bufio.Writer {
	if c.bw == nil {
		c.bw = h1Writers.Get().(*bufio.Writer)
		c.bw.Reset(c.fc)
	}
	return c.bw
}

// badRequest answers a head net/http's parser refused, as net/http's server does, and the
// connection closes. A connection that ended or timed out gets no answer.
func (c *H1Conn) badRequest(err error) {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || IsTimeout(err) || errors.Is(err, net.ErrClosed) {
		return
	}
	c.cfg.Log.Debug("request head refused by the parser", "err", err)
	c.writeError("400 Bad Request", "")
}

// writeError answers with status and closes (the caller returns false): the body is the status,
// then the detail.
func (c *H1Conn) writeError(status, detail string) {
	body := status
	if detail != "" {
		body += ": " + detail
	}
	c.fc.SetWriteDeadline(time.Now().Add(DrainTimeout))
	w := c.writer()
	w.WriteString("HTTP/1.1 " + status + "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n" + body)
	w.Flush()
}

// serveOne runs the handler on req and finishes its answer: true when the connection may carry
// another request.
func (c *H1Conn) serveOne(req *http.Request) bool {
	if req.ProtoMajor != 1 {
		c.writeError("505 HTTP Version Not Supported", "")
		return false
	}
	// The framing check has refused a head with no Host, several or a malformed one
	// (ReadRequest took it out of the header into req.Host).
	if req.ProtoAtLeast(1, 1) && req.Host == "" && req.Method != http.MethodConnect {
		c.writeError("400 Bad Request", "missing required Host header")
		return false
	}
	for k, vv := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			c.writeError("400 Bad Request", "invalid header name")
			return false
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				c.writeError("400 Bad Request", "invalid header value")
				return false
			}
		}
	}
	w := &h1Response{c: c, req: req, header: make(http.Header), contentLength: -1}
	c.body = &h1Body{rc: req.Body, w: w}
	if e := req.Header.Get("Expect"); e != "" {
		if !strings.EqualFold(e, "100-continue") {
			c.writeError("417 Expectation Failed", "")
			return false
		}
		c.body.expect = req.ContentLength != 0
	}
	if req.Body == nil || req.Body == http.NoBody {
		// No body: the handler and the transport see none (http.NoBody), as net/http's
		// server gives it.
		c.body.eof = true
	} else {
		req.Body = c.body
	}
	req.RemoteAddr = c.fc.RemoteAddr().String()
	ctx, cancel := context.WithCancel(c.base)
	defer cancel()
	req = req.WithContext(ctx)
	c.h.ServeHTTP(w, req)
	if c.hijacked {
		return false
	}
	ok := w.finish()
	req.Body.Close()
	if !ok && !c.body.eof && w.err == nil {
		// The client may still be sending the body nobody read: closing at once could reset
		// the connection under the answer. Half-close and give the answer time to arrive, as
		// net/http's server does.
		c.fc.CloseWrite()
		time.Sleep(rstAvoidanceDelay)
	}
	return ok
}

// rstAvoidanceDelay is how long a connection closed with its request's body unread stays open
// after the answer (net/http's server waits as long).
const rstAvoidanceDelay = 500 * time.Millisecond

// Watch returns ctx cancelled when the client closes its connection, and a stop that ends the
// watch: for a request that waits (for a human) with its body read. While the body is not read
// to its end the watch would take its bytes: ctx is returned as it is. The process's one watch
// follows the connection's socket (heldwatch.go), and the server's reader and the framing
// check's buffer, empty, are let go for the hold; without a socket to watch, a goroutine reads
// (watchRead).
func (c *H1Conn) Watch(ctx context.Context) (context.Context, func()) {
	if c.body == nil || !c.body.eof || c.br == nil {
		return ctx, func() {}
	}
	if tc := tcpUnder(c.fc); tc != nil && c.br.Buffered() == 0 {
		wctx, cancel := context.WithCancelCause(ctx)
		if stop, ok := heldWatch.add(tc, func() { cancel(errClientGone) }); ok {
			// The reader holds nothing: let go of it, and of the framing check's buffer (a
			// pipelined request keeps that one); the next request takes them again. Not to
			// the pool: 1,000 requests held at once would keep 1,000 readers there, idle, for
			// two collections.
			c.br.Reset(nil)
			c.br = nil
			c.fc.Release()
			return wctx, func() {
				stop()
				cancel(nil)
			}
		}
		cancel(nil)
	}
	return c.watchRead(ctx)
}

// watchRead is watch with a goroutine of its own, which reads a byte of the connection.
func (c *H1Conn) watchRead(ctx context.Context) (context.Context, func()) {
	wctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Nothing else reads the connection while the request waits: the handler is done with
		// its body and the server reads the next request only after the answer.
		if _, err := c.br.Peek(1); err != nil && !IsTimeout(err) {
			cancel(errClientGone)
		}
	}()
	return wctx, func() {
		c.fc.SetReadDeadline(time.Unix(1, 0))
		<-done
		c.fc.SetReadDeadline(time.Time{})
		cancel(nil)
	}
}

// firstByteReader reads the byte the idle wait read, then from r.
type firstByteReader struct {
	r    io.Reader
	b    [1]byte
	have bool
}

// fill reads one byte from r to hold.
func (f *firstByteReader) fill() error {
	for range 100 {
		n, err := f.r.Read(f.b[:])
		if n == 1 {
			f.have = true
			return nil
		}
		if err != nil {
			return err
		}
	}
	return io.ErrNoProgress
}

func (f *firstByteReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if f.have {
		f.have = false
		p[0] = f.b[0]
		return 1, nil
	}
	return f.r.Read(p)
}

// h1Body is a request's body as the handler reads it: it sends "100 Continue" before the first
// read when the client waits for it, and knows whether it was read to its end.
type h1Body struct {
	rc     io.ReadCloser
	w      *h1Response
	expect bool // the client waits for 100 Continue before it sends the body
	eof    bool
}

func (b *h1Body) Read(p []byte) (int, error) {
	if b.eof {
		return 0, io.EOF
	}
	if b.expect {
		b.expect = false
		if !b.w.wroteHeader {
			w := b.w.c.writer()
			w.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
			if err := w.Flush(); err != nil {
				return 0, err
			}
		}
	}
	n, err := b.rc.Read(p)
	if errors.Is(err, io.EOF) {
		b.eof = true
	}
	return n, err
}

func (b *h1Body) Close() error {
	if b.rc == nil || b.rc == http.NoBody {
		return nil
	}
	return b.rc.Close()
}

// h1Response is the http.ResponseWriter of one request on an H1Conn.
type h1Response struct {
	c             *H1Conn
	req           *http.Request
	header        http.Header
	wroteHeader   bool
	status        int
	contentLength int64 // -1: not declared
	written       int64
	chunked       bool
	noBody        bool     // HEAD, 204, 304: the answer carries no body
	trailers      []string // the trailer names declared before the head was written
	closeAfter    bool     // the connection closes after this answer
	err           error    // a failed write: the connection closes
}

func (w *h1Response) Header() http.Header { return w.header }

func (w *h1Response) WriteHeader(code int) {
	if w.wroteHeader || w.c.hijacked {
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	bw := w.c.writer()
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		// An informational answer goes out at once; the final one follows.
		bw.WriteString("HTTP/1.1 " + strconv.Itoa(code) + " " + statusText(code) + "\r\n")
		w.header.Write(bw)
		bw.WriteString("\r\n")
		w.fail(bw.Flush())
		return
	}
	w.wroteHeader, w.status = true, code
	h := w.header
	w.noBody = w.req.Method == http.MethodHead || code == http.StatusNoContent || code == http.StatusNotModified || code == http.StatusSwitchingProtocols
	// The server frames the answer itself: a Transfer-Encoding the handler set (copied from
	// the origin's) is dropped, a Content-Length it cannot read is dropped.
	delete(h, "Transfer-Encoding")
	if v := h.Get("Content-Length"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			delete(h, "Content-Length")
		} else {
			w.contentLength = n
		}
	}
	for _, v := range h["Trailer"] {
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				w.trailers = append(w.trailers, http.CanonicalHeaderKey(name))
			}
		}
	}
	if HasToken(h["Connection"], "close") || w.req.Close || !w.req.ProtoAtLeast(1, 1) {
		w.closeAfter = true
	}
	switch {
	case w.noBody || code == http.StatusSwitchingProtocols:
		if code == http.StatusNoContent {
			delete(h, "Content-Length")
		}
	case len(w.trailers) > 0 && w.req.ProtoAtLeast(1, 1):
		// Trailers need chunked framing, whatever length was declared.
		delete(h, "Content-Length")
		w.contentLength = -1
		w.chunked = true
	case w.contentLength >= 0:
	case w.req.ProtoAtLeast(1, 1):
		w.chunked = true
	default:
		w.closeAfter = true // an HTTP/1.0 client: the body ends with the connection
	}
	if w.closeAfter && code != http.StatusSwitchingProtocols {
		h.Set("Connection", "close")
	}
	if _, ok := h["Date"]; !ok {
		h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	}
	bw.WriteString("HTTP/1.1 " + strconv.Itoa(code) + " " + statusText(code) + "\r\n")
	for k, vv := range h {
		if k == "Trailer" && !w.chunked || strings.HasPrefix(k, http.TrailerPrefix) || !httpguts.ValidHeaderFieldName(k) {
			continue
		}
		for _, v := range vv {
			bw.WriteString(k)
			bw.WriteString(": ")
			bw.WriteString(headerValue(v))
			bw.WriteString("\r\n")
		}
	}
	if w.chunked {
		bw.WriteString("Transfer-Encoding: chunked\r\n")
	}
	bw.WriteString("\r\n")
}

// statusText is the reason phrase of a status line: the standard one, or as net/http writes
// one it does not know.
func statusText(code int) string {
	if t := http.StatusText(code); t != "" {
		return t
	}
	return "status code " + strconv.Itoa(code)
}

// headerValue is v with the line breaks a header value cannot carry replaced by spaces, as
// net/http writes it.
func headerValue(v string) string {
	if strings.ContainsAny(v, "\r\n") {
		return strings.NewReplacer("\r\n", " ", "\r", " ", "\n", " ").Replace(v)
	}
	return v
}

func (w *h1Response) Write(p []byte) (int, error) {
	if w.c.hijacked {
		return 0, http.ErrHijacked
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return 0, w.err
	}
	if w.noBody {
		if w.req.Method == http.MethodHead {
			return len(p), nil
		}
		return 0, http.ErrBodyNotAllowed
	}
	if w.contentLength >= 0 && w.written+int64(len(p)) > w.contentLength {
		return 0, http.ErrContentLength
	}
	w.written += int64(len(p))
	bw := w.c.bw
	if w.chunked {
		if len(p) == 0 {
			return 0, nil
		}
		bw.WriteString(strconv.FormatInt(int64(len(p)), 16))
		bw.WriteString("\r\n")
		bw.Write(p)
		_, err := bw.WriteString("\r\n")
		w.fail(err)
		return len(p), err
	}
	n, err := bw.Write(p)
	w.fail(err)
	return n, err
}

func (w *h1Response) fail(err error) {
	if err != nil && w.err == nil {
		w.err = err
	}
}

// Flush sends the head and what was written so far.
func (w *h1Response) Flush() {
	if w.c.hijacked {
		return
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	w.fail(w.c.bw.Flush())
}

// FlushError is Flush with its error, for http.ResponseController.
func (w *h1Response) FlushError() error {
	w.Flush()
	return w.err
}

// Hijack hands the connection over with the head written so far sent, and what the server read
// ahead of the handler in the reader it returns.
func (w *h1Response) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c := w.c
	if c.hijacked {
		return nil, nil, http.ErrHijacked
	}
	if c.bw != nil {
		if err := c.bw.Flush(); err != nil {
			return nil, nil, err
		}
	}
	c.hijacked = true
	if c.all != nil {
		c.all.remove(c) // the hijacker closes it: a shutdown does not wait for it
		c.all = nil
	}
	c.acquireReader()
	return c.conn, bufio.NewReadWriter(c.br, bufio.NewWriter(c.conn)), nil
}

func (w *h1Response) SetReadDeadline(t time.Time) error  { return w.c.fc.SetReadDeadline(t) }
func (w *h1Response) SetWriteDeadline(t time.Time) error { return w.c.fc.SetWriteDeadline(t) }

// finish ends the answer after the handler returned and flushes it: true when the connection
// may carry another request.
func (w *h1Response) finish() bool {
	if !w.wroteHeader {
		if _, ok := w.header["Content-Length"]; !ok {
			w.header.Set("Content-Length", "0")
		}
		w.WriteHeader(http.StatusOK)
	}
	bw := w.c.bw
	switch {
	case w.chunked:
		bw.WriteString("0\r\n")
		for _, k := range w.trailers {
			for _, v := range w.header[k] {
				bw.WriteString(k + ": " + headerValue(v) + "\r\n")
			}
		}
		for k, vv := range w.header {
			if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
				for _, v := range vv {
					bw.WriteString(http.CanonicalHeaderKey(name) + ": " + headerValue(v) + "\r\n")
				}
			}
		}
		bw.WriteString("\r\n")
	case !w.noBody && w.contentLength >= 0 && w.written < w.contentLength:
		w.closeAfter = true // the client waits for bytes that will not come
	}
	w.fail(bw.Flush())
	if w.err != nil || w.closeAfter || w.status == http.StatusSwitchingProtocols {
		return false
	}
	// A body not read to its end: its bytes would be read as the next request.
	return w.c.body.eof
}

// hasToken reports whether a comma-separated header value lists token.
func HasToken(vals []string, token string) bool {
	for _, v := range vals {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// resetConn closes the TCP connection under c (through the gate's wrappers and a tunnel's TLS)
// with a reset: what is still unsent of a cut answer is dropped, and the client reads an error,
// neither the end of a body delimited by the close nor a TLS close_notify that would make a cut
// answer look whole. Closing c afterwards is still the caller's.
func resetConn(c net.Conn) {
	for range 16 {
		switch x := c.(type) {
		case *net.TCPConn:
			x.SetLinger(0)
			x.Close()
			return
		case *framing.Conn:
			c = x.Conn
		case interface{ NetConn() net.Conn }:
			c = x.NetConn()
		default:
			return
		}
	}
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// closeSignalConn runs end once its connection is closed.
type closeSignalConn struct {
	net.Conn
	once sync.Once
	end  func()
}

func (c *closeSignalConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.end)
	return err
}

// NetConn lets net/http and unixsock reach the wrapped connection.
func (c *closeSignalConn) NetConn() net.Conn { return c.Conn }
