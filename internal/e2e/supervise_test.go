package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/gate"
	"github.com/lockhttp/lockhttp/internal/stack"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// supervisePolicy: plain.test (plain HTTP, its reads free, its POSTs asked) and warm.test and
// the cold-N.test names (decrypted, their reads free), all on the loopback origins.
const supervisePolicy = `version = 1
trusted = ["plain.test", "warm.test", %[3]s]

[[rule]]
name = "ask-posts"
hosts = ["plain.test"]
methods = ["POST"]
verdict = "ask"

[floor]
allow_cidrs = ["127.0.0.1/32"]
allow_ports = [%[1]d, %[2]d]

[floor.hosts]
"plain.test" = "127.0.0.1"
"warm.test" = "127.0.0.1"
%[4]s
[sources]
local = ["127.0.0.0/8"]

[settings]
hold = "1s"
`

// coldNames are decrypted hosts the gate has no certificate for until a request needs one: each
// needs the signer once.
const coldNames = 40

// superviseEnv is a stack under load: plain-HTTP reads through the gate and a loop of decrypted
// reads, with what every client saw.
type superviseEnv struct {
	*running
	origin    *originRecorder
	plainPort int
	tlsPort   int
	caPool    *x509.CertPool
	seen      *clientSeen
	nextCold  int
}

// clientSeen is what the clients saw: every request id the gate answered with (a response the
// client read in full, or a refused CONNECT), and the paths of requests that got no answer (the
// gate went away under them).
type clientSeen struct {
	mu       sync.Mutex
	ids      map[string]string // request id → the request, for the failure message
	tunnels  []string          // the request ids of the CONNECTs that opened a tunnel, in order
	noAnswer map[string]bool   // paths
	answered map[string]int    // "plain", "tunnel": responses read in full
}

func newClientSeen() *clientSeen {
	return &clientSeen{ids: map[string]string{}, noAnswer: map[string]bool{}, answered: map[string]int{}}
}

func (s *clientSeen) answer(kind, id, what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answered[kind]++
	if id != "" {
		s.ids[id] = what
	}
}

func (s *clientSeen) tunnel(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tunnels = append(s.tunnels, id)
}

func (s *clientSeen) lost(path string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noAnswer[path] = true
}

func (s *clientSeen) count(kind string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.answered[kind]
}

func startSupervise(t *testing.T, flags ...string) *superviseEnv {
	t.Helper()
	rec := &originRecorder{}
	plain := httptest.NewServer(rec)
	t.Cleanup(plain.Close)
	pki := newTestPKI(t)
	names := []string{"warm.test"}
	var trusted, hosts []string
	for i := range coldNames {
		n := fmt.Sprintf("cold-%d.test", i)
		names = append(names, n)
		trusted = append(trusted, fmt.Sprintf("%q", n))
		hosts = append(hosts, fmt.Sprintf("%q = \"127.0.0.1\"", n))
	}
	_, tlsPort := tlsOrigin(t, rec, pki.leaf(t, names, time.Now().Add(24*time.Hour), false))
	plainPort := plain.Listener.Addr().(*net.TCPAddr).Port
	pol := fmt.Sprintf(supervisePolicy, plainPort, tlsPort, strings.Join(trusted, ", "), strings.Join(hosts, "\n"))
	r := startStackWith(t, pol, append([]string{"--roots", pki.rootPEM}, flags...), nil)
	data, err := os.ReadFile(r.up.CACert)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(data)
	return &superviseEnv{running: r, origin: rec, plainPort: plainPort, tlsPort: tlsPort, caPool: pool, seen: newClientSeen()}
}

func (e *superviseEnv) proxyURL() *url.URL {
	u, _ := url.Parse(e.up.Gate)
	return u
}

// plainClient sends each request on a connection of its own: no request is retried by the
// transport on another connection, so the origin sees each at most once.
func (e *superviseEnv) plainClient() *http.Client {
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(e.proxyURL()), DisableKeepAlives: true}, Timeout: 15 * time.Second}
}

// connectKey carries a request's connectSeen to the transport's OnProxyConnectResponse.
type connectKey struct{}

