package gate

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"syscall"

	"github.com/lockhttp/lockhttp/internal/display"
	"github.com/lockhttp/lockhttp/internal/judge"
	"github.com/lockhttp/lockhttp/internal/policy"
)

// Response headers the gate adds.
const (
	HeaderCode    = "X-LockHTTP-Code"
	HeaderRequest = "X-LockHTTP-Request"
	HeaderRule    = "X-LockHTTP-Rule"
	HeaderTicket  = "X-LockHTTP-Ticket"
	// HeaderAdvice is what to do next, the code's advice: on HTTP/1.1 in the reason phrase too,
	// on HTTP/2 (which has none) here and in the body only.
	HeaderAdvice = "X-LockHTTP-Advice"
)

// refusalStatus is the HTTP status of a refusal.
func refusalStatus(d policy.Decision) int {
	switch d.Rule {
	case "framing:bad-request", "framing:tls-on-plain", "floor:origin-form":
		return http.StatusBadRequest
	case "framing:too-large":
		return http.StatusRequestHeaderFieldsTooLarge
	}
	switch d.Code {
	case policy.CodeNoAudit, policy.CodeNoSigner, policy.CodeBusy:
		return http.StatusServiceUnavailable
	case policy.CodeBodyTimeout:
		return http.StatusRequestTimeout
	case policy.CodeAskLimit, policy.CodeBudget:
		return http.StatusTooManyRequests
	}
	return http.StatusForbidden
}

// Retry-After of the refusals that a retry can pass: a request a human has not answered yet
// (the retry waits on the same ticket, and passes once it is approved), the gate's own failures
// (its audit, its signer), which pass once they are fixed, a gate holding as many bodies as it
// may, and a container with as many tickets waiting as it may. (A budget's refusal carries its
// own, Decision.RetryAfter: when its window frees.)
const (
	retryPending     = 5
	retryUnavailable = 10
	retryAskLimit    = 30
)

// retryAfter is the Retry-After of a refusal with code c in seconds, or 0 for none.
func retryAfter(c policy.Code) int {
	switch c {
	case policy.CodePending, policy.CodeBusy:
		return retryPending
	case policy.CodeAskLimit:
		return retryAskLimit
	case policy.CodeNoAudit, policy.CodeNoSigner:
		return retryUnavailable
	}
	return 0
}

// refusal is the answer to one refused request, in the form its client reads (formOf): the
// status line's status and reason phrase, the headers and the body.
type refusal struct {
	status int
	phrase string
	header http.Header
	body   []byte
	head   bool // the request was a HEAD: the body is not sent
	// noDrain: the rest of the request's body is not read before the answer (a body refused
	// because it stalled or trickled: reading on would wait on it).
	noDrain bool
}

// newRefusal is the answer refusing r with d. r is nil for what the gate could not read as a
// request (plain text where TLS was expected): it gets the plain-text form.
func newRefusal(r *http.Request, ex *exchange, d policy.Decision) *refusal {
	rf := &refusal{status: refusalStatus(d), head: r != nil && r.Method == http.MethodHead, noDrain: d.Code == policy.CodeBodyTimeout}
	if mcpRefused(rf, r, ex, d) {
		return rf
	}
	text := refusalBody(ex, d)
	switch formOf(r, ex.held) {
	case formGit:
		rf.status, rf.body = http.StatusOK, gitRefusal(text, string(d.Code))
		rf.header = refusalHeader(ex, d, gitResultType, len(rf.body))
	case formJSON:
		rf.body = refusalJSON(ex, d)
		rf.header = refusalHeader(ex, d, "application/json; charset=utf-8", len(rf.body))
	default:
		rf.body = text
		rf.header = refusalHeader(ex, d, "text/plain; charset=utf-8", len(rf.body))
	}
	rf.phrase = http.StatusText(rf.status)
	if rf.status != http.StatusOK {
		rf.phrase = reasonPhrase(rf.status, d)
	}
	rf.header.Set("Connection", "close")
	return rf
}

// refusalBody is the plain-text body that tells the agent what was refused, why and what to do.
// Every part that came from the request goes through display.Escape.
func refusalBody(ex *exchange, d policy.Decision) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "lockhttp refused this request: %s %s\n\n", display.Escape(ex.rec.Method, false), display.Escape(ex.rec.URL, false))
	fmt.Fprintf(&b, "Code:    %s\n", d.Code)
	if d.Rule != "" {
		fmt.Fprintf(&b, "Rule:    %s\n", display.Escape(d.Rule, false))
	}
	fmt.Fprintf(&b, "Why:     %s\n", display.Escape(d.Reason, false))
	if ex.rec.Ticket != "" {
		fmt.Fprintf(&b, "Ticket:  %s\n", ex.rec.Ticket)
	}
	fmt.Fprintf(&b, "Request: %s\n\n", shownID(ex))
	fmt.Fprintf(&b, "What to do: %s\n", d.Code.Advice())
	return b.Bytes()
}

func refusalHeader(ex *exchange, d policy.Decision, contentType string, n int) http.Header {
	h := make(http.Header, 8)
	h.Set("Content-Type", contentType)
	h.Set("Content-Length", strconv.Itoa(n))
	h.Set("Cache-Control", "no-store")
	h.Set(HeaderCode, string(d.Code))
	if id := shownID(ex); id != unrecordedID {
		h.Set(HeaderRequest, id)
	}
	if d.Rule != "" {
		h.Set(HeaderRule, d.Rule)
	}
	if ex.rec.Ticket != "" {
		h.Set(HeaderTicket, ex.rec.Ticket)
	}
	h.Set(HeaderAdvice, phraseText(d.Code.Advice(), maxPhrase))
	if s := max(d.RetryAfter, retryAfter(d.Code)); s > 0 {
		h.Set("Retry-After", strconv.Itoa(s))
	}
	return h
}

