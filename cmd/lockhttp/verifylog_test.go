package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

var (
	day1 = "2026-11-29.jsonl"
	day2 = "2026-11-30.jsonl"
	day3 = "2026-12-01.jsonl"
)

// addDay reopens the log (the gate restarting) on the next day and writes records 13 and 14.
func addDay(t *testing.T, dir string) {
	t.Helper()
	clk := testkit.NewClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	w, err := audit.Open(audit.Options{Dir: dir, Now: clk.Now, KeyFile: filepath.Join(dir, audit.KeyFileName)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := w.Write(context.Background(), &audit.Record{Event: "request", ID: fmt.Sprintf("r-3-%d", i), Verdict: "FREE", Status: 200}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// signedLog writes a clean signed log over two days into a new directory: day 1 has records
// 1-6 (one per batch), day 2 records 7-12. It returns the directory and a checkpoint
// taken (lockhttp audit checkpoint) at the end of day 1, kept outside it.
func signedLog(t *testing.T) (string, string) {
	t.Helper()
	dir := t.TempDir()
	cp := filepath.Join(t.TempDir(), "checkpoint-6.json")
	clk := testkit.NewClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	w, err := audit.Open(audit.Options{Dir: dir, Now: clk.Now, KeyFile: filepath.Join(dir, audit.KeyFileName), CreateKey: true})
	if err != nil {
		t.Fatal(err)
	}
	for d := range 2 {
		for b := range 6 {
			// One record per batch, 0.6 s apart: the gate signs a batch's last record once a
			// second, so records 1, 3 and 5 of each day are signed and the head covers the rest.
			if err := w.Write(context.Background(), &audit.Record{Event: "request", ID: fmt.Sprintf("r-%d-%d-%d", d, b/2, b%2), Container: "c1", Method: "GET", URL: "https://example.com/", Verdict: "FREE", Status: 200}); err != nil {
				t.Fatal(err)
			}
			clk.Advance(600 * time.Millisecond)
		}
		if d == 0 {
			var o, e bytes.Buffer
			if code := run([]string{"audit", "checkpoint", "-o", cp, dir}, nil, &o, &e); code != 0 || !strings.Contains(o.String(), "checkpoint of record 6") {
				t.Fatalf("audit checkpoint: %d %s%s", code, o.String(), e.String())
			}
		}
		clk.Advance(24 * time.Hour)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, cp
}

func lines(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.SplitAfter(strings.TrimSuffix(string(data), "\n")+"\n", "\n")[:strings.Count(string(data), "\n")]
}

func writeLines(t *testing.T, path string, ls []string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(strings.Join(ls, "")), 0o600); err != nil {
		t.Fatal(err)
	}
}

// rechain recomputes "prev" (and drops nothing else) through the file, as someone who can
// write the file but not sign would do to hide an edit.
func rechain(t *testing.T, path string) {
	t.Helper()
	ls := lines(t, path)
	prev := hashOf(filepath.Base(path))
	for i, l := range ls {
		j := strings.LastIndex(l, `"prev":"`)
		l = l[:j+8] + prev + l[j+8+32:]
		ls[i] = l
		prev = hashOf(strings.TrimSuffix(l, "\n"))
	}
	writeLines(t, path, ls)
}

func hashOf(s string) string {
	// chainHash: the hex of the first 16 bytes of SHA-256.
	return sha256hex(s)[:32]
}

func verifyLog(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(append([]string{"verify-log"}, args...), nil, &out, &errb)
	return code, out.String() + errb.String()
}

// TestVerifyLogTamperCases: each tamper case of issue 18 is its own fixture (a clean signed log,
// changed one way), with the exit code and the words verify-log must report it with, by file
// and line.
func TestVerifyLogTamperCases(t *testing.T) {
	cases := []struct {
		name   string
		tamper func(t *testing.T, dir, cp string) []string // returns extra verify-log flags
		code   int
		want   []string
	}{
		{"clean", func(t *testing.T, dir, cp string) []string { return nil }, 0, []string{"CLEAN: 12 records (1 to 12) in 2 files", "the signed head (record 12"}},
		{"clean after a restart on the next day", func(t *testing.T, dir, cp string) []string { addDay(t, dir); return nil }, 0, []string{"CLEAN: 14 records (1 to 14) in 3 files"}},
		{"edited record", func(t *testing.T, dir, cp string) []string {
			p := filepath.Join(dir, day1)
			ls := lines(t, p)
			ls[2] = strings.Replace(ls[2], `"verdict":"FREE"`, `"verdict":"DENY"`, 1)
			writeLines(t, p, ls)
			return nil
		}, 1, []string{day1 + ":3: the record was edited"}},
		{"edited and the chain rewritten (forged)", func(t *testing.T, dir, cp string) []string {
			p := filepath.Join(dir, day1)
			ls := lines(t, p)
			ls[2] = strings.Replace(ls[2], `"url":"https://example.com/"`, `"url":"https://example.org/"`, 1)
			writeLines(t, p, ls)
			rechain(t, p)
			return nil
		}, 1, []string{day1 + ":3: the signature does not verify: a record in lines 2 to 3 was edited"}},
		{"removed record", func(t *testing.T, dir, cp string) []string {
			p := filepath.Join(dir, day1)
			ls := lines(t, p)
			writeLines(t, p, append(ls[:2:2], ls[3:]...))
			return nil
		}, 1, []string{day1 + ":3: records 3 to 3 were removed before this line"}},
		{"reordered records", func(t *testing.T, dir, cp string) []string {
			p := filepath.Join(dir, day1)
			ls := lines(t, p)
			ls[2], ls[3] = ls[3], ls[2]
			writeLines(t, p, ls)
			return nil
		}, 1, []string{day1 + ":4: record 3 comes after record 4 (line 3): lines were reordered"}},
		{"inserted record", func(t *testing.T, dir, cp string) []string {
			p := filepath.Join(dir, day1)
			ls := lines(t, p)
			fake := strings.Replace(ls[1], `"id":"r-0-0-`, `"id":"r-forged-`, 1)
			writeLines(t, p, append(ls[:2:2], append([]string{fake}, ls[2:]...)...))
			return nil
		}, 1, []string{day1 + ":3: record 2 appears twice (lines 2 and 3)"}},
		{"forged record appended", func(t *testing.T, dir, cp string) []string {
			p := filepath.Join(dir, day2)
			ls := lines(t, p)
			last := strings.TrimSuffix(ls[len(ls)-1], "\n")
			fake := fmt.Sprintf(`{"time":"2026-11-30T12:00:01.000000000Z","event":"request","id":"r-forged","verdict":"FREE","code":"","status":200,"seq":13,"prev":"%s"}`+"\n", hashOf(last))
			writeLines(t, p, append(ls, fake))
			return nil
		}, 1, []string{day2 + ":7: lines 7 to 7 are not covered by a signature"}},
		{"foreign key", func(t *testing.T, dir, cp string) []string {
			// Someone who cannot read the key writes a whole new log with a key of their own.
			other, _ := signedLog(t)
			for _, n := range []string{day1, day2, audit.HeadName} {
				data, _ := os.ReadFile(filepath.Join(other, n))
				os.WriteFile(filepath.Join(dir, n), data, 0o600)
			}
			return []string{"--pub", filepath.Join(dir, audit.KeyFileName+audit.PubSuffix)}
		}, 1, []string{"not a trusted key", "a foreign key signed lines"}},
		{"truncated tail, head present", func(t *testing.T, dir, cp string) []string {
			p := filepath.Join(dir, day2)
			ls := lines(t, p)
			writeLines(t, p, ls[:4])
			return nil
		}, 1, []string{"the signed head names record 12 in " + day2, "the log ends at record 10 (" + day2 + ":4): lines were cut off the end"}},
		{"spoiled newest head slot and the last batch cut", func(t *testing.T, dir, cp string) []string {
			// A torn write of the newest slot (its first bytes new, the rest zeros), which
			// only a crash of the machine leaves, and its record cut off the end: the older
			// slot names the new end, yet the log cannot be vouched for.
			spoilHeadSlot(t, dir, 12)
			p := filepath.Join(dir, day2)
			writeLines(t, p, lines(t, p)[:5])
			return nil
		}, 2, []string{"head.json: slot ", " holds no whole signed head: only a crash of the machine while the gate wrote it leaves that (a killed gate cannot), or someone spoiled it; the head read is the other slot's, record 11", "NOT VERIFIED"}},
		{"spoiled newest head slot", func(t *testing.T, dir, cp string) []string {
			// Record 12 was covered by that slot alone.
			spoilHeadSlot(t, dir, 12)
			return nil
		}, 1, []string{"holds no whole signed head", day2 + ":6: lines 6 to 6 are not covered by a signature, nor by the signed head"}},
		{"missing head", func(t *testing.T, dir, cp string) []string {
			os.Remove(filepath.Join(dir, audit.HeadName))
			return nil
		}, 2, []string{"no signed head", "NOT VERIFIED"}},
		{"missing head and a truncated tail", func(t *testing.T, dir, cp string) []string {
			os.Remove(filepath.Join(dir, audit.HeadName))
			p := filepath.Join(dir, day2)
			writeLines(t, p, lines(t, p)[:4])
			return nil
		}, 2, []string{"no signed head", "cannot be found", "NOT VERIFIED"}},
		{"missing day file", func(t *testing.T, dir, cp string) []string {
			addDay(t, dir)
			os.Remove(filepath.Join(dir, day2))
			return nil
		}, 1, []string{day3 + ":1: records 7 to 12 are missing (after " + day1 + ":6): a day file was removed or emptied"}},
		{"emptied day file", func(t *testing.T, dir, cp string) []string {
			addDay(t, dir)
			os.Truncate(filepath.Join(dir, day2), 0)
			return nil
		}, 1, []string{day2 + ": empty", day3 + ":1: records 7 to 12 are missing"}},
		{"oldest day file removed, checkpoint older", func(t *testing.T, dir, cp string) []string {
			os.Remove(filepath.Join(dir, day1))
			return []string{"--trusted-head", cp}
		}, 1, []string{"the log here starts at record 7", "the checkpoint names record 6 in " + day1 + ", which is not in the log"}},
		{"checkpoint older than the log", func(t *testing.T, dir, cp string) []string {
			return []string{"--trusted-head", cp}
		}, 0, []string{"the checkpoint (record 6", "matches; the log has 6 records after it", "CLEAN"}},
		{"checkpoint not matching", func(t *testing.T, dir, cp string) []string {
			p := filepath.Join(dir, day1)
			ls := lines(t, p)
			ls[5] = strings.Replace(ls[5], `"id":"r-0-2-`, `"id":"r-X-2-`, 1)
			writeLines(t, p, ls)
			rechain(t, p)
			return []string{"--trusted-head", cp}
		}, 1, []string{"the checkpoint does not match record 6"}},
		{"checkpoint from another log", func(t *testing.T, dir, cp string) []string {
			_, other := signedLog(t)
			return []string{"--trusted-head", other}
		}, 1, []string{"the checkpoint is signed by key"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir, cp := signedLog(t)
			extra := tc.tamper(t, dir, cp)
			code, out := verifyLog(t, append(extra, dir)...)
			if code != tc.code {
				t.Errorf("exit %d, want %d:\n%s", code, tc.code, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("no %q in:\n%s", w, out)
				}
			}
		})
	}
}

// spoilHeadSlot tears the slot of DIR/head.json that names record seq as a write cut short by
// a crash would: its first bytes stay, the rest are zeros.
func spoilHeadSlot(t *testing.T, dir string, seq int) {
	t.Helper()
	p := filepath.Join(dir, audit.HeadName)
	b, err := os.ReadFile(p)
	if err != nil || len(b) != 1024 {
		t.Fatalf("head.json: %d bytes, %v", len(b), err)
	}
	for i := 0; i < 2; i++ {
		slot := b[i*512 : (i+1)*512]
		if strings.Contains(string(slot), fmt.Sprintf(`"seq":%d,`, seq)) {
			clear(slot[100:])
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no slot of head.json names record %d:\n%s", seq, b)
}

func sha256hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TestVerifyLogUsage: a file instead of a directory, or no key, is a usage error (exit 2).
func TestVerifyLogUsage(t *testing.T) {
	dir, _ := signedLog(t)
	if code, out := verifyLog(t, filepath.Join(dir, day1)); code != 2 || !strings.Contains(out, "not a directory") {
		t.Errorf("a file: exit %d\n%s", code, out)
	}
	os.Remove(filepath.Join(dir, audit.KeyFileName+audit.PubSuffix))
	if code, out := verifyLog(t, dir); code != 2 || !strings.Contains(out, "pass --pub") {
		t.Errorf("no key: exit %d\n%s", code, out)
	}
	if code, _ := verifyLog(t); code != 2 {
		t.Errorf("no argument: exit %d", code)
	}
}

// TestAuditKeygenNeverReplaces: keygen makes a key once; a second run refuses.
func TestAuditKeygenNeverReplaces(t *testing.T) {
	key := filepath.Join(t.TempDir(), "audit.key")
	var o, e bytes.Buffer
	if code := run([]string{"audit", "keygen", "--key", key}, nil, &o, &e); code != 0 || !strings.Contains(o.String(), "BEGIN PUBLIC KEY") {
		t.Fatalf("keygen: %d %s%s", code, o.String(), e.String())
	}
	if fi, err := os.Stat(key); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key mode %v, %v; want 0600", fi.Mode(), err)
	}
	before, _ := os.ReadFile(key)
	o.Reset()
	e.Reset()
	if code := run([]string{"audit", "keygen", "--key", key}, nil, &o, &e); code != 1 || !strings.Contains(e.String(), "never replaced") {
		t.Errorf("second keygen: %d %s%s", code, o.String(), e.String())
	}
	if after, _ := os.ReadFile(key); !bytes.Equal(before, after) {
		t.Error("the key changed")
	}
}

var _ = json.Marshal