type connectSeen struct {
	status   int
	id, code string
}

// tlsClient opens a tunnel (a CONNECT) for each request, trusting the lockhttp CA, and tells
// the request's connectSeen what the gate answered to the CONNECT.
func (e *superviseEnv) tlsClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy: http.ProxyURL(e.proxyURL()), DisableKeepAlives: true, TLSClientConfig: &tls.Config{RootCAs: e.caPool},
		OnProxyConnectResponse: func(ctx context.Context, _ *url.URL, _ *http.Request, resp *http.Response) error {
			if cs, ok := ctx.Value(connectKey{}).(*connectSeen); ok {
				cs.status, cs.id, cs.code = resp.StatusCode, resp.Header.Get(gate.HeaderRequest), resp.Header.Get(gate.HeaderCode)
			}
			return nil
		},
	}, Timeout: 15 * time.Second}
}

// outcome is one request's answer as a client saw it.
type outcome struct {
	status   int
	id, code string
	body     string
	err      error // no answer, or an answer cut short
	connect  connectSeen
}

// get sends GET rawURL with c and records what it saw: kind "plain" or "tunnel".
func (e *superviseEnv) get(c *http.Client, kind, rawURL string) outcome {
	cs := &connectSeen{}
	req, _ := http.NewRequestWithContext(context.WithValue(context.Background(), connectKey{}, cs), "GET", rawURL, nil)
	return e.do(c, kind, req, cs)
}

func (e *superviseEnv) do(c *http.Client, kind string, req *http.Request, cs *connectSeen) outcome {
	path := req.URL.Path
	resp, err := c.Do(req)
	o := outcome{connect: *cs}
	if cs.id != "" {
		if cs.status == http.StatusOK {
			e.seen.tunnel(cs.id)
		} else {
			e.seen.answer("connect-refused", cs.id, fmt.Sprintf("CONNECT %s: %d %s", req.URL.Host, cs.status, cs.code))
		}
	}
	if err != nil {
		e.seen.lost(path)
		o.err = err
		return o
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	o.status, o.id, o.code, o.body = resp.StatusCode, resp.Header.Get(gate.HeaderRequest), resp.Header.Get(gate.HeaderCode), string(body)
	if err != nil {
		e.seen.lost(path)
		o.err = err
		return o
	}
	e.seen.answer(kind, o.id, fmt.Sprintf("%s %s: %d %s", req.Method, req.URL, o.status, o.code))
	return o
}

// load runs plain reads in plainWorkers goroutines and decrypted reads of warm.test in one,
// each at most one request every loadEvery, until the returned stop is called; stop returns
// once they all have.
func (e *superviseEnv) load(plainWorkers int) (stop func()) {
	const loadEvery = 5 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	worker := func(f func(n int)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(loadEvery)
			defer tick.Stop()
			for n := 0; ; n++ {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				f(n)
			}
		}()
	}
	for w := range plainWorkers {
		c := e.plainClient()
		worker(func(n int) { e.get(c, "plain", fmt.Sprintf("http://plain.test:%d/load/p%d/%d", e.plainPort, w, n)) })
	}
	tc := e.tlsClient()
	worker(func(n int) { e.get(tc, "tunnel", fmt.Sprintf("https://warm.test:%d/load/t/%d", e.tlsPort, n)) })
	return func() { cancel(); wg.Wait() }
}

// pids reads up.json's pids.
func (e *superviseEnv) pids(t *testing.T) map[string]int {
	t.Helper()
	var up stack.Up
	data, err := os.ReadFile(filepath.Join(e.state, stack.UpFile))
	if err != nil || json.Unmarshal(data, &up) != nil {
		return nil
	}
	return up.PIDs
}

// tallies reads up.json's restarts, as JSON: process → {"count": N, …}.
func (e *superviseEnv) tallies(t *testing.T) map[string]map[string]any {
	t.Helper()
	var up struct {
		Restarts map[string]map[string]any `json:"restarts"`
	}
	data, _ := os.ReadFile(filepath.Join(e.state, stack.UpFile))
	json.Unmarshal(data, &up)
	return up.Restarts
}

