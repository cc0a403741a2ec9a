package phone

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// Unpair returns what the terminal lists (open websockets, the latest address) and ends the
// session for every request at once.
func TestUnpairReturnsTheSession(t *testing.T) {
	e := newEnv(t, true)
	tok := e.pair("pixel")
	c, _, err := wsDial(e, e.origin())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.WriteJSON(map[string]string{"type": "auth", "token": tok})
	if m := readMsg(t, c); m["type"] != "snapshot" {
		t.Fatalf("first message %v", m)
	}
	e.clock.Advance(time.Minute)
	if resp, _ := e.do("GET", "/phone/v1/state", tok, "", nil); resp.StatusCode != 200 {
		t.Fatalf("state: %d", resp.StatusCode)
	}
	ss := e.srv.Sessions()
	if len(ss) != 1 || ss[0].Sockets != 1 || !ss[0].LastSeen.Equal(e.clock.Now()) ||
		!strings.HasPrefix(ss[0].LastRemote, "127.0.0.1:") || ss[0].Remote == "" {
		t.Fatalf("sessions %+v", ss)
	}
	got, ok := e.srv.Unpair(ss[0].ID)
	if !ok || got.ID != ss[0].ID || got.Device != "pixel" || got.Sockets != 1 {
		t.Fatalf("Unpair: %+v %v", got, ok)
	}
	if code := closeCode(t, c); code != CloseUnauthorized {
		t.Fatalf("the websocket closed with %d, want %d", code, CloseUnauthorized)
	}
	if _, ok := e.srv.Unpair(ss[0].ID); ok {
		t.Fatal("Unpair twice: want false")
	}
	tk := e.ask("https://api.example.com/x", "{}")
	for _, p := range []struct{ method, path string }{
		{"GET", "/phone/v1/tickets"},
		{"POST", "/phone/v1/tickets/" + tk.ID + "/approve"},
	} {
		if resp, _ := e.do(p.method, p.path, tok, e.origin(), map[string]string{"fingerprint": tk.Fingerprint}); resp.StatusCode != 401 {
			t.Errorf("%s %s with the unpaired token: %d, want 401", p.method, p.path, resp.StatusCode)
		}
	}
	if got, _ := e.hub.Get(tk.ID); got.Status != "pending" {
		t.Fatalf("the unpaired token decided the ticket: %s", got.Status)
	}
}

// A request authenticated just before the unpairing decides nothing: the decision handler
// looks again.
func TestUnpairedDuringTheRequest(t *testing.T) {
	e := newEnv(t, true)
	e.pair("pixel")
	ss := e.srv.sessions[e.srv.Sessions()[0].ID]
	tk := e.ask("https://api.example.com/x", "{}")
	e.srv.Revoke(ss.ID) // after the token check, before the decision
	body := `{"fingerprint":"` + tk.Fingerprint + `"}`
	r := httptest.NewRequest("POST", "/phone/v1/tickets/"+tk.ID+"/approve", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.SetPathValue("id", tk.ID)
	r = r.WithContext(context.WithValue(r.Context(), sessionKey{}, ss))
	w := httptest.NewRecorder()
	e.srv.decide(true)(w, r)
	if w.Code != 401 {
		t.Fatalf("decision by a session unpaired during the request: %d %s, want 401", w.Code, w.Body)
	}
	if got, _ := e.hub.Get(tk.ID); got.Status != "pending" {
		t.Fatalf("the ticket is %s", got.Status)
	}
}

func TestTable(t *testing.T) {
	now := time.Date(2026, 3, 4, 12, 0, 0, 0, time.Local)
	tests := []struct {
		name string
		ss   []Session
		want []string
		not  []string
	}{
		{name: "none", want: []string{"no paired phones", "lox pair"}},
		{
			name: "page open, same address",
			ss: []Session{{ID: "p0123456789ab", Device: "pixel", Remote: "10.0.0.5:1234", LastRemote: "10.0.0.5:1234",
				Created: now.Add(-time.Hour), LastSeen: now.Add(-3 * time.Second), Sockets: 1}},
			want: []string{"NAME", "LAST SEEN", "pixel", "p0123456789ab", "11:00:00", "3s ago (page open)", "10.0.0.5:1234", "lox unpair ID"},
			not:  []string{"paired from"},
		},
		{
			name: "closed, moved, paired days ago",
			ss: []Session{{ID: "pabcdefabcdef", Device: "tablet", Remote: "10.0.0.5:1", LastRemote: "192.0.2.9:2",
				Created: now.Add(-72 * time.Hour), LastSeen: now.Add(-2 * time.Hour)}},
			want: []string{"2026-03-01 12:00", "2h ago", "192.0.2.9:2 (paired from 10.0.0.5:1)"},
			not:  []string{"page open"},
		},
		{
			name: "hostile text is escaped",
			ss:   []Session{{ID: "p\x1b[2J", Device: "evil\u202e", Remote: "x\x07", Created: now, LastSeen: now}},
			want: []string{`p\x1b[2J`, `evil\u{202E}`, `x\x07`, "now"},
			not:  []string{"\x1b", "\u202e", "\x07"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			Table(&b, tc.ss, now)
			for _, w := range tc.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("want %q in\n%s", w, b.String())
				}
			}
			for _, w := range tc.not {
				if strings.Contains(b.String(), w) {
					t.Errorf("%q should not be in\n%s", w, b.String())
				}
			}
		})
	}
}
