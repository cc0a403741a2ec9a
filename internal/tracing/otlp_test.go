package tracing

import (
	"encoding/hex"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/lockhttp/lockhttp/internal/audit"
)

// fixedIDs is an idSource of fixed IDs.
func fixedIDs() (trace [16]byte, span [8]byte) {
	trace[15], span[7] = 0x11, 0x22
	return trace, span
}

// decode encodes spans as one export and decodes it with the generated OTLP types, as a
// collector does.
func decode(t testing.TB, version string, spans ...*span) *coltracepb.ExportTraceServiceRequest {
	t.Helper()
	var enc []byte
	for _, s := range spans {
		enc = appendSpan(enc, s, fixedIDs)
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(appendRequest(nil, appendResource(nil, version), enc), &req); err != nil {
		t.Fatalf("the generated decoder refuses the export: %v", err)
	}
	return &req
}

// attrMap is a span's attributes as Go values.
func attrMap(t testing.TB, kvs []*commonpb.KeyValue) map[string]any {
	t.Helper()
	m := map[string]any{}
	for _, kv := range kvs {
		if _, dup := m[kv.GetKey()]; dup {
			t.Errorf("attribute %s twice", kv.GetKey())
		}
		switch v := kv.GetValue().GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = v.IntValue
		default:
			t.Errorf("attribute %s of type %T", kv.GetKey(), v)
		}
	}
	return m
}

// wantAttrs is what a span of s must carry: the package's attributes, the empty optional ones
// left out, every string made valid UTF-8.
func wantAttrs(s *span) map[string]any {
	full, host, port := splitURL(s.url)
	m := map[string]any{
		AttrID: validUTF8(s.id), AttrEvent: validUTF8(s.event), AttrContainer: validUTF8(s.container),
		AttrMethod: validUTF8(s.method), AttrURL: validUTF8(audit.Clip(full, maxURL)),
		AttrHost: validUTF8(audit.Clip(host, maxURL)), AttrVerdict: validUTF8(s.verdict),
		AttrStatus: int64(s.status), AttrBytesIn: s.bytesIn, AttrBytesOut: s.bytesOut,
	}
	for k, v := range map[string]string{AttrAgent: s.agent, AttrCode: s.code, AttrRule: s.rule, AttrPolicy: s.policy, AttrTicket: s.ticket} {
		if v != "" {
			m[k] = validUTF8(v)
		}
	}
	if port > 0 {
		m[AttrPort] = int64(port)
	}
	return m
}

