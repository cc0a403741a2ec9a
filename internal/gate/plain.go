package gate

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/url"
	"strings"

	"github.com/elazarl/goproxy"

	"github.com/lockhttp/lockhttp/internal/egress"
	"github.com/lockhttp/lockhttp/internal/exfil"
	"github.com/lockhttp/lockhttp/internal/judge"
	"github.com/lockhttp/lockhttp/internal/policy"
)

// Decisions the gate makes without the judge.
var (
	decisionNoPolicy = policy.Decision{Verdict: policy.Deny, Code: policy.CodeNoConsole, Rule: "no-policy",
		Reason: "the gate has no policy yet: the console has not served one, so nothing goes out"}
	decisionOriginForm = policy.Decision{Verdict: policy.Deny, Code: policy.CodeFloor, Rule: "floor:origin-form",
		Reason: "the request names no host (origin-form); send requests through the gate as an HTTP proxy, with absolute URLs"}
)

func decisionScheme(scheme string) policy.Decision {
	return policy.Decision{Verdict: policy.Deny, Code: policy.CodeFloor, Rule: "floor:scheme",
		Reason: fmt.Sprintf("the URL scheme %q is not http or https", scheme)}
}

func decisionUpgrade(up string) policy.Decision {
	if len(up) > 40 {
		up = up[:40]
	}
	return policy.Decision{Verdict: policy.Deny, Code: policy.CodeFloor, Rule: "floor:upgrade",
		Reason: fmt.Sprintf("the protocol upgrade to %q is not allowed; only WebSocket upgrades are decided and passed", up)}
}

// noConsole turns an ASK into its refusal while no hub can ask a human.
func noConsole(d policy.Decision) policy.Decision {
	d.Code = policy.CodeNoConsole
	d.Reason += "; no console is running to ask a human, so it is refused"
	return d
}

// newProxy configures goproxy with its unsafe defaults replaced: origins' certificates are
// verified, the environment's proxy settings are ignored, every dial goes through the floor, and
// every request is decided before it goes out.
func (g *Gate) newProxy() *goproxy.ProxyHttpServer {
	p := goproxy.NewProxyHttpServer()
	p.Logger = log.New(&slogWriter{g.log}, "", 0)
	p.Tr = g.transport
	p.ConnectDial = nil
	p.KeepAcceptEncoding = true
	p.NonproxyHandler = http.HandlerFunc(g.serveNonProxy)
	p.OnRequest().DoFunc(g.onRequest)
	p.OnResponse().DoFunc(g.onResponse)
	return p
}

// onRequest decides a plain-HTTP proxy request.
func (g *Gate) onRequest(r *http.Request, pctx *goproxy.ProxyCtx) (*http.Request, *http.Response) {
	kind, event, authority := judge.Plain, "request", r.URL.Host
	ci := infoFrom(r.Context())
	if ci != nil && ci.tunnel != nil {
		kind, event, authority = judge.Tunnel, "tunnel-request", ci.tunnel.authority
	}
	ex := g.newExchange(r, event)
	pctx.UserData = ex
	pol := g.pol.Load()
	if pol == nil {
		ex.refused(decisionNoPolicy, nil)
		return r, g.refuse(r.Context(), r, ex, decisionNoPolicy)
	}
	ex.rec.Container = pol.Container(ex.source)
	if err := g.audit.Healthy(); err != nil {
		g.log.Error("audit unhealthy: refusing traffic", "err", err)
		ex.finish(http.StatusServiceUnavailable, 0, "audit unavailable")
		return r, failureResponse(r, ex, http.StatusServiceUnavailable,
			"The gate cannot write its audit, so nothing goes out until it can. Ask the user to check the gate.")
	}
	if r.URL.Scheme != "http" && r.URL.Scheme != "https" {
		d := decisionScheme(r.URL.Scheme)
		ex.refused(d, pol)
		return r, g.refuse(r.Context(), r, ex, d)
	}
	if up := stripHop(r.Header); up != "" && !isWebSocket(up) {
		d := decisionUpgrade(up)
		ex.refused(d, pol)
		return r, g.refuse(r.Context(), r, ex, d)
	}
	if kind == judge.Plain && r.URL.Scheme == "https" {
		// https:// in a plain proxy request: the client asks the gate to speak TLS for it.
		// Clients use CONNECT for that; refusing keeps one path for HTTPS.
		d := decisionScheme(r.URL.Scheme)
		d.Reason = "a plain proxy request for an https:// URL; send HTTPS through CONNECT"
		ex.refused(d, pol)
		return r, g.refuse(r.Context(), r, ex, d)
	}
	if isSelf(authority, 80) {
		return r, g.selfResponse(r, ex, pol, kind == judge.Tunnel)
	}
	in := g.insp.Load()
	if in != nil && in.Secrets != nil {
		ex.rec.URL = in.Secrets.MaskURL(r.URL)
	}
	// The body is read (up to buffer_limit) before the decision: it is inspected, and held if a
	// human must see it.
	body, size, err := readBody(r, pol.Settings.BufferLimit)
	if err != nil {
		ex.finish(http.StatusBadRequest, 0, "reading the request body: "+err.Error())
		return r, failureResponse(r, ex, http.StatusBadRequest, "The request body could not be read: "+err.Error())
	}
	ex.bytesIn.Store(size)
	res := judge.Decide(pol, in, &judge.Request{
		Kind: kind, Source: ex.source, Method: r.Method, Scheme: r.URL.Scheme,
		Authority: authority, Path: r.URL.EscapedPath(), Query: r.URL.RawQuery, Header: r.Header,
		UserInfo: r.URL.User != nil, MediaType: mediaType(r.Header), Body: body, BodySize: size,
	})
	ex.decided(res, pol)
	if res.Verdict == policy.Deny {
		return r, g.refuse(r.Context(), r, ex, res.Decision)
	}
	ex.target = egress.Target{Host: res.Host, Port: res.Port, Floor: &pol.Floor}
	res = g.heuristics(r, ex, res, pol, body, size)
	if res.Verdict == policy.Ask {
		if d := g.askRequest(r, ex, res, pol, in, body); d != nil {
			ex.decided(judge.Result{Decision: *d, Container: res.Container}, pol)
			return r, g.refuse(r.Context(), r, ex, *d)
		}
	}
	if res.Inject != nil {
		applyInject(r, res.Inject)
	}
	r.URL.Host = ex.target.Addr()
	r.Trailer = nil // trailers would pass the checks unseen
	// "Connection: close" from the client is about its own connection: the upstream connection
	// goes back to the pool either way.
	r.Close = false
	pctx.RoundTripper = goproxy.RoundTripperFunc(g.roundTrip)
	return r.WithContext(egress.WithTarget(r.Context(), ex.target)), nil
}

