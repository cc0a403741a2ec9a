package tui

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// clean makes s safe to print on one line of a terminal. The gate masks and escapes what a
// ticket holds already; this is defence in depth, so that nothing an agent sent can move the
// cursor, clear the screen, set the window title or reorder text. Every rune that is not a
// visible character (C0 and C1 controls and DEL, format characters such as bidi overrides and
// isolates, zero-width characters and tag characters, line and paragraph separators, private-use
// and unassigned code points, spaces other than U+0020, blank letters such as U+3164) and every
// byte that is not UTF-8 is replaced by a visible escape: \x1b, \t, \n, \x9b, \u{202E},
// \u{E0041}, \xff. The notation is the gate's (internal/display), so that what the gate escaped
// and what this package escapes read alike; a backslash is kept as it is.
func clean(s string) string { return escape(s, false) }

// cleanBlock is clean for text of several lines (a body preview, a command's output): it keeps
// '\n' as a line break.
func cleanBlock(s string) string { return escape(s, true) }

// escaped reports whether clean changes s, that is whether s holds something invisible.
func escaped(s string) bool { return !plain(s, false) }

func escape(s string, keepNewline bool) string {
	if plain(s, keepNewline) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n' && keepNewline:
			b.WriteByte('\n')
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || (r >= 0x7f && r < 0xa0):
			fmt.Fprintf(&b, `\x%02x`, r)
		case hidden(r):
			fmt.Fprintf(&b, `\u{%04X}`, r)
		default:
			b.WriteRune(r)
		}
		i += n
	}
	return b.String()
}

// plain reports whether s prints as it is.
func plain(s string, keepNewline bool) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c < 0x7f {
			i++
			continue
		}
		if c == '\n' && keepNewline {
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n == 1) || r < 0x20 || r == 0x7f || hidden(r) {
			return false
		}
		i += n
	}
	return true
}

// hidden reports whether r is not a visible character of its own (see clean).
func hidden(r rune) bool {
	switch r {
	case ' ':
		return false
	case 0x115f, 0x1160, 0x3164, 0xffa0, 0x2800: // Hangul fillers and the blank braille pattern: letters that print nothing
		return true
	}
	// IsGraphic is false for controls, format characters, separators other than spaces,
	// surrogates, private use and unassigned code points.
	return !unicode.IsGraphic(r) || unicode.Is(unicode.Zs, r)
}
