package gate

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
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"

	"github.com/lockhttp/lockhttp/internal/floor"
	"github.com/lockhttp/lockhttp/internal/framing"
	"github.com/lockhttp/lockhttp/internal/judge"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/signerclient"
	"github.com/lockhttp/lockhttp/internal/transport"
)

// Certs issues the leaf certificates of decrypted tunnels; *signerclient.Client is one.
type Certs interface {
	Certificate(ctx context.Context, host string) (*tls.Certificate, error)
	Health(ctx context.Context) error
}

// handshakeTimeout bounds the client's TLS handshake inside a tunnel.
const handshakeTimeout = 15 * time.Second

// intercept opens a CONNECT the policy wants decrypted: it gets the host's certificate first (so
// that a signer that is down refuses the CONNECT itself), opens the tunnel (openTunnel: 200, TLS
// with the SNI check) and serves the requests inside, each decided on its own.
func (g *Gate) intercept(w http.ResponseWriter, r *http.Request, ex *exchange, res judge.Result, pol *policy.Policy) {
	cert, err := g.certs.Certificate(r.Context(), res.Host)
	if err != nil {
		var refused *signerclient.RefusedError
		d := judge.DecisionNoSigner
		if errors.As(err, &refused) {
			d = judge.Unsignable(res.Host, refused.Reason)
		}
		g.log.Warn("signer: no certificate", logID, ex.rec.ID, "host", res.Host, "err", err)
		ex.rec.Detail = err.Error()
		ex.refused(d, pol)
		g.refuseWriter(w, r, ex, d)
		return
	}
	t, fail := g.openTunnel(w, r, ex.rec.ID, res.Host, cert, pol.Settings.HTTP2)
	g.serveOpened(ex, res, pol, t, fail)
}

// serveOpened serves the requests inside a tunnel openTunnel (or a transparent listener's
// handshake) opened, each decided on its own, or records why it could not be opened.
func (g *Gate) serveOpened(ex *exchange, res judge.Result, pol *policy.Policy, t *tunnelConn, fail *openFailure) {
	detached := false // the tunnel outlives this call: serveTunnelConn's end closes it
	if t != nil {
		defer func() {
			if !detached {
				t.close()
			}
		}()
	}
	end := func(detail string) {
		ex.bytesIn.Store(t.cc.in.Load())
		ex.finish(http.StatusOK, t.out(), detail)
	}
	if fail != nil && fail.kind == openPlain {
		// Plain HTTP where TLS was expected: a client that sends http:// and ws:// URLs
		// through a CONNECT (undici's ProxyAgent, gorilla/websocket, browsers for ws://).
		// Its requests are read as they are, each decided on its own as an http:// URL of
		// the tunnel's host and port; anything that is not HTTP/1.1 is refused by the
		// framing check.
		tun := &judge.Binding{Host: res.Host, Port: res.Port, Agent: ex.rec.Agent, Cleartext: true, Transparent: ex.transparent()}
		t.cc.readBufferedFirst() // the server sets its own deadlines
		fc := framing.NewConn(t.cc, framing.Options{Tunnel: true, Token: transport.NewToken(), Lean: true})
		detached = true
		g.serveTunnelConn(fc, ex.source, tun, http.HandlerFunc(g.serveTunnel), func() {
			end("cleartext")
			t.close()
		})
		return
	}
	if fail != nil {
		switch fail.kind {
		case openSNI:
			ex.refused(*fail.sni, pol)
			ex.finish(0, t.out(), "tls handshake refused")
		case openRejected:
			// The client closed or alerted after seeing the gate's certificate: pinning, or a
			// client that does not trust the lockhttp CA.
			d := judge.Pinned()
			ex.rec.Code, ex.rec.Reason = string(d.Code), d.Reason
			ex.finish(0, t.out(), fail.detail)
			g.log.Info("client rejected the gate's certificate", logID, ex.rec.ID, "host", res.Host, "err", fail.detail)
		default:
			ex.finish(fail.status, t.out(), fail.detail)
		}
		return
	}
	tun := &judge.Binding{Host: res.Host, Port: res.Port, Agent: ex.rec.Agent, Transparent: ex.transparent()}
	if t.tls.ConnectionState().NegotiatedProtocol == http2.NextProtoTLS {
		g.serveH2(t.tls, ex.source, tun, ex.rec.ID, http.HandlerFunc(g.serveTunnel))
		end("http/2")
		return
	}
	fc := framing.NewConn(t.tls, framing.Options{Tunnel: true, Token: transport.NewToken(), Lean: true})
	detached = true
	g.serveTunnelConn(fc, ex.source, tun, http.HandlerFunc(g.serveTunnel), func() {
		end("")
		t.close()
	})
}

