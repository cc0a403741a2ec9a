package gate

import (
	"errors"
	"io"
	"maps"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/lockhttp/lockhttp/internal/egress"
	"github.com/lockhttp/lockhttp/internal/judge"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/transport"
)

// env is what Decide needs besides the request, as the gate stands now.
func (g *Gate) env(pol *policy.Policy) *judge.Env {
	e := &judge.Env{Policy: pol, Memory: g.exfil, Budgets: g.budget, Decrypt: g.certs != nil, AuditErr: g.audit.Healthy(), Pins: g.mcp}
	if pol != nil {
		e.Checks = g.insp.Load()
	}
	if e.AuditErr != nil {
		g.log.Error("audit unhealthy: refusing traffic", "err", e.AuditErr)
	}
	return e
}

// arrival is what reached the gate in r: a plain proxy request, an origin-form request, a
// request decrypted inside a tunnel, or a request to a transparent listener.
func (g *Gate) arrival(r *http.Request) *judge.Arrival {
	a := &judge.Arrival{Kind: judge.Plain, Method: r.Method, URL: r.URL, Host: r.Host, Header: r.Header, HTTP2: r.ProtoMajor == 2}
	ci := infoFrom(r.Context())
	if ci != nil {
		a.Source = ci.source
		switch {
		case ci.tunnel != nil:
			a.Kind, a.Tunnel = judge.Tunnel, ci.tunnel
			if u, ok := r.Context().Value(sentTargetKey{}).(*url.URL); ok {
				a.URL = u
			}
		case ci.transparent != 0:
			a.Transparent, a.Port = true, ci.transparent
			if u, ok := r.Context().Value(sentTargetKey{}).(*url.URL); ok {
				a.URL = u
			}
		}
	}
	return a
}

// decided records the decision of v in ex: the audit fields and the canonical log line's.
func (g *Gate) decided(ex *exchange, v *judge.Request, res judge.Result, pol *policy.Policy) {
	ex.rec.Agent = v.Agent
	ex.decided(res, pol)
	g.mcpDecided(ex, res, pol)
	if res.Score != nil {
		ex.rec.Score = res.Score.Value
		ex.rec.Findings = strings.Join(res.Score.Reasons, "; ")
		if res.Score.Suspect && pol.Settings.Heuristics != "enforce" {
			g.log.Info("exfiltration score over the threshold (shadow: not enforced)", logID, ex.rec.ID, "host", res.Host, "score", res.Score.String())
		}
	}
}

// forward handles an absolute-form request, plain or decrypted inside a tunnel: decided by
// onRequest, sent by roundTrip when it may go, its failure answered by onResponse, and the
// answer relayed to w (the refusalWriter of serveProxy, which writes a refusal itself).
func (g *Gate) forward(w http.ResponseWriter, r *http.Request) {
	if !r.URL.IsAbs() {
		g.serveNonProxy(w, r) // refused: it names no host
		return
	}
	sent, ex, resp := g.onRequest(r)
	var err error
	if resp == nil {
		removeProxyHeaders(sent)
		resp, err = g.roundTrip(sent, ex)
		if err == nil && ex.tokenAnswer {
			g.bindIssued(r.Context(), ex, resp)
		}
	}
	var orig io.ReadCloser
	if resp != nil {
		orig = resp.Body
		defer orig.Close()
	}
	if resp = g.onResponse(r, ex, resp, err); resp == nil {
		http.Error(w, "the request could not be completed", http.StatusInternalServerError)
		return
	}
	if resp.Body != orig {
		resp.Header.Del("Content-Length") // an answer of the gate's: the server frames it
	}
	h := w.Header()
	clear(h)
	maps.Copy(h, resp.Header)
	// Trailers announced by the origin are announced to the client, so that the answer is
	// chunked and they can follow it.
	announced := len(resp.Trailer)
	if announced > 0 {
		keys := make([]string, 0, announced)
		for k := range resp.Trailer {
			keys = append(keys, k)
		}
		h["Trailer"] = []string{strings.Join(keys, ", ")}
	}
	w.WriteHeader(resp.StatusCode)
	if resp.StatusCode == http.StatusSwitchingProtocols {
		relaySwitched(w, resp.Body)
		return
	}
	var to io.Writer = w
	if strings.HasPrefix(h.Get("Content-Type"), "text/event-stream") {
		to = flushWriter{w} // each event reaches the client as it comes
	}
	io.Copy(to, resp.Body)
	resp.Body.Close()
	if cb, ok := resp.Body.(*countingBody); ok && cb.err != nil {
		// The answer's record could not be written: its last bytes were held back
		// (countingBody), and the answer is cut, never ended: the server closes the connection
		// with a reset (HTTP/1.1: no final chunk, a body short of its Content-Length) or resets
		// the stream (HTTP/2), so that no client holds a whole answer the audit lacks.
		panic(http.ErrAbortHandler)
	}
	if len(resp.Trailer) > 0 {
		http.NewResponseController(w).Flush() // chunked, however short the body
		if len(resp.Trailer) == announced {
			maps.Copy(h, resp.Trailer)
		} else {
			for k, vs := range resp.Trailer {
				h[http.TrailerPrefix+k] = vs
			}
		}
	}
}

