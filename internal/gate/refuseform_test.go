package gate

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/policy"
)

// allCodes are the codes of docs/codes.md.
var allCodes = []policy.Code{
	policy.CodePending, policy.CodeNoConsole, policy.CodeDenied, policy.CodeTimeout, policy.CodeRule,
	policy.CodeFloor, policy.CodeSecretEgress, policy.CodeBodyTooLarge, policy.CodeSourceUnknown,
	policy.CodeInject, policy.CodeExfilSuspect, policy.CodePinned, policy.CodeNoSigner, policy.CodeNoAudit,
}

// validPhrase fails t unless p is a reason phrase the gate may write: printable ASCII only (no
// CR, LF or other control), not empty, at most maxPhrase bytes.
func validPhrase(t *testing.T, p string) {
	t.Helper()
	if p == "" || len(p) > maxPhrase {
		t.Errorf("reason phrase of %d bytes (at most %d): %q", len(p), maxPhrase, p)
	}
	for i := 0; i < len(p); i++ {
		if p[i] < 0x20 || p[i] > 0x7e {
			t.Errorf("reason phrase has byte %#x at %d: %q", p[i], i, p)
			break
		}
	}
}

func TestReasonPhrase(t *testing.T) {
	t.Run("every code carries its whole advice", func(t *testing.T) {
		for _, c := range allCodes {
			d := policy.Decision{Verdict: policy.Deny, Code: c, Rule: "floor:ip-literal", Reason: "the reason \r\n is not shown"}
			status := refusalStatus(d)
			p := reasonPhrase(status, d)
			validPhrase(t, p)
			want := http.StatusText(status) + " (lockhttp " + string(c) + ", rule floor:ip-literal: " + c.Advice() + ")"
			if p != want {
				t.Errorf("%s: %q, want %q", c, p, want)
			}
		}
	})
	t.Run("a rule that is not a plain name is left out", func(t *testing.T) {
		for _, rule := range []string{"", "x\r\nSet-Cookie: a=b", "two words", "rule\x00nul", "р\u0443le", "a)b", strings.Repeat("a", 65)} {
			p := reasonPhrase(http.StatusForbidden, policy.Decision{Code: policy.CodeRule, Rule: rule})
			validPhrase(t, p)
			if want := "Forbidden (lockhttp E_RULE: " + policy.CodeRule.Advice() + ")"; p != want {
				t.Errorf("rule %q: %q, want %q", rule, p, want)
			}
		}
	})
	t.Run("phraseText is valid and bounded", func(t *testing.T) {
		for _, c := range []struct{ name, in, want string }{
			{"controls and line breaks", "a\r\nb\x00c\x7fd\te", "a??b?c?d?e"},
			{"not ASCII, one ? a character", "caf\u00e9 \u202e \xff", "caf? ? ?"},
			{"short text stays", "Forbidden", "Forbidden"},
		} {
			if got := phraseText(c.in, 40); got != c.want {
				t.Errorf("%s: %q, want %q", c.name, got, c.want)
			}
		}
		long := strings.Repeat("word\r\n ", 200)
		got := phraseText(long, maxPhrase-1)
		validPhrase(t, got+")")
		if !strings.HasSuffix(got, "...") || len(got) > maxPhrase-1 {
			t.Errorf("a long text cut: %d bytes, %q", len(got), got[max(0, len(got)-20):])
		}
	})
}

func TestAcceptsJSON(t *testing.T) {
	for _, c := range []struct {
		name   string
		accept []string
		want   bool
	}{
		{"npm's registry documents", []string{"application/vnd.npm.install-v1+json; q=1.0, application/json; q=0.8, */*"}, true},
		{"npm's full document", []string{"application/json"}, true},
		{"a +json type", []string{"application/problem+json"}, true},
		{"case and spaces", []string{" Application/JSON ; Q=0.9 "}, true},
		{"axios", []string{"application/json, text/plain, */*"}, true},
		{"two header lines", []string{"text/html", "application/json"}, true},
		{"none", nil, false},
		{"curl and npm's tarballs", []string{"*/*"}, false},
		{"a browser", []string{"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}, false},
		{"application wildcard", []string{"application/*"}, false},
		{"a wildcard type", []string{"*/json"}, false},
		{"JSON refused", []string{"application/json;q=0"}, false},
		{"plain text preferred", []string{"application/json;q=0.5, text/plain"}, false},
		{"text wildcard preferred", []string{"text/*, application/json;q=0.2"}, false},
		{"a bad quality", []string{"application/json;q=abc"}, false},
		{"a quality over 1", []string{"application/json;q=2"}, false},
		{"malformed", []string{"application/json;;=="}, false},
		{"after the ranges read", []string{strings.Repeat("text/html, ", maxAcceptRanges) + "application/json"}, false},
	} {
		if got := acceptsJSON(c.accept); got != c.want {
			t.Errorf("%s: %q: %v, want %v", c.name, c.accept, got, c.want)
		}
	}
}

// refusalOf sends req to the gate and returns its answer, the raw status line and the body.
func refusalOf(t *testing.T, tg *testGate, req string) (*http.Response, string, string) {
	t.Helper()
	out := tg.raw(t, req)
	status, _, _ := strings.Cut(out, "\r\n")
	method, _, _ := strings.Cut(req, " ")
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(out)), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%v\n%q", err, out)
	}
	body, _ := io.ReadAll(resp.Body)
	return resp, status, string(body)
}

