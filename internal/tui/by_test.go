package tui

import "testing"

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