// roundTrip sends a FREE request and wraps the response body, so that the exchange is recorded
// when the body has been copied to the client.
func (g *Gate) roundTrip(r *http.Request, pctx *goproxy.ProxyCtx) (*http.Response, error) {
	ex := pctx.UserData.(*exchange)
	resp, err := g.transport.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	stripHopResponse(resp)
	resp.Header.Set(HeaderRequest, ex.rec.ID)
	if resp.StatusCode != http.StatusSwitchingProtocols {
		resp.Body = &countingBody{rc: resp.Body, ex: ex, status: resp.StatusCode}
	}
	return resp, nil
}

// onResponse turns a failed round trip into an answer and records WebSocket switches.
func (g *Gate) onResponse(resp *http.Response, pctx *goproxy.ProxyCtx) *http.Response {
	ex, _ := pctx.UserData.(*exchange)
	if ex == nil || ex.recorded.Load() {
		return resp
	}
	r := pctx.Req
	if resp == nil {
		err := pctx.Error
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
		return failureResponse(r, ex, http.StatusBadGateway, "The target could not be reached: "+err.Error())
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		ex.finish(resp.StatusCode, 0, "upgraded to "+resp.Header.Get("Upgrade"))
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
// requests, and origin-form requests sent to the gate as if it were a server.
func (g *Gate) serveNonProxy(w http.ResponseWriter, r *http.Request) {
	ex := g.newExchange(r, "request")
	pol := g.pol.Load()
	if pol != nil {
		ex.rec.Container = pol.Container(ex.source)
	}
	if ci := infoFrom(r.Context()); ci != nil && ci.fc != nil {
		if fe := ci.fc.Refusal(r); fe != nil {
			d := judge.Framing(fe)
			ex.rec.Method, ex.rec.URL = "-", "-"
			ex.refused(d, pol)
			g.refuseWriter(w, r, ex, d, true)
			return
		}
	}
	ex.refused(decisionOriginForm, pol)
	g.refuseWriter(w, r, ex, decisionOriginForm, false)
}

// slogWriter lets goproxy's printf logger write to the gate's structured log.
type slogWriter struct {
	log interface{ Debug(string, ...any) }
}

func (w *slogWriter) Write(p []byte) (int, error) {
	w.log.Debug("goproxy", "msg", string(p))
	return len(p), nil
}

// readBody reads a request body up to limit+1 bytes and puts what it read back as the body;
// size is the number of bytes read (limit+1: too large).
func readBody(r *http.Request, limit int64) ([]byte, int64, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, 0, nil
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, 0, err
	}
	r.Body.Close()
	r.Body = io.NopCloser(bytes.NewReader(data))
	r.ContentLength = int64(len(data))
	r.TransferEncoding = nil
	if len(data) == 0 {
		r.Body = http.NoBody
	}
	return data, int64(len(data)), nil
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

// ruleHeuristics names the ASK the exfiltration heuristics make under heuristics = "enforce".
const ruleHeuristics = "heuristics"

// heuristics scores a request about to go out (DESIGN.md step 9) and records the score in the
// audit. Under heuristics = "enforce", a FREE request over the threshold asks instead; under
// "shadow" (the default) the score is only logged.
func (g *Gate) heuristics(r *http.Request, ex *exchange, res judge.Result, pol *policy.Policy, body []byte, size int64) judge.Result {
	sc := g.exfil.Score(&exfil.Request{Host: res.Host, Path: r.URL.EscapedPath(), Query: r.URL.RawQuery, Header: r.Header,
		Body: body, BodySize: size, Trusted: pol.Trusted(res.Host)})
	if sc.Value <= 0 {
		return res
	}
	ex.rec.Score = sc.Value
	ex.rec.Findings = strings.Join(sc.Reasons, "; ")
	if !sc.Suspect {
		return res
	}
	if pol.Settings.Heuristics != "enforce" {
		g.log.Info("exfiltration score over the threshold (shadow: not enforced)", logID, ex.rec.ID, "host", res.Host, "score", sc.String())
		return res
	}
	if res.Verdict == policy.Free {
		res.Decision = policy.Decision{Verdict: policy.Ask, Rule: ruleHeuristics,
			Reason: fmt.Sprintf("the request looks like data leaving (exfiltration score %.1f): %s", sc.Value, strings.Join(sc.Reasons, "; "))}
		res.Findings = append(res.Findings, sc.Reasons...)
		ex.decided(res, pol)
	}
	return res
}
