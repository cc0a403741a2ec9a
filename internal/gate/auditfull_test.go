package gate

import (
	"encoding/json"
	"errors"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// TestAuditDiskFull fills the audit's disk (a real tmpfs, so root only; CI runs as root): the
// gate refuses with 503 E_NO_AUDIT whose reason says the disk is full, its status says so, nothing
// reaches the origin, and once space is freed traffic passes again without a restart.
func TestAuditDiskFull(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI runs as root: this test needs a tmpfs")
		}
		t.Skip("mounting a tmpfs needs root (internal/audit's TestWriteFailure covers a full disk through a fake file system)")
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run() })
	aw, err := audit.Open(audit.Options{Dir: filepath.Join(mnt, "audit"), SummarizeAfter: 20})
	if err != nil {
		t.Fatal(err)
	}
	tg := startGateWith(t, nil, func(c *Config) { c.Audit = aw })
	t.Cleanup(func() { aw.Close() })
	c := tg.client()
	get := func(path string) (int, string, string) {
		t.Helper()
		resp, err := c.Get(tg.url(path))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get(HeaderCode), string(body)
	}
	if s, _, _ := get("/before"); s != 200 {
		t.Fatalf("before the disk fills: %d", s)
	}

	filler := filepath.Join(mnt, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	for chunk := make([]byte, 4096); ; {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	f.Close()
	// The first write that fails tells the gate; from then on every request is refused.
	testkit.WaitFor(t, 5*time.Second, "the gate to find the disk full", func() bool {
		get("/secret/probe")
		return tg.g.audit.Healthy() != nil
	})
	reached := tg.origin.count()
	s, code, body := get("/x")
	if s != 503 || code != "E_NO_AUDIT" || !strings.Contains(body, "the audit disk is full, so nothing goes out until space is freed") {
		t.Fatalf("on a full disk: %d %s\n%s", s, code, body)
	}
	if strings.Contains(body, mnt) {
		t.Errorf("the refusal names the audit's path:\n%s", body)
	}
	if n := tg.origin.count(); n != reached {
		t.Errorf("the origin was reached %d times while the disk was full", n-reached)
	}
	rec := httptest.NewRecorder()
	tg.g.StatusHandler(StatusInfo{}).ServeHTTP(rec, httptest.NewRequest("GET", "/status", nil))
	var st Status
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || st.Audit == nil || !st.Audit.Full || !strings.Contains(st.AuditError, "no space left") {
		t.Errorf("status on a full disk = %s, want audit.full and the error", rec.Body.String())
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	// The next refusal's record is written, which clears the audit's health: traffic passes.
	testkit.WaitFor(t, 5*time.Second, "traffic to pass once space is back", func() bool {
		s, _, _ := get("/after")
		return s == 200
	})
	if st := tg.origin.count(); st <= reached {
		t.Error("the origin was not reached after recovery")
	}
}
