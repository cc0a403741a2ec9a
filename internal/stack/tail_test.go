package stack

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/testkit"
)

// writes records each Write call apart.
type writes struct {
	mu    sync.Mutex
	calls []string
}

func (w *writes) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls = append(w.calls, string(p))
	return len(p), nil
}

func (w *writes) get() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.calls...)
}

// TestTailAuditOneWriteALook: lox run --follow prints a line a decision: the records the gate
// wrote since the last look go out in one write, and a request's intent is shown by its
// outcome's line alone.
func TestTailAuditOneWriteALook(t *testing.T) {
	dir := t.TempDir()
	now := time.Now().UTC()
	lines := `{"time":"` + now.Format(time.RFC3339Nano) + `","event":"intent","id":"r-1","method":"GET","url":"http://a.test/","verdict":"FREE","rule":"reads"}
{"time":"` + now.Format(time.RFC3339Nano) + `","event":"request","id":"r-1","method":"GET","url":"http://a.test/","verdict":"FREE","rule":"reads","status":200}
{"time":"` + now.Format(time.RFC3339Nano) + `","event":"request","id":"r-2","method":"GET","url":"http://b.test/","verdict":"DENY","code":"E_DENY_HOST","rule":"","status":403}
`
	if err := os.WriteFile(filepath.Join(dir, now.Format("2006-01-02")+".jsonl"), []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	out := &writes{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); tailAudit(ctx, dir, out) }()
	testkit.WaitFor(t, 10*time.Second, "the records printed", func() bool { return len(out.get()) > 0 })
	cancel()
	<-done
	calls := out.get()
	if len(calls) != 1 {
		t.Fatalf("%d writes for one look at the file, want 1: %q", len(calls), calls)
	}
	got := strings.Split(strings.TrimSuffix(calls[0], "\n"), "\n")
	if len(got) != 2 || !strings.Contains(got[0], "FREE  200 GET http://a.test/") || !strings.Contains(got[1], "DENY  403 GET http://b.test/  [E_DENY_HOST ]") {
		t.Fatalf("printed %q; want the record of r-1 (not its intent) and the refusal of r-2", got)
	}
}
