// Package tracingtest is an OTLP/HTTP trace collector on loopback for tests: it decodes what an
// exporter sends (protobuf, gzip or not) and keeps both the spans and the raw bytes.
package tracingtest

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// Path is where the collector takes traces, OTLP/HTTP's default.
const Path = "/v1/traces"

// Span is one received span, its ids in hex and its attributes as Go values (string, int64,
// float64, bool).
type Span struct {
	Name                      string
	TraceID, SpanID, ParentID string // ParentID "" for a root span
	Kind                      int32
	Start, End                time.Time
	Attrs                     map[string]any
	Resource                  map[string]any
	StatusCode                int32
}

// Collector is an OTLP/HTTP trace receiver. The zero value is not usable; use Start.
type Collector struct {
	// URL is the collector's base URL (http://127.0.0.1:PORT); traces go to URL+Path.
	URL string

	mu     sync.Mutex
	spans  []Span   // guarded by mu
	raw    [][]byte // guarded by mu: every export's body, decompressed
	posts  int      // guarded by mu: export requests received
	status int      // guarded by mu: the status it answers (200 unless Fail)
}

// Start starts a collector on a loopback port, closed when the test ends.
func Start(t testing.TB) *Collector {
	t.Helper()
	c := &Collector{status: http.StatusOK}
	srv := httptest.NewServer(http.HandlerFunc(c.serve))
	t.Cleanup(srv.Close)
	c.URL = srv.URL
	return c
}

// Fail makes the collector answer status (such as 400) to the exports that follow.
func (c *Collector) Fail(status int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.status = status
}

func (c *Collector) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != Path {
		http.Error(w, "POST "+Path+" only", http.StatusNotFound)
		return
	}
	var body io.Reader = io.LimitReader(r.Body, 64<<20)
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	data, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(data, &req); err != nil {
		http.Error(w, "not an ExportTraceServiceRequest: "+err.Error(), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.posts++
	c.raw = append(c.raw, data)
	if c.status != http.StatusOK {
		http.Error(w, "refused by the test", c.status)
		return
	}
	for _, rs := range req.GetResourceSpans() {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.spans = append(c.spans, Span{Name: s.GetName(), TraceID: hex.EncodeToString(s.GetTraceId()),
					SpanID: hex.EncodeToString(s.GetSpanId()), ParentID: hex.EncodeToString(s.GetParentSpanId()),
					Kind: int32(s.GetKind()), Start: time.Unix(0, int64(s.GetStartTimeUnixNano())),
					End: time.Unix(0, int64(s.GetEndTimeUnixNano())), Attrs: attrs(s.GetAttributes()),
					Resource: res, StatusCode: int32(s.GetStatus().GetCode())})
			}
		}
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Write(out)
}

func attrs(kvs []*commonpb.KeyValue) map[string]any {
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = v.GetStringValue()
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = v.GetIntValue()
		case *commonpb.AnyValue_DoubleValue:
			m[kv.GetKey()] = v.GetDoubleValue()
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = v.GetBoolValue()
		default:
			m[kv.GetKey()] = v.String()
		}
	}
	return m
}

// Spans returns the spans received so far, in the order they came.
func (c *Collector) Spans() []Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Span(nil), c.spans...)
}

// Posts is how many export requests the collector received (answered 200 or not).
func (c *Collector) Posts() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.posts
}

// Raw returns every byte exported so far, the bodies decompressed, one after the other.
func (c *Collector) Raw() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Join(c.raw, nil)
}
