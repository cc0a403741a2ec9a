package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/gorilla/websocket"

	"github.com/lockhttp/lockhttp/internal/hub"
)

// floodEnv, when set, makes the test binary the flood of TestHubHoldsUnderLoad instead (it
// runs as another uid, before TestMain builds anything): see flood.
const floodEnv = "LOCKHTTP_E2E_HUB_FLOOD"

func init() {
	if spec := os.Getenv(floodEnv); spec != "" {
		os.Exit(flood(spec))
	}
}

// floodSpec is what the flood opens against the hub.
type floodSpec struct {
	Addr   string // the hub's host:port
	Origin string // the phone page's origin, for the slow bodies
	// Requests connections send one request without a token, then stay open (keep-alive);
	// Silent ones send nothing; Slowloris ones send a head a byte at a time, SlowBody ones a
	// body a byte at a time.
	Requests, Silent, Slowloris, SlowBody int
	// Settle is the most the flood waits, once told to stop dialing, for the hub to close all
	// but Allowed of its connections before it counts those still open.
	Settle  time.Duration
	Allowed int
}

// flood is the attacker: a local process of another uid that opens spec's connections to the
// hub, dials again a connection the hub closes (after redial), drips the slow ones, prints
// "ready dialed=N" once all were dialed, and on stdin's end stops dialing and prints "held K of
// N": how many of its connections the hub still had open. It gives up after a minute.
func flood(raw string) int {
	var spec floodSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		fmt.Println("bad spec:", err)
		return 2
	}
	const redial = 500 * time.Millisecond
	heads := map[string]string{
		"request":   "GET /v1/tickets HTTP/1.1\r\nHost: hub\r\n\r\n",
		"silent":    "",
		"slowloris": "GET /v1/tickets HTTP/1.1\r\nHost: hub\r\n",
		"slowbody": "POST /phone/v1/pair HTTP/1.1\r\nHost: hub\r\nOrigin: " + spec.Origin +
			"\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n",
	}
	var kinds []string
	for kind, n := range map[string]int{"request": spec.Requests, "silent": spec.Silent, "slowloris": spec.Slowloris, "slowbody": spec.SlowBody} {
		for range n {
			kinds = append(kinds, kind)
		}
	}
	var (
		stop     atomic.Bool
		open     atomic.Int64 // connections dialed and not yet closed by the hub
		dialed   atomic.Int64
		ready    sync.WaitGroup
		slowMu   sync.Mutex
		slow     = map[net.Conn]bool{} // guarded by slowMu
		sem      = make(chan struct{}, 64)
		deadline = time.Now().Add(time.Minute)
	)
	// One slot per connection: dial, send the head, wait for the hub to close it, dial again.
	slot := func(kind string) {
		first := true
		for !stop.Load() && time.Now().Before(deadline) {
			sem <- struct{}{}
			c, err := net.DialTimeout("tcp", spec.Addr, 2*time.Second)
			<-sem
			if first {
				first = false
				ready.Done()
			}
			if err != nil {
				time.Sleep(redial)
				continue
			}
			dialed.Add(1)
			open.Add(1)
			io.WriteString(c, heads[kind])
			if kind == "slowloris" || kind == "slowbody" {
				slowMu.Lock()
				slow[c] = kind == "slowloris"
				slowMu.Unlock()
			}
			io.Copy(io.Discard, c) // until the hub closes it
			open.Add(-1)
			slowMu.Lock()
			delete(slow, c)
			slowMu.Unlock()
			c.Close()
			time.Sleep(redial)
		}
	}
	ready.Add(len(kinds))
	for _, k := range kinds {
		go slot(k)
	}
	go func() { // drip a byte on every slow connection
		for !stop.Load() {
			time.Sleep(200 * time.Millisecond)
			slowMu.Lock()
			for c, head := range slow {
				if head {
					io.WriteString(c, "X")
				} else {
					io.WriteString(c, " ")
				}
			}
			slowMu.Unlock()
		}
	}()
	ready.Wait()
	fmt.Printf("ready dialed=%d\n", dialed.Load())
	done := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Until(deadline)):
	}
	stop.Store(true)
	settle := time.Now().Add(spec.Settle)
	for open.Load() > int64(spec.Allowed) && time.Now().Before(settle) {
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Printf("held %d of %d\n", open.Load(), dialed.Load())
	return 0
}

// nobody is the uid and gid the flood runs as.
const nobody = 65534

