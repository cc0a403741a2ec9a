package refusal

import (
	"bufio"
	"bytes"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/policy"
)

// TestNew: each client kind gets its form, and what the request showed is in it escaped.
func TestNew(t *testing.T) {
	d := policy.Decision{Verdict: policy.Deny, Code: policy.CodeRule, Rule: "no-secret", Reason: `rule "no-secret" (deny)`}
	q := Request{Method: "GET", URL: "http://a.test/x\x1b[31m", ID: "r1-1", Ticket: "t-1"}
	req := func(method, accept string) *http.Request {
		return &http.Request{Method: method, URL: &url.URL{Path: "/x"}, Header: http.Header{"Accept": {accept}}}
	}
	t.Run("plain text", func(t *testing.T) {
		rf := New(req("GET", "*/*"), nil, q, d)
		if rf.Status != 403 || rf.Header.Get("Content-Type") != "text/plain; charset=utf-8" || rf.Header.Get(HeaderRequest) != "r1-1" ||
			rf.Header.Get(HeaderTicket) != "t-1" || rf.Header.Get("Connection") != "close" || rf.Head ||
			!strings.HasPrefix(string(rf.Body), "lockhttp refused this request: GET ") || bytes.ContainsRune(rf.Body, 0x1b) {
			t.Errorf("%+v\n%s", rf, rf.Body)
		}
	})
	t.Run("JSON", func(t *testing.T) {
		rf := New(req("GET", "application/json"), nil, q, d)
		if rf.Header.Get("Content-Type") != "application/json; charset=utf-8" || !bytes.HasPrefix(rf.Body, []byte(`{"error":`)) {
			t.Errorf("%+v\n%s", rf, rf.Body)
		}
	})
	t.Run("git", func(t *testing.T) {
		r := &http.Request{Method: "POST", URL: &url.URL{Path: "/r.git/git-receive-pack"}, Header: http.Header{"Content-Type": {GitRequestType}}}
		held := []byte("0000" + strings.Repeat("0", 40) + " " + strings.Repeat("1", 40) + " refs/heads/main\x00side-band-64k\n")
		rf := New(r, held, q, d)
		if rf.Status != 200 || rf.Phrase != "OK" || rf.Header.Get("Content-Type") != GitResultType {
			t.Errorf("%+v\n%q", rf, rf.Body)
		}
	})
	t.Run("HEAD, raw", func(t *testing.T) {
		rf := New(req("HEAD", ""), nil, q, d)
		var b bytes.Buffer
		rf.WriteRaw(bufio.NewWriter(&b))
		head, rest, _ := strings.Cut(b.String(), "\r\n\r\n")
		if !strings.HasPrefix(head, "HTTP/1.1 403 Forbidden (lockhttp E_RULE, rule no-secret: ") || rest != "" {
			t.Errorf("%q", b.String())
		}
	})
	t.Run("no request read", func(t *testing.T) {
		rf := New(nil, nil, q, d)
		if rf.Head || rf.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
			t.Errorf("%+v", rf)
		}
	})
	t.Run("unrecorded", func(t *testing.T) {
		u := q
		u.Unrecorded = true
		rf := New(req("GET", ""), nil, u, judgeNoAudit)
		if rf.Status != 503 || rf.Header.Get(HeaderRequest) != "" || rf.Header.Get("Retry-After") != "10" || !strings.Contains(string(rf.Body), UnrecordedID) {
			t.Errorf("%+v\n%s", rf, rf.Body)
		}
	})
}

var judgeNoAudit = policy.Decision{Verdict: policy.Deny, Code: policy.CodeNoAudit, Reason: "the gate could not write its audit record"}
