package metrics

import (
	"sync"
	"sync/atomic"
	"time"
)

// RequestKey is what a request is counted under: its container ("" for a source [sources] does
// not name), its kind (the audit record's event: request, tunnel-request, connect), its verdict
// and its code ("" when it went out).
type RequestKey struct {
	Container, Kind, Verdict, Code string
}

// Requests counts the requests of one RequestKey and their bytes. Its methods are atomic: the
// gate resolves a Requests once (Gate.Requests) and counts on it without a lookup.
type Requests struct {
	n, up, down atomic.Uint64
}

// Add counts one request that sent up bytes to its target and down bytes to its client.
func (r *Requests) Add(up, down int64) {
	if r == nil {
		return
	}
	r.n.Add(1)
	if up > 0 {
		r.up.Add(uint64(up))
	}
	if down > 0 {
		r.down.Add(uint64(down))
	}
}

// maxRequestKeys bounds the series of lockhttp_gate_requests_total: past it, new combinations
// are counted under container "-overflow-". Containers come from the policy and the other labels
// from the code, so the bound is a guard, never reached by a sane policy.
const maxRequestKeys = 4096

// Gate is the gate's families.
type Gate struct {
	mu   sync.Mutex                               // serialises writers of reqs
	reqs atomic.Pointer[map[RequestKey]*Requests] // copy on write: readers never lock

	decision histogramVec
	upstream *histogram
	budget   counterVec

	policyInfo    gaugeVec
	policyApplied *gauge
	fetchFailures *counter
	unrecorded    *counter

	// decisionPlain, decisionTunnel and decisionConnect are decision's series of the three
	// kinds, resolved once: a decision is timed without a lookup.
	decisionPlain, decisionTunnel, decisionConnect *histogram
}

// GateState is what the gate's gauges read at scrape time.
type GateState struct {
	Tunnels     func() int // hijacked client connections open (CONNECT tunnels, spliced or decrypted)
	Connections func() int // client connections open
	HeldBytes   func() int64
}

var (
	descRequests = newDesc(Namespace+"_gate_requests_total",
		"Requests the gate finished, by container (- for an unknown source), kind (the audit event), verdict and code (none when it went out).",
		Counter, "container", "kind", "verdict", "code")
	descBytes = newDesc(Namespace+"_gate_bytes_total",
		"Bytes of the finished requests, by container, kind and direction: up (client to target) or down (target to client). A decrypted tunnel's connect counts its TLS bytes; its requests count their own.",
		Counter, "container", "kind", "direction")
)

// NewGate registers the gate's families in r. st's functions are read at each scrape; a nil one
// leaves its gauge out.
func NewGate(r *Registry, st GateState) *Gate {
	g := &Gate{
		decision: r.newHistogramVec(Namespace+"_gate_decision_duration_seconds",
			"Time the gate's decision (judge.Decide) took, by kind.", decisionBuckets, "kind"),
		upstream: r.newHistogram(Namespace+"_gate_upstream_duration_seconds",
			"Time from sending a request upstream to its answer's head.", networkBuckets),
		budget: r.newCounterVec(Namespace+"_gate_budget_refusals_total",
			"Requests refused with E_BUDGET, by container and budget.", "container", "budget"),
		policyInfo: r.newGaugeVec(Namespace+"_gate_policy_info",
			"1 for the policy version the gate decides with.", "version"),
		policyApplied: r.newGauge(Namespace+"_gate_policy_applied_timestamp_seconds",
			"When the gate last took a new policy from the console (Unix time)."),
		fetchFailures: r.newCounter(Namespace+"_gate_policy_fetch_failures_total",
			"Policy fetches from the console that failed (the gate keeps the policy it has)."),
		unrecorded: r.newCounter(Namespace+"_gate_unrecorded_answers_total",
			"Requests whose audit record could not be written: a forwarded answer cut before its last byte, an answer of the gate's own sent as E_NO_AUDIT without a request id, or a tunnel or WebSocket session that ended without its record."),
	}
	empty := map[RequestKey]*Requests{}
	g.reqs.Store(&empty)
	g.decisionPlain = g.decision.WithLabelValues("request")
	g.decisionTunnel = g.decision.WithLabelValues("tunnel-request")
	g.decisionConnect = g.decision.WithLabelValues("connect")
	r.register([]string{descRequests.name, descBytes.name}, collectFunc(g.collect))
	if st.Tunnels != nil {
		r.newGaugeFunc(Namespace+"_gate_tunnels_open", "CONNECT tunnels open (spliced or decrypted).", func() float64 { return float64(st.Tunnels()) })
	}
	if st.Connections != nil {
		r.newGaugeFunc(Namespace+"_gate_connections_open", "Client connections open.", func() float64 { return float64(st.Connections()) })
	}
	if st.HeldBytes != nil {
		r.newGaugeFunc(Namespace+"_gate_held_body_bytes", "Request bytes the gate holds for decisions: bodies, WebSocket messages being reassembled, and what open HTTP/2 streams are charged.", func() float64 { return float64(st.HeldBytes()) })
	}
	return g
}

