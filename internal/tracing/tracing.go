// Package tracing exports one OpenTelemetry span per request the gate finished to an operator's
// OTLP/HTTP collector, a child of the agent's own span when the request named one (traceparent).
//
// The gate hands each finished request to Exporter.Finished, which copies the record's fields into
// a bounded queue and returns: it never waits, allocates or fails. Run builds the spans from the
// queue and the OpenTelemetry SDK batches and exports them; a full queue drops the request's span
// and counts it, an export that fails counts its spans and is logged at most once a minute. A
// span holds what the audit record holds, less the URL's query and user info: never a header, a
// body or a query string.
package tracing

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/gateapi"
	"github.com/lockhttp/lockhttp/internal/metrics"
)

// Header is the request header that names the agent's span (W3C Trace Context), in the
// canonical form http.Header keys take.
const Header = "Traceparent"

// SpanName is the name of every span the gate exports.
const SpanName = "lockhttp.request"

// ServiceName is the service.name of the gate's spans.
const ServiceName = "lockhttp-gate"

// scope is the instrumentation scope of the spans.
const scope = "github.com/lockhttp/lockhttp/internal/tracing"

// Attribute keys of a span. The HTTP and server ones are OpenTelemetry's semantic conventions,
// so a collector's UI shows them as it shows any HTTP server's; the rest are the gate's.
const (
	AttrID        = "lockhttp.request.id"
	AttrEvent     = "lockhttp.event" // the audit event: request, tunnel-request, connect
	AttrContainer = "lockhttp.container"
	AttrAgent     = "lockhttp.agent"
	AttrVerdict   = "lockhttp.verdict"
	AttrCode      = "lockhttp.code"
	AttrRule      = "lockhttp.rule"
	AttrPolicy    = "lockhttp.policy"
	AttrTicket    = "lockhttp.ticket"
	AttrBytesIn   = "lockhttp.bytes_in"
	AttrBytesOut  = "lockhttp.bytes_out"
	AttrMethod    = "http.request.method"
	AttrStatus    = "http.response.status_code"
	AttrURL       = "url.full" // scheme, host and path: no query, no user info
	AttrHost      = "server.address"
	AttrPort      = "server.port"
)

// Defaults of Options.
const (
	DefaultQueue    = 4096
	DefaultBatch    = 5 * time.Second
	DefaultLogEvery = time.Minute
)

// maxTraceparent bounds the header the gate parses: version 00 takes 55 bytes; a longer one is
// ignored.
const maxTraceparent = 256

// maxURL clips a span's URL as the audit clips the record's.
const maxURL = 2048

// maxErr clips an export error in the log: it may quote the collector's answer.
const maxErr = 1024

// Options configure New.
type Options struct {
	// Endpoint is the collector's OTLP/HTTP URL, http:// or https://; with no path, the
	// traces path /v1/traces is added. Required.
	Endpoint string
	// Version is the gate's build, the spans' service.version. Empty: none.
	Version string
	// Logger takes the export failures. Nil: discarded.
	Logger *slog.Logger
	// Metrics counts the spans exported, dropped and failed. Nil: not counted.
	Metrics *metrics.Tracing
	// Queue is how many finished requests wait for Run at most; past it their spans are
	// dropped. Zero: DefaultQueue.
	Queue int
	// Batch is how long a span waits to be exported with others. Zero: DefaultBatch.
	Batch time.Duration
	// LogEvery is the least time between two log lines of failed exports. Zero:
	// DefaultLogEvery.
	LogEvery time.Duration
	// Now is the clock of LogEvery. Nil: time.Now.
	Now func() time.Time
}

// Exporter exports the gate's requests as spans. Create it with New, run Run, and hand it
// every finished request with Finished.
type Exporter struct {
	queue    chan span
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
	m        *metrics.Tracing
	log      *slog.Logger
	endpoint string
	logEvery time.Duration
	now      func() time.Time

	exported, dropped, failedN atomic.Int64 // spans, for Status

	mu        sync.Mutex
	lastLog   time.Time // guarded by mu: when a failed export was last logged
	unlogged  int       // guarded by mu: spans whose failed export was not logged
	unloggedN int       // guarded by mu: failed exports not logged
	lastOK    time.Time // guarded by mu: the last export that succeeded
	lastFail  time.Time // guarded by mu: the last export that failed
	lastErr   string    // guarded by mu: its error
}

// Status is what the exporter has done, for the gate's /status and the doctor
// (gateapi.TraceStatus).
type Status = gateapi.TraceStatus

