package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/hubclient"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// heldRestartEnv is a lox run stack with an ASK rule (askPolicy, a 60 s hold) whose processes
// lox restarts 50 ms after they exit.
type heldRestartEnv struct {
	*askEnv
	sup *superviseEnv
}

func startHeldRestart(t *testing.T) *heldRestartEnv {
	t.Helper()
	rec := &originRecorder{}
	o := httptest.NewServer(rec)
	t.Cleanup(o.Close)
	port := o.Listener.Addr().(*net.TCPAddr).Port
	r := startStackWith(t, fmt.Sprintf(askPolicy, port, "60s"), []string{"--restart-delay", "50ms"}, nil)
	return &heldRestartEnv{askEnv: &askEnv{running: r, origin: rec, port: port}, sup: &superviseEnv{running: r}}
}

// hold sends POST path and waits until the gate holds it on a ticket: the hub counts it, and the
// gate's journal of held requests (STATE/audit/held) has it.
func (e *heldRestartEnv) hold(t *testing.T, path string) (<-chan result, hub.Ticket) {
	t.Helper()
	res := e.send("POST", path, "payload")
	tk := e.waitTicket(t, fmt.Sprintf("http://origin.test:%d%s", e.port, path))
	testkit.WaitFor(t, 10*time.Second, "the held request in the gate's journal", func() bool {
		ents, _ := os.ReadDir(filepath.Join(e.up.AuditDir, "held"))
		return len(ents) == 1
	})
	return res, tk
}

// cutRecord waits for the gate's record of the request held on ticket id and cut by a restart.
func (e *heldRestartEnv) cutRecord(t *testing.T, id string) map[string]any {
	t.Helper()
	var rec map[string]any
	testkit.WaitFor(t, 20*time.Second, "the record of the request held on "+id, func() bool {
		for _, m := range e.auditRecords() {
			if m["ticket"] == id && m["event"] == "request" {
				rec = m
				return true
			}
		}
		return false
	})
	return rec
}

// goneTicket waits until lox tickets --json shows ticket id with no request held, cut by a
// restart, and checks that lox tickets and the hub's own API say the same.
func (e *heldRestartEnv) goneTicket(t *testing.T, id string) {
	t.Helper()
	var tk map[string]any
	testkit.WaitFor(t, 20*time.Second, "lox tickets to show the request of "+id+" gone", func() bool {
		out, err := e.lox(t, "tickets", "--json")
		var ts []map[string]any
		if err != nil || json.Unmarshal([]byte(out), &ts) != nil {
			t.Fatalf("lox tickets --json: %v\n%s", err, out)
		}
		for _, x := range ts {
			if x["id"] == id {
				tk = x
			}
		}
		return tk != nil && tk["holders"] == float64(0)
	})
	goneFields(t, "lox tickets --json", tk)
	out, err := e.lox(t, "tickets")
	if err != nil || !strings.Contains(lineOf(out, id), "0 (cut by a gate restart)") ||
		!strings.Contains(out, "HELD 0: no request waits on the ticket now; approving it lets one identical retry through, once") {
		t.Fatalf("lox tickets: %v\n%s", err, out)
	}
	// The hub's API, as a facade reads it.
	tok, err := hubclient.ReadToken(e.up.HubCLIToken)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", e.up.Hub+"/v1/tickets/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw map[string]any
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&raw) != nil {
		t.Fatalf("GET /v1/tickets/%s: %s", id, resp.Status)
	}
	goneFields(t, "the hub's GET /v1/tickets/"+id, raw)
}

// goneFields checks a ticket as JSON says its one request is gone, cut by a gate restart.
func goneFields(t *testing.T, where string, tk map[string]any) {
	t.Helper()
	waiting, _ := tk["waiting"].(string)
	if tk["status"] != "pending" || tk["holders"] != float64(0) || tk["gone"] != "restart" || tk["cut"] != float64(1) ||
		!strings.HasPrefix(waiting, "Nothing is waiting on this ticket now (the gate restarted while its request was held: the request was cut") {
		t.Fatalf("%s: %v", where, tk)
	}
}

func lineOf(out, s string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}

