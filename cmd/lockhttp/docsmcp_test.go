package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDocsMCPExplain runs the lockhttp explain command docs/mcp.md shows ("The decision"), with
// the policy it shows ("Endpoints and rules") in policy.toml, and holds what it prints to the
// text the page shows.
func TestDocsMCPExplain(t *testing.T) {
	doc, err := os.ReadFile("../../docs/mcp.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(doc), "## Endpoints and rules\n")
	_, pol, ok := strings.Cut(section, "```toml\n")
	pol, _, ok2 := strings.Cut(pol, "```\n")
	_, cmd, ok3 := strings.Cut(string(doc), "```\n$ lockhttp explain ")
	cmd, _, ok4 := strings.Cut(cmd, "```\n")
	if !ok || !ok2 || !ok3 || !ok4 {
		t.Fatal("docs/mcp.md shows no policy or no lockhttp explain command")
	}
	// The command runs to the first line that does not end with a backslash; what follows is
	// its output.
	var line strings.Builder
	rest := cmd
	for {
		l, r, _ := strings.Cut(rest, "\n")
		rest = r
		if c, more := strings.CutSuffix(l, `\`); more {
			line.WriteString(c)
			continue
		}
		line.WriteString(l)
		break
	}
	args := shellWords(t, line.String())
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "policy.toml"), []byte(pol), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	var stdout, stderr bytes.Buffer
	if code := run(append([]string{"explain"}, args...), strings.NewReader(""), &stdout, &stderr); code != 0 {
		t.Fatalf("lockhttp explain %q: exit %d\n%s", args, code, stderr.String())
	}
	if stdout.String() != rest {
		t.Errorf("lockhttp explain prints\n%s\nthe docs show\n%s", stdout.String(), rest)
	}
}

// shellWords splits a command line as a POSIX shell does for the words the docs write: spaces
// between words, '...' quoting.
func shellWords(t *testing.T, s string) []string {
	var words []string
	var w strings.Builder
	in, quoted := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quoted && c == '\'':
			quoted = false
		case quoted:
			w.WriteByte(c)
		case c == '\'':
			quoted, in = true, true
		case c == ' ' || c == '\t':
			if in {
				words = append(words, w.String())
				w.Reset()
				in = false
			}
		case c == '"' || c == '\\' || c == '$':
			t.Fatalf("the docs' command holds %q outside single quotes; this test reads single quotes only", c)
		default:
			w.WriteByte(c)
			in = true
		}
	}
	if quoted {
		t.Fatal("an unclosed quote in the docs' command")
	}
	if in {
		words = append(words, w.String())
	}
	return words
}
