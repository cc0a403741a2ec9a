package asklog

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/propose"
)

// TestReadsWhatTheWritersWrote: records the real audit writer wrote (two days, the first before
// the period), a line cut short and one too long, the hub's state file and the console's audit
// of the hub's decisions are read back as propose's values.
func TestReadsWhatTheWritersWrote(t *testing.T) {
	dir := t.TempDir()
	day1 := time.Date(2026, 11, 30, 23, 59, 0, 0, time.UTC)
	day2 := day1.Add(2 * time.Minute)
	w, err := audit.Open(audit.Options{Dir: dir, NoSync: true, Now: func() time.Time { return day1 }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, r := range []*audit.Record{
		{Time: day1, Event: "request", ID: "r1", Container: "local", Method: "GET", URL: "http://a.test/x", Verdict: "ASK", Code: "E_PENDING", Rule: "default", Ticket: "t1"},
		{Time: day2, Event: "tunnel-request", ID: "r2", Container: "local", Method: "GET", URL: "https://a.test/x", Verdict: "ASK", Rule: "default", Ticket: "t1", Approver: "cli:root"},
		{Time: day2, Event: "request", ID: "r3", Container: "local", Method: "GET", URL: "http://b.test/", Verdict: "FREE", Rule: "trusted"},
	} {
		if err := w.Write(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f, _ := os.OpenFile(filepath.Join(dir, "2026-12-01.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"time":"2026-12-01T00:01:00Z","event":"req` + "\n" + `{"url":"` + strings.Repeat("x", maxLine) + `"}` + "\n")
	f.Close()
	var got []propose.Observation
	st, err := Audit(dir, time.Time{}, func(o propose.Observation) { got = append(got, o) })
	if err != nil {
		t.Fatal(err)
	}
	if st.Files != 2 || st.Records != 3 || st.Bad != 2 || len(got) != 3 {
		t.Fatalf("stats %+v, %d records", st, len(got))
	}
	if o := got[1]; o.Event != "tunnel-request" || o.Ticket != "t1" || o.Approver != "cli:root" || o.Code != "" || o.URL != "https://a.test/x" || !o.Time.Equal(day2) {
		t.Errorf("record 2: %+v", o)
	}
	got = nil
	if st, _ := Audit(dir, day2, func(o propose.Observation) { got = append(got, o) }); st.Files != 1 || len(got) != 2 {
		t.Errorf("since the second day: %+v, %d records", st, len(got))
	}

	// The hub's decisions: its state file, and the console's audit of them.
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	consoleAudit := t.TempDir()
	aw, err := audit.Open(audit.Options{Dir: consoleAudit, NoSync: true, Now: func() time.Time { return day2 }})
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "hub.json")
	h, err := hub.New(hub.Config{StatePath: state, Key: key, Audit: aw, Now: func() time.Time { return day2 }})
	if err != nil {
		t.Fatal(err)
	}
	for i, u := range []string{"https://c.test/1", "https://c.test/2", "c.test:443"} {
		kind := hub.KindRequest
		if i == 2 {
			kind = hub.KindConnect
		}
		ans, err := h.Ask(hub.AskRequest{Kind: kind, Container: "local", Method: map[bool]string{true: "CONNECT", false: "GET"}[i == 2], URL: u, Fingerprint: "fp" + u})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.Decide(ans.Ticket.ID, ans.Ticket.Fingerprint, i != 1, "terminal:alice", ""); err != nil {
			t.Fatal(err)
		}
	}
	h.Flush()
	aw.Close()
	ds, err := HubState(state)
	if err != nil {
		t.Fatal(err)
	}
	var cds []propose.Decision
	if _, err := ConsoleDecisions(consoleAudit, time.Time{}, func(d propose.Decision) { cds = append(cds, d) }); err != nil {
		t.Fatal(err)
	}
	for name, list := range map[string][]propose.Decision{"hub state": ds, "console audit": cds} {
		if len(list) != 3 {
			t.Fatalf("%s: %+v", name, list)
		}
		by := map[string]propose.Decision{}
		for _, d := range list {
			by[d.URL] = d
		}
		if d := by["https://c.test/1"]; !d.Approved || d.By != "terminal:alice" || d.Container != "local" || d.Method != "GET" || d.Kind != hub.KindRequest {
			t.Errorf("%s: %+v", name, d)
		}
		if d := by["https://c.test/2"]; d.Approved {
			t.Errorf("%s: a denial read as an approval: %+v", name, d)
		}
		if d := by["c.test:443"]; d.Kind != hub.KindConnect {
			t.Errorf("%s: %+v", name, d)
		}
	}
}

// TestIntentsPassedOnlyWhenCut: an intent record its outcome follows is not passed on (the
// request is read once, from its outcome); one nothing follows (the gate was killed while the
// request was out) is passed on as the request's record, and counted.
func TestIntentsPassedOnlyWhenCut(t *testing.T) {
	dir := t.TempDir()
	w, err := audit.Open(audit.Options{Dir: dir, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	done := audit.Record{Time: time.Now(), Event: "request", ID: "r1", Container: "local", Method: "GET", URL: "http://a.test/x", Verdict: "ASK", Rule: "default", Ticket: "t1", Approver: "cli:root", Status: 200}
	cut := audit.Record{Time: time.Now(), Event: "tunnel-request", ID: "r2", Container: "local", Method: "POST", URL: "https://a.test/y", Verdict: "ASK", Rule: "default", Ticket: "t2", Approver: "cli:root"}
	for _, r := range []audit.Record{audit.Intent(&done, time.Now()), audit.Intent(&cut, time.Now()), done} {
		if err := w.Write(ctx, &r); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	var got []propose.Observation
	st, err := Audit(dir, time.Time{}, func(o propose.Observation) { got = append(got, o) })
	if err != nil {
		t.Fatal(err)
	}
	if st.Records != 2 || st.Unfinished != 1 || len(got) != 2 {
		t.Fatalf("stats %+v, %d observations, want 2 records, 1 unfinished", st, len(got))
	}
	if o := got[0]; o.ID != "r1" || o.Event != "request" {
		t.Errorf("first: %+v, want r1's outcome", o)
	}
	if o := got[1]; o.ID != "r2" || o.Event != "request" || o.Method != "POST" || o.Ticket != "t2" || o.Approver != "cli:root" {
		t.Errorf("the cut request: %+v", o)
	}
}

// TestAuditSourcesAsDirectory: a gate's day files given as sources (a database copy read back)
// are read as the directory they came from: the same observations and counts, the days before
// the period skipped, and a source that is not a day file left alone.
func TestAuditSourcesAsDirectory(t *testing.T) {
	dir := t.TempDir()
	day1 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	now := day1
	w, err := audit.Open(audit.Options{Dir: dir, NoSync: true, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range []string{"a", "b", "c"} {
		now = day1.Add(time.Duration(i) * 24 * time.Hour)
		if err := w.Write(context.Background(), &audit.Record{Event: "request", ID: "r-" + c, Container: c, Method: "GET", URL: "https://h/" + c, Verdict: "ASK"}); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	srcs, err := audit.DirSources(dir)
	if err != nil || len(srcs) != 3 {
		t.Fatalf("%d sources, %v", len(srcs), err)
	}
	srcs = append(srcs, audit.Source{Name: "notes.txt", Open: func() (io.ReadCloser, error) { return nil, errors.New("not read") }})
	for _, since := range []time.Time{{}, day1.Add(24 * time.Hour)} {
		var fromDir, fromSrcs []string
		stDir, err1 := Audit(dir, since, func(o propose.Observation) { fromDir = append(fromDir, o.ID+" "+o.Container) })
		stSrcs, err2 := AuditSources(srcs, since, func(o propose.Observation) { fromSrcs = append(fromSrcs, o.ID+" "+o.Container) })
		if err1 != nil || err2 != nil || stDir != stSrcs || strings.Join(fromDir, ",") != strings.Join(fromSrcs, ",") {
			t.Errorf("since %v: the directory %+v %q %v; the sources %+v %q %v", since, stDir, fromDir, err1, stSrcs, fromSrcs, err2)
		}
		want := "r-a a,r-b b,r-c c"
		if !since.IsZero() {
			want = "r-b b,r-c c"
		}
		if strings.Join(fromSrcs, ",") != want {
			t.Errorf("since %v: %q; want %s", since, fromSrcs, want)
		}
	}
}
