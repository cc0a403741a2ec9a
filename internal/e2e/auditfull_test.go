package e2e

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/gate"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// loadOrigin answers /load/N: an even N with a body of known length, an odd one streamed without
// a length (chunked to the client). It counts each N it was asked for.
type loadOrigin struct {
	mu   sync.Mutex
	hits map[string]int
}

func (o *loadOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := strings.TrimPrefix(r.URL.Path, "/load/")
	o.mu.Lock()
	o.hits[n]++
	o.mu.Unlock()
	body := strings.Repeat("b", 2000)
	if len(n) > 0 && (n[len(n)-1]-'0')%2 == 1 {
		for i := 0; i < len(body); i += 500 {
			io.WriteString(w, body[i:i+500])
			w.(http.Flusher).Flush()
		}
		return
	}
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	io.WriteString(w, body)
}

func (o *loadOrigin) all() map[string]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	m := make(map[string]int, len(o.hits))
	for k, v := range o.hits {
		m[k] = v
	}
	return m
}

// loadAnswer is what one client saw of one request.
type loadAnswer struct {
	n        string
	complete bool   // the client read the whole answer
	status   int    // 0: no answer head
	code     string // X-LockHTTP-Code
	id       string // X-LockHTTP-Request; "" when the answer shows none
	body     string
}

