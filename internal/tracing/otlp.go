package tracing

import (
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"strings"
	"unicode/utf8"

	"github.com/lockhttp/lockhttp/internal/audit"
)

// The OTLP messages the gate sends, encoded by hand in protobuf's wire format (wire.go; no
// protobuf module is linked): field numbers of opentelemetry/proto/collector/trace/v1 and trace/v1, common/v1,
// resource/v1. The tests decode the bytes with the generated types (tracingtest, otlp_test.go).
const (
	fRequestResourceSpans = 1 // ExportTraceServiceRequest.resource_spans

	fResourceSpansResource   = 1 // ResourceSpans.resource
	fResourceSpansScopeSpans = 2 // ResourceSpans.scope_spans

	fResourceAttributes = 1 // Resource.attributes

	fScopeSpansScope = 1 // ScopeSpans.scope
	fScopeSpansSpans = 2 // ScopeSpans.spans

	fScopeName = 1 // InstrumentationScope.name

	fSpanTraceID      = 1  // bytes
	fSpanSpanID       = 2  // bytes
	fSpanParentSpanID = 4  // bytes
	fSpanName         = 5  // string
	fSpanKind         = 6  // enum
	fSpanStart        = 7  // fixed64, Unix ns
	fSpanEnd          = 8  // fixed64, Unix ns
	fSpanAttributes   = 9  // KeyValue
	fSpanStatus       = 15 // Status
	fSpanFlags        = 16 // fixed32

	fStatusMessage = 2
	fStatusCode    = 3

	fKeyValueKey   = 1
	fKeyValueValue = 2

	fAnyString = 1 // AnyValue.string_value
	fAnyInt    = 3 // AnyValue.int_value

	spanKindServer  = 2 // SPAN_KIND_SERVER
	statusCodeError = 2 // STATUS_CODE_ERROR

	// Span.flags: the W3C trace flags (sampled: every decision is exported) in the low byte, and
	// whether the parent's remoteness is known (0x100) and remote (0x200).
	flagSampled      = 0x01
	flagHasIsRemote  = 0x100
	flagParentRemote = 0x200
)

// appendRequest appends an ExportTraceServiceRequest of one ResourceSpans: resource (an encoded
// Resource) and one ScopeSpans of the gate's scope with spans (encoded ScopeSpans.spans fields).
func appendRequest(b, resource, spans []byte) []byte {
	scopeLen := sizeTag(fScopeName) + sizeBytes(len(scope))
	scopeSpansLen := sizeTag(fScopeSpansScope) + sizeBytes(scopeLen) + len(spans)
	rsLen := sizeTag(fResourceSpansResource) + sizeBytes(len(resource)) +
		sizeTag(fResourceSpansScopeSpans) + sizeBytes(scopeSpansLen)
	b = appendTag(b, fRequestResourceSpans, bytesType)
	b = appendVarint(b, uint64(rsLen))
	b = appendTag(b, fResourceSpansResource, bytesType)
	b = appendWireBytes(b, resource)
	b = appendTag(b, fResourceSpansScopeSpans, bytesType)
	b = appendVarint(b, uint64(scopeSpansLen))
	b = appendTag(b, fScopeSpansScope, bytesType)
	b = appendVarint(b, uint64(scopeLen))
	b = appendString(b, fScopeName, scope)
	return append(b, spans...)
}

// appendResource appends the attributes of the gate's Resource: service.name and, when version is
// not empty, service.version.
func appendResource(b []byte, version string) []byte {
	b = appendStringAttr(b, fResourceAttributes, "service.name", ServiceName)
	if version != "" {
		b = appendStringAttr(b, fResourceAttributes, "service.version", version)
	}
	return b
}

// idSource returns a new trace ID and span ID, neither all zero.
type idSource func() (trace [16]byte, span [8]byte)

