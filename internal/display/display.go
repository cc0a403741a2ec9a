// Package display prepares text from a request for a human's eyes: control, invisible,
// bidirectional and look-alike characters are shown escaped, never acted on, and long text is cut.
package display

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Escape returns s with every character that could hide, reorder or disguise what a human reads
// shown as a visible escape, in one notation for the gate's tickets and 403 bodies, the terminal
// and the phone page:
//
//   - \xNN for C0 and C1 controls and DEL (ESC is \x1b, NUL \x00, a line break \x0a) and for
//     each byte that is not UTF-8;
//   - \u{NNNN} for what prints nothing of its own: format characters (bidi controls U+202A–U+202E,
//     U+2066–U+2069, U+200E, U+200F, U+061C; zero-width characters; U+FEFF; tag characters),
//     line and paragraph separators, spaces other than U+0020, private-use and unassigned code
//     points, variation selectors and blank letters such as U+3164;
//   - \u{NNNN} for a look-alike (a letter or digit drawn like an ASCII one, such as the Cyrillic
//     "а" U+0430) when the run it stands in also holds an ASCII letter or digit or an escape:
//     "pаypal.com" shows p\u{0430}ypal.com, while a word wholly in Cyrillic stays as it is.
//
// A run is the text between two spaces (U+0020), and also between line breaks and tabs when
// keepLines, which keeps '\n' and '\t' as they are. A backslash stays a backslash. Escape's
// output holds only visible characters and is its own fixed point: Escape(Escape(s, k), k) is
// Escape(s, k).
func Escape(s string, keepLines bool) string {
	if printableASCII(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for start := 0; start <= len(s); {
		end := start
		for end < len(s) && !separator(s[end], keepLines) {
			end++
		}
		escapeRun(&b, s[start:end])
		if end < len(s) {
			b.WriteByte(s[end])
		}
		start = end + 1
	}
	return b.String()
}

// separator reports whether c ends a run: a character Escape keeps and that is white space.
func separator(c byte, keepLines bool) bool {
	return c == ' ' || keepLines && (c == '\n' || c == '\t')
}

// escapeRun writes run, which holds no separator, escaped.
func escapeRun(b *strings.Builder, run string) {
	mixed := false // the run holds an ASCII letter or digit, or a character shown escaped
	for i := 0; i < len(run) && !mixed; {
		r, size := utf8.DecodeRuneInString(run[i:])
		k := classify(r, size)
		mixed = k == control || k == invisible || r < utf8.RuneSelf && asciiAlnum(byte(r))
		i += size
	}
	for i := 0; i < len(run); {
		r, size := utf8.DecodeRuneInString(run[i:])
		switch k := classify(r, size); {
		case k == control && size == 1 && r == utf8.RuneError:
			fmt.Fprintf(b, `\x%02x`, run[i])
		case k == control:
			fmt.Fprintf(b, `\x%02x`, r)
		case k == invisible || k == lookalike && mixed:
			fmt.Fprintf(b, `\u{%04X}`, r)
		default:
			b.WriteString(run[i : i+size])
		}
		i += size
	}
}

// What Escape does with a character.
const (
	shown     = iota // as it is
	control          // \xNN
	invisible        // \u{NNNN}
	lookalike        // \u{NNNN} in a mixed run, else as it is
)

// classify says what Escape does with r, decoded from size bytes (a byte that is not UTF-8
// decodes as utf8.RuneError of size 1).
func classify(r rune, size int) int {
	switch {
	case r == utf8.RuneError && size == 1, r < 0x20, r >= 0x7f && r < 0xa0:
		return control
	case r < 0x7f:
		return shown
	case hidden(r):
		return invisible
	case lookalikeOf(r):
		return lookalike
	}
	return shown
}

// hidden reports whether r, not ASCII, prints nothing of its own.
func hidden(r rune) bool {
	switch {
	case r == 0x034F, r == 0x17B4, r == 0x17B5, // combining grapheme joiner, Khmer inherent vowels
		0x180B <= r && r <= 0x180F,                         // Mongolian variation selectors
		0xFE00 <= r && r <= 0xFE0F,                         // variation selectors
		0xE0100 <= r && r <= 0xE01EF,                       // variation selectors supplement
		r == 0x115F, r == 0x1160, r == 0x3164, r == 0xFFA0, // Hangul fillers
		r == 0x2800: // the blank braille pattern
		return true
	}
	// IsGraphic is false for controls, format characters, separators other than spaces,
	// surrogates, private use and unassigned code points; it is true for every space.
	return !unicode.IsGraphic(r) || unicode.Is(unicode.Zs, r)
}

// lookalikeOf reports whether r is drawn like an ASCII letter or digit but is not one: a subset
// of Unicode's confusables (UTS #39), the ones an agent could use to pass one name for another.
func lookalikeOf(r rune) bool {
	switch {
	case 0xFF10 <= r && r <= 0xFF5A, // fullwidth forms
		0x2100 <= r && r <= 0x218F: // letterlike symbols (the Kelvin sign), Roman numerals
		return unicode.IsLetter(r) || unicode.IsNumber(r)
	case 0x1D400 <= r && r <= 0x1D7FF, // mathematical alphanumeric symbols
		0xA4D0 <= r && r <= 0xA4F7, // Lisu capitals
		0xAB70 <= r && r <= 0xABBF: // Cherokee small letters
		return true
	}
	return lookalikes[r]
}

var lookalikes = map[rune]bool{
	// Latin letters that are not ASCII: dotless i and j, script a and g, the dental click.
	0x0131: true, 0x0237: true, 0x0251: true, 0x0261: true, 0x01C0: true,
	// Greek.
	0x037F: true, 0x0391: true, 0x0392: true, 0x0395: true, 0x0396: true, 0x0397: true, 0x0399: true,
	0x039A: true, 0x039C: true, 0x039D: true, 0x039F: true, 0x03A1: true, 0x03A4: true, 0x03A5: true,
	0x03A7: true, 0x03B1: true, 0x03B3: true, 0x03B9: true, 0x03BA: true, 0x03BD: true, 0x03BF: true,
	0x03C1: true, 0x03C5: true, 0x03C7: true, 0x03F2: true, 0x03F3: true, 0x03F9: true,
	// Cyrillic.
	0x0405: true, 0x0406: true, 0x0408: true, 0x0410: true, 0x0412: true, 0x0415: true, 0x0417: true,
	0x041A: true, 0x041C: true, 0x041D: true, 0x041E: true, 0x0420: true, 0x0421: true, 0x0422: true,
	0x0423: true, 0x0425: true, 0x0430: true, 0x0435: true, 0x043E: true, 0x0440: true, 0x0441: true,
	0x0443: true, 0x0445: true, 0x0455: true, 0x0456: true, 0x0458: true, 0x0461: true, 0x0474: true,
	0x0475: true, 0x04AE: true, 0x04AF: true, 0x04BA: true, 0x04BB: true, 0x04C0: true, 0x04CF: true,
	0x0501: true, 0x050C: true, 0x051A: true, 0x051B: true, 0x051C: true, 0x051D: true,
	// Armenian.
	0x054D: true, 0x054F: true, 0x0555: true, 0x0566: true, 0x0570: true, 0x0578: true, 0x057D: true,
	0x0581: true, 0x0585: true,
	// Cherokee capitals.
	0x13A0: true, 0x13A1: true, 0x13A2: true, 0x13A9: true, 0x13AA: true, 0x13AB: true, 0x13AC: true,
	0x13B3: true, 0x13B7: true, 0x13BB: true, 0x13C0: true, 0x13C3: true, 0x13CF: true, 0x13D2: true,
	0x13D4: true, 0x13D9: true, 0x13DA: true, 0x13DE: true, 0x13DF: true, 0x13E2: true, 0x13E6: true,
	0x13F4: true,
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

func asciiAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// Line is s for one line of a human's screen or a message: cut to n bytes (Truncate), then
// escaped (Escape, a line break shown as \x0a).
func Line(s string, n int) string { return Escape(Truncate(s, n), false) }

// Clean returns text a human typed (a denial's reason, a name) as one line that needs no escape:
// line breaks, tabs and other spaces become a space; controls, what prints nothing of its own
// and bytes that are not UTF-8 are dropped; spaces at either end are trimmed. Look-alikes stay:
// the human typed them.
func Clean(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		switch k := classify(r, size); {
		case r == '\n' || r == '\t' || r == '\r' || unicode.Is(unicode.Zs, r):
			b.WriteByte(' ')
		case k == control || k == invisible:
		default:
			b.WriteRune(r)
		}
	}
	return strings.TrimSpace(b.String())
}

// Cut cuts s to at most n bytes on a character boundary, unmarked (for a name with a bound).
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := max(n, 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// Truncate cuts s to at most n bytes on a character boundary, marking the cut with how much
// went: "… (12 more bytes)".
func Truncate(s string, n int) string {
	c := Cut(s, n)
	if len(c) == len(s) {
		return s
	}
	return c + fmt.Sprintf("… (%d more bytes)", len(s)-len(c))
}
