package gate

import (
	"net/http"

	"github.com/lockhttp/lockhttp/internal/audit"
)

// Tracer exports the gate's finished requests as spans: internal/tracing's Exporter, which the
// gate's main builds from -otlp-endpoint. An interface so that what imports the gate without
// exporting spans (lox, lockhttp) does not link the OpenTelemetry SDK.
type Tracer interface {
	// Finished takes the finished request r and its traceparent header ("" when it had none).
	// It must return at once: it runs on the request's path.
	Finished(r *audit.Record, traceparent string)
}

// The gate's spans (Config.Tracer): the traceparent header is kept when the request arrives
// (newExchange) and the span handed over where the request is counted (exchange.fill). Without a
// Tracer each costs one nil check and no allocation (TestTraceHookOffAllocs).

// headerTraceparent is W3C Trace Context's header, in http.Header's canonical form.
const headerTraceparent = "Traceparent"

// traceparent is r's traceparent header when the gate exports spans, else "".
func (g *Gate) traceparent(r *http.Request) string {
	if g.cfg.Tracer == nil {
		return ""
	}
	return r.Header.Get(headerTraceparent)
}

// trace hands the finished request of ex to the exporter.
func (g *Gate) trace(ex *exchange) {
	if t := g.cfg.Tracer; t != nil {
		t.Finished(&ex.rec, ex.traceparent)
	}
}