// TestHubHoldsUnderLoad: a local process of another uid floods the hub with a thousand idle
// keep-alive connections (one request without a token each) and some that send nothing, a
// head or a body a byte at a time, dialing again every connection the hub closes. Meanwhile
// `lox tickets --json` answers, the phone page's API and websocket answer a phone paired
// before, and a request the gate holds gets a ticket that `lox approve` releases. At the end
// the hub held no more of the flood's connections than its cap per peer.
//
// The console runs with 1,024 file descriptors (the usual default soft limit; a larger one
// only means a larger flood): without the caps a thousand held connections use them up, and
// the hub accepts nothing more.
func TestHubHoldsUnderLoad(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("this test must run as root in CI: it starts the flood as another uid")
		}
		t.Skip("not root: cannot start the flood as another uid")
	}
	e := startAsk(t, "30s")
	consolePID := e.up.PIDs["console"]
	lim := syscall.Rlimit{Cur: 1024, Max: 1024}
	if _, _, errno := syscall.RawSyscall6(syscall.SYS_PRLIMIT64, uintptr(consolePID), syscall.RLIMIT_NOFILE,
		uintptr(unsafe.Pointer(&lim)), 0, 0, 0); errno != 0 {
		t.Fatalf("prlimit on the console: %v", errno)
	}

	// A phone paired before the flood.
	out, err := e.lox(t, "pair")
	if err != nil {
		t.Fatalf("lox pair: %v\n%s", err, out)
	}
	var origin, pairTok string
	for _, f := range strings.Fields(out) {
		if o, tok, ok := strings.Cut(f, "/phone/#pair="); ok {
			origin, pairTok = o, tok
		}
	}
	if pairTok == "" {
		t.Fatalf("no pairing link in:\n%s", out)
	}
	phone := &http.Client{Timeout: 10 * time.Second}
	phoneDo := func(method, path, token string, body any) (int, []byte, error) {
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, origin+path, rd)
		req.Header.Set("Origin", origin)
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := phone.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		return resp.StatusCode, data, err
	}
	code, data, err := phoneDo("POST", "/phone/v1/pair", "", map[string]string{"token": pairTok, "device": "pixel"})
	var paired struct{ Session string }
	if err != nil || code != 200 || json.Unmarshal(data, &paired) != nil || paired.Session == "" {
		t.Fatalf("pairing: %d %s %v", code, data, err)
	}

	// The flood, as nobody.
	spec := floodSpec{Addr: strings.TrimPrefix(e.up.Hub, "http://"), Origin: origin,
		Requests: 1000, Silent: 20, Slowloris: 20, SlowBody: 20, Settle: 5 * time.Second, Allowed: hub.MaxProbationPerPeer}
	fl := startFlood(t, spec)
	t.Logf("flood: %s; the console has %d descriptors open", fl.line(t), openFDs(consolePID))

	// The facades answer.
	if ts := e.tickets(t); ts == nil {
		t.Fatal("lox tickets --json: no array")
	}
	code, data, err = phoneDo("GET", "/phone/v1/tickets", paired.Session, nil)
	if err != nil || code != 200 {
		t.Fatalf("the phone page's ticket list under the flood: %d %s %v", code, data, err)
	}
	ws, _, err := (&websocket.Dialer{HandshakeTimeout: 10 * time.Second}).Dial(
		"ws"+strings.TrimPrefix(origin, "http")+"/phone/v1/ws", http.Header{"Origin": {origin}})
	if err != nil {
		t.Fatalf("the phone's websocket under the flood: %v", err)
	}
	defer ws.Close()
	ws.WriteJSON(map[string]string{"type": "auth", "token": paired.Session})
	ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, msg, err := ws.ReadMessage(); err != nil || !strings.Contains(string(msg), `"snapshot"`) {
		t.Fatalf("the phone's websocket under the flood: %v %.200s", err, msg)
	}

	// A held request gets a ticket, and a human approves it.
	res := e.send("POST", "/under-load", "payload")
	tk := e.waitTicket(t, fmt.Sprintf("http://origin.test:%d/under-load", e.port))
	if out, err := e.lox(t, "approve", tk.ID); err != nil {
		t.Fatalf("lox approve under the flood: %v\n%s", err, out)
	}
	select {
	case r := <-res:
		if r.err != nil || r.status != 200 || r.body != "origin saw POST /under-load (7 bytes)" {
			t.Fatalf("after approval under the flood: %+v", r)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the approval did not release the held request")
	}
	t.Logf("the console has %d descriptors open", openFDs(consolePID))

	var held, total int
	last := fl.stop(t)
	if _, err := fmt.Sscanf(last, "held %d of %d", &held, &total); err != nil {
		t.Fatalf("flood's last line %q", last)
	}
	t.Logf("flood: %s", last)
	if held > hub.MaxProbationPerPeer {
		t.Errorf("the hub held %d of the flood's connections, want at most %d (its cap per peer)", held, hub.MaxProbationPerPeer)
	}
}

// floodProc is the running flood.
type floodProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
}

// startFlood runs the test binary as nobody with spec and waits for its "ready" line.
func startFlood(t *testing.T, spec floodSpec) *floodProc {
	t.Helper()
	// The test binary lives in a private build directory: copy it where nobody can run it.
	dir, err := os.MkdirTemp("", "lockhttp-flood-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "flood")
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(spec)
	f := &floodProc{cmd: exec.Command(bin), lines: make(chan string, 8)}
	f.cmd.Env = []string{floodEnv + "=" + string(raw)}
	f.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}}
	f.cmd.Stderr = os.Stderr
	if f.stdin, err = f.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := f.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f.lines <- sc.Text()
		}
		close(f.lines)
	}()
	t.Cleanup(func() {
		f.stdin.Close()
		f.cmd.Process.Kill() // by its pid: the flood this test started
		f.cmd.Wait()
	})
	return f
}

// line returns the flood's next line, failing after 30 s.
func (f *floodProc) line(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-f.lines:
		if !ok {
			t.Fatal("the flood exited")
		}
		return l
	case <-time.After(30 * time.Second):
		t.Fatal("no line from the flood within 30s")
	}
	return ""
}

// stop tells the flood to stop dialing and returns its last line.
func (f *floodProc) stop(t *testing.T) string {
	t.Helper()
	f.stdin.Close()
	return f.line(t)
}

// openFDs counts the file descriptors process pid has open.
func openFDs(pid int) int {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(ents)
}
