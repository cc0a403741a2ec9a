package policy

import (
	"strings"
	"testing"
)

const notifyBase = `version = 1

[[notify]]
name = "ops"
url = "https://hooks.example.com/lockhttp"
kind = "webhook"
human = true

[[notify]]
name = "phone"
url = "https://ntfy.example.com/lockhttp-topic"
kind = "ntfy"
`

// TestNotifyCompiled: the channels as written; loopback http:// passes for tests.
func TestNotifyCompiled(t *testing.T) {
	p := load(t, notifyBase+"\n[[notify]]\nname = \"test\"\nurl = \"http://127.0.0.1:9/hook\"\nkind = \"webhook\"\n")
	got := p.Notify()
	if len(got) != 3 || got[0] != (Notify{Name: "ops", URL: "https://hooks.example.com/lockhttp", Kind: "webhook", Human: true}) ||
		got[1].Human || got[1].Kind != "ntfy" || got[2].URL != "http://127.0.0.1:9/hook" {
		t.Fatalf("channels %+v", got)
	}
}

// TestCompareNotify: a channel whose replies decide tickets, added or made so or sent
// elsewhere, waits for review; a channel that only notifies applies at once.
func TestCompareNotify(t *testing.T) {
	base := load(t, notifyBase)
	cases := []struct {
		name  string
		edit  func(string) string
		loose string // a loosening that must be listed ("" for a pure tightening)
		tight string
	}{
		{"no change", func(s string) string { return s + "# a comment\n" }, "", ""},
		{"a human channel added", func(s string) string {
			return s + "\n[[notify]]\nname = \"chat\"\nurl = \"https://chat.example.com/h\"\nkind = \"webhook\"\nhuman = true\n"
		}, `notify "chat": + a human channel`, ""},
		{"a notifying channel added", func(s string) string {
			return s + "\n[[notify]]\nname = \"chat\"\nurl = \"https://chat.example.com/h\"\nkind = \"webhook\"\n"
		}, "", `notify "chat": + a channel that only notifies`},
		{"a channel made human", func(s string) string { return s + "human = true\n" },
			`notify "phone": human: false → true`, ""},
		{"a human channel sent elsewhere", func(s string) string {
			return strings.Replace(s, "hooks.example.com", "other.example.com", 1)
		}, `notify "ops": url changed`, ""},
		{"a human channel made notify-only", func(s string) string { return strings.Replace(s, "human = true\n", "", 1) },
			"", `notify "ops": human: true → false`},
		{"a channel removed", func(s string) string { return strings.Replace(s, "name = \"phone\"", "name = \"phone2\"", 1) },
			"", `notify "phone": - (removed)`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cmp := Compare(base, load(t, c.edit(notifyBase)))
			loose, tight := strings.Join(cmp.Loosenings, "\n"), strings.Join(cmp.Tightenings, "\n")
			if c.loose == "" && !cmp.Tightening() {
				t.Fatalf("counted as a loosening:\n%s", loose)
			}
			if c.loose != "" && !strings.Contains(loose, c.loose) {
				t.Fatalf("loosenings do not list %q:\n%s", c.loose, loose)
			}
			if c.tight != "" && !strings.Contains(tight, c.tight) {
				t.Fatalf("tightenings do not list %q:\n%s", c.tight, tight)
			}
		})
	}
}
