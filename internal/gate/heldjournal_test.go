package gate

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/egress"
	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/hubapi"
	"github.com/lockhttp/lockhttp/internal/hubclient"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// heldEnv is a gate with a journal of held requests, a real hub, and a Serve the test stops.
type heldEnv struct {
	g        *Gate
	addr     string
	port     int
	auditDir string
	heldDir  string
	hub      *hub.Hub
	hc       *hubclient.Client
	stop     func() // ends Serve as a signal does, and waits for it to return
	stopped  chan struct{}
}

func startHeld(t *testing.T, hold string, heldDir string) *heldEnv {
	t.Helper()
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	h, url, stopHub := hubServer(t, "127.0.0.1:0", filepath.Join(t.TempDir(), "hub.json"), key)
	t.Cleanup(stopHub)
	hc := hubclient.New(url, "gate-token-0123456789", key.Public().(ed25519.PublicKey), nil)
	hctx, cancelHC := context.WithCancel(context.Background())
	t.Cleanup(cancelHC)
	go hc.Run(hctx)
	origin := &recorder{}
	srv := httptest.NewServer(origin)
	t.Cleanup(srv.Close)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	auditDir := t.TempDir()
	aw, err := audit.Open(audit.Options{Dir: auditDir, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	g := New(Config{Audit: aw, Dialer: &egress.Dialer{}, Hub: hc, HeldDir: heldDir})
	p, err := policy.Load("p.toml", []byte(fmt.Sprintf(gatePolicy+"[settings]\nhold = %q\n", port, hold)))
	if err != nil {
		t.Fatal(err)
	}
	g.SetPolicy(p)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &heldEnv{g: g, addr: l.Addr().String(), port: port, auditDir: auditDir, heldDir: heldDir, hub: h, hc: hc, stopped: make(chan struct{})}
	go func() { g.Serve(ctx, l); close(e.stopped) }()
	e.stop = func() { cancel(); <-e.stopped }
	t.Cleanup(func() { e.stop(); aw.Close() })
	testkit.WaitFor(t, 5*time.Second, "the gate's event stream to the hub", hc.Connected)
	return e
}

// send sends method path through the gate and returns what the client got.
func (e *heldEnv) send(method, path string) <-chan *http.Response {
	done := make(chan *http.Response, 1)
	go func() {
		c := (&testGate{addr: e.addr}).client()
		c.Timeout = time.Minute
		req, _ := http.NewRequest(method, fmt.Sprintf("http://origin.test:%d%s", e.port, path), nil)
		resp, err := c.Do(req)
		if err != nil {
			done <- nil
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Body = io.NopCloser(strings.NewReader(string(b)))
		done <- resp
	}()
	return done
}

// heldTicket waits until the hub counts one request held on the pending ticket of path.
func (e *heldEnv) heldTicket(t *testing.T, path string) hubapi.Ticket {
	t.Helper()
	var tk hubapi.Ticket
	testkit.WaitFor(t, 5*time.Second, "a request held on the ticket of "+path, func() bool {
		for _, p := range e.hub.Pending() {
			if strings.HasSuffix(p.URL, path) && p.Holders == 1 {
				tk = p
				return true
			}
		}
		return false
	})
	return tk
}

func journal(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func recordsOf(t *testing.T, dir, ticket string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, m := range testkit.AuditRecords(t, dir) {
		if m["ticket"] == ticket {
			out = append(out, m)
		}
	}
	return out
}

// A request held for a human while the gate stops on a signal is answered E_PENDING (its retry
// finds the ticket), its record says the restart cut it, the ticket says its request is gone and
// why, and the journal keeps nothing: the stop waited for the record.
func TestHeldRequestCutByTheGatesStop(t *testing.T) {
	e := startHeld(t, "30s", filepath.Join(t.TempDir(), "held"))
	res := e.send("DELETE", "/held")
	tk := e.heldTicket(t, "/held")
	if got := journal(t, e.heldDir); len(got) != 1 {
		t.Fatalf("the journal while the request is held: %v", got)
	}
	e.stop()
	resp := <-res
	if resp == nil || resp.StatusCode != 403 || resp.Header.Get(HeaderCode) != "E_PENDING" || resp.Header.Get(HeaderTicket) != tk.ID {
		t.Fatalf("the held request at the gate's stop: %+v", resp)
	}
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), "the gate is restarting") {
		t.Errorf("the answer does not say why: %s", body)
	}
	recs := recordsOf(t, e.auditDir, tk.ID)
	if len(recs) != 1 {
		t.Fatalf("records of ticket %s: %v", tk.ID, recs)
	}
	r := recs[0]
	if r["code"] != "E_PENDING" || r["status"] != float64(403) || r["verdict"] != "ASK" || r["id"] != resp.Header.Get(HeaderRequest) ||
		!strings.HasPrefix(r["detail"].(string), "cut by a gate restart: the gate stopped while this request was held for a human on ticket "+tk.ID) {
		t.Fatalf("the record: %v", r)
	}
	if got := journal(t, e.heldDir); len(got) != 0 {
		t.Fatalf("the journal after the stop: %v", got)
	}
	got, _ := e.hub.Get(tk.ID)
	if got.Status != hubapi.Pending || got.Holders != 0 || got.Cut != 1 || got.Gone != hubapi.GoneRestart || !strings.Contains(got.Waiting, "the gate restarted") {
		t.Fatalf("the ticket: holders %d, cut %d, gone %q, waiting %q", got.Holders, got.Cut, got.Gone, got.Waiting)
	}
}

// What a killed gate held (its journal as the kill left it) gets its record when the next gate
// starts: the request's own id, URL, rule and ticket, no status, and "cut by a gate restart";
// RecordCut returns the tickets for the hub. A file cut short is still recorded by its id; a
// file the gate did not write is left alone.
func TestKilledGatesHoldsRecordedAtItsNextStart(t *testing.T) {
	a := startHeld(t, "30s", filepath.Join(t.TempDir(), "held"))
	a.send("DELETE", "/held-at-the-kill")
	tk := a.heldTicket(t, "/held-at-the-kill")
	// A kill leaves the journal as it is while the request is held.
	left := t.TempDir()
	names := journal(t, a.heldDir)
	if len(names) != 1 {
		t.Fatalf("the journal while held: %v", names)
	}
	data, err := os.ReadFile(filepath.Join(a.heldDir, names[0]))
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSuffix(names[0], ".json")
	os.WriteFile(filepath.Join(left, names[0]), data, 0o600)
	os.WriteFile(filepath.Join(left, "r0123abcd-zz.json"), data[:len(data)/2], 0o600) // cut short by a crash
	os.WriteFile(filepath.Join(left, "notes.txt"), []byte("not the gate's"), 0o600)

	b := startHeld(t, "30s", left)
	cut, err := b.g.RecordCut(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(cut) != 1 || cut[tk.ID] != 1 {
		t.Fatalf("cut %v, want one request of %s", cut, tk.ID)
	}
	var whole, short map[string]any
	for _, m := range testkit.AuditRecords(t, b.auditDir) {
		switch m["id"] {
		case id:
			whole = m
		case "r0123abcd-zz":
			short = m
		}
	}
	if whole == nil || whole["ticket"] != tk.ID || whole["code"] != "E_PENDING" || whole["verdict"] != "ASK" || whole["status"] != float64(0) ||
		whole["container"] != "local" || whole["method"] != "DELETE" || !strings.HasSuffix(whole["url"].(string), "/held-at-the-kill") ||
		!strings.HasPrefix(whole["detail"].(string), "cut by a gate restart: the gate stopped while this request was held for a human on ticket "+tk.ID+"; its client got no answer (the gate was killed)") {
		t.Fatalf("the record of the held request: %v", whole)
	}
	if short == nil || short["code"] != "E_PENDING" || !strings.Contains(short["detail"].(string), "cut short (a crash of the machine), so only its id is known") {
		t.Fatalf("the record of the file cut short: %v", short)
	}
	if got := journal(t, left); len(got) != 1 || got[0] != "notes.txt" {
		t.Fatalf("the journal after RecordCut: %v", got)
	}
	// Each is recorded once: a second start finds nothing.
	if cut, err := b.g.RecordCut(context.Background()); err != nil || len(cut) != 0 {
		t.Fatalf("a second RecordCut: %v %v", cut, err)
	}
}

// A hold that ends as holds end (E_PENDING at the end of the hold, an approval) leaves nothing
// in the journal.
func TestHeldJournalEmptiesWithTheHold(t *testing.T) {
	e := startHeld(t, "1s", filepath.Join(t.TempDir(), "held"))
	resp := <-e.send("DELETE", "/a")
	if resp == nil || resp.Header.Get(HeaderCode) != "E_PENDING" {
		t.Fatalf("past the hold: %+v", resp)
	}
	if got := journal(t, e.heldDir); len(got) != 0 {
		t.Fatalf("the journal after the hold: %v", got)
	}
	res := e.send("DELETE", "/b")
	tk := e.heldTicket(t, "/b")
	if _, err := e.hub.Decide(tk.ID, tk.Fingerprint, true, "terminal:test", ""); err != nil {
		t.Fatal(err)
	}
	if resp := <-res; resp == nil || resp.StatusCode != 200 {
		t.Fatalf("after the approval: %+v", resp)
	}
	if got := journal(t, e.heldDir); len(got) != 0 {
		t.Fatalf("the journal after the approval: %v", got)
	}
}

// A request whose journal entry cannot be written is not held: 503 E_NO_AUDIT, and the hub's
// count of it is taken back.
func TestHeldJournalUnwritable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	os.WriteFile(file, nil, 0o600)
	e := startHeld(t, "30s", filepath.Join(file, "held"))
	resp := <-e.send("DELETE", "/x")
	if resp == nil || resp.StatusCode != 503 || resp.Header.Get(HeaderCode) != "E_NO_AUDIT" {
		t.Fatalf("with no journal: %+v", resp)
	}
	p := e.hub.Pending()
	if len(p) != 1 || p[0].Holders != 0 {
		t.Fatalf("the ticket: %+v", p)
	}
}

// The journal holds at most maxHeldPerContainer requests of one container and maxHeldAll in all;
// a place given back is taken again.
func TestHeldJournalBounds(t *testing.T) {
	j := newHeldJournal("", slog.New(slog.DiscardHandler))
	var slots []*heldSlot
	for i := range maxHeldPerContainer {
		s, ok := j.reserve("a")
		if !ok {
			t.Fatalf("place %d of container a refused", i)
		}
		slots = append(slots, s)
	}
	if _, ok := j.reserve("a"); ok {
		t.Fatal("a place past the container's bound")
	}
	for i := 0; len(slots) < maxHeldAll; i++ {
		s, ok := j.reserve(fmt.Sprintf("c%d", i%8))
		if !ok {
			t.Fatalf("place %d of all refused", len(slots))
		}
		slots = append(slots, s)
	}
	if _, ok := j.reserve("other"); ok {
		t.Fatal("a place past the gate's bound")
	}
	slots[0].end(false)
	slots[0].end(false) // a second end gives nothing back twice
	if _, ok := j.reserve("a"); !ok {
		t.Fatal("a place given back was not taken again")
	}
	if _, ok := j.reserve("a"); ok {
		t.Fatal("an end counted twice")
	}
}

// BenchmarkHeldJournal is what the journal adds to one held request: its file written when the
// hold begins and removed when it ends (a record of a POST with a 100-byte URL). The directory
// is LOCKHTTP_BENCH_DIR when set (to measure another file system), else a temporary one.
func BenchmarkHeldJournal(b *testing.B) {
	dir := os.Getenv("LOCKHTTP_BENCH_DIR")
	if dir == "" {
		dir = b.TempDir()
	} else {
		dir = filepath.Join(dir, fmt.Sprintf("held-bench-%d", os.Getpid()))
		b.Cleanup(func() { os.RemoveAll(dir) })
	}
	j := newHeldJournal(dir, slog.New(slog.DiscardHandler))
	rec := audit.Record{Time: time.Now(), Event: "request", Container: "agent", Method: "POST",
		URL: "https://api.example.com/" + strings.Repeat("x", 76), Verdict: "ASK", Rule: "ask-writes",
		Reason: "a write to a host the policy asks about", Policy: "sha256:" + strings.Repeat("0", 64), Ticket: "t0123456789ab"}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rec.ID = fmt.Sprintf("r0123abcd-%x", i)
		s, ok := j.reserve("agent")
		if !ok {
			b.Fatal("no place")
		}
		if err := s.write(&rec); err != nil {
			b.Fatal(err)
		}
		s.end(false)
	}
}
