package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// decoded is what encoding/json makes of an AppendJSON line.
type decoded struct {
	Time      time.Time   `json:"time"`
	Event     string      `json:"event"`
	ID        string      `json:"id"`
	Container string      `json:"container"`
	Agent     string      `json:"agent"`
	Method    string      `json:"method"`
	URL       string      `json:"url"`
	Verdict   *string     `json:"verdict"`
	Code      *string     `json:"code"`
	Rule      string      `json:"rule"`
	Reason    string      `json:"reason"`
	Policy    string      `json:"policy"`
	Status    *int        `json:"status"`
	BytesIn   int64       `json:"bytes_in"`
	BytesOut  int64       `json:"bytes_out"`
	Duration  json.Number `json:"duration_ms"`
	Detail    string      `json:"detail"`
	Prev      string      `json:"prev"`
}

// checkRoundTrip decodes line with encoding/json, strictly, and compares it with r.
func checkRoundTrip(t *testing.T, r *Record, line []byte) {
	t.Helper()
	if !json.Valid(line) {
		t.Fatalf("not valid JSON: %q", line)
	}
	if bytes.ContainsAny(line, "\n\r") {
		t.Fatalf("raw newline in line: %q", line)
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	var d decoded
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("decode %q: %v", line, err)
	}
	if !d.Time.Equal(r.Time) {
		t.Errorf("time = %v, want %v", d.Time, r.Time)
	}
	if d.Time.Location() != time.UTC {
		t.Errorf("time zone = %v, want UTC", d.Time.Location())
	}
	strs := []struct {
		key       string
		got, want string
		limit     int
	}{
		{"event", d.Event, r.Event, maxShortField},
		{"id", d.ID, r.ID, maxShortField},
		{"container", d.Container, r.Container, maxShortField},
		{"agent", d.Agent, r.Agent, maxShortField},
		{"method", d.Method, r.Method, maxShortField},
		{"url", d.URL, r.URL, maxURLField},
		{"rule", d.Rule, r.Rule, maxShortField},
		{"reason", d.Reason, r.Reason, maxTextField},
		{"policy", d.Policy, r.Policy, maxShortField},
		{"detail", d.Detail, r.Detail, maxTextField},
	}
	for _, s := range strs {
		checkField(t, s.key, s.got, s.want, s.limit)
	}
	if d.Verdict == nil || d.Code == nil {
		t.Errorf("verdict = %v, code = %v, want both present", d.Verdict, d.Code)
	} else {
		checkField(t, "verdict", *d.Verdict, r.Verdict, maxShortField)
		checkField(t, "code", *d.Code, r.Code, maxShortField)
	}
	if d.Status == nil || *d.Status != r.Status {
		t.Errorf("status = %v, want %d (always present)", d.Status, r.Status)
	}
	if d.BytesIn != r.BytesIn || d.BytesOut != r.BytesOut {
		t.Errorf("bytes = %d/%d, want %d/%d", d.BytesIn, d.BytesOut, r.BytesIn, r.BytesOut)
	}
	if roundMicros(r.Duration) == 0 {
		if d.Duration != "" {
			t.Errorf("duration_ms = %s, want it left out", d.Duration)
		}
	} else {
		s := string(d.Duration)
		if i := strings.IndexByte(s, '.'); i < 0 || len(s)-i != 4 {
			t.Errorf("duration_ms = %s, want 3 decimals", s)
		}
		us, err := strconv.ParseInt(strings.Replace(s, ".", "", 1), 10, 64)
		if err != nil {
			t.Fatalf("duration_ms %s: %v", s, err)
		}
		if want := roundMicros(r.Duration); us != want {
			t.Errorf("duration_ms = %s, want %d µs", s, want)
		}
		if f, err := d.Duration.Float64(); err != nil || math.Abs(f-float64(r.Duration)/1e6) > 0.0005+1e-9*math.Abs(f) {
			t.Errorf("duration_ms = %s, want about %v ms (%v)", s, float64(r.Duration)/1e6, err)
		}
	}
	// Omitted means empty: every optional key present must be non-empty.
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		t.Fatal(err)
	}
	for k, v := range m {
		switch k {
		case "verdict", "code", "status":
			continue
		}
		if v == "" || v == 0.0 {
			t.Errorf("key %q present with zero value", k)
		}
	}
}

