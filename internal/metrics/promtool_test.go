package metrics

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// promtoolCheck runs the real promtool check metrics on page, which reads the text format
// strictly and lints each family; it must print nothing. Without promtool the test is skipped,
// except in CI (CI=true), where it fails.
func promtoolCheck(t *testing.T, name, page string) {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("promtool is not installed: %v", err)
		}
		t.Skip("promtool is not installed")
	}
	cmd := exec.Command(bin, "check", "metrics")
	cmd.Stdin = strings.NewReader(page)
	if out, err := cmd.CombinedOutput(); err != nil || len(out) != 0 {
		t.Errorf("promtool check metrics on %s: %v\n%s\nthe page:\n%s", name, err, out, page)
	}
}

// processRegistries are the registries of each process as its main builds them, each family
// counted once so that the labelled ones have series.
func processRegistries(t *testing.T) map[string]*Registry {
	signer := NewRegistry("signer", "v1")
	s := NewSigner(signer)
	s.Signed(SignIssued, 3*time.Millisecond)
	s.Signed(SignRateLimited, 0)
	signerPage := []byte(scrape(t, signer))

	gate := NewRegistry("gate", "v1")
	g := NewGate(gate, GateState{Tunnels: func() int { return 1 }, Connections: func() int { return 2 }, HeldBytes: func() int64 { return 3 }})
	g.Requests(RequestKey{Container: "agent", Kind: "request", Verdict: "FREE"}).Add(10, 20)
	g.Requests(RequestKey{Kind: "connect", Verdict: "DENY", Code: "E_SOURCE_UNKNOWN"}).Add(0, 0)
	g.Decided("request", 5*time.Microsecond)
	g.Decided("connect", time.Microsecond)
	g.Upstream(20 * time.Millisecond)
	g.BudgetRefused("agent", "egress")
	g.PolicyApplied("sha256:abc", time.Unix(1700000000, 0))
	g.PolicyFetchFailed()
	g.Unrecorded()
	sc := NewSignerClient(gate, func() int { return 4 })
	sc.Called(CallIssued, time.Millisecond)
	sc.Cache(true)
	a := NewAudit(gate, func() int { return 0 })
	a.Batch(2, nil)
	a.Synced(time.Millisecond)
	NewAuditDB(gate, func() AuditDBLag { return AuditDBLag{Records: 1, Seconds: 0.5} }).Copied(1)
	NewTracing(gate).Spans(SpanExported, 2)
	ImportSigner(gate, SignerImportOptions{Read: func(context.Context) ([]byte, error) { return signerPage, nil }})

	console := NewRegistry("console", "v1")
	h := NewHub(console)
	h.SetState(func() HubState { return HubState{Pending: map[string]int{"agent": 1, `a "b"\c`: 2}} })
	h.Opened("agent")
	h.Closed("agent", OutcomeDenied, "terminal", 40*time.Second)
	h.Closed("agent", OutcomeExpired, "", 0)
	h.Limited("agent")
	c := NewConsole(console)
	c.Served("sha256:abc", time.Unix(1700000000, 0))
	c.ReloadFailed()
	n := NewNotify(console)
	n.Delivered("ops", DeliveryDropped)
	n.Attempted("ops", true)
	n.Decision("ops", OutcomeDenied)
	n.Queued("ops", 3)
	NewAudit(console, nil).Batch(1, nil)
	return map[string]*Registry{"gate": gate, "console": console, "signer": signer}
}

// TestPromtool: each process's page, as its Handler serves it, passes promtool check metrics.
func TestPromtool(t *testing.T) {
	for name, r := range processRegistries(t) {
		t.Run(name, func(t *testing.T) {
			page := scrape(t, r)
			for _, want := range []string{"# TYPE go_gc_duration_seconds summary", "process_start_time_seconds ", `lockhttp_build_info{process="` + name + `",version="v1"} 1`} {
				if !strings.Contains(page, want) {
					t.Errorf("the %s's page lacks %q", name, want)
				}
			}
			promtoolCheck(t, "the "+name+"'s page", page)
		})
	}
}
