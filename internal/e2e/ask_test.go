package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/gate"
	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

const askPolicy = `version = 1
trusted = ["origin.test"]

[[rule]]
name = "ask-writes"
hosts = ["origin.test"]
methods = ["POST", "DELETE"]
verdict = "ask"

[floor]
allow_cidrs = ["127.0.0.1/32"]
allow_ports = [%d]

[floor.hosts]
"origin.test" = "127.0.0.1"

[sources]
local = ["127.0.0.0/8"]

[settings]
hold = "%s"
`

type askEnv struct {
	*running
	origin *originRecorder
	port   int
}

func startAsk(t *testing.T, hold string) *askEnv {
	t.Helper()
	rec := &originRecorder{}
	o := httptest.NewServer(rec)
	t.Cleanup(o.Close)
	port := o.Listener.Addr().(*net.TCPAddr).Port
	r := startStack(t, fmt.Sprintf(askPolicy, port, hold))
	if r.up.Hub == "" {
		t.Fatalf("up.json has no hub: %+v", r.up)
	}
	return &askEnv{running: r, origin: rec, port: port}
}

func (e *askEnv) lox(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := execLox(t, append(args, "--state", e.state)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.String() + errb.String(), err
	}
	return out.String(), nil
}

func (e *askEnv) tickets(t *testing.T) []hub.Ticket {
	t.Helper()
	out, err := e.lox(t, "tickets", "--json")
	if err != nil {
		t.Fatalf("lox tickets: %v\n%s", err, out)
	}
	var ts []hub.Ticket
	if err := json.Unmarshal([]byte(out), &ts); err != nil {
		t.Fatalf("lox tickets --json: %v\n%s", err, out)
	}
	return ts
}

// waitTicket waits until a pending ticket for url shows in lox tickets --json.
func (e *askEnv) waitTicket(t *testing.T, url string) hub.Ticket {
	t.Helper()
	var found hub.Ticket
	testkit.WaitFor(t, 10*time.Second, "a ticket for "+url, func() bool {
		for _, tk := range e.tickets(t) {
			if tk.URL == url {
				found = tk
				return true
			}
		}
		return false
	})
	return found
}

type result struct {
	status int
	code   string
	ticket string
	body   string
	err    error
}