// serveTunnelConn serves the requests decrypted on fc with h (serveH1) and returns at once, so
// that no goroutine of the caller's stays parked for the tunnel's life (an idle tunnel costs one
// goroutine, not two). end runs once the connection is closed: by the server after its last
// answer, or by whoever hijacked it.
func (g *Gate) serveTunnelConn(fc *framing.Conn, source netip.Addr, tun *judge.Binding, h http.Handler, end func()) {
	g.serveH1(fc, &connInfo{fc: fc, source: source, tunnel: tun}, h, nil, end)
}

// tunnelConn is a hijacked CONNECT: the client connection, counted, and once the handshake is
// done the TLS connection the gate decrypts.
type tunnelConn struct {
	g      *Gate
	client net.Conn // the hijacked connection, tracked (closed on shutdown) until close
	cc     *countConn
	tls    *tls.Conn // nil until the handshake succeeded
}

func (t *tunnelConn) close() {
	t.client.Close()
	t.g.trackTunnel(t.client, false)
}

// out is the bytes written to the client inside the tunnel.
func (t *tunnelConn) out() int64 {
	if t == nil {
		return 0
	}
	return t.cc.out.Load()
}

// openFailure is why openTunnel returned no TLS connection.
type openFailure struct {
	kind openKind
	// status is the status of the CONNECT's record: 500 when the connection could not be
	// hijacked, 200 once the tunnel was answered, 0 when the handshake failed.
	status int
	// detail is the internal cause (the record's detail).
	detail string
	// sni is the refusal of an openSNI.
	sni *policy.Decision
}

type openKind uint8

const (
	openGone     openKind = iota // no hijack, the client went away or sent nothing, a failed handshake
	openPlain                    // the client sent plain text: t.client is open to answer it
	openSNI                      // the ClientHello named no host or another one than the CONNECT's
	openRejected                 // the client rejected the gate's certificate (pinning, an untrusted CA)
)

// openTunnel answers a CONNECT the gate decrypts with 200, checks that the client then speaks
// TLS, and completes the handshake with cert, aborting it unless the ClientHello's SNI names
// host. ALPN offers h2 (when h2 is set) and http/1.1; the caller reads which was chosen. The
// tunnel it returns (nil only when the connection could not be hijacked) is the caller's to
// close, on failure too.
func (g *Gate) openTunnel(w http.ResponseWriter, r *http.Request, id, host string, cert *tls.Certificate, h2 bool) (*tunnelConn, *openFailure) {
	client, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return nil, &openFailure{kind: openGone, status: http.StatusInternalServerError, detail: "hijack: " + err.Error()}
	}
	g.trackTunnel(client, true)
	t := &tunnelConn{g: g, client: client, cc: &countConn{Conn: client, r: brw.Reader}}
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n"+HeaderRequest+": "+id+"\r\n\r\n"); err != nil {
		return t, &openFailure{kind: openGone, status: http.StatusOK, detail: "client went away"}
	}
	client.SetReadDeadline(time.Now().Add(handshakeTimeout))
	first, err := brw.Reader.Peek(1)
	if err != nil {
		return t, &openFailure{kind: openGone, status: http.StatusOK, detail: "the client sent nothing in the tunnel"}
	}
	if first[0] != 0x16 {
		return t, &openFailure{kind: openPlain, status: http.StatusOK}
	}
	return t, g.handshake(r.Context(), t, host, "the CONNECT host", cert, h2)
}

// handshake completes the client's TLS handshake on t with cert, aborting it unless the
// ClientHello's SNI names host (what names it: the CONNECT host, or the name a transparent
// listener decided). ALPN offers h2 (when h2 is set) and http/1.1.
func (g *Gate) handshake(ctx context.Context, t *tunnelConn, host, what string, cert *tls.Certificate, h2 bool) *openFailure {
	var sniErr atomic.Pointer[policy.Decision]
	protos := []string{"http/1.1"}
	if h2 {
		protos = []string{http2.NextProtoTLS, "http/1.1"}
	}
	conf := g.tunnelTLS.Clone()
	conf.NextProtos = protos
	conf.Certificates = []tls.Certificate{*cert}
	conf.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		if !floor.NamesHost(hello.ServerName, host) {
			d := judge.SNI(hello.ServerName, host, what)
			sniErr.Store(&d)
			return nil, errors.New("lockhttp: server name mismatch")
		}
		return nil, nil
	}
	tc := tls.Server(t.cc, conf)
	if err := tc.HandshakeContext(ctx); err != nil {
		switch why := sniErr.Load(); {
		case why != nil:
			return &openFailure{kind: openSNI, detail: why.Reason, sni: why}
		case clientRejected(err):
			return &openFailure{kind: openRejected, detail: err.Error()}
		}
		return &openFailure{kind: openGone, detail: "tls handshake: " + err.Error()}
	}
	t.client.SetReadDeadline(time.Time{})
	t.cc.unbuffer()
	t.tls = tc
	return nil
}

