package main

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/hubclient"
	"github.com/lockhttp/lockhttp/internal/phone"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

type phonesEnv struct {
	hs  *hubServer
	ts  *httptest.Server
	dir string // the console's audit
	log *testkit.Buffer
}

func newPhonesEnv(t *testing.T) *phonesEnv {
	t.Helper()
	_, key, _ := ed25519.GenerateKey(nil)
	h, err := hub.New(hub.Config{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	e := &phonesEnv{dir: t.TempDir(), log: &testkit.Buffer{}}
	aw, err := audit.Open(audit.Options{Dir: e.dir, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { aw.Close() })
	e.ts = httptest.NewUnstartedServer(nil)
	ph, err := phone.New(phone.Config{Hub: h, PublicURL: "http://" + e.ts.Listener.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	e.hs = &hubServer{hub: h, phone: ph, log: slog.New(slog.NewTextHandler(e.log, nil)), audit: aw}
	mux := http.NewServeMux()
	mux.Handle("/phone/", ph.Handler())
	mux.Handle("/v1/", h.FacadeHandler(map[string]string{"cli": "cli-token"}))
	e.hs.mountPhones(mux, hub.Tokens("", map[string]string{"cli": "cli-token"}))
	e.ts.Config.Handler = mux
	e.ts.Start()
	t.Cleanup(func() { ph.Close(); e.ts.Close() })
	return e
}

// pair pairs a phone named device through the page's API and returns its session token.
func (e *phonesEnv) pair(t *testing.T, device string) string {
	t.Helper()
	link, err := e.hs.phone.NewPairing()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(map[string]string{"token": link[strings.Index(link, "#pair=")+6:], "device": device})
	req, _ := http.NewRequest("POST", e.ts.URL+"/phone/v1/pair", bytes.NewReader(b))
	req.Header.Set("Origin", e.ts.URL)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("pair: %v %v", err, resp)
	}
	defer resp.Body.Close()
	var out struct{ Session string }
	json.NewDecoder(resp.Body).Decode(&out)
	return out.Session
}

func (e *phonesEnv) unpairRecords(t *testing.T) []map[string]any {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(e.dir, "*.jsonl"))
	var out []map[string]any
	for _, f := range files {
		data, _ := os.ReadFile(f)
		for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && m["event"] == "phone-unpaired" {
				out = append(out, m)
			}
		}
	}
	return out
}

// The CLI facade lists and unpairs phones; the terminal's :phones and :unpair do the same; each
// unpairing is audited with who did it.
func TestPhonesFacadeAndCommands(t *testing.T) {
	e := newPhonesEnv(t)
	e.pair(t, "pixel")
	tabletTok := e.pair(t, "tablet")
	f := hubclient.NewFacade(e.ts.URL, "cli-token")
	ctx := t.Context()

	ps, err := f.Phones(ctx)
	if err != nil || len(ps) != 2 || ps[0].Device != "pixel" || ps[1].Device != "tablet" {
		t.Fatalf("Phones: %+v %v", ps, err)
	}
	if _, err := hubclient.NewFacade(e.ts.URL, "wrong").Phones(ctx); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("Phones with a wrong token: %v", err)
	}
	if _, err := f.Unpair(ctx, "p000000000000", "alice"); err == nil || !strings.Contains(err.Error(), "no paired phone has this id") {
		t.Fatalf("Unpair of an unknown id: %v", err)
	}
	got, err := f.Unpair(ctx, ps[1].ID, "alice\x1b[2J:root")
	if err != nil || got.ID != ps[1].ID || got.Device != "tablet" {
		t.Fatalf("Unpair: %+v %v", got, err)
	}
	req, _ := http.NewRequest("GET", e.ts.URL+"/phone/v1/tickets", nil)
	req.Header.Set("Authorization", "Bearer "+tabletTok)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 401 {
		t.Fatalf("the unpaired token: %v %v", resp, err)
	}
	if strings.Contains(e.log.String(), tabletTok) {
		t.Fatal("the session token is in the log")
	}

	cmds := e.hs.phonesCommand("terminal:bob")
	out, err := cmds["phones"](nil)
	if err != nil || !strings.Contains(out, "pixel") || strings.Contains(out, "tablet") || !strings.Contains(out, ps[0].ID) {
		t.Fatalf(":phones: %v\n%s", err, out)
	}
	if _, err := cmds["unpair"](nil); err == nil || !strings.Contains(err.Error(), "usage: :unpair ID") {
		t.Fatalf(":unpair without an id: %v", err)
	}
	if out, err := cmds["unpair"]([]string{ps[0].ID}); err != nil || !strings.Contains(out, "unpaired pixel") {
		t.Fatalf(":unpair: %v %s", err, out)
	}
	if out, _ := cmds["phones"](nil); !strings.Contains(out, "no paired phones") {
		t.Fatalf(":phones after both unpaired:\n%s", out)
	}

	recs := e.unpairRecords(t)
	if len(recs) != 2 || recs[0]["id"] != ps[1].ID || recs[0]["approver"] != "cli:alice[2Jroot" ||
		recs[1]["id"] != ps[0].ID || recs[1]["approver"] != "terminal:bob" || !strings.Contains(recs[1]["detail"].(string), `"pixel"`) {
		t.Fatalf("audit records %v", recs)
	}
}

// A body that is not the one expected is refused with the fix, not taken as a decision.
func TestUnpairBadBody(t *testing.T) {
	e := newPhonesEnv(t)
	e.pair(t, "pixel")
	id := e.hs.phone.Sessions()[0].ID
	for _, body := range []string{`{"by":"x","extra":1}`, `[1,2]`, `{"by":`, strings.Repeat(" ", 5<<10) + "{}"} {
		req, _ := http.NewRequest("POST", e.ts.URL+"/v1/phones/"+id+"/unpair", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer cli-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(data), "bad unpair request") {
			t.Errorf("body %.20q: %d %s", body, resp.StatusCode, data)
		}
	}
	if len(e.hs.phone.Sessions()) != 1 {
		t.Fatal("a bad request unpaired the phone")
	}
}
