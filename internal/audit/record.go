// Package audit writes the gate's audit trail: one hash-chained JSON line per request, fsync'ed
// in group commits to one file per UTC day, and verifies such files.
package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

// Record is one audit record. Callers mask secrets before filling it (URL, Reason, Detail).
type Record struct {
	Time      time.Time     // when the request reached the gate; the zero value means "now" to Writer.Write
	Event     string        // "request", "connect", "tunnel-request", "policy", "peer-refused", ... (free text chosen by callers)
	ID        string        // request id (also sent to the client as X-LockHTTP-Request)
	Container string        // container that sent the request
	Agent     string        // agent name from Proxy-Authorization (audit only)
	Method    string        // HTTP method
	URL       string        // request URL, secrets masked
	Verdict   string        // FREE, ASK, DENY or ""
	Code      string        // E_… or ""
	Rule      string        // name of the deciding rule
	Reason    string        // why, in words
	Policy    string        // policy version hash
	Status    int           // HTTP status sent to the client (0 when none was sent)
	BytesIn   int64         // request body bytes read from the client
	BytesOut  int64         // response body bytes written to the client
	Duration  time.Duration // time from arrival to the last byte sent
	Detail    string        // free text (e.g. the upstream error)
	Ticket    string        // the hub ticket an ASK waited on
	Approver  string        // who decided the ticket: facade and name ("terminal:alice")
	Score     float64       // the exfiltration heuristics' score (0 when not scored)
	Findings  string        // what the heuristics or checks found, in words (masked)
	Stream    uint32        // the HTTP/2 stream the request came on inside a decrypted tunnel (0: HTTP/1.1)
	// Count is how many requests a summary record covers (0 for the record of one request);
	// IDs lists their request ids, every one of them (see Writer's summaries).
	Count int
	IDs   []string
	// MCP is what the gate read of a request to an MCP endpoint of the policy and of its
	// answer; zero (left out of the line) for any other request.
	MCP MCP
}

// MCP is an MCP request's part of its record. Callers mask and escape what the server or the
// agent chose (Tool, Requests, Marks, Answer).
type MCP struct {
	Endpoint string // the policy's [[mcp]] endpoint; "" for a request to none
	Method   string // the JSON-RPC method (of the message that decided a batch)
	Tool     string // what it acts on (a tool's name)
	Call     string // the call's fingerprint (mcp1:…): the hash of its arguments, its endpoint and container
	Hidden   int    // tools cut from the answer's tools/list results
	Requests string // the server-to-client requests inside the answer (sampling, elicitation), in words
	Marks    string // prompt-injection phrases found in the answer and where, in words
	Answer   string // what the gate found or did to the answer (changed pins, findings, a cut answer), in words
}

// Bounds of a record's fields: the most bytes each takes in the encoded line, its quotes and
// escapes included. A longer value is clipped (see Clip). With these a line stays under
// maxRecordLine, whatever the agent sent.
const (
	maxURLField   = 2048 // url
	maxTextField  = 1024 // reason, detail, findings
	maxShortField = 256  // every other string field, and each id of IDs
	// maxIDs bounds IDs: a summary of more requests is written as more records.
	maxIDs = 256
)

// clipMarker starts what replaces the clipped end of a field: "…[clipped: N bytes,
// sha256:HEX]", N the whole value's length in bytes and HEX the first 16 bytes of the SHA-256 of
// the whole value, so a clipped field can still be matched against the value it came from.
const clipMarker = "…[clipped: "

// clipMark is the marker that ends a clipped s.
func clipMark(s string) string {
	sum := sha256.Sum256([]byte(s))
	var h [2 * hashLen]byte
	hex.Encode(h[:], sum[:hashLen])
	return clipMarker + strconv.Itoa(len(s)) + " bytes, sha256:" + string(h[:]) + "]"
}

