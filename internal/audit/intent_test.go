package audit

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestIntentCompletedOrCut: an intent carries its request's decision and no outcome; a record of
// the same id completes it (a summary's ids too); verify-log's report names the intents nothing
// completed, counts them, and stays clean.
func TestIntentCompletedOrCut(t *testing.T) {
	dir := t.TempDir()
	w, err := Open(Options{Dir: dir, KeyFile: filepath.Join(dir, KeyFileName), CreateKey: true, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	at := time.Now()
	req := Record{Time: at, Event: "tunnel-request", ID: "r-1", Container: "c1", Method: "GET", URL: "https://a.test/x",
		Verdict: "FREE", Rule: "reads", Reason: "free by rule reads", Policy: "v1", Stream: 3}
	in := Intent(&req, at.Add(2*time.Millisecond))
	if in.Event != EventIntent || in.ID != "r-1" || in.URL != req.URL || in.Rule != "reads" || in.Stream != 3 || in.Status != 0 ||
		in.Duration != 2*time.Millisecond || !strings.Contains(in.Detail, "tunnel-request record of this id") {
		t.Fatalf("intent: %+v", in)
	}
	cut := Record{Time: at, Event: "request", ID: "r-2", Method: "POST", URL: "http://b.test/y", Verdict: "FREE"}
	sum := Record{Time: at, Event: "request", ID: "r-3", Method: "GET", URL: "http://c.test/", Verdict: "FREE"}
	cutIntent, sumIntent := Intent(&cut, at), Intent(&sum, at)
	req.Status = 200
	for _, r := range []*Record{&in, &cutIntent, &sumIntent, &req,
		{Time: at, Event: "summary", Verdict: "DENY", Code: "E_FLOOR", Count: 1, IDs: []string{"r-3"}}} {
		if err := w.Append(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	rep := verifyDir(t, dir)
	if rep.Worst() != Note || rep.Intents != 3 || rep.Unfinished != 1 {
		t.Fatalf("report: %+v", rep)
	}
	var named []string
	for _, f := range rep.Findings {
		if strings.Contains(f.Text, "no record of its outcome follows") {
			named = append(named, f.String())
		}
	}
	if len(named) != 1 || !strings.Contains(named[0], ":2: request r-2 (http://b.test/y) was sent on to its origin") {
		t.Fatalf("notes of cut requests: %q", named)
	}
}

// TestOutcomesBounded: a log of more open intents than Outcomes keeps counts the rest.
func TestOutcomesBounded(t *testing.T) {
	var o Outcomes
	for i := range maxOpenIntents + 5 {
		o.See(EventIntent, "r-"+strings.Repeat("x", i%7)+string(rune('a'+i%26))+itoa(i), nil, "f", i+1, "", "")
	}
	if len(o.Open()) != maxOpenIntents || o.Dropped != 5 || o.Intents != maxOpenIntents+5 {
		t.Fatalf("open %d, dropped %d, intents %d", len(o.Open()), o.Dropped, o.Intents)
	}
}

func itoa(i int) string { return time.Duration(i).String() }

// BenchmarkOutcomesFull: what a reader of the audit (verify-log, propose) holds at its bound of
// open intents, each with a 100-byte URL (B/op).
//
//	go test -run '^$' -bench OutcomesFull -benchmem ./internal/audit
func BenchmarkOutcomesFull(b *testing.B) {
	ids := make([]string, maxOpenIntents)
	url := "https://api.example.com/" + strings.Repeat("p", 76)
	for i := range ids {
		ids[i] = "r1a2b3c4-" + itoa(i)
	}
	b.ReportAllocs()
	for b.Loop() {
		var o Outcomes
		for i, id := range ids {
			o.See(EventIntent, id, nil, "2026-11-30.jsonl", i+1, "2026-11-30T14:03:07.123456789Z", url)
		}
	}
}
