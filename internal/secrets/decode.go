package secrets

import (
	"encoding/base64"
	"strings"
	"unicode/utf8"
)

// percentDecode decodes %XX escapes (and '+' as a space when plus is set), keeping malformed
// escapes as written. It returns s itself when there is nothing to decode.
func percentDecode(s string, plus bool) string {
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
		case c == '%' && i+2 < len(s):
			hi, ok1 := unhex(s[i+1])
			lo, ok2 := unhex(s[i+2])
			if ok1 && ok2 {
				b = append(b, hi<<4|lo)
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

// decodeBase64 decodes a token in the standard or URL alphabet, padded or not; ok is false
// when tok is not base64 of one alphabet.
func decodeBase64(tok string) ([]byte, bool) {
	tok = strings.TrimRight(tok, "=")
	std, url := false, false
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		switch {
		case class[c]&cBase62 != 0:
		case c == '+' || c == '/':
			std = true
		case c == '-' || c == '_':
			url = true
		default:
			return nil, false
		}
	}
	if std && url || len(tok)%4 == 1 {
		return nil, false
	}
	enc := base64.RawStdEncoding
	if url {
		enc = base64.RawURLEncoding
	}
	b, err := enc.DecodeString(tok)
	if err != nil {
		return nil, false
	}
	return b, true
}

// isText reports whether b reads as text: valid UTF-8 without control characters other than
// tab and line ends. Base64 of images and other binary data does not.
func isText(b []byte) bool {
	for _, c := range b {
		if c < 0x20 && c != '\t' && c != '\n' && c != '\r' || c == 0x7f {
			return false
		}
	}
	return utf8.Valid(b)
}