// check decodes s's span and holds every field of it to s.
func check(t testing.TB, s *span) {
	t.Helper()
	req := decode(t, "v9.8.7", s)
	rs := req.GetResourceSpans()
	if len(rs) != 1 || len(rs[0].GetScopeSpans()) != 1 || len(rs[0].GetScopeSpans()[0].GetSpans()) != 1 {
		t.Fatalf("the export's shape: %v", req)
	}
	res := attrMap(t, rs[0].GetResource().GetAttributes())
	if len(res) != 2 || res["service.name"] != ServiceName || res["service.version"] != "v9.8.7" {
		t.Errorf("resource %v", res)
	}
	if name := rs[0].GetScopeSpans()[0].GetScope().GetName(); name != scope {
		t.Errorf("scope %q, want %q", name, scope)
	}
	sp := rs[0].GetScopeSpans()[0].GetSpans()[0]
	if sp.GetName() != SpanName || sp.GetKind() != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("span %q of kind %v", sp.GetName(), sp.GetKind())
	}
	if sp.GetStartTimeUnixNano() != uint64(s.start.UnixNano()) || sp.GetEndTimeUnixNano() != uint64(s.start.Add(s.duration).UnixNano()) {
		t.Errorf("span from %d to %d, want %v for %v", sp.GetStartTimeUnixNano(), sp.GetEndTimeUnixNano(), s.start, s.duration)
	}
	trace, parent, ok := [16]byte{}, [8]byte{}, false
	if len(s.traceparent) <= maxTraceparent {
		trace, parent, ok = parseTraceparent(s.traceparent)
	}
	wantTrace, wantSpan := fixedIDs()
	wantParent := []byte(nil)
	if ok {
		wantTrace, wantParent = trace, parent[:]
	}
	if string(sp.GetTraceId()) != string(wantTrace[:]) || string(sp.GetSpanId()) != string(wantSpan[:]) || string(sp.GetParentSpanId()) != string(wantParent) {
		t.Errorf("trace %x span %x parent %x, want %x %x %x", sp.GetTraceId(), sp.GetSpanId(), sp.GetParentSpanId(), wantTrace, wantSpan, wantParent)
	}
	wantFlags := uint32(flagSampled | flagHasIsRemote)
	if ok {
		wantFlags |= flagParentRemote
	}
	if sp.GetFlags() != wantFlags {
		t.Errorf("flags %#x, want %#x", sp.GetFlags(), wantFlags)
	}
	got, want := attrMap(t, sp.GetAttributes()), wantAttrs(s)
	if len(got) != len(want) {
		t.Errorf("attributes %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("attribute %s = %#v, want %#v", k, got[k], v)
		}
	}
	if s.status >= 500 {
		if sp.GetStatus().GetCode() != tracepb.Status_STATUS_CODE_ERROR || sp.GetStatus().GetMessage() != validUTF8(s.code) {
			t.Errorf("status %v for HTTP %d, want an error with %q", sp.GetStatus(), s.status, s.code)
		}
	} else if sp.GetStatus() != nil {
		t.Errorf("status %v for HTTP %d, want none", sp.GetStatus(), s.status)
	}
}