// newTunnelTLS is the TLS configuration every decrypted tunnel's is cloned from. Its
// session-ticket key, random and the process's own, is shared by the clones: a client that
// keeps its sessions (curl, Python, Node, Go with a session cache) resumes on its next tunnel and
// spares the gate the certificate's signature. The SNI check runs on every ClientHello,
// resumed or not (GetConfigForClient), and each tunnel's certificate is its host's.
func newTunnelTLS() *tls.Config {
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

// clientRejected reports a handshake that failed on the client's side: it sent an alert
// (unknown CA, bad certificate) or closed the connection after the gate's certificate.
func clientRejected(err error) bool {
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

// serveTunnel hands a decrypted request to the proxy, where it is decided like any other: its
// target as sent is kept for the decision (which checks that it names the tunnel's host and
// port), and its URL made absolute for the proxy. A head the framing check refused is refused.
func (g *Gate) serveTunnel(w http.ResponseWriter, r *http.Request) {
	ci := infoFrom(r.Context())
	if ci.fc != nil && ci.fc.Refusal(r) != nil || r.Method == http.MethodConnect {
		// A head the framing check refused, or a CONNECT on an HTTP/2 stream (HTTP/1.1's is
		// the framing check's): refused by the decision, never handed to the proxy, which
		// would open it.
		g.serveNonProxy(w, r)
		return
	}
	sent := *r.URL
	r = r.WithContext(context.WithValue(r.Context(), sentTargetKey{}, &sent))
	r.URL.Scheme = ci.tunnel.Scheme()
	r.URL.Host = ci.tunnel.Authority()
	g.serveProxy(w, r)
}

// writeRawRefusal writes a refusal straight to a connection (plain text in a tunnel that should
// have carried TLS), after its audit record.
func (g *Gate) writeRawRefusal(c net.Conn, ex *exchange, d policy.Decision) {
	recordRefusal(context.Background(), nil, ex, d).WriteRaw(bufio.NewWriter(c))
}

// countConn counts the bytes of a hijacked connection, reading what the server had buffered
// first.
type countConn struct {
	net.Conn
	r       io.Reader // the server's buffered reader, then (unbuffer) the connection itself
	in, out atomic.Int64
}

// unbuffer reads straight from the connection once the server's buffer is drained (after the
// handshake, the client waits for the gate's answer): an open tunnel keeps no 4 KiB buffer of
// the connection it came on. Called by the reading goroutine between reads.
func (c *countConn) unbuffer() {
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

// readBufferedFirst reads what the server had buffered, then straight from the connection,
// for a tunnel that is served without TLS (the buffer is let go once it is read).
func (c *countConn) readBufferedFirst() {
	if br, ok := c.r.(*bufio.Reader); ok {
		c.r = withBuffered(br, c.Conn)
	}
}

func (c *countConn) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.in.Add(int64(n))
	return n, err
}

// NetConn is the client connection (resetConn reaches the TCP connection through it).
func (c *countConn) NetConn() net.Conn { return c.Conn }

func (c *countConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.out.Add(int64(n))
	return n, err
}

// refuseWeakCertificates refuses an origin whose certificate chain (already verified against the
// roots) uses an RSA key under 2048 bits.
func refuseWeakCertificates(cs tls.ConnectionState) error {
	for _, c := range cs.PeerCertificates {
		if k, ok := c.PublicKey.(interface{ Size() int }); ok && c.PublicKeyAlgorithm == x509.RSA && k.Size()*8 < 2048 {
			return &weakCertError{name: c.Subject.CommonName, bits: k.Size() * 8}
		}
	}
	return nil
}

// weakCertError is an origin certificate with an RSA key under 2048 bits.
type weakCertError struct {
	name string
	bits int
}

func (e *weakCertError) Error() string {
	return fmt.Sprintf("weak certificate: %q has a %d-bit RSA key; 2048 bits is the least the gate accepts", e.name, e.bits)
}
