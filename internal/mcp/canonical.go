package mcp

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/lockhttp/lockhttp/internal/jsonlex"
)

// Canonical returns the canonical JSON of one JSON text, in the manner of RFC 8785: no white
// space, object members sorted by their keys' UTF-16 code units, numbers in the shortest form
// that reads back as the same 64-bit float (as ECMAScript writes them: 1e+21, 1e-7, 0 for -0),
// strings with only the escapes JSON requires (\" \\ \b \f \n \r \t, and \u00xx for the other
// controls). Two texts that differ only in white space, member order, escapes or the spelling of
// a number have the same canonical JSON. It refuses what Parse finds ambiguous in any object: a
// duplicate key, keys that differ only by case, a key with a control or invisible character; and
// text the strict lexer refuses. A number with more digits than a float64 holds is written
// rounded, as RFC 8785 does, and reported by inexact.
func Canonical(text []byte) (out []byte, inexact bool, err error) {
	return canonical(text)
}

// ErrAmbiguous is the error of Canonical for text that parsers read in more than one way.
var ErrAmbiguous = errors.New("ambiguous JSON")

func canonical(text []byte) ([]byte, bool, error) {
	if len(text) > MaxBody {
		return nil, false, errors.New("the text is over the size limit")
	}
	var w walker
	w.reset(text)
	out := w.value(w.next(), nil, true)
	if !w.stopped {
		if t := w.next(); t.Kind != jsonlex.End {
			w.lexStop()
		}
	}
	if w.stopped {
		return nil, false, errors.New(w.stopText)
	}
	if len(w.findings) > 0 {
		return nil, false, fmt.Errorf("%w: %s", ErrAmbiguous, w.findings[0].Text)
	}
	return out, w.inexact, nil
}

// appendObject appends an object of members, whose values' canonical JSON is in scratch, in
// canonical order. Members with equal keys (an ambiguous object, already a finding) keep their
// order.
func appendObject(dst []byte, members []member, scratch []byte) []byte {
	slices.SortStableFunc(members, func(a, b member) int { return compareUTF16(a.key, b.key) })
	dst = append(dst, '{')
	for i, m := range members {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, []byte(m.key))
		dst = append(dst, ':')
		dst = append(dst, scratch[m.start:m.end]...)
	}
	return append(dst, '}')
}

// compareUTF16 compares two strings by their UTF-16 code units, as RFC 8785 sorts keys.
func compareUTF16(a, b string) int {
	for a != "" && b != "" {
		ra, na := utf8.DecodeRuneInString(a)
		rb, nb := utf8.DecodeRuneInString(b)
		a, b = a[na:], b[nb:]
		if ra == rb {
			continue
		}
		a1, a2 := utf16Units(ra)
		b1, b2 := utf16Units(rb)
		if a1 != b1 {
			return int(a1) - int(b1)
		}
		return int(a2) - int(b2)
	}
	return len(a) - len(b)
}

// utf16Units is r in UTF-16: a surrogate pair, or r and 0.
func utf16Units(r rune) (rune, rune) {
	if r >= 0x10000 {
		return utf16.EncodeRune(r)
	}
	return r, 0
}

// foldKey is s with each character replaced by the least character of its case-folding orbit:
// two strings have the same foldKey exactly when strings.EqualFold holds (ſ and s, K and k).
func foldKey(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		m := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			m = min(m, f)
		}
		b.WriteRune(m)
	}
	return b.String()
}

// appendString appends s as a canonical JSON string.
func appendString(dst, s []byte) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendNumber appends the number written num (valid JSON, within a float64's range) in its
// canonical form, and reports whether that form is the same decimal value as num.
func appendNumber(dst, num []byte) ([]byte, bool) {
	f, err := strconv.ParseFloat(string(num), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		// The strict lexer has refused such a number already.
		return append(dst, '0'), false
	}
	start := len(dst)
	dst = appendES(dst, f)
	return dst, sameDecimal(string(num), string(dst[start:]))
}

// appendES appends f as ECMAScript's Number::toString writes it.
func appendES(dst []byte, f float64) []byte {
	if f == 0 {
		return append(dst, '0')
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs < 1e-6 || abs >= 1e21 {
		format = 'e'
	}
	start := len(dst)
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// strconv writes e-07 where ECMAScript writes e-7.
		n := len(dst)
		if n-start >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst
}

// sameDecimal reports whether two JSON numbers are the same decimal value, whatever their
// spelling (0.5, 5e-1, 0.50); zero's sign does not count.
func sameDecimal(a, b string) bool {
	na, ea, za, sa := decimal(a)
	nb, eb, zb, sb := decimal(b)
	if za || zb {
		return za && zb
	}
	return sa == sb && na == nb && ea == eb
}

// decimal reads a JSON number as its significant digits (no leading or trailing zeros), the
// exponent of its last digit, whether it is zero, and its sign.
func decimal(s string) (digits string, exp int64, zero, neg bool) {
	if strings.HasPrefix(s, "-") {
		neg, s = true, s[1:]
	}
	mant, e, _ := strings.Cut(strings.ToLower(s), "e")
	if e != "" {
		v, err := strconv.ParseInt(e, 10, 64)
		if err != nil {
			// An exponent past int64 is out of a float64's range: the lexer refused it.
			v = 0
		}
		exp = v
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	digits = intPart + frac
	exp -= int64(len(frac))
	digits = strings.TrimLeft(digits, "0")
	n := len(digits)
	digits = strings.TrimRight(digits, "0")
	exp += int64(n - len(digits))
	return digits, exp, digits == "", neg
}