// restarted waits until up.json names a new pid for name, alive, and returns it.
func (e *superviseEnv) restarted(t *testing.T, name string, old int) int {
	t.Helper()
	var pid int
	testkit.WaitFor(t, 20*time.Second, "up.json to name the restarted "+name, func() bool {
		select {
		case <-e.done:
			t.Fatalf("lox exited instead of restarting the %s:\n%s", name, e.out)
		default:
		}
		pid = e.pids(t)[name]
		return pid != 0 && pid != old && alive(pid)
	})
	return pid
}

// cold is a decrypted host no request has needed a certificate for yet.
func (e *superviseEnv) cold(t *testing.T) string {
	t.Helper()
	if e.nextCold >= coldNames {
		t.Fatal("out of cold names: raise coldNames")
	}
	e.nextCold++
	return fmt.Sprintf("cold-%d.test", e.nextCold-1)
}

// rawConnect sends a CONNECT to host and returns the gate's answer to it.
func (e *superviseEnv) rawConnect(t *testing.T, host string) (*http.Response, error) {
	t.Helper()
	c, err := net.Dial("tcp", e.up.Listen)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n", host, e.tlsPort, host, e.tlsPort)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: "CONNECT"})
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	if id := resp.Header.Get(gate.HeaderRequest); id != "" && resp.StatusCode != http.StatusOK {
		e.seen.answer("connect-refused", id, fmt.Sprintf("CONNECT %s: %d %s", host, resp.StatusCode, resp.Header.Get(gate.HeaderCode)))
	}
	return resp, nil
}

// reached says whether the origin saw a request for path.
func (e *superviseEnv) reached(path string) bool {
	for _, r := range e.origin.all() {
		if r.Path == path {
			return true
		}
	}
	return false
}

