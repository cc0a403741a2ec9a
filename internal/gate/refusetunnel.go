package gate

import (
	"net/http"
	"net/url"
	"sync/atomic"

	"golang.org/x/net/http2"

	"github.com/lockhttp/lockhttp/internal/framing"
	"github.com/lockhttp/lockhttp/internal/judge"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/refusal"
	"github.com/lockhttp/lockhttp/internal/transport"
)

// refuseInTunnel delivers the refusal of a CONNECT the gate would decrypt (res.Intercept: the
// deny list or a deny rule refuses the whole host) where every client reads it: most clients
// show nothing of a refused CONNECT but its status. The gate gets the host's certificate, opens
// the tunnel as intercept does (200, TLS with the SNI check) and answers the first request inside
// with the refusal (the same code, rule, reason and advice, status 403, Connection: close), then
// closes. It decides nothing: the request inside is refused with the CONNECT's decision, and
// nothing is dialled. Without a certificate (no signer, the signer down or refusing the name) the
// CONNECT itself is refused, with the same body.
//
// The audit gets a record for each: the request inside (event tunnel-request, the CONNECT's
// decision, status 403, on disk before the answer, its detail naming the CONNECT), then the
// CONNECT (event connect, the same decision, status 403, when the tunnel closes, its detail
// naming the request it answered or why none was answered).
func (g *Gate) refuseInTunnel(w http.ResponseWriter, r *http.Request, ex *exchange, res judge.Result, pol *policy.Policy) {
	d := res.Decision
	if g.certs == nil {
		g.refuseWriter(w, r, ex, d)
		return
	}
	cert, err := g.certs.Certificate(r.Context(), res.Host)
	if err != nil {
		g.log.Info("no certificate to answer a refusal inside the tunnel: refused on the CONNECT", logID, ex.rec.ID, "host", res.Host, "err", err)
		ex.rec.Detail = "refused on the CONNECT, without a certificate to answer inside the tunnel: " + err.Error()
		g.refuseWriter(w, r, ex, d)
		return
	}
	t, fail := g.openTunnel(w, r, ex.rec.ID, res.Host, cert, pol.Settings.HTTP2)
	g.answerInTunnel(ex, res, pol, t, fail)
}

// answerInTunnel answers the first request inside a tunnel openTunnel (or a transparent
// listener's handshake) opened with the refusal res of the whole host, as refuseInTunnel says.
func (g *Gate) answerInTunnel(ex *exchange, res judge.Result, pol *policy.Policy, t *tunnelConn, fail *openFailure) {
	d := res.Decision
	status := refusal.Status(d)
	detached := false // the tunnel outlives this call: serveTunnelConn's end closes it
	if t != nil {
		defer func() {
			if !detached {
				t.close()
			}
		}()
	}
	if fail != nil {
		if fail.kind == openPlain {
			// Plain text where TLS was expected: the same refusal, in plain text.
			ex.rec.Detail = "answered inside the tunnel, in plain text (the client sent no TLS)"
			g.writeRawRefusal(t.client, ex, d)
			return
		}
		ex.finish(status, t.out(), "the tunnel was opened to answer with this refusal and was not used: "+fail.detail)
		return
	}
	h2 := t.tls.ConnectionState().NegotiatedProtocol == http2.NextProtoTLS
	var fc *framing.Conn
	if !h2 {
		fc = framing.NewConn(t.tls, framing.Options{Tunnel: true, Token: transport.NewToken(), Lean: true})
	}
	tun := &judge.Binding{Host: res.Host, Port: res.Port, Agent: ex.rec.Agent, Transparent: ex.transparent()}
	var answered atomic.Pointer[string] // the id of the (first) request refused inside
	h := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		// The first answer closes the connection (on HTTP/2, once the streams open are
		// answered); were there another request, it would be refused the same way.
		in := g.newExchange(req, "tunnel-request")
		u := url.URL{Scheme: "https", Host: tun.Authority(), Path: req.URL.Path, RawPath: req.URL.RawPath, RawQuery: req.URL.RawQuery}
		if u.Path == "" {
			u.Path = "/"
		}
		if chk := g.insp.Load(); chk != nil && chk.Secrets != nil {
			in.rec.URL = recordURL(chk.Secrets, &u)
		} else {
			in.rec.URL = recordURL(nil, &u)
		}
		if fc != nil && fc.Refusal(req) != nil {
			// A head the framing check refused: nothing of it is known.
			in.rec.Method, in.rec.URL = "-", tun.Root()
		}
		in.rec.Agent = ex.rec.Agent
		in.rec.Detail = "refused with its CONNECT " + ex.rec.ID + ", which the policy refuses as a whole"
		in.decided(judge.Result{Decision: d, Container: ex.rec.Container}, pol)
		answered.CompareAndSwap(nil, &in.rec.ID)
		g.refuseWriter(w, req, in, d)
	})
	end := func() {
		ex.bytesIn.Store(t.cc.In.Load())
		detail := "the tunnel was opened to answer with this refusal; the client sent no request"
		if id := answered.Load(); id != nil {
			detail = "the tunnel was opened to answer with this refusal; answered request " + *id
		}
		ex.finish(status, t.out(), detail)
	}
	if h2 {
		g.serveH2(t.tls, ex.source, tun, ex.rec.ID, h2LastAnswer(h))
		end()
		return
	}
	detached = true
	g.serveTunnelConn(fc, ex.source, tun, h, func() {
		end()
		t.close()
	})
}
