package hubdb

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/phone"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

const phoneURL = "http://hub.test:3131"

func phoneCall(t *testing.T, method, url, token, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Origin", phoneURL)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}

// Two hub replicas on one database share the phones: a link made on one pairs through the other,
// once; the phone is paired on both; unpaired on one, its websocket on the other closes and its
// token works nowhere.
func TestPhonesShared(t *testing.T) {
	p := server(t)
	dsn := freshDB(t, p)
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	var phs []*phone.Server
	var urls []string
	var s *Store
	for range 2 {
		s = open(t, dsn)
		h, err := hub.New(hub.Config{Store: s, Key: key})
		if err != nil {
			t.Fatal(err)
		}
		ph, err := phone.New(phone.Config{Hub: h, PublicURL: phoneURL, Pairings: s})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(ph.Handler())
		t.Cleanup(srv.Close)
		t.Cleanup(ph.Close)
		phs, urls = append(phs, ph), append(urls, srv.URL)
	}
	link, err := phs[0].NewPairing()
	if err != nil {
		t.Fatal(err)
	}
	_, tok, _ := strings.Cut(link, "#pair=")
	code, m := phoneCall(t, "POST", urls[1]+"/phone/v1/pair", "", `{"token":"`+tok+`","device":"pixel"}`)
	if code != 200 || m["session"] == nil {
		t.Fatalf("pairing through the other replica: %d %v", code, m)
	}
	session, id := m["session"].(string), m["id"].(string)
	if code, _ := phoneCall(t, "POST", urls[0]+"/phone/v1/pair", "", `{"token":"`+tok+`","device":"again"}`); code != 401 {
		t.Fatalf("the link used again on the first replica: %d", code)
	}
	for i, u := range urls {
		if code, _ := phoneCall(t, "GET", u+"/phone/v1/state", session, ""); code != 200 {
			t.Fatalf("replica %d: the paired phone's request: %d", i, code)
		}
	}
	if ss := phs[0].Sessions(); len(ss) != 1 || ss[0].ID != id || ss[0].Device != "pixel" {
		t.Fatalf("replica 0 lists %+v", ss)
	}
	testkit.WaitFor(t, 10*time.Second, "both replicas listening", func() bool {
		n, err := s.Listening(t.Context())
		return err == nil && n == 2
	})
	// The phone's page is open on replica 0.
	hdr := http.Header{"Origin": {phoneURL}}
	c, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(urls[0], "http")+"/phone/v1/ws", hdr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.WriteJSON(map[string]string{"type": "auth", "token": session})
	var snap map[string]any
	if err := c.ReadJSON(&snap); err != nil || snap["type"] != "snapshot" {
		t.Fatalf("snapshot: %v %v", snap, err)
	}
	if v, ok := phs[1].Unpair(id); !ok || v.Device != "pixel" {
		t.Fatalf("unpair on replica 1: %+v %v", v, ok)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		_, _, err := c.ReadMessage()
		if err == nil {
			continue
		}
		if !websocket.IsCloseError(err, phone.CloseUnauthorized) {
			t.Fatalf("replica 0's websocket after the unpairing on replica 1: %v", err)
		}
		break
	}
	for i, u := range urls {
		if code, _ := phoneCall(t, "GET", u+"/phone/v1/state", session, ""); code != 401 {
			t.Fatalf("replica %d: the unpaired phone's request: %d", i, code)
		}
	}
}
