package hub

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestFileStoreCountsAloneDoNotRewrite: requests joining and leaving a pending ticket change its
// counts, which the state file does not keep: the file is rewritten only when what it keeps
// changes (the ticket's Gone once no request is held on it). With 1,000 requests held, their
// retries used to rewrite every ticket every second.
func TestFileStoreCountsAloneDoNotRewrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	s, err := NewFileStore(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	q := StoreAsk{AskRequest: ask("fp1:a"), Gate: "g1", Now: now, Window: time.Minute,
		New: Ticket{ID: "t000000000001", Kind: KindRequest, Container: "dev", Fingerprint: "fp1:a", Status: Pending, Created: now, Expires: now.Add(time.Hour)}}
	if a, err := s.Ask(ctx, q); err != nil || !a.Created {
		t.Fatalf("first ask: %+v %v", a, err)
	}
	s.Flush()
	written := func() bool {
		t.Helper()
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.dirty
	}
	if written() {
		t.Fatal("the store is behind right after a flush")
	}
	before, _ := os.ReadFile(path)
	// Two more requests join the ticket, one leaves: the counts change, the file's content does not.
	for range 2 {
		if a, err := s.Ask(ctx, q); err != nil || a.Created || a.Ticket.Holders < 2 {
			t.Fatalf("joining ask: %+v %v", a, err)
		}
	}
	if _, _, err := s.Leave(ctx, "t000000000001", "g1", false); err != nil {
		t.Fatal(err)
	}
	if written() {
		t.Fatal("a change of the counts alone made the state file behind")
	}
	s.Flush()
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Fatal("the state file was rewritten for a change of the counts alone")
	}
	// The last requests leave: the ticket's Gone changes, and the file follows.
	for range 2 {
		if _, _, err := s.Leave(ctx, "t000000000001", "g1", false); err != nil {
			t.Fatal(err)
		}
	}
	if !written() {
		t.Fatal("the ticket's Gone changed and the state file is not behind")
	}
	s.Flush()
	r, err := NewFileStore(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok, _ := r.Get(ctx, "t000000000001"); !ok || got.Gone != GoneLeft {
		t.Fatalf("reloaded: %+v; want Gone %q", got, GoneLeft)
	}
}
