package metrics

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/testkit"
)

// every registers every family of every process in one registry, counted once each.
func every(t *testing.T) *Registry {
	t.Helper()
	r := NewRegistry("test", "v0")
	g := NewGate(r, GateState{Tunnels: func() int { return 2 }, Connections: func() int { return 3 }, HeldBytes: func() int64 { return 4 }})
	g.Requests(RequestKey{Container: "agent", Kind: "request", Verdict: "DENY", Code: "E_RULE"}).Add(10, 0)
	g.Requests(RequestKey{Kind: "connect", Verdict: "DENY", Code: "E_SOURCE_UNKNOWN"}).Add(0, 0)
	g.Requests(RequestKey{Container: "agent", Kind: "tunnel-request", Verdict: "FREE"}).Add(100, 2000)
	g.Decided("request", time.Microsecond)
	g.Upstream(time.Millisecond)
	g.BudgetRefused("agent", "egress")
	g.PolicyApplied("sha256:abc", time.Unix(1700000000, 0))
	g.PolicyFetchFailed()
	NewSignerClient(r, func() int { return 5 }).Called(CallIssued, time.Millisecond)
	NewSigner(r).Signed(SignIssued, time.Millisecond)
	NewAudit(r, func() int { return 0 }).Batch(3, nil)
	adb := NewAuditDB(r, func() AuditDBLag { return AuditDBLag{Records: 7, Seconds: 1.5} })
	adb.Copied(3)
	adb.Failed()
	h := NewHub(r)
	h.SetState(func() HubState { return HubState{Pending: map[string]int{"agent": 1}, Authorisations: 1} })
	h.Opened("agent")
	h.Limited("agent")
	h.Closed("agent", OutcomeApproved, "phone", 30*time.Second)
	c := NewConsole(r)
	c.Served("sha256:abc", time.Unix(1700000000, 0))
	c.SetReview(func() bool { return true })
	n := NewNotify(r)
	n.Delivered("ops", DeliveryDelivered)
	n.Attempted("ops", false)
	n.Decision("ops", OutcomeApproved)
	n.Queued("ops", 0)
	NewTracing(r).Spans(SpanDropped, 1)
	// The gate's import of a signer's page (none here: its own families above are the signer's).
	ImportSigner(r, SignerImportOptions{Read: func(context.Context) ([]byte, error) { return nil, errors.New("no signer") }})
	return r
}

// gathered writes the families of r named names in the text format, in the order Gather sorts
// them.
func gathered(t *testing.T, r *Registry, names ...string) string {
	t.Helper()
	fams, err := r.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	var picked []Family
	for _, f := range fams {
		for _, n := range names {
			if f.Name == n {
				picked = append(picked, f)
			}
		}
	}
	var b bytes.Buffer
	if err := WriteText(&b, picked); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// scrape is r's page as Handler serves it.
func scrape(t *testing.T, r *Registry) string {
	t.Helper()
	rec := httptest.NewRecorder()
	r.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != ContentType {
		t.Errorf("Content-Type %q, want %q", ct, ContentType)
	}
	return rec.Body.String()
}

// TestFamiliesLint holds every family to Prometheus's naming rules, as promtool's linter reads
// them (TestPromtool runs the real one): help text, counters ending in _total, no _total on
// anything else.
func TestFamiliesLint(t *testing.T) {
	fams, err := every(t).Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.Help == "" {
			t.Errorf("%s has no help", f.Name)
		}
		if (f.Type == Counter) != strings.HasSuffix(f.Name, "_total") {
			t.Errorf("%s is a %s", f.Name, f.Type)
		}
	}
}

