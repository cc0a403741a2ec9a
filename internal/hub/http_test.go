package hub

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestFacadeDenyCleansWhatWasTyped: a denial through the facade API (lox deny) records the reason
// and the name as display.Clean leaves them, and a reason of nothing visible is no reason.
func TestFacadeDenyCleansWhatWasTyped(t *testing.T) {
	h, _ := newHub(t, "")
	srv := httptest.NewServer(h.FacadeHandler(map[string]string{"cli": "tok"}))
	defer srv.Close()
	deny := func(id, body string) int {
		t.Helper()
		req, _ := http.NewRequest("POST", srv.URL+"/v1/tickets/"+id+"/deny", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("Content-Type"); got != "application/json" {
			t.Errorf("Content-Type %q", got)
		}
		return resp.StatusCode
	}
	a, _ := h.Ask(ask("fp1:a"))
	if code := deny(a.Ticket.ID, `{"fingerprint":"fp1:a","by":"root","reason":"\u202e\u200b\u001b \t"}`); code != 400 {
		t.Fatalf("a reason of nothing visible: %d, want 400", code)
	}
	if code := deny(a.Ticket.ID, `{"fingerprint":"fp1:a","by":"ro:ot\u202e","reason":" not\u202e\nnow\u001b[2J "}`); code != 200 {
		t.Fatalf("deny: %d, want 200", code)
	}
	got, _ := h.Get(a.Ticket.ID)
	if got.Decision == nil || got.Decision.Reason != "not now[2J" || got.Decision.By != "cli:root" {
		t.Fatalf("decision %+v; want the reason %q by %q", got.Decision, "not now[2J", "cli:root")
	}
}

// TestEventStreamOutlivesServerTimeouts: the gate's event stream lasts past the server's read
// and write timeouts (here a fifth of a second): an event published well after them still
// arrives on the stream opened before.
func TestEventStreamOutlivesServerTimeouts(t *testing.T) {
	h, _ := newHub(t, "")
	srv := httptest.NewUnstartedServer(h.GateHandler("tok"))
	srv.Config.ReadTimeout = 200 * time.Millisecond
	srv.Config.WriteTimeout = 200 * time.Millisecond
	srv.Start()
	defer srv.Close()
	req, _ := http.NewRequest("GET", srv.URL+"/v1/gate/events", nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if sc.Text() != "" {
				lines <- sc.Text()
			}
		}
	}()
	time.Sleep(3 * srv.Config.ReadTimeout) // past both timeouts
	a, _ := h.Ask(ask("fp1:late"))
	select {
	case line, ok := <-lines:
		if !ok {
			t.Fatal("the event stream ended at the server's timeouts")
		}
		if !strings.Contains(line, a.Ticket.ID) {
			t.Fatalf("event %s, want ticket %s", line, a.Ticket.ID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event on the stream")
	}
}

// TestGateBindsAnIssuedLogin: POST /v1/gate/issued, with the gate's token only, hands the
// console (Config.Issued) a checked login: a container, a hash, a host and a request id. Nothing
// else reaches it, and a hub without the console says so.
func TestGateBindsAnIssuedLogin(t *testing.T) {
	h, _ := newHub(t, "")
	var got []Issued
	h.cfg.Issued = func(i Issued) error { got = append(got, i); return nil }
	srv := httptest.NewServer(h.GateHandler("tok"))
	defer srv.Close()
	post := func(token, body string) int {
		t.Helper()
		req, _ := http.NewRequest("POST", srv.URL+"/v1/gate/issued", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	hash := strings.Repeat("ab", 32)
	good := `{"container":"local","hash":"` + hash + `","host":"platform.claude.com","request":"r0123abcd"}`
	if code := post("wrong", good); code != 401 || len(got) != 0 {
		t.Fatalf("without the gate's token: %d, %d bound", code, len(got))
	}
	for _, bad := range []string{
		`{"container":"local","hash":"` + strings.ToUpper(hash) + `","host":"platform.claude.com","request":"r1"}`,
		`{"container":"local","hash":"sk-ant-oat01-notahash","host":"platform.claude.com","request":"r1"}`,
		`{"container":"","hash":"` + hash + `","host":"platform.claude.com","request":"r1"}`,
		`{"container":"local","hash":"` + hash + `","host":"platform.claude.com\n","request":"r1"}`,
		`{"container":"local","hash":"` + hash + `","host":"platform.claude.com","request":"` + strings.Repeat("r", 65) + `"}`,
		`{"container":"local","hash":"` + hash + `","host":"platform.claude.com","request":"r1","token":"x"}`,
	} {
		if code := post("tok", bad); code != 400 {
			t.Fatalf("%s: %d, want 400", bad, code)
		}
	}
	if len(got) != 0 {
		t.Fatalf("bad logins reached the console: %+v", got)
	}
	if code := post("tok", good); code != 204 || len(got) != 1 || got[0] != (Issued{Container: "local", Hash: hash, Host: "platform.claude.com", Request: "r0123abcd"}) {
		t.Fatalf("a good login: %d, %+v", code, got)
	}
	h.cfg.Issued = nil
	if code := post("tok", good); code != 400 {
		t.Fatalf("a hub without the console: %d, want 400", code)
	}
}