// noRequests absorbs the counts of a nil Gate.
var noRequests Requests

// Requests returns the counters of k, made on first use. The gate keeps what it returns (per
// connection) so that the next request with the same key counts without a lookup.
func (g *Gate) Requests(k RequestKey) *Requests {
	if g == nil {
		return &noRequests
	}
	if c, ok := (*g.reqs.Load())[k]; ok {
		return c
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	old := *g.reqs.Load()
	if c, ok := old[k]; ok {
		return c
	}
	if len(old) >= maxRequestKeys {
		k.Container = "-overflow-"
		if c, ok := old[k]; ok {
			return c
		}
	}
	next := make(map[RequestKey]*Requests, len(old)+1)
	for kk, v := range old {
		next[kk] = v
	}
	c := &Requests{}
	next[k] = c
	g.reqs.Store(&next)
	return c
}

// Decided observes the time one decision of kind took.
func (g *Gate) Decided(kind string, d time.Duration) {
	if g == nil {
		return
	}
	var o *histogram
	switch kind {
	case "request":
		o = g.decisionPlain
	case "tunnel-request":
		o = g.decisionTunnel
	case "connect":
		o = g.decisionConnect
	default:
		o = g.decision.WithLabelValues(kind)
	}
	o.Observe(seconds(d))
}

// Upstream observes the time an upstream answer's head took.
func (g *Gate) Upstream(d time.Duration) {
	if g == nil {
		return
	}
	g.upstream.Observe(seconds(d))
}

// BudgetRefused counts an E_BUDGET refusal of container by budget (the rule's name after
// "budget:").
func (g *Gate) BudgetRefused(container, budget string) {
	if g == nil {
		return
	}
	g.budget.WithLabelValues(orDash(container), budget).Inc()
}

// PolicyApplied records that the gate decides with version from now on.
func (g *Gate) PolicyApplied(version string, at time.Time) {
	if g == nil {
		return
	}
	g.policyInfo.Reset()
	g.policyInfo.WithLabelValues(version).Set(1)
	g.policyApplied.Set(float64(at.UnixNano()) / 1e9)
}

// PolicyFetchFailed counts a failed policy fetch.
func (g *Gate) PolicyFetchFailed() {
	if g == nil {
		return
	}
	g.fetchFailures.Inc()
}

// collect adds the request counts and their bytes, summed by container and kind.
func (g *Gate) collect(out []Family) []Family {
	type ck struct{ container, kind string }
	up, down := map[ck]uint64{}, map[ck]uint64{}
	reqs := *g.reqs.Load()
	rf := descRequests.family(len(reqs))
	for k, c := range reqs {
		container := orDash(k.Container)
		rf.Series = append(rf.Series, Series{Labels: descRequests.labelsOf([]string{container, k.Kind, orNone(k.Verdict), orNone(k.Code)}),
			Value: float64(c.n.Load())})
		up[ck{container, k.Kind}] += c.up.Load()
		down[ck{container, k.Kind}] += c.down.Load()
	}
	bf := descBytes.family(2 * len(up))
	for k, n := range up {
		bf.Series = append(bf.Series,
			Series{Labels: descBytes.labelsOf([]string{k.container, k.kind, "up"}), Value: float64(n)},
			Series{Labels: descBytes.labelsOf([]string{k.container, k.kind, "down"}), Value: float64(down[k])})
	}
	return append(out, rf, bf)
}

// orNone is a verdict or code label: "none" for none (a request that failed before its
// decision, a code for one that went out).
func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// orDash is a container label: "-" for none (a container name starts with a letter or digit).
func orDash(container string) string {
	if container == "" {
		return "-"
	}
	return container
}

// Unrecorded counts an answer whose audit record could not be written.
func (g *Gate) Unrecorded() {
	if g == nil {
		return
	}
	g.unrecorded.Inc()
}