// removeProxyHeaders removes what the client said to the gate and not to the origin.
// "Connection" stays on a WebSocket handshake, whose upgrade it names; the framing of the
// request is the client's own (Request.Close, the body's length) and the upstream client's.
func removeProxyHeaders(r *http.Request) {
	r.RequestURI = ""
	r.Header.Del("Proxy-Connection")
	r.Header.Del("Proxy-Authenticate")
	r.Header.Del("Proxy-Authorization")
	if !transport.HasToken(r.Header["Connection"], "upgrade") || !transport.HasToken(r.Header["Upgrade"], "websocket") {
		r.Header.Del("Connection")
	}
}

// relaySwitched relays a session the origin switched to (roundTrip passes only a WebSocket, as
// a wsSession that reads every frame): the agent's connection is taken over from the server,
// with what it read ahead, and the two sides are copied until one of them ends.
func relaySwitched(w http.ResponseWriter, up io.ReadCloser) {
	rw, ok := up.(io.ReadWriter)
	if !ok {
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	done := make(chan struct{}, 2)
	go func() { io.Copy(rw, transport.WithBuffered(brw.Reader, conn)); done <- struct{}{} }()
	go func() { io.Copy(conn, rw); done <- struct{}{} }()
	<-done
}

// flushWriter flushes after each write.
type flushWriter struct{ w io.Writer }

func (f flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if fl, ok := f.w.(http.Flusher); ok {
		fl.Flush()
	}
	return n, err
}

// onRequest decides a plain-HTTP proxy request, or a request decrypted inside a tunnel: it
// returns the request to send and its exchange, or the answer (a refusal, the gate's own) when
// nothing is sent.
func (g *Gate) onRequest(r *http.Request) (*http.Request, *exchange, *http.Response) {
	event := "request"
	if ci := infoFrom(r.Context()); ci != nil && ci.tunnel != nil {
		event = "tunnel-request"
	}
	ex := g.newExchange(r, event)
	pol := g.pol.Load()
	a := g.arrival(r)
	if container := sourceContainer(pol, a.Source); container != "" {
		// The body is read (up to buffer_limit, bounded in time and in the bytes held) before
		// the decision: it is inspected, and held if a human must see it. (From an unknown
		// source it is not read: the decision refuses the source.)
		body, size, err := g.bodyReader(r, pol, container).read(r)
		if d, ok := bodyRefusal(err); ok {
			ex.decided(judge.Result{Decision: d, Container: container}, pol)
			ex.closeAfter = true
			return r, ex, g.refuse(r.Context(), r, ex, d)
		}
		if err != nil {
			ex.finish(http.StatusBadRequest, 0, "reading the request body: "+err.Error())
			return r, ex, failureResponse(r, ex, http.StatusBadRequest, "The request body could not be read in full.")
		}
		a.Body, a.BodySize = body, size
		ex.held = body
		ex.bytesIn.Store(size)
	}
	v := judge.See(a)
	res := g.decide(g.env(pol), v, event)
	g.decided(ex, v, res, pol)
	if res.Verdict == policy.Deny {
		return r, ex, g.refuse(r.Context(), r, ex, res.Decision)
	}
	if res.Self {
		return r, ex, g.selfResponse(r, ex, res, pol, v.Kind == judge.Tunnel)
	}
	r.Method = v.Method
	ex.target = egress.Target{Host: res.Host, Port: res.Port, Floor: &pol.Floor}
	if res.Verdict == policy.Ask {
		if d := g.askRequest(r, ex, v, res, pol, g.insp.Load()); d != nil {
			ex.decided(judge.Result{Decision: *d, Container: res.Container}, pol)
			return r, ex, g.refuse(r.Context(), r, ex, *d)
		}
	}
	g.mcpGoing(r, ex, res)
	if res.Inject != nil {
		applyInject(r, res.Inject)
	}
	ex.tokenAnswer = res.TokenAnswer
	r.URL.Host = ex.target.Addr()
	r.Trailer = nil // trailers would pass the checks unseen
	// "Connection: close" from the client is about its own connection: the upstream connection
	// goes back to the pool either way.
	r.Close = false
	return r.WithContext(egress.WithTarget(r.Context(), ex.target)), ex, nil
}

// sentTargetKey keys the request target as the client sent it inside a tunnel (serveTunnel
// makes the URL absolute for the proxy).
type sentTargetKey struct{}

// roundTrip sends a FREE request and wraps the response body, so that the exchange is recorded
// when the body has been copied to the client.
func (g *Gate) roundTrip(r *http.Request, ex *exchange) (*http.Response, error) {
	if d, ok := g.intend(r.Context(), ex); !ok {
		ex.refused(d, g.pol.Load())
		return g.refuse(r.Context(), r, ex, d), nil
	}
	start := time.Now()
	// The gate's own client, unless the request or its origin needs net/http's transport
	// (transport.Upstream: HTTP/2 origins, upgrades, Expect, large bodies).
	var resp *http.Response
	var err error
	own := g.upstream.Takes(r)
	if own {
		resp, err = g.upstream.RoundTrip(r)
	}
	if !own || errors.Is(err, transport.ErrSpeaksH2) {
		resp, err = g.transport.RoundTrip(r)
	}
	if err != nil {
		return nil, err
	}
	g.cfg.Metrics.Upstream(time.Since(start))
	stripHopResponse(resp)
	resp.Header.Set(HeaderRequest, ex.rec.ID)
	if resp.StatusCode != http.StatusSwitchingProtocols {
		g.mcpAnswer(ex, resp)
		resp.Body = &countingBody{rc: resp.Body, ex: ex, status: resp.StatusCode, length: resp.ContentLength}
		return resp, nil
	}
	up, ok := resp.Body.(io.ReadWriteCloser)
	rw := transport.RefusalWriterFrom(r.Context())
	if !ok || rw == nil || !judge.IsWebSocket(resp.Header.Get("Upgrade")) {
		// Only a WebSocket upgrade is passed (judge.See), and only where its frames are read.
		resp.Body.Close()
		return nil, errors.New("the origin switched to a protocol the gate cannot follow")
	}
	if d := judge.DecideSwitch(resp.Header); d != nil {
		up.Close()
		ex.refused(*d, g.pol.Load())
		return g.refuse(r.Context(), r, ex, *d), nil
	}
	s := g.newWSSession(ex, up)
	resp.Body, rw.WS = s, s
	return resp, nil
}

// onResponse turns a failed round trip (err) into an answer and records WebSocket switches; r is
// the request as it arrived.
func (g *Gate) onResponse(r *http.Request, ex *exchange, resp *http.Response, err error) *http.Response {
	if ex.recorded.Load() {
		return resp
	}
	if resp == nil {
		if err == nil {
			err = errors.New("no response")
		}
		var refused *egress.RefusedError
		if errors.As(err, &refused) {
			d := judge.Address(refused.Refusal)
			ex.refused(d, g.pol.Load())
			return g.refuse(r.Context(), r, ex, d)
		}
		ex.finish(http.StatusBadGateway, 0, err.Error())
		return failureResponse(r, ex, http.StatusBadGateway, unreachable(err))
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		if err := ex.finish(resp.StatusCode, 0, "upgraded to "+resp.Header.Get("Upgrade")); err != nil {
			// No 101 without its record: the origin's side closes, the agent is refused.
			resp.Body.Close()
			return refusalResponse(r, unrecordedRefusal(r, ex, err))
		}
		return resp
	}
	if ex.closeAfter {
		// The upgrade did not happen: the framing check stopped following this connection when
		// it saw the upgrade request, so the connection ends with this answer.
		resp.Header.Set("Connection", "close")
	}
	return resp
}

// serveNonProxy answers requests that are not proxy requests: the framing check's substituted
// requests, and origin-form requests sent to the gate as if it were a server. Both are refused;
// the decision is Decide's like any other.
func (g *Gate) serveNonProxy(w http.ResponseWriter, r *http.Request) {
	event := "request"
	ci := infoFrom(r.Context())
	if ci != nil && ci.tunnel != nil {
		event = "tunnel-request" // inside a decrypted tunnel, as onRequest names it
	}
	ex := g.newExchange(r, event)
	a := g.arrival(r)
	if ci != nil && ci.fc != nil {
		if a.Framing = ci.fc.Refusal(r); a.Framing != nil {
			ex.rec.Method, ex.rec.URL = "-", "-"
			if ci.tunnel != nil {
				ex.rec.URL = ci.tunnel.Root()
			}
		}
	}
	pol := g.pol.Load()
	v := judge.See(a)
	res := g.decide(g.env(pol), v, ex.rec.Event)
	if res.Verdict != policy.Deny {
		// Only refusals reach here; anything else is a defect, refused all the same.
		res.Decision = judge.DecisionNoHost
	}
	g.decided(ex, v, res, pol)
	g.refuseWriter(w, r, ex, res.Decision)
}

// sourceContainer is the container [sources] names for a source address, or "" (no policy, or
// no container).
func sourceContainer(pol *policy.Policy, source netip.Addr) string {
	if pol == nil {
		return ""
	}
	return pol.Container(source)
}

// bodyReader is how a body is read for the decision on the connection r arrived on. Its clock
// is the wall clock, whatever the gate's: it sets the connection's read deadlines.
func (g *Gate) bodyReader(r *http.Request, pol *policy.Policy, container string) *bodyReader {
	br := &bodyReader{s: &pol.Settings, held: &g.held, container: container, now: time.Now,
		grace: orDefault(g.cfg.BodyGrace, bodyGrace), stall: orDefault(g.cfg.BodyStall, bodyStall)}
	br.hold = holdOf(r.Context())
	if si := streamFrom(r.Context()); si != nil {
		br.conn = si.rc // an HTTP/2 stream: its own deadline, the connection's other streams go on
	} else if ci := infoFrom(r.Context()); ci != nil && ci.fc != nil {
		br.conn = ci.fc
	}
	return br
}

// applyInject adds the credential the policy injects: a header replacing whatever the agent
// sent under that name, or a query parameter replacing its occurrences.
func applyInject(r *http.Request, in *judge.Inject) {
	if in.Header != "" {
		r.Header.Del(in.Header)
		r.Header.Set(in.Header, in.Value)
		return
	}
	var kept []string
	for _, p := range strings.Split(r.URL.RawQuery, "&") {
		if p == "" {
			continue
		}
		name, _, _ := strings.Cut(p, "=")
		if dn, err := url.QueryUnescape(name); err == nil && dn == in.Query {
			continue
		}
		kept = append(kept, p)
	}
	kept = append(kept, url.QueryEscape(in.Query)+"="+url.QueryEscape(in.Value))
	r.URL.RawQuery = strings.Join(kept, "&")
}
