package transport

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The connections of the gate's tunnels: a hijacked CONNECT counted, a transparent
// connection whose first bytes were read, both ways spliced, the TLS of a decrypted tunnel and
// of an origin, and the listeners merged.

// NewTunnelTLS is the TLS configuration every decrypted tunnel's is cloned from. Its
// session-ticket key, random and the process's own, is shared by the clones: a client that
// keeps its sessions (curl, Python, Node, Go with a session cache) resumes on its next tunnel and
// spares the gate the certificate's signature. The SNI check runs on every ClientHello,
// resumed or not (GetConfigForClient), and each tunnel's certificate is its host's.
func NewTunnelTLS() *tls.Config {
	var key [32]byte
	rand.Read(key[:])
	c := &tls.Config{
		MinVersion: tls.VersionTLS12,
		// The agent-to-gate hop is local: classical key exchange saves the post-quantum
		// encapsulation on every new connection. The gate-to-origin hop keeps Go's defaults.
		CurvePreferences: []tls.CurveID{tls.X25519, tls.CurveP256},
	}
	c.SetSessionTicketKeys([][32]byte{key})
	return c
}

// ClientRejected reports a handshake that failed on the client's side: it sent an alert
// (unknown CA, bad certificate) or closed the connection after the gate's certificate.
func ClientRejected(err error) bool {
	// context.Canceled: the client closed the connection while the handshake waited on it
	// (Node). "bad record MAC": OpenSSL clients (curl, Python) that reject the certificate in
	// TLS 1.3 send their alert under keys the gate's side of the handshake cannot read.
	if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, context.Canceled) {
		return true
	}
	var ae tls.AlertError
	if errors.As(err, &ae) {
		return true
	}
	s := err.Error()
	return strings.Contains(s, "remote error") || strings.Contains(s, "connection reset") || strings.Contains(s, "bad record MAC")
}

// NewCountConn counts the bytes of c, read through r (the server's buffered reader, or a
// ReplayConn's Reader).
func NewCountConn(c net.Conn, r io.Reader) *CountConn { return &CountConn{Conn: c, r: r} }

// CountConn counts the bytes of a hijacked connection, reading what the server had buffered
// first.
type CountConn struct {
	net.Conn
	r       io.Reader    // the server's buffered reader, then (Unbuffer) the connection itself
	In, Out atomic.Int64 // the bytes read from and written to the connection
}

// Unbuffer reads straight from the connection once the server's buffer is drained (after the
// handshake, the client waits for the gate's answer): an open tunnel keeps no 4 KiB buffer of
// the connection it came on. Called by the reading goroutine between reads.
func (c *CountConn) Unbuffer() {
	switch r := c.r.(type) {
	case *bufio.Reader:
		if r.Buffered() == 0 {
			c.r = c.Conn
		}
	case *replay:
		if len(r.b) == 0 {
			c.r = c.Conn
		}
	}
}

// replay reads b, then from r: the bytes a transparent listener read before the handshake.
type replay struct {
	b []byte
	r io.Reader
}

func (p *replay) Read(b []byte) (int, error) {
	if len(p.b) > 0 {
		n := copy(b, p.b)
		p.b = p.b[n:]
		return n, nil
	}
	return p.r.Read(b)
}

// ReadBufferedFirst reads what the server had buffered, then straight from the connection,
// for a tunnel that is served without TLS (the buffer is let go once it is read).
func (c *CountConn) ReadBufferedFirst() {
	if br, ok := c.r.(*bufio.Reader); ok {
		c.r = WithBuffered(br, c.Conn)
	}
}

func (c *CountConn) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.In.Add(int64(n))
	return n, err
}

// NetConn is the client connection (resetConn reaches the TCP connection through it).
func (c *CountConn) NetConn() net.Conn { return c.Conn }

func (c *CountConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.Out.Add(int64(n))
	return n, err
}

// RefuseWeakCertificates refuses an origin whose certificate chain (already verified against the
// roots) uses an RSA key under 2048 bits.
func RefuseWeakCertificates(cs tls.ConnectionState) error {
	for _, c := range cs.PeerCertificates {
		if k, ok := c.PublicKey.(interface{ Size() int }); ok && c.PublicKeyAlgorithm == x509.RSA && k.Size()*8 < 2048 {
			return &WeakCertError{name: c.Subject.CommonName, bits: k.Size() * 8}
		}
	}
	return nil
}

// WeakCertError is an origin certificate with an RSA key under 2048 bits.
type WeakCertError struct {
	name string
	bits int
}

