package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const boundsPolicy = `version = 1
trusted = ["origin.test"]

[[rule]]
name = "uploads"
hosts = ["origin.test"]
methods = ["POST"]
verdict = "free"

[floor]
allow_cidrs = ["127.0.0.1/32"]
allow_ports = [%d]

[floor.hosts]
"origin.test" = "127.0.0.1"

[sources]
local = ["127.0.0.1/32"]
other = ["127.0.0.2/32"]
`

// rssMiB is the resident set of process pid, in MiB.
func rssMiB(t *testing.T, pid int) float64 {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return float64(kb) / 1024
		}
	}
	t.Fatalf("no VmRSS for pid %d", pid)
	return 0
}

// TestBodyAttackBounded: one container opens 40 connections that each send 8 MiB less one byte
// of a POST body and then stall; its neighbour trickles a body at a byte a second and sends
// normal requests. With the shipped bounds (held_per_container 64 MiB, a stall refused after
// 10 s, body_min_rate 1 KiB/s after 5 s) the gate's resident memory stays under 200 MiB, every
// stalled body is refused (E_BODY_TIMEOUT or, past the bound, E_BUSY at once), the trickle is
// refused within seconds (E_BODY_TIMEOUT), nothing refused reaches the origin, and the
// neighbour's normal requests pass throughout.
func TestBodyAttackBounded(t *testing.T) {
	var reached sync.Map
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Store(r.URL.Path, true)
		io.Copy(io.Discard, r.Body)
	}))
	t.Cleanup(origin.Close)
	port := origin.Listener.Addr().(*net.TCPAddr).Port
	e := startStack(t, fmt.Sprintf(boundsPolicy, port))
	gatePID := e.up.PIDs["gate"]
	if gatePID == 0 {
		t.Fatalf("up.json has no gate pid: %+v", e.up.PIDs)
	}
	addr := strings.TrimPrefix(e.up.Gate, "http://")
	before := rssMiB(t, gatePID)

	const conns, size = 40, 8<<20 - 1
	codes := make(chan string, conns)
	// post sends a POST head declaring length bytes from the address from, then the body as
	// send says, and returns the code of the gate's answer.
	post := func(from, path string, length int, send func(c net.Conn)) string {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			return "dial: " + err.Error()
		}
		defer c.Close()
		fmt.Fprintf(c, "POST http://origin.test:%d%s HTTP/1.1\r\nHost: origin.test:%d\r\nContent-Length: %d\r\n\r\n", port, path, port, length)
		go send(c)
		c.SetReadDeadline(time.Now().Add(60 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return "read: " + err.Error()
		}
		resp.Body.Close()
		return resp.Header.Get("X-Lockhttp-Code")
	}
	start := time.Now()
	chunk := make([]byte, 256<<10)
	for i := 0; i < conns; i++ {
		go func(i int) {
			codes <- post("127.0.0.1", fmt.Sprintf("/stall/%d", i), size+1, func(c net.Conn) {
				c.SetWriteDeadline(time.Now().Add(30 * time.Second))
				for sent := 0; sent < size; {
					n, err := c.Write(chunk[:min(len(chunk), size-sent)])
					if err != nil {
						return
					}
					sent += n
				}
				// and stall, holding the connection open
			})
		}(i)
	}
	type trickle struct {
		code string
		took time.Duration
	}
	trickled := make(chan trickle, 1)
	go func() {
		t0 := time.Now()
		code := post("127.0.0.2", "/trickle", 1000, func(c net.Conn) {
			for i := 0; i < 1000; i++ {
				if _, err := c.Write([]byte{'t'}); err != nil {
					return
				}
				time.Sleep(time.Second) // the attack: a byte a second, never a stall
			}
		})
		trickled <- trickle{code, time.Since(t0)}
	}()
	// The neighbour's own requests, while the attack runs.
	u, _ := url.Parse(e.up.Gate)
	neighbour := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(u),
		DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).DialContext}}
	neighbourDone := make(chan error, 1)
	go func() {
		for i := 0; i < 10; i++ {
			resp, err := neighbour.Post(fmt.Sprintf("http://origin.test:%d/neighbour/%d", port, i), "text/plain", strings.NewReader("hello"))
			if err != nil {
				neighbourDone <- err
				return
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				neighbourDone <- fmt.Errorf("neighbour request %d: %d %s", i, resp.StatusCode, resp.Header.Get("X-Lockhttp-Code"))
				return
			}
			time.Sleep(500 * time.Millisecond) // an agent's ordinary pace
		}
		neighbourDone <- nil
	}()

	peak := before
	got := map[string]int{}
	deadline := time.After(60 * time.Second)
	for n := 0; n < conns; {
		select {
		case code := <-codes:
			got[code]++
			n++
		case <-time.After(100 * time.Millisecond):
			peak = max(peak, rssMiB(t, gatePID))
		case <-deadline:
			t.Fatalf("after 60s only %d answers: %v", n, got)
		}
	}
	took := time.Since(start)
	tr := <-trickled
	t.Logf("gate RSS %.1f MiB before, %.1f MiB at peak; answers %v in %s; trickle %s after %s", before, peak, got, took.Round(time.Millisecond), tr.code, tr.took.Round(time.Millisecond))
	if peak > 200 {
		t.Errorf("the gate's RSS reached %.1f MiB under the attack, over 200 MiB", peak)
	}
	if got["E_BODY_TIMEOUT"]+got["E_BUSY"] != conns || got["E_BODY_TIMEOUT"] == 0 || got["E_BUSY"] == 0 {
		t.Errorf("answers %v: want every body refused, E_BUSY past the bound", got)
	}
	if tr.code != "E_BODY_TIMEOUT" || tr.took > 15*time.Second {
		t.Errorf("the trickle: %s after %s, want E_BODY_TIMEOUT within 15s", tr.code, tr.took)
	}
	if err := <-neighbourDone; err != nil {
		t.Errorf("the neighbour's requests during the attack: %v", err)
	}
	if took > 40*time.Second {
		t.Errorf("the bodies were held %s", took)
	}
	reached.Range(func(k, _ any) bool {
		if !strings.HasPrefix(k.(string), "/neighbour/") {
			t.Errorf("%v reached the origin", k)
		}
		return true
	})
	// The gate is itself again for the container that attacked.
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u)}, Timeout: 10 * time.Second}
	resp, err := c.Post(fmt.Sprintf("http://origin.test:%d/after", port), "text/plain", strings.NewReader("fine"))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("after the attack: %v %v", resp, err)
	}
	resp.Body.Close()
}

