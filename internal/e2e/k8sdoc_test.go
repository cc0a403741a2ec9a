package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/hubapi"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// TestKubernetesDocFromOutside: docs/deploy-kubernetes.md as an operator follows it, with the
// real binaries and a kubectl that records what it is asked (no cluster here): the identities
// and keys its setup makes serve a console and a gate, lox tickets and approve with the facade
// identity it issued decide a held request, the doctor names the gate's pod, and verify-log checks
// the pod's chain in PostgreSQL with the audit key the setup made.
func TestKubernetesDocFromOutside(t *testing.T) {
	pg := startPostgres(t)
	blocks, err := readDocBlocks("../../docs/deploy-kubernetes.md")
	if err != nil {
		t.Fatal(err)
	}
	script := map[string]string{}
	for _, b := range blocks {
		script[b.Name] = b.Script
	}
	work := t.TempDir()
	fakeBin := t.TempDir()
	os.WriteFile(filepath.Join(fakeBin, "kubectl"), []byte("#!/bin/sh\nexit 0\n"), 0o755)
	run := func(name, text string) string {
		t.Helper()
		cmd := exec.Command("sh", "-e", "-c", text)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "PATH="+binDir+":"+fakeBin+":"+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("block %s: %v\n%s", name, err, out)
		}
		return string(out)
	}
	run("setup", script["setup"])
	// The database is the test's own.
	os.WriteFile(filepath.Join(work, "audit.dsn"), []byte(pg.DSN+"\n"), 0o600)

	rec := &originRecorder{}
	o := httptest.NewServer(rec)
	t.Cleanup(o.Close)
	port := o.Listener.Addr().(*net.TCPAddr).Port
	r := startTLSFleetIn(t, filepath.Join(work, "fleet"), fmt.Sprintf(askPolicy, port, "60s"), "-hub-key", filepath.Join(work, "keys", "hub-key.pem"))
	g := r.gateAs("k8s", "lockhttp-gate-5c7d-x2", "-hub-key", filepath.Join(work, "keys", "hub-key.pem.pub"),
		"-audit-key", filepath.Join(work, "keys", "audit.key"), "-audit-dsn-file", filepath.Join(work, "audit.dsn"))
	testkit.WaitFor(t, 20*time.Second, "the gate's policy", func() bool { return g.mustStatus().PolicyVersion != "" })
	target := fmt.Sprintf("http://origin.test:%d/deploy", port)
	done := make(chan string, 1)
	go func() {
		for deadline := time.Now().Add(20 * time.Second); ; {
			code, lcode, _, err := g.do("POST", target, 60*time.Second)
			if lcode == "E_NO_CONSOLE" && time.Now().Before(deadline) {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			done <- fmt.Sprintf("%d %s %v", code, lcode, err)
			return
		}
	}()
	var id string
	alice := r.facadeArgs("facade", "alice")
	testkit.WaitFor(t, 20*time.Second, "the held request's ticket", func() bool {
		out, _, _ := loxFleet(t, append([]string{"tickets", "--json"}, alice...)...)
		var ts []hubapi.Ticket
		json.Unmarshal([]byte(out), &ts)
		for _, tk := range ts {
			if tk.URL == target {
				id = tk.ID
			}
		}
		return id != ""
	})

	outside := strings.NewReplacer("127.0.0.1:8443", r.status.TLS, "127.0.0.1:8444", r.status.HubTLS, " ID ", " "+id+" ").Replace(script["outside"])
	out := run("outside", outside)
	if !strings.Contains(out, id) {
		t.Errorf("lox tickets did not list the ticket:\n%s", out)
	}
	if !strings.Contains(out, "fleet  ") || !strings.Contains(out, "gate/k8s@lockhttp-gate-5c7d-x2 decides with the console's policy") {
		t.Errorf("the doctor does not name the gate's pod:\n%s", out)
	}
	select {
	case res := <-done:
		if !strings.HasPrefix(res, "200 ") {
			t.Fatalf("the request after lox approve: %s", res)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("lox approve did not release the request")
	}
	testkit.WaitFor(t, 20*time.Second, "the audit's copy", func() bool {
		st := g.mustStatus()
		return st.AuditSink != nil && st.AuditSink.Behind == 0 && st.AuditSink.Rows > 0
	})
	if out := run("verify", script["verify"]); !strings.Contains(out, "spiffe://lockhttp/gate/k8s@lockhttp-gate-5c7d-x2: CLEAN") {
		t.Errorf("verify-log:\n%s", out)
	}
}
