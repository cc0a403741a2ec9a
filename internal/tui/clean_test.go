package tui

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestClean(t *testing.T) {
	tests := []struct {
		name, in, want, wantBlock string
	}{
		{name: "plain", in: "https://example.com/a?b=c#d", want: "https://example.com/a?b=c#d"},
		{name: "unicode letters stay", in: "café/日本/émoji🙂", want: "café/日本/émoji🙂"},
		{name: "csi clear screen", in: "http://x/\x1b[2J", want: `http://x/\x1b[2J`},
		{name: "osc title with bel", in: "\x1b]0;pwned\x07", want: `\x1b]0;pwned\x07`},
		{name: "c1 csi as a rune", in: "a\u009b31m", want: `a\x9b31m`},
		{name: "c1 csi as a lone byte", in: "a\x9b31m", want: `a\x9b31m`},
		{name: "nul and del", in: "a\x00b\x7f", want: `a\x00b\x7f`},
		{name: "tab cr lf", in: "a\tb\rc\nd", want: `a\tb\rc\nd`, wantBlock: "a\\tb\\rc\nd"},
		{name: "bidi override", in: "invoice\u202egpj.exe", want: `invoice\u{202E}gpj.exe`},
		{name: "bidi isolates and marks", in: "\u2066\u2067\u2068\u2069\u200e\u200f\u061c", want: `\u{2066}\u{2067}\u{2068}\u{2069}\u{200E}\u{200F}\u{061C}`},
		{name: "zero width", in: "a\u200bb\u200dc\ufeffd\u2060e\u00adf", want: `a\u{200B}b\u{200D}c\u{FEFF}d\u{2060}e\u{00AD}f`},
		{name: "tag characters", in: "hi\U000E0041\U000E007F", want: `hi\u{E0041}\u{E007F}`},
		{name: "line and paragraph separators", in: "a\u2028b\u2029c", want: `a\u{2028}b\u{2029}c`},
		{name: "odd spaces", in: "a\u00a0b\u3000c\u2007d", want: `a\u{00A0}b\u{3000}c\u{2007}d`},
		{name: "blank letters", in: "a\u3164b\u2800c", want: `a\u{3164}b\u{2800}c`},
		{name: "private use", in: "a\ue000b", want: `a\u{E000}b`},
		{name: "invalid utf-8", in: "a\xffb\xc3", want: `a\xffb\xc3`},
		{name: "replacement character itself stays", in: "a\ufffdb", want: "a\ufffdb"},
		{name: "backslash stays", in: `a\x1bb`, want: `a\x1bb`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := clean(tc.in); got != tc.want {
				t.Errorf("clean(%q) = %q, want %q", tc.in, got, tc.want)
			}
			wantBlock := tc.wantBlock
			if wantBlock == "" {
				wantBlock = tc.want
			}
			if got := cleanBlock(tc.in); got != wantBlock {
				t.Errorf("cleanBlock(%q) = %q, want %q", tc.in, got, wantBlock)
			}
			if got, want := escaped(tc.in), tc.in != tc.want; got != want {
				t.Errorf("escaped(%q) = %v, want %v", tc.in, got, want)
			}
		})
	}
}

func TestByOf(t *testing.T) {
	tests := []struct{ user, want string }{
		{"alice", "terminal:alice"},
		{"", "terminal"},
		{"  bob  ", "terminal:bob"},
		{"eve:phone", "terminal:evephone"},
		{"mallory\x1b[2J\u202e", "terminal:mallory[2J"},
	}
	for _, tc := range tests {
		if got := byOf(tc.user); got != tc.want {
			t.Errorf("byOf(%q) = %q, want %q", tc.user, got, tc.want)
		}
	}
}

func TestReasonOf(t *testing.T) {
	tests := []struct{ in, want string }{
		{"not today", "not today"},
		{"  padded  ", "padded"},
		{"two\nlines", "two lines"},
		{"esc\x1b[31m", "esc[31m"},
		{"\u202e\u200b", ""},
		{" \t ", ""},
	}
	for _, tc := range tests {
		if got := reasonOf(tc.in); got != tc.want {
			t.Errorf("reasonOf(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// FuzzClean: whatever the input, the output is UTF-8 and holds nothing that is not a visible
// character, and text that is visible already comes out unchanged.
func FuzzClean(f *testing.F) {
	for _, s := range []string{"https://example.com/", "\x1b[2J", "a\u202eb", "\xff\xfe", "日本\u200d", "\U000E0041"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, keep := range []bool{false, true} {
			out := escape(s, keep)
			if !utf8.ValidString(out) {
				t.Fatalf("escape(%q, %v) = %q: not UTF-8", s, keep, out)
			}
			for _, r := range out {
				if (r == '\n' && keep) || r == ' ' {
					continue
				}
				if r < 0x20 || r == 0x7f || hidden(r) {
					t.Fatalf("escape(%q, %v) = %q holds %U", s, keep, out, r)
				}
			}
			if plain(s, keep) && out != s {
				t.Fatalf("escape(%q, %v) = %q changed visible text", s, keep, out)
			}
			if !keep && strings.Contains(out, "\n") {
				t.Fatalf("clean(%q) = %q holds a line break", s, out)
			}
		}
	})
}
