package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"unicode/utf16"
)

var parseSeeds = []string{
	call(`{"name":"read","arguments":{"path":"/a","n":[1,2.5,-0,1e21,{"x":null}]},"_meta":{"progressToken":1}}`),
	call(`{"name":"read","Name":"delete"}`),
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","paramſ":{"name":"delete"},"params":{"name":"read"}}`,
	call(`{"name\u0000":"delete","name":"read"}`),
	call(`{"n\u0061me":"read"}`),
	`[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read"}},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"delete"}}]`,
	`{"jsonrpc":"2.0","id":"a","result":{}}`,
	`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
	`{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"file:///a"}}`,
	`{"jsonrpc":"2.0","id":1,"method":"Tools/Call","params":{"name":"x"}}`,
	`[]`, `{}`, `"x"`, ``,
}

// FuzzParse holds Parse to what the gate relies on: it never panics, its findings are bounded
// one-line texts, and a body it finds nothing in is one that Go's encoding/json, which matches
// keys without case, reads the same way: the same methods, ids, targets and arguments.
func FuzzParse(f *testing.F) {
	for _, s := range parseSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		b := Parse(body)
		if len(b.Findings) > MaxFindings {
			t.Fatalf("%d findings", len(b.Findings))
		}
		for _, f := range b.Findings {
			if f.Text == "" || strings.ContainsAny(f.Text, "\r\n") || f.Refuse {
				t.Fatalf("finding %+v", f)
			}
		}
		answer := Answer(b, func(int) (Refusal, bool) { return Refusal{Code: "E_RULE", Reason: "no"}, true }, AsError, false)
		if answer != nil && !json.Valid(answer) {
			t.Fatalf("the refusal %s is not JSON", answer)
		}
		if b.Ambiguous() {
			return
		}
		var raws []json.RawMessage
		if b.Batch {
			if err := json.Unmarshal(body, &raws); err != nil {
				t.Fatalf("no finding, but encoding/json refuses the batch: %v", err)
			}
		} else {
			raws = []json.RawMessage{body}
		}
		if len(raws) != len(b.Messages) {
			t.Fatalf("%d messages, encoding/json reads %d", len(b.Messages), len(raws))
		}
		for i, raw := range raws {
			var v struct {
				ID     json.RawMessage
				Method string
				Params *struct {
					Name      string
					URI       string
					Arguments json.RawMessage
				}
			}
			if err := json.Unmarshal(raw, &v); err != nil {
				t.Fatalf("no finding, but encoding/json refuses message %d: %v", i, err)
			}
			m := b.Messages[i]
			if v.Method != m.Method {
				t.Fatalf("method %q, encoding/json reads %q", m.Method, v.Method)
			}
			if m.ID != nil && ID(v.ID).Key() != m.ID.Key() {
				t.Fatalf("id %s, encoding/json reads %s", m.ID, v.ID)
			}
			if v.Params == nil {
				continue
			}
			if m.HasTarget {
				want := v.Params.Name
				if m.Method == "resources/read" {
					want = v.Params.URI
				}
				if want != m.Target {
					t.Fatalf("target %q, encoding/json reads %q", m.Target, want)
				}
			}
			if v.Params.Arguments != nil {
				c, _, err := Canonical(v.Params.Arguments)
				if err != nil || !bytes.Equal(c, m.Arguments) {
					t.Fatalf("arguments %s, encoding/json reads %s (%s, %v)", m.Arguments, v.Params.Arguments, c, err)
				}
			}
		}
	})
}

// FuzzCanonical: canonical JSON is its own canonical form, and for text it accepts, it is what a
// reference built on encoding/json writes (keys sorted by UTF-16 code units, numbers as
// encoding/json writes a float64, which is ECMAScript's form).
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{`{"b":[1,2.50,-0.0,1e21,1e-7,"\u00e9\n"],"a":{"\ufb33":1,"😀":2}}`, `"\u2028\u007f\u0001"`, `9007199254740993`, `[[],{}]`, `{"a":1,"A":2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		out, _, err := Canonical(text)
		if err != nil {
			return
		}
		again, inexact, err := Canonical(out)
		if err != nil || !bytes.Equal(again, out) || inexact {
			t.Fatalf("canonical(canonical(%q)) = %q, %v, %v; want %q", text, again, inexact, err, out)
		}
		var v any
		if err := json.Unmarshal(text, &v); err != nil {
			t.Fatalf("Canonical accepts %q, encoding/json refuses it: %v", text, err)
		}
		if ref := reference(v); ref != string(out) {
			t.Fatalf("Canonical(%q) = %s, the reference writes %s", text, out, ref)
		}
	})
}

