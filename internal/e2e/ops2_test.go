package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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

	"github.com/chromedp/chromedp"
	"github.com/gorilla/websocket"

	"github.com/lockhttp/lockhttp/internal/gate"
	"github.com/lockhttp/lockhttp/internal/hubclient"
	"github.com/lockhttp/lockhttp/internal/phone"
	"github.com/lockhttp/lockhttp/internal/stack"
	"github.com/lockhttp/lockhttp/internal/testkit"
	"github.com/lockhttp/lockhttp/internal/unixsock"
)

// pairingLink runs lox pair and returns the link it prints.
func (e *askEnv) pairingLink(t *testing.T) string {
	t.Helper()
	out, err := e.lox(t, "pair")
	if err != nil {
		t.Fatalf("lox pair: %v\n%s", err, out)
	}
	for _, f := range strings.Fields(out) {
		if strings.Contains(f, "/phone/#pair=") {
			return f
		}
	}
	t.Fatalf("no pairing link in:\n%s", out)
	return ""
}

// phones runs lox phones --json.
func (e *askEnv) phones(t *testing.T) []hubclient.Phone {
	t.Helper()
	out, err := e.lox(t, "phones", "--json")
	if err != nil {
		t.Fatalf("lox phones --json: %v\n%s", err, out)
	}
	var ps []hubclient.Phone
	if err := json.Unmarshal([]byte(out), &ps); err != nil {
		t.Fatalf("lox phones --json: %v\n%s", err, out)
	}
	return ps
}

