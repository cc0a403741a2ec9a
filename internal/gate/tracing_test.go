package gate

import (
	"net/http/httptest"
	"testing"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/tracing"
)

// spans is a Tracer that keeps what it was handed.
type spans struct {
	ids, parents []string
}

func (s *spans) Finished(r *audit.Record, traceparent string) {
	s.ids = append(s.ids, r.ID)
	s.parents = append(s.parents, traceparent)
}

var _ Tracer = (*tracing.Exporter)(nil)

const testTraceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

// TestTraceHookOffAllocs: without a Tracer, the hooks on the request path (the header kept at
// arrival, the span handed over at the end) allocate nothing.
func TestTraceHookOffAllocs(t *testing.T) {
	g := New(Config{})
	r := httptest.NewRequest("GET", "http://origin.test/x", nil)
	r.Header.Set("traceparent", testTraceparent)
	ex := &exchange{g: g}
	if n := testing.AllocsPerRun(1000, func() {
		ex.traceparent = g.traceparent(r)
		g.trace(ex)
	}); n != 0 {
		t.Fatalf("%v allocations per request without a tracer, want 0", n)
	}
	if ex.traceparent != "" {
		t.Fatalf("the header %q kept without a tracer", ex.traceparent)
	}
}

// TestTraceHook: with a Tracer, every finished request is handed over once with the traceparent
// it came with (as any client spells the header), and a request without one hands over "".
func TestTraceHook(t *testing.T) {
	if headerTraceparent != tracing.Header {
		t.Fatalf("the gate reads %q, the exporter names %q", headerTraceparent, tracing.Header)
	}
	tr := &spans{}
	g := New(Config{Tracer: tr})
	with := httptest.NewRequest("GET", "http://origin.test/x", nil)
	with.Header.Set("TRACEPARENT", testTraceparent)
	for _, r := range []struct {
		id string
		ex *exchange
	}{
		{"a", g.newExchange(with, "request")},
		{"b", g.newExchange(httptest.NewRequest("GET", "http://origin.test/y", nil), "request")},
	} {
		r.ex.rec.ID = r.id
		r.ex.fill(200, 10, "")
	}
	if len(tr.ids) != 2 || tr.ids[0] != "a" || tr.parents[0] != testTraceparent || tr.ids[1] != "b" || tr.parents[1] != "" {
		t.Fatalf("handed over %q with %q, want a with its traceparent and b with none", tr.ids, tr.parents)
	}
}

// BenchmarkTraceHookOff is the hooks' cost without a Tracer: a nil check each.
func BenchmarkTraceHookOff(b *testing.B) {
	g := New(Config{})
	r := httptest.NewRequest("GET", "http://origin.test/x", nil)
	ex := &exchange{g: g}
	b.ReportAllocs()
	for b.Loop() {
		ex.traceparent = g.traceparent(r)
		g.trace(ex)
	}
}
