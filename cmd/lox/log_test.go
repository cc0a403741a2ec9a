package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
)

// auditDir writes records to a fresh audit directory: r1…r20, every fifth refused, every
// seventh asked, and one line that is not a record.
func auditDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	w, err := audit.Open(audit.Options{Dir: dir, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 20; i++ {
		r := &audit.Record{Time: time.Now(), Event: "request", ID: fmt.Sprintf("r%d", i), Container: "dev", Method: "GET",
			URL: fmt.Sprintf("https://example.com/%d", i), Verdict: "FREE", Status: 200}
		switch {
		case i%5 == 0:
			r.Verdict, r.Code, r.Status, r.Reason = "DENY", "E_DENY_HOST", 403, "not in the policy\x1b[2J"
		case i%7 == 0:
			r.Verdict = "ASK"
		}
		if err := w.Write(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	files, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	f, _ := os.OpenFile(files[0], os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("not a record\n")
	f.Close()
	return dir
}

func TestLog(t *testing.T) {
	dir := auditDir(t)
	tests := []struct {
		name    string
		args    []string
		code    int
		want    []string // in this order
		not     []string
		wantErr string
	}{
		{name: "the last ten", args: []string{"--audit", dir}, want: []string{"com/11\n", "com/20 —"}, not: []string{"com/10 —"},
			wantErr: "1 lines of " + dir + " are not audit records"},
		{name: "-n", args: []string{"--audit", dir, "-n", "2"}, want: []string{"com/19\n", "com/20 —"}, not: []string{"com/18\n"}},
		{name: "-n 0", args: []string{"--audit", dir, "-n", "0"}, not: []string{"example.com"}},
		{name: "refused", args: []string{"--audit", dir, "--only", "refused", "-n", "3"},
			want: []string{"E_DENY_HOST", "com/10 —", "com/15 —", "com/20 —"}, not: []string{"com/5 —", "com/19\n"}},
		{name: "refused is escaped", args: []string{"--audit", dir, "--only", "refused", "-n", "1"}, want: []string{`— not in the policy\x1b[2J`},
			not: []string{"\x1b"}},
		{name: "asks", args: []string{"--audit", dir, "--only", "asks"}, want: []string{"ASK", "com/7\n", "com/14\n"}, not: []string{"FREE", "DENY"}},
		{name: "json", args: []string{"--audit", dir, "-n", "1", "--json"}, want: []string{`{"time":"`, `"id":"r20"`, `"prev":"`}},
		{name: "bad filter", args: []string{"--audit", dir, "--only", "denied"}, code: 2, wantErr: "use all, refused or asks"},
		{name: "bad -n", args: []string{"--audit", dir, "-n", "-1"}, code: 2, wantErr: "-n must be 0 or more"},
		{name: "no directory", args: []string{"--state", filepath.Join(dir, "nope")}, code: 1, wantErr: "start the stack with lox run"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run(append([]string{"log"}, tc.args...), &out, &errb); code != tc.code {
				t.Fatalf("exit %d, want %d\n%s%s", code, tc.code, out.String(), errb.String())
			}
			last := -1
			for _, w := range tc.want {
				i := strings.Index(out.String(), w)
				if i < 0 || i < last {
					t.Fatalf("want %q (after the previous ones) in\n%s", w, out.String())
				}
				last = i
			}
			for _, w := range tc.not {
				if strings.Contains(out.String(), w) {
					t.Fatalf("%q should not be in\n%s", w, out.String())
				}
			}
			if !strings.Contains(errb.String(), tc.wantErr) {
				t.Fatalf("stderr %q, want %q", errb.String(), tc.wantErr)
			}
		})
	}
}
