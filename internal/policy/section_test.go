package policy

import (
	"fmt"
	"strings"
	"testing"
)

// TestSectionLimits: past the most sections of a kind allowed, the first one too many is
// refused at its line with the fix, and the ones before it load.
func TestSectionLimits(t *testing.T) {
	tests := []struct {
		name    string
		head    string
		section func(i int) string
		max     int
		want    string
	}{
		{"budget", "[sources]\na = [\"10.0.0.1\"]\n", func(i int) string {
			return fmt.Sprintf("[[budget]]\nname = \"b%d\"\nrequests_per_minute = 60\n", i)
		}, maxBudgets, "more than 64 budgets; merge some"},
		{"notify", "", func(i int) string {
			return fmt.Sprintf("[[notify]]\nname = \"n%d\"\nurl = \"https://hooks.example.com/%d\"\nkind = \"webhook\"\n", i, i)
		}, maxNotify, "more than 16 channels; one webhook can fan out to more receivers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			text := func(n int) string {
				var b strings.Builder
				b.WriteString("version = 1\n" + tt.head)
				for i := 0; i < n; i++ {
					b.WriteString("\n" + tt.section(i))
				}
				return b.String()
			}
			if _, err := Load("policy.toml", []byte(text(tt.max))); err != nil {
				t.Fatalf("%d sections: %v", tt.max, err)
			}
			src := text(tt.max + 1)
			_, err := Load("policy.toml", []byte(src))
			line := strings.Count(src[:strings.LastIndex(src, "[["+tt.name+"]]")], "\n") + 1
			want := fmt.Sprintf("policy.toml:%d: %s %q: %s", line, tt.name, fmt.Sprintf("%s%d", tt.name[:1], tt.max), tt.want)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("error %v; want %q", err, want)
			}
		})
	}
}