// checkField checks that a field decoded as got from a record holding want is want (after a JSON
// round trip) when it encodes within limit bytes, else want's first bytes and its clip marker,
// encoded within limit.
func checkField(t *testing.T, key, got, want string, limit int) {
	t.Helper()
	if enc := appendString(nil, want); len(enc) <= limit {
		if got != replaceInvalid(want) {
			t.Errorf("%s = %q, want %q", key, got, want)
		}
		return
	}
	mark := clipMark(want)
	kept, ok := strings.CutSuffix(got, mark)
	if !ok || !strings.HasPrefix(replaceInvalid(want), kept) {
		t.Errorf("%s = %q, want a prefix of %q and then %q", key, got, want, mark)
	}
	// An invalid byte was \ufffd (6 bytes) in the line and is U+FFFD (3) in got: measure only
	// what a round trip keeps.
	if enc := appendString(nil, got); len(enc) > limit || utf8.ValidString(want) && len(enc) < limit-12 {
		t.Errorf("%s takes %d bytes encoded, want at most %d and not much less", key, len(enc), limit)
	}
}

// replaceInvalid is what a JSON round trip makes of s: each invalid byte becomes U+FFFD.
func replaceInvalid(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		b.WriteRune(r) // RuneError for an invalid byte
		i += n
	}
	return b.String()
}

// roundMicros rounds d to microseconds, half away from zero (the reference for appendMillis).
func roundMicros(d time.Duration) int64 {
	us, rem := int64(d)/1000, int64(d)%1000
	if rem >= 500 {
		us++
	} else if rem <= -500 {
		us--
	}
	return us
}

var testTime = time.Date(2026, 11, 30, 14, 3, 7, 123456789, time.UTC)

func TestAppendJSON(t *testing.T) {
	tricky := []string{
		`"quoted" and \back\slash`,
		"control \x00\x01\x08\x09\x0a\x0b\x0c\x0d\x1b\x1f\x7f end",
		"invalid utf-8 \xff\xfe \xc3\x28 \xed\xa0\x80 (surrogate) \xf0\x9f\x98 (cut emoji)",
		"line\u2028para\u2029sep",
		"emoji 🦊👩‍👩‍👧 and ünïcödé 日本語",
		"</script><script>alert(1)</script> & more",
		"\ufeffBOM and \ufffd replacement and \U0010FFFF",
		strings.Repeat("long ", 1000),
		strings.Repeat("<", 300) + "long",
		strings.Repeat("é", 2000),
		strings.Repeat("\xff", 200),
	}
	tests := []struct {
		name string
		rec  Record
		want string // exact bytes, when given
	}{
		{
			name: "minimal",
			rec:  Record{Time: testTime},
			want: `{"time":"2026-11-30T14:03:07.123456789Z","verdict":"","code":"","status":0}`,
		},
		{
			name: "full",
			rec: Record{
				Time: testTime, Event: "request", ID: "r-1", Container: "c1", Agent: "claude",
				Method: "GET", URL: "https://example.com/?q=1", Verdict: "FREE", Code: "",
				Rule: "reads", Reason: "trusted host", Policy: "abc123", Status: 200,
				BytesIn: 3, BytesOut: 512, Duration: 1250 * time.Microsecond, Detail: "ok",
			},
			want: `{"time":"2026-11-30T14:03:07.123456789Z","event":"request","id":"r-1","container":"c1","agent":"claude","method":"GET","url":"https://example.com/?q=1","verdict":"FREE","code":"","rule":"reads","reason":"trusted host","policy":"abc123","status":200,"bytes_in":3,"bytes_out":512,"duration_ms":1.250,"detail":"ok"}`,
		},
		{
			name: "local time zone becomes UTC and whole seconds keep 9 digits",
			rec:  Record{Time: time.Date(2026, 12, 1, 1, 0, 0, 0, time.FixedZone("CET", 3600)), Verdict: "DENY", Code: "E_RULE", Status: 403},
			want: `{"time":"2026-12-01T00:00:00.000000000Z","verdict":"DENY","code":"E_RULE","status":403}`,
		},
		{
			name: "duration rounding and negatives",
			rec:  Record{Time: testTime, Duration: -1500, BytesIn: -1},
			want: `{"time":"2026-11-30T14:03:07.123456789Z","verdict":"","code":"","status":0,"bytes_in":-1,"duration_ms":-0.002}`,
		},
		{
			name: "duration under half a microsecond left out",
			rec:  Record{Time: testTime, Duration: 499},
			want: `{"time":"2026-11-30T14:03:07.123456789Z","verdict":"","code":"","status":0}`,
		},
		{
			name: "half a microsecond rounds up",
			rec:  Record{Time: testTime, Duration: 500},
			want: `{"time":"2026-11-30T14:03:07.123456789Z","verdict":"","code":"","status":0,"duration_ms":0.001}`,
		},
		{
			name: "extreme numbers",
			rec:  Record{Time: testTime, Status: math.MinInt32, BytesIn: math.MaxInt64, BytesOut: math.MinInt64, Duration: math.MinInt64},
		},
		{
			name: "max duration",
			rec:  Record{Time: testTime, Duration: math.MaxInt64},
		},
		{
			name: "escapes",
			rec:  Record{Time: testTime, URL: "a\"b\\c\n<&>\u2028\xff"},
			want: `{"time":"2026-11-30T14:03:07.123456789Z","url":"a\"b\\c\n\u003c\u0026\u003e\u2028\ufffd","verdict":"","code":"","status":0}`,
		},
	}
	for i, s := range tricky {
		tests = append(tests, struct {
			name string
			rec  Record
			want string
		}{
			name: "tricky " + strconv.Itoa(i),
			rec: Record{
				Time: testTime, Event: s, ID: s, Container: s, Agent: s, Method: s, URL: s,
				Verdict: s, Code: s, Rule: s, Reason: s, Policy: s, Detail: s,
			},
		})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.rec.AppendJSON([]byte("prefix"))
			if !bytes.HasPrefix(got, []byte("prefix")) {
				t.Fatalf("AppendJSON lost the prefix: %q", got)
			}
			got = got[len("prefix"):]
			if tt.want != "" && string(got) != tt.want {
				t.Errorf("AppendJSON =\n%s\nwant\n%s", got, tt.want)
			}
			checkRoundTrip(t, &tt.rec, got)
		})
	}
}

