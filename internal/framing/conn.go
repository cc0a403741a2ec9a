package framing

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Conn. The zero value is not usable: Token is required.
type Options struct {
	// MaxHead bounds a request head, request line to final CRLF; 0 (or less) means 64 KiB.
	MaxHead int
	// Tunnel reports that the stream is the inside of a decrypted CONNECT tunnel: CONNECT is then
	// refused (NestedConnect) and an origin-form request needs a Host.
	Tunnel bool
	// Token names the substituted request (see Conn): random per connection, 16 to 128 bytes of
	// letters, digits, '-', '.', '_' and '~'. NewConn panics on any other token.
	Token string
	// Lean gives the buffer back while no request is under way: the wait for the next head
	// reads its first byte alone, then takes a buffer. For a connection whose reads are
	// buffered below (TLS), where a one-byte read costs no system call of its own.
	Lean bool
}

// DefaultMaxHead is the head size limit when Options.MaxHead is 0.
const DefaultMaxHead = 64 << 10

// refusedPrefix starts the path of a substituted request.
const refusedPrefix = "/.lockhttp/refused/"

// Conn wraps the client side of one proxy connection and checks every request head before its
// bytes reach the reader (net/http's server, or http.ReadRequest inside a tunnel).
//
// Read passes on, in order: each request head once ParseHead accepts it (up to two empty lines
// before a request line are dropped), then its body: exactly Content-Length bytes, or the chunked
// bytes Chunked accepts. After a CONNECT (outside a tunnel), and after the body of a request with
// an Upgrade header, every later byte passes unchecked: the gate must close the connection when the
// tunnel or the upgrade does not happen.
//
// A refused head (or a chunked body found malformed in bytes that arrived with its head) never
// reaches the reader: Read delivers instead
//
//	GET /.lockhttp/refused/<token> HTTP/1.1
//	Host: lockhttp.invalid
//	Connection: close
//
// and Refusal names the error for that request; later Reads discard what the client still sends
// and return only when the wrapped conn fails (a deadline, the client or the server closing).
// net/http's server answers the substituted request in turn, after any earlier pipelined request,
// and closes the connection. The handler should still write the refusal and its audit record
// without depending on r.Context() (use context.WithoutCancel): a client that hangs up cancels it.
//
// A chunked body found malformed after its head was passed on makes Read return the *Error itself
// (the handler sees it as the error of its body read; net/http then closes the connection after
// the response), then io.EOF.
//
// Read must be called by one goroutine at a time; Refusal may be called concurrently with it.
// Deadlines, addresses and Write pass through to the wrapped conn; so does Close, but for a short
// linger after a refusal.
type Conn struct {
	net.Conn

	max    int
	tunnel bool
	lean   bool
	token  string
	one    [1]byte // Lean: the first byte of the next head, read without a buffer

	// Read's state, owned by the goroutine in Read.
	buf      []byte // bytes read from the wrapped conn: buf[r:w] are not yet delivered
	r, w     int
	pass     int   // buf[r:r+pass] are accepted and go to the reader as they are
	st       state // what the bytes after the accepted ones are
	after    state // the state after the current body: stHead or stRaw
	left     int64 // stLength: body bytes still to accept
	ch       Chunked
	started  bool   // stHead: the request line has begun (leading empty lines are behind)
	lineSeen bool   // stHead: the request line of a head not yet whole has been checked
	lead     int    // stHead: empty lines dropped before this request line
	scan     int    // stHead: buf[r:r+scan] have been searched for the end of the head
	idle     int    // consecutive empty reads of the wrapped conn
	rerr     error  // an error of the wrapped conn, held until the bytes before it are delivered
	sub      []byte // stRefused: the rest of the substituted request
	failed   *Error // stFailed: the error still to return
	h        head   // the head being checked

	refused atomic.Pointer[Error] // the refusal behind the substituted request, once there is one
	closing atomic.Bool           // Close has begun its linger
}

type state uint8

const (
	stHead    state = iota // next comes a request head
	stLength               // in a Content-Length body
	stChunked              // in a chunked body
	stRaw                  // a tunnel or an upgraded protocol: pass everything
	stRefused              // delivering the substituted request, then discarding
	stFailed               // a body went bad after its head was delivered: the error, then io.EOF
)

// The linger of Close after a refusal (net/http waits as long after its own error responses).
const (
	LingerTime  = 500 * time.Millisecond
	LingerBytes = 256 << 10
)

const (
	initialBuf = 4 << 10
	maxIdle    = 100 // empty reads in a row before giving up with io.ErrNoProgress
)