// phoneAPI sends one request to the phone page's API as a phone with session token tok would.
func (e *askEnv) phoneAPI(t *testing.T, method, path, tok string, body any) (int, string) {
	t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, _ := http.NewRequest(method, e.up.Hub+path, rd)
	req.Header.Set("Origin", e.up.Hub)
	req.Header.Set("Content-Type", "application/json")
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

// checkUnpairedEverywhere checks what unpairing p must have done: lox phones no longer lists
// it, its token is refused for reading and for deciding (the held request stays held), a second
// unpair says there is no such phone, and the console's audit has the unpairing.
func (e *askEnv) checkUnpairedEverywhere(t *testing.T, p hubclient.Phone, tok string) {
	t.Helper()
	if ps := e.phones(t); len(ps) != 0 {
		t.Fatalf("lox phones after the unpairing: %+v", ps)
	}
	if st, body := e.phoneAPI(t, "GET", "/phone/v1/tickets", tok, nil); st != 401 || !strings.Contains(body, "unpaired") {
		t.Fatalf("the revoked token reading the tickets: %d %s, want 401", st, body)
	}
	res := e.send("POST", "/after-the-unpairing", "x")
	tk := e.waitTicket(t, fmt.Sprintf("http://origin.test:%d/after-the-unpairing", e.port))
	if st, body := e.phoneAPI(t, "POST", "/phone/v1/tickets/"+tk.ID+"/approve", tok, map[string]string{"fingerprint": tk.Fingerprint}); st != 401 {
		t.Fatalf("the revoked token approving: %d %s, want 401", st, body)
	}
	if got := e.tickets(t); len(got) != 1 || got[0].ID != tk.ID {
		t.Fatalf("after an approval with a revoked token the tickets are %+v", got)
	}
	select {
	case r := <-res:
		t.Fatalf("the revoked phone released the request: %+v", r)
	default:
	}
	if out, err := e.lox(t, "unpair", p.ID); err == nil || !strings.Contains(out, "no paired phone has this id") {
		t.Fatalf("lox unpair of a phone already unpaired: %v\n%s", err, out)
	}
	testkit.WaitFor(t, 5*time.Second, "the unpairing in the console's audit", func() bool {
		files, _ := filepath.Glob(filepath.Join(e.up.ConsoleAudit, "*.jsonl"))
		for _, f := range files {
			data, _ := os.ReadFile(f)
			for _, line := range strings.Split(string(data), "\n") {
				var m map[string]any
				if json.Unmarshal([]byte(line), &m) == nil && m["event"] == "phone-unpaired" && m["id"] == p.ID &&
					strings.HasPrefix(fmt.Sprint(m["approver"]), "cli:") && strings.Contains(fmt.Sprint(m["detail"]), p.Device) {
					return true
				}
			}
		}
		return false
	})
}

// TestPhoneUnpairedWhileItsPageIsOpen pairs a headless Chromium with the real stack, lists it
// with lox phones, and revokes it with lox unpair while its page is open: the page says it was
// unpaired at once, and its session token no longer works for any request.
func TestPhoneUnpairedWhileItsPageIsOpen(t *testing.T) {
	path := chromium(t)
	e := startAsk(t, "60s")
	link := e.pairingLink(t)
	ctx, do := phoneBrowser(t, path)
	do("pair", chromedp.Navigate(link), chromedp.WaitVisible(chromedp.ID("pair-form")),
		chromedp.SetValue(chromedp.ID("device"), "lost pixel"),
		chromedp.Click(chromedp.ID("pair-button")), chromedp.WaitVisible(chromedp.ID("list-view")),
		chromedp.WaitVisible(chromedp.CSS("#conn.live")))
	tok, err := chromedp.Run(ctx, chromedp.Evaluate[string](`localStorage.getItem("lockhttp.phone.session")`))
	if err != nil || len(tok) < 40 {
		t.Fatalf("session token %q: %v", tok, err)
	}

	var p hubclient.Phone
	testkit.WaitFor(t, 10*time.Second, "lox phones to list the open page", func() bool {
		ps := e.phones(t)
		if len(ps) == 1 && ps[0].Sockets > 0 {
			p = ps[0]
			return true
		}
		return false
	})
	if p.Device != "lost pixel" || hubclient.CheckPhoneID(p.ID) != nil || !strings.HasPrefix(p.Remote, "127.0.0.1:") ||
		p.Created.IsZero() || p.LastSeen.Before(p.Created) {
		t.Fatalf("lox phones: %+v", p)
	}
	out, err := e.lox(t, "phones")
	if err != nil {
		t.Fatalf("lox phones: %v\n%s", err, out)
	}
	for _, want := range []string{"NAME", "ID", "PAIRED", "LAST SEEN", "ADDRESS", "lost pixel", p.ID, "(page open)", "127.0.0.1:"} {
		if !strings.Contains(out, want) {
			t.Fatalf("lox phones does not show %q:\n%s", want, out)
		}
	}

	out, err = e.lox(t, "unpair", p.ID)
	if err != nil || !strings.Contains(out, "unpaired lost pixel ("+p.ID+")") {
		t.Fatalf("lox unpair: %v\n%s", err, out)
	}
	do("the open page says it was unpaired", chromedp.WaitVisible(chromedp.ID("unpaired-view")),
		chromedp.WaitVisible(chromedp.CSS("#conn.off")))
	why, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("unpaired-why")))
	if err != nil || !strings.Contains(why, "unpaired") {
		t.Fatalf("the page says %q (%v)", why, err)
	}
	e.checkUnpairedEverywhere(t, p, tok)
}

// TestPhoneUnpairClosesItsWebsocket is the same revocation seen from a phone's websocket, without
// a browser: lox unpair closes it with 4401 (the page's "unpaired"), and lox refuses an id that
// cannot be one with the fix.
func TestPhoneUnpairClosesItsWebsocket(t *testing.T) {
	e := startAsk(t, "60s")
	link := e.pairingLink(t)
	pairTok := link[strings.Index(link, "#pair=")+len("#pair="):]
	st, body := e.phoneAPI(t, "POST", "/phone/v1/pair", "", map[string]string{"token": pairTok, "device": "tablet"})
	if st != 200 {
		t.Fatalf("pairing: %d %s", st, body)
	}
	var paired struct{ Session, ID string }
	json.Unmarshal([]byte(body), &paired)

	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(e.up.Hub, "http")+"/phone/v1/ws", http.Header{"Origin": {e.up.Hub}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	ws.WriteJSON(map[string]string{"type": "auth", "token": paired.Session})
	ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, data, err := ws.ReadMessage(); err != nil || !strings.Contains(string(data), `"snapshot"`) {
		t.Fatalf("first message: %v %s", err, data)
	}

	for _, bad := range []string{"../../v1/tickets", "P0123456789AB", "", "p0123"} {
		out, err := e.lox(t, "unpair", bad)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || (bad != "" && !strings.Contains(out, "is not a phone's id")) {
			t.Fatalf("lox unpair %q: %v\n%s", bad, err, out)
		}
	}
	if ps := e.phones(t); len(ps) != 1 || ps[0].ID != paired.ID || ps[0].Sockets != 1 {
		t.Fatalf("lox phones: %+v", ps)
	}
	p := e.phones(t)[0]
	if out, err := e.lox(t, "unpair", paired.ID); err != nil {
		t.Fatalf("lox unpair: %v\n%s", err, out)
	}
	ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		_, _, err := ws.ReadMessage()
		if err == nil {
			continue // an event that was on its way
		}
		var ce *websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != phone.CloseUnauthorized {
			t.Fatalf("the websocket ended with %v, want close %d", err, phone.CloseUnauthorized)
		}
		break
	}
	e.checkUnpairedEverywhere(t, p, paired.Session)
}