// kill SIGKILLs the stack's process name and returns its pid.
func (e *superviseEnv) kill(t *testing.T, name string) int {
	t.Helper()
	pid := e.pids(t)[name]
	if pid == 0 || !alive(pid) {
		t.Fatalf("no live %s in up.json: %v", name, e.pids(t))
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	return pid
}

// TestSuperviseKillEachChildUnderLoad SIGKILLs the signer, the console and the gate in turn
// while clients send plain reads and decrypted reads through the gate. While a process is down,
// what needs it is refused (a host not yet decrypted: E_NO_SIGNER; an ask: E_NO_CONSOLE; with
// the gate, nothing is answered), and never reaches the origin; lox restarts it within a few
// seconds and what needs it passes again; up.json names the new pids; no audit record is lost:
// every request id a client saw is in the gate's audit, and every request that reached the
// origin has its record unless its client got no answer (the gate died under it). The console
// audits each restart, and the doctor names them.
func TestSuperviseKillEachChildUnderLoad(t *testing.T) {
	e := startSupervise(t, "--restart-delay", "1s")
	first := e.pids(t)
	stopLoad := e.load(3)
	loadStopped := false
	defer func() {
		if !loadStopped {
			stopLoad()
		}
	}()
	testkit.WaitFor(t, 20*time.Second, "the load to pass", func() bool {
		return e.seen.count("plain") >= 10 && e.seen.count("tunnel") >= 5
	})
	tc := e.tlsClient()

	t.Run("signer", func(t *testing.T) {
		e.kill(t, "signer")
		// A host the gate holds no certificate for is refused while the signer is down, and
		// never spliced: nothing reaches the origin.
		var refusedHost string
		testkit.WaitFor(t, 10*time.Second, "a cold host refused with E_NO_SIGNER", func() bool {
			host := e.cold(t)
			resp, err := e.rawConnect(t, host)
			if err != nil {
				t.Fatalf("CONNECT %s: %v", host, err)
			}
			if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get(gate.HeaderCode) == "E_NO_SIGNER" {
				refusedHost = host
				return true
			}
			return false
		})
		pid := e.restarted(t, "signer", first["signer"])
		testkit.WaitFor(t, 10*time.Second, "the refused host decrypted again", func() bool {
			o := e.get(tc, "tunnel", fmt.Sprintf("https://%s:%d/after-signer", refusedHost, e.tlsPort))
			return o.err == nil && o.status == 200 && o.body == "origin saw GET /after-signer (0 bytes)"
		})
		t.Logf("signer restarted: pid %d → %d", first["signer"], pid)
	})

	t.Run("console", func(t *testing.T) {
		e.kill(t, "console")
		c := e.plainClient()
		ask := func(path string) outcome {
			req, _ := http.NewRequest("POST", fmt.Sprintf("http://plain.test:%d%s", e.plainPort, path), strings.NewReader("x"))
			return e.do(c, "plain", req, &connectSeen{})
		}
		// An ask is refused at once while no hub is there to ask a human.
		n := 0
		testkit.WaitFor(t, 10*time.Second, "an ask refused with E_NO_CONSOLE", func() bool {
			n++
			o := ask(fmt.Sprintf("/ask-while-down/%d", n))
			return o.err == nil && o.status == 403 && o.code == "E_NO_CONSOLE"
		})
		pid := e.restarted(t, "console", first["console"])
		// Once the console is back, an ask reaches a human again: held on a ticket (E_PENDING
		// after the 1s hold), not refused for want of a console.
		testkit.WaitFor(t, 15*time.Second, "an ask held on a ticket again", func() bool {
			n++
			o := ask(fmt.Sprintf("/ask-after/%d", n))
			return o.err == nil && o.code == "E_PENDING"
		})
		for _, r := range e.origin.all() {
			if strings.HasPrefix(r.Path, "/ask-") {
				t.Errorf("an asked request reached the origin: %s", r.Path)
			}
		}
		t.Logf("console restarted: pid %d → %d", first["console"], pid)
	})

	t.Run("gate", func(t *testing.T) {
		e.kill(t, "gate")
		testkit.WaitFor(t, 10*time.Second, "the proxy address refusing connections", func() bool {
			c, err := net.DialTimeout("tcp", e.up.Listen, time.Second)
			if err != nil {
				return true
			}
			c.Close()
			return false
		})
		pid := e.restarted(t, "gate", first["gate"])
		c := e.plainClient()
		n := 0
		testkit.WaitFor(t, 10*time.Second, "a plain read through the restarted gate, on the same address", func() bool {
			n++
			o := e.get(c, "plain", fmt.Sprintf("http://plain.test:%d/after-gate/%d", e.plainPort, n))
			return o.err == nil && o.status == 200
		})
		testkit.WaitFor(t, 10*time.Second, "a decrypted read through the restarted gate", func() bool {
			n++
			o := e.get(tc, "tunnel", fmt.Sprintf("https://warm.test:%d/after-gate/%d", e.tlsPort, n))
			return o.err == nil && o.status == 200
		})
		t.Logf("gate restarted: pid %d → %d", first["gate"], pid)
	})

	// The load goes on over the restarts; then every answer is accounted for.
	before := e.seen.count("plain") + e.seen.count("tunnel")
	testkit.WaitFor(t, 10*time.Second, "the load to pass after the restarts", func() bool {
		return e.seen.count("plain")+e.seen.count("tunnel") > before+10
	})
	stopLoad()
	loadStopped = true

	t.Run("no audit record lost", func(t *testing.T) {
		var missing []string
		var ids map[string]int
		defer func() {
			if len(missing) > 0 {
				sort.Strings(missing)
				t.Errorf("%d request ids clients saw are not in the gate's audit: %s", len(missing), strings.Join(missing, ", "))
			}
		}()
		testkit.WaitFor(t, 10*time.Second, "every request id a client saw in the audit", func() bool {
			ids = testkit.AuditIDs(t, e.up.AuditDir) // a summary of refusals lists their ids
			missing = missing[:0]
			e.seen.mu.Lock()
			defer e.seen.mu.Unlock()
			for id, what := range e.seen.ids {
				if ids[id] == 0 {
					missing = append(missing, id+" ("+what+")")
				}
			}
			return len(missing) == 0
		})
		e.seen.mu.Lock()
		t.Logf("%d plain and %d decrypted answers, %d refused CONNECTs: %d request ids, all in the audit; %d requests got no answer",
			e.seen.answered["plain"], e.seen.answered["tunnel"], e.seen.answered["connect-refused"], len(e.seen.ids), len(e.seen.noAnswer))
		// A tunnel's CONNECT is recorded when the gate has seen the tunnel close: one the
		// killed gate still held open has none (the request inside it has its own, above). The
		// decrypted loop opens one tunnel after the other: only the last few the killed gate
		// opened may lack a record, and none of another gate's.
		killed := strings.SplitAfter(e.seen.tunnels[0], "-")[0]
		var byKilled []string
		for _, id := range e.seen.tunnels {
			if strings.HasPrefix(id, killed) {
				byKilled = append(byKilled, id)
			}
		}
		// The last tunnel a gate opened may still be open when the audit is read (its CONNECT
		// is recorded when it closes).
		lastOf := map[string]string{}
		for _, id := range e.seen.tunnels {
			lastOf[strings.SplitAfter(id, "-")[0]] = id
		}
		var tunnelsMissing []string
		for i, id := range e.seen.tunnels {
			if ids[id] > 0 {
				continue
			}
			tunnelsMissing = append(tunnelsMissing, id)
			if lastOf[strings.SplitAfter(id, "-")[0]] == id {
				continue
			}
			if !strings.HasPrefix(id, killed) || slices.Index(byKilled, id) < len(byKilled)-3 {
				t.Errorf("the CONNECT %s (tunnel %d of %d) has no record, and it is not one of the last the killed gate opened", id, i+1, len(e.seen.tunnels))
			}
		}
		e.seen.mu.Unlock()
		t.Logf("%d CONNECT ids of tunnels the killed gate held open, without a record: %s", len(tunnelsMissing), strings.Join(tunnelsMissing, ", "))
		// What reached the origin has its record, or at least its intent (written before the
		// request's first byte left): a request the origin had when the gate was killed has its
		// intent alone, and its client no answer.
		recorded, intended := map[string]bool{}, map[string]bool{}
		for _, m := range testkit.AuditAll(t, e.up.AuditDir) {
			if u, err := url.Parse(fmt.Sprint(m["url"])); err == nil && m["event"] != "connect" {
				if m["event"] == "intent" {
					intended[u.Path] = true
				} else {
					recorded[u.Path] = true
				}
			}
		}
		var unseen []string
		cut := 0
		for _, r := range e.origin.all() {
			switch {
			case recorded[r.Path]:
			case intended[r.Path]:
				cut++
			default:
				unseen = append(unseen, r.Path)
			}
		}
		t.Logf("%d requests reached the origin, %d of them with their intent alone: in flight when the gate was killed", len(e.origin.all()), cut)
		if len(unseen) > 0 {
			sort.Strings(unseen)
			t.Errorf("%d requests reached the origin with no audit record and no intent: %s", len(unseen), strings.Join(unseen, ", "))
		}
	})

	t.Run("restarts recorded", func(t *testing.T) {
		now := e.pids(t)
		for _, name := range []string{"signer", "console", "gate"} {
			if now[name] == first[name] || !alive(now[name]) {
				t.Errorf("up.json's %s pid %d (was %d): not the live restarted one", name, now[name], first[name])
			}
			if alive(first[name]) {
				t.Errorf("the killed %s (pid %d) still runs", name, first[name])
			}
			tl := e.tallies(t)[name]
			if tl["count"] != float64(1) || tl["exit"] != "signal: killed" {
				t.Errorf("up.json's restarts of the %s: %v, want count 1, exit \"signal: killed\"", name, tl)
			}
			if want := fmt.Sprintf("lox: restarted the %s: pid %d (restart 1 since the stack started)", name, now[name]); !strings.Contains(e.out.String(), want) {
				t.Errorf("lox's output lacks %q:\n%s", want, e.out)
			}
		}
		// The console's audit has each restart, the console's own once it was back.
		testkit.WaitFor(t, 10*time.Second, "the three restarts in the console's audit", func() bool {
			got := consoleRestarts(t, e.up.ConsoleAudit)
			return len(got) == 3 && got[0]["rule"] == "signer" && got[1]["rule"] == "console" && got[2]["rule"] == "gate"
		})
		for _, m := range consoleRestarts(t, e.up.ConsoleAudit) {
			d := fmt.Sprint(m["detail"])
			if !strings.Contains(d, "exited (signal: killed)") || !strings.Contains(d, "lox restarted it as pid") || m["event"] != "restart" {
				t.Errorf("console audit record %v", m)
			}
		}
		out, _ := runDoctor(t, "--state", e.state)
		for _, name := range []string{"signer", "console", "gate"} {
			if !hasLine(out, "WARN", "restarts", fmt.Sprintf("the %s restarted once since the stack started", name)) ||
				!strings.Contains(out, filepath.Join(e.up.Logs, name+".log")) {
				t.Errorf("the doctor has no restarts line for the %s:\n%s", name, out)
			}
		}
	})
}

// consoleRestarts are the console audit's restart records, in order.
func consoleRestarts(t *testing.T, dir string) []map[string]any {
	t.Helper()
	r := &running{t: t, up: stack.Up{AuditDir: dir}}
	var out []map[string]any
	for _, m := range r.auditRecords() {
		if ev, _ := m["event"].(string); strings.HasPrefix(ev, "restart") {
			out = append(out, m)
		}
	}
	return out
}

// TestSuperviseCrashLoopStopsTheStack: a signer that cannot start again (its CA key file was
// damaged after the stack came up) is restarted with backoff until it has exited five times
// within a minute; then lox stops the stack, exits non-zero and prints the signer's last lines
// with the fix. The console's audit records that lox gave up.
func TestSuperviseCrashLoopStopsTheStack(t *testing.T) {
	r := startStackWith(t, minimalPolicy, []string{"--restart-delay", "50ms"}, nil)
	pids := r.up.PIDs
	key := filepath.Join(filepath.Dir(r.up.CACert), "ca-key.pem")
	if err := os.WriteFile(key, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	syscall.Kill(pids["signer"], syscall.SIGKILL)
	select {
	case <-r.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("lox still runs a minute after its signer started crashing:\n%s", r.out)
	}
	out := r.out.String()
	if code := r.cmd.ProcessState.ExitCode(); code == 0 {
		t.Errorf("lox exited 0 after giving up on its signer:\n%s", out)
	}
	for _, want := range []string{
		"lox: the signer (pid " + fmt.Sprint(pids["signer"]) + ") exited (signal: killed); restarting it in 50ms (exit 1 within 1m0s",
		"exited (exit status 1); restarting it in 100ms (exit 2 within 1m0s",
		"restarting it in 400ms (exit 4 within 1m0s",
		"lox: the signer exited 5 times within 1m0s (the last time: exit status 1): lox stopped the stack; the last lines of " + filepath.Join(r.up.Logs, "signer.log") + ":",
		"  | signer serve: load CA: " + key,
		"fix: the CA in " + filepath.Dir(r.up.CACert) + " does not load: restore ca.pem and ca-key.pem together from your backup",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "restarted the signer") {
		t.Errorf("a signer that cannot load its CA was reported up:\n%s", out)
	}
	for name, pid := range pids {
		if name != "lox" && alive(pid) {
			t.Errorf("the %s (pid %d) outlived the stack", name, pid)
		}
	}
	if _, err := os.Stat(filepath.Join(r.state, stack.UpFile)); !os.IsNotExist(err) {
		t.Errorf("up.json left behind: %v", err)
	}
	got := consoleRestarts(t, r.up.ConsoleAudit)
	if len(got) != 1 || got[0]["event"] != "restart-limit" || got[0]["rule"] != "signer" ||
		!strings.Contains(fmt.Sprint(got[0]["detail"]), "it exited 5 times within 1m0s: lox stopped the stack") ||
		!strings.Contains(fmt.Sprint(got[0]["detail"]), "ca-key.pem") {
		t.Errorf("the console's audit: %v", got)
	}
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "restarting it in") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 4 {
		t.Errorf("%d restarts tried, want 4 (the fifth exit stops the stack):\n%s", len(lines), out)
	}
}

// TestSuperviseAgentCommand: with -- COMMAND, a process of the stack that dies is restarted
// while the command runs on; one that keeps crashing stops the stack, the command gets SIGTERM
// and lox exits 125 with the process's last lines.
func TestSuperviseAgentCommand(t *testing.T) {
	requireRoot(t)
	const uid = stack.DefaultAgentUID
	if pids := processesOf(uid); len(pids) > 0 {
		t.Fatalf("uid %d already runs %v: the test needs it free", uid, pids)
	}
	t.Cleanup(func() {
		for _, pid := range processesOf(uid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	base := t.TempDir()
	for _, d := range []string{filepath.Dir(base), base} {
		os.Chmod(d, 0o711)
	}
	tmp := filepath.Join(base, "tmp")
	os.Mkdir(tmp, 0o711)
	os.Chmod(tmp, 0o711)
	state := filepath.Join(base, "state")
	pol := filepath.Join(base, "policy.toml")
	os.WriteFile(pol, []byte(minimalPolicy), 0o600)
	script := `trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 0.1; done`
	l := startAgentLox(t, tmp, "run", "--headless", "--state", state, "--policy", pol, "--listen", "127.0.0.1:0",
		"--hub-listen", "127.0.0.1:0", "--restart-delay", "50ms", "--", "sh", "-c", script)
	testkit.WaitFor(t, 60*time.Second, "the command to start", func() bool { return strings.Contains(l.stdout.String(), "ready") })
	e := &superviseEnv{running: &running{t: t, state: state, done: l.done, out: l.stderr}}
	// lox writes the command's pid once the command has started: it can print before that.
	var first map[string]int
	testkit.WaitFor(t, 10*time.Second, "the command's pid in up.json", func() bool {
		first = e.pids(t)
		return first["agent"] != 0
	})
	e.kill(t, "gate")
	e.restarted(t, "gate", first["gate"])
	if !alive(first["agent"]) || strings.Contains(l.stdout.String(), "got-term") {
		t.Fatalf("the command did not run on over the gate's restart:\nstdout:\n%s\nstderr:\n%s", l.stdout, l.stderr)
	}
	up := e.pids(t)
	if up["agent"] != first["agent"] {
		t.Errorf("up.json's agent pid %d, was %d", up["agent"], first["agent"])
	}
	os.WriteFile(filepath.Join(state, "ca", "ca-key.pem"), []byte("not a key\n"), 0o600)
	e.kill(t, "signer")
	code := l.wait(t, 60*time.Second)
	if code != 125 || !strings.Contains(l.stdout.String(), "got-term") {
		t.Errorf("exit %d, want 125 with the command stopped by SIGTERM\nstdout:\n%s\nstderr:\n%s", code, l.stdout, l.stderr)
	}
	for _, want := range []string{"lox: the signer exited 5 times within 1m0s", "signer.log:", "  | signer serve: load CA:"} {
		if !strings.Contains(l.stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, l.stderr)
		}
	}
	testkit.WaitFor(t, 10*time.Second, "the stack's processes gone", func() bool {
		return !slices.ContainsFunc([]string{"signer", "console", "gate"}, func(n string) bool { return alive(up[n]) })
	})
}

// TestSuperviseShowsRestartsInTheTerminal runs lox run with its terminal UI in tmux: a gate that
// is killed comes back, and the terminal's header counts the restart and its recent decisions
// show it; a console that is killed comes back on the same terminal, with the restarts so far
// in its header; q still stops the stack.
func TestSuperviseShowsRestartsInTheTerminal(t *testing.T) {
	tmux := requireTool(t, "tmux")
	state := t.TempDir()
	pol := filepath.Join(state, "policy.toml")
	os.WriteFile(pol, []byte(minimalPolicy), 0o600)
	s := &tmuxStack{tmux: tmux, session: fmt.Sprintf("lockhttp-e2e-%d", time.Now().UnixNano()), state: state, policy: pol}
	cmdline := fmt.Sprintf("%s run --state %s --policy %s --listen 127.0.0.1:0 --hub-listen 127.0.0.1:0 --restart-delay 200ms; echo lox-exited-$?; sleep 60",
		filepath.Join(binDir, "lox"), state, pol)
	newTmuxSession(t, tmux, s.session, "180x50", cmdline)
	t.Cleanup(func() { exec.Command(tmux, "kill-session", "-t", s.session).Run() })
	tb := screenTB{t, s}
	e := &superviseEnv{running: &running{t: t, state: state, done: make(chan struct{}), out: &testkit.Buffer{}}}
	testkit.WaitFor(tb, 30*time.Second, "up.json", func() bool { return e.pids(t) != nil })
	header := func() string { return strings.SplitN(s.screen(), "\n", 2)[0] }
	testkit.WaitFor(tb, 15*time.Second, "the gate reporting", func() bool { return strings.Contains(header(), "gate ok") })
	first := e.pids(t)

	e.kill(t, "gate")
	gatePID := e.restarted(t, "gate", first["gate"])
	testkit.WaitFor(tb, 15*time.Second, "the gate's restart in the header and the recent decisions", func() bool {
		r := recentSection(s.screen())
		return strings.Contains(header(), "restarted gate 1") && strings.Contains(r, "RESTART") &&
			strings.Contains(r, fmt.Sprintf("pid %d exited (signal: killed); restarted as pid %d (restart 1)", first["gate"], gatePID))
	})

	e.kill(t, "console")
	e.restarted(t, "console", first["console"])
	testkit.WaitFor(tb, 15*time.Second, "the restarted console on the terminal, with both restarts", func() bool {
		return strings.Contains(header(), "restarted console 1, gate 1") && strings.Contains(recentSection(s.screen()), "RESTART")
	})
	s.keys("q")
	testkit.WaitFor(tb, 20*time.Second, "the stack to stop on q", func() bool {
		return strings.Contains(s.screen(), "lox-exited-0")
	})
	if _, err := os.Stat(filepath.Join(state, stack.UpFile)); !os.IsNotExist(err) {
		t.Errorf("up.json left behind: %v", err)
	}
}

// TestSuperviseKeepsMetricsAddress: under lox run --metrics-listen 127.0.0.1:0, each process
// lox restarts serves its metrics at the address it had (the port the first start took), so a
// scrape configuration stays right; up.json names that URL, and it is the new process that
// answers there.
func TestSuperviseKeepsMetricsAddress(t *testing.T) {
	r := startStackWith(t, minimalPolicy, []string{"--restart-delay", "50ms", "--metrics-listen", "127.0.0.1:0"}, nil)
	e := &superviseEnv{running: r}
	for _, name := range []string{"signer", "console", "gate"} {
		t.Run(name, func(t *testing.T) {
			before := upMetrics(t, e)[name]
			started := scraped(t, before, "process_start_time_seconds")
			if before == "" || started <= 0 {
				t.Fatalf("up.json's metrics URL of the %s: %q (process_start_time_seconds %v)", name, before, started)
			}
			old := e.kill(t, name)
			e.restarted(t, name, old)
			var now string
			testkit.WaitFor(t, 10*time.Second, "the restarted "+name+"'s metrics at up.json's URL", func() bool {
				now = upMetrics(t, e)[name]
				return scraped(t, now, "process_start_time_seconds") > started
			})
			if now != before {
				t.Errorf("the %s's metrics moved from %s to %s across its restart", name, before, now)
			}
			if got := scraped(t, now, `lockhttp_build_info{process="`+name+`",version="`+buildinfoVersion(t, e)+`"}`); got != 1 {
				t.Errorf("%s does not serve the %s's build info (%v)", now, name, got)
			}
		})
	}
}

// upMetrics reads up.json's metrics URLs.
func upMetrics(t *testing.T, e *superviseEnv) map[string]string {
	t.Helper()
	var up stack.Up
	data, err := os.ReadFile(filepath.Join(e.state, stack.UpFile))
	if err != nil || json.Unmarshal(data, &up) != nil {
		return nil
	}
	return up.Metrics
}

// buildinfoVersion is the build the stack runs, as up.json names it.
func buildinfoVersion(t *testing.T, e *superviseEnv) string {
	t.Helper()
	var up stack.Up
	data, _ := os.ReadFile(filepath.Join(e.state, stack.UpFile))
	json.Unmarshal(data, &up)
	return up.Version
}
