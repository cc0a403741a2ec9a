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
	"github.com/lockhttp/lockhttp/internal/refusal"
)

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
			"\r\nAccept: application/json\r\nContent-Type: "+refusal.GitRequestType+fmt.Sprintf("\r\nContent-Length: %d\r\n\r\n", len(body))+body)
		if status != "HTTP/1.1 200 OK" || resp.Header.Get("Content-Type") != refusal.GitResultType ||
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
