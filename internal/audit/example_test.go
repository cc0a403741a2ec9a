package audit_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
)

func ExampleOpen() {
	dir, err := os.MkdirTemp("", "audit")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	w, err := audit.Open(audit.Options{Dir: dir})
	if err != nil {
		panic(err)
	}
	err = w.Write(context.Background(), &audit.Record{
		Time:      time.Date(2026, 11, 30, 14, 3, 7, 123456789, time.UTC),
		Event:     "request",
		ID:        "r-1",
		Container: "c1",
		Agent:     "claude",
		Method:    "GET",
		URL:       "https://example.com/",
		Verdict:   "FREE",
		Rule:      "reads",
		Status:    200,
		BytesOut:  512,
		Duration:  1250 * time.Microsecond,
	})
	if err != nil {
		panic(err)
	}
	if err := w.Close(); err != nil {
		panic(err)
	}
	path := filepath.Join(dir, "2026-11-30.jsonl")
	data, err := os.ReadFile(path)
	if err != nil {
		panic(err)
	}
	fmt.Print(string(data))
	fmt.Println(audit.Verify(path))
	// Output:
	// {"time":"2026-11-30T14:03:07.123456789Z","event":"request","id":"r-1","container":"c1","agent":"claude","method":"GET","url":"https://example.com/","verdict":"FREE","code":"","rule":"reads","status":200,"bytes_out":512,"duration_ms":1.250,"seq":1,"prev":"865b3a57bcbe6e74069abba52cb0cf31"}
	// 1 <nil>
}