// refuse audits a refusal (on disk before the answer) and returns it as a response for forward.
// A ResponseWriter takes only the status code, so the refusal is also handed to the request's
// refusalWriter, which writes it with its reason phrase.
func (g *Gate) refuse(ctx context.Context, r *http.Request, ex *exchange, d policy.Decision) *http.Response {
	return refusalResponse(r, recordRefusal(ctx, r, ex, d))
}

// recordRefusal writes the record of the refusal of r with d, on disk before it returns, and
// returns the answer: the refusal, or when the record could not be written, unrecordedRefusal.
func recordRefusal(ctx context.Context, r *http.Request, ex *exchange, d policy.Decision) *refusal {
	if err := ex.finishSync(ctx, refusalStatus(d), ""); err != nil {
		return unrecordedRefusal(r, ex, err)
	}
	return newRefusal(r, ex, d)
}

// unrecordedRefusal is what the gate answers, in place of its own answer, when that answer's
// record could not be written (err): the refusal of a gate whose audit fails, 503 E_NO_AUDIT,
// with no request id (no X-LockHTTP-Request; the body's request is "none"), since no record
// holds the one the request was given.
func unrecordedRefusal(r *http.Request, ex *exchange, err error) *refusal {
	return newRefusal(r, ex, judge.NoAudit(err))
}

// unrecordedID is the request id an answer shows when its record could not be written.
const unrecordedID = "none (the gate could not write this request's audit record)"

// shownID is the request id ex's answer shows: its record's, or unrecordedID.
func shownID(ex *exchange) string {
	if ex.unrecorded != nil {
		return unrecordedID
	}
	return ex.rec.ID
}

// refusalResponse is rf as a response for forward, handed to the request's refusalWriter too.
func refusalResponse(r *http.Request, rf *refusal) *http.Response {
	if w := refusalWriterFrom(r.Context()); w != nil {
		w.refusal = rf
	}
	resp := answer(r, rf.status, rf.header, rf.body)
	resp.Status = strconv.Itoa(rf.status) + " " + rf.phrase
	return resp
}

// answer is a response the gate makes itself, for forward to write.
func answer(r *http.Request, status int, h http.Header, body []byte) *http.Response {
	return &http.Response{
		StatusCode: status, Status: strconv.Itoa(status) + " " + http.StatusText(status),
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)), Request: r,
	}
}

// refuseWriter audits a refusal and writes it to w; the client connection ends after it.
func (g *Gate) refuseWriter(w http.ResponseWriter, r *http.Request, ex *exchange, d policy.Decision) {
	writeRefusal(w, r, recordRefusal(r.Context(), r, ex, d))
}

// failure answers a request the gate could not carry out (an unreachable target, a broken
// audit): 502 or 503 with a body that says why, and no X-LockHTTP-Code. When its record could
// not be written (ex.finish failed), the answer is unrecordedRefusal instead.
func failureResponse(r *http.Request, ex *exchange, status int, why string) *http.Response {
	if ex.unrecorded != nil {
		return refusalResponse(r, unrecordedRefusal(r, ex, ex.unrecorded))
	}
	body := []byte(fmt.Sprintf("lockhttp could not complete this request: %s %s\n\n%s\n\nRequest: %s\n",
		display.Escape(ex.rec.Method, false), display.Escape(ex.rec.URL, false), why, ex.rec.ID))
	h := make(http.Header, 5)
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	h.Set(HeaderRequest, ex.rec.ID)
	if ex.closeAfter {
		h.Set("Connection", "close")
	}
	return answer(r, status, h, body)
}

// unreachable is what the agent reads about a target the gate could not reach: fixed public text
// for each kind of failure. The error itself (addresses, the TLS library's words) goes to the
// log and the audit record's detail.
func unreachable(err error) string {
	var (
		unknown  x509.UnknownAuthorityError
		invalid  x509.CertificateInvalidError
		hostname x509.HostnameError
		weak     *weakCertError
		netErr   net.Error
	)
	switch {
	case errors.As(err, &unknown):
		return "The target could not be reached: its TLS certificate is signed by an unknown authority (not one the gate trusts). " +
			"If it is a server of your own with a private CA, the operator gives the gate that CA's root certificate: lox run --roots FILE (LOCKHTTP_ROOTS in a compose deployment)."
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return "The target could not be reached: its TLS certificate has expired or is not yet valid."
	case errors.As(err, &invalid):
		return "The target could not be reached: its TLS certificate is not valid for serving this host."
	case errors.As(err, &hostname):
		return "The target could not be reached: its TLS certificate does not name the host."
	case errors.As(err, &weak):
		return "The target could not be reached: its TLS certificate has a weak certificate key (RSA under 2048 bits)."
	case errors.Is(err, syscall.ECONNREFUSED):
		return "The target could not be reached: it refused the connection."
	case errors.As(err, &netErr) && netErr.Timeout():
		return "The target could not be reached: it did not answer in time."
	}
	return "The target could not be reached."
}
