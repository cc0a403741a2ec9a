package jsonlex

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"strconv"
	"unicode/utf8"

	"github.com/lockhttp/lockhttp/internal/percent"
)

// plain holds the bytes a string's text may hold as they are, without a check: printable ASCII
// other than the quote and the backslash.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// shortEscape holds the bytes that make a two-byte escape after a backslash.
var shortEscape = func() (t [256]bool) {
	for _, c := range []byte(`"\/bfnrt`) {
		t[c] = true
	}
	return t
}()

// space holds JSON's white space; delim adds what ends a lenient scalar.
var space, delim = func() (s, d [256]bool) {
	for _, c := range []byte(" \t\r\n") {
		s[c], d[c] = true, true
	}
	for _, c := range []byte(`{}[],:"`) {
		d[c] = true
	}
	return s, d
}()

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// special marks the high bit of each of the eight bytes of x (little-endian) that may not be
// plain: a control character, a quote, a backslash or a byte of a multi-byte sequence. A
// borrow may mark a plain byte after a marked one, never before: the lowest mark is exact.
func special(x uint64) uint64 {
	q := x ^ (ones * '"')
	s := x ^ (ones * '\\')
	return ((x-ones*0x20)&^x | (q-ones)&^q | (s-ones)&^s | x) & highs
}

// strictString checks the string whose text starts at i and returns the index of its closing
// quote and whether it holds escapes; or why it is refused, and where.
func strictString(b []byte, i int) (end int, esc bool, code Code, at int, want Want) {
	for {
		// Skip plain bytes, eight at a time while eight remain.
		for {
			if i+8 > len(b) {
				for i < len(b) && plain[b[i]] {
					i++
				}
				break
			}
			if m := special(binary.LittleEndian.Uint64(b[i:])); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break
			}
			i += 8
		}
		if i >= len(b) {
			return 0, false, ErrEnd, len(b), WantQuote
		}
		switch c := b[i]; {
		case c == '"':
			return i, esc, 0, 0, 0
		case c == '\\':
			esc = true
			if i+1 < len(b) && shortEscape[b[i+1]] {
				i += 2
				continue
			}
			n, code := escape(b, i)
			if code != 0 {
				if code == ErrEnd {
					return 0, false, code, len(b), WantEscape
				}
				return 0, false, code, i, 0
			}
			i += n
		case c < 0x20:
			return 0, false, ErrControl, i, 0
		case c < utf8.RuneSelf:
			i++ // plain would have taken it
		default:
			r, n := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && n == 1 {
				return 0, false, ErrUTF8, i, 0
			}
			i += n
		}
	}
}

// escape checks the escape whose backslash is at i and returns its length: a \u escape of a
// high surrogate must be followed by one of a low surrogate, and the two are one escape.
func escape(b []byte, i int) (int, Code) {
	if i+1 >= len(b) {
		return 0, ErrEnd
	}
	switch b[i+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return 2, 0
	case 'u':
	default:
		return 0, ErrEscape
	}
	r, ok := hex4(b[i+2:])
	switch {
	case !ok:
		return 0, ErrEscape
	case 0xDC00 <= r && r <= 0xDFFF:
		return 0, ErrLowSurrogate
	case 0xD800 <= r && r <= 0xDBFF:
		if i+7 < len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
			if r2, ok := hex4(b[i+8:]); ok && 0xDC00 <= r2 && r2 <= 0xDFFF {
				return 12, 0
			}
		}
		return 0, ErrHighSurrogate
	}
	return 6, 0
}

// lenientString returns the index of the quote that closes the string whose text starts at
// start (len(b) when it is not closed) and whether the text holds escapes, checking nothing.
func lenientString(b []byte, start int) (end int, esc bool) {
	for j := start; ; {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return len(b), bytes.IndexByte(b[start:], '\\') >= 0
		}
		q := j + k
		bs := 0
		for q-1-bs >= start && b[q-1-bs] == '\\' {
			bs++
		}
		if bs%2 == 0 {
			return q, bs > 0 || bytes.IndexByte(b[start:q], '\\') >= 0
		}
		j = q + 1
	}
}

// number reads the number at i by the grammar and returns where it ends. With checkRange, a
// number too large for a float64 is ErrRange: encoding/json refuses it, other parsers read it
// as infinity or a big integer.
func number(b []byte, i int, checkRange bool) (int, Code) {
	start := i
	exp := false
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		i = digits(b, i)
	default:
		return i, ErrNumber
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return j, ErrNumber
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		exp = true
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return j, ErrNumber
		}
		i = j
	}
	// Without an exponent, only a number of more than 308 digits exceeds a float64.
	if checkRange && (exp || i-start > 300) {
		if _, err := strconv.ParseFloat(string(b[start:i]), 64); err != nil {
			return i, ErrRange
		}
	}
	return i, 0
}

func digits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

// AppendUnescaped appends the text of a string (between its quotes) to dst with its escapes
// decoded, and returns the extended slice. A surrogate pair is one character; a malformed
// escape (Lenient mode lets them through) is kept as written, and a lone surrogate is U+FFFD.
func AppendUnescaped(dst, text []byte) []byte {
	for i := 0; i < len(text); {
		k := bytes.IndexByte(text[i:], '\\')
		if k < 0 {
			return append(dst, text[i:]...)
		}
		dst = append(dst, text[i:i+k]...)
		i += k
		if i+1 >= len(text) {
			return append(dst, '\\')
		}
		c := text[i+1]
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
			r, ok := hex4(text[i+2:])
			if !ok {
				dst = append(dst, '\\', 'u')
				break
			}
			i += 4
			if 0xD800 <= r && r < 0xDC00 && i+7 < len(text) && text[i+2] == '\\' && text[i+3] == 'u' {
				if r2, ok := hex4(text[i+4:]); ok && 0xDC00 <= r2 && r2 < 0xE000 {
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

// hex4 reads the four hex digits that b starts with.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		d, ok := percent.Hex(c)
		if !ok {
			return 0, false
		}
		r = r<<4 | rune(d)
	}
	return r, true
}
