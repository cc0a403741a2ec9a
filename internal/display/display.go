// Package display prepares text from a request for a human's eyes: control, invisible and
// bidirectional characters are shown escaped, never acted on, and long text is cut.
package display

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Escape returns s with every character that could hide or reorder what a human reads shown as
// a visible escape: C0 and C1 controls (except newline and tab when keepLines), DEL, bidi
// controls (U+202A–U+202E, U+2066–U+2069, U+200E, U+200F, U+061C), zero-width and other format
// characters (Unicode category Cf, U+FEFF included), line and paragraph separators; invalid
// UTF-8 bytes as \xNN. A backslash stays a backslash.
func Escape(s string, keepLines bool) string {
	clean := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case keepLines && (r == '\n' || r == '\t'):
			b.WriteRune(r)
		case r < 0x20 || (r >= 0x7f && r < 0xa0):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unicode.Is(unicode.Cf, r) || r == 0x2028 || r == 0x2029 || unicode.Is(unicode.Co, r):
			fmt.Fprintf(&b, `\u{%04X}`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// Truncate cuts s to at most n bytes on a character boundary, marking the cut.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("… (%d more bytes)", len(s)-cut)
}