// NewConn wraps c. It panics if o.Token is not a valid token (a programming error).
func NewConn(c net.Conn, o Options) *Conn {
	if !validToken(o.Token) {
		panic("framing: Options.Token must be 16 to 128 bytes of [A-Za-z0-9._~-]")
	}
	limit := o.MaxHead
	if limit <= 0 {
		limit = DefaultMaxHead
	}
	return &Conn{Conn: c, max: limit, tunnel: o.Tunnel, lean: o.Lean, token: o.Token}
}

func validToken(t string) bool {
	if len(t) < 16 || len(t) > 128 {
		return false
	}
	for i := range len(t) {
		c := t[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '-' || c == '.' || c == '_' || c == '~') {
			return false
		}
	}
	return true
}

// RefusalPath is the path of the substituted request for this conn: "/.lockhttp/refused/" + token.
func (c *Conn) RefusalPath() string { return refusedPrefix + c.token }

// Refusal returns the framing error of a substituted request, or nil for a real one: r is the
// substituted request when its path is RefusalPath and a refusal happened. (The random token keeps
// clients from sending that path themselves; a refusal is recorded as soon as Read meets the bad
// head, which may be while an earlier request is still being handled.)
func (c *Conn) Refusal(r *http.Request) *Error {
	if r == nil || r.URL == nil {
		return nil
	}
	e := c.refused.Load()
	if e == nil {
		return nil
	}
	p := r.URL.Path
	if len(p) != len(refusedPrefix)+len(c.token) || p[:len(refusedPrefix)] != refusedPrefix ||
		p[len(refusedPrefix):] != c.token {
		return nil
	}
	return e
}

// CloseWrite shuts down the writing side of the wrapped conn when it can (net/http uses it to
// deliver an error response before closing).
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.New("framing: the wrapped connection cannot close its write side alone")
}

// Close closes the wrapped conn. After a refusal it first shuts down the write side (when the
// wrapped conn can) and discards what the client still sends, for at most LingerTime or LingerBytes,
// so that unread bytes do not make the close a TCP reset that destroys the refusal response.
func (c *Conn) Close() error {
	if c.refused.Load() != nil && !c.closing.Swap(true) {
		if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
			if c.Conn.SetReadDeadline(time.Now().Add(LingerTime)) == nil {
				io.CopyN(io.Discard, c.Conn, LingerBytes)
			}
		}
	}
	return c.Conn.Close()
}

// Read reads checked bytes of the request stream (see Conn). It fills p with as much as its buffer
// can serve, and reads the wrapped conn only when it has nothing to return yet.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n := 0
	for {
		if c.pass > 0 {
			k := copy(p[n:], c.buf[c.r:c.r+c.pass])
			n += k
			c.r += k
			c.pass -= k
			if c.r == c.w {
				c.r, c.w = 0, 0
			}
			if n == len(p) {
				return n, nil
			}
		}
		// From here on, with n > 0, go on only while the buffer serves without a read.
		switch c.st {
		case stHead:
			if err := c.nextHead(n == 0); err != nil {
				if err == errMore {
					return n, nil
				}
				return n, err
			}
		case stLength:
			if c.left == 0 {
				c.st = c.after
				continue
			}
			if c.r < c.w {
				k := min(int64(c.w-c.r), c.left)
				c.pass = int(k)
				c.left -= k
				continue
			}
			if n > 0 {
				return n, nil
			}
			if err := c.takeErr(); err != nil {
				return 0, err
			}
			q := p
			if int64(len(q)) > c.left {
				q = q[:c.left]
			}
			k, err := c.Conn.Read(q)
			c.left -= int64(k)
			if c.left == 0 {
				c.st = c.after
			}
			return k, err
		case stChunked:
			// The buffer is empty here: accept scanned all it held after the head.
			if n > 0 {
				return n, nil
			}
			if err := c.takeErr(); err != nil {
				return 0, err
			}
			// Read straight into p, at most MaxHead bytes so that what follows the body always
			// fits the buffer.
			q := p
			if len(q) > c.max {
				q = q[:c.max]
			}
			m, err := c.Conn.Read(q)
			k, done, e := c.ch.Scan(q[:m])
			if e != nil {
				c.fail(e)
				if k > 0 {
					return k, nil
				}
				continue
			}
			if done {
				c.st = c.after
				if k < m {
					c.stash(q[k:m])
					c.rerr, err = err, nil
				}
			}
			return k, err
		case stRaw:
			if c.r < c.w {
				c.pass = c.w - c.r
				continue
			}
			if n > 0 {
				return n, nil
			}
			if err := c.takeErr(); err != nil {
				return 0, err
			}
			// Raw from here on: the buffer is no longer needed (a tunnel keeps none).
			c.release()
			return c.Conn.Read(p)
		case stRefused:
			if len(c.sub) > 0 {
				k := copy(p[n:], c.sub)
				c.sub = c.sub[k:]
				return n + k, nil
			}
			if n > 0 {
				return n, nil
			}
			return 0, c.drain()
		case stFailed:
			if n > 0 {
				return n, nil
			}
			if e := c.failed; e != nil {
				c.failed = nil
				return 0, e
			}
			return 0, io.EOF
		}
	}
}

