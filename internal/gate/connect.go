package gate

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"

	"github.com/lockhttp/lockhttp/internal/egress"
	"github.com/lockhttp/lockhttp/internal/judge"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/transport"
)

// serveConnect decides a CONNECT: one to be decrypted is opened (intercept), or refused inside
// its tunnel (refuseInTunnel); one decided at the domain is refused here or, when it is free,
// spliced. The tunnel is the CONNECT target's (r.Host, which net/http takes from the target);
// a Host header naming anything else, the proxy for one, is not read.
func (g *Gate) serveConnect(w http.ResponseWriter, r *http.Request) {
	ex := g.newExchange(r, "connect")
	pol := g.pol.Load()
	a := g.arrival(r)
	a.Kind = judge.Domain
	v := judge.See(a)
	res := g.decide(g.env(pol), v, ex.rec.Event)
	g.decided(ex, v, res, pol)
	if res.Verdict == policy.Deny {
		if res.Intercept {
			// A host to be decrypted, refused as a whole: answered inside the tunnel, where
			// the client shows it.
			g.refuseInTunnel(w, r, ex, res, pol)
			return
		}
		g.refuseWriter(w, r, ex, res.Decision)
		return
	}
	if res.Intercept {
		g.intercept(w, r, ex, res, pol)
		return
	}
	ex.target = egress.Target{Host: res.Host, Port: res.Port, Floor: &pol.Floor}
	if res.Verdict == policy.Ask {
		if d := g.askConnect(r, ex, res, pol); d != nil {
			ex.decided(judge.Result{Decision: *d, Container: res.Container}, pol)
			g.refuseWriter(w, r, ex, *d)
			return
		}
	}
	if d, ok := g.intend(r.Context(), ex); !ok {
		ex.refused(d, pol)
		g.refuseWriter(w, r, ex, d)
		return
	}
	up, err := g.dialer.Dial(r.Context(), ex.target)
	if err != nil {
		var refused *egress.RefusedError
		if errors.As(err, &refused) {
			d := judge.Address(refused.Refusal)
			ex.refused(d, pol)
			g.refuseWriter(w, r, ex, d)
			return
		}
		ex.finish(http.StatusBadGateway, 0, err.Error())
		writeFailure(w, r, ex, http.StatusBadGateway, unreachable(err))
		return
	}
	client, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		up.Close()
		ex.finish(http.StatusInternalServerError, 0, "hijack: "+err.Error())
		return
	}
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n"+HeaderRequest+": "+ex.rec.ID+"\r\n\r\n"); err != nil {
		client.Close()
		up.Close()
		ex.finish(http.StatusOK, 0, "client went away")
		return
	}
	in, out := g.splice(client, brw.Reader, up)
	ex.bytesIn.Store(in)
	g.budgetSent(pol, res, in)
	ex.finish(http.StatusOK, out, "")
}

func writeFailure(w http.ResponseWriter, r *http.Request, ex *exchange, status int, why string) {
	resp := failureResponse(r, ex, status, why)
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.Header().Set("Connection", "close")
	w.WriteHeader(resp.StatusCode) // unrecordedRefusal's when the record failed
	io.Copy(w, resp.Body)
}

// splice copies both ways until both directions end (transport.Splice), the client tracked as an
// open tunnel meanwhile; it returns the bytes sent up (client to target) and down.
func (g *Gate) splice(client net.Conn, buffered *bufio.Reader, up net.Conn) (in, out int64) {
	g.trackTunnel(client, true)
	defer g.trackTunnel(client, false)
	return transport.Splice(client, buffered, up)
}
