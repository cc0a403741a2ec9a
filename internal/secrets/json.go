package secrets

import (
	"strconv"
	"strings"
	"unsafe"

	"github.com/lockhttp/lockhttp/internal/jsonlex"
)

// maxJSONDepth bounds the path the walk keeps; deeper containers are walked without a path.
const maxJSONDepth = 64

// jsonPath renders the path of the string l has just returned from text: "messages[0].content";
// for a key, the path of its object. name cleans each key for display.
func jsonPath(l *jsonlex.Lexer, text []byte, isKey bool, name func(string) string) string {
	var b strings.Builder
	n := l.Depth()
	if isKey {
		n-- // the innermost frame's step is the key itself
	}
	for i := range n {
		f := l.Frame(i)
		if !f.Object() {
			b.WriteByte('[')
			b.WriteString(strconv.Itoa(f.Index))
			b.WriteByte(']')
			continue
		}
		raw := text[f.Key.Start:f.Key.End]
		if f.Key.Escaped {
			raw = jsonlex.AppendUnescaped(nil, raw)
		}
		k := name(string(raw))
		switch {
		case k == "":
			b.WriteString(`[""]`)
		case plainKey(k):
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(k)
		default:
			b.WriteByte('[')
			if k[0] != '"' {
				k = strconv.Quote(k)
			}
			b.WriteString(k)
			b.WriteByte(']')
		}
	}
	if l.Beyond() > 0 {
		b.WriteString("…")
	}
	return b.String()
}

func plainKey(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; !(class[c]&cWord != 0 || c == '-') {
			return false
		}
	}
	return true
}

// bytesOf returns s as bytes without copying, for the lexer, which only reads them.
func bytesOf(s string) []byte {
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

// unescapeJSON appends the text of a JSON string body (without quotes) to dst with its escapes
// decoded; malformed escapes are kept as written.
func unescapeJSON(dst []byte, s string) []byte {
	return jsonlex.AppendUnescaped(dst, bytesOf(s))
}

// jsonHasKey reports whether s is a JSON object with a member named key.
func jsonHasKey(s, key string) bool {
	var l jsonlex.Lexer
	_, ok := jsonMember(&l, bytesOf(s), key)
	return ok
}

// jsonMember reads the JSON object b leniently with l up to the member key at its top level
// and returns the key's token.
func jsonMember(l *jsonlex.Lexer, b []byte, key string) (jsonlex.Token, bool) {
	l.Reset(b, jsonlex.Lenient, maxJSONDepth)
	if t := l.Next(); t.Kind != jsonlex.ObjectStart {
		return t, false
	}
	for {
		t := l.Next()
		switch {
		case t.Kind == jsonlex.End:
			return t, false
		case t.Kind != jsonlex.Key || l.Depth() != 1:
			continue
		}
		k := b[t.Start:t.End]
		if t.Escaped {
			k = jsonlex.AppendUnescaped(nil, k)
		}
		if string(k) == key {
			return t, true
		}
	}
}
