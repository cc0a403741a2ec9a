package gate

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"syscall"

	"github.com/lockhttp/lockhttp/internal/judge"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/refusal"
	"github.com/lockhttp/lockhttp/internal/transport"
)

// Response headers the gate adds (refusal's, named here for the gate's clients).
const (
	HeaderCode    = refusal.HeaderCode
	HeaderRequest = refusal.HeaderRequest
	HeaderRule    = refusal.HeaderRule
	HeaderTicket  = refusal.HeaderTicket
	HeaderAdvice  = refusal.HeaderAdvice
)

// shown is what ex's answer shows of its request.
func (ex *exchange) shown() refusal.Request {
	return refusal.Request{Method: ex.rec.Method, URL: ex.rec.URL, Ticket: ex.rec.Ticket, ID: ex.rec.ID, Unrecorded: ex.unrecorded != nil}
}

// newRefusal is the answer refusing r with d. r is nil for what the gate could not read as a
// request (plain text where TLS was expected): it gets the plain-text form.
func newRefusal(r *http.Request, ex *exchange, d policy.Decision) *refusal.Refusal {
	if rf := mcpRefused(r, ex, d); rf != nil {
		return rf
	}
	return refusal.New(r, ex.held, ex.shown(), d)
}

// refuse audits a refusal (on disk before the answer) and returns it as a response for forward.
// A ResponseWriter takes only the status code, so the refusal is also handed to the request's
// refusalWriter, which writes it with its reason phrase.
func (g *Gate) refuse(ctx context.Context, r *http.Request, ex *exchange, d policy.Decision) *http.Response {
	return refusalResponse(r, recordRefusal(ctx, r, ex, d))
}

// recordRefusal writes the record of the refusal of r with d, on disk before it returns, and
// returns the answer: the refusal, or when the record could not be written, unrecordedRefusal.
func recordRefusal(ctx context.Context, r *http.Request, ex *exchange, d policy.Decision) *refusal.Refusal {
	if err := ex.finishSync(ctx, refusal.Status(d), ""); err != nil {
		return unrecordedRefusal(r, ex, err)
	}
	return newRefusal(r, ex, d)
}

// unrecordedRefusal is what the gate answers, in place of its own answer, when that answer's
// record could not be written (err): the refusal of a gate whose audit fails, 503 E_NO_AUDIT,
// with no request id (no X-LockHTTP-Request; the body's request is "none"), since no record
// holds the one the request was given.
func unrecordedRefusal(r *http.Request, ex *exchange, err error) *refusal.Refusal {
	return newRefusal(r, ex, judge.NoAudit(err))
}

// refusalResponse is rf as a response for forward, handed to the request's refusalWriter too.
func refusalResponse(r *http.Request, rf *refusal.Refusal) *http.Response {
	if w := transport.RefusalWriterFrom(r.Context()); w != nil {
		w.Refusal = rf
	}
	resp := answer(r, rf.Status, rf.Header, rf.Body)
	resp.Status = strconv.Itoa(rf.Status) + " " + rf.Phrase
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
	transport.WriteRefusal(w, r, recordRefusal(r.Context(), r, ex, d))
}

// failure answers a request the gate could not carry out (an unreachable target, a broken
// audit): 502 or 503 with a body that says why, and no X-LockHTTP-Code. When its record could
// not be written (ex.finish failed), the answer is unrecordedRefusal instead.
func failureResponse(r *http.Request, ex *exchange, status int, why string) *http.Response {
	if ex.unrecorded != nil {
		return refusalResponse(r, unrecordedRefusal(r, ex, ex.unrecorded))
	}
	h, body := refusal.Failure(ex.shown(), why, ex.closeAfter)
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
		weak     *transport.WeakCertError
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
