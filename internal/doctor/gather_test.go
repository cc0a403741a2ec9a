package doctor

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

func TestFindAudit(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "2026-11-28.jsonl"), []byte(`{"id":"old-1"}`+"\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "2026-11-29.jsonl"), []byte(`{"id":"r-1"}`+"\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "2026-11-30.jsonl"), []byte(`{"id":"r-2"}`+"\n"+`{"id":"r-20"}`+"\n"), 0o600)
	ctx := context.Background()
	if a := FindAudit(ctx, dir, "r-2"); !a.Found || a.Files != 3 {
		t.Errorf("r-2: %+v", a)
	}
	if a := FindAudit(ctx, dir, "r-1"); !a.Found {
		t.Errorf("r-1 (yesterday's file): %+v", a)
	}
	if testing.Short() {
		return
	}
	// Not there: the doctor waits its 5 s, then says so. "r-" is a prefix of every id.
	if a := FindAudit(ctx, dir, "r-"); a.Found || a.Err != "" {
		t.Errorf("r-: %+v", a)
	}
	if a := FindAudit(ctx, filepath.Join(dir, "none"), "r-1"); a.Err == "" {
		t.Errorf("no directory: %+v", a)
	}
}
