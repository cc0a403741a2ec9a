package audit

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/testkit"
)

// writeFile writes n records through a Writer and returns the file's path and lines.
func writeFile(t *testing.T, n int) (string, []string) {
	t.Helper()
	dir := t.TempDir()
	w, err := Open(Options{Dir: dir, Now: testkit.NewClock(day1).Now, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		r := Record{ID: fmt.Sprintf("r%d", i+1), Event: "request", Verdict: "FREE", Status: 200}
		if err := w.Write(context.Background(), &r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "2026-11-30.jsonl")
	return path, readLines(t, path)
}

func TestVerify(t *testing.T) {
	tests := []struct {
		name     string
		tamper   func(lines []string) []string
		file     string // base name to verify under; "" keeps 2026-11-30.jsonl
		raw      string // when set, the file's whole content instead of lines
		wantGood int
		wantErr  string // substring of the error, with the line number; "" for none
	}{
		{
			name:     "untouched",
			tamper:   func(l []string) []string { return l },
			wantGood: 5,
		},
		{
			name: "edited line",
			tamper: func(l []string) []string {
				l[1] = strings.Replace(l[1], `"status":200`, `"status":201`, 1)
				return l
			},
			wantGood: 4, // line 2 itself still chains; line 3 no longer does
			wantErr:  ":3: \"prev\" does not match line 2",
		},
		{
			name:     "edited prev",
			tamper:   func(l []string) []string { l[2] = strings.Replace(l[2], `"prev":"`, `"prev":"0`, 1); return l },
			wantGood: 3,
			wantErr:  ":3: \"prev\" does not match line 2",
		},
		{
			name:     "deleted line",
			tamper:   func(l []string) []string { return slices.Delete(l, 1, 2) },
			wantGood: 3,
			wantErr:  ":2: \"prev\" does not match line 1",
		},
		{
			name:     "deleted first line",
			tamper:   func(l []string) []string { return l[1:] },
			wantGood: 3,
			wantErr:  ":1: \"prev\" does not match the file name",
		},
		{
			name:     "inserted copy",
			tamper:   func(l []string) []string { return slices.Insert(l, 3, l[1]) },
			wantGood: 4,
			wantErr:  ":4: \"prev\" does not match line 3",
		},
		{
			name:     "inserted line without prev",
			tamper:   func(l []string) []string { return slices.Insert(l, 2, `{"time":"2026-11-30T23:59:59.000000000Z"}`) },
			wantGood: 4,
			wantErr:  ":3: no \"prev\" string",
		},
		{
			name:     "reordered lines",
			tamper:   func(l []string) []string { l[1], l[2] = l[2], l[1]; return l },
			wantGood: 2,
			wantErr:  ":2: \"prev\" does not match line 1",
		},
		{
			name:     "renamed file",
			tamper:   func(l []string) []string { return l },
			file:     "copy.jsonl",
			wantGood: 4,
			wantErr:  ":1: \"prev\" does not match the file name \"copy.jsonl\"",
		},
		{
			name:     "renamed to another day",
			tamper:   func(l []string) []string { return l },
			file:     "2026-11-29.jsonl",
			wantGood: 0, // the chain holds after line 1, but no time is on that day
			wantErr:  ":1: \"prev\" does not match the file name \"2026-11-29.jsonl\"",
		},
		{
			name:     "garbage after the object",
			tamper:   func(l []string) []string { l[4] += "x"; return l },
			wantGood: 4,
			wantErr:  ":5: not JSON",
		},
		{
			name:     "empty line",
			tamper:   func(l []string) []string { return slices.Insert(l, 5, "") },
			wantGood: 5,
			wantErr:  ":6: not JSON",
		},
		{
			name:     "not an object",
			tamper:   func(l []string) []string { return append(l, "null") },
			wantGood: 5,
			wantErr:  ":6: not a JSON object",
		},
		{
			name: "time off the file's day",
			tamper: func(l []string) []string {
				l[4] = strings.Replace(l[4], `"2026-11-30T`, `"2026-11-29T`, 1)
				return l
			},
			wantGood: 4,
			wantErr:  ":5: \"time\" 2026-11-29T23:59:59.000000000Z is not on the file's day",
		},
		{
			name: "bad time",
			tamper: func(l []string) []string {
				l[4] = strings.Replace(l[4], `"2026-11-30T`, `"2026-11-30 `, 1)
				return l
			},
			wantGood: 4,
			wantErr:  ":5: \"time\" is not RFC 3339",
		},
		{
			name:     "several bad lines counted",
			tamper:   func(l []string) []string { return append(l, "x", "y") },
			wantGood: 5,
			wantErr:  ":6: not JSON: invalid character 'x' looking for beginning of value (2 bad lines in all)",
		},
		{
			// A hash chain without an outside anchor cannot see lines cut off its end.
			name:     "cut at the end is not detected",
			tamper:   func(l []string) []string { return l[:3] },
			wantGood: 3,
		},
		{
			name:     "empty file",
			raw:      "",
			wantGood: 0,
		},
		{
			name:    "torn last line",
			raw:     "{",
			wantErr: ":1: no final newline",
		},
		{
			name:    "overlong line",
			raw:     strings.Repeat(" ", maxLine+1) + "\n",
			wantErr: fmt.Sprintf(":1: line longer than %d bytes", maxLine),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path, lines := writeFile(t, 5)
			content := tt.raw
			if tt.tamper != nil {
				content = strings.Join(tt.tamper(lines), "\n") + "\n"
			}
			if tt.file != "" {
				if err := os.Remove(path); err != nil {
					t.Fatal(err)
				}
				path = filepath.Join(filepath.Dir(path), tt.file)
			}
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			n, err := Verify(path)
			if n != tt.wantGood {
				t.Errorf("Verify good = %d, want %d", n, tt.wantGood)
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Verify error = %v, want none", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), path+tt.wantErr)):
				t.Errorf("Verify error = %v, want %q", err, path+tt.wantErr)
			}
		})
	}
}

func TestVerifyMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "2026-11-30.jsonl")
	if _, err := Verify(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("Verify of a missing file = %v, want an error naming it", err)
	}
}

// FuzzVerify feeds Verify arbitrary files (through verify, to spare the disk) (an attacker may edit them): it must not panic, and
// never count more good records than there are lines.
func FuzzVerify(f *testing.F) {
	dir := f.TempDir()
	w, err := Open(Options{Dir: dir, Now: testkit.NewClock(day1).Now, NoSync: true})
	if err != nil {
		f.Fatal(err)
	}
	for i := range 3 {
		if err := w.Write(context.Background(), &Record{ID: fmt.Sprint(i)}); err != nil {
			f.Fatal(err)
		}
	}
	w.Close()
	good, err := os.ReadFile(filepath.Join(dir, "2026-11-30.jsonl"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte("{}\n\n{"))
	f.Fuzz(func(t *testing.T, data []byte) {
		n, err := verify(bytes.NewReader(data), "/audit/2026-11-30.jsonl")
		lines := strings.Count(string(data), "\n")
		if n > lines {
			t.Fatalf("Verify = %d good records in %d lines", n, lines)
		}
		if err == nil && len(data) > 0 && n != lines {
			t.Fatalf("Verify = %d, nil for %d lines", n, lines)
		}
	})
}