// drain discards what the client still sends after a refusal, until the wrapped conn fails: a
// deadline (net/http's server aborting its background read), the client closing, or the server
// closing the connection after answering the substituted request. Returning io.EOF at once
// instead would look like a client that went away, and net/http would cancel the context of a
// request still being answered before the refusal.
func (c *Conn) drain() error {
	var scratch [512]byte
	for {
		if _, err := c.Conn.Read(scratch[:]); err != nil {
			return err
		}
	}
}

// errMore tells Read that the next head is not all in the buffer yet.
var errMore = errors.New("framing: more bytes needed")

// nextHead reads until buf[r:] holds a whole request head, then checks it and sets up its
// delivery; or it refuses the head; or it returns an error of the wrapped conn (keeping what it
// has read, so a Read after a timeout carries on). When block is false it does not read: it
// returns errMore instead.
func (c *Conn) nextHead(block bool) error {
	for {
		if !c.started {
			if e := c.leading(); e != nil {
				c.refuse(e)
				return nil
			}
		}
		if c.started {
			end, e := c.findEnd()
			if e == nil && (end > 0 && end-c.r > c.max || end == 0 && c.w-c.r >= c.max) {
				e = refuse(TooLarge, "request head larger than %d bytes", c.max)
			}
			if e != nil {
				c.refuse(e)
				return nil
			}
			if end > 0 {
				c.accept(end)
				return nil
			}
		}
		if !block {
			return errMore
		}
		if err := c.takeErr(); err != nil {
			if err == io.EOF && c.w > c.r {
				c.refuse(bad("the connection ended inside a request head"))
				return nil
			}
			return err
		}
		var n int
		var err error
		if c.lean && c.r == c.w {
			// Nothing of the next head yet: wait for its first byte without a buffer.
			c.release()
			if n, err = c.Conn.Read(c.one[:]); n == 1 {
				c.room()
				c.buf[c.w] = c.one[0]
			}
		} else {
			c.room()
			n, err = c.Conn.Read(c.buf[c.w:])
		}
		c.w += n
		c.rerr = err
		if n == 0 && err == nil {
			if c.idle++; c.idle >= maxIdle {
				return io.ErrNoProgress
			}
		} else {
			c.idle = 0
		}
	}
}

// leading drops up to two empty lines before a request line and checks the first byte of the
// request line, so that a TLS client or a binary protocol is refused at once rather than after
// MaxHead bytes.
func (c *Conn) leading() *Error {
	for c.r < c.w {
		switch b := c.buf[c.r]; {
		case b == '\r':
			if c.w-c.r < 2 {
				return nil
			}
			if c.buf[c.r+1] != '\n' {
				return bad("bare CR before the request line")
			}
			if c.lead == 2 {
				return bad("more than two empty lines before the request line")
			}
			c.lead++
			c.r += 2
		case b == '\n':
			return bad("bare LF before the request line")
		case b == 0x16:
			return refuse(TLSOnPlain, "a TLS handshake where an HTTP request was expected; send HTTPS through CONNECT")
		case classes[b]&cToken == 0:
			return bad("the request does not start with a method (first byte %s)", quoteByte(b))
		default:
			c.started = true
			return nil
		}
	}
	return nil
}