// Clip returns s when it is at most limit bytes long, else its first bytes (cut at a UTF-8
// boundary) followed by the clip marker, in at most limit bytes in all (limit is raised to 96 so
// the marker fits). The gate's log line clips with it as the audit does.
func Clip(s string, limit int) string {
	limit = max(limit, 96)
	if len(s) <= limit {
		return s
	}
	mark := clipMark(s)
	cut := limit - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

// timeLayout is RFC 3339 with a fixed nine-digit fraction, so lines sort and align.
const timeLayout = "2006-01-02T15:04:05.000000000Z07:00"

// AppendJSON appends the record as one JSON object (no newline) with snake_case keys, in this
// order: time (RFC 3339, nanoseconds, UTC), event, id, container, agent, method, url, verdict,
// code, rule, reason, policy, status, bytes_in, bytes_out, duration_ms (3 decimals, rounded half
// away from zero to the microsecond), detail, ticket, approver, score (2 decimals), findings,
// count, ids (an array of strings), stream, and for an MCP request (MCP.Endpoint set)
// mcp_endpoint, mcp_method, mcp_tool, mcp_call, mcp_hidden, mcp_requests, mcp_marks, mcp_answer.
// Empty strings and zero numbers (a Duration under 0.5 µs counts as zero) are left out, except verdict, code and status, which are always
// present. Strings are escaped as encoding/json escapes them (with HTML escaping); invalid UTF-8
// becomes U+FFFD. No field is unbounded: a string that would encode longer than its bound
// (maxURLField, maxTextField, maxShortField) is clipped with a marker that gives the whole value's
// length and hash (see Clip), and ids past maxIDs are left out (the writer never puts more in one
// record). A Time outside years 0000-9999 yields a time string that is not RFC 3339.
// AppendJSON does not use reflection and does not allocate when b has room.
func (r *Record) AppendJSON(b []byte) []byte {
	b = r.appendFields(b)
	return append(b, '}')
}

// appendFields appends the object without its closing brace, so the writer can add "prev".
func (r *Record) appendFields(b []byte) []byte {
	b = append(b, `{"time":"`...)
	b = appendTime(b, r.Time)
	b = append(b, '"')
	b = appendStringField(b, `,"event":`, r.Event, maxShortField)
	b = appendStringField(b, `,"id":`, r.ID, maxShortField)
	b = appendStringField(b, `,"container":`, r.Container, maxShortField)
	b = appendStringField(b, `,"agent":`, r.Agent, maxShortField)
	b = appendStringField(b, `,"method":`, r.Method, maxShortField)
	b = appendStringField(b, `,"url":`, r.URL, maxURLField)
	b = append(b, `,"verdict":`...)
	b = appendClipped(b, r.Verdict, maxShortField)
	b = append(b, `,"code":`...)
	b = appendClipped(b, r.Code, maxShortField)
	b = appendStringField(b, `,"rule":`, r.Rule, maxShortField)
	b = appendStringField(b, `,"reason":`, r.Reason, maxTextField)
	b = appendStringField(b, `,"policy":`, r.Policy, maxShortField)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(r.Status), 10)
	if r.BytesIn != 0 {
		b = append(b, `,"bytes_in":`...)
		b = strconv.AppendInt(b, r.BytesIn, 10)
	}
	if r.BytesOut != 0 {
		b = append(b, `,"bytes_out":`...)
		b = strconv.AppendInt(b, r.BytesOut, 10)
	}
	if us := micros(r.Duration); us != 0 {
		b = append(b, `,"duration_ms":`...)
		b = appendMillis(b, us)
	}
	b = appendStringField(b, `,"detail":`, r.Detail, maxTextField)
	b = appendStringField(b, `,"ticket":`, r.Ticket, maxShortField)
	b = appendStringField(b, `,"approver":`, r.Approver, maxShortField)
	if r.Score != 0 && !math.IsNaN(r.Score) && !math.IsInf(r.Score, 0) {
		b = append(b, `,"score":`...)
		b = strconv.AppendFloat(b, r.Score, 'f', 2, 64)
	}
	b = appendStringField(b, `,"findings":`, r.Findings, maxTextField)
	if r.Count != 0 {
		b = append(b, `,"count":`...)
		b = strconv.AppendInt(b, int64(r.Count), 10)
	}
	if len(r.IDs) > 0 {
		b = append(b, `,"ids":[`...)
		for i, id := range r.IDs[:min(len(r.IDs), maxIDs)] {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendClipped(b, id, maxShortField)
		}
		b = append(b, ']')
	}
	if r.Stream != 0 {
		b = append(b, `,"stream":`...)
		b = strconv.AppendUint(b, uint64(r.Stream), 10)
	}
	if m := &r.MCP; m.Endpoint != "" {
		b = appendStringField(b, `,"mcp_endpoint":`, m.Endpoint, maxShortField)
		b = appendStringField(b, `,"mcp_method":`, m.Method, maxShortField)
		b = appendStringField(b, `,"mcp_tool":`, m.Tool, maxShortField)
		b = appendStringField(b, `,"mcp_call":`, m.Call, maxShortField)
		if m.Hidden != 0 {
			b = append(b, `,"mcp_hidden":`...)
			b = strconv.AppendInt(b, int64(m.Hidden), 10)
		}
		b = appendStringField(b, `,"mcp_requests":`, m.Requests, maxTextField)
		b = appendStringField(b, `,"mcp_marks":`, m.Marks, maxTextField)
		b = appendStringField(b, `,"mcp_answer":`, m.Answer, maxTextField)
	}
	return b
}

