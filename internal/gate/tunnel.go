package gate

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockhttp/lockhttp/internal/framing"
	"github.com/lockhttp/lockhttp/internal/judge"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/signerclient"
)

// Certs issues the leaf certificates of decrypted tunnels; *signerclient.Client is one.
type Certs interface {
	Certificate(ctx context.Context, host string) (*tls.Certificate, error)
	Health(ctx context.Context) error
}

// handshakeTimeout bounds the client's TLS handshake inside a tunnel.
const handshakeTimeout = 15 * time.Second

var decisionNoSigner = policy.Decision{Verdict: policy.Deny, Code: policy.CodeNoSigner, Rule: "signer",
	Reason: "the gate decrypts this host and cannot get a certificate from its signer; it refuses rather than pass the tunnel unseen"}

func decisionUnsignable(host, why string) policy.Decision {
	return policy.Decision{Verdict: policy.Deny, Code: policy.CodeFloor, Rule: "floor:unsignable",
		Reason: fmt.Sprintf("the signer will not issue a certificate for %q (%s); list the host under splice to let it through undecrypted", host, why)}
}

// intercept opens a CONNECT the policy wants decrypted: it gets the host's certificate first (so
// that a signer that is down refuses the CONNECT itself), answers 200, checks that the client
// speaks TLS and names the CONNECT host in its SNI, and serves the requests inside the tunnel,
// each decided on its own.
func (g *Gate) intercept(w http.ResponseWriter, r *http.Request, ex *exchange, res judge.Result, pol *policy.Policy) {
	cert, err := g.certs.Certificate(r.Context(), res.Host)
	if err != nil {
		var refused *signerclient.RefusedError
		d := decisionNoSigner
		if errors.As(err, &refused) {
			d = decisionUnsignable(res.Host, refused.Reason)
		}
		g.log.Warn("signer: no certificate", logID, ex.rec.ID, "host", res.Host, "err", err)
		ex.rec.Detail = err.Error()
		ex.refused(d, pol)
		g.refuseWriter(w, r, ex, d, true)
		return
	}
	client, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		ex.finish(http.StatusInternalServerError, 0, "hijack: "+err.Error())
		return
	}
	g.trackTunnel(client, true)
	defer g.trackTunnel(client, false)
	defer client.Close()
	cc := &countConn{Conn: client, r: brw.Reader}
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n"+HeaderRequest+": "+ex.rec.ID+"\r\n\r\n"); err != nil {
		ex.finish(http.StatusOK, 0, "client went away")
		return
	}
	client.SetReadDeadline(time.Now().Add(handshakeTimeout))
	first, err := brw.Reader.Peek(1)
	if err != nil {
		ex.finish(http.StatusOK, 0, "the client sent nothing in the tunnel")
		return
	}
	if first[0] != 0x16 {
		// Plain text where TLS was expected: answer in plain text, then close.
		d := policy.Decision{Verdict: policy.Deny, Code: policy.CodeFloor, Rule: "floor:tls-expected",
			Reason: "the tunnel to " + res.Host + " is decrypted and the client sent plain text instead of TLS"}
		ex.refused(d, pol)
		g.writeRawRefusal(client, ex, d)
		return
	}
	var sniErr atomic.Pointer[string]
	conf := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"http/1.1"},
		Certificates: []tls.Certificate{*cert},
		// The agent-to-gate hop is local: classical key exchange saves the post-quantum
		// encapsulation on every new connection. The gate-to-origin hop keeps Go's defaults.
		CurvePreferences: []tls.CurveID{tls.X25519, tls.CurveP256},
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			sni := strings.TrimSuffix(strings.ToLower(hello.ServerName), ".")
			if sni != res.Host {
				why := fmt.Sprintf("the TLS server name %q is not the CONNECT host %q", trim(hello.ServerName), res.Host)
				if sni == "" {
					why = "the client sent no TLS server name (SNI); it must name the CONNECT host " + strconv.Quote(res.Host)
				}
				sniErr.Store(&why)
				return nil, errors.New("lockhttp: server name mismatch")
			}
			return nil, nil
		},
	}
	tc := tls.Server(cc, conf)
	if err := tc.HandshakeContext(r.Context()); err != nil {
		switch why := sniErr.Load(); {
		case why != nil:
			d := policy.Decision{Verdict: policy.Deny, Code: policy.CodeFloor, Rule: "floor:sni", Reason: *why}
			ex.refused(d, pol)
			ex.finish(0, cc.out.Load(), "tls handshake refused")
		case clientRejected(err):
			// The client closed or alerted after seeing the gate's certificate: pinning, or a
			// client that does not trust the lockhttp CA.
			ex.rec.Code = string(policy.CodePinned)
			ex.rec.Reason = "the client rejected the gate's certificate: " + err.Error()
			ex.finish(0, cc.out.Load(), err.Error())
			g.log.Info("client rejected the gate's certificate", logID, ex.rec.ID, "host", res.Host, "err", err)
		default:
			ex.finish(0, cc.out.Load(), "tls handshake: "+err.Error())
		}
		return
	}
	client.SetReadDeadline(time.Time{})
	var tok [12]byte
	rand.Read(tok[:])
	fc := framing.NewConn(tc, framing.Options{Tunnel: true, Token: hex.EncodeToString(tok[:])})
	tun := &judge.Binding{Host: res.Host, Port: res.Port, Agent: ex.rec.Agent}
	source := ex.source
	srv := &http.Server{
		Handler:           http.HandlerFunc(g.serveTunnel),
		ReadHeaderTimeout: orDefault(g.cfg.ReadHeaderTimeout, 30*time.Second),
		IdleTimeout:       orDefault(g.cfg.IdleTimeout, 2*time.Minute),
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          g.srvLog,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connInfoKey{}, &connInfo{fc: fc, source: source, tunnel: tun})
		},
	}
	srv.Serve(newOneConnListener(fc))
	ex.bytesIn.Store(cc.in.Load())
	ex.finish(http.StatusOK, cc.out.Load(), "")
}

