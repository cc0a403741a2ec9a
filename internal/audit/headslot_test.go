package audit

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSpoiledHeadSlotAtOpen: a head file whose slot holds no whole signed head (a torn write,
// which only a crash of the machine leaves) is reported when the writer opens, before its own
// heads overwrite the slot: in its log and in Usage, which the gate's status and the doctor show.
// A whole head file, of one slot or two, is not.
func TestSpoiledHeadSlotAtOpen(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, KeyFileName)
	open := func() (*Writer, string) {
		t.Helper()
		var logs bytes.Buffer
		w, err := Open(Options{Dir: dir, KeyFile: key, CreateKey: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		return w, logs.String()
	}
	write := func(w *Writer, n int) {
		t.Helper()
		for range n {
			if err := w.Write(context.Background(), &Record{Event: "request", ID: "r", Verdict: "FREE", Status: 200}); err != nil {
				t.Fatal(err)
			}
		}
	}
	headPath := filepath.Join(dir, HeadName)
	pubOf := func() ed25519.PublicKey {
		k, err := readPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return k.Public().(ed25519.PublicKey)
	}

	w, _ := open()
	write(w, 1)
	w.Close()
	if fi, _ := os.Stat(headPath); fi.Size() != headSlot {
		t.Fatalf("after one head the file is %d bytes", fi.Size())
	}
	if s, err := SpoiledSlots(headPath, pubOf()); err != nil || len(s) != 0 {
		t.Fatalf("a head file of one whole slot: spoiled %v %v", s, err)
	}
	w, logs := open()
	if u := w.Usage(); u.HeadWarning != "" || strings.Contains(logs, "spoiled") {
		t.Fatalf("a whole head reported spoiled: %q %s", u.HeadWarning, logs)
	}
	write(w, 3)
	w.Close()

	// Tear the slot written last: its first bytes, then zeros.
	b, _ := os.ReadFile(headPath)
	h, err := ReadHead(headPath, pubOf())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if strings.Contains(string(b[i*headSlot:(i+1)*headSlot]), h.Sig) {
			clear(b[i*headSlot+80 : (i+1)*headSlot])
		}
	}
	os.WriteFile(headPath, b, 0o600)
	if s, _ := SpoiledSlots(headPath, pubOf()); len(s) != 1 {
		t.Fatalf("spoiled slots %v, want one", s)
	}
	w, logs = open()
	defer w.Close()
	u := w.Usage()
	if !strings.Contains(u.HeadWarning, "holds no whole signed head: only a crash of the machine while the gate wrote it leaves that") ||
		!strings.Contains(u.HeadWarning, "the head read is the other slot's, record") || !strings.Contains(logs, "spoiled") {
		t.Fatalf("usage %q, log %s", u.HeadWarning, logs)
	}
	// A slot signed by another key is not a head this log can use.
	_, other, _ := ed25519.GenerateKey(nil)
	forged := Head{Seq: 99, Hash: "00", File: "x.jsonl"}
	forged.sign(other, KeyID(other.Public().(ed25519.PublicKey)))
	os.WriteFile(headPath, append(forged.appendSlot(nil), b[headSlot:]...), 0o600)
	if s, _ := SpoiledSlots(headPath, pubOf()); len(s) == 0 || s[0] != 1 {
		t.Fatalf("a slot of a foreign key: spoiled %v", s)
	}
}