// TestAppendStringMatchesEncodingJSON pins the escaping to encoding/json's, byte for byte.
func TestAppendStringMatchesEncodingJSON(t *testing.T) {
	var all strings.Builder
	for c := range 256 {
		all.WriteByte(byte(c))
	}
	tests := map[string]string{
		"every byte":   all.String(),
		"empty":        "",
		"separators":   "\u2028\u2029",
		"cut rune":     "\xe2\x80",
		"html":         "<a href='x'>&amp;</a>",
		"surrogate":    "\xed\xbf\xbf",
		"max rune":     "\U0010FFFF\xf4\x90\x80\x80",
		"ascii":        "GET https://api.example.com/v1/items?id=42",
		"invalid tail": "abc\x80",
	}
	for name, s := range tests {
		t.Run(name, func(t *testing.T) {
			want, err := json.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			if got := appendString(nil, s); !bytes.Equal(got, want) {
				t.Errorf("appendString(%q) = %s, want %s", s, got, want)
			}
		})
	}
}

func TestAppendTime(t *testing.T) {
	tests := []time.Time{
		testTime,
		{},
		time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(2026, 3, 29, 2, 30, 0, 1, time.FixedZone("x", -(9*3600+30*60))),
		time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),    // outside 0000-9999: AppendFormat's words
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), // likewise
		time.Unix(0, math.MaxInt64),
		time.Unix(0, math.MinInt64),
	}
	for _, tm := range tests {
		t.Run(tm.String(), func(t *testing.T) {
			want := tm.UTC().AppendFormat(nil, timeLayout)
			if got := appendTime(nil, tm); string(got) != string(want) {
				t.Errorf("appendTime = %s, want %s", got, want)
			}
		})
	}
}

func TestAppendJSONAllocs(t *testing.T) {
	r := Record{Time: testTime, Event: "request", URL: "https://example.com/\x00", Duration: time.Millisecond, Status: 200}
	buf := make([]byte, 0, 1024)
	if n := testing.AllocsPerRun(100, func() { buf = r.AppendJSON(buf[:0]) }); n != 0 {
		t.Errorf("AppendJSON allocates %v times per call, want 0", n)
	}
}

