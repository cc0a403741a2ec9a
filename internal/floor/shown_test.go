package floor

import (
	"strings"
	"testing"
)

// TestShown: what a reason repeats of agent input, hidden before it is cut, cut on a rune
// boundary, quoted in printable ASCII.
func TestShown(t *testing.T) {
	token := "ghp_" + strings.Repeat("a1B2", 9) // 40 token characters with digits
	tests := []struct {
		name string
		in   string
		n    int
		want string
	}{
		{"short", "PATCH", 16, `"PATCH"`},
		// Cut first, the token would show its first 16 characters: it is hidden whole.
		{"token cut short", token, 16, `"[40 characters]"`},
		{"token after text", "h2c-" + token, 40, `"h2c-[40 characters]"`},
		{"token past the cut", strings.Repeat("x", 30) + " " + token, 16, `"xxxxxxxxxxxxxxxx..."`},
		{"cut", strings.Repeat("ab ", 40), 10, `"ab ab ab a..."`},
		{"no digit, not hidden", strings.Repeat("abcd", 10), 80, `"` + strings.Repeat("abcd", 10) + `"`},
		{"19 characters stay", "abcdefghij123456789", 80, `"abcdefghij123456789"`},
		{"control", "a\r\nb", 80, `"a\r\nb"`},
		{"non-ASCII", "bücher", 80, `"b\u00fccher"`},
		{"rune not cut in two", "aaaaü", 5, `"aaaa..."`},
		{"invalid UTF-8", "a\xffb", 80, `"a\xffb"`},
		{"default bound", strings.Repeat("a", 100), 0, `"` + strings.Repeat("a", MaxShown) + `..."`},
		{"empty", "", 16, `""`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Shown(tt.in, tt.n); got != tt.want {
				t.Errorf("Shown(%q, %d) = %s, want %s", tt.in, tt.n, got, tt.want)
			}
		})
	}
}

// TestShownLongInput: a long input is shown as its start, hidden as the whole would be, and the
// hiding stops at the cut.
func TestShownLongInput(t *testing.T) {
	long := strings.Repeat("x ", 1<<20)
	if got := Shown(long, 8); got != `"x x x x ..."` {
		t.Errorf("Shown(1 MiB, 8) = %s", got)
	}
	hidden := strings.Repeat("a1", 1<<19) // one run of 1 MiB
	if got := Shown(hidden, 8); got != `"[1048576..."` {
		t.Errorf("Shown(a 1 MiB token, 8) = %s", got)
	}
	if n := testing.AllocsPerRun(10, func() { Shown(long, 8) }); n > 4 {
		t.Errorf("Shown of 2 MiB cut at 8 allocates %v times", n)
	}
}

// TestHideTokens: every credential shape the decide corpus builds is hidden where it forms a run
// of 20 or more; a run of words (a path, a versioned name) is not a credential and stays.
func TestHideTokens(t *testing.T) {
	hidden := map[string]string{
		"github":      "ghp_" + strings.Repeat("a1B2", 9),
		"anthropic":   "sk-ant-api03-" + strings.Repeat("Xy7_", 20) + "AA",
		"openai":      "sk-proj-" + strings.Repeat("Pq4R", 12),
		"aws":         "AKIA" + strings.Repeat("Q7W2", 4),
		"slack":       "xoxb-" + strings.Repeat("1234", 3) + "-" + strings.Repeat("Ab9c", 6),
		"stripe":      "sk_" + "live_" + strings.Repeat("R4nd", 7),
		"google":      "AIza" + strings.Repeat("Sy3_", 8) + "k9-",
		"jwt":         "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhZ2VudCJ9." + strings.Repeat("s1G_", 11),
		"npm":         "npm_secret_value_" + "0123456789",
		"hex":         "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b",
		"base64":      "dGhpcyBpcyBhIHNlY3JldCB2YWx1ZQ+/Zm9vYmFy==",
		"long number": "1234567890123456789012",
		// base64 whose pieces happen to hold letters alone or a short number: its mixed case gives it away
		"base64 words": "AbCdEfGhIjKlMnOp/QrStUvWxYz+12345678==",
	}
	for name, v := range hidden {
		if got := HideTokens(v); !strings.Contains(got, " characters]") || strings.Contains(got, v[len(v)-8:]) {
			t.Errorf("%s: HideTokens(%q) = %q: the credential stands", name, v, got)
		}
	}
	for _, v := range []string{
		"/v1/messages/count_tokens",
		"/v1/messages/batches",
		"code_execution_20250825",
		"tool_search_tool_regex_20251119",
		"web_fetch_20250910",
		"my_service_2024_east_1",
		"abcdefghijklmnopqrstuvwxyz", // no digit
		"short_1",
	} {
		if got := HideTokens(v); got != v {
			t.Errorf("HideTokens(%q) = %q; a run of words stays", v, got)
		}
	}
}
