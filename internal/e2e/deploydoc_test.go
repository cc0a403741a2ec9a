package e2e

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// docBlock is a command block of a document marked for the compose test:
//
//	<!-- test: NAME -->
//	```sh
//	commands
//	```
type docBlock struct {
	Name   string
	Script string
	Line   int // of the marker
}

// readDocBlocks reads the marked blocks of path, in order. A marker not followed by a sh block,
// or a name used twice, is an error: the test and the document would drift apart.
func readDocBlocks(path string) ([]docBlock, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []docBlock
	var cur *docBlock // the block after a marker
	open := false     // inside cur's fence
	indent := ""
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case cur != nil && !open && trimmed == "```sh":
			indent, open = line[:len(line)-len(strings.TrimLeft(line, " "))], true
		case open && trimmed == "```":
			if cur.Script == "" {
				return nil, fmt.Errorf("%s:%d: test block %q is empty", path, cur.Line, cur.Name)
			}
			out, cur, open = append(out, *cur), nil, false
		case open:
			cur.Script += strings.TrimPrefix(line, indent) + "\n"
		case cur != nil:
			return nil, fmt.Errorf("%s:%d: the test marker of line %d is not followed by a ```sh block", path, n, cur.Line)
		case strings.HasPrefix(trimmed, "<!-- test: "):
			name, _, _ := strings.Cut(strings.TrimSuffix(strings.TrimPrefix(trimmed, "<!-- test: "), "-->"), " ")
			for _, b := range out {
				if b.Name == name {
					return nil, fmt.Errorf("%s:%d: test block %q is named twice (line %d)", path, n, name, b.Line)
				}
			}
			cur = &docBlock{Name: name, Line: n}
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: test block %q is not closed", path, cur.Line, cur.Name)
	}
	return out, sc.Err()
}

// deploySteps are docs/deploy.md's test blocks in the order the compose test runs them: the
// order of the document.
var deploySteps = []string{"build", "first-start", "roots", "agent", "policy-edit", "secret", "terminal", "pair",
	"firewall", "verify-log", "restart", "upgrade"}

// commandLines are a script's commands without comments and blank lines.
func commandLines(script string) []string {
	var out []string
	for _, l := range strings.Split(script, "\n") {
		if i := strings.Index(l, " #"); i >= 0 {
			l = l[:i]
		}
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}

// TestDeployDocBlocks: docs/deploy.md has the test blocks the compose test runs, in its order,
// and the README's "Deploy it" runs nothing those blocks do not.
func TestDeployDocBlocks(t *testing.T) {
	root, _ := filepath.Abs("../..")
	blocks, err := readDocBlocks(filepath.Join(root, "docs", "deploy.md"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var all []string
	for _, b := range blocks {
		names = append(names, b.Name)
		all = append(all, commandLines(b.Script)...)
	}
	if !slices.Equal(names, deploySteps) {
		t.Fatalf("docs/deploy.md's test blocks are %q; the compose test runs %q", names, deploySteps)
	}
	readme, err := readDocBlocks(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(readme) != 1 || readme[0].Name != "readme" {
		t.Fatalf("README.md: want one test block, readme; have %+v", readme)
	}
	for _, l := range commandLines(readme[0].Script) {
		if !slices.Contains(all, l) {
			t.Errorf("README.md:%d: %q is in no test block of docs/deploy.md: the compose test does not run it", readme[0].Line, l)
		}
	}
}

func TestReadDocBlocks(t *testing.T) {
	for _, tc := range []struct{ name, doc, want string }{
		{"two blocks", "x\n<!-- test: a -->\n```sh\necho a # c\n```\n\n  <!-- test: b (why) -->\n  ```sh\n  echo b\n  ```\n", "a:echo a # c\n;b:echo b\n;"},
		{"marker without block", "<!-- test: a -->\ntext\n", "error"},
		{"unclosed", "<!-- test: a -->\n```sh\necho\n", "error"},
		{"twice", "<!-- test: a -->\n```sh\necho\n```\n<!-- test: a -->\n```sh\necho\n```\n", "error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "doc.md")
			os.WriteFile(p, []byte(tc.doc), 0o644)
			bs, err := readDocBlocks(p)
			got := ""
			for _, b := range bs {
				got += b.Name + ":" + b.Script + ";"
			}
			if err != nil {
				got = "error"
			}
			if got != tc.want {
				t.Errorf("got %q (%v), want %q", got, err, tc.want)
			}
		})
	}
}
