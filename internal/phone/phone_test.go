package phone

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/lockhttp/lockhttp/internal/display/displaytest"
	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

type env struct {
	t     *testing.T
	hub   *hub.Hub
	srv   *Server
	ts    *httptest.Server
	clock *testkit.Clock  // settable, for the hub and the server; nil when the env runs on the real clock
	log   *testkit.Buffer // collects the log
}

// newEnv starts a hub and the phone server on a loopback httptest server whose URL is the
// public URL. fake selects a settable clock.
func newEnv(t *testing.T, fake bool) *env {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, log: &testkit.Buffer{}}
	now := time.Now
	if fake {
		e.clock = testkit.NewClock(time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC))
		now = e.clock.Now
	}
	e.hub, err = hub.New(hub.Config{Key: key, Now: now, CheckRule: checkRule})
	if err != nil {
		t.Fatal(err)
	}
	e.ts = httptest.NewUnstartedServer(nil)
	e.srv, err = New(Config{Hub: e.hub, PublicURL: "http://" + e.ts.Listener.Addr().String(), Now: now,
		Log: slog.New(slog.NewTextHandler(e.log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	e.ts.Config.Handler = e.srv.Handler()
	e.ts.Start()
	t.Cleanup(func() {
		e.srv.Close()
		e.ts.Close()
	})
	return e
}

// do sends a request. body is marshalled as JSON unless it is a string (sent as it is).
func (e *env) do(method, path, token, origin string, body any) (*http.Response, []byte) {
	e.t.Helper()
	var rd io.Reader
	if body != nil {
		if s, ok := body.(string); ok {
			rd = strings.NewReader(s)
		} else {
			b, err := json.Marshal(body)
			if err != nil {
				e.t.Fatal(err)
			}
			rd = bytes.NewReader(b)
		}
	}
	req, err := http.NewRequest(method, e.ts.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp, data
}

func (e *env) origin() string { return e.srv.Origin() }

// pairToken makes a pairing link and returns its token.
func (e *env) pairToken() string {
	e.t.Helper()
	link, err := e.srv.NewPairing()
	if err != nil {
		e.t.Fatal(err)
	}
	tok, ok := strings.CutPrefix(link, e.ts.URL+"/phone/#pair=")
	if !ok {
		e.t.Fatalf("pairing link %q does not start with %s/phone/#pair=", link, e.ts.URL)
	}
	return tok
}

// pair pairs a device and returns its session token.
func (e *env) pair(device string) string {
	e.t.Helper()
	resp, data := e.do("POST", "/phone/v1/pair", "", e.origin(), map[string]string{"token": e.pairToken(), "device": device})
	if resp.StatusCode != 200 {
		e.t.Fatalf("pair: %d %s", resp.StatusCode, data)
	}
	var out struct{ Session, ID, Device string }
	if err := json.Unmarshal(data, &out); err != nil {
		e.t.Fatal(err)
	}
	return out.Session
}

var askN int

// ask makes a pending ticket.
func (e *env) ask(url, body string) hub.Ticket {
	e.t.Helper()
	askN++
	ans, err := e.hub.Ask(hub.AskRequest{Kind: hub.KindRequest, Container: "agent-1", Agent: "claude", Method: "POST",
		URL: url, BodyPreview: body, BodySize: int64(len(body)), Rule: "ask-writes", Reason: "a write to a host the policy asks about",
		Fingerprint: "fp1:" + strings.Repeat("ab", 31) + string(rune('a'+askN%26)) + string(rune('a'+askN/26%26)),
		Headers:     []hub.Header{{Name: "Content-Type", Value: "application/json"}}})
	if err != nil {
		e.t.Fatal(err)
	}
	return ans.Ticket
}

func errorOf(t *testing.T, data []byte) (msg, code string) {
	t.Helper()
	var a apiError
	if err := json.Unmarshal(data, &a); err != nil {
		t.Fatalf("error body %q: %v", data, err)
	}
	return a.Error, a.Code
}

func TestOriginOf(t *testing.T) {
	good := []struct{ in, want string }{
		{"http://192.168.1.20:3131", "http://192.168.1.20:3131"},
		{"http://192.168.1.20:3131/", "http://192.168.1.20:3131"},
		{"HTTPS://Hub.Example.NET", "https://hub.example.net"},
		{"https://hub.example.net:443", "https://hub.example.net"},
		{"http://hub.lan:80", "http://hub.lan"},
		{"http://[fd00::1]:3131", "http://[fd00::1]:3131"},
		{"https://hub.example.net:8443", "https://hub.example.net:8443"},
	}
	for _, c := range good {
		t.Run(c.in, func(t *testing.T) {
			got, err := originOf(c.in)
			if err != nil || got != c.want {
				t.Fatalf("originOf(%q) = %q, %v; want %q", c.in, got, err, c.want)
			}
		})
	}
	bad := []string{"", "192.168.1.20:3131", "ftp://hub", "http://", "http://hub/phone", "http://hub?x=1", "http://hub#x",
		"http://user:pw@hub", "http://hub:0", "http://hub:99999", "http://hub:", "ws://hub", "javascript:alert(1)", "http://hub/?"}
	for _, in := range bad {
		t.Run("bad "+in, func(t *testing.T) {
			if got, err := originOf(in); err == nil {
				t.Fatalf("originOf(%q) = %q, want an error", in, got)
			}
		})
	}
	if _, err := New(Config{PublicURL: "http://hub"}); err == nil {
		t.Fatal("New without a hub: no error")
	}
}

func TestPairingOnce(t *testing.T) {
	e := newEnv(t, true)
	tok := e.pairToken()
	resp, data := e.do("POST", "/phone/v1/pair", "", e.origin(), map[string]string{"token": tok, "device": "pixel 7"})
	if resp.StatusCode != 200 {
		t.Fatalf("first pairing: %d %s", resp.StatusCode, data)
	}
	var out struct{ Session, ID, Device string }
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	raw, err := base64.RawURLEncoding.DecodeString(out.Session)
	if err != nil || len(raw) != 32 {
		t.Fatalf("session token %q is not 32 bytes of base64url: %v", out.Session, err)
	}
	if out.Device != "pixel 7" || out.ID == "" {
		t.Fatalf("pairing answer %+v", out)
	}
	if resp, data := e.do("GET", "/phone/v1/tickets", out.Session, "", nil); resp.StatusCode != 200 {
		t.Fatalf("the new session is refused: %d %s", resp.StatusCode, data)
	}

	resp, data = e.do("POST", "/phone/v1/pair", "", e.origin(), map[string]string{"token": tok, "device": "thief"})
	if resp.StatusCode != 401 {
		t.Fatalf("second use of a pairing token: %d %s, want 401", resp.StatusCode, data)
	}
	if n := len(e.srv.Sessions()); n != 1 {
		t.Fatalf("%d sessions, want 1", n)
	}
}

func TestPairingExpires(t *testing.T) {
	e := newEnv(t, true)
	late := e.pairToken()
	e.clock.Advance(PairingTTL - time.Second)
	early := e.pairToken()
	if resp, data := e.do("POST", "/phone/v1/pair", "", e.origin(), map[string]string{"token": early}); resp.StatusCode != 200 {
		t.Fatalf("a fresh token: %d %s", resp.StatusCode, data)
	}
	e.clock.Advance(time.Second)
	resp, data := e.do("POST", "/phone/v1/pair", "", e.origin(), map[string]string{"token": late})
	if resp.StatusCode != 401 {
		t.Fatalf("a token 10 minutes old: %d %s, want 401", resp.StatusCode, data)
	}
	if msg, _ := errorOf(t, data); !strings.Contains(msg, "new QR code") {
		t.Fatalf("the refusal does not say what to do: %q", msg)
	}
	// The default device name.
	if s := e.srv.Sessions(); len(s) != 1 || s[0].Device != "phone" {
		t.Fatalf("sessions %+v, want one named phone", s)
	}
}

func TestAuthRequired(t *testing.T) {
	e := newEnv(t, true)
	good := e.pair("mine")
	revoked := e.pair("lost")
	for _, s := range e.srv.Sessions() {
		if s.Device == "lost" && !e.srv.Revoke(s.ID) {
			t.Fatal("Revoke of a live session returned false")
		}
	}
	usedPair := e.pairToken()
	tk := e.ask("https://api.example.com/x", "{}")
	paths := []struct{ method, path string }{
		{"GET", "/phone/v1/tickets"},
		{"GET", "/phone/v1/tickets/" + tk.ID},
		{"GET", "/phone/v1/recent"},
		{"GET", "/phone/v1/state"},
		{"GET", "/phone/v1/pair"},
		{"GET", "/phone/v1/nothing-here"},
		{"POST", "/phone/v1/tickets/" + tk.ID + "/approve"},
		{"POST", "/phone/v1/logout"},
	}
	tokens := []struct{ name, header string }{
		{"none", ""},
		{"wrong", "Bearer " + strings.Repeat("A", 43)},
		{"empty bearer", "Bearer "},
		{"basic", "Basic " + good},
		{"lowercase scheme", "bearer " + good},
		{"revoked", "Bearer " + revoked},
		{"pairing token", "Bearer " + usedPair},
		{"token plus junk", "Bearer " + good + "x"},
	}
	for _, p := range paths {
		for _, tc := range tokens {
			t.Run(p.method+" "+p.path+" "+tc.name, func(t *testing.T) {
				e.clock.Advance(time.Minute) // refill the failed-auth bucket
				var body any
				if p.method == "POST" {
					body = map[string]string{"fingerprint": tk.Fingerprint}
				}
				req, _ := http.NewRequest(p.method, e.ts.URL+p.path, nil)
				if body != nil {
					b, _ := json.Marshal(body)
					req, _ = http.NewRequest(p.method, e.ts.URL+p.path, bytes.NewReader(b))
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("Origin", e.origin())
				}
				if tc.header != "" {
					req.Header.Set("Authorization", tc.header)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != 401 {
					t.Fatalf("status %d, want 401", resp.StatusCode)
				}
				if resp.Header.Get("WWW-Authenticate") == "" {
					t.Fatal("no WWW-Authenticate")
				}
			})
		}
	}
	if got, _ := e.hub.Get(tk.ID); got.Status != hub.Pending {
		t.Fatalf("the ticket is %s after unauthenticated requests", got.Status)
	}
	e.clock.Advance(time.Minute)
	if resp, data := e.do("GET", "/phone/v1/tickets/"+tk.ID, good, "", nil); resp.StatusCode != 200 {
		t.Fatalf("the good token: %d %s", resp.StatusCode, data)
	}
}

func TestOriginRequired(t *testing.T) {
	e := newEnv(t, true)
	tok := e.pair("mine")
	tk := e.ask("https://api.example.com/x", "{}")
	_, port, _ := net.SplitHostPort(e.ts.Listener.Addr().String())
	origins := []struct{ name, origin string }{
		{"none", ""},
		{"other site", "http://evil.example"},
		{"other port", "http://127.0.0.1:1"},
		{"https", "https://127.0.0.1:" + port},
		{"localhost", "http://localhost:" + port},
		{"trailing slash", e.origin() + "/"},
		{"null", "null"},
		{"prefix", e.origin() + ".evil.example"},
	}
	requests := []struct {
		name, path string
		token      bool
		body       any
	}{
		{"approve", "/phone/v1/tickets/" + tk.ID + "/approve", true, map[string]string{"fingerprint": tk.Fingerprint}},
		{"deny", "/phone/v1/tickets/" + tk.ID + "/deny", true, map[string]string{"fingerprint": tk.Fingerprint, "reason": "no"}},
		{"logout", "/phone/v1/logout", true, map[string]string{}},
		{"pair", "/phone/v1/pair", false, map[string]string{"token": "whatever"}},
	}
	for _, rq := range requests {
		for _, o := range origins {
			t.Run(rq.name+" "+o.name, func(t *testing.T) {
				if rq.name == "pair" {
					rq.body = map[string]string{"token": e.pairToken()}
				}
				token := ""
				if rq.token {
					token = tok
				}
				resp, data := e.do("POST", rq.path, token, o.origin, rq.body)
				if resp.StatusCode != 403 {
					t.Fatalf("status %d %s, want 403", resp.StatusCode, data)
				}
			})
		}
	}
	if got, _ := e.hub.Get(tk.ID); got.Status != hub.Pending {
		t.Fatalf("the ticket is %s after requests from other origins", got.Status)
	}
	if n := len(e.srv.Sessions()); n != 1 {
		t.Fatalf("%d sessions after requests from other origins, want 1", n)
	}
	// The right origin works.
	resp, data := e.do("POST", "/phone/v1/tickets/"+tk.ID+"/approve", tok, e.origin(), map[string]string{"fingerprint": tk.Fingerprint})
	if resp.StatusCode != 200 {
		t.Fatalf("approve from the page's origin: %d %s", resp.StatusCode, data)
	}
}

func TestDecide(t *testing.T) {
	e := newEnv(t, true)
	tok := e.pair("pixel-7")
	approveURL := func(id string) string { return "/phone/v1/tickets/" + id + "/approve" }
	denyURL := func(id string) string { return "/phone/v1/tickets/" + id + "/deny" }

	t.Run("stale fingerprint", func(t *testing.T) {
		tk := e.ask("https://api.example.com/stale", "{}")
		stale := "fp1:" + strings.Repeat("0", 64)
		for _, c := range []struct {
			path string
			body map[string]string
		}{
			{approveURL(tk.ID), map[string]string{"fingerprint": stale}},
			{denyURL(tk.ID), map[string]string{"fingerprint": stale, "reason": "no"}},
		} {
			path := c.path
			resp, data := e.do("POST", path, tok, e.origin(), c.body)
			if resp.StatusCode != 409 {
				t.Fatalf("%s with a stale fingerprint: %d %s, want 409", path, resp.StatusCode, data)
			}
			if msg, code := errorOf(t, data); code != "fingerprint" || msg != "the request changed; look again" {
				t.Fatalf("%s: error %q code %q", path, msg, code)
			}
		}
		got, _ := e.hub.Get(tk.ID)
		if got.Status != hub.Pending || got.Decision != nil {
			t.Fatalf("after a stale fingerprint the ticket is %s, %+v", got.Status, got.Decision)
		}
	})

	t.Run("denial without a reason", func(t *testing.T) {
		tk := e.ask("https://api.example.com/noreason", "{}")
		for _, body := range []any{
			map[string]string{"fingerprint": tk.Fingerprint},
			map[string]string{"fingerprint": tk.Fingerprint, "reason": ""},
			map[string]string{"fingerprint": tk.Fingerprint, "reason": " \n\t "},
		} {
			resp, data := e.do("POST", denyURL(tk.ID), tok, e.origin(), body)
			if resp.StatusCode != 400 {
				t.Fatalf("deny %v: %d %s, want 400", body, resp.StatusCode, data)
			}
		}
		if got, _ := e.hub.Get(tk.ID); got.Status != hub.Pending {
			t.Fatalf("the ticket is %s", got.Status)
		}
		resp, data := e.do("POST", denyURL(tk.ID), tok, e.origin(), map[string]string{"fingerprint": tk.Fingerprint, "reason": strings.Repeat("x", maxReason+1)})
		if resp.StatusCode != 400 {
			t.Fatalf("deny with a long reason: %d %s, want 400", resp.StatusCode, data)
		}
	})

	t.Run("deny", func(t *testing.T) {
		tk := e.ask("https://api.example.com/deny", "{}")
		resp, data := e.do("POST", denyURL(tk.ID), tok, e.origin(), map[string]string{"fingerprint": tk.Fingerprint, "reason": " not that repo "})
		if resp.StatusCode != 200 {
			t.Fatalf("deny: %d %s", resp.StatusCode, data)
		}
		got, _ := e.hub.Get(tk.ID)
		if got.Status != hub.Denied || got.Decision.By != "phone:pixel-7" || got.Decision.Reason != "not that repo" {
			t.Fatalf("after deny: %s %+v", got.Status, got.Decision)
		}
	})

	t.Run("approve", func(t *testing.T) {
		tk := e.ask("https://api.example.com/approve", "{}")
		resp, data := e.do("POST", approveURL(tk.ID), tok, e.origin(), map[string]string{"fingerprint": tk.Fingerprint})
		if resp.StatusCode != 200 {
			t.Fatalf("approve: %d %s", resp.StatusCode, data)
		}
		var v ticketView
		if err := json.Unmarshal(data, &v); err != nil || v.Status != hub.Approved || v.FingerprintShort == "" {
			t.Fatalf("approve answer %s: %v", data, err)
		}
		got, _ := e.hub.Get(tk.ID)
		if got.Status != hub.Approved || got.Decision.By != "phone:pixel-7" {
			t.Fatalf("after approve: %s %+v", got.Status, got.Decision)
		}
		resp, data = e.do("POST", approveURL(tk.ID), tok, e.origin(), map[string]string{"fingerprint": tk.Fingerprint})
		if _, code := errorOf(t, data); resp.StatusCode != 409 || code != "decided" {
			t.Fatalf("approve twice: %d %s, want 409 decided", resp.StatusCode, data)
		}
	})

	t.Run("unknown ticket", func(t *testing.T) {
		resp, data := e.do("POST", approveURL("tnope"), tok, e.origin(), map[string]string{"fingerprint": "fp1:x"})
		if resp.StatusCode != 404 {
			t.Fatalf("approve an unknown ticket: %d %s, want 404", resp.StatusCode, data)
		}
	})

	t.Run("expired", func(t *testing.T) {
		tk := e.ask("https://api.example.com/expired", "{}")
		e.clock.Advance(hub.DefaultTicketTTL)
		resp, data := e.do("POST", approveURL(tk.ID), tok, e.origin(), map[string]string{"fingerprint": tk.Fingerprint})
		if resp.StatusCode != 409 {
			t.Fatalf("approve an expired ticket: %d %s, want 409", resp.StatusCode, data)
		}
		if got, _ := e.hub.Get(tk.ID); got.Status != hub.Expired {
			t.Fatalf("the ticket is %s", got.Status)
		}
	})
}

// TestHostileFieldsAsOnTheTerminal: a ticket whose URL, header and reason hold the hostile texts
// of displaytest reaches the page with each as displaytest says, which the terminal's test
// checks too. A reason typed on the phone is recorded clean, and shown escaped.
func TestHostileFieldsAsOnTheTerminal(t *testing.T) {
	e := newEnv(t, true)
	tok := e.pair("pixel")
	ans, err := e.hub.Ask(hub.AskRequest{Kind: hub.KindRequest, Container: "agent-1", Method: "POST", URL: displaytest.URL.Raw,
		Reason: displaytest.Reason.Raw, Headers: []hub.Header{{Name: "X-Note", Value: displaytest.Header.Raw}},
		Fingerprint: "fp1:" + strings.Repeat("cd", 32),
		MCP:         &hub.MCPCall{Server: "files", Method: "tools/call", Tool: displaytest.Header.Raw, Arguments: "{\n  \"path\": \"" + displaytest.Reason.Raw + "\"\n}"}})
	if err != nil {
		t.Fatal(err)
	}
	tk := ans.Ticket
	check := func(where string, v ticketView) {
		t.Helper()
		if v.URL != displaytest.URL.Shown || len(v.Headers) != 1 || v.Headers[0].Value != displaytest.Header.Shown ||
			v.Reason != displaytest.Reason.Shown {
			t.Errorf("%s: url %q, headers %q, reason %q; want %q, %q, %q", where, v.URL, v.Headers, v.Reason,
				displaytest.URL.Shown, displaytest.Header.Shown, displaytest.Reason.Shown)
		}
		// The MCP call: its tool and its arguments (line breaks kept) as the terminal shows them.
		if v.MCP == nil || v.MCP.Tool != displaytest.Header.Shown || v.MCP.Arguments != "{\n  \"path\": \""+displaytest.Reason.Shown+"\"\n}" {
			t.Errorf("%s: the MCP call %+v; want the tool %q and the arguments escaped", where, v.MCP, displaytest.Header.Shown)
		}
	}
	resp, data := e.do("GET", "/phone/v1/tickets/"+tk.ID, tok, "", nil)
	var one ticketView
	if err := json.Unmarshal(data, &one); resp.StatusCode != 200 || err != nil {
		t.Fatalf("GET the ticket: %d %s %v", resp.StatusCode, data, err)
	}
	check("GET /phone/v1/tickets/{id}", one)
	resp, data = e.do("GET", "/phone/v1/tickets", tok, "", nil)
	var list []ticketView
	if err := json.Unmarshal(data, &list); resp.StatusCode != 200 || err != nil || len(list) != 1 {
		t.Fatalf("GET the tickets: %d %s %v", resp.StatusCode, data, err)
	}
	check("GET /phone/v1/tickets", list[0])

	resp, data = e.do("POST", "/phone/v1/tickets/"+tk.ID+"/deny", tok, e.origin(),
		map[string]string{"fingerprint": one.Fingerprint, "reason": displaytest.Typed.Raw})
	var denied ticketView
	if err := json.Unmarshal(data, &denied); resp.StatusCode != 200 || err != nil {
		t.Fatalf("deny: %d %s %v", resp.StatusCode, data, err)
	}
	if got, _ := e.hub.Get(tk.ID); got.Decision == nil || got.Decision.Reason != displaytest.Typed.Clean {
		t.Fatalf("the hub recorded %+v; want the reason %q", got.Decision, displaytest.Typed.Clean)
	}
	if denied.Decision == nil || denied.Decision.Reason != displaytest.Typed.Shown {
		t.Fatalf("the answer shows %+v; want the reason %q", denied.Decision, displaytest.Typed.Shown)
	}
}

func TestStrictBodies(t *testing.T) {
	e := newEnv(t, true)
	tok := e.pair("mine")
	tk := e.ask("https://api.example.com/x", "{}")
	approve := "/phone/v1/tickets/" + tk.ID + "/approve"
	deny := "/phone/v1/tickets/" + tk.ID + "/deny"
	fp := tk.Fingerprint
	cases := []struct {
		name, path, token, body string
		contentType             string
		want                    int
	}{
		{"approve with by", approve, tok, `{"fingerprint":"` + fp + `","by":"terminal:root"}`, "application/json", 400},
		{"approve with reason field", approve, tok, `{"fingerprint":"` + fp + `","reason":"x"}`, "application/json", 400},
		{"deny with extra", deny, tok, `{"fingerprint":"` + fp + `","reason":"x","approve":true}`, "application/json", 400},
		{"pair with extra", "/phone/v1/pair", "", `{"token":"` + e.pairToken() + `","device":"d","admin":true}`, "application/json", 400},
		{"trailing data", approve, tok, `{"fingerprint":"` + fp + `"} {"fingerprint":"x"}`, "application/json", 400},
		{"not json", approve, tok, `fingerprint=` + fp, "application/json", 400},
		{"array", approve, tok, `["` + fp + `"]`, "application/json", 400},
		{"form content type", approve, tok, `{"fingerprint":"` + fp + `"}`, "application/x-www-form-urlencoded", 415},
		{"text content type", "/phone/v1/pair", "", `{"token":"x"}`, "text/plain", 415},
		{"too large", deny, tok, `{"fingerprint":"` + fp + `","reason":"` + strings.Repeat("x", maxBody) + `"}`, "application/json", 413},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", e.ts.URL+c.path, strings.NewReader(c.body))
			req.Header.Set("Content-Type", c.contentType)
			req.Header.Set("Origin", e.origin())
			if c.token != "" {
				req.Header.Set("Authorization", "Bearer "+c.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.want {
				t.Fatalf("status %d %s, want %d", resp.StatusCode, data, c.want)
			}
		})
	}
	if got, _ := e.hub.Get(tk.ID); got.Status != hub.Pending {
		t.Fatalf("the ticket is %s after malformed requests", got.Status)
	}
}

func TestHeaders(t *testing.T) {
	e := newEnv(t, true)
	want := map[string]string{
		"Content-Security-Policy": "default-src 'self'; connect-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
		"X-Frame-Options":         "DENY",
		"Referrer-Policy":         "no-referrer",
		"Cache-Control":           "no-store",
		"X-Content-Type-Options":  "nosniff",
	}
	cases := []struct {
		path        string
		status      int
		contentType string
	}{
		{"/phone/", 200, "text/html; charset=utf-8"},
		{"/phone/app.js", 200, "text/javascript; charset=utf-8"},
		{"/phone/app.css", 200, "text/css; charset=utf-8"},
		{"/phone/v1/tickets", 401, "application/json"},
		{"/phone/nothing", 404, "application/json"},
	}
	for _, c := range cases {
		t.Run(c.path, func(t *testing.T) {
			resp, _ := e.do("GET", c.path, "", "", nil)
			if resp.StatusCode != c.status || resp.Header.Get("Content-Type") != c.contentType {
				t.Fatalf("status %d, Content-Type %q; want %d, %q", resp.StatusCode, resp.Header.Get("Content-Type"), c.status, c.contentType)
			}
			for k, v := range want {
				if got := resp.Header.Get(k); got != v {
					t.Errorf("%s: %q, want %q", k, got, v)
				}
			}
		})
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Get(e.ts.URL + "/phone")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 301 || resp.Header.Get("Location") != "/phone/" {
		t.Fatalf("GET /phone: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}

// TestPageIsSelfContained checks the embedded page for what the CSP would block or what would
// load from elsewhere: inline scripts, inline styles, event-handler attributes, other hosts, and
// HTML parsing of ticket fields.
func TestPageIsSelfContained(t *testing.T) {
	html, _ := page.ReadFile("page/index.html")
	js, _ := page.ReadFile("page/app.js")
	css, _ := page.ReadFile("page/app.css")
	checks := []struct {
		name string
		data []byte
		re   string
	}{
		{"inline script", html, `<script(\s[^>]*)?>[^<]`},
		{"script not from self", html, `<script[^>]*src="(https?:)?//`},
		{"inline style element", html, `<style`},
		{"style attribute", html, `\sstyle=`},
		{"event handler attribute", html, `\son[a-z]+=`},
		{"remote resource in HTML", html, `(src|href)="(https?:)?//`},
		{"remote resource in CSS", css, `url\(|@import`},
		{"HTML sink in JS", js, `innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function`},
		{"remote URL in JS", js, `https?://`},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if m := regexp.MustCompile(c.re).Find(c.data); m != nil {
				t.Fatalf("found %q", m)
			}
		})
	}
}

func TestRateLimit(t *testing.T) {
	e := newEnv(t, true)
	good := e.pair("mine")
	bad := strings.Repeat("B", 43)
	for i := range int(failBurst) {
		if resp, _ := e.do("GET", "/phone/v1/tickets", bad, "", nil); resp.StatusCode != 401 {
			t.Fatalf("bad token %d: %d, want 401", i, resp.StatusCode)
		}
	}
	resp, _ := e.do("GET", "/phone/v1/tickets", bad, "", nil)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("bad token past the burst: %d, want 429 with Retry-After", resp.StatusCode)
	}
	// While limited, nothing from this address is checked: not a good token, not a pairing.
	if resp, _ := e.do("GET", "/phone/v1/tickets", good, "", nil); resp.StatusCode != 429 {
		t.Fatalf("good token while limited: %d, want 429", resp.StatusCode)
	}
	if resp, _ := e.do("POST", "/phone/v1/pair", "", e.origin(), map[string]string{"token": e.pairToken()}); resp.StatusCode != 429 {
		t.Fatalf("pairing while limited: %d, want 429", resp.StatusCode)
	}
	if _, _, err := wsDial(e, e.origin()); err == nil {
		t.Fatal("websocket while limited: upgraded")
	}
	// The bucket refills at failRate a second.
	e.clock.Advance(time.Second)
	if resp, _ := e.do("GET", "/phone/v1/tickets", good, "", nil); resp.StatusCode != 200 {
		t.Fatalf("good token a second later: %d, want 200", resp.StatusCode)
	}
	for range int(failRate) {
		e.do("GET", "/phone/v1/tickets", bad, "", nil)
	}
	if resp, _ := e.do("GET", "/phone/v1/tickets", bad, "", nil); resp.StatusCode != 429 {
		t.Fatalf("guessing runs faster than %v a second: %d", failRate, resp.StatusCode)
	}
	// Bad pairing tokens count too.
	e.clock.Advance(time.Minute)
	for range int(failBurst) {
		e.do("POST", "/phone/v1/pair", "", e.origin(), map[string]string{"token": "guess"})
	}
	if resp, _ := e.do("POST", "/phone/v1/pair", "", e.origin(), map[string]string{"token": "guess"}); resp.StatusCode != 429 {
		t.Fatalf("pairing guesses past the burst: %d, want 429", resp.StatusCode)
	}
}

func TestLimiterKeys(t *testing.T) {
	cases := []struct{ remote, want string }{
		{"192.0.2.7:5555", "192.0.2.7"},
		{"[2001:db8:1:2:3:4:5:6]:443", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:ffff::1]:443", "2001:db8:1:2::/64"},
		{"[::ffff:192.0.2.7]:80", "192.0.2.7"},
		{"[fe80::1%eth0]:80", "fe80::/64"},
	}
	for _, c := range cases {
		t.Run(c.remote, func(t *testing.T) {
			if got := remoteKey(&http.Request{RemoteAddr: c.remote}); got != c.want {
				t.Fatalf("remoteKey = %q, want %q", got, c.want)
			}
		})
	}
	clk := testkit.NewClock(time.Unix(0, 0))
	l := newLimiter(clk.Now)
	for range int(failBurst) {
		l.fail("a")
	}
	if l.allow("a") || !l.allow("b") {
		t.Fatal("one address's failures limit another, or do not limit it")
	}
}

func wsDial(e *env, origin string) (*websocket.Conn, *http.Response, error) {
	h := http.Header{}
	if origin != "" {
		h.Set("Origin", origin)
	}
	return websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(e.ts.URL, "http")+"/phone/v1/ws", h)
}

// readMsg reads one JSON message, or fails after 5 s.
func readMsg(t *testing.T, c *websocket.Conn) map[string]any {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, data, err := c.ReadMessage()
	if err != nil {
		t.Fatalf("reading the websocket: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// closeCode reads until the server closes and returns its close code; it fails after 5 s.
func closeCode(t *testing.T, c *websocket.Conn) int {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		_, _, err := c.ReadMessage()
		if err == nil {
			continue
		}
		var ce *websocket.CloseError
		if errors.As(err, &ce) {
			return ce.Code
		}
		t.Fatalf("the server did not close the websocket: %v", err)
	}
}

func TestWebsocketOrigin(t *testing.T) {
	e := newEnv(t, true)
	for _, o := range []string{"", "http://evil.example", "null", e.origin() + "/"} {
		t.Run("origin "+o, func(t *testing.T) {
			c, resp, err := wsDial(e, o)
			if err == nil {
				c.Close()
				t.Fatal("upgraded")
			}
			if resp == nil || resp.StatusCode != 403 {
				t.Fatalf("response %v, want 403", resp)
			}
		})
	}
}

func TestWebsocketAuth(t *testing.T) {
	e := newEnv(t, false)
	e.srv.authWait = 300 * time.Millisecond
	tok := e.pair("mine")

	t.Run("no auth message", func(t *testing.T) {
		c, _, err := wsDial(e, e.origin())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		if code := closeCode(t, c); code != websocket.ClosePolicyViolation {
			t.Fatalf("close code %d, want %d", code, websocket.ClosePolicyViolation)
		}
		t.Logf("closed after %v", time.Since(start))
	})
	for _, msg := range []string{
		`{"type":"auth","token":"` + strings.Repeat("A", 43) + `"}`,
		`{"type":"auth","token":""}`,
		`{"type":"hello","token":"` + tok + `"}`,
		`{"type":"auth","token":"` + tok + `","extra":1}`,
		`not json`,
	} {
		t.Run("bad auth "+msg[:min(len(msg), 20)], func(t *testing.T) {
			c, _, err := wsDial(e, e.origin())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.WriteMessage(websocket.TextMessage, []byte(msg))
			if code := closeCode(t, c); code != CloseUnauthorized {
				t.Fatalf("close code %d, want %d", code, CloseUnauthorized)
			}
		})
	}
}

func TestWebsocketLive(t *testing.T) {
	e := newEnv(t, false)
	tok := e.pair("pixel")
	before := e.ask("https://api.example.com/before", "{}")

	c, _, err := wsDial(e, e.origin())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.WriteJSON(map[string]string{"type": "auth", "token": tok})
	snap := readMsg(t, c)
	if snap["type"] != "snapshot" || snap["device"] != "pixel" {
		t.Fatalf("first message %v", snap)
	}
	pend, _ := snap["pending"].([]any)
	if len(pend) != 1 || pend[0].(map[string]any)["id"] != before.ID {
		t.Fatalf("snapshot pending %v, want %s", pend, before.ID)
	}

	tk := e.ask("https://api.example.com/new", "{}")
	m := readMsg(t, c)
	if m["type"] != "ticket" || m["ticket"].(map[string]any)["id"] != tk.ID {
		t.Fatalf("after Ask: %v", m)
	}
	if fs := m["ticket"].(map[string]any)["fingerprint_short"]; fs == "" || fs == nil {
		t.Fatalf("no fingerprint_short in %v", m)
	}
	if resp, data := e.do("POST", "/phone/v1/tickets/"+tk.ID+"/approve", tok, e.origin(), map[string]string{"fingerprint": tk.Fingerprint}); resp.StatusCode != 200 {
		t.Fatalf("approve: %d %s", resp.StatusCode, data)
	}
	m = readMsg(t, c)
	if m["type"] != "decided" || m["ticket"].(map[string]any)["status"] != "approved" {
		t.Fatalf("after approve: %v", m)
	}
	e.hub.SetGateState(hub.GateState{PolicyVersion: "v7", Signer: "ok", Audit: "ok"})
	m = readMsg(t, c)
	if g, _ := m["gate"].(map[string]any); m["type"] != "gate" || g["policy_version"] != "v7" || g["reported_ms"].(float64) == 0 {
		t.Fatalf("after a gate report: %v", m)
	}

	// Revoking the session closes its websocket.
	for _, s := range e.srv.Sessions() {
		e.srv.Revoke(s.ID)
	}
	if code := closeCode(t, c); code != CloseUnauthorized {
		t.Fatalf("after Revoke: close code %d, want %d", code, CloseUnauthorized)
	}
}

// TestWebsocketsPerSession: a phone holds MaxSockets websockets at once; one more is closed
// with CloseTooMany, another phone is not affected, and a place freed is taken again.
func TestWebsocketsPerSession(t *testing.T) {
	e := newEnv(t, false)
	tok, other := e.pair("pixel"), e.pair("tablet")
	open := func(tok string) *websocket.Conn {
		t.Helper()
		c, _, err := wsDial(e, e.origin())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.WriteJSON(map[string]string{"type": "auth", "token": tok})
		return c
	}
	var live []*websocket.Conn
	for range MaxSockets {
		c := open(tok)
		if m := readMsg(t, c); m["type"] != "snapshot" {
			t.Fatalf("websocket %d: %v", len(live)+1, m)
		}
		live = append(live, c)
	}
	if code := closeCode(t, open(tok)); code != CloseTooMany {
		t.Fatalf("websocket %d: close code %d, want %d", MaxSockets+1, code, CloseTooMany)
	}
	if m := readMsg(t, open(other)); m["type"] != "snapshot" {
		t.Fatalf("another phone: %v", m)
	}
	live[0].Close()
	testkit.WaitFor(t, 5*time.Second, "a freed place taken again", func() bool {
		c, _, err := wsDial(e, e.origin())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.WriteJSON(map[string]string{"type": "auth", "token": tok})
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, data, err := c.ReadMessage()
		return err == nil && strings.Contains(string(data), `"snapshot"`)
	})
}

func TestSessionsAndLogout(t *testing.T) {
	e := newEnv(t, true)
	a := e.pair("  Alice's phone\x00\n ")
	e.clock.Advance(time.Second)
	b := e.pair("tablet:evil")
	ss := e.srv.Sessions()
	if len(ss) != 2 || ss[0].Device != "Alice's phone" || ss[1].Device != "tabletevil" {
		t.Fatalf("sessions %+v", ss)
	}
	if e.srv.Revoke("nope") {
		t.Fatal("Revoke of an unknown id returned true")
	}
	if !e.srv.Revoke(ss[0].ID) || e.srv.Revoke(ss[0].ID) {
		t.Fatal("Revoke twice: want true then false")
	}
	if resp, _ := e.do("GET", "/phone/v1/state", a, "", nil); resp.StatusCode != 401 {
		t.Fatalf("revoked token: %d, want 401", resp.StatusCode)
	}
	if resp, _ := e.do("POST", "/phone/v1/logout", b, e.origin(), map[string]string{}); resp.StatusCode != 204 {
		t.Fatalf("logout: %d, want 204", resp.StatusCode)
	}
	if resp, _ := e.do("GET", "/phone/v1/state", b, "", nil); resp.StatusCode != 401 {
		t.Fatalf("token after logout: %d, want 401", resp.StatusCode)
	}
	if n := len(e.srv.Sessions()); n != 0 {
		t.Fatalf("%d sessions left", n)
	}
}

func TestCleanDevice(t *testing.T) {
	cases := []struct{ in, want string }{
		{"", "phone"},
		{"   ", "phone"},
		{"pixel-7", "pixel-7"},
		{"iPhone de Zoé", "iPhone de Zoé"},
		{"a:b", "ab"},
		{"<script>x</script>", "scriptxscript"},
		{"tab\there", "tabhere"},
		{"many   spaces", "many spaces"},
		{strings.Repeat("x", 100), strings.Repeat("x", maxDevice)},
		{"\u202eevil", "evil"},
	}
	for _, c := range cases {
		if got := cleanDevice(c.in); got != c.want {
			t.Errorf("cleanDevice(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestLogHasNoTokens checks that neither a pairing token nor a session token reaches the log.
func TestLogHasNoTokens(t *testing.T) {
	e := newEnv(t, true)
	pt := e.pairToken()
	resp, data := e.do("POST", "/phone/v1/pair", "", e.origin(), map[string]string{"token": pt, "device": "d"})
	if resp.StatusCode != 200 {
		t.Fatal(resp.StatusCode)
	}
	var out struct{ Session string }
	json.Unmarshal(data, &out)
	e.do("GET", "/phone/v1/tickets", out.Session, "", nil)
	e.do("GET", "/phone/v1/tickets", out.Session+"x", "", nil)
	e.do("POST", "/phone/v1/pair", "", e.origin(), map[string]string{"token": pt})
	log := e.log.String()
	if !strings.Contains(log, "phone: request") {
		t.Fatalf("no request lines in the log:\n%s", log)
	}
	for _, secret := range []string{pt, out.Session} {
		if strings.Contains(log, secret) {
			t.Fatalf("the log holds a token:\n%s", log)
		}
	}
}

// More pending tickets than a page: the snapshot carries the newest page and the cursor of the
// next, and the list answers page after page until every ticket was read once.
func TestPendingPaged(t *testing.T) {
	e := newEnv(t, false)
	tok := e.pair("pixel")
	for i := 0; i < hub.DefaultPage+30; i++ {
		e.ask(fmt.Sprintf("https://api.example.com/w/%d", i), "{}")
	}
	c, _, err := wsDial(e, e.origin())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.WriteJSON(map[string]string{"type": "auth", "token": tok})
	snap := readMsg(t, c)
	pend, _ := snap["pending"].([]any)
	next, _ := snap["pending_next"].(string)
	if len(pend) != hub.DefaultPage || next == "" {
		t.Fatalf("snapshot: %d pending, next %q; want a page and a cursor", len(pend), next)
	}
	seen := map[string]bool{}
	for _, p := range pend {
		seen[p.(map[string]any)["id"].(string)] = true
	}
	for pages := 0; next != "" && pages < 10; pages++ {
		resp, data := e.do("GET", "/phone/v1/tickets?paged=1&limit=20&cursor="+url.QueryEscape(next), tok, e.origin(), nil)
		if resp.StatusCode != 200 {
			t.Fatalf("page: %d %s", resp.StatusCode, data)
		}
		var page struct {
			Tickets []struct{ ID string } `json:"tickets"`
			Next    string                `json:"next"`
		}
		if err := json.Unmarshal(data, &page); err != nil {
			t.Fatal(err)
		}
		for _, tk := range page.Tickets {
			if seen[tk.ID] {
				t.Fatalf("ticket %s twice", tk.ID)
			}
			seen[tk.ID] = true
		}
		next = page.Next
	}
	if len(seen) != hub.DefaultPage+30 || next != "" {
		t.Fatalf("read %d tickets (next %q), want all %d", len(seen), next, hub.DefaultPage+30)
	}
}

// A ticket whose request a gate restart cut says so on the phone's API (the page shows the
// sentence under "Held requests"), and approving it answers what the approval stands for.
func TestTicketWithItsRequestCut(t *testing.T) {
	e := newEnv(t, true)
	tok := e.pair("pixel-7")
	tk := e.ask("https://api.example.com/cut", "{}")
	e.hub.LeaveCut(tk.ID)
	resp, data := e.do("GET", "/phone/v1/tickets/"+tk.ID, tok, e.origin(), nil)
	var got ticketView
	if resp.StatusCode != 200 || json.Unmarshal(data, &got) != nil {
		t.Fatalf("GET the ticket: %d %s", resp.StatusCode, data)
	}
	if got.Holders != 0 || got.Gone != hub.GoneRestart || got.Cut != 1 ||
		!strings.Contains(got.Waiting, "Nothing is waiting on this ticket now (the gate restarted while its request was held") {
		t.Fatalf("the ticket: holders %d, gone %q, cut %d, waiting %q", got.Holders, got.Gone, got.Cut, got.Waiting)
	}
	resp, data = e.do("POST", "/phone/v1/tickets/"+tk.ID+"/approve", tok, e.origin(), map[string]string{"fingerprint": tk.Fingerprint})
	if resp.StatusCode != 200 || json.Unmarshal(data, &got) != nil {
		t.Fatalf("approve: %d %s", resp.StatusCode, data)
	}
	if got.Decision == nil || got.Decision.Released != 0 ||
		!strings.Contains(got.Waiting, "Nothing was waiting on this ticket when it was approved") ||
		!strings.Contains(got.Waiting, "lets one identical retry of the request through until") {
		t.Fatalf("the approval's answer: %+v, waiting %q", got.Decision, got.Waiting)
	}
}
