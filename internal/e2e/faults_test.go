package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/testkit"
)

const faultsPolicy = `version = 1
trusted = ["plain.test", %[3]s]

[floor]
allow_cidrs = ["127.0.0.1/32"]
allow_ports = [%[1]d, %[2]d]

[floor.hosts]
"plain.test" = "127.0.0.1"
%[4]s
[sources]
local = ["127.0.0.1/32"]
other = ["127.0.0.2/32"]
`

// seenRequest is what a client of the fault suite saw of one request.
type seenRequest struct {
	id, code, nonce string
	status          int
	err             error
}

// faultLoad sends plain FREE requests from a container's address until stopped, recording
// what it saw of each.
type faultLoad struct {
	mu   sync.Mutex
	seen []seenRequest // guarded by mu
	n    atomic.Int64
}

func (l *faultLoad) add(s seenRequest) {
	l.mu.Lock()
	l.seen = append(l.seen, s)
	l.mu.Unlock()
}

// failuresSince counts the requests that failed among those sent after the first n.
func (l *faultLoad) failuresSince(n int) (failed, total int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.seen[min(n, len(l.seen)):] {
		total++
		if s.err != nil || s.status != 200 {
			failed++
		}
	}
	return failed, total
}

func (l *faultLoad) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.seen)
}

func proxyClient(gate *url.URL, from string, roots *x509.CertPool, keepAlive bool) *http.Client {
	return &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(gate),
		TLSClientConfig: &tls.Config{RootCAs: roots}, DisableKeepAlives: !keepAlive,
		DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}).DialContext}}
}

