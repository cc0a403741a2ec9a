// Package percent reads percent-encoding (%XX) one way for every check that reads it: a valid
// escape is its byte, and a '%' that starts no valid escape stays as written.
package percent

import "strings"

// Hex is the value of the hex digit c (0-9, a-f, A-F); ok is false for any other byte.
func Hex(c byte) (v byte, ok bool) {
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

// Escape is the byte a %XX escape at s[i] stands for (s[i] is '%'); ok is false when s[i+1:]
// does not start with two hex digits.
func Escape[T string | []byte](s T, i int) (b byte, ok bool) {
	if i+2 >= len(s) {
		return 0, false
	}
	hi, ok1 := Hex(s[i+1])
	lo, ok2 := Hex(s[i+2])
	return hi<<4 | lo, ok1 && ok2
}

// Decode decodes every valid %XX escape in s, and '+' as a space when plus is set (a form or a
// query); any other '%' stays as written. It returns s itself when there is nothing to decode.
func Decode(s string, plus bool) string {
	i := strings.IndexByte(s, '%')
	if plus {
		if j := strings.IndexByte(s, '+'); j >= 0 && (i < 0 || j < i) {
			i = j
		}
	}
	if i < 0 {
		return s
	}
	b := make([]byte, 0, len(s))
	b = append(b, s[:i]...)
	for ; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '%':
			if v, ok := Escape(s, i); ok {
				b = append(b, v)
				i += 2
				continue
			}
			b = append(b, c)
		case c == '+' && plus:
			b = append(b, ' ')
		default:
			b = append(b, c)
		}
	}
	return string(b)
}
