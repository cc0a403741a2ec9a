package secrets

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// maxJSONDepth bounds the path the walker keeps; deeper containers are walked without a path.
const maxJSONDepth = 64

// jsonWalker walks the strings of JSON text, keeping the path to each. It never fails: on
// malformed or truncated input (a body cut at the limit) it walks what it can and reports
// every string it sees.
type jsonWalker struct {
	s      string
	i      int
	frames []jsonFrame
	deep   int // containers open beyond maxJSONDepth
	buf    [8]jsonFrame
}

type jsonFrame struct {
	key     string // objects: the raw text of the current key
	index   int    // arrays: the current element; objects: -1
	wantKey bool   // objects: the next string is a key
}

func (w *jsonWalker) init(s string) {
	w.s = s
	w.frames = w.buf[:0]
}

func (w *jsonWalker) top() *jsonFrame {
	if w.deep > 0 || len(w.frames) == 0 {
		return nil
	}
	return &w.frames[len(w.frames)-1]
}

// next returns the next string: its text between the quotes, whether that holds escapes, and
// whether it is an object key; ok is false at the end.
func (w *jsonWalker) next() (start, end int, esc, isKey, ok bool) {
	s := w.s
	for w.i < len(s) {
		c := s[w.i]
		w.i++
		switch c {
		case '{', '[':
			if len(w.frames) >= maxJSONDepth || w.deep > 0 {
				w.deep++
				continue
			}
			f := jsonFrame{index: 0}
			if c == '{' {
				f = jsonFrame{index: -1, wantKey: true}
			}
			w.frames = append(w.frames, f)
		case '}', ']':
			if w.deep > 0 {
				w.deep--
			} else if len(w.frames) > 0 {
				w.frames = w.frames[:len(w.frames)-1]
			}
		case ',':
			if t := w.top(); t != nil {
				if t.index >= 0 {
					t.index++
				} else {
					t.wantKey = true
				}
			}
		case ':':
			if t := w.top(); t != nil && t.index < 0 {
				t.wantKey = false
			}
		case '"':
			start = w.i
			end, esc = stringEnd(s, start)
			w.i = min(end+1, len(s))
			if t := w.top(); t != nil && t.index < 0 && t.wantKey {
				t.key = s[start:end]
				t.wantKey = false
				return start, end, esc, true, true
			}
			return start, end, esc, false, true
		}
	}
	return 0, 0, false, false, false
}

// path renders the path of the string just returned: "messages[0].content"; for a key, the
// path of its object. name cleans each key for display.
func (w *jsonWalker) path(isKey bool, name func(string) string) string {
	var b strings.Builder
	n := len(w.frames)
	for i, f := range w.frames {
		if f.index >= 0 {
			b.WriteByte('[')
			b.WriteString(strconv.Itoa(f.index))
			b.WriteByte(']')
			continue
		}
		if isKey && i == n-1 {
			break
		}
		k := f.key
		if strings.IndexByte(k, '\\') >= 0 {
			k = string(unescapeJSON(nil, k))
		}
		k = name(k)
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
	if w.deep > 0 {
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

// stringEnd returns the index of the quote that closes the JSON string starting at start (or
// len(s) when it is not closed) and whether the string holds escapes.
func stringEnd(s string, start int) (end int, esc bool) {
	for j := start; ; {
		k := strings.IndexByte(s[j:], '"')
		if k < 0 {
			return len(s), strings.IndexByte(s[start:], '\\') >= 0
		}
		q := j + k
		bs := 0
		for q-1-bs >= start && s[q-1-bs] == '\\' {
			bs++
		}
		if bs%2 == 0 {
			return q, bs > 0 || strings.IndexByte(s[start:q], '\\') >= 0
		}
		j = q + 1
	}
}

// unescapeJSON appends the text of a JSON string body (without quotes) to dst with its escapes
// decoded; malformed escapes are kept as written.
func unescapeJSON(dst []byte, s string) []byte {
	for i := 0; i < len(s); {
		k := strings.IndexByte(s[i:], '\\')
		if k < 0 {
			return append(dst, s[i:]...)
		}
		dst = append(dst, s[i:i+k]...)
		i += k
		if i+1 >= len(s) {
			return append(dst, '\\')
		}
		c := s[i+1]
		switch c {
		case '"', '\\', '/':
			dst = append(dst, c)
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, ok := hex4(s, i+2)
			if !ok {
				dst = append(dst, '\\', 'u')
				break
			}
			i += 4
			if 0xD800 <= r && r < 0xDC00 && i+7 < len(s) && s[i+2] == '\\' && s[i+3] == 'u' {
				if r2, ok := hex4(s, i+4); ok && 0xDC00 <= r2 && r2 < 0xE000 {
					r = 0x10000 + (r-0xD800)<<10 + (r2 - 0xDC00)
					i += 6
				}
			}
			dst = utf8.AppendRune(dst, r)
		default:
			dst = append(dst, '\\', c)
		}
		i += 2
	}
	return dst
}

func hex4(s string, i int) (rune, bool) {
	if i+4 > len(s) {
		return 0, false
	}
	var r rune
	for _, c := range []byte(s[i : i+4]) {
		v, ok := unhex(c)
		if !ok {
			return 0, false
		}
		r = r<<4 | rune(v)
	}
	return r, true
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// jsonHasKey reports whether s is a JSON object with a member named key.
func jsonHasKey(s, key string) bool {
	_, ok := jsonMember(s, key)
	return ok
}

// jsonTopString returns the value of the member key of the JSON object s when it is a string.
func jsonTopString(s, key string) (string, bool) {
	at, ok := jsonMember(s, key)
	if !ok {
		return "", false
	}
	i := at
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r' || s[i] == ':') {
		i++
	}
	if i >= len(s) || s[i] != '"' {
		return "", false
	}
	end, esc := stringEnd(s, i+1)
	if end >= len(s) {
		return "", false
	}
	v := s[i+1 : end]
	if esc {
		v = string(unescapeJSON(nil, v))
	}
	return v, true
}

// jsonMember finds the member key at the top level of the JSON object s and returns the
// offset just past its name.
func jsonMember(s, key string) (int, bool) {
	t := strings.TrimLeft(s, " \t\r\n")
	if t == "" || t[0] != '{' {
		return 0, false
	}
	var w jsonWalker
	w.init(s)
	for {
		start, end, esc, isKey, ok := w.next()
		if !ok {
			return 0, false
		}
		if !isKey || len(w.frames) != 1 || w.deep > 0 {
			continue
		}
		k := s[start:end]
		if esc {
			k = string(unescapeJSON(nil, k))
		}
		if k == key {
			return w.i, true
		}
	}
}
