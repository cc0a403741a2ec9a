package gate

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
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
		ex.bytesIn.Store(t.cc.In.Load())
		ex.finish(http.StatusOK, t.out(), detail)
	}
	if fail != nil && fail.kind == openPlain {
		// Plain HTTP where TLS was expected: a client that sends http:// and ws:// URLs
		// through a CONNECT (undici's ProxyAgent, gorilla/websocket, browsers for ws://).
		// Its requests are read as they are, each decided on its own as an http:// URL of
		// the tunnel's host and port; anything that is not HTTP/1.1 is refused by the
		// framing check.
		tun := &judge.Binding{Host: res.Host, Port: res.Port, Agent: ex.rec.Agent, Cleartext: true, Transparent: ex.transparent()}
		t.cc.ReadBufferedFirst() // the server sets its own deadlines
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
	g.waits.Add(1) // the CONNECT's own work is done: its tunnel waits for requests
	g.serveH1(fc, &connInfo{fc: fc, source: source, tunnel: tun}, h, nil, end)
}

// tunnelConn is a hijacked CONNECT: the client connection, counted, and once the handshake is
// done the TLS connection the gate decrypts.
type tunnelConn struct {
	g      *Gate
	client net.Conn // the hijacked connection, tracked (closed on shutdown) until close
	cc     *transport.CountConn
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
	return t.cc.Out.Load()
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
	t := &tunnelConn{g: g, client: client, cc: transport.NewCountConn(client, brw.Reader)}
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
		case transport.ClientRejected(err):
			return &openFailure{kind: openRejected, detail: err.Error()}
		}
		return &openFailure{kind: openGone, detail: "tls handshake: " + err.Error()}
	}
	t.client.SetReadDeadline(time.Time{})
	t.cc.Unbuffer()
	t.tls = tc
	return nil
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