// TestRefusalForms: a refusal's status line carries the code and the advice for every client;
// its body is JSON for a client that asks for JSON and plain text for the others; what came
// from the request cannot break either, nor the headers.
func TestRefusalForms(t *testing.T) {
	tg := startGate(t, nil)
	o := fmt.Sprintf("origin.test:%d", tg.port)
	wantStatus := "HTTP/1.1 403 Forbidden (lockhttp E_RULE, rule no-secret: " + policy.CodeRule.Advice() + ")"
	// A path that would end the status line, add a header and close the JSON string early, were
	// it written as it came.
	evil := "/secret/a%0D%0AX-Injected:%20yes%22%7D,%22code%22:%22E_NONE%5C%1B[31m"

	t.Run("plain text for a client that asks for anything", func(t *testing.T) {
		resp, status, body := refusalOf(t, tg, "GET http://"+o+evil+" HTTP/1.1\r\nHost: "+o+"\r\nAccept: */*\r\n\r\n")
		if status != wantStatus {
			t.Errorf("status line %q, want %q", status, wantStatus)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "text/plain; charset=utf-8" || !strings.HasPrefix(body, "lockhttp refused this request: GET ") {
			t.Errorf("%s body:\n%s", ct, body)
		}
		checkRefusalHeaders(t, resp)
	})

	t.Run("JSON for a client that asks for JSON", func(t *testing.T) {
		resp, status, body := refusalOf(t, tg, "GET http://"+o+evil+" HTTP/1.1\r\nHost: "+o+"\r\nAccept: application/json\r\n\r\n")
		if status != wantStatus {
			t.Errorf("status line %q, want %q", status, wantStatus)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json; charset=utf-8" {
			t.Errorf("Content-Type %q", ct)
		}
		checkRefusalHeaders(t, resp)
		var doc map[string]string
		dec := json.NewDecoder(strings.NewReader(body))
		if err := dec.Decode(&doc); err != nil || dec.More() {
			t.Fatalf("the body is not one JSON object (%v):\n%s", err, body)
		}
		if doc["code"] != "E_RULE" || doc["rule"] != "no-secret" || doc["what_to_do"] != policy.CodeRule.Advice() ||
			doc["method"] != "GET" || doc["request"] != resp.Header.Get(HeaderRequest) || !strings.HasPrefix(doc["reason"], `rule "no-secret" (deny)`) {
			t.Errorf("the document: %v", doc)
		}
		u, err := url.Parse(doc["url"])
		if err != nil || u.Host != o || !strings.HasPrefix(u.EscapedPath(), "/secret/a") {
			t.Errorf("url %q: %v", doc["url"], err)
		}
		if want := "lockhttp refused this request (E_RULE, rule no-secret): " + doc["reason"] + ". What to do: " + policy.CodeRule.Advice(); doc["error"] != want {
			t.Errorf("error %q, want %q", doc["error"], want)
		}
		for k, v := range doc {
			if strings.ContainsAny(v, "\r\n\x1b") {
				t.Errorf("%s holds a control character: %q", k, v)
			}
		}
	})

	t.Run("the reason from the request, escaped in the JSON", func(t *testing.T) {
		// The floor's reason names the Upgrade protocol, as sent.
		resp, status, body := refusalOf(t, tg, "GET http://"+o+"/x HTTP/1.1\r\nHost: "+o+"\r\nAccept: application/json\r\nConnection: Upgrade\r\nUpgrade: x\"}\\\u202e\r\n\r\n")
		if !strings.HasPrefix(status, "HTTP/1.1 403 Forbidden (lockhttp E_FLOOR, rule floor:upgrade: ") {
			t.Errorf("status line %q", status)
		}
		var doc map[string]string
		if err := json.Unmarshal([]byte(body), &doc); err != nil {
			t.Fatalf("%v:\n%s", err, body)
		}
		// The floor quotes the protocol (the quotes and the backslash escaped), and the JSON
		// holds that as a string: the quote sent does not end it.
		if doc["code"] != "E_FLOOR" || !strings.Contains(doc["reason"], `the protocol upgrade to "x\"}\\\u202e"`) {
			t.Errorf("the document: %v", doc)
		}
		checkRefusalHeaders(t, resp)
	})

	t.Run("HEAD gets the headers and no body", func(t *testing.T) {
		out := tg.raw(t, "HEAD http://"+o+"/secret/x HTTP/1.1\r\nHost: "+o+"\r\n\r\n")
		head, rest, _ := strings.Cut(out, "\r\n\r\n")
		if !strings.HasPrefix(head, wantStatus+"\r\n") || !strings.Contains(head, "\r\nContent-Length: ") || rest != "" {
			t.Errorf("HEAD answer:\n%q", out)
		}
	})

	t.Run("git's result for a push that asks for a side band", func(t *testing.T) {
		cmds := "0000000000000000000000000000000000000000 1111111111111111111111111111111111111111 refs/heads/main\x00report-status side-band-64k\n"
		body := fmt.Sprintf("%04x%s0000", len(cmds)+4, cmds)
		resp, status, out := refusalOf(t, tg, "POST http://"+o+"/secret/repo.git/git-receive-pack HTTP/1.1\r\nHost: "+o+
			"\r\nAccept: application/json\r\nContent-Type: "+gitRequestType+fmt.Sprintf("\r\nContent-Length: %d\r\n\r\n", len(body))+body)
		if status != "HTTP/1.1 200 OK" || resp.Header.Get("Content-Type") != gitResultType ||
			!strings.Contains(out, "\x02Code:    E_RULE\n") || !strings.HasSuffix(out, "\x03lockhttp refused this push (E_RULE)\n0000") {
			t.Errorf("%s %s:\n%q", status, resp.Header.Get("Content-Type"), out)
		}
		checkRefusalHeaders(t, resp)
	})

	t.Run("a refused CONNECT", func(t *testing.T) {
		// Without a signer the CONNECT is decided at the domain, and asks (the deny rule
		// no-secret names paths the tunnel would carry unseen): refused at once without a
		// console. Go's client shows the phrase as the CONNECT's error.
		u, _ := url.Parse("http://" + tg.addr)
		c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u)}}
		_, err := c.Get("https://" + o + "/x")
		want := "Forbidden (lockhttp E_NO_CONSOLE, rule no-secret: " + policy.CodeNoConsole.Advice() + ")"
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Go's error %v, want it to hold %q", err, want)
		}
	})
}

