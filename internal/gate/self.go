package gate

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/lockhttp/lockhttp/internal/gateapi"
	"github.com/lockhttp/lockhttp/internal/judge"
	"github.com/lockhttp/lockhttp/internal/policy"
)

// SelfAnswer is what the gate answers for its own name (gateapi.SelfAnswer).
type SelfAnswer = gateapi.SelfAnswer

// selfResponse answers a request for the gate's own name (Decide's rule self) and records it,
// on disk before the answer; when the record could not be written, unrecordedRefusal answers.
func (g *Gate) selfResponse(r *http.Request, ex *exchange, res judge.Result, pol *policy.Policy, decrypted bool) *http.Response {
	if r.URL.Path == SelfMCPPath {
		return g.selfMCP(r, ex, res, pol)
	}
	body, _ := json.Marshal(SelfAnswer{Gate: "lockhttp", Decrypted: decrypted, Container: res.Container,
		PolicyVersion: pol.Version, Request: ex.rec.ID})
	body = append(body, '\n')
	if err := ex.finishSync(r.Context(), http.StatusOK, ""); err != nil {
		return refusalResponse(r, unrecordedRefusal(r, ex, err))
	}
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
