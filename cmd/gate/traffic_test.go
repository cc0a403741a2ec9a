package main

import (
	"context"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/traffic"
)

// TestFeedShowsEachRequestOnce: a forwarded request writes its intent and then its record; the
// live feed gets the record alone (its outcome), and refusals as before.
func TestFeedShowsEachRequestOnce(t *testing.T) {
	w, err := audit.Open(audit.Options{Dir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	q := traffic.NewQueue()
	f := feedAuditor{Writer: w, q: q}
	ctx := context.Background()
	req := audit.Record{Event: "request", ID: "r-1", Method: "GET", URL: "http://example.com/", Verdict: "FREE", Rule: "reads"}
	intent := audit.Intent(&req, time.Now())
	if err := f.Append(ctx, &intent); err != nil {
		t.Fatal(err)
	}
	req.Status = 200
	if err := f.Append(ctx, &req); err != nil {
		t.Fatal(err)
	}
	refused := audit.Record{Event: "request", ID: "r-2", Method: "GET", URL: "http://evil.test/", Verdict: "DENY", Code: "E_DENY_HOST", Status: 403}
	if err := f.Write(ctx, &refused); err != nil {
		t.Fatal(err)
	}

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := make(chan traffic.Batch, 4)
	go q.Run(rctx, func(_ context.Context, b traffic.Batch) error { got <- b; return nil })
	var b traffic.Batch
	select {
	case b = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("no batch sent within 10 s")
	}
	if len(b.Entries) != 2 {
		t.Fatalf("%d entries fed, want 2 (the request's record, the refusal's): %+v", len(b.Entries), b.Entries)
	}
	if e := b.Entries[0]; e.ID != "r-1" || e.Event != "request" || e.Status != 200 {
		t.Errorf("first entry = %+v, want the record of r-1 with its status 200", e)
	}
	if e := b.Entries[1]; e.ID != "r-2" || e.Code != "E_DENY_HOST" {
		t.Errorf("second entry = %+v, want the refusal of r-2", e)
	}
}
