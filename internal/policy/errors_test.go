package policy

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestLoadReportsEveryProblem holds that one load reports the problems of every kind a file has
// (a value of the wrong type, an unknown key, a value out of range), each at its line, rather
// than those of one kind and then, once they are fixed, the next.
func TestLoadReportsEveryProblem(t *testing.T) {
	type want struct {
		line int
		key  string
		msg  string // a part of the message
	}
	tests := []struct {
		name string
		text string
		want []want
	}{
		{
			name: "a wrong type, an unknown key and a bad value",
			text: `version = 1
trusted = ["docs.example.com"]
colour = "blue"

[settings]
hold = 5

[[rule]]
name = "no-put"
hosts = ["docs.example.com"]
methods = ["PUTT"]
verdict = "deny"
`,
			want: []want{
				{3, "colour", "unknown key; the keys of the top level are"},
				{6, "settings.hold", `"5" is not a duration`},
				{11, `rule "no-put"`, `unknown method "PUTT"`},
			},
		},
		{
			// The value that did not decode is left zero: what is missing under it is not a
			// problem of its own ("hosts is missing"), but the rule's other problems are.
			name: "nothing reported twice under a value of the wrong type",
			text: `version = 1

[[rule]]
name = "x"
hosts = "a.example.com"
verdict = "maybe"
`,
			want: []want{
				{5, "rule.hosts", "wrong type: the value is string; it must be an array of strings"},
				{6, `rule "x"`, `verdict "maybe" is unknown`},
			},
		},
		{
			name: "a missing version and the rest",
			text: `trusted = ["docs.example.com:443"]
[settings]
hold = "90m"
`,
			want: []want{
				{1, "version", "missing; start the file with version = 1"},
				{1, "trusted", "patterns name hosts without a port"},
				{3, "settings.hold", "1h30m0s is out of range"},
			},
		},
		{
			// Another version's keys may mean other things: only the version is reported.
			name: "an unsupported version stops the check",
			text: `version = 2
colour = "blue"
[settings]
hold = "90m"
`,
			want: []want{
				{1, "version", "2 is not supported"},
				{2, "colour", "unknown key"},
			},
		},
		{
			name: "a version of the wrong type is one problem",
			text: `version = "1"
[settings]
hold = "90m"
`,
			want: []want{
				{1, "version", "wrong type"},
				{3, "settings.hold", "out of range"},
			},
		},
		{
			// A table of names whose value is not a table is found by two checks, and
			// reported once.
			name: "sources not a table beside a wrong type",
			text: `version = 1
sources = "agent"
[settings]
hold = 5
`,
			want: []want{
				{2, "sources", "wrong type: the value is string; it must be a table of arrays of strings"},
				{4, "settings.hold", "is not a duration"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load("p.toml", []byte(tt.text))
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("Load: %v; want Errors", err)
			}
			if len(errs) != len(tt.want) {
				t.Fatalf("%d problems reported, want %d:\n%v", len(errs), len(tt.want), err)
			}
			for i, w := range tt.want {
				e := errs[i]
				if e.File != "p.toml" || e.Line != w.line || e.Key != w.key || !strings.Contains(e.Msg, w.msg) {
					t.Errorf("problem %d is %q; want p.toml:%d: %s: …%s…", i+1, e.Error(), w.line, w.key, w.msg)
				}
			}
		})
	}
}

// TestLoadSaysHowManyMore holds that past the problems one load shows, it says how many more
// there are.
func TestLoadSaysHowManyMore(t *testing.T) {
	var b strings.Builder
	b.WriteString("version = 1\n[floor.hosts]\n")
	for i := range maxErrors + 5 {
		fmt.Fprintf(&b, "\"h%02d.test\" = \"x\"\n", i)
	}
	_, err := Load("p.toml", []byte(b.String()))
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("Load: %v; want Errors", err)
	}
	if len(errs) != maxErrors+1 {
		t.Fatalf("%d lines reported, want %d:\n%v", len(errs), maxErrors+1, err)
	}
	if got, want := errs[maxErrors].Error(), "p.toml: and 5 more problems not shown; fix these and check again"; got != want {
		t.Errorf("last line %q, want %q", got, want)
	}
	if errs[maxErrors-1].Line != maxErrors+2 {
		t.Errorf("last problem shown at line %d, want %d (the first %d in file order)", errs[maxErrors-1].Line, maxErrors+2, maxErrors)
	}
}

// TestLoadReportsTheSameEveryTime holds that the problems found past the decoding are the same
// on every load when a key is written under two spellings in one table ("Verdict" and
// "verdict"): the TOML decoder fills the field from either, in the order of a map, so the field
// is left out of what is checked next, and only the spelling is reported there.
func TestLoadReportsTheSameEveryTime(t *testing.T) {
	text := []byte(`version = 1

[[rule]]
name = "gh-push"
hosts = ["github.com"]
Verdict = "free"
verdict = "maybe"
methods = ["PUTT"]
`)
	_, err := Load("p.toml", text)
	if err == nil {
		t.Fatal("loaded")
	}
	first := err.Error()
	for i := range 50 {
		if _, err := Load("p.toml", text); err.Error() != first {
			t.Fatalf("load %d:\n%v\nload 1:\n%s", i+2, err, first)
		}
	}
	want := `p.toml:6: rule.Verdict: unknown key; write "verdict" (keys are spelled as in docs/policy.md, in lower case)
p.toml:8: rule "gh-push": unknown method "PUTT"; use one of`
	if !strings.HasPrefix(first, want) || strings.Count(first, "\n") != 1 {
		t.Fatalf("got\n%s\nwant the spelling and the method, nothing of the verdict:\n%s", first, want)
	}
}