func (e *askEnv) send(method, path, body string) <-chan result {
	ch := make(chan result, 1)
	go func() {
		c := (&coreEnv{running: e.running}).client()
		c.Timeout = 60 * time.Second
		req, _ := http.NewRequest(method, fmt.Sprintf("http://origin.test:%d%s", e.port, path), strings.NewReader(body))
		resp, err := c.Do(req)
		if err != nil {
			ch <- result{err: err}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		ch <- result{status: resp.StatusCode, code: resp.Header.Get(gate.HeaderCode), ticket: resp.Header.Get(gate.HeaderTicket), body: string(b)}
	}()
	return ch
}

func TestAskApprovedWithLox(t *testing.T) {
	e := startAsk(t, "30s")
	url := fmt.Sprintf("http://origin.test:%d/items", e.port)
	res := e.send("POST", "/items", "payload-1")
	tk := e.waitTicket(t, url)
	if tk.Container != "local" || tk.Method != "POST" || tk.Rule != "ask-writes" || !tk.NeverAuto || tk.Fingerprint == "" ||
		!strings.Contains(tk.BodyPreview, "payload-1") || tk.Expires.IsZero() {
		t.Fatalf("ticket %+v", tk)
	}
	if e.origin.count() != 0 {
		t.Fatal("the held request reached the origin before approval")
	}
	// Flags after the ticket id work too.
	if out, err := e.lox(t, "approve", tk.ID); err != nil {
		t.Fatalf("lox approve: %v\n%s", err, out)
	}
	r := <-res
	if r.err != nil || r.status != 200 || r.body != "origin saw POST /items (9 bytes)" {
		t.Fatalf("after approval: %+v", r)
	}
	var rec map[string]any
	testkit.WaitFor(t, 5*time.Second, "the audit record", func() bool {
		for _, m := range e.auditRecords() {
			if m["ticket"] == tk.ID && m["status"] == float64(200) {
				rec = m
				return true
			}
		}
		return false
	})
	if !strings.HasPrefix(rec["approver"].(string), "cli:") || rec["verdict"] != "ASK" {
		t.Errorf("audit record %v", rec)
	}
}

func TestAskDeniedWithReason(t *testing.T) {
	e := startAsk(t, "30s")
	url := fmt.Sprintf("http://origin.test:%d/delete-me", e.port)
	res := e.send("DELETE", "/delete-me", "")
	tk := e.waitTicket(t, url)
	if out, err := e.lox(t, "deny", tk.ID, "--reason", "not on a Friday"); err != nil {
		t.Fatalf("lox deny: %v\n%s", err, out)
	}
	r := <-res
	if r.status != 403 || r.code != "E_DENIED" || !strings.Contains(r.body, "not on a Friday") || r.ticket != tk.ID {
		t.Fatalf("after denial: %+v", r)
	}
	if e.origin.count() != 0 {
		t.Fatal("a denied request reached the origin")
	}
	// Without a reason, lox refuses to deny.
	if out, err := e.lox(t, "deny", tk.ID); err == nil {
		t.Fatalf("lox deny without a reason succeeded: %s", out)
	}
}

func TestAskPendingThenOneRetry(t *testing.T) {
	e := startAsk(t, "2s")
	r := <-e.send("POST", "/later", "x")
	if r.status != 403 || r.code != "E_PENDING" || r.ticket == "" {
		t.Fatalf("past the hold: %+v", r)
	}
	if out, err := e.lox(t, "approve", r.ticket); err != nil {
		t.Fatalf("lox approve: %v\n%s", err, out)
	}
	first := <-e.send("POST", "/later", "x")
	if first.status != 200 {
		t.Fatalf("first retry after approval: %+v", first)
	}
	second := <-e.send("POST", "/later", "x")
	if second.status != 403 || second.code != "E_PENDING" || second.ticket == r.ticket {
		t.Fatalf("second retry must ask again: %+v", second)
	}
	if e.origin.count() != 1 {
		t.Fatalf("%d requests reached the origin, want exactly one", e.origin.count())
	}
}

func TestIdenticalRequestsShareATicket(t *testing.T) {
	e := startAsk(t, "30s")
	url := fmt.Sprintf("http://origin.test:%d/same", e.port)
	a := e.send("POST", "/same", "body")
	b := e.send("POST", "/same", "body")
	c := e.send("POST", "/same", "other body")
	var ts []hub.Ticket
	testkit.WaitFor(t, 10*time.Second, "two tickets, one held twice", func() bool {
		ts = nil
		for _, tk := range e.tickets(t) {
			if tk.URL == url {
				ts = append(ts, tk)
			}
		}
		if len(ts) != 2 {
			return false
		}
		return (ts[0].Holders == 2) != (ts[1].Holders == 2)
	})
	for _, tk := range ts {
		if out, err := e.lox(t, "approve", tk.ID); err != nil {
			t.Fatalf("approve: %v\n%s", err, out)
		}
	}
	var wg sync.WaitGroup
	for _, ch := range []<-chan result{a, b, c} {
		wg.Add(1)
		go func(ch <-chan result) {
			defer wg.Done()
			if r := <-ch; r.status != 200 {
				t.Errorf("released request: %+v", r)
			}
		}(ch)
	}
	wg.Wait()
	if e.origin.count() != 3 {
		t.Fatalf("%d requests reached the origin", e.origin.count())
	}
}

func TestLoxTicketsHuman(t *testing.T) {
	e := startAsk(t, "30s")
	res := e.send("POST", "/human", "x")
	e.waitTicket(t, fmt.Sprintf("http://origin.test:%d/human", e.port))
	out, err := e.lox(t, "tickets")
	if err != nil || !strings.Contains(out, "/human") || !strings.Contains(out, "ask-writes") {
		t.Fatalf("lox tickets: %v\n%s", err, out)
	}
	tk := e.tickets(t)[0]
	// A stale fingerprint is refused and changes nothing.
	if out, err := e.lox(t, "approve", "--fingerprint", "fp1:0000", tk.ID); err == nil || !strings.Contains(out, "fingerprint") {
		t.Fatalf("approve with a stale fingerprint: %v\n%s", err, out)
	}
	e.lox(t, "deny", "--reason", "cleanup", tk.ID)
	<-res
	_ = exec.Command
	_ = filepath.Join
}
