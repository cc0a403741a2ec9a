// Package refusal turns a decision into the bytes a client reads: the status line, headers and
// body of a refused request in the form its client shows (plain text, JSON, git's side band).
package refusal

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"strconv"

	"github.com/lockhttp/lockhttp/internal/display"
	"github.com/lockhttp/lockhttp/internal/floor"
	"github.com/lockhttp/lockhttp/internal/mcp"
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

// Status is the HTTP status of a refusal.
func Status(d policy.Decision) int {
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

// Request is what an answer shows of the request it answers: the audit record's method, URL
// (secrets hidden), ticket and id.
type Request struct {
	Method, URL, Ticket, ID string
	// Unrecorded: the request's record could not be written, so no record holds ID and the
	// answer shows UnrecordedID instead.
	Unrecorded bool
}

// UnrecordedID is the request id an answer shows when its record could not be written.
const UnrecordedID = "none (the gate could not write this request's audit record)"

// ShownID is the request id q's answer shows: its record's, or UnrecordedID.
func (q Request) ShownID() string {
	if q.Unrecorded {
		return UnrecordedID
	}
	return q.ID
}

// Refusal is the answer to one refused request, in the form its client reads (formOf): the
// status line's status and reason phrase, the headers and the body.
type Refusal struct {
	Status int
	Phrase string
	Header http.Header
	Body   []byte
	Head   bool // the request was a HEAD: the body is not sent
	// NoDrain: the rest of the request's body is not read before the answer (a body refused
	// because it stalled or trickled: reading on would wait on it).
	NoDrain bool
}

// New is the answer refusing r, whose held body is held and which shows as q, with d. r is nil
// for what the gate could not read as a request (plain text where TLS was expected): it gets the
// plain-text form.
func New(r *http.Request, held []byte, q Request, d policy.Decision) *Refusal {
	rf := &Refusal{Status: Status(d), Head: r != nil && r.Method == http.MethodHead, NoDrain: d.Code == policy.CodeBodyTimeout}
	text := body(q, d)
	switch formOf(r, held) {
	case formGit:
		rf.Status, rf.Body = http.StatusOK, gitRefusal(text, string(d.Code))
		rf.Header = header(q, d, GitResultType, len(rf.Body))
	case formJSON:
		rf.Body = refusalJSON(q, d)
		rf.Header = header(q, d, "application/json; charset=utf-8", len(rf.Body))
	default:
		rf.Body = text
		rf.Header = header(q, d, "text/plain; charset=utf-8", len(rf.Body))
	}
	rf.Phrase = http.StatusText(rf.Status)
	if rf.Status != http.StatusOK {
		rf.Phrase = reasonPhrase(rf.Status, d)
	}
	rf.Header.Set("Connection", "close")
	return rf
}

// askForARule names the gate's own MCP server and its tools, where an agent asks why and asks
// for a rule (docs/proposals.md): the last line of the plain-text body, a field of the JSON one.
const askForARule = "the MCP server https://" + floor.SelfName + floor.SelfMCPPath + " (tools explain, pending, request_rule)"

// body is the plain-text body that tells the agent what was refused, why and what to do.
// Every part that came from the request goes through display.Escape.
func body(q Request, d policy.Decision) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "lockhttp refused this request: %s %s\n\n", display.Escape(q.Method, false), display.Escape(q.URL, false))
	fmt.Fprintf(&b, "Code:    %s\n", d.Code)
	if d.Rule != "" {
		fmt.Fprintf(&b, "Rule:    %s\n", display.Escape(d.Rule, false))
	}
	fmt.Fprintf(&b, "Why:     %s\n", display.Escape(d.Reason, false))
	if q.Ticket != "" {
		fmt.Fprintf(&b, "Ticket:  %s\n", q.Ticket)
	}
	fmt.Fprintf(&b, "Request: %s\n\n", q.ShownID())
	fmt.Fprintf(&b, "What to do: %s\n", d.Code.Advice())
	b.WriteString("Ask for a rule: " + askForARule + "\n")
	return b.Bytes()
}

func header(q Request, d policy.Decision, contentType string, n int) http.Header {
	h := make(http.Header, 8)
	h.Set("Content-Type", contentType)
	h.Set("Content-Length", strconv.Itoa(n))
	h.Set("Cache-Control", "no-store")
	h.Set(HeaderCode, string(d.Code))
	if id := q.ShownID(); id != UnrecordedID {
		h.Set(HeaderRequest, id)
	}
	if d.Rule != "" {
		h.Set(HeaderRule, d.Rule)
	}
	if q.Ticket != "" {
		h.Set(HeaderTicket, q.Ticket)
	}
	h.Set(HeaderAdvice, phraseText(d.Code.Advice(), maxPhrase))
	if s := max(d.RetryAfter, retryAfter(d.Code)); s > 0 {
		h.Set("Retry-After", strconv.Itoa(s))
	}
	return h
}

// WriteRaw writes rf, status line, headers and body (none for a HEAD), to bw and flushes it.
func (rf *Refusal) WriteRaw(bw *bufio.Writer) {
	bw.WriteString("HTTP/1.1 " + strconv.Itoa(rf.Status) + " " + rf.Phrase + "\r\n")
	rf.Header.Write(bw)
	bw.WriteString("\r\n")
	if !rf.Head {
		bw.Write(rf.Body)
	}
	bw.Flush()
}

// Failure is the answer to a request the gate could not carry out (an unreachable target, a
// broken audit): the headers and a body that says why (fixed public text), and no
// X-LockHTTP-Code. closeAfter adds Connection: close.
func Failure(q Request, why string, closeAfter bool) (http.Header, []byte) {
	body := []byte(fmt.Sprintf("lockhttp could not complete this request: %s %s\n\n%s\n\nRequest: %s\n",
		display.Escape(q.Method, false), display.Escape(q.URL, false), why, q.ID))
	h := make(http.Header, 5)
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	h.Set(HeaderRequest, q.ID)
	if closeAfter {
		h.Set("Connection", "close")
	}
	return h, body
}

// MCP is the refusal of an MCP POST whose messages are b, as its client reads it: a JSON-RPC
// error under each request's id with the code, the reason and the advice (mcp.Answer), answered
// 200 so that every client hands it to the call that waits on it (a 4xx is an error of the
// transport to most clients, and a 403 starts the Go SDK's OAuth flow). Nothing to answer (a
// refused notification) is 202 with no body. element is the decision each message is refused
// with (in a refused batch, each refused element says its own rule); the headers are d's.
func MCP(q Request, d policy.Decision, b *mcp.Body, element func(i int) policy.Decision) *Refusal {
	out := mcp.Answer(b, func(i int) (mcp.Refusal, bool) {
		rd := element(i)
		return mcp.Refusal{Code: rd.Code, Rule: rd.Rule, Reason: rd.Reason, Ticket: q.Ticket,
			RetryAfter: max(rd.RetryAfter, retryAfter(rd.Code))}, true
	}, mcp.AsError, false)
	rf := &Refusal{Status: http.StatusOK, Body: out}
	if out == nil {
		rf.Status = http.StatusAccepted
	}
	rf.Header = header(q, d, "application/json", len(out))
	rf.Phrase = http.StatusText(rf.Status)
	rf.Header.Set("Connection", "close")
	return rf
}