// findEnd returns the index in buf just past the CRLF CRLF that ends the head at buf[r:], or 0
// while the end has not arrived. It refuses a bare LF as soon as it arrives: a client that ends its
// lines with LF alone would otherwise wait for a response that never comes.
func (c *Conn) findEnd() (int, *Error) {
	for {
		s := c.r + c.scan
		j := bytes.IndexByte(c.buf[s:c.w], '\n')
		if j < 0 {
			c.scan = c.w - c.r
			if !c.lineSeen {
				// The head is not whole yet, its request line may be: a line that is not one
				// (another text protocol) is refused now, not when a head end that may never
				// come arrives. A whole head's line is parse's to check.
				if lf := bytes.IndexByte(c.buf[c.r:c.w], '\n'); lf > 0 {
					c.lineSeen = true
					if _, _, _, e := requestLine(c.buf[c.r : c.r+lf-1]); e != nil {
						return 0, e
					}
				}
			}
			return 0, nil
		}
		j += s
		if c.buf[j-1] != '\r' { // j > c.r: the head starts with a method byte
			return 0, bad("bare LF in the request head; every line must end in CRLF")
		}
		c.scan = j + 1 - c.r
		if j-c.r >= 3 && c.buf[j-2] == '\n' {
			return j + 1, nil
		}
	}
}

// accept checks the head at buf[r:end] and sets up the delivery of it and of its body.
func (c *Conn) accept(end int) {
	h := &c.h
	*h = head{}
	if e := parse(c.buf[c.r:end], c.tunnel, h); e != nil {
		c.refuse(e)
		return
	}
	c.started, c.lineSeen, c.lead, c.scan = false, false, 0, 0
	after := stHead
	if h.connect || h.upgrade != nil {
		after = stRaw
	}
	c.after = after
	switch h.body {
	case NoBody:
		c.st = after
	case LengthBody:
		c.st, c.left = stLength, h.length
	case ChunkedBody:
		// Check the part of the body that came with the head before passing the head on: a
		// request smuggled in one write is then refused whole.
		c.ch = Chunked{}
		n, done, e := c.ch.Scan(c.buf[end:c.w])
		if e != nil {
			c.refuse(e)
			return
		}
		c.pass = n
		if done {
			c.st = after
		} else {
			c.st = stChunked
		}
	}
	c.pass += end - c.r
}

// refuse records e and replaces everything still to come with the substituted request.
func (c *Conn) refuse(e *Error) {
	c.refused.Store(e)
	c.sub = []byte("GET " + refusedPrefix + c.token + " HTTP/1.1\r\nHost: lockhttp.invalid\r\nConnection: close\r\n\r\n")
	c.st = stRefused
	c.buf, c.r, c.w, c.pass, c.rerr = nil, 0, 0, 0, nil
}

// fail ends the stream after the accepted bytes with e, for a body that went bad.
func (c *Conn) fail(e *Error) {
	c.st, c.failed, c.rerr = stFailed, e, nil
}

// takeErr returns (and forgets) a held error of the wrapped conn.
func (c *Conn) takeErr() error {
	err := c.rerr
	c.rerr = nil
	return err
}

// bufs keeps the buffers of Lean connections between their requests.
var bufs = sync.Pool{New: func() any { b := make([]byte, initialBuf); return &b }}

// release gives an empty buffer back (Lean, or raw bytes from here on): to the pool when it has
// its first size. The head parsed last points into it and is forgotten.
func (c *Conn) release() {
	if c.buf == nil {
		return
	}
	if len(c.buf) == initialBuf {
		b := c.buf
		bufs.Put(&b)
	}
	c.buf, c.r, c.w, c.h = nil, 0, 0, head{}
}

// Release gives the buffer back while it holds nothing, for a reader that will not read for a
// while: a request held for a human, its body read to its end. A pipelined request already read
// keeps it. The next Read takes one again. Call it from the goroutine that reads.
func (c *Conn) Release() {
	between := c.st == stHead || c.st == stLength && c.left == 0 && c.after == stHead
	if between && c.pass == 0 && c.r == c.w && !c.started {
		c.release()
	}
}

// room makes space at buf[w:] for reading more of a head: the partial head moves to the front,
// and the buffer doubles up to MaxHead.
func (c *Conn) room() {
	if c.buf == nil {
		if c.lean && c.max >= initialBuf {
			c.buf = *bufs.Get().(*[]byte)
		} else {
			c.buf = make([]byte, min(initialBuf, c.max))
		}
	}
	if c.r > 0 {
		c.w = copy(c.buf, c.buf[c.r:c.w])
		c.r = 0
	}
	if c.w == len(c.buf) {
		nb := make([]byte, min(2*len(c.buf), c.max))
		copy(nb, c.buf[:c.w])
		c.buf = nb
	}
}

// stash keeps b, the bytes after a chunked body that was read straight into the caller's buffer.
// The buffer is empty when this happens.
func (c *Conn) stash(b []byte) {
	if len(c.buf) < len(b) {
		c.buf = make([]byte, max(len(b), min(initialBuf, c.max)))
	}
	c.r, c.w = 0, copy(c.buf, b)
}