// approveGone approves ticket id with lox, which says that nothing waits and what the approval
// stands for; the identical retry then passes, once.
func (e *heldRestartEnv) approveGone(t *testing.T, id, path string) {
	t.Helper()
	out, err := e.lox(t, "approve", id)
	if err != nil || !strings.Contains(out, "note: Nothing is waiting on this ticket now (the gate restarted") ||
		!strings.Contains(out, id+" approved by cli:") ||
		!strings.Contains(out, "Nothing was waiting on this ticket when it was approved (the gate restarted while its request was held") ||
		!strings.Contains(out, "lets one identical retry of the request through until ") {
		t.Fatalf("lox approve: %v\n%s", err, out)
	}
	if r := <-e.send("POST", path, "payload"); r.status != 200 {
		t.Fatalf("the retry after the approval: %+v", r)
	}
	// The second asks again: it is held on a new ticket.
	e.send("POST", path, "payload")
	url := fmt.Sprintf("http://origin.test:%d%s", e.port, path)
	testkit.WaitFor(t, 10*time.Second, "the second retry held on a new ticket", func() bool {
		for _, x := range e.tickets(t) {
			if x.URL == url && x.ID != id && x.Holders == 1 {
				return true
			}
		}
		return false
	})
	if n := e.origin.count(); n != 1 {
		t.Fatalf("%d requests reached the origin, want the one retry", n)
	}
}

// verifyLog runs lockhttp verify-log on the gate's audit: CLEAN.
func (e *heldRestartEnv) verifyLog(t *testing.T) {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(filepath.Join(binDir, "lockhttp"), "verify-log", e.up.AuditDir)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil || !strings.Contains(out.String(), "CLEAN") {
		t.Fatalf("verify-log: %v\n%s", err, out.String())
	}
}

// TestHeldRequestCutByAGateKill: a request held for a human when the gate is SIGKILLed gets no
// answer; the gate lox starts again writes its record (its rule, its ticket, code E_PENDING, no
// status, "cut by a gate restart"), and the ticket says on lox tickets and the hub's API that its
// request is gone; lox approve says what the approval then stands for, and the retry passes once.
func TestHeldRequestCutByAGateKill(t *testing.T) {
	e := startHeldRestart(t)
	path := "/held-at-a-kill"
	res, tk := e.hold(t, path)
	old := e.sup.kill(t, "gate")
	if r := <-res; r.err == nil {
		t.Fatalf("the held request got an answer from a killed gate: %+v", r)
	}
	e.sup.restarted(t, "gate", old)
	rec := e.cutRecord(t, tk.ID)
	if rec["code"] != "E_PENDING" || rec["verdict"] != "ASK" || rec["rule"] != "ask-writes" || rec["status"] != float64(0) ||
		rec["method"] != "POST" || !strings.HasSuffix(rec["url"].(string), path) ||
		!strings.HasPrefix(rec["detail"].(string), "cut by a gate restart: the gate stopped while this request was held for a human on ticket "+tk.ID+"; its client got no answer (the gate was killed)") {
		t.Fatalf("the record of the held request: %v", rec)
	}
	if ents, _ := os.ReadDir(filepath.Join(e.up.AuditDir, "held")); len(ents) != 0 {
		t.Fatalf("the journal after the restart holds %d files", len(ents))
	}
	e.goneTicket(t, tk.ID)
	if e.origin.count() != 0 {
		t.Fatal("the held request reached the origin")
	}
	e.approveGone(t, tk.ID, path)
	e.verifyLog(t)
}

// TestHeldRequestCutByAGateRestart: a request held for a human when the gate stops on SIGTERM is
// answered 403 E_PENDING with its ticket; its record (its id, status 403) says the restart cut
// it; lox starts the gate again and the ticket says on lox tickets and the hub's API that its
// request is gone.
func TestHeldRequestCutByAGateRestart(t *testing.T) {
	e := startHeldRestart(t)
	path := "/held-at-a-restart"
	res, tk := e.hold(t, path)
	pid := e.sup.pids(t)["gate"]
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r := <-res
	if r.err != nil || r.status != 403 || r.code != "E_PENDING" || r.ticket != tk.ID || !strings.Contains(r.body, "the gate is restarting") {
		gl, _ := os.ReadFile(filepath.Join(e.up.Logs, "gate.log"))
		t.Fatalf("the held request at the gate's stop: %+v\nthe gate's log:\n%s", r, gl)
	}
	rec := e.cutRecord(t, tk.ID)
	if rec["code"] != "E_PENDING" || rec["status"] != float64(403) || rec["rule"] != "ask-writes" ||
		!strings.HasPrefix(rec["detail"].(string), "cut by a gate restart: the gate stopped while this request was held for a human on ticket "+tk.ID+"; answered E_PENDING") {
		t.Fatalf("the record of the held request: %v", rec)
	}
	e.sup.restarted(t, "gate", pid)
	if ents, _ := os.ReadDir(filepath.Join(e.up.AuditDir, "held")); len(ents) != 0 {
		t.Fatalf("the journal after the restart holds %d files", len(ents))
	}
	e.goneTicket(t, tk.ID)
	e.approveGone(t, tk.ID, path)
	e.verifyLog(t)
}
