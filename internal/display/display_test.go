package display

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestEscape(t *testing.T) {
	tests := []struct {
		name, in, want string
		wantLines      string // Escape(in, true); empty: the same as want
	}{
		{name: "plain", in: "https://example.com/a?b=c#d", want: "https://example.com/a?b=c#d"},
		{name: "letters of other scripts stay", in: "café/日本/émoji🙂 ok é ü", want: "café/日本/émoji🙂 ok é ü"},
		{name: "csi clear screen", in: "a\x1b[2Jb", want: `a\x1b[2Jb`},
		{name: "osc title with bel", in: "\x1b]0;pwned\x07", want: `\x1b]0;pwned\x07`},
		{name: "c1 csi as a rune", in: "a\u009b31m", want: `a\x9b31m`},
		{name: "c1 csi as a lone byte", in: "a\x9b31m", want: `a\x9b31m`},
		{name: "c1 next line", in: "c1 \u0085 next", want: `c1 \x85 next`},
		{name: "nul and del", in: "a\x00b\x7f", want: `a\x00b\x7f`},
		{name: "tab cr lf", in: "a\tb\rc\nd", want: `a\x09b\x0dc\x0ad`, wantLines: "a\tb\\x0dc\nd"},
		{name: "bidi override", in: "rm -rf \u202Eexe.txt", want: `rm -rf \u{202E}exe.txt`},
		{name: "bidi isolates and marks", in: "\u2066\u2067\u2068\u2069\u200e\u200f\u061c", want: `\u{2066}\u{2067}\u{2068}\u{2069}\u{200E}\u{200F}\u{061C}`},
		{name: "zero width", in: "a\u200bb\u200dc\ufeffd\u2060e\u00adf", want: `a\u{200B}b\u{200D}c\u{FEFF}d\u{2060}e\u{00AD}f`},
		{name: "tag characters", in: "hi\U000E0041\U000E007F", want: `hi\u{E0041}\u{E007F}`},
		{name: "line and paragraph separators", in: "sep\u2028x\u2029c", want: `sep\u{2028}x\u{2029}c`},
		{name: "odd spaces", in: "a\u00a0b\u3000c\u2007d", want: `a\u{00A0}b\u{3000}c\u{2007}d`},
		{name: "blank letters", in: "a\u3164b\u2800c", want: `a\u{3164}b\u{2800}c`},
		{name: "variation selectors", in: "a\ufe0fb\U000E0100c\u034fd", want: `a\u{FE0F}b\u{E0100}c\u{034F}d`},
		{name: "private use", in: "a\ue000b", want: `a\u{E000}b`},
		{name: "invalid utf-8", in: "bad \xff byte \xc3", want: `bad \xff byte \xc3`},
		{name: "replacement character stays", in: "a\ufffdb", want: "a\ufffdb"},
		{name: "backslash stays", in: `a\x1bb`, want: `a\x1bb`},

		// Look-alikes.
		{name: "cyrillic a in a latin host", in: "https://p\u0430ypal.com/", want: `https://p\u{0430}ypal.com/`},
		{name: "cyrillic word in a latin path", in: "/repos/\u0430\u0440\u0440\u04cf\u0435/x", want: `/repos/\u{0430}\u{0440}\u{0440}\u{04CF}\u{0435}/x`},
		{name: "greek omicron", in: "g\u03bfogle", want: `g\u{03BF}ogle`},
		{name: "fullwidth letters beside ascii", in: "\uff47\uff49\uff54.com", want: `\u{FF47}\u{FF49}\u{FF54}.com`},
		{name: "mathematical bold", in: "\U0001D41Aws", want: `\u{1D41A}ws`},
		{name: "kelvin sign", in: "\u212Aey", want: `\u{212A}ey`},
		{name: "a cyrillic word stays", in: "привет мир", want: "привет мир"},
		{name: "a cyrillic look-alike word alone stays", in: "о нас", want: "о нас"},
		{name: "a space ends the run", in: "\u0430 b", want: "\u0430 b"},
		{name: "an escape makes the run mixed", in: "\u0430\u200b", want: `\u{0430}\u{200B}`},
		{name: "a line break is a run's end only when kept", in: "\u0430\nb", want: `\u{0430}\x0ab`, wantLines: "\u0430\nb"},
		{name: "non-look-alike cyrillic beside latin stays", in: "xпривет", want: `xп\u{0440}ив\u{0435}т`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Escape(tc.in, false); got != tc.want {
				t.Errorf("Escape(%q, false) = %q, want %q", tc.in, got, tc.want)
			}
			wantLines := tc.wantLines
			if wantLines == "" {
				wantLines = tc.want
			}
			if got := Escape(tc.in, true); got != wantLines {
				t.Errorf("Escape(%q, true) = %q, want %q", tc.in, got, wantLines)
			}
		})
	}
}