func TestRequestCounts(t *testing.T) {
	r := every(t)
	want := `# HELP lockhttp_gate_requests_total Requests the gate finished, by container (- for an unknown source), kind (the audit event), verdict and code (none when it went out).
# TYPE lockhttp_gate_requests_total counter
lockhttp_gate_requests_total{code="E_RULE",container="agent",kind="request",verdict="DENY"} 1
lockhttp_gate_requests_total{code="E_SOURCE_UNKNOWN",container="-",kind="connect",verdict="DENY"} 1
lockhttp_gate_requests_total{code="none",container="agent",kind="tunnel-request",verdict="FREE"} 1
# HELP lockhttp_hub_tickets_pending Tickets waiting for a human, by container.
# TYPE lockhttp_hub_tickets_pending gauge
lockhttp_hub_tickets_pending{container="agent"} 1
`
	if got := gathered(t, r, "lockhttp_gate_requests_total", "lockhttp_hub_tickets_pending"); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	want = `# HELP lockhttp_gate_bytes_total Bytes of the finished requests, by container, kind and direction: up (client to target) or down (target to client). A decrypted tunnel's connect counts its TLS bytes; its requests count their own.
# TYPE lockhttp_gate_bytes_total counter
lockhttp_gate_bytes_total{container="-",direction="down",kind="connect"} 0
lockhttp_gate_bytes_total{container="-",direction="up",kind="connect"} 0
lockhttp_gate_bytes_total{container="agent",direction="down",kind="request"} 0
lockhttp_gate_bytes_total{container="agent",direction="down",kind="tunnel-request"} 2000
lockhttp_gate_bytes_total{container="agent",direction="up",kind="request"} 10
lockhttp_gate_bytes_total{container="agent",direction="up",kind="tunnel-request"} 100
`
	if got := gathered(t, r, "lockhttp_gate_bytes_total"); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

// TestHistogramText: a histogram's page, cumulative buckets with +Inf last, _sum and _count, as
// the text format 0.0.4 has them.
func TestHistogramText(t *testing.T) {
	r := NewRegistry("test", "v0")
	a := NewAudit(r, nil)
	for _, n := range []int{1, 3, 3, 5000} {
		a.Batch(n, nil)
	}
	want := `# HELP lockhttp_audit_batch_records Records carried by one write (group commit).
# TYPE lockhttp_audit_batch_records histogram
lockhttp_audit_batch_records_bucket{le="1"} 1
lockhttp_audit_batch_records_bucket{le="2"} 1
lockhttp_audit_batch_records_bucket{le="4"} 3
lockhttp_audit_batch_records_bucket{le="8"} 3
lockhttp_audit_batch_records_bucket{le="16"} 3
lockhttp_audit_batch_records_bucket{le="32"} 3
lockhttp_audit_batch_records_bucket{le="64"} 3
lockhttp_audit_batch_records_bucket{le="128"} 3
lockhttp_audit_batch_records_bucket{le="256"} 3
lockhttp_audit_batch_records_bucket{le="512"} 3
lockhttp_audit_batch_records_bucket{le="1024"} 3
lockhttp_audit_batch_records_bucket{le="+Inf"} 4
lockhttp_audit_batch_records_sum 5007
lockhttp_audit_batch_records_count 4
# HELP lockhttp_audit_records_total Audit records written to the day files.
# TYPE lockhttp_audit_records_total counter
lockhttp_audit_records_total 5007
`
	if got := gathered(t, r, "lockhttp_audit_batch_records", "lockhttp_audit_records_total"); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

// TestEscaping: help text and label values are written with their backslashes, newlines and
// (in a label value) double quotes escaped, and invalid UTF-8 as U+FFFD.
func TestEscaping(t *testing.T) {
	fams := []Family{{Name: "x_total", Help: "a \\ and a\nline \"quoted\"", Type: Counter, Series: []Series{
		{Labels: []Label{{"c", "say \"hi\"\\n\n"}}, Value: 1},
		{Labels: []Label{{"c", "bad\xff"}}, Value: 2},
	}}}
	var b bytes.Buffer
	WriteText(&b, fams)
	want := `# HELP x_total a \\ and a\nline "quoted"
# TYPE x_total counter
x_total{c="say \"hi\"\\n\n"} 1
x_total{c="bad�"} 2
`
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}

// TestRequestsResolvedOnce: the same key gives the same counters, so a connection may keep them.
func TestRequestsResolvedOnce(t *testing.T) {
	g := NewGate(NewRegistry("test", "v0"), GateState{})
	k := RequestKey{Container: "a", Kind: "request", Verdict: "FREE"}
	if g.Requests(k) != g.Requests(k) {
		t.Fatal("two counters for one key")
	}
	var nilGate *Gate
	nilGate.Requests(k).Add(1, 1) // a gate without metrics counts for nobody, and does not fail
	nilGate.Decided("request", time.Second)
}

// TestRequestKeysBounded: past maxRequestKeys, new keys share one overflow series per kind.
func TestRequestKeysBounded(t *testing.T) {
	g := NewGate(NewRegistry("test", "v0"), GateState{})
	for i := 0; i < maxRequestKeys+10; i++ {
		g.Requests(RequestKey{Container: "c" + strconv.Itoa(i), Kind: "request"}).Add(0, 0)
	}
	if n := len(*g.reqs.Load()); n > maxRequestKeys+1 {
		t.Fatalf("%d keys, want at most %d", n, maxRequestKeys+1)
	}
}

func TestAuditFailureCounted(t *testing.T) {
	r := NewRegistry("test", "v0")
	a := NewAudit(r, nil)
	a.Batch(5, errors.New("disk full"))
	if got := a.failures.value(); got != 1 {
		t.Fatalf("failures %v", got)
	}
	if got := a.records.value(); got != 0 {
		t.Fatalf("records %v after a failed batch", got)
	}
}

// TestScrapesInFlightBounded: while 4 scrapes are being gathered, a fifth is answered 503 at
// once; the 4 are answered whole when their gathering ends.
func TestScrapesInFlightBounded(t *testing.T) {
	r := NewRegistry("test", "v0")
	var entered atomic.Int32
	release := make(chan struct{})
	r.register([]string{"slow"}, collectFunc(func(out []Family) []Family {
		entered.Add(1)
		<-release
		return append(out, Family{Name: "slow", Help: "A family gathered slowly.", Type: Gauge, Series: []Series{{Value: 1}}})
	}))
	h := r.Handler()
	codes := make(chan int, maxScrapes)
	for range maxScrapes {
		go func() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
			codes <- rec.Code
		}()
	}
	testkit.WaitFor(t, 10*time.Second, "4 scrapes gathering", func() bool { return entered.Load() == maxScrapes })
	fifth := make(chan int, 1)
	go func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		fifth <- rec.Code
	}()
	select {
	case c := <-fifth:
		if c != http.StatusServiceUnavailable || entered.Load() != maxScrapes {
			t.Errorf("a fifth scrape: %d (%d gathering), want 503 without gathering", c, entered.Load())
		}
	case <-time.After(10 * time.Second):
		t.Errorf("a fifth scrape waits for the 4 in flight (%d gathering), want 503 at once", entered.Load())
	}
	close(release)
	for range maxScrapes {
		if c := <-codes; c != http.StatusOK {
			t.Errorf("a scrape in flight: %d, want 200", c)
		}
	}
	// The slots are free again.
	if page := scrape(t, r); !strings.Contains(page, "\nslow 1\n") {
		t.Errorf("the page after the slow scrapes:\n%s", page)
	}
}
