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
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/testkit"
)

// intentPolicy: plain.test (plain HTTP and WebSocket upgrades, reads free), warm.test
// (decrypted, reads free, HTTP/2 offered) and splice.test (a CONNECT spliced as bytes), all on
// the loopback origins.
const intentPolicy = `version = 1
trusted = ["plain.test", "warm.test"]
splice = ["splice.test"]

[[rule]]
name = "spliced"
hosts = ["splice.test"]
methods = ["CONNECT"]
verdict = "free"

[floor]
allow_cidrs = ["127.0.0.1/32"]
allow_ports = [%[1]d, %[2]d]

[floor.hosts]
"plain.test" = "127.0.0.1"
"warm.test" = "127.0.0.1"
"splice.test" = "127.0.0.1"

[sources]
local = ["127.0.0.0/8"]

[settings]
http2 = "on"
`

// taggingOrigin counts every request it receives by its path (each request of the load has a
// path of its own) as soon as its head is read, then answers after a few milliseconds, so
// that at any moment many requests are at the origin and not yet answered; a WebSocket upgrade
// is switched and closed.
type taggingOrigin struct {
	mu    sync.Mutex
	paths map[string]string // path → the Host it was sent to
	n     atomic.Int64
}

func (o *taggingOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	o.paths[r.URL.Path] = r.Host
	o.mu.Unlock()
	o.n.Add(1)
	if r.Header.Get("Upgrade") != "" {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		c.Close()
		return
	}
	time.Sleep(3 * time.Millisecond)
	io.WriteString(w, "tagged "+r.URL.Path)
}

func (o *taggingOrigin) seen() map[string]string {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make(map[string]string, len(o.paths))
	for k, v := range o.paths {
		out[k] = v
	}
	return out
}

