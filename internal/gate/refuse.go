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
	"github.com/lockhttp/lockhttp/internal/policy"
)

// Response headers the gate adds.
const (
	HeaderCode    = "X-LockHTTP-Code"
	HeaderRequest = "X-LockHTTP-Request"
	HeaderRule    = "X-LockHTTP-Rule"
	HeaderTicket  = "X-LockHTTP-Ticket"
)

// refusalStatus is the HTTP status of a refusal.
func refusalStatus(d policy.Decision) int {
	switch d.Rule {
	case "framing:bad-request", "framing:tls-on-plain", "floor:origin-form":
		return http.StatusBadRequest
	case "framing:too-large":
		return http.StatusRequestHeaderFieldsTooLarge
	}
	if d.Code == policy.CodeNoAudit || d.Code == policy.CodeNoSigner {
		return http.StatusServiceUnavailable
	}
	if d.Code == policy.CodeBudget {
		return http.StatusTooManyRequests
	}
	return http.StatusForbidden
}

// Retry-After of the refusals that a retry can pass: a request a human has not answered yet
// (the retry waits on the same ticket, and passes once it is approved), and the gate's own
// failures (its audit, its signer), which pass once they are fixed.
const (
	retryPending     = 5
	retryUnavailable = 10
)

// retryAfter is the Retry-After of a refusal with code c in seconds, or 0 for none.
func retryAfter(c policy.Code) int {
	switch c {
	case policy.CodePending:
		return retryPending
	case policy.CodeNoAudit, policy.CodeNoSigner:
		return retryUnavailable
	}
	return 0
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
	fmt.Fprintf(&b, "Request: %s\n\n", ex.rec.ID)
	fmt.Fprintf(&b, "What to do: %s\n", d.Code.Advice())
	return b.Bytes()
}

func refusalHeader(ex *exchange, d policy.Decision, n int) http.Header {
	h := make(http.Header, 7)
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(n))
	h.Set("Cache-Control", "no-store")
	h.Set(HeaderCode, string(d.Code))
	h.Set(HeaderRequest, ex.rec.ID)
	if d.Rule != "" {
		h.Set(HeaderRule, d.Rule)
	}
	if ex.rec.Ticket != "" {
		h.Set(HeaderTicket, ex.rec.Ticket)
	}
	if s := max(d.RetryAfter, retryAfter(d.Code)); s > 0 {
		h.Set("Retry-After", strconv.Itoa(s))
	}
	return h
}

// refuse audits a refusal (on disk before the answer) and returns it as a response for goproxy.
func (g *Gate) refuse(ctx context.Context, r *http.Request, ex *exchange, d policy.Decision) *http.Response {
	status := refusalStatus(d)
	body := refusalBody(ex, d)
	ex.finishSync(ctx, status, "")
	h := refusalHeader(ex, d, len(body))
	if ex.closeAfter {
		h.Set("Connection", "close")
	}
	if gitSideBand(r, ex.held) {
		return gitAnswer(r, h, body, string(d.Code))
	}
	return answer(r, status, h, body)
}

// answer is a response the gate makes itself, for goproxy to write.
func answer(r *http.Request, status int, h http.Header, body []byte) *http.Response {
	return &http.Response{
		StatusCode: status, Status: strconv.Itoa(status) + " " + http.StatusText(status),
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)), Request: r,
	}
}

// refuseWriter audits a refusal and writes it to w. closeConn ends the client connection after
// the answer (after a CONNECT, whose stream the framing check no longer follows).
func (g *Gate) refuseWriter(w http.ResponseWriter, r *http.Request, ex *exchange, d policy.Decision, closeConn bool) {
	status := refusalStatus(d)
	body := refusalBody(ex, d)
	ex.finishSync(r.Context(), status, "")
	h := w.Header()
	for k, v := range refusalHeader(ex, d, len(body)) {
		h[k] = v
	}
	if closeConn || ex.closeAfter {
		h.Set("Connection", "close")
	}
	w.WriteHeader(status)
	w.Write(body)
}

// failure answers a request the gate could not carry out (an unreachable target, a broken
// audit): 502 or 503 with a body that says why, and no X-LockHTTP-Code.
func failureResponse(r *http.Request, ex *exchange, status int, why string) *http.Response {
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
		return "The target could not be reached: its TLS certificate is signed by an unknown authority (not one the gate trusts)."
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