// randomIDs draws the IDs from the runtime's ChaCha8 generator: IDs need to be unique, not secret.
func randomIDs() (trace [16]byte, span [8]byte) {
	for trace == [16]byte{} {
		binary.BigEndian.PutUint64(trace[:8], rand.Uint64())
		binary.BigEndian.PutUint64(trace[8:], rand.Uint64())
	}
	for span == [8]byte{} {
		binary.BigEndian.PutUint64(span[:], rand.Uint64())
	}
	return trace, span
}

// appendSpan appends s's span as a ScopeSpans.spans field: a child of s.traceparent's span when
// that parses, else the root of a trace of its own.
func appendSpan(b []byte, s *span, ids idSource) []byte {
	newTrace, spanID := ids()
	traceID, parentID, parent := [16]byte{}, [8]byte{}, false
	if s.traceparent != "" && len(s.traceparent) <= maxTraceparent {
		traceID, parentID, parent = parseTraceparent(s.traceparent)
	}
	if !parent {
		traceID = newTrace
	}
	full, host, port := splitURL(s.url)
	flags := uint32(flagSampled | flagHasIsRemote)
	if parent {
		flags |= flagParentRemote
	}

	// The body is appended after a placeholder for its length, at most 5 bytes of varint, and
	// moved back when the length takes fewer.
	b = appendTag(b, fScopeSpansSpans, bytesType)
	at := len(b)
	b = append(b, 0, 0, 0, 0, 0)
	body := len(b)
	b = appendTag(b, fSpanTraceID, bytesType)
	b = appendWireBytes(b, traceID[:])
	b = appendTag(b, fSpanSpanID, bytesType)
	b = appendWireBytes(b, spanID[:])
	if parent {
		b = appendTag(b, fSpanParentSpanID, bytesType)
		b = appendWireBytes(b, parentID[:])
	}
	b = appendString(b, fSpanName, SpanName)
	b = appendTag(b, fSpanKind, varintType)
	b = appendVarint(b, spanKindServer)
	b = appendTag(b, fSpanStart, fixed64Type)
	b = appendFixed64(b, uint64(s.start.UnixNano()))
	b = appendTag(b, fSpanEnd, fixed64Type)
	b = appendFixed64(b, uint64(s.start.Add(s.duration).UnixNano()))

	b = appendStringAttr(b, fSpanAttributes, AttrID, s.id)
	b = appendStringAttr(b, fSpanAttributes, AttrEvent, s.event)
	b = appendStringAttr(b, fSpanAttributes, AttrContainer, s.container)
	b = appendStringAttr(b, fSpanAttributes, AttrMethod, s.method)
	b = appendStringAttr(b, fSpanAttributes, AttrURL, audit.Clip(full, maxURL))
	b = appendStringAttr(b, fSpanAttributes, AttrHost, audit.Clip(host, maxURL))
	b = appendStringAttr(b, fSpanAttributes, AttrVerdict, s.verdict)
	b = appendIntAttr(b, AttrStatus, int64(s.status))
	b = appendIntAttr(b, AttrBytesIn, s.bytesIn)
	b = appendIntAttr(b, AttrBytesOut, s.bytesOut)
	for _, kv := range [...]struct{ k, v string }{{AttrAgent, s.agent}, {AttrCode, s.code}, {AttrRule, s.rule}, {AttrPolicy, s.policy}, {AttrTicket, s.ticket}} {
		if kv.v != "" {
			b = appendStringAttr(b, fSpanAttributes, kv.k, kv.v)
		}
	}
	if port > 0 {
		b = appendIntAttr(b, AttrPort, int64(port))
	}
	if s.status >= 500 {
		msg := validUTF8(s.code)
		n := sizeTag(fStatusCode) + sizeVarint(statusCodeError)
		if msg != "" {
			n += sizeTag(fStatusMessage) + sizeBytes(len(msg))
		}
		b = appendTag(b, fSpanStatus, bytesType)
		b = appendVarint(b, uint64(n))
		if msg != "" {
			b = appendString(b, fStatusMessage, msg)
		}
		b = appendTag(b, fStatusCode, varintType)
		b = appendVarint(b, statusCodeError)
	}
	b = appendTag(b, fSpanFlags, fixed32Type)
	b = appendFixed32(b, flags)

	n := len(b) - body
	size := appendVarint(b[at:at], uint64(n)) // writes over the placeholder
	copy(b[at+len(size):], b[body:])
	return b[:at+len(size)+n]
}