// TestAuditDiskFillsUnderLoad fills the audit's real file system (a 2 MiB tmpfs under the
// stack's STATE/audit) while 50 clients, plain and inside decrypted tunnels, send requests
// through a stack lox started. No answer a client read whole shows a request id that no record
// holds: a forwarded answer whose record could not be written is cut, and the gate's own answers
// then carry no id. It reports how many requests reached the origin without a record, frees the
// space, measures how long the gate takes to forward again, and verifies the audit.
func TestAuditDiskFillsUnderLoad(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI runs as root: this test mounts a tmpfs")
		}
		t.Skip("mounting a tmpfs needs root")
	}
	state := t.TempDir()
	auditDir := filepath.Join(state, "audit")
	if err := os.MkdirAll(auditDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", auditDir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", auditDir).Run() }) // after the stack stops

	origin := &loadOrigin{hits: map[string]int{}}
	pki := newTestPKI(t)
	_, tlsPort := tlsOrigin(t, origin, pki.leaf(t, []string{"origin.test"}, time.Now().Add(24*time.Hour), false))
	plain := httptest.NewServer(origin)
	t.Cleanup(plain.Close)
	plainPort := plain.Listener.Addr().(*net.TCPAddr).Port
	r := startStackAt(t, state, fmt.Sprintf(`version = 1
trusted = ["origin.test"]
[floor]
allow_cidrs = ["127.0.0.1/32"]
allow_ports = [%d, %d]
[floor.hosts]
"origin.test" = "127.0.0.1"
[sources]
local = ["127.0.0.0/8"]
`, tlsPort, plainPort), []string{"--roots", pki.rootPEM}, nil)
	if r.up.AuditDir != auditDir {
		t.Fatalf("the gate's audit is %s, not the tmpfs %s", r.up.AuditDir, auditDir)
	}
	ca, err := os.ReadFile(r.up.CACert)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	proxy, _ := url.Parse(r.up.Gate)
	plainClient := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy), MaxIdleConnsPerHost: 64}, Timeout: 20 * time.Second}
	tlsClient := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy), MaxIdleConnsPerHost: 64,
		TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 20 * time.Second}
	pad := strings.Repeat("p", 900) // a record of about 1.4 KiB: the disk fills in a few hundred
	var seq atomic.Int64
	get := func(decrypted bool) loadAnswer {
		n := fmt.Sprint(seq.Add(1))
		u, c := fmt.Sprintf("http://origin.test:%d/load/%s?pad=%s", plainPort, n, pad), plainClient
		if decrypted {
			u, c = fmt.Sprintf("https://origin.test:%d/load/%s?pad=%s", tlsPort, n, pad), tlsClient
		}
		a := loadAnswer{n: n}
		resp, err := c.Get(u)
		if err != nil {
			return a
		}
		defer resp.Body.Close()
		a.status, a.code, a.id = resp.StatusCode, resp.Header.Get(gate.HeaderCode), resp.Header.Get(gate.HeaderRequest)
		b, err := io.ReadAll(resp.Body)
		a.complete, a.body = err == nil, string(b)
		return a
	}
	for _, d := range []bool{false, true} {
		if a := get(d); !a.complete || a.status != 200 {
			t.Fatalf("before the disk fills (decrypted %v): %+v", d, a)
		}
	}

	// Leave the audit about 192 KiB.
	filler := filepath.Join(auditDir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	for chunk := make([]byte, 64<<10); ; {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	fi, _ := f.Stat()
	f.Truncate(max(0, fi.Size()-192<<10))
	f.Close()

	// 50 clients, half plain, half decrypted, until the gate has been refusing for a while;
	// bounded in count and time.
	const clients, perClient = 50, 400
	var (
		stop    atomic.Bool
		mu      sync.Mutex
		answers []loadAnswer
		wg      sync.WaitGroup
	)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perClient {
				if stop.Load() {
					return
				}
				a := get(i%2 == 1)
				mu.Lock()
				answers = append(answers, a)
				mu.Unlock()
			}
		}()
	}
	full := time.Time{}
	testkit.WaitFor(t, 60*time.Second, "the gate to find its audit disk full", func() bool {
		st := gateStatus(t, r.up)
		if st.Audit != nil && st.Audit.Full {
			full = time.Now()
			return true
		}
		return false
	})
	// Keep the load on while the gate refuses (and the disk may take a few records again).
	testkit.WaitFor(t, 30*time.Second, "refusals while the disk is full", func() bool {
		mu.Lock()
		defer mu.Unlock()
		noAudit := 0
		for _, a := range answers {
			if a.code == "E_NO_AUDIT" {
				noAudit++
			}
		}
		return noAudit >= 100 && time.Since(full) > 2*time.Second
	})
	stop.Store(true)
	wg.Wait()
	st := gateStatus(t, r.up)

	// What the audit holds: every id (a record's own, or one a summary lists) and the /load/N
	// of every forwarded request's record or intent.
	ids, recorded := map[string]bool{}, map[string]bool{}
	for _, m := range testkit.AuditAll(t, r.up.AuditDir) {
		if m["event"] == "intent" {
			if u, _ := m["url"].(string); strings.Contains(u, "/load/") {
				n := strings.TrimPrefix(u[strings.Index(u, "/load/"):], "/load/")
				n, _, _ = strings.Cut(n, "?")
				recorded[n] = true
			}
			continue // an id a client saw must have a record of its outcome
		}
		if id, _ := m["id"].(string); id != "" {
			ids[id] = true
		}
		if list, ok := m["ids"].([]any); ok {
			for _, id := range list {
				ids[fmt.Sprint(id)] = true
			}
		}
		if u, _ := m["url"].(string); strings.Contains(u, "/load/") && m["verdict"] == "FREE" {
			n := strings.TrimPrefix(u[strings.Index(u, "/load/"):], "/load/")
			n, _, _ = strings.Cut(n, "?")
			recorded[n] = true
		}
	}
	var whole, whole200, cut, noID, unrecorded int
	for _, a := range answers {
		switch {
		case !a.complete:
			cut++
		case a.id == "":
			noID++
			if a.code != "E_NO_AUDIT" || !strings.Contains(a.body, "Request: none") {
				t.Errorf("an answer without a request id that is not the audit's refusal: %d %s %q", a.status, a.code, a.body)
			}
		case !ids[a.id]:
			unrecorded++
			if unrecorded <= 5 {
				t.Errorf("request %s (/load/%s): the client read a whole %d %s answer whose id no record holds", a.id, a.n, a.status, a.code)
			}
		}
		if a.complete {
			whole++
			if a.status == 200 {
				whole200++
			}
		}
	}
	hits := origin.all()
	var hitNoRecord int
	for n := range hits {
		if !recorded[n] {
			hitNoRecord++
		}
	}
	t.Logf("%d requests: %d answers read whole (%d of them 200), %d cut or failed, %d without a request id (E_NO_AUDIT unrecorded); "+
		"whole answers whose id has no record: %d; origin hits %d, of them without a record %d; gate status unrecorded_answers %d",
		len(answers), whole, whole200, cut, noID, unrecorded, len(hits), hitNoRecord, st.UnrecordedAnswers)
	if unrecorded > 0 {
		t.Errorf("%d answers read whole show a request id that no record holds", unrecorded)
	}
	if hitNoRecord > 0 {
		t.Errorf("%d requests reached the origin with no record, not even their intent: an intent that cannot be written must keep the request in", hitNoRecord)
	}
	if whole200 == 0 || noID == 0 {
		t.Errorf("the load did not cross the disk filling (%d whole 200s, %d unrecorded refusals)", whole200, noID)
	}
	if st.UnrecordedAnswers == 0 {
		t.Error("the gate's status counts no unrecorded answer")
	}

	// Free the space: how long until the gate forwards again.
	freed := time.Now()
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	var tries int
	testkit.WaitFor(t, 30*time.Second, "the gate to forward again once space is freed", func() bool {
		tries++
		a := get(false)
		return a.complete && a.status == 200
	})
	t.Logf("forwarding again %v after the space was freed (%d tries)", time.Since(freed).Round(time.Millisecond), tries)
	if a := get(true); !a.complete || a.status != 200 {
		t.Errorf("decrypted after recovery: %+v", a)
	}

	// The audit after the episode.
	r.stop()
	var out bytes.Buffer
	cmd := exec.Command(filepath.Join(binDir, "lockhttp"), "verify-log", auditDir)
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	t.Logf("verify-log after the disk filled and was freed:\n%s", lastLines(out.String(), 6))
	if err != nil || !strings.Contains(out.String(), "CLEAN") {
		t.Errorf("verify-log: %v\n%s", err, out.String())
	}
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}