// TestIntentNoRequestOutWithoutItsRecord runs the stack as lox run sets it up, drives 50
// clients through it (16 plain HTTP keep-alive, 12 decrypted HTTP/1.1 and 12 decrypted HTTP/2
// over kept tunnels, 6 spliced CONNECTs, 4 WebSocket upgrades), each request with a path of its
// own, SIGKILLs the gate three times under that load (lox restarts it), and checks that every
// request the origin received has a record in the gate's audit, its intent (written before its
// first byte went out) or its outcome: none missing. A spliced tunnel's requests are the
// CONNECT's: the CONNECTs of splice.test with a record are at least as many as the tunnels the
// origin saw requests on. The intents the kills left without an outcome are what verify-log
// reports as such, and the chain verifies across the kills.
func TestIntentNoRequestOutWithoutItsRecord(t *testing.T) {
	o := &taggingOrigin{paths: map[string]string{}}
	plain := httptest.NewServer(o)
	t.Cleanup(plain.Close)
	pki := newTestPKI(t)
	_, tlsPort := tlsOrigin(t, o, pki.leaf(t, []string{"warm.test", "splice.test"}, time.Now().Add(24*time.Hour), false))
	plainPort := plain.Listener.Addr().(*net.TCPAddr).Port
	r := startStackWith(t, fmt.Sprintf(intentPolicy, plainPort, tlsPort), []string{"--roots", pki.rootPEM, "--restart-delay", "200ms"}, nil)
	e := &superviseEnv{running: r}
	ca := mustPool(t, r.up.CACert)
	originRoots := mustPool(t, pki.rootPEM)
	proxy, _ := url.Parse(r.up.Gate)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	var answered atomic.Int64
	worker := func(name string, send func(path string) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ctx.Err() == nil; n++ {
				if err := send(fmt.Sprintf("/intent/%s/%d", name, n)); err != nil {
					// The gate is down, or went down under the request: a new path next time.
					select {
					case <-ctx.Done():
					case <-time.After(20 * time.Millisecond):
					}
					continue
				}
				answered.Add(1)
			}
		}()
	}
	get := func(c *http.Client, rawURL string) error {
		req, _ := http.NewRequestWithContext(ctx, "GET", rawURL, nil)
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("%s: %s", rawURL, resp.Status)
		}
		return err
	}
	for w := range 16 {
		c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}, Timeout: 10 * time.Second}
		worker(fmt.Sprintf("plain%d", w), func(p string) error {
			return get(c, fmt.Sprintf("http://plain.test:%d%s", plainPort, p))
		})
	}
	for w := range 12 {
		c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: ca},
			TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}, Timeout: 10 * time.Second}
		worker(fmt.Sprintf("h1-%d", w), func(p string) error {
			return get(c, fmt.Sprintf("https://warm.test:%d%s", tlsPort, p))
		})
	}
	for w := range 12 {
		c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: ca}, ForceAttemptHTTP2: true},
			Timeout: 10 * time.Second}
		worker(fmt.Sprintf("h2-%d", w), func(p string) error {
			req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("https://warm.test:%d%s", tlsPort, p), nil)
			resp, err := c.Do(req)
			if err != nil {
				return err
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.ProtoMajor != 2 {
				t.Errorf("%s came over %s, want HTTP/2 inside the tunnel", p, resp.Proto)
			}
			return nil
		})
	}
	for w := range 6 {
		// A tunnel for each request: the origin's requests on splice.test count the tunnels.
		c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: originRoots},
			DisableKeepAlives: true, TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}, Timeout: 10 * time.Second}
		worker(fmt.Sprintf("splice%d", w), func(p string) error {
			return get(c, fmt.Sprintf("https://splice.test:%d%s", tlsPort, p))
		})
	}
	for w := range 4 {
		worker(fmt.Sprintf("ws%d", w), func(p string) error {
			c, err := net.DialTimeout("tcp", r.up.Listen, 5*time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			host := fmt.Sprintf("plain.test:%d", plainPort)
			fmt.Fprintf(c, "GET http://%s%s HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", host, p, host)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				return err
			}
			if resp.StatusCode != http.StatusSwitchingProtocols {
				return fmt.Errorf("the upgrade: %s", resp.Status)
			}
			return nil
		})
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			wg.Wait()
		}
	}
	defer stop()

	// Three SIGKILLs of the gate, each once the load has passed through it for a while.
	for kill := range 3 {
		base := o.n.Load()
		testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("the load to pass before kill %d", kill+1), func() bool {
			return o.n.Load() >= base+400
		})
		old := e.kill(t, "gate")
		e.restarted(t, "gate", old)
	}
	base := o.n.Load()
	testkit.WaitFor(t, 30*time.Second, "the load to pass after the last kill", func() bool { return o.n.Load() >= base+400 })
	stop()

	// Every request the origin received has a record: its intent, or its outcome.
	recs := allAuditRecords(t, r.up.AuditDir)
	recorded := map[string]bool{}
	spliceIDs := map[string]bool{}
	intents := map[string]bool{} // intent ids → still open (no outcome followed)
	for _, rec := range recs {
		ev, _ := rec["event"].(string)
		id, _ := rec["id"].(string)
		raw, _ := rec["url"].(string)
		if ev == "intent" {
			intents[id] = true
		} else {
			for _, x := range testkit.RecordIDs(rec) {
				if intents[x] {
					intents[x] = false
				}
			}
		}
		if strings.HasPrefix(raw, "splice.test:") {
			spliceIDs[id] = true
			continue
		}
		if u, err := url.Parse(raw); err == nil {
			recorded[u.Path] = true
		}
	}
	var open []string
	for id, o := range intents {
		if o {
			open = append(open, id)
		}
	}
	sort.Strings(open)
	splices := len(spliceIDs)
	var missing []string
	spliced := 0
	for path, host := range o.seen() {
		if strings.HasPrefix(host, "splice.test:") {
			spliced++
			continue
		}
		if !recorded[path] {
			missing = append(missing, path)
		}
	}
	sort.Strings(missing)
	t.Logf("%d requests reached the origin (%d through spliced tunnels), %d answered whole; %d intents, %d of them left without an outcome by the 3 kills",
		o.n.Load(), spliced, answered.Load(), len(intents), len(open))
	if len(missing) > 0 {
		t.Errorf("%d requests reached the origin with no record in the audit (neither intent nor outcome): %s", len(missing), strings.Join(missing[:min(len(missing), 20)], ", "))
	}
	if splices < spliced {
		t.Errorf("the origin saw requests on %d spliced tunnels, the audit has records of %d CONNECTs to splice.test", spliced, splices)
	}
	if len(open) == 0 {
		t.Errorf("%d intents, none left open by the kills: the kills caught no request out, and the test tests nothing", len(intents))
	}

	// verify-log: the chain is whole across the kills, and it names the requests whose outcome
	// was never written.
	out, err := exec.Command(filepath.Join(binDir, "lockhttp"), "verify-log", r.up.AuditDir).CombinedOutput()
	if err != nil {
		t.Fatalf("verify-log: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "CLEAN") || !strings.Contains(string(out), "was sent on to its origin and no record of its outcome follows") {
		t.Fatalf("verify-log does not report the cut requests:\n%s", out)
	}
	notes := 0
	for _, line := range strings.Split(string(out), "\n") {
		if !strings.Contains(line, "was sent on to its origin and no record of its outcome follows") || !strings.Contains(line, "request r") {
			continue
		}
		notes++
		id := strings.Fields(line[strings.Index(line, "request r"):])[1]
		if _, ok := intents[id]; !ok || !intents[id] {
			t.Errorf("verify-log names %s as cut, which the audit completes (or has no intent of):\n%s", id, line)
		}
	}
	if notes != min(len(open), 20) {
		t.Errorf("verify-log names %d cut requests, want %d (of %d):\n%s", notes, min(len(open), 20), len(open), out)
	}
	out, err = exec.Command(filepath.Join(binDir, "lockhttp"), "verify-log", "--json", r.up.AuditDir).Output()
	var rep struct {
		Intents, Unfinished int
		Verdict             string
	}
	// A note on where the public key came from comes first, on a line of its own.
	if i := strings.Index(string(out), "\n{"); i >= 0 {
		out = out[i+1:]
	}
	if err != nil || json.Unmarshal(out, &rep) != nil {
		t.Fatalf("verify-log --json: %v\n%s", err, out)
	}
	// Requests the clients gave up on as the load stopped may still get their outcome's record
	// after the audit was read above: verify-log, reading later, finds as many open or fewer,
	// and no fewer than a read after it.
	later := 0
	for id := range intents {
		intents[id] = true
	}
	for _, rec := range allAuditRecords(t, r.up.AuditDir) {
		if rec["event"] != "intent" {
			for _, x := range testkit.RecordIDs(rec) {
				if _, ok := intents[x]; ok {
					intents[x] = false
				}
			}
		}
	}
	for _, o := range intents {
		if o {
			later++
		}
	}
	if rep.Verdict != "CLEAN" || rep.Intents < len(intents) || rep.Unfinished > len(open) || rep.Unfinished < later {
		t.Errorf("verify-log --json: %+v, want CLEAN with %d intents, %d to %d unfinished", rep, len(intents), later, len(open))
	}
}

// allAuditRecords reads every record in the gate's audit directory, intents included, in the
// order of the files; a last line still being written is left out.
func allAuditRecords(t *testing.T, dir string) []map[string]any {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	sort.Strings(files)
	var out []map[string]any
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.SplitAfter(string(data), "\n") {
			if !strings.HasSuffix(line, "\n") {
				continue
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("%s: audit line %q: %v", f, line, err)
			}
			out = append(out, m)
		}
	}
	return out
}

func mustPool(t *testing.T, pemFile string) *x509.CertPool {
	t.Helper()
	data, err := os.ReadFile(pemFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		t.Fatalf("%s: no certificate", pemFile)
	}
	return pool
}