// TestPendingTicketsBounded: a container with max_pending tickets waiting gets E_ASK_LIMIT (429,
// Retry-After) at once for a request that would open another, without a ticket; its neighbour
// still asks, and once a human answers one the container may ask again.
func TestPendingTicketsBounded(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(origin.Close)
	port := origin.Listener.Addr().(*net.TCPAddr).Port
	pol := strings.Replace(fmt.Sprintf(boundsPolicy, port), `verdict = "free"`, `verdict = "ask"`, 1) +
		"\n[settings]\nhold = \"1s\"\nmax_pending = 2\n"
	e := startStack(t, pol)
	ask := &askEnv{running: e}
	u, _ := url.Parse(e.up.Gate)
	client := func(from string) *http.Client {
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(u),
			DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}).DialContext}}
	}
	send := func(from string, i int) *http.Response {
		t.Helper()
		resp, err := client(from).Post(fmt.Sprintf("http://origin.test:%d/w/%d", port, i), "text/plain", strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	for i := 0; i < 2; i++ {
		if r := send("127.0.0.1", i); r.Header.Get("X-Lockhttp-Code") != "E_PENDING" {
			t.Fatalf("ask %d: %d %s", i, r.StatusCode, r.Header.Get("X-Lockhttp-Code"))
		}
	}
	start := time.Now()
	r := send("127.0.0.1", 2)
	if r.StatusCode != http.StatusTooManyRequests || r.Header.Get("X-Lockhttp-Code") != "E_ASK_LIMIT" || r.Header.Get("Retry-After") == "" || r.Header.Get("X-Lockhttp-Ticket") != "" {
		t.Fatalf("a third ask: %d %s Retry-After %q ticket %q", r.StatusCode, r.Header.Get("X-Lockhttp-Code"), r.Header.Get("Retry-After"), r.Header.Get("X-Lockhttp-Ticket"))
	}
	if time.Since(start) > 900*time.Millisecond {
		t.Errorf("E_ASK_LIMIT came after %s: it was held", time.Since(start))
	}
	if r := send("127.0.0.2", 0); r.Header.Get("X-Lockhttp-Code") != "E_PENDING" {
		t.Fatalf("the neighbour's ask: %d %s", r.StatusCode, r.Header.Get("X-Lockhttp-Code"))
	}
	ts := ask.tickets(t)
	if len(ts) != 3 {
		t.Fatalf("%d pending tickets, want 3: %+v", len(ts), ts)
	}
	var id string
	for _, tk := range ts {
		if tk.Container == "local" {
			id = tk.ID
		}
	}
	if out, err := ask.lox(t, "deny", id, "--reason", "not now"); err != nil {
		t.Fatalf("lox deny: %v\n%s", err, out)
	}
	if r := send("127.0.0.1", 3); r.Header.Get("X-Lockhttp-Code") != "E_PENDING" {
		t.Fatalf("after a decision: %d %s", r.StatusCode, r.Header.Get("X-Lockhttp-Code"))
	}
}

// TestLoxTicketsPages: 120 held requests with 40 KB URLs make about 5 MB of tickets; lox tickets
// reads them a page at a time and lists every one (one answer of that size was cut off).
func TestLoxTicketsPages(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(origin.Close)
	port := origin.Listener.Addr().(*net.TCPAddr).Port
	pol := strings.Replace(fmt.Sprintf(boundsPolicy, port), `verdict = "free"`, `verdict = "ask"`, 1) +
		"\n[settings]\nhold = \"1s\"\nmax_pending = 200\n"
	e := startStack(t, pol)
	ask := &askEnv{running: e}
	u, _ := url.Parse(e.up.Gate)
	c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(u), MaxConnsPerHost: 64}}
	const n = 120
	var wg sync.WaitGroup
	var mu sync.Mutex
	answers := map[string]int{}
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			resp, err := c.Post(fmt.Sprintf("http://origin.test:%d/w/%d/%s", port, i, strings.Repeat("p", 40<<10)), "text/plain", strings.NewReader("x"))
			a := "error"
			if err == nil {
				a = resp.Header.Get("X-Lockhttp-Code")
				resp.Body.Close()
			}
			mu.Lock()
			answers[a]++
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	if answers["E_PENDING"] != n {
		logs, _ := os.ReadFile(e.up.Logs + "/gate.log")
		var hubLines []string
		for _, l := range strings.Split(string(logs), "\n") {
			if strings.Contains(l, "hub") {
				hubLines = append(hubLines, l)
			}
		}
		t.Fatalf("answers %v, want %d E_PENDING; the gate's hub lines:\n%s", answers, n, strings.Join(hubLines, "\n"))
	}
	ts := ask.tickets(t)
	if len(ts) != n {
		t.Fatalf("lox tickets --json lists %d tickets, want %d", len(ts), n)
	}
	out, err := ask.lox(t, "tickets")
	// The head, a line per ticket, and the note on tickets with no request held (all of them:
	// each was answered E_PENDING).
	if err != nil || strings.Count(out, "\n") != n+2 || !strings.Contains(out, "HELD 0: no request waits on the ticket now") {
		t.Fatalf("lox tickets: %v, %d lines", err, strings.Count(out, "\n"))
	}
}
