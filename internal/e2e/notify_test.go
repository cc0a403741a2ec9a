package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/console"
	"github.com/lockhttp/lockhttp/internal/notify"
	"github.com/lockhttp/lockhttp/internal/stack"
	"github.com/lockhttp/lockhttp/internal/testkit"
	"github.com/lockhttp/lockhttp/internal/unixsock"
)

// notifyReceiver is a webhook receiver on loopback: it keeps every notification and when it came.
type notifyReceiver struct {
	mu  sync.Mutex
	got []notifyGot
}

type notifyGot struct {
	hook notify.Webhook
	raw  string
	at   time.Time
}

func (n *notifyReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	var h notify.Webhook
	json.Unmarshal(b, &h)
	n.mu.Lock()
	n.got = append(n.got, notifyGot{h, string(b), time.Now()})
	n.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// allFor is every notification of ticket id, in the order they came.
func (n *notifyReceiver) allFor(id string) []notifyGot {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []notifyGot
	for _, g := range n.got {
		if g.hook.Ticket == id {
			out = append(out, g)
		}
	}
	return out
}

func (n *notifyReceiver) forTicket(id string) (notifyGot, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, g := range n.got {
		if g.hook.Ticket == id {
			return g, true
		}
	}
	return notifyGot{}, false
}

// notifyPolicy is askPolicy with channels; %[1]d is the origin's port, %[2]s the channels.
const notifyPolicy = `version = 1
trusted = ["origin.test"]

[[rule]]
name = "ask-writes"
hosts = ["origin.test"]
methods = ["POST", "DELETE"]
verdict = "ask"

[floor]
allow_cidrs = ["127.0.0.1/32"]
allow_ports = [%[1]d]

[floor.hosts]
"origin.test" = "127.0.0.1"

[sources]
local = ["127.0.0.0/8", "198.18.0.0/24"]

[settings]
hold = "30s"
%[2]s`

func startNotify(t *testing.T, channels string) *askEnv {
	t.Helper()
	rec := &originRecorder{}
	o := httptest.NewServer(rec)
	t.Cleanup(o.Close)
	port := o.Listener.Addr().(*net.TCPAddr).Port
	r := startStack(t, fmt.Sprintf(notifyPolicy, port, channels))
	return &askEnv{running: r, origin: rec, port: port}
}

func postDecision(t *testing.T, link, body string) int {
	t.Helper()
	resp, err := http.Post(link, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", link, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestNotifyWebhookDecides: a ticket reaches a webhook receiver on loopback within a second; a
// forged token and a changed fingerprint are refused with 403; the decision through the link
// releases the held request, and the audit names the channel as the approver.
func TestNotifyWebhookDecides(t *testing.T) {
	recv := &notifyReceiver{}
	hook := httptest.NewServer(recv)
	t.Cleanup(hook.Close)
	e := startNotify(t, fmt.Sprintf("\n[[notify]]\nname = \"ops\"\nurl = %q\nkind = \"webhook\"\nhuman = true\ninsecure_loopback = true\n", hook.URL+"/lockhttp-hook"))
	url := fmt.Sprintf("http://origin.test:%d/items", e.port)
	res := e.send("POST", "/items", "payload-notify")
	tk := e.waitTicket(t, url)
	var got notifyGot
	testkit.WaitFor(t, 5*time.Second, "the notification of "+tk.ID, func() bool {
		var ok bool
		got, ok = recv.forTicket(tk.ID)
		return ok
	})
	// The acceptance: within a second of the ticket.
	if lag := got.at.Sub(tk.Created); lag > time.Second {
		t.Errorf("the notification came %s after the ticket, want under a second", lag)
	}
	h := got.hook
	if h.Fingerprint != tk.Fingerprint || h.Container != "local" || h.Rule != "ask-writes" || h.Method != "POST" || h.URL != url ||
		!strings.Contains(h.BodyPreview, "payload-notify") || !h.Human || !strings.HasPrefix(h.DecisionURL, e.up.Hub+notify.LinkPrefix+"ops/"+tk.ID+"/") {
		t.Fatalf("notification %s", got.raw)
	}
	forged := h.DecisionURL[:strings.LastIndex(h.DecisionURL, "/")+1] + strings.Repeat("a", 64)
	if st := postDecision(t, forged, `{"decision":"approve","fingerprint":"`+tk.Fingerprint+`"}`); st != 403 {
		t.Fatalf("a forged token: %d, want 403", st)
	}
	if st := postDecision(t, h.DecisionURL, `{"decision":"approve","fingerprint":"fp1:0000"}`); st != 403 {
		t.Fatalf("a changed fingerprint: %d, want 403", st)
	}
	if e.origin.count() != 0 {
		t.Fatal("the held request reached the origin before the decision")
	}
	// The body names an actor that looks like the terminal's: whoever holds the link writes
	// it, so the audit names the channel alone.
	if st := postDecision(t, h.DecisionURL, `{"decision":"approve","fingerprint":"`+tk.Fingerprint+`","actor":"terminal:alice"}`); st != 200 {
		t.Fatalf("the decision: %d", st)
	}
	r := <-res
	if r.err != nil || r.status != 200 || r.body != "origin saw POST /items (14 bytes)" {
		t.Fatalf("after the decision: %+v", r)
	}
	testkit.WaitFor(t, 5*time.Second, "the audit record naming the channel", func() bool {
		for _, m := range e.auditRecords() {
			if m["ticket"] == tk.ID && m["status"] == float64(200) {
				return m["approver"] == "notify:ops"
			}
		}
		return false
	})
}

// TestNotifyOnlyChannelDecidesNothing: a channel without human = true gets no decision link,
// and a link made up for it is refused.
func TestNotifyOnlyChannelDecidesNothing(t *testing.T) {
	recv := &notifyReceiver{}
	hook := httptest.NewServer(recv)
	t.Cleanup(hook.Close)
	e := startNotify(t, fmt.Sprintf("\n[[notify]]\nname = \"log\"\nurl = %q\nkind = \"webhook\"\n", hook.URL))
	res := e.send("DELETE", "/x", "")
	tk := e.waitTicket(t, fmt.Sprintf("http://origin.test:%d/x", e.port))
	var got notifyGot
	testkit.WaitFor(t, 5*time.Second, "the notification", func() bool {
		var ok bool
		got, ok = recv.forTicket(tk.ID)
		return ok
	})
	if got.hook.DecisionURL != "" || got.hook.Human {
		t.Fatalf("a notify-only channel got a link: %s", got.raw)
	}
	link := e.up.Hub + notify.LinkPrefix + "log/" + tk.ID + "/" + strings.Repeat("b", 64)
	if st := postDecision(t, link, `{"decision":"approve","fingerprint":"`+tk.Fingerprint+`"}`); st != 403 {
		t.Fatalf("a decision on a notify-only channel: %d, want 403", st)
	}
	e.lox(t, "deny", tk.ID, "--reason", "cleanup")
	<-res
}

// TestNotifyDeadReceiver: with a channel whose receiver is down, the ASK flow works through the
// other facades as before (lox approve releases the request), and the doctor names the channel's
// failure.
func TestNotifyDeadReceiver(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String() + "/gone"
	l.Close()
	token := filepath.Join(t.TempDir(), "ntfy.token")
	if err := os.WriteFile(token, []byte("tk_pager\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := startNotify(t, fmt.Sprintf("\n[[notify]]\nname = \"pager\"\nurl = %q\nkind = \"ntfy\"\nhuman = true\ninsecure_loopback = true\ntoken_file = %q\n", dead, token))
	url := fmt.Sprintf("http://origin.test:%d/items", e.port)
	res := e.send("POST", "/items", "x")
	tk := e.waitTicket(t, url)
	if out, err := e.lox(t, "approve", tk.ID); err != nil {
		t.Fatalf("lox approve: %v\n%s", err, out)
	}
	if r := <-res; r.status != 200 {
		t.Fatalf("after lox approve: %+v", r)
	}
	// A second ticket: its notification fails every attempt meanwhile; the doctor says so.
	res2 := e.send("DELETE", "/other", "")
	tk2 := e.waitTicket(t, fmt.Sprintf("http://origin.test:%d/other", e.port))
	var out string
	testkit.WaitFor(t, 30*time.Second, "the doctor naming the channel's failure", func() bool {
		out, _ = runDoctor(t, "--state", e.state)
		return hasLine(out, "WARN", "notify", `channel "pager"`) && strings.Contains(out, "the last delivery failed")
	})
	if strings.Contains(out, "/gone") {
		t.Errorf("the doctor shows the channel's URL path:\n%s", out)
	}
	e.lox(t, "deny", tk2.ID, "--reason", "cleanup")
	<-res2
}

// TestNotifyHumanChannelWaitsForReview: adding a channel whose replies decide tickets to a
// running stack's policy is a loosening: the console keeps the approved policy, which has no
// channel, until a human reviews the edit.
func TestNotifyHumanChannelWaitsForReview(t *testing.T) {
	recv := &notifyReceiver{}
	hook := httptest.NewServer(recv)
	t.Cleanup(hook.Close)
	e := startNotify(t, "")
	text, err := os.ReadFile(e.policy)
	if err != nil {
		t.Fatal(err)
	}
	edited := string(text) + fmt.Sprintf("\n[[notify]]\nname = \"ops\"\nurl = %q\nkind = \"webhook\"\nhuman = true\ninsecure_loopback = true\n", hook.URL)
	if err := os.WriteFile(e.policy, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	var st console.Status
	testkit.WaitFor(t, 10*time.Second, "the console to hold the edit for review", func() bool {
		st = console.Status{}
		resp, err := unixsock.Client(e.up.ConsoleSocket, 2*time.Second).Get("http://unix/status")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return json.NewDecoder(resp.Body).Decode(&st) == nil && st.Review != ""
	})
	if len(st.Notify) != 0 {
		t.Fatalf("the channel is in force before its review: %+v", st.Notify)
	}
	out, _ := runDoctor(t, "--state", e.state)
	if !hasLine(out, "WARN", "console", "waits for a human") {
		t.Errorf("the doctor does not say the edit waits for review:\n%s", out)
	}
}

// TestNotifyAfterConsoleRestart: a request held for a human when the console dies (SIGKILL)
// reaches the channel again once lox has restarted it, once, marked again; the decision through
// that notification's link releases the held request.
func TestNotifyAfterConsoleRestart(t *testing.T) {
	recv := &notifyReceiver{}
	hook := httptest.NewServer(recv)
	t.Cleanup(hook.Close)
	e := startNotify(t, fmt.Sprintf("\n[[notify]]\nname = \"ops\"\nurl = %q\nkind = \"webhook\"\nhuman = true\ninsecure_loopback = true\n", hook.URL+"/lockhttp-hook"))
	res := e.send("POST", "/items", "payload-restart")
	tk := e.waitTicket(t, fmt.Sprintf("http://origin.test:%d/items", e.port))
	testkit.WaitFor(t, 5*time.Second, "the first notification", func() bool { return len(recv.allFor(tk.ID)) == 1 })
	if recv.allFor(tk.ID)[0].hook.Again {
		t.Fatalf("the first notification is marked again: %s", recv.allFor(tk.ID)[0].raw)
	}

	// The hub writes its state file within a second of a change: the ticket is on disk, then
	// the console dies.
	testkit.WaitFor(t, 5*time.Second, "the ticket in the hub's state file", func() bool {
		data, _ := os.ReadFile(filepath.Join(e.state, "hub.json"))
		return strings.Contains(string(data), tk.ID)
	})
	old := e.up.PIDs["console"]
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, "the console restarted", func() bool {
		var up stack.Up
		data, err := os.ReadFile(filepath.Join(e.state, stack.UpFile))
		if err != nil || json.Unmarshal(data, &up) != nil {
			return false
		}
		pid := up.PIDs["console"]
		return pid != 0 && pid != old && alive(pid)
	})
	testkit.WaitFor(t, 10*time.Second, "the notification after the restart", func() bool { return len(recv.allFor(tk.ID)) == 2 })
	got := recv.allFor(tk.ID)[1]
	h := got.hook
	if !h.Again || h.Fingerprint != tk.Fingerprint || !strings.HasPrefix(h.DecisionURL, e.up.Hub+notify.LinkPrefix+"ops/"+tk.ID+"/") {
		t.Fatalf("the notification after the restart: %s", got.raw)
	}
	if e.origin.count() != 0 {
		t.Fatal("the held request reached the origin before the decision")
	}
	if st := postDecision(t, h.DecisionURL, `{"decision":"approve","fingerprint":"`+tk.Fingerprint+`","actor":"carol"}`); st != 200 {
		t.Fatalf("the decision through the link sent after the restart: %d", st)
	}
	r := <-res
	if r.err != nil || r.status != 200 || r.body != "origin saw POST /items (15 bytes)" {
		t.Fatalf("the held request after the decision: %+v", r)
	}
	if n := len(recv.allFor(tk.ID)); n != 2 {
		t.Errorf("%d notifications of the ticket, want 2 (one per start of the console)", n)
	}
}
