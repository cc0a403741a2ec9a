package tracing

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/metrics"
	"github.com/lockhttp/lockhttp/internal/testkit"
	"github.com/lockhttp/lockhttp/internal/tracing/tracingtest"
)

func TestParseEndpoint(t *testing.T) {
	for _, c := range []struct{ name, in, want, err string }{
		{"no path gets the traces path", "http://127.0.0.1:4318", "http://127.0.0.1:4318/v1/traces", ""},
		{"a slash gets it too", "https://otel.example:4318/", "https://otel.example:4318/v1/traces", ""},
		{"a path is kept", "http://c:4318/otlp/v1/traces", "http://c:4318/otlp/v1/traces", ""},
		{"no scheme", "127.0.0.1:4318", "", "write the collector's OTLP/HTTP URL"},
		{"grpc is not http", "grpc://c:4317", "", "write the collector's OTLP/HTTP URL"},
		{"no host", "http:///v1/traces", "", "write the collector's OTLP/HTTP URL"},
		{"user info", "http://u:p@c:4318", "", "OTEL_EXPORTER_OTLP_HEADERS"},
		{"a query", "http://c:4318/v1/traces?k=v", "", "a query or fragment"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseEndpoint(c.in)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("ParseEndpoint(%q) = %q, %v; want an error with %q", c.in, got, err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("ParseEndpoint(%q) = %q, %v; want %q", c.in, got, err, c.want)
			}
		})
	}
}

func TestSplitURL(t *testing.T) {
	for _, c := range []struct {
		name, in, full, host string
		port                 int
	}{
		{"query and fragment cut", "http://h.test:8080/p/q?token=abc#frag", "http://h.test:8080/p/q", "h.test", 8080},
		{"no port", "https://h.test/x?a=1", "https://h.test/x", "h.test", 0},
		{"user info cut", "http://[userinfo:1234abcd]@h.test/x", "http://h.test/x", "h.test", 0},
		{"a CONNECT's host and port", "h.test:443", "h.test:443", "h.test", 443},
		{"IPv6", "http://[::1]:80/", "http://[::1]:80/", "::1", 80},
		{"a question mark alone", "http://h.test/?", "http://h.test/", "h.test", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			full, host, port := splitURL(c.in)
			if full != c.full || host != c.host || port != c.port {
				t.Fatalf("splitURL(%q) = %q, %q, %d; want %q, %q, %d", c.in, full, host, port, c.full, c.host, c.port)
			}
		})
	}
}

// scrape returns the text of reg's metrics.
func scrape(t *testing.T, reg *metrics.Registry) string {
	t.Helper()
	w := httptest.NewRecorder()
	reg.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	return w.Body.String()
}

// record is a finished request as the gate hands it over.
func record(id string) *audit.Record {
	return &audit.Record{Time: time.Unix(1700000000, 0), Duration: 1500 * time.Microsecond, ID: id, Event: "request",
		Container: "agent", Agent: "claude", Method: "GET", URL: "http://origin.test:8080/admin/x?token=[token:1234abcd]",
		Verdict: "DENY", Code: "E_RULE", Rule: "no-admin", Reason: "the reason, never exported", Policy: "sha256:abc",
		Status: 403, BytesIn: 12, BytesOut: 345, Detail: "the detail, never exported", Ticket: "t-1"}
}

// TestFinishedNeverAllocates: handing a request over costs no allocation, queued or dropped.
func TestFinishedNeverAllocates(t *testing.T) {
	reg := metrics.NewRegistry("gate", "v0")
	e, err := New(Options{Endpoint: "http://127.0.0.1:9/", Queue: 1 << 16, Metrics: metrics.NewTracing(reg)})
	if err != nil {
		t.Fatal(err)
	}
	r := record("r1")
	tp := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	if n := testing.AllocsPerRun(1000, func() { e.Finished(r, tp) }); n != 0 {
		t.Errorf("Finished with room in the queue: %v allocations, want 0", n)
	}
	for len(e.queue) < cap(e.queue) {
		e.Finished(r, tp)
	}
	if n := testing.AllocsPerRun(1000, func() { e.Finished(r, tp) }); n != 0 {
		t.Errorf("Finished with the queue full: %v allocations, want 0", n)
	}
	if m := scrape(t, reg); !strings.Contains(m, `lockhttp_gate_trace_spans_total{result="dropped"} 1001`) {
		t.Errorf("the drops are not counted (1000 runs and the warm-up):\n%s", m)
	}
}

// run starts e.Run and returns a function that stops it and waits for its last export.
func run(e *Exporter) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()
	return func() { cancel(); <-done }
}

