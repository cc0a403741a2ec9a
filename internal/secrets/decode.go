package secrets

import (
	"encoding/base64"
	"strings"
	"unicode/utf8"
)

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