func TestLine(t *testing.T) {
	tests := []struct {
		name, in string
		n        int
		want     string
	}{
		{"short", "a\nb", 10, `a\x0ab`},
		{"cut then escaped", "\x1b[2Jabcdef", 6, `\x1b[2Jab… (4 more bytes)`},
		{"cut on a character boundary", "héllo", 2, "h… (5 more bytes)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Line(tc.in, tc.n); got != tc.want {
				t.Errorf("Line(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
			}
		})
	}
}

func TestClean(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"plain", "not today", "not today"},
		{"padded", "  padded  ", "padded"},
		{"lines become one", "two\nlines\r\nthree\tfour", "two lines  three four"},
		{"odd spaces become spaces", "a\u00a0b\u3000c", "a b c"},
		{"escape sequence loses its escape", "esc\x1b[31m", "esc[31m"},
		{"invisible only", "\u202e\u200b\u3164", ""},
		{"white space only", " \t ", ""},
		{"invalid utf-8 dropped", "a\xffb", "ab"},
		{"look-alikes stay", "p\u0430ypal", "p\u0430ypal"},
		{"letters stay", "nein, danke: Zoé", "nein, danke: Zoé"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Clean(tc.in); got != tc.want {
				t.Errorf("Clean(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestTruncateAndCut(t *testing.T) {
	tests := []struct {
		name, in      string
		n             int
		cut, truncate string
	}{
		{"fits", "abc", 5, "abc", "abc"},
		{"exactly", "abc", 3, "abc", "abc"},
		{"ascii", "abcdef", 4, "abcd", "abcd… (2 more bytes)"},
		{"inside a character", "héllo", 2, "h", "h… (5 more bytes)"},
		{"zero", "abc", 0, "", "… (3 more bytes)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Cut(tc.in, tc.n); got != tc.cut {
				t.Errorf("Cut(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.cut)
			}
			if got := Truncate(tc.in, tc.n); got != tc.truncate {
				t.Errorf("Truncate(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.truncate)
			}
		})
	}
}

// FuzzEscape: whatever the input, the output is UTF-8 and holds only visible characters, no
// look-alike stands beside ASCII, escaping again changes nothing, visible text comes out as it
// went in, and Clean's output needs no escape but for look-alikes.
func FuzzEscape(f *testing.F) {
	for _, s := range []string{"https://example.com/", "a\x1b[2J\u202E\xff", "p\u0430ypal", "\u0430\u200b",
		"\u0430\nb", "日本\u200d", "\U000E0041", "о нас"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, keep := range []bool{false, true} {
			out := Escape(s, keep)
			if !utf8.ValidString(out) {
				t.Fatalf("Escape(%q, %v) = %q: not UTF-8", s, keep, out)
			}
			for _, run := range strings.Fields(out) {
				ascii := strings.IndexFunc(run, func(r rune) bool { return r < utf8.RuneSelf && asciiAlnum(byte(r)) }) >= 0
				for _, r := range run {
					k := classify(r, utf8.RuneLen(r))
					if k == control || k == invisible || k == lookalike && ascii {
						t.Fatalf("Escape(%q, %v) = %q holds %U", s, keep, out, r)
					}
				}
			}
			if !keep && strings.ContainsAny(out, "\n\t") {
				t.Fatalf("Escape(%q, false) = %q holds a line break or a tab", s, out)
			}
			if again := Escape(out, keep); again != out {
				t.Fatalf("Escape(Escape(%q, %v)) = %q, not %q", s, keep, again, out)
			}
		}
		c := Clean(s)
		if strings.ContainsAny(c, "\n\t\r") || strings.TrimSpace(c) != c {
			t.Fatalf("Clean(%q) = %q: not one trimmed line", s, c)
		}
		for _, r := range c {
			if k := classify(r, utf8.RuneLen(r)); k == control || k == invisible {
				t.Fatalf("Clean(%q) = %q holds %U", s, c, r)
			}
		}
	})
}
