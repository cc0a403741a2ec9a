package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/testkit"
	"github.com/lockhttp/lockhttp/internal/unixsock"
)

const floodPolicy = `version = 1
trusted = ["origin.test"]

[[rule]]
name = "no-blocked"
hosts = ["blocked.test"]
verdict = "deny"

[floor]
allow_cidrs = ["127.0.0.1/32"]
allow_ports = [%d]

[floor.hosts]
"origin.test" = "127.0.0.1"

[sources]
local = ["127.0.0.1/32"]
other = ["127.0.0.2/32"]
`

// auditCounters are the gate's audit counters from its status (audit.Usage).
type auditCounters struct {
	Audit *struct {
		Bytes   int64 `json:"bytes"`
		Records int64 `json:"records"`
		Syncs   int64 `json:"fsyncs"`
	} `json:"audit"`
}

func (r *running) auditCounters(t *testing.T) auditCounters {
	t.Helper()
	var st auditCounters
	resp, err := unixsock.Client(r.up.GateSocket, 2*time.Second).Get("http://unix/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestAuditFloodBounded is issue 15's audit attack: one container sends 600 refused requests,
// each repeating a 60 KB URL, from 120 connections at once (today: 36 MB of audit, an fsync
// each). The audit must grow by kilobytes, not megabytes (past 20 refusals a second the rest are
// counted in summaries), the fsyncs must stay a few per second, every refusal must be counted,
// every request id a client was shown must be in the audit, and the neighbour container's free
// requests keep passing throughout.
func TestAuditFloodBounded(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(origin.Close)
	port := origin.Listener.Addr().(*net.TCPAddr).Port
	e := startStack(t, fmt.Sprintf(floodPolicy, port))
	proxy, _ := url.Parse(e.up.Gate)
	client := func(from string) *http.Client {
		return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(proxy), DisableKeepAlives: true,
			DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}).DialContext}}
	}
	testkit.WaitFor(t, 10*time.Second, "the gate to have its policy", func() bool {
		resp, err := client("127.0.0.2").Get(fmt.Sprintf("http://origin.test:%d/warm", port))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	before := e.auditCounters(t)

	const workers, each = 120, 5
	long := fmt.Sprintf("http://blocked.test:%d/?q=", port) + strings.Repeat("A", 60<<10)
	var (
		mu  sync.Mutex
		ids = map[string]bool{}
		bad []string
		wg  sync.WaitGroup
	)
	start := time.Now()
	attacker := client("127.0.0.1")
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				resp, err := attacker.Get(long)
				if err != nil {
					mu.Lock()
					bad = append(bad, err.Error())
					mu.Unlock()
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				if id := resp.Header.Get("X-Lockhttp-Request"); resp.StatusCode == 403 && resp.Header.Get("X-Lockhttp-Code") == "E_RULE" && id != "" {
					ids[id] = true
				} else {
					bad = append(bad, fmt.Sprintf("%d %s", resp.StatusCode, resp.Header.Get("X-Lockhttp-Code")))
				}
				mu.Unlock()
			}
		}()
	}
	// The neighbour's free requests pass while the flood runs.
	flooding := make(chan struct{})
	neighbour := make(chan string, 1)
	go func() {
		c := client("127.0.0.2")
		n := 0
		for {
			select {
			case <-flooding:
				neighbour <- fmt.Sprintf("%d passed", n)
				return
			default:
			}
			resp, err := c.Get(fmt.Sprintf("http://origin.test:%d/neighbour", port))
			if err != nil || resp.StatusCode != 200 {
				neighbour <- fmt.Sprintf("neighbour refused after %d: %v %v", n, err, resp)
				return
			}
			resp.Body.Close()
			n++
		}
	}()
	wg.Wait()
	took := time.Since(start)
	close(flooding)
	if got := <-neighbour; !strings.HasSuffix(got, "passed") || got == "0 passed" {
		t.Errorf("neighbour: %s", got)
	}
	if len(bad) > 0 || len(ids) != workers*each {
		t.Fatalf("%d refusals with distinct ids, want %d; failures: %q", len(ids), workers*each, bad[:min(len(bad), 5)])
	}

	// Every id a client saw is in the audit: a record of its own, or listed by a summary.
	seen := map[string]int{}
	counted := 0
	testkit.WaitFor(t, 10*time.Second, "every refused id in the audit", func() bool {
		clear(seen)
		counted = 0
		for _, m := range e.auditRecords() {
			if m["container"] != "local" || m["code"] != "E_RULE" {
				continue
			}
			if m["event"] == "summary" {
				n, _ := m["count"].(float64)
				counted += int(n)
			} else {
				counted++
			}
			for _, id := range testkit.RecordIDs(m) {
				seen[id]++
			}
		}
		for id := range ids {
			if seen[id] != 1 {
				return false
			}
		}
		return true
	})
	if counted != workers*each {
		t.Errorf("the audit counts %d refusals, want %d", counted, workers*each)
	}

	// The attacker's share of the audit (the neighbour's free requests are its own).
	var size, total int64
	files, _ := filepath.Glob(filepath.Join(e.up.AuditDir, "*.jsonl"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		total += int64(len(data))
		for _, l := range strings.SplitAfter(string(data), "\n") {
			if strings.Contains(l, `"container":"local"`) {
				size += int64(len(l))
			}
		}
	}
	// 20 records of their own a second (the URL clipped to 2 KiB), about 15 bytes per id in
	// a summary; the unbounded audit took 60 KB per refusal, 36 MB in all.
	secs := int64(took/time.Second) + 2
	if limit := secs*20*3<<10 + workers*each*32 + 64<<10; size > limit {
		t.Errorf("the attacker's records take %d bytes after %d refusals of a 60 KB URL in %s, want at most %d", size, workers*each, took, limit)
	}
	after := e.auditCounters(t)
	if before.Audit == nil || after.Audit == nil {
		t.Fatal("the gate's status has no audit counters (bytes, records, fsyncs)")
	}
	syncs := after.Audit.Syncs - before.Audit.Syncs
	// At most one fsync per record of its own (20 a second), one a second for the summaries,
	// and the neighbour's (its records ride on those, or on one every 100 ms).
	if limit := secs * (20 + 1 + 10); syncs > limit {
		t.Errorf("%d fsyncs for %d refusals in %s, want at most %d", syncs, workers*each, took, limit)
	}
	t.Logf("%d refusals in %s: the attacker's records %d bytes (the audit %d), %d fsyncs", workers*each, took.Round(time.Millisecond), size, total, syncs)
}
