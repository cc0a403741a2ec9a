package metrics

// Tracing is the gate's family of its OTLP spans (internal/tracing), registered only when the
// gate exports traces.
type Tracing struct {
	exported, dropped, failed *counter
}

// Results of the gate's spans (Tracing.Spans).
const (
	SpanExported = "exported" // the collector took it
	SpanDropped  = "dropped"  // the queue was full: the span was never built
	SpanFailed   = "failed"   // its export failed (after the exporter's retries)
)

// NewTracing registers the span family in r.
func NewTracing(r *Registry) *Tracing {
	v := r.newCounterVec(Namespace+"_gate_trace_spans_total",
		"Spans of finished requests the gate exported over OTLP, by result: exported, dropped (the queue was full), failed (the export failed).", "result")
	t := &Tracing{exported: v.WithLabelValues(SpanExported), dropped: v.WithLabelValues(SpanDropped), failed: v.WithLabelValues(SpanFailed)}
	return t
}

// Spans counts n spans of result (SpanExported, SpanDropped, SpanFailed).
func (t *Tracing) Spans(result string, n int) {
	if t == nil || n <= 0 {
		return
	}
	switch result {
	case SpanExported:
		t.exported.Add(uint64(n))
	case SpanDropped:
		t.dropped.Add(uint64(n))
	case SpanFailed:
		t.failed.Add(uint64(n))
	}
}
