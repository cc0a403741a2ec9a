package display

import (
	"strings"
	"testing"
)

func TestEscape(t *testing.T) {
	cases := []struct{ in, want string }{
		{"plain text", "plain text"},
		{"a\x1b[2Jb", `a\x1b[2Jb`},
		{"rm -rf \u202Eexe.txt", `rm -rf \u{202E}exe.txt`},
		{"zero\u200Bwidth", `zero\u{200B}width`},
		{"bom\uFEFF", `bom\u{FEFF}`},
		{"line\nbreak", `line\x0abreak`},
		{"bad \xff byte", `bad \xff byte`},
		{"c1 \u0085 next", `c1 \x85 next`},
		{"ok é ü 日本", "ok é ü 日本"},
		{"sep\u2028x", `sep\u{2028}x`},
	}
	for _, c := range cases {
		if got := Escape(c.in, false); got != c.want {
			t.Errorf("Escape(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	if got := Escape("a\nb\tc\x00", true); got != "a\nb\tc\\x00" {
		t.Errorf("keepLines: %q", got)
	}
}

func TestTruncate(t *testing.T) {
	if got := Truncate("héllo", 2); !strings.HasPrefix(got, "h…") {
		t.Errorf("%q", got)
	}
	if got := Truncate("abc", 5); got != "abc" {
		t.Errorf("%q", got)
	}
}

func FuzzEscape(f *testing.F) {
	f.Add("a\x1b[2J\u202E\xff")
	f.Fuzz(func(t *testing.T, s string) {
		out := Escape(s, false)
		for _, r := range out {
			if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == 0x202E || r == 0x200B || r == 0xFEFF {
				t.Fatalf("Escape(%q) kept %U", s, r)
			}
		}
	})
}
