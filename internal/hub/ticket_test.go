package hub

import (
	"strings"
	"testing"
)

func TestCleanName(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"plain", "alice", "alice"},
		{"empty", "", ""},
		{"padded", "  bob  ", "bob"},
		{"no colon", "eve:phone", "evephone"},
		{"controls and bidi dropped", "mallory\x1b[2J\u202e", "mallory[2J"},
		{"cut to 40 bytes on a character", strings.Repeat("é", 30), strings.Repeat("é", 20)},
		{"cut then trimmed", strings.Repeat("a", 39) + " b", strings.Repeat("a", 39)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := CleanName(tc.in); got != tc.want {
				t.Errorf("CleanName(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}