// appendTime appends t in UTC as timeLayout does, by hand: AppendFormat costs about ten times
// more.
func appendTime(b []byte, t time.Time) []byte {
	t = t.UTC()
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		return t.AppendFormat(b, timeLayout)
	}
	hour, minute, sec := t.Clock()
	b = appendDigits(b, year, 4)
	b = append(b, '-')
	b = appendDigits(b, int(month), 2)
	b = append(b, '-')
	b = appendDigits(b, day, 2)
	b = append(b, 'T')
	b = appendDigits(b, hour, 2)
	b = append(b, ':')
	b = appendDigits(b, minute, 2)
	b = append(b, ':')
	b = appendDigits(b, sec, 2)
	b = append(b, '.')
	b = appendDigits(b, t.Nanosecond(), 9)
	return append(b, 'Z')
}

// appendDigits appends the width lowest decimal digits of v >= 0, zero-padded.
func appendDigits(b []byte, v, width int) []byte {
	var d [9]byte
	for i := width - 1; i >= 0; i-- {
		d[i] = byte('0' + v%10)
		v /= 10
	}
	return append(b, d[:width]...)
}

func appendStringField(b []byte, key, s string, limit int) []byte {
	if s == "" {
		return b
	}
	b = append(b, key...)
	return appendClipped(b, s, limit)
}

// appendClipped appends s as a quoted JSON string of at most limit bytes: when s encodes longer,
// its first bytes (as many as fit) and the clip marker.
func appendClipped(b []byte, s string, limit int) []byte {
	if len(s) <= (limit-2)/6 { // even all-escaped it fits
		return appendString(b, s)
	}
	start := len(b)
	b = appendString(b, s)
	if len(b)-start <= limit {
		return b
	}
	b = b[:start]
	mark := clipMark(s)
	cut := encodedCut(s, limit-2-len(mark))
	b = appendString(b, s[:cut])
	b = b[:len(b)-1] // reopen the string for the marker (plain text: it encodes as it is)
	b = append(b, mark...)
	return append(b, '"')
}

// encodedCut returns the longest prefix of s, cut between runes, whose encoding (as appendString
// escapes it, without the quotes) takes at most budget bytes.
func encodedCut(s string, budget int) int {
	n := 0
	for i := 0; i < len(s); {
		c := s[i]
		w, size := 1, 1
		switch {
		case c < utf8.RuneSelf && plain[c]:
		case c < utf8.RuneSelf && (c == '"' || c == '\\' || c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t'):
			w = 2
		case c < utf8.RuneSelf:
			w = 6
		default:
			r, sz := utf8.DecodeRuneInString(s[i:])
			size = sz
			switch {
			case r == utf8.RuneError && sz == 1, r == '\u2028', r == '\u2029':
				w = 6
			default:
				w = sz
			}
		}
		if n+w > budget {
			return i
		}
		n += w
		i += size
	}
	return len(s)
}

// micros rounds d to microseconds, half away from zero.
func micros(d time.Duration) int64 {
	us := int64(d) / 1000
	switch rem := int64(d) % 1000; {
	case rem >= 500:
		us++
	case rem <= -500:
		us--
	}
	return us
}

// appendMillis appends us microseconds as milliseconds with exactly three decimals. It uses
// integer arithmetic, so it is exact for every Duration.
func appendMillis(b []byte, us int64) []byte {
	u := uint64(us)
	if us < 0 {
		b = append(b, '-')
		u = uint64(-us) // |us| <= MaxInt64/1000, no overflow
	}
	b = strconv.AppendUint(b, u/1000, 10)
	f := u % 1000
	return append(b, '.', byte('0'+f/100), byte('0'+f/10%10), byte('0'+f%10))
}

const hexDigits = "0123456789abcdef"

// plain[c] is true for the ASCII bytes that go into a JSON string as they are: printable, and
// not '"', '\\', '<', '>' or '&' (escaped like encoding/json does, so a line pasted into HTML is
// harmless).
var plain = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = true
	}
	for _, c := range `"\<>&` {
		t[c] = false
	}
	return t
}()

// appendString appends s as a quoted JSON string, escaping exactly what encoding/json escapes.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if plain[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
