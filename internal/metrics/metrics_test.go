package metrics

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
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

func TestFamiliesLint(t *testing.T) {
	r := every(t)
	problems, err := testutil.GatherAndLint(prometheus.GathererFunc(r.Gather))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

func TestRequestCounts(t *testing.T) {
	r := every(t)
	want := `
# HELP lockhttp_gate_requests_total Requests the gate finished, by container (- for an unknown source), kind (the audit event), verdict and code (none when it went out).
# TYPE lockhttp_gate_requests_total counter
lockhttp_gate_requests_total{code="E_RULE",container="agent",kind="request",verdict="DENY"} 1
lockhttp_gate_requests_total{code="E_SOURCE_UNKNOWN",container="-",kind="connect",verdict="DENY"} 1
lockhttp_gate_requests_total{code="none",container="agent",kind="tunnel-request",verdict="FREE"} 1
`
	if err := testutil.GatherAndCompare(r.reg, strings.NewReader(want), "lockhttp_gate_requests_total"); err != nil {
		t.Error(err)
	}
	want = `
# HELP lockhttp_hub_tickets_pending Tickets waiting for a human, by container.
# TYPE lockhttp_hub_tickets_pending gauge
lockhttp_hub_tickets_pending{container="agent"} 1
`
	if err := testutil.GatherAndCompare(r.reg, strings.NewReader(want), "lockhttp_hub_tickets_pending"); err != nil {
		t.Error(err)
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
	if got := testutil.ToFloat64(a.failures); got != 1 {
		t.Fatalf("failures %v", got)
	}
	if got := testutil.ToFloat64(a.records); got != 0 {
		t.Fatalf("records %v after a failed batch", got)
	}
}