// appendString appends a string field. s must be valid UTF-8.
func appendString(b []byte, num fieldNumber, s string) []byte {
	b = appendTag(b, num, bytesType)
	return appendWireString(b, s)
}

// appendStringAttr appends a KeyValue field num of key and the string value v. A protobuf string
// must be valid UTF-8 (the generated decoders refuse the whole message otherwise): each invalid
// byte of v becomes U+FFFD.
func appendStringAttr(b []byte, num fieldNumber, key, v string) []byte {
	v = validUTF8(v)
	anyLen := sizeTag(fAnyString) + sizeBytes(len(v))
	kvLen := sizeTag(fKeyValueKey) + sizeBytes(len(key)) +
		sizeTag(fKeyValueValue) + sizeBytes(anyLen)
	b = appendTag(b, num, bytesType)
	b = appendVarint(b, uint64(kvLen))
	b = appendString(b, fKeyValueKey, key)
	b = appendTag(b, fKeyValueValue, bytesType)
	b = appendVarint(b, uint64(anyLen))
	return appendString(b, fAnyString, v)
}

// appendIntAttr appends a span attribute of key and the integer value v.
func appendIntAttr(b []byte, key string, v int64) []byte {
	anyLen := sizeTag(fAnyInt) + sizeVarint(uint64(v))
	kvLen := sizeTag(fKeyValueKey) + sizeBytes(len(key)) +
		sizeTag(fKeyValueValue) + sizeBytes(anyLen)
	b = appendTag(b, fSpanAttributes, bytesType)
	b = appendVarint(b, uint64(kvLen))
	b = appendString(b, fKeyValueKey, key)
	b = appendTag(b, fKeyValueValue, bytesType)
	b = appendVarint(b, uint64(anyLen))
	b = appendTag(b, fAnyInt, varintType)
	return appendVarint(b, uint64(v))
}

// validUTF8 is s with each invalid byte replaced by U+FFFD; s itself when it is valid.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var w strings.Builder
	w.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			w.WriteRune(utf8.RuneError)
		} else {
			w.WriteString(s[i : i+n])
		}
		i += n
	}
	return w.String()
}

// parseTraceparent reads a W3C traceparent header: version-traceid-parentid-flags in lowercase
// hex, version 00 exactly so, a later version with more fields after a dash; version ff, an all
// zero trace or parent ID, and anything else are not a parent (ok false).
func parseTraceparent(h string) (trace [16]byte, parent [8]byte, ok bool) {
	if len(h) < 55 || h[2] != '-' || h[35] != '-' || h[52] != '-' {
		return trace, parent, false
	}
	var version [1]byte
	if !lowerHex(version[:], h[:2]) || version[0] == 0xff {
		return trace, parent, false
	}
	if version[0] == 0 && len(h) != 55 || len(h) > 55 && h[55] != '-' {
		return trace, parent, false
	}
	var flags [1]byte
	if !lowerHex(trace[:], h[3:35]) || !lowerHex(parent[:], h[36:52]) || !lowerHex(flags[:], h[53:55]) ||
		trace == [16]byte{} || parent == [8]byte{} {
		return [16]byte{}, [8]byte{}, false
	}
	return trace, parent, true
}

// lowerHex decodes s, lowercase hex only, into dst.
func lowerHex(dst []byte, s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	_, err := hex.Decode(dst, []byte(s))
	return err == nil && len(s) == 2*len(dst)
}