// clientRejected reports a handshake that failed on the client's side: it sent an alert
// (unknown CA, bad certificate) or closed the connection after the gate's certificate.
func clientRejected(err error) bool {
	if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		return true
	}
	var ae tls.AlertError
	if errors.As(err, &ae) {
		return true
	}
	s := err.Error()
	return strings.Contains(s, "remote error") || strings.Contains(s, "connection reset")
}

func trim(s string) string {
	if len(s) > 64 {
		return s[:64]
	}
	return s
}

// serveTunnel hands a decrypted request to the proxy, where it is decided like any other: its
// target as sent is kept for the decision (which checks that it names the tunnel's host and
// port), and its URL made absolute for the proxy. A head the framing check refused is refused.
func (g *Gate) serveTunnel(w http.ResponseWriter, r *http.Request) {
	ci := infoFrom(r.Context())
	if ci.fc.Refusal(r) != nil {
		g.serveNonProxy(w, r)
		return
	}
	sent := *r.URL
	r = r.WithContext(context.WithValue(r.Context(), sentTargetKey{}, &sent))
	r.URL.Scheme = "https"
	r.URL.Host = ci.tunnel.Authority()
	g.proxy.ServeHTTP(w, r)
}

// writeRawRefusal writes a refusal straight to a connection (plain text in a tunnel that should
// have carried TLS), after its audit record.
func (g *Gate) writeRawRefusal(c net.Conn, ex *exchange, d policy.Decision) {
	status := refusalStatus(d)
	body := refusalBody(ex, d)
	ex.finishSync(context.Background(), status, "")
	bw := bufio.NewWriter(c)
	fmt.Fprintf(bw, "HTTP/1.1 %d %s\r\n", status, http.StatusText(status))
	h := refusalHeader(ex, d, len(body))
	h.Set("Connection", "close")
	h.Write(bw)
	bw.WriteString("\r\n")
	bw.Write(body)
	bw.Flush()
}

// countConn counts the bytes of a hijacked connection, reading what the server had buffered
// first.
type countConn struct {
	net.Conn
	r       *bufio.Reader
	in, out atomic.Int64
}

func (c *countConn) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.in.Add(int64(n))
	return n, err
}

func (c *countConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.out.Add(int64(n))
	return n, err
}

// oneConnListener hands one connection to an http.Server and then reports closed once that
// connection is closed, so that Serve returns when the tunnel ends.
type oneConnListener struct {
	c    net.Conn
	once sync.Once
	done chan struct{}
	used atomic.Bool
}

func newOneConnListener(c net.Conn) *oneConnListener {
	return &oneConnListener{c: c, done: make(chan struct{})}
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	if !l.used.Swap(true) {
		return &closeSignalConn{Conn: l.c, l: l}, nil
	}
	<-l.done
	return nil, net.ErrClosed
}

func (l *oneConnListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *oneConnListener) Addr() net.Addr { return l.c.LocalAddr() }

type closeSignalConn struct {
	net.Conn
	l *oneConnListener
}

func (c *closeSignalConn) Close() error {
	err := c.Conn.Close()
	c.l.Close()
	return err
}

// NetConn lets net/http and unixsock reach the wrapped connection.
func (c *closeSignalConn) NetConn() net.Conn { return c.Conn }

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