// get sends a GET through the gate and returns its status and error code.
func (e *askEnv) get(t *testing.T, rawURL string) (int, string) {
	t.Helper()
	resp, err := (&coreEnv{running: e.running}).client().Get(rawURL)
	if err != nil {
		t.Fatalf("GET %s: %v", rawURL, err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get(gate.HeaderCode)
}

// screenTB is t, whose failures show the terminal's screen.
type screenTB struct {
	*testing.T
	s *tmuxStack
}

func (tb screenTB) Fatalf(format string, args ...any) {
	tb.T.Helper()
	tb.T.Fatalf(format+"\nthe screen:\n%s", append(args, tb.s.screen())...)
}

// recentSection is the screen from the recent decisions down.
func recentSection(screen string) string {
	if i := strings.Index(screen, "Recent decisions"); i >= 0 {
		return screen[i:]
	}
	return ""
}

// TestTerminalShowsTheTraffic runs lox run with its terminal UI in tmux: the recent decisions
// show FREE and DENY requests as they happen, f filters them (all, refused, asks), and the header
// names the policy the gate applied.
func TestTerminalShowsTheTraffic(t *testing.T) {
	rec := &originRecorder{}
	o := httptest.NewServer(rec)
	defer o.Close()
	port := o.Listener.Addr().(*net.TCPAddr).Port
	pol := strings.Replace(fmt.Sprintf(askPolicy, port, "1s"), "trusted = [\"origin.test\"]",
		"trusted = [\"origin.test\"]\ndeny = [\"denied.test\"]", 1)
	s := startTmuxStack(t, pol)
	tb := screenTB{t, s}
	e := &askEnv{running: &running{t: t, state: s.state, up: s.up}, origin: rec, port: port}

	if st, code := e.get(t, fmt.Sprintf("http://origin.test:%d/a-free-read", port)); st != 200 || code != "" {
		t.Fatalf("the free read: %d %s", st, code)
	}
	if st, code := e.get(t, fmt.Sprintf("http://denied.test:%d/a-refused-read", port)); st != 403 || code == "" {
		t.Fatalf("the refused read: %d %s", st, code)
	}
	var refusedCode string
	testkit.WaitFor(tb, 15*time.Second, "both decisions on the screen", func() bool {
		r := recentSection(s.screen())
		for _, l := range strings.Split(r, "\n") {
			if strings.Contains(l, "/a-refused-read") && strings.Contains(l, "DENY") {
				refusedCode = l
			}
		}
		return strings.Contains(r, "/a-free-read") && strings.Contains(r, "FREE") && refusedCode != ""
	})
	if !strings.Contains(refusedCode, "E_") {
		t.Fatalf("the refusal's line has no code: %q", refusedCode)
	}
	s.keys("f")
	testkit.WaitFor(tb, 10*time.Second, "refused only", func() bool {
		r := recentSection(s.screen())
		return strings.Contains(r, "[refused]") && strings.Contains(r, "/a-refused-read") && !strings.Contains(r, "/a-free-read")
	})
	// An ask refused while the filter is on shows at once; f twice more is all again.
	if r := <-e.send("POST", "/an-ask", "x"); r.code != "E_PENDING" {
		t.Fatalf("the ask: %+v", r)
	}
	testkit.WaitFor(tb, 10*time.Second, "the refused ask", func() bool { return strings.Contains(recentSection(s.screen()), "/an-ask") })
	s.keys("f")
	testkit.WaitFor(tb, 10*time.Second, "asks only", func() bool {
		r := recentSection(s.screen())
		return strings.Contains(r, "[asks]") && strings.Contains(r, "/an-ask") && !strings.Contains(r, "/a-refused-read")
	})
	s.keys("f")
	testkit.WaitFor(tb, 10*time.Second, "all again", func() bool {
		r := recentSection(s.screen())
		return strings.Contains(r, "[all]") && strings.Contains(r, "/a-free-read") && strings.Contains(r, "/a-refused-read")
	})

	// The header names the policy the gate applied: the first one, then an edit.
	short := func(v string) string { return strings.TrimPrefix(v, "sha256:")[:12] }
	first := gateStatus(t, s.up).PolicyVersion
	testkit.WaitFor(tb, 15*time.Second, "the policy in the header", func() bool {
		return strings.Contains(strings.SplitN(s.screen(), "\n", 2)[0], "policy "+short(first))
	})
	orig, _ := os.ReadFile(s.policy)
	os.WriteFile(s.policy, append(orig, []byte("\n# an edit that changes no decision\n")...), 0o600)
	var st gate.Status
	testkit.WaitFor(tb, 15*time.Second, "the gate to apply the edit", func() bool {
		st = gateStatus(t, s.up)
		return st.PolicyVersion != "" && st.PolicyVersion != first
	})
	testkit.WaitFor(tb, 15*time.Second, "the edited policy in the header", func() bool {
		return strings.Contains(strings.SplitN(s.screen(), "\n", 2)[0], "policy "+short(st.PolicyVersion))
	})
	s.quit(t)
}

// TestTerminalKeysInOneBurst sends ":review" and Enter to the terminal UI in one write, as a
// paste or a slow ssh link delivers them: every key is handled, and the command runs.
func TestTerminalKeysInOneBurst(t *testing.T) {
	rec := &originRecorder{}
	o := httptest.NewServer(rec)
	defer o.Close()
	port := o.Listener.Addr().(*net.TCPAddr).Port
	s := startTmuxStack(t, fmt.Sprintf(askPolicy, port, "1s"))
	tb := screenTB{t, s}
	testkit.WaitFor(tb, 15*time.Second, "the terminal UI", func() bool { return strings.Contains(s.screen(), "Pending tickets") })
	s.keys(":review", "Enter") // one send-keys: one write to the terminal
	testkit.WaitFor(tb, 10*time.Second, "the review's answer", func() bool {
		return strings.Contains(s.screen(), "nothing to review")
	})
	s.quit(t)
}

// gateStatus reads the gate's /status on its admin socket.
func gateStatus(t *testing.T, up stack.Up) gate.Status {
	t.Helper()
	var st gate.Status
	resp, err := unixsock.Client(up.GateSocket, 2*time.Second).Get("http://unix/status")
	if err != nil {
		t.Fatalf("gate status: %v", err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("gate status: %v", err)
	}
	return st
}

// TestLoxLogFollowsTheAudit runs lox log -f on a running stack: it prints the last few decisions
// of the day, not the whole day, then each new one as the gate writes it, refusals with their
// code; SIGINT ends it.
func TestLoxLogFollowsTheAudit(t *testing.T) {
	e := startAsk(t, "1s")
	for i := range 12 {
		if st, _ := e.get(t, fmt.Sprintf("http://origin.test:%d/before-%02d", e.port, i)); st != 200 {
			t.Fatalf("request %d: %d", i, st)
		}
	}
	testkit.WaitFor(t, 5*time.Second, "the audit of the requests before", func() bool { return len(e.auditRecords()) >= 12 })
	out := &testkit.Buffer{}
	cmd := execLox(t, "log", "-f", "-n", "3", "--state", e.state)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(done) }()
	defer func() {
		select {
		case <-done:
		default:
			cmd.Process.Kill()
			<-done
		}
	}()
	testkit.WaitFor(t, 10*time.Second, "the last three", func() bool {
		return strings.Contains(out.String(), "/before-09") && strings.Contains(out.String(), "/before-11")
	})
	if strings.Contains(out.String(), "/before-08") || strings.Contains(out.String(), "/before-00") {
		t.Fatalf("lox log -n 3 replayed more of the day:\n%s", out)
	}
	e.get(t, fmt.Sprintf("http://origin.test:%d/after-a-free-read", e.port))
	r := <-e.send("POST", "/after-an-ask", "x")
	testkit.WaitFor(t, 10*time.Second, "the new decisions", func() bool {
		s := out.String()
		return strings.Contains(s, "FREE  200") && strings.Contains(s, "/after-a-free-read") &&
			strings.Contains(s, "ASK   "+r.code) && strings.Contains(s, "/after-an-ask")
	})
	if i, j := strings.Index(out.String(), "/before-11"), strings.Index(out.String(), "/after-a-free-read"); j < i {
		t.Fatalf("out of order:\n%s", out)
	}
	cmd.Process.Signal(os.Interrupt)
	select {
	case <-done:
		if waitErr != nil {
			t.Fatalf("lox log -f after SIGINT: %v\n%s", waitErr, out)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("lox log -f did not end on SIGINT")
	}
}

// hold sends a POST through the gate that waits on a ticket until cancel is called (its client
// goes away) and returns what became of it.
func (e *askEnv) hold(t *testing.T, path, body string) (cancel func(), done <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", fmt.Sprintf("http://origin.test:%d%s", e.port, path), strings.NewReader(body))
		c := (&coreEnv{running: e.running}).client()
		c.Timeout = 2 * time.Minute
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		ch <- err
	}()
	return cancel, ch
}

// TestHeldCountsAfterAStalledHub holds two identical requests ("2 held"), stalls the hub (SIGSTOP
// of the console that hosts it), lets both clients go and sends a third identical request, which
// the gate refuses when the hub does not answer; then the hub goes on and works through what
// reached it meanwhile, the third ask included. The ticket's count comes back to what the gate
// holds, 0, instead of "1 held" until the ticket expires.
func TestHeldCountsAfterAStalledHub(t *testing.T) {
	e := startAsk(t, "120s")
	url := fmt.Sprintf("http://origin.test:%d/held-twice", e.port)
	cancelA, doneA := e.hold(t, "/held-twice", "same")
	cancelB, doneB := e.hold(t, "/held-twice", "same")
	count := func() int {
		for _, x := range e.tickets(t) {
			if x.URL == url {
				return x.Holders
			}
		}
		return -1
	}
	testkit.WaitFor(t, 10*time.Second, "2 held", func() bool { return count() == 2 })
	console, err := os.FindProcess(e.up.PIDs["console"])
	if err != nil {
		t.Fatal(err)
	}
	if err := console.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { console.Signal(syscall.SIGCONT) })
	testkit.WaitFor(t, 5*time.Second, "the console stopped", func() bool {
		data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", console.Pid))
		f := strings.Fields(string(data[min(len(data), strings.LastIndexByte(string(data), ')')+1):]))
		return len(f) > 0 && f[0] == "T"
	})
	cancelA()
	cancelB()
	for _, d := range []<-chan error{doneA, doneB} {
		if err := <-d; err == nil {
			t.Fatal("a cancelled request succeeded")
		}
	}
	gateLog := filepath.Join(e.up.Logs, "gate.log")
	if r := <-e.send("POST", "/held-twice", "same"); r.code != "E_NO_CONSOLE" {
		data, _ := os.ReadFile(gateLog)
		t.Fatalf("an ask while the hub is stalled: %+v, want E_NO_CONSOLE\n%s", r, data)
	}
	testkit.WaitFor(t, 30*time.Second, "the gate's two leaves to fail against the stalled hub", func() bool {
		data, _ := os.ReadFile(gateLog)
		return strings.Count(string(data), "hub: leave failed") >= 2
	})
	if err := console.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, "0 held", func() bool { return count() == 0 })
}