func FuzzAppendJSON(f *testing.F) {
	f.Add("request", "https://example.com/a?b=c", "upstream: \x00\xff\u2028", "FREE", 200, int64(10), int64(20), int64(1500000), int64(1764511387123456789))
	f.Add("", "", "", "", 0, int64(0), int64(0), int64(0), int64(0))
	f.Add("</script>", "\"\\", "🦊\xed\xa0\x80", "E_RULE", -1, int64(-5), int64(math.MaxInt64), int64(math.MinInt64), int64(-1))
	f.Fuzz(func(t *testing.T, a, b, c, d string, status int, in, out, dur, ns int64) {
		if got, want := appendTime(nil, time.Unix(ns, ns)), time.Unix(ns, ns).UTC().AppendFormat(nil, timeLayout); !bytes.Equal(got, want) {
			t.Fatalf("appendTime(%d, %d) = %s, want %s", ns, ns, got, want)
		}
		r := Record{
			Time:      time.Unix(0, ns), // years 1677-2262: always RFC 3339
			Event:     a,
			ID:        b,
			Container: c,
			Agent:     d,
			Method:    a + b,
			URL:       b + c,
			Verdict:   d,
			Code:      c,
			Rule:      a,
			Reason:    d + a,
			Policy:    b,
			Status:    int(int32(status)),
			BytesIn:   in,
			BytesOut:  out,
			Duration:  time.Duration(dur),
			Detail:    c + d,
		}
		line := r.AppendJSON(nil)
		checkRoundTrip(t, &r, line)
		for _, s := range []string{a, b, c, d} {
			want, _ := json.Marshal(s)
			if got := appendString(nil, s); !bytes.Equal(got, want) {
				t.Fatalf("appendString(%q) = %s, encoding/json says %s", s, got, want)
			}
		}
	})
}

func BenchmarkAppendJSON(b *testing.B) {
	r := Record{
		Time: testTime, Event: "request", ID: "01JDXQ3Z5K8M2N4P6R8T0V2X4Z", Container: "agent-1",
		Agent: "claude", Method: "POST", URL: "https://api.github.com/repos/lockhttp/lockhttp/issues?per_page=100",
		Verdict: "ASK", Code: "E_PENDING", Rule: "gh-write", Reason: "writes to GitHub ask a human",
		Policy: "9f86d081884c7d65", Status: 403, BytesIn: 1234, BytesOut: 210,
		Duration: 60*time.Second + 1234*time.Microsecond, Detail: "held 60s; ticket T-42",
	}
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		buf = r.AppendJSON(buf[:0])
	}
	b.SetBytes(int64(len(buf)))
}

// TestClipLongURL: a refused request repeating a 60 KB URL (the attack of issue 15) gives a
// record of bounded size whose url names the whole URL's length and hash.
func TestClipLongURL(t *testing.T) {
	url := "https://example.com/?q=" + strings.Repeat("A", 60<<10)
	rec := Record{Time: testTime, URL: url, Reason: url, Detail: url, Findings: url, Verdict: "DENY", Code: "E_RULE", Status: 403}
	line := rec.AppendJSON(nil)
	if len(line) > 5<<10+512 {
		t.Errorf("record of a 60 KB URL is %d bytes, want at most about 5 KiB", len(line))
	}
	var d decoded
	if err := json.Unmarshal(line, &d); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(url))
	want := "…[clipped: " + strconv.Itoa(len(url)) + " bytes, sha256:" + hex.EncodeToString(sum[:16]) + "]"
	if !strings.HasSuffix(d.URL, want) || !strings.HasPrefix(d.URL, "https://example.com/?q=AAAA") {
		t.Errorf("url = %q, want it to start with the URL and end with %q", d.URL, want)
	}
	if got := Clip(url, 300); len(got) > 300 || !strings.HasSuffix(got, want) {
		t.Errorf("Clip(url, 300) = %q (%d bytes), want at most 300 bytes ending with %q", got, len(got), want)
	}
	if got := Clip("short", 300); got != "short" {
		t.Errorf("Clip(short) = %q", got)
	}
}