// Status reports the spans exported, dropped and failed so far, and the last failure.
func (e *Exporter) Status() Status {
	e.mu.Lock()
	defer e.mu.Unlock()
	return Status{Endpoint: e.endpoint, Exported: e.exported.Load(), Dropped: e.dropped.Load(), Failed: e.failedN.Load(),
		LastOK: e.lastOK, LastFail: e.lastFail, LastError: e.lastErr}
}

// span is the fields of one finished request a span is built from, copied out of its audit
// record.
type span struct {
	start                                            time.Time
	duration                                         time.Duration
	id, event, container, agent, method, url         string
	verdict, code, rule, policy, ticket, traceparent string
	status                                           int
	bytesIn, bytesOut                                int64
}

// ParseEndpoint checks a collector URL and returns it with the traces path when it has none.
func ParseEndpoint(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%q: write the collector's OTLP/HTTP URL, such as http://127.0.0.1:4318", s)
	}
	if u.User != nil {
		return "", fmt.Errorf("%q: user info in the URL; give the collector's credentials in OTEL_EXPORTER_OTLP_HEADERS", s)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("%q: a query or fragment; give the collector's URL with its path only", s)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	return u.String(), nil
}

// New builds an Exporter for o.Endpoint. It sends nothing until Run builds spans; the
// OpenTelemetry SDK's batching goroutine starts here.
func New(o Options) (*Exporter, error) {
	endpoint, err := ParseEndpoint(o.Endpoint)
	if err != nil {
		return nil, err
	}
	client, err := otlptracehttp.New(context.Background(),
		otlptracehttp.WithEndpointURL(endpoint),
		// Straight to the collector, whatever HTTP_PROXY says: the gate's own proxy variables
		// could send its spans through itself.
		otlptracehttp.WithProxy(func(*http.Request) (*url.URL, error) { return nil, nil }),
		otlptracehttp.WithTimeout(10*time.Second),
		otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: true, InitialInterval: time.Second,
			MaxInterval: 5 * time.Second, MaxElapsedTime: 15 * time.Second}),
	)
	if err != nil {
		return nil, fmt.Errorf("otlp exporter for %s: %w", endpoint, err)
	}
	e := &Exporter{queue: make(chan span, cmp(o.Queue, DefaultQueue)), m: o.Metrics, log: o.Logger,
		endpoint: endpoint, logEvery: cmp(o.LogEvery, DefaultLogEvery), now: o.Now}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if e.now == nil {
		e.now = time.Now
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", ServiceName)}
	if o.Version != "" {
		attrs = append(attrs, attribute.String("service.version", o.Version))
	}
	e.provider = sdktrace.NewTracerProvider(
		sdktrace.WithResource(resource.NewSchemaless(attrs...)),
		// Every decision is exported, whatever the agent's sampling flag says.
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
		// Blocking: the SDK's own queue never drops silently. Run waits on it, and Finished
		// drops (and counts) when Run falls behind.
		sdktrace.WithBatcher(&counted{SpanExporter: client, e: e}, sdktrace.WithBlocking(),
			sdktrace.WithMaxQueueSize(512), sdktrace.WithMaxExportBatchSize(512),
			sdktrace.WithBatchTimeout(cmp(o.Batch, DefaultBatch))),
	)
	e.tracer = e.provider.Tracer(scope)
	return e, nil
}

// cmp is v, or def when v is zero.
func cmp[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// Endpoint is the URL the spans go to.
func (e *Exporter) Endpoint() string { return e.endpoint }

// Finished queues the span of the finished request r, a child of traceparent's span when that
// is a valid W3C traceparent header (else a root span). It never blocks and never allocates:
// with the queue full, the span is dropped and counted.
func (e *Exporter) Finished(r *audit.Record, traceparent string) {
	s := span{start: r.Time, duration: r.Duration, id: r.ID, event: r.Event, container: r.Container,
		agent: r.Agent, method: r.Method, url: r.URL, verdict: r.Verdict, code: r.Code, rule: r.Rule,
		policy: r.Policy, ticket: r.Ticket, traceparent: traceparent, status: r.Status,
		bytesIn: r.BytesIn, bytesOut: r.BytesOut}
	select {
	case e.queue <- s:
	default:
		e.dropped.Add(1)
		e.m.Spans(metrics.SpanDropped, 1)
	}
}

// Run builds and exports the queued spans until ctx ends, then exports what is queued within
// five seconds and returns.
func (e *Exporter) Run(ctx context.Context) {
	for {
		select {
		case s := <-e.queue:
			e.export(s)
		case <-ctx.Done():
			e.shutdown()
			return
		}
	}
}

// shutdown exports the spans still queued and stops the SDK.
func (e *Exporter) shutdown() {
	for len(e.queue) > 0 { // Run is the only reader
		e.export(<-e.queue)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.provider.Shutdown(ctx); err != nil {
		e.log.Warn("trace export at shutdown", "endpoint", e.endpoint, "err", err)
	}
}

// propagator reads the traceparent header only: tracestate is the agent's free text, and the
// gate exports none of it.
var propagator = propagation.TraceContext{}

// export builds s's span and ends it, which hands it to the SDK's batcher.
func (e *Exporter) export(s span) {
	ctx := context.Background()
	if s.traceparent != "" && len(s.traceparent) <= maxTraceparent {
		ctx = propagator.Extract(ctx, propagation.MapCarrier{"traceparent": s.traceparent})
	}
	full, host, port := splitURL(s.url)
	attrs := make([]attribute.KeyValue, 0, 16)
	attrs = append(attrs,
		attribute.String(AttrID, s.id),
		attribute.String(AttrEvent, s.event),
		attribute.String(AttrContainer, s.container),
		attribute.String(AttrMethod, s.method),
		attribute.String(AttrURL, audit.Clip(full, maxURL)),
		attribute.String(AttrHost, audit.Clip(host, maxURL)),
		attribute.String(AttrVerdict, s.verdict),
		attribute.Int(AttrStatus, s.status),
		attribute.Int64(AttrBytesIn, s.bytesIn),
		attribute.Int64(AttrBytesOut, s.bytesOut),
	)
	for _, kv := range [...]struct{ k, v string }{{AttrAgent, s.agent}, {AttrCode, s.code}, {AttrRule, s.rule}, {AttrPolicy, s.policy}, {AttrTicket, s.ticket}} {
		if kv.v != "" {
			attrs = append(attrs, attribute.String(kv.k, kv.v))
		}
	}
	if port > 0 {
		attrs = append(attrs, attribute.Int(AttrPort, port))
	}
	_, sp := e.tracer.Start(ctx, SpanName, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithTimestamp(s.start), trace.WithAttributes(attrs...))
	if s.status >= 500 {
		sp.SetStatus(codes.Error, s.code)
	}
	sp.End(trace.WithTimestamp(s.start.Add(s.duration)))
}

// splitURL is the audit record's URL (secrets already masked) without its query, fragment and
// user info, and its host and port: "http://h:8080/p?q" is "http://h:8080/p", "h", 8080; a
// CONNECT's "h:443" is "h:443", "h", 443.
func splitURL(u string) (full, host string, port int) {
	if i := strings.IndexAny(u, "?#"); i >= 0 {
		u = u[:i]
	}
	scheme, rest := "", u
	if i := strings.Index(u, "://"); i >= 0 {
		scheme, rest = u[:i+3], u[i+3:]
	}
	auth, path := rest, ""
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		auth, path = rest[:i], rest[i:]
	}
	if i := strings.LastIndexByte(auth, '@'); i >= 0 {
		auth = auth[i+1:]
	}
	host = auth
	if h, p, err := net.SplitHostPort(auth); err == nil {
		host = h
		port, _ = strconv.Atoi(p)
	}
	return scheme + auth + path, host, port
}

// counted is the OTLP exporter, counting what it exports and logging its failures: it answers
// nil to the SDK, which would hand an error to OpenTelemetry's global handler.
type counted struct {
	sdktrace.SpanExporter
	e *Exporter
}

func (c *counted) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if err := c.SpanExporter.ExportSpans(ctx, spans); err != nil {
		c.e.failed(len(spans), err)
		return nil
	}
	c.e.exported.Add(int64(len(spans)))
	c.e.m.Spans(metrics.SpanExported, len(spans))
	c.e.mu.Lock()
	c.e.lastOK = c.e.now()
	c.e.mu.Unlock()
	return nil
}

// failed counts n spans whose export failed and logs it, at most once per logEvery.
func (e *Exporter) failed(n int, err error) {
	e.failedN.Add(int64(n))
	e.m.Spans(metrics.SpanFailed, n)
	now := e.now()
	e.mu.Lock()
	e.lastFail, e.lastErr = now, err.Error()
	if !e.lastLog.IsZero() && now.Sub(e.lastLog) < e.logEvery {
		e.unlogged += n
		e.unloggedN++
		e.mu.Unlock()
		return
	}
	e.lastLog = now
	spans, exports := e.unlogged+n, e.unloggedN+1
	e.unlogged, e.unloggedN = 0, 0
	e.mu.Unlock()
	e.log.Warn("trace export failed", "endpoint", e.endpoint, "spans", spans, "exports", exports,
		"next_line_after", e.logEvery.String(), "err", audit.Clip(err.Error(), maxErr))
}
