package percent

import (
	"net/url"
	"testing"
)

func TestHex(t *testing.T) {
	for c := 0; c < 256; c++ {
		v, ok := Hex(byte(c))
		want, wantOK := byte(0), true
		switch {
		case '0' <= c && c <= '9':
			want = byte(c - '0')
		case 'a' <= c && c <= 'f':
			want = byte(c - 'a' + 10)
		case 'A' <= c && c <= 'F':
			want = byte(c - 'A' + 10)
		default:
			wantOK = false
		}
		if v != want || ok != wantOK {
			t.Errorf("Hex(%q) = %d, %v; want %d, %v", rune(c), v, ok, want, wantOK)
		}
	}
}

func TestDecode(t *testing.T) {
	tests := []struct {
		in   string
		plus bool
		want string
	}{
		{"", false, ""},
		{"plain", false, "plain"},
		{"a%2Fb%2fc", false, "a/b/c"},
		{"%41%4a%4A", false, "AJJ"},
		{"100%", false, "100%"},
		{"%4", false, "%4"},
		{"%zz%4g%%41", false, "%zz%4g%A"},
		{"a+b%2B", false, "a+b+"},
		{"a+b%2B", true, "a b+"},
		{"%00%ff", false, "\x00\xff"},
	}
	for _, tt := range tests {
		if got := Decode(tt.in, tt.plus); got != tt.want {
			t.Errorf("Decode(%q, %v) = %q, want %q", tt.in, tt.plus, got, tt.want)
		}
	}
}

// FuzzDecode: where net/url reads s without error, Decode reads it the same; Decode never fails.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{"a%2Fb", "%", "%4", "%zz", "a+b", "%41%42"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if want, err := url.QueryUnescape(s); err == nil {
			if got := Decode(s, true); got != want {
				t.Errorf("Decode(%q, true) = %q; net/url reads %q", s, got, want)
			}
		}
		if want, err := url.PathUnescape(s); err == nil {
			if got := Decode(s, false); got != want {
				t.Errorf("Decode(%q, false) = %q; net/url reads %q", s, got, want)
			}
		}
	})
}