// TestExport: a span per request reaches a real OTLP/HTTP collector with the decision's
// attributes, the agent's trace as its parent, the record's times, and nothing the record keeps
// out (query, reason, detail).
func TestExport(t *testing.T) {
	col := tracingtest.Start(t)
	reg := metrics.NewRegistry("gate", "v0")
	e, err := New(Options{Endpoint: col.URL, Version: "v1.2.3", Metrics: metrics.NewTracing(reg), Batch: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stop := run(e)
	const trace, parent = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	e.Finished(record("child"), "00-"+trace+"-"+parent+"-01")
	e.Finished(record("unsampled-parent"), "00-"+trace+"-"+parent+"-00")
	for _, bad := range []string{"garbage", "00-" + trace + "-" + parent, "00-00000000000000000000000000000000-" + parent + "-01", strings.Repeat("0", 1000)} {
		e.Finished(record("bad"), bad)
	}
	e.Finished(record("none"), "")
	testkit.WaitFor(t, 10*time.Second, "7 spans at the collector", func() bool { return len(col.Spans()) == 7 })
	stop()

	byID := map[string][]tracingtest.Span{}
	for _, s := range col.Spans() {
		id, _ := s.Attrs[AttrID].(string)
		byID[id] = append(byID[id], s)
	}
	for _, id := range []string{"child", "unsampled-parent"} {
		s := byID[id][0]
		if s.TraceID != trace || s.ParentID != parent {
			t.Errorf("%s: trace %s parent %s, want %s %s", id, s.TraceID, s.ParentID, trace, parent)
		}
	}
	for _, id := range []string{"bad", "none"} {
		for _, s := range byID[id] {
			if s.ParentID != "" || s.TraceID == trace || len(s.TraceID) != 32 {
				t.Errorf("%s: trace %s parent %q, want a root span of a trace of its own", id, s.TraceID, s.ParentID)
			}
		}
	}
	if len(byID["bad"]) != 4 {
		t.Errorf("%d spans for malformed traceparents, want 4", len(byID["bad"]))
	}
	s := byID["child"][0]
	want := map[string]any{
		AttrEvent: "request", AttrContainer: "agent", AttrAgent: "claude", AttrMethod: "GET",
		AttrURL: "http://origin.test:8080/admin/x", AttrHost: "origin.test", AttrPort: int64(8080),
		AttrVerdict: "DENY", AttrCode: "E_RULE", AttrRule: "no-admin", AttrPolicy: "sha256:abc", AttrTicket: "t-1",
		AttrStatus: int64(403), AttrBytesIn: int64(12), AttrBytesOut: int64(345),
	}
	for k, v := range want {
		if s.Attrs[k] != v {
			t.Errorf("attribute %s = %#v, want %#v", k, s.Attrs[k], v)
		}
	}
	if len(s.Attrs) != len(want)+1 { // and the id
		t.Errorf("attributes %v, want only %v and the id", s.Attrs, want)
	}
	if s.Name != SpanName || s.Resource["service.name"] != ServiceName || s.Resource["service.version"] != "v1.2.3" {
		t.Errorf("span %q of %v", s.Name, s.Resource)
	}
	if !s.Start.Equal(time.Unix(1700000000, 0)) || s.End.Sub(s.Start) != 1500*time.Microsecond {
		t.Errorf("span from %v to %v, want the record's time and duration", s.Start, s.End)
	}
	raw := col.Raw()
	for _, kept := range []string{"token=", "1234abcd", "the reason", "the detail"} {
		if bytes.Contains(raw, []byte(kept)) {
			t.Errorf("the export holds %q", kept)
		}
	}
	if m := scrape(t, reg); !strings.Contains(m, `lockhttp_gate_trace_spans_total{result="exported"} 7`) {
		t.Errorf("the exported spans are not counted:\n%s", m)
	}
}

// TestExportFailureLoggedOnce: a collector that refuses every export costs one log line per
// interval, and every span it refused is counted.
func TestExportFailureLoggedOnce(t *testing.T) {
	col := tracingtest.Start(t)
	col.Fail(http.StatusBadRequest) // not retried
	reg := metrics.NewRegistry("gate", "v0")
	var logs testkit.Buffer
	clock := testkit.NewClock(time.Unix(1700000000, 0))
	e, err := New(Options{Endpoint: col.URL, Metrics: metrics.NewTracing(reg), Batch: 20 * time.Millisecond,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)), Now: clock.Now, LogEvery: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	stop := run(e)
	defer stop()
	for i := range 3 {
		e.Finished(record("r"), "")
		testkit.WaitFor(t, 10*time.Second, "an export refused", func() bool { return col.Posts() == i+1 })
	}
	testkit.WaitFor(t, 10*time.Second, "3 spans counted failed", func() bool {
		return strings.Contains(scrape(t, reg), `lockhttp_gate_trace_spans_total{result="failed"} 3`)
	})
	if n := strings.Count(logs.String(), "trace export failed"); n != 1 {
		t.Fatalf("%d log lines for 3 failed exports within a minute, want 1:\n%s", n, logs.String())
	}
	clock.Advance(time.Minute)
	e.Finished(record("r"), "")
	testkit.WaitFor(t, 10*time.Second, "a second log line a minute later", func() bool {
		return strings.Count(logs.String(), "trace export failed") == 2
	})
	if !strings.Contains(logs.String(), `"spans":3`) {
		t.Errorf("the second line does not count the spans failed since the first:\n%s", logs.String())
	}
}

// BenchmarkFinished is the request path's cost with traces on: the record's fields copied into
// the queue (Run keeps it drained).
func BenchmarkFinished(b *testing.B) {
	col := tracingtest.Start(b)
	e, err := New(Options{Endpoint: col.URL})
	if err != nil {
		b.Fatal(err)
	}
	defer run(e)()
	r := record("r1")
	b.ReportAllocs()
	for b.Loop() {
		e.Finished(r, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	}
}