func doSeen(c *http.Client, u, nonce string) seenRequest {
	resp, err := c.Get(u)
	if err != nil {
		return seenRequest{nonce: nonce, err: err}
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return seenRequest{id: resp.Header.Get("X-Lockhttp-Request"), code: resp.Header.Get("X-Lockhttp-Code"), status: resp.StatusCode, nonce: nonce}
}

// TestFaults: under steady plain and decrypted load from two containers, each process of the
// stack is stopped (SIGSTOP) in turn, and the origin resets a connection in the middle of an
// answer. While the signer is stopped a host the gate has no certificate for is refused
// E_NO_SIGNER (never passed unseen), and passes once it runs again; while the console (and the
// hub it hosts) is stopped the gate keeps deciding with the policy it has, and the other
// container's traffic keeps flowing; a stopped gate answers again when it runs; a reset upstream
// answer costs only its own request. Through it all, every request id a client saw is in the
// audit, and every request that reached an origin is in the audit.
func TestFaults(t *testing.T) {
	var originSaw sync.Map // nonce → true
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/reset" {
			w.Header().Set("Content-Length", "100000")
			w.WriteHeader(200)
			io.WriteString(w, strings.Repeat("x", 1000))
			w.(http.Flusher).Flush()
			if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
				c.(*net.TCPConn).SetLinger(0)
				c.Close()
			}
			return
		}
		originSaw.Store(strings.TrimPrefix(r.URL.Path, "/n/"), true)
		io.WriteString(w, "ok")
	})
	plain := httptest.NewServer(handler)
	t.Cleanup(plain.Close)
	plainPort := plain.Listener.Addr().(*net.TCPAddr).Port
	pki := newTestPKI(t)
	var names []string
	for i := 0; i < 8; i++ {
		names = append(names, fmt.Sprintf("h%d.test", i))
	}
	_, tlsPort := tlsOrigin(t, handler, pki.leaf(t, names, time.Now().Add(time.Hour), false))
	var quoted, hosts []string
	for _, n := range names {
		quoted = append(quoted, fmt.Sprintf("%q", n))
		hosts = append(hosts, fmt.Sprintf("%q = \"127.0.0.1\"", n))
	}
	e := startStackWith(t, fmt.Sprintf(faultsPolicy, plainPort, tlsPort, strings.Join(quoted, ", "), strings.Join(hosts, "\n")),
		[]string{"--roots", pki.rootPEM}, nil)
	gate, _ := url.Parse(e.up.Gate)
	roots := x509.NewCertPool()
	caPEM, _ := os.ReadFile(e.up.CACert)
	roots.AppendCertsFromPEM(caPEM)

	// Steady load: each container's plain requests, and the first container's decrypted ones
	// on a keep-alive tunnel to h0.test.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	loads := map[string]*faultLoad{"local": {}, "other": {}, "tunnel": {}}
	var seq atomic.Int64
	run := func(name, from string, u func(nonce string) string, keepAlive bool) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := proxyClient(gate, from, roots, keepAlive)
			for {
				select {
				case <-stop:
					return
				default:
				}
				nonce := fmt.Sprintf("%s-%d", name, seq.Add(1))
				loads[name].add(doSeen(c, u(nonce), nonce))
				time.Sleep(20 * time.Millisecond) // an agent's pace, not a flood
			}
		}()
	}
	run("local", "127.0.0.1", func(n string) string { return fmt.Sprintf("http://plain.test:%d/n/%s", plainPort, n) }, true)
	run("other", "127.0.0.2", func(n string) string { return fmt.Sprintf("http://plain.test:%d/n/%s", plainPort, n) }, true)
	run("tunnel", "127.0.0.1", func(n string) string { return fmt.Sprintf("https://h0.test:%d/n/%s", tlsPort, n) }, true)
	stopped := false
	stopLoad := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	t.Cleanup(stopLoad)
	testkit.WaitFor(t, 20*time.Second, "the load under way", func() bool { return loads["tunnel"].count() > 5 && loads["other"].count() > 5 })
	probe := proxyClient(gate, "127.0.0.1", roots, false)

	signal := func(name string, sig syscall.Signal) {
		t.Helper()
		if err := syscall.Kill(e.up.PIDs[name], sig); err != nil {
			t.Fatalf("signal %s: %v", name, err)
		}
	}

	t.Run("the signer stopped", func(t *testing.T) {
		from := loads["other"].count()
		signal("signer", syscall.SIGSTOP)
		t0 := time.Now()
		r := doSeen(probe, fmt.Sprintf("https://h1.test:%d/n/fresh-1", tlsPort), "fresh-1")
		t.Logf("a new host while the signer is stopped: %d %s after %s", r.status, r.code, time.Since(t0).Round(time.Millisecond))
		signal("signer", syscall.SIGCONT)
		t0 = time.Now()
		if r.err == nil && r.status == 200 {
			t.Fatal("a host with no certificate yet passed while the signer was stopped")
		}
		if r.err == nil && r.code != "E_NO_SIGNER" {
			t.Fatalf("a new host while the signer was stopped: %d %s, want E_NO_SIGNER", r.status, r.code)
		}
		testkit.WaitFor(t, 15*time.Second, "the new host passing again", func() bool {
			return doSeen(probe, fmt.Sprintf("https://h1.test:%d/n/fresh-2", tlsPort), "fresh-2").status == 200
		})
		t.Logf("the new host passes %s after the signer runs again", time.Since(t0).Round(time.Millisecond))
		if failed, total := loads["other"].failuresSince(from); failed > 0 || total == 0 {
			t.Errorf("the other container's requests while the signer was stopped: %d of %d failed", failed, total)
		}
	})
	t.Run("the console and its hub stopped", func(t *testing.T) {
		from := loads["other"].count()
		signal("console", syscall.SIGSTOP)
		want := from + 20
		testkit.WaitFor(t, 20*time.Second, "traffic while the console is stopped", func() bool { return loads["other"].count() >= want })
		signal("console", syscall.SIGCONT)
		if failed, total := loads["other"].failuresSince(from); failed > 0 {
			t.Errorf("the other container's requests while the console was stopped: %d of %d failed", failed, total)
		}
	})
	t.Run("the gate stopped", func(t *testing.T) {
		from := loads["other"].count()
		signal("gate", syscall.SIGSTOP)
		time.Sleep(2 * time.Second) // the fault itself: the gate frozen for a while
		signal("gate", syscall.SIGCONT)
		t0 := time.Now()
		want := from + 20
		testkit.WaitFor(t, 20*time.Second, "traffic after the gate runs again", func() bool { return loads["other"].count() >= want })
		if r := doSeen(probe, fmt.Sprintf("http://plain.test:%d/n/after-gate", plainPort), "after-gate"); r.status != 200 {
			t.Fatalf("after the gate ran again: %+v", r)
		}
		t.Logf("20 requests of the other container passed %s after the gate ran again", time.Since(t0).Round(time.Millisecond))
	})
	t.Run("the origin resets an answer", func(t *testing.T) {
		resp, err := probe.Get(fmt.Sprintf("http://plain.test:%d/reset", plainPort))
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		if err == nil {
			t.Fatal("a reset answer read in full")
		}
		from := loads["other"].count()
		testkit.WaitFor(t, 10*time.Second, "traffic after the reset", func() bool { return loads["other"].count() >= from+10 })
		if failed, _ := loads["other"].failuresSince(from); failed > 0 {
			t.Errorf("%d of the other container's requests failed after the reset", failed)
		}
	})
	stopLoad()

	// Every id a client saw has its audit record; every request an origin saw is in the audit.
	var ids []string
	total := 0
	for _, l := range loads {
		for _, s := range l.seen {
			total++
			if s.id != "" {
				ids = append(ids, s.id)
			}
		}
	}
	var missing []string
	testkit.WaitFor(t, 10*time.Second, "every id in the audit", func() bool {
		inAudit := map[string]bool{}
		urls := map[string]bool{}
		for _, m := range e.auditRecords() {
			for _, id := range testkit.RecordIDs(m) {
				inAudit[id] = true
			}
			if u, _ := m["url"].(string); u != "" {
				urls[u] = true
			}
		}
		missing = missing[:0]
		for _, id := range ids {
			if !inAudit[id] {
				missing = append(missing, id)
			}
		}
		originSaw.Range(func(k, _ any) bool {
			found := false
			for u := range urls {
				if strings.HasSuffix(u, "/n/"+k.(string)) {
					found = true
					break
				}
			}
			if !found {
				missing = append(missing, "origin:"+k.(string))
			}
			return true
		})
		return len(missing) == 0
	})
	if len(missing) > 0 {
		t.Fatalf("%d of %d requests are not in the audit (ids a client saw, or requests an origin saw): %v", len(missing), total, missing[:min(10, len(missing))])
	}
	t.Logf("%d requests through the faults, %d ids, all in the audit", total, len(ids))
}
