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
token_file = "/etc/lockhttp/ntfy.token"
`

// TestNotifyCompiled: the channels as written; loopback http:// passes for tests.
func TestNotifyCompiled(t *testing.T) {
	p := load(t, notifyBase+"\n[[notify]]\nname = \"test\"\nurl = \"http://127.0.0.1:9/hook\"\nkind = \"webhook\"\n")
	got := p.Notify()
	if len(got) != 3 || got[0] != (Notify{Name: "ops", URL: "https://hooks.example.com/lockhttp", Kind: "webhook", Human: true}) ||
		got[1].Human || got[1].Kind != "ntfy" || got[1].TokenFile != "/etc/lockhttp/ntfy.token" || got[2].URL != "http://127.0.0.1:9/hook" {
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
		{"a human channel's kind changed", func(s string) string {
			return strings.Replace(s, "kind = \"webhook\"\nhuman = true", "kind = \"ntfy\"\nhuman = true\ntoken_file = \"/etc/lockhttp/ops.token\"", 1)
		}, `notify "ops": kind: webhook → ntfy`, ""},
		{"a human channel turned to a loopback test receiver", func(s string) string {
			return strings.Replace(s, "https://hooks.example.com/lockhttp\"", "http://127.0.0.1:9/hook\"\ninsecure_loopback = true", 1)
		}, `notify "ops": insecure_loopback: false → true`, ""},
		{"a notifying channel's kind changed", func(s string) string {
			return strings.Replace(s, "kind = \"ntfy\"", "kind = \"webhook\"", 1)
		}, "", `notify "phone": changed`},
		{"a channel removed", func(s string) string { return strings.Replace(s, "name = \"phone\"", "name = \"phone2\"", 1) },
			"", `notify "phone": - (removed)`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cmp := Compare(base, load(t, c.edit(notifyBase)))
			check(t, cmp, c.loose, c.tight)
		})
	}
	// The same with the ntfy channel human: what protects its topic may not go away unseen.
	humanBase := notifyBase + "human = true\n"
	hb := load(t, humanBase)
	for _, c := range []struct {
		name         string
		edit         func(string) string
		loose, tight string
	}{
		{"its token file taken away (a webhook now)", func(s string) string {
			return strings.Replace(s, "kind = \"ntfy\"\ntoken_file = \"/etc/lockhttp/ntfy.token\"\n", "kind = \"webhook\"\n", 1)
		}, `notify "phone": token_file removed`, ""},
		{"its token file swapped", func(s string) string { return strings.Replace(s, "/etc/lockhttp/ntfy.token", "/tmp/other.token", 1) },
			`notify "phone": token_file changed`, ""},
		{"its kind changed to webhook", func(s string) string { return strings.Replace(s, "kind = \"ntfy\"", "kind = \"webhook\"", 1) },
			`notify "phone": kind: ntfy → webhook`, ""},
		{"a token file added to the human webhook", func(s string) string {
			return strings.Replace(s, "kind = \"webhook\"\n", "kind = \"webhook\"\ntoken_file = \"/etc/lockhttp/ops.token\"\n", 1)
		}, "", `notify "ops": token_file added`},
	} {
		t.Run("human ntfy: "+c.name, func(t *testing.T) {
			check(t, Compare(hb, load(t, c.edit(humanBase))), c.loose, c.tight)
		})
	}
}

func check(t *testing.T, cmp Comparison, wantLoose, wantTight string) {
	t.Helper()
	loose, tight := strings.Join(cmp.Loosenings, "\n"), strings.Join(cmp.Tightenings, "\n")
	if wantLoose == "" && !cmp.Tightening() {
		t.Fatalf("counted as a loosening:\n%s", loose)
	}
	if wantLoose != "" && !strings.Contains(loose, wantLoose) {
		t.Fatalf("loosenings do not list %q:\n%s", wantLoose, loose)
	}
	if wantTight != "" && !strings.Contains(tight, wantTight) {
		t.Fatalf("tightenings do not list %q:\n%s", wantTight, tight)
	}
}

// TestRefusedWithAgent: a channel with insecure_loopback is what the console refuses while an
// agent runs as a uid of its own, at the line of the setting, with the fix; none: nil.
func TestRefusedWithAgent(t *testing.T) {
	if err := load(t, notifyBase).RefusedWithAgent(); err != nil {
		t.Fatalf("a policy without insecure_loopback: %v", err)
	}
	p := load(t, notifyBase+"\n[[notify]]\nname = \"test\"\nurl = \"http://127.0.0.1:9/hook\"\nkind = \"webhook\"\nhuman = true\ninsecure_loopback = true\n")
	err := p.RefusedWithAgent()
	if err == nil || !strings.Contains(err.Error(), `p.toml:20: notify "test": insecure_loopback = true: an agent runs on this machine`) ||
		!strings.Contains(err.Error(), "remove insecure_loopback") {
		t.Fatalf("RefusedWithAgent: %v", err)
	}
}