// full is a span with every field set.
func full() span {
	return span{start: time.Unix(1700000000, 123456789), duration: 1500 * time.Microsecond, id: "r1", event: "request",
		container: "agent", agent: "claude", method: "GET", url: "http://origin.test:8080/admin/x?token=abc",
		verdict: "DENY", code: "E_RULE", rule: "no-admin", policy: "sha256:abc", ticket: "t-1",
		traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", status: 403, bytesIn: 12, bytesOut: 345}
}

// TestSpanRoundTrip: the hand-encoded spans decode with the generated OTLP types to exactly what
// the record held, odd values included.
func TestSpanRoundTrip(t *testing.T) {
	long := strings.Repeat("é", 40000) // 80 KB: lengths of three varint bytes
	for _, c := range []struct {
		name string
		edit func(*span)
	}{
		{"every field", func(*span) {}},
		{"empty strings and zeroes", func(s *span) { *s = span{start: time.Unix(0, 0)} }},
		{"long values", func(s *span) {
			s.id, s.agent, s.rule, s.url = long, long, long, "http://h.test/"+long
		}},
		{"non-UTF-8 values become U+FFFD", func(s *span) {
			s.id, s.agent, s.code, s.url, s.container = "a\xffb", "\xc3", "E_\x80", "http://h\xfe.test/p\xff", "\xed\xa0\x80"
			s.status = 502
		}},
		{"a 5xx is an error with its code", func(s *span) { s.status, s.code = 503, "E_UPSTREAM" }},
		{"a 5xx with no code", func(s *span) { s.status, s.code = 500, "" }},
		{"negative and large numbers", func(s *span) { s.status, s.bytesIn, s.bytesOut = -1, -1, 1<<63-1 }},
		{"a CONNECT", func(s *span) { s.event, s.method, s.url = "connect", "CONNECT", "h.test:443" }},
		{"an IPv6 host", func(s *span) { s.url = "https://[2001:db8::1]:8443/x" }},
		{"a time before 1970", func(s *span) { s.start = time.Unix(-5, 0) }},
		{"no traceparent", func(s *span) { s.traceparent = "" }},
		{"an unsampled parent", func(s *span) { s.traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00" }},
		{"a malformed traceparent", func(s *span) { s.traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331" }},
		{"a long traceparent", func(s *span) {
			s.traceparent = "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-" + strings.Repeat("x", 300)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := full()
			c.edit(&s)
			check(t, &s)
		})
	}
}

// TestBatchRoundTrip: the spans of one export decode in their order.
func TestBatchRoundTrip(t *testing.T) {
	var spans []*span
	for _, id := range []string{"a", "", "c\xff", strings.Repeat("d", 5000)} {
		s := full()
		s.id = id
		spans = append(spans, &s)
	}
	got := decode(t, "", spans...).GetResourceSpans()[0]
	if res := attrMap(t, got.GetResource().GetAttributes()); len(res) != 1 || res["service.name"] != ServiceName {
		t.Errorf("resource with no version: %v", res)
	}
	for i, sp := range got.GetScopeSpans()[0].GetSpans() {
		if id := attrMap(t, sp.GetAttributes())[AttrID]; id != validUTF8(spans[i].id) {
			t.Errorf("span %d: id %q, want %q", i, id, spans[i].id)
		}
	}
}

func TestParseTraceparent(t *testing.T) {
	const tr, p = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	for _, c := range []struct {
		name, in string
		ok       bool
	}{
		{"sampled", "00-" + tr + "-" + p + "-01", true},
		{"unsampled", "00-" + tr + "-" + p + "-00", true},
		{"a later version with more fields", "cc-" + tr + "-" + p + "-01-what-comes", true},
		{"a later version as long as 00", "01-" + tr + "-" + p + "-01", true},
		{"version 00 with more fields", "00-" + tr + "-" + p + "-01-x", false},
		{"version ff", "ff-" + tr + "-" + p + "-01", false},
		{"a later version glued on", "01-" + tr + "-" + p + "-01x", false},
		{"no flags", "00-" + tr + "-" + p, false},
		{"uppercase", "00-" + strings.ToUpper(tr) + "-" + p + "-01", false},
		{"zero trace", "00-" + strings.Repeat("0", 32) + "-" + p + "-01", false},
		{"zero parent", "00-" + tr + "-" + strings.Repeat("0", 16) + "-01", false},
		{"not hex", "00-" + tr[:31] + "g-" + p + "-01", false},
		{"flags not hex", "00-" + tr + "-" + p + "-0z", false},
		{"other separators", "00_" + tr + "_" + p + "_01", false},
		{"empty", "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			trace, parent, ok := parseTraceparent(c.in)
			if ok != c.ok {
				t.Fatalf("parseTraceparent(%q) ok = %v, want %v", c.in, ok, c.ok)
			}
			if ok && (hex.EncodeToString(trace[:]) != tr || hex.EncodeToString(parent[:]) != p) {
				t.Errorf("trace %x parent %x", trace, parent)
			}
		})
	}
}

// FuzzSpanRoundTrip: whatever the record holds (an agent sets the URL, the traceparent and,
// through its policy's names, most strings), the export decodes with the generated types to the
// record's fields, made valid UTF-8.
func FuzzSpanRoundTrip(f *testing.F) {
	s := full()
	f.Add(s.id, s.agent, s.url, s.code, s.traceparent, s.status, s.bytesIn, int64(s.duration))
	f.Add("", "", "", "", "", 0, int64(0), int64(0))
	f.Add("\xff", "\xc3\x28", "h\xfe:99999", "E_\x80", "00-\xff", 599, int64(-1), int64(-1))
	f.Fuzz(func(t *testing.T, id, agent, url, code, traceparent string, status int, bytesIn, duration int64) {
		s := full()
		s.id, s.agent, s.url, s.code, s.traceparent, s.status, s.bytesIn, s.duration = id, agent, url, code, traceparent, status, bytesIn, time.Duration(duration)
		check(t, &s)
		for _, v := range []string{id, agent, code} {
			if utf8.ValidString(v) && validUTF8(v) != v {
				t.Fatalf("validUTF8 changed the valid %q", v)
			}
		}
	})
}
