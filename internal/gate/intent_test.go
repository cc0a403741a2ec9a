package gate

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/lockhttp/lockhttp/internal/testkit"
)

// intentOrigin answers every request after noting whether the gate's audit held an intent
// record of it when it arrived: one whose URL ends with the request's path (each request of the
// test has a path of its own), or, for a spliced tunnel, is its host and port.
type intentOrigin struct {
	mu     sync.Mutex
	dir    string          // the gate's audit directory, set before the first request
	seen   map[string]bool // path → its intent was in the audit when it arrived
	events map[string]string
}

func newIntentOrigin() *intentOrigin {
	return &intentOrigin{seen: map[string]bool{}, events: map[string]string{}}
}

func (o *intentOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	dir := o.dir
	o.mu.Unlock()
	found, detail := false, ""
	files, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	for _, f := range files {
		data, _ := os.ReadFile(f)
		for _, line := range strings.Split(string(data), "\n") {
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) != nil || rec["event"] != "intent" {
				continue
			}
			if u, _ := rec["url"].(string); strings.HasSuffix(u, r.URL.Path) || u == r.Host {
				found, detail = true, fmt.Sprint(rec["detail"])
			}
		}
	}
	o.mu.Lock()
	o.seen[r.URL.Path], o.events[r.URL.Path] = found, detail
	o.mu.Unlock()
	io.WriteString(w, "ok")
}

func (o *intentOrigin) setDir(dir string) {
	o.mu.Lock()
	o.dir = dir
	o.mu.Unlock()
}

// check fails unless the origin saw path, and saw it after its intent record.
func (o *intentOrigin) check(t *testing.T, path, want string) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	found, ok := o.seen[path]
	switch {
	case !ok:
		t.Fatalf("%s never reached the origin", path)
	case !found:
		t.Fatalf("%s reached the origin before its intent record was in the audit", path)
	case !strings.Contains(o.events[path], want):
		t.Fatalf("%s: the intent's detail is %q, want it to name %q", path, o.events[path], want)
	}
}

// TestIntentBeforeTheFirstByte: a request's intent record is in the audit file before the
// origin sees the request, plain, decrypted over HTTP/1.1 and HTTP/2, and for a spliced
// tunnel (whose first bytes, the client's TLS hello, the gate sends on); the request's own
// record, same id, completes it.
func TestIntentBeforeTheFirstByte(t *testing.T) {
	o := newIntentOrigin()
	tg := startGateWith(t, o, nil)
	o.setDir(tg.auditDir)
	resp, err := tg.client().Get(tg.url("/plain/1"))
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(resp.Body)
	resp.Body.Close()
	o.check(t, "/plain/1", "the request record")
	id := resp.Header.Get(HeaderRequest)
	var intents, outcomes int
	for _, r := range testkit.AuditAll(t, tg.auditDir) {
		if r["id"] == id {
			switch r["event"] {
			case "intent":
				intents++
				if outcomes > 0 || r["verdict"] != "FREE" || r["status"] != float64(0) {
					t.Fatalf("the intent: %v (after its outcome: %v)", r, outcomes > 0)
				}
			case "request":
				outcomes++
			}
		}
	}
	if intents != 1 || outcomes != 1 {
		t.Fatalf("request %s: %d intents and %d records, want one of each", id, intents, outcomes)
	}

	to := newIntentOrigin()
	tlg := startTLSGate(t, to)
	to.setDir(tlg.audit)
	for _, c := range []struct {
		name   string
		client *http.Client
	}{{"decrypted HTTP/1.1", tlg.client()}, {"decrypted HTTP/2", tlg.h2Client()}} {
		t.Run(c.name, func(t *testing.T) {
			path := "/" + strings.ReplaceAll(c.name, " ", "-")
			resp, err := c.client.Get(fmt.Sprintf("https://origin.test:%d%s", tlg.port, path))
			if err != nil {
				t.Fatal(err)
			}
			io.ReadAll(resp.Body)
			resp.Body.Close()
			to.check(t, path, "tunnel-request record")
		})
	}
	t.Run("spliced", func(t *testing.T) {
		setPolicy(t, tlg.gate, fmt.Sprintf("version = 1\ntrusted = [\"spliced.bench.test\"]\nsplice = [\"spliced.bench.test\"]\n[[rule]]\nname = \"tunnel\"\nhosts = [\"spliced.bench.test\"]\nmethods = [\"CONNECT\"]\nverdict = \"free\"\n[floor]\nallow_cidrs = [\"127.0.0.1/32\"]\nallow_ports = [%d]\n[sources]\nlocal = [\"127.0.0.0/8\"]\n", tlg.port))
		proxy, _ := url.Parse("http://" + tlg.addr)
		c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: tlg.roots}}}
		// The origin's handler runs once the gate has sent the client's hello on: the CONNECT's
		// intent (its URL the host and port) was written before.
		resp, err := c.Get(fmt.Sprintf("https://spliced.bench.test:%d/", tlg.port))
		if err != nil {
			t.Fatal(err)
		}
		io.ReadAll(resp.Body)
		resp.Body.Close()
		to.check(t, "/", "connect record")
	})
}

// TestIntentUnwritableSendsNothing: when the intent record cannot be written, the request does
// not go out: it is refused 503 E_NO_AUDIT and the origin never sees it.
func TestIntentUnwritableSendsNothing(t *testing.T) {
	var fa *flakyAuditor
	tg := startGateWith(t, http.HandlerFunc(streamingOrigin), flaky(&fa))
	fa.failIntents.Store(true)
	fa.fail.Store(false)
	resp, err := tg.client().Get(tg.url("/length/9"))
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get(HeaderCode) != "E_NO_AUDIT" {
		t.Fatalf("answer %d %s, want 503 E_NO_AUDIT", resp.StatusCode, resp.Header.Get(HeaderCode))
	}
	if n := tg.origin.count(); n != 0 {
		t.Fatalf("the origin saw %d requests, want none", n)
	}
}
