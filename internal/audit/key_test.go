package audit

import (
	"context"
	"crypto/ed25519"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/testkit"
)

func verifyDir(t *testing.T, dir string) *VerifyReport {
	t.Helper()
	pub, err := ReadPublicKey(filepath.Join(dir, KeyFileName+PubSuffix))
	if err != nil {
		t.Fatal(err)
	}
	srcs, err := DirSources(dir)
	if err != nil {
		t.Fatal(err)
	}
	o := VerifyOptions{Keys: []ed25519.PublicKey{pub}}
	if h, err := ReadHead(filepath.Join(dir, HeadName)); err == nil {
		o.Head = h
	}
	rep, err := VerifyDir(srcs, o)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestKeyCreatedOnceNeverAgain: the first start makes the key; a later start whose key is
// missing does not make a new one for the signed log, and refuses (Healthy) until it is back.
func TestKeyCreatedOnceNeverAgain(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, KeyFileName)
	clk := testkit.NewClock(day1.Add(-time1h))
	var logs testkit.Buffer
	w, err := Open(Options{Dir: dir, Now: clk.Now, KeyFile: key, CreateKey: true, Logger: slogTo(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(key); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key %v, %v; want mode 0600", fi, err)
	}
	if !strings.Contains(logs.String(), "created the audit key") || !strings.Contains(logs.String(), "key_id") {
		t.Errorf("log = %q, want the created key's id", logs.String())
	}
	mustWrite(t, w, Record{ID: "a"})
	w.Close()
	saved, _ := os.ReadFile(key)
	os.Remove(key)

	w, err = Open(Options{Dir: dir, Now: clk.Now, KeyFile: key, CreateKey: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(key); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a new key was made for a signed log")
	}
	var pr interface{ PublicReason() string }
	if h := w.Healthy(); h == nil || !strings.Contains(h.Error(), "restore the key") || !errors.As(h, &pr) {
		t.Errorf("Healthy() = %v, want the missing key and its fix", h)
	}
	if err := w.Write(context.Background(), &Record{ID: "b"}); err == nil {
		t.Error("a record was written without the key")
	}
	os.WriteFile(key, saved, 0o600)
	clk.Advance(2 * time1s) // the key is looked for again at most once a second
	mustWrite(t, w, Record{ID: "c"})
	if h := w.Healthy(); h != nil {
		t.Errorf("Healthy() = %v with the key back", h)
	}
	w.Close()
	if rep := verifyDir(t, dir); rep.Worst() != Note || rep.Records != 2 {
		t.Errorf("verify: %d records, %+v", rep.Records, rep.Findings)
	}
}

// TestSealAfterUnsignedTail: records that a gate wrote without signing (it died in the middle of
// a batch) are signed over by an audit-seal record at the next start, and the log verifies.
func TestSealAfterUnsignedTail(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, KeyFileName)
	clk := testkit.NewClock(day1.Add(-time1h))
	w, err := Open(Options{Dir: dir, Now: clk.Now, KeyFile: key, CreateKey: true})
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, w, Record{ID: "a"})
	w.Close()
	// The same directory written without the key: records the gate did not sign.
	w, err = Open(Options{Dir: dir, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, w, Record{ID: "unsigned"})
	w.Close()
	w, err = Open(Options{Dir: dir, Now: clk.Now, KeyFile: key})
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, w, Record{ID: "b"})
	w.Close()
	lines := readLines(t, filepath.Join(dir, "2026-11-30.jsonl"))
	if len(lines) != 4 || !strings.Contains(lines[2], `"event":"audit-seal"`) {
		t.Fatalf("lines %q, want a, unsigned, the seal, b", lines)
	}
	if rep := verifyDir(t, dir); rep.Worst() != Note || rep.Records != 4 {
		t.Errorf("verify: %d records, %+v", rep.Records, rep.Findings)
	}
}

const (
	time1s = 1_000_000_000
	time1h = 3600 * time1s
)

func slogTo(b *testkit.Buffer) *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }
