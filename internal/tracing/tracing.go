// Package tracing exports one OpenTelemetry span per request the gate finished to an operator's
// OTLP/HTTP collector, a child of the agent's own span when the request named one (traceparent).
//
// The gate hands each finished request to Exporter.Finished, which copies the record's fields into
// a bounded queue and returns: it never waits, allocates or fails. Run encodes the spans from the
// queue as OTLP protobuf (otlp.go, by hand: the OpenTelemetry SDK and its exporter would link
// gRPC into the gate for a feature most gates never turn on), batches them and posts each batch
// to the collector (export.go); a full queue drops the request's span and counts it, an export
// that fails counts its spans and is logged at most once a minute. A span holds what the audit
// record holds, less the URL's query and user info: never a header, a body or a query string.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
	post     *poster
	resource []byte        // the encoded Resource of every export
	batchMax int           // spans an export holds at most
	batchAge time.Duration // how long a span waits for others at most
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

// batchMax is how many spans one export holds at most.
const batchMax = 512

// New builds an Exporter for o.Endpoint, with the collector's headers, CA, client certificate
// and compression from the OTEL_EXPORTER_OTLP_ variables (export.go). It sends nothing until Run
// has spans, and starts no goroutine.
func New(o Options) (*Exporter, error) {
	endpoint, err := ParseEndpoint(o.Endpoint)
	if err != nil {
		return nil, err
	}
	post, err := newPoster(endpoint, o.Version, os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("otlp exporter for %s: %w", endpoint, err)
	}
	e := &Exporter{queue: make(chan span, cmp(o.Queue, DefaultQueue)), post: post, m: o.Metrics, log: o.Logger,
		batchMax: batchMax, batchAge: cmp(o.Batch, DefaultBatch),
		endpoint: endpoint, logEvery: cmp(o.LogEvery, DefaultLogEvery), now: o.Now}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if e.now == nil {
		e.now = time.Now
	}
	e.resource = appendResource(nil, o.Version)
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

// Run encodes and exports the queued spans until ctx ends, then exports what is queued within
// five seconds and returns. A batch goes out when it holds batchMax spans or its first span has
// waited Options.Batch.
func (e *Exporter) Run(ctx context.Context) {
	// The posts run under grace, which ends shutdownGrace after ctx does: a post in flight when
	// ctx ends is not cut (the collector may have taken it), and the whole shutdown, that post
	// and the last ones, takes shutdownGrace at most.
	grace, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	defer context.AfterFunc(ctx, func() { time.AfterFunc(shutdownGrace, cancel) })()
	b := &batch{}
	var timer *time.Timer
	var due <-chan time.Time
	flush := func() {
		if timer != nil {
			timer.Stop()
			due = nil
		}
		e.flush(grace, ctx.Done(), b)
	}
	for {
		select {
		case s := <-e.queue:
			e.add(b, s)
			if b.n >= e.batchMax {
				flush()
			} else if due == nil {
				if timer == nil {
					timer = time.NewTimer(e.batchAge)
				} else {
					timer.Reset(e.batchAge)
				}
				due = timer.C
			}
		case <-due:
			due = nil
			e.flush(grace, ctx.Done(), b)
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			e.shutdown(grace, b)
			return
		}
	}
}

// shutdownGrace is how long the exporter takes at most to export what it holds once Run's
// context ends.
const shutdownGrace = 5 * time.Second

// shutdown exports the batch and the spans still queued until grace ends; what is left then
// counts as failed.
func (e *Exporter) shutdown(grace context.Context, b *batch) {
	for len(e.queue) > 0 { // Run is the only reader
		e.add(b, <-e.queue)
		if b.n >= e.batchMax {
			e.flush(grace, nil, b)
		}
	}
	e.flush(grace, nil, b)
}

// add encodes s's span into b.
func (e *Exporter) add(b *batch, s span) {
	b.spans = appendSpan(b.spans, &s, randomIDs)
	b.n++
}

// flush posts b's spans under ctx, counts them exported or failed, and empties b. An export
// whose retry stop cut short keeps its spans, for shutdown.
func (e *Exporter) flush(ctx context.Context, stop <-chan struct{}, b *batch) {
	if b.n == 0 {
		return
	}
	b.body = appendRequest(b.body[:0], e.resource, b.spans)
	err := e.post.export(ctx, stop, b.body)
	if errors.Is(err, errStopped) {
		return
	}
	n := b.n
	b.reset()
	if err != nil {
		e.failed(n, err)
		return
	}
	e.exported.Add(int64(n))
	e.m.Spans(metrics.SpanExported, n)
	e.mu.Lock()
	e.lastOK = e.now()
	e.mu.Unlock()
}

// batch is the spans of the next export, encoded, and the buffer of its request.
type batch struct {
	spans []byte // Span messages, each with its field tag and length
	n     int
	body  []byte
}

// reset empties b, keeping its buffers unless they grew large.
func (b *batch) reset() {
	b.n = 0
	b.spans = b.spans[:0]
	if cap(b.spans) > 4<<20 {
		b.spans, b.body = nil, nil
	}
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
