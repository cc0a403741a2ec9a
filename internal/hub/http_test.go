package hub

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/hubapi"
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

// TestGateRereadsTickets: POST /v1/gate/tickets answers the tickets named that are no longer
// pending (unknown ids left out) and refuses more ids than hubapi.MaxTicketsAsked.
func TestGateRereadsTickets(t *testing.T) {
	h, _ := newHub(t, "")
	srv := httptest.NewServer(h.GateHandler("gate-tok"))
	defer srv.Close()
	post := func(ids []string) (int, []Ticket) {
		t.Helper()
		body, _ := json.Marshal(hubapi.TicketsRequest{IDs: ids})
		req, _ := http.NewRequest("POST", srv.URL+"/v1/gate/tickets", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer gate-tok")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out []Ticket
		if resp.StatusCode == 200 {
			if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
				t.Fatal(err)
			}
		}
		return resp.StatusCode, out
	}
	a, _ := h.Ask(ask("fp1:a"))
	b, _ := h.Ask(ask("fp2:a"))
	if _, err := h.Decide(b.Ticket.ID, "fp2:a", false, "cli:root", "no"); err != nil {
		t.Fatal(err)
	}
	code, got := post([]string{a.Ticket.ID, b.Ticket.ID, "tnosuchticket"})
	if code != 200 || len(got) != 1 || got[0].ID != b.Ticket.ID || got[0].Status != Denied {
		t.Fatalf("reread: %d %+v; want only %s, denied", code, got, b.Ticket.ID)
	}
	if code, got := post(nil); code != 200 || got == nil || len(got) != 0 {
		t.Fatalf("reread of nothing: %d %v; want 200 and []", code, got)
	}
	many := make([]string, hubapi.MaxTicketsAsked+1)
	for i := range many {
		many[i] = a.Ticket.ID
	}
	if code, _ := post(many); code != 400 {
		t.Fatalf("reread of %d ids: %d, want 400", len(many), code)
	}
}