// reference writes the canonical JSON of a value encoding/json decoded.
func reference(v any) string {
	switch v := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, func(a, b string) int {
			return slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
		})
		var b strings.Builder
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(referenceString(k) + ":" + reference(v[k]))
		}
		return b.String() + "}"
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = reference(e)
		}
		return "[" + strings.Join(parts, ",") + "]"
	case string:
		return referenceString(v)
	case float64:
		if v == 0 || math.IsNaN(v) {
			return "0"
		}
		b, _ := json.Marshal(v)
		return string(b)
	case bool, nil:
		b, _ := json.Marshal(v)
		return string(b)
	}
	panic("unexpected type")
}

// referenceString is encoding/json's string without HTML escapes, and with U+2028 and U+2029
// as they are.
func referenceString(s string) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		panic(err)
	}
	e := strings.TrimSuffix(buf.String(), "\n")
	var b strings.Builder
	for i := 0; i < len(e); i++ {
		if e[i] == '\\' && i+1 < len(e) {
			if e[i+1] == 'u' && (e[i+2:i+6] == "2028" || e[i+2:i+6] == "2029") {
				b.WriteString(map[string]string{"2028": "\u2028", "2029": "\u2029"}[e[i+2:i+6]])
				i += 5
				continue
			}
			b.WriteString(e[i : i+2])
			i++
			continue
		}
		b.WriteByte(e[i])
	}
	return b.String()
}

// FuzzStream: a stream read in pieces of any sizes is read as it is read whole; without a list
// to cut every byte is passed on as received; and a cut stream cut again hides nothing more.
func FuzzStream(f *testing.F) {
	f.Add([]byte("event: message\r\nid: 1\r\ndata: "+listAnswer("1", readTool, deleteTool)+"\r\n\r\n: c\n\n"), []byte{1, 2, 3})
	f.Add([]byte("data: {\"jsonrpc\":\"2.0\",\ndata:\"id\":1,\"result\":{\"tools\":["+deleteTool+"]}}\r\r"), []byte{7})
	f.Add([]byte("\xEF\xBB\xBFdata: "+listAnswer("1", deleteTool)), []byte{0, 5})
	f.Fuzz(func(t *testing.T, stream, sizes []byte) {
		var pieces []int
		for _, s := range sizes {
			pieces = append(pieces, int(s)%16+1)
		}
		for _, lists := range [][]ID{nil, {ID("1")}} {
			fl := &Filter{Lists: lists, Allow: allowRead}
			whole, wholeErr := feed(fl.Stream(256), string(stream))
			s := fl.Stream(256)
			split, splitErr := feed(s, string(stream), pieces...)
			if (wholeErr == nil) != (splitErr == nil) || wholeErr == nil && whole != split {
				t.Fatalf("lists %v: whole %q, %v; in pieces %v %q, %v", lists, whole, wholeErr, pieces, split, splitErr)
			}
			if lists == nil {
				if split != string(stream) {
					t.Fatalf("read alone, the stream became %q", split)
				}
				continue
			}
			if splitErr != nil {
				continue
			}
			s2 := fl.Stream(256)
			again, err := feed(s2, split, pieces...)
			if err != nil || again != split || s2.Report().Hidden != 0 {
				t.Fatalf("cut again: %q, %v, hidden %d; want %q", again, err, s2.Report().Hidden, split)
			}
		}
	})
}

// TestReference checks the fuzz target's reference on cases whose answer is known, so that a
// reference that agreed with anything could not pass.
func TestReference(t *testing.T) {
	var v any
	if err := json.Unmarshal([]byte(`{"\ufb33":1,"😀":[-0.0,1e21,1e-7,"\u2028<\u0001>"],"a":true}`), &v); err != nil {
		t.Fatal(err)
	}
	want := "{\"a\":true,\"😀\":[0,1e+21,1e-7,\"\u2028<\\u0001>\"],\"\ufb33\":1}"
	if got := reference(v); got != want {
		t.Fatalf("reference = %s, want %s", got, want)
	}
	if _, _, err := Canonical([]byte(`{"a":1,"a":2}`)); !errors.Is(err, ErrAmbiguous) {
		t.Fatal("a duplicate is not ambiguous")
	}
}