// checkRefusalHeaders checks the headers every refusal carries, and that none came from the
// request.
func checkRefusalHeaders(t *testing.T, resp *http.Response) {
	t.Helper()
	if resp.Header.Get(HeaderCode) == "" || resp.Header.Get(HeaderRequest) == "" || resp.Header.Get(HeaderRule) == "" ||
		resp.Header.Get("Cache-Control") != "no-store" || !resp.Close {
		t.Errorf("headers: %v (close %v)", resp.Header, resp.Close)
	}
	if resp.Header.Get("X-Injected") != "" {
		t.Errorf("a header came from the request: %v", resp.Header)
	}
}

// FuzzRefusalForms: whatever the request and the policy hold, the Accept parser does not fail,
// the reason phrase is valid and the JSON body is one valid object that keeps the code.
func FuzzRefusalForms(f *testing.F) {
	f.Add("application/json;q=0.5, text/plain", "no-secret", `rule "x" (deny)`, "http://a.test/\r\n\"}")
	f.Add("*/*", "x\r\nSet-Cookie: a", "\x1b[31m\u202e\xff", "http://a.test/%0d%0a")
	f.Fuzz(func(t *testing.T, accept, rule, reason, u string) {
		acceptsJSON([]string{accept})
		d := policy.Decision{Verdict: policy.Deny, Code: policy.CodeRule, Rule: rule, Reason: reason}
		validPhrase(t, reasonPhrase(refusalStatus(d), d))
		ex := &exchange{}
		ex.rec.Method, ex.rec.URL, ex.rec.ID = "GET", u, "r1-1"
		var doc map[string]string
		if err := json.Unmarshal(refusalJSON(ex, d), &doc); err != nil || doc["code"] != "E_RULE" || doc["request"] != "r1-1" {
			t.Fatalf("%v: %v", err, doc)
		}
	})
}