func (e *WeakCertError) Error() string {
	return fmt.Sprintf("weak certificate: %q has a %d-bit RSA key; 2048 bits is the least the gate accepts", e.name, e.bits)
}

// CopyBufs are the 32 KiB buffers the gate copies answers and tunnels with.
var CopyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// WithBuffered reads what br holds already, then from c: the bytes a hijacked connection's
// server read ahead come first.
func WithBuffered(br *bufio.Reader, c io.Reader) io.Reader {
	if br == nil || br.Buffered() == 0 {
		return c
	}
	return io.MultiReader(io.LimitReader(br, int64(br.Buffered())), c)
}

// Splice copies both ways until both directions end; it returns the bytes sent up (client to
// target) and down.
func Splice(client net.Conn, buffered *bufio.Reader, up net.Conn) (in, out int64) {
	src := WithBuffered(buffered, client)
	done := make(chan int64, 1)
	go func() {
		n := copyBuf(up, src)
		CloseWrite(up)
		done <- n
	}()
	out = copyBuf(client, up)
	CloseWrite(client)
	in = <-done
	client.Close()
	up.Close()
	return in, out
}

func copyBuf(dst io.Writer, src io.Reader) int64 {
	bp := CopyBufs.Get().(*[]byte)
	defer CopyBufs.Put(bp)
	n, _ := io.CopyBuffer(dst, src, *bp)
	return n
}

// CloseWrite half-closes c when it can, else closes it: the other direction then ends too.
func CloseWrite(c net.Conn) {
	type closeWriter interface{ CloseWrite() error }
	if cw, ok := c.(closeWriter); ok {
		cw.CloseWrite()
		return
	}
	if u, ok := c.(interface{ NetConn() net.Conn }); ok {
		if cw, ok := u.NetConn().(closeWriter); ok {
			cw.CloseWrite()
			return
		}
	}
	c.Close()
}

// ReplayConn is a connection whose first bytes were read already: Read gives them back first.
type ReplayConn struct {
	net.Conn
	r replay
}

// NewReplayConn is c, whose first bytes first were read already.
func NewReplayConn(c net.Conn, first []byte) *ReplayConn {
	return &ReplayConn{Conn: c, r: replay{b: first, r: c}}
}

func (c *ReplayConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// Replay sets the bytes Read gives back before the connection's next ones.
func (c *ReplayConn) Replay(b []byte) { c.r.b = b }

// Reader reads the bytes read already, then the connection: what a CountConn of c reads.
func (c *ReplayConn) Reader() io.Reader { return &c.r }

// NetConn lets the TLS server and the splice reach the connection (its half-close).
func (c *ReplayConn) NetConn() net.Conn { return c.Conn }

// Merge is one listener over ls: Accept returns a connection any of them accepted, Addr is the
// first one's, and Close closes them all. The gate serves its proxy so on its listen address and
// on its transparent address at once.
func Merge(ls ...net.Listener) net.Listener {
	f := NewFanIn()
	for _, l := range ls {
		f.Add(l)
	}
	return f
}

// FanIn is one listener over several: Accept returns a connection any of them accepted.
type FanIn struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
	mu    sync.Mutex
	ls    []net.Listener // guarded by mu: every listener added, closed with the fan-in
}

// NewFanIn is a listener over none yet (Add adds them).
func NewFanIn() *FanIn { return &FanIn{conns: make(chan net.Conn), done: make(chan struct{})} }

// Add accepts on l until l or the fan-in is closed.
func (f *FanIn) Add(l net.Listener) {
	f.mu.Lock()
	f.ls = append(f.ls, l)
	f.mu.Unlock()
	go func() {
		var backoff time.Duration
		for {
			c, err := l.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				select {
				case <-f.done:
					return
				case <-time.After(backoff):
				}
				continue
			}
			backoff = 0
			select {
			case f.conns <- c:
			case <-f.done:
				c.Close()
				return
			}
		}
	}()
}

func (f *FanIn) Accept() (net.Conn, error) {
	select {
	case c := <-f.conns:
		return c, nil
	case <-f.done:
		return nil, net.ErrClosed
	}
}

func (f *FanIn) Close() error {
	f.once.Do(func() {
		close(f.done)
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, l := range f.ls {
			l.Close()
		}
	})
	return nil
}

func (f *FanIn) Addr() net.Addr {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.ls) > 0 {
		return f.ls[0].Addr()
	}
	return &net.TCPAddr{}
}
