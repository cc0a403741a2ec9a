package gate

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/lockhttp/lockhttp/internal/floor"
	"github.com/lockhttp/lockhttp/internal/judge"
	"github.com/lockhttp/lockhttp/internal/policy"
)

// SelfAnswer is what the gate answers for its own name (http://lockhttp.internal/, or any
// request in a CONNECT to lockhttp.internal): proof for lockhttp doctor and for a person with
// curl that the client reaches the gate and, when Decrypted, trusts the lockhttp CA.
type SelfAnswer struct {
	Gate          string `json:"gate"` // always "lockhttp"
	Decrypted     bool   `json:"decrypted"`
	Container     string `json:"container"`
	PolicyVersion string `json:"policy_version"`
	Request       string `json:"request"` // the audit record's id
}

// ruleSelf names the decision for the gate's own name in the audit.
const ruleSelf = "self"

var decisionSelf = policy.Decision{Verdict: policy.Free, Rule: ruleSelf,
	Reason: "the gate's own name (" + floor.SelfName + "): answered by the gate, nothing goes out"}

// isSelf reports whether authority names the gate's own name, on any port.
func isSelf(authority string, defPort int) bool {
	host, _, ref := floor.Authority(authority, defPort)
	return ref == nil && host == floor.SelfName
}

// selfSource runs the source check for a request to the gate's own name: the gate answers only
// the containers its policy names.
func selfSource(pol *policy.Policy, ex *exchange) (judge.Result, bool) {
	return judge.Source(pol, &judge.Request{Source: ex.source})
}

// selfResponse answers a request for the gate's own name and records it.
func (g *Gate) selfResponse(r *http.Request, ex *exchange, pol *policy.Policy, decrypted bool) *http.Response {
	res, ok := selfSource(pol, ex)
	if !ok {
		ex.decided(res, pol)
		return g.refuse(r.Context(), r, ex, res.Decision)
	}
	res.Decision = decisionSelf
	ex.decided(res, pol)
	body, _ := json.Marshal(SelfAnswer{Gate: "lockhttp", Decrypted: decrypted, Container: res.Container,
		PolicyVersion: pol.Version, Request: ex.rec.ID})
	body = append(body, '\n')
	ex.finishSync(r.Context(), http.StatusOK, "")
	h := make(http.Header, 4)
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	h.Set(HeaderRequest, ex.rec.ID)
	if ex.closeAfter {
		h.Set("Connection", "close")
	}
	return answer(r, http.StatusOK, h, body)
}

// serveSelfConnect opens a CONNECT to the gate's own name: decrypted, the requests inside are
// answered by the gate. Without a signer nothing can be shown inside TLS, and the CONNECT is
// refused with the reason.
func (g *Gate) serveSelfConnect(w http.ResponseWriter, r *http.Request, ex *exchange, pol *policy.Policy) {
	res, ok := selfSource(pol, ex)
	if !ok {
		ex.decided(res, pol)
		g.refuseWriter(w, r, ex, res.Decision, true)
		return
	}
	if g.certs == nil {
		d := policy.Decision{Verdict: policy.Deny, Code: policy.CodeFloor, Rule: ruleSelf,
			Reason: "the gate runs without a signer, so it decrypts nothing; http://" + floor.SelfName + "/ answers in plain HTTP"}
		ex.decided(judge.Result{Decision: d, Container: res.Container}, pol)
		g.refuseWriter(w, r, ex, d, true)
		return
	}
	_, port, _ := floor.Authority(r.Host, 0)
	res.Decision = decisionSelf
	res.Host, res.Port, res.Intercept = floor.SelfName, port, true
	ex.decided(res, pol)
	g.intercept(w, r, ex, res, pol)
}
