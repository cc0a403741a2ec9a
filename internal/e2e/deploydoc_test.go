package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
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
var deploySteps = []string{"build", "firewall", "first-start", "roots", "agent", "docker-run", "test-origin", "policy-edit",
	"secret", "secrets-file", "terminal", "lox", "pair", "prometheus", "verify-log", "restart", "upgrade", "backup", "restore", "replace-ca"}

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

// unmarkedBlocks are the lines of path's ```sh blocks that no test marker names: commands a
// reader would copy that no test runs.
func unmarkedBlocks(path string) ([]int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []int
	marked := false
	for n, l := range strings.Split(string(data), "\n") {
		switch t := strings.TrimSpace(l); {
		case strings.HasPrefix(t, "<!-- test: "):
			marked = true
		case t == "```sh":
			if !marked {
				out = append(out, n+1)
			}
			marked = false
		case t != "":
			marked = false
		}
	}
	return out, nil
}

// TestDeployDocBlocks: docs/deploy.md has the test blocks the compose test runs, in its order,
// every sh block of it is one, and the README's "Deploy it" runs nothing those blocks do not.
func TestDeployDocBlocks(t *testing.T) {
	root, _ := filepath.Abs("../..")
	blocks, err := readDocBlocks(filepath.Join(root, "docs", "deploy.md"))
	if err != nil {
		t.Fatal(err)
	}
	unmarked, err := unmarkedBlocks(filepath.Join(root, "docs", "deploy.md"))
	if err != nil || len(unmarked) > 0 {
		t.Errorf("docs/deploy.md: the sh blocks of lines %v are run by no test (mark each <!-- test: NAME --> and run it in TestComposeDeployment, or fence a synopsis as text) %v", unmarked, err)
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

// TestNewSite: compose/new-site.sh makes a deployment directory outside the checkout, and never
// overwrites one or makes one inside the checkout.
func TestNewSite(t *testing.T) {
	root, _ := filepath.Abs("../..")
	script := filepath.Join(root, "compose", "new-site.sh")
	run := func(dir string) (string, error) {
		out, err := exec.Command("sh", script, dir).CombinedOutput()
		return string(out), err
	}
	site := filepath.Join(t.TempDir(), "site")
	if out, err := run(site); err != nil {
		t.Fatalf("new-site.sh: %v\n%s", err, out)
	}
	env, _ := os.ReadFile(filepath.Join(site, ".env"))
	for _, want := range []string{"COMPOSE_PROJECT_NAME=lockhttp\n", "COMPOSE_FILE=" + filepath.Join(root, "compose", "compose.yaml") + ":" + filepath.Join(site, "services.yaml") + "\n",
		"LOCKHTTP_SITE=" + site + "\n", "LOCKHTTP_TAG=latest\n", "LOCKHTTP_HUB_BIND=127.0.0.1\n", "LOCKHTTP_HUB_PORT=3139\n", "LOCKHTTP_PHONE_URL=http://127.0.0.1:3139\n", "LOCKHTTP_AGENT_SUBNET=10.213.10.0/24\n", "LOCKHTTP_GATE_IP=10.213.10.254\n", "LOCKHTTP_ROOTS=\n"} {
		if !strings.Contains(string(env), want) {
			t.Errorf(".env lacks %q:\n%s", want, env)
		}
	}
	for _, d := range []string{"policy", "gate"} {
		if fi, err := os.Stat(filepath.Join(site, d)); err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("%s/: %v %v", d, fi, err)
		}
	}
	if out, err := run(site); err == nil || !strings.Contains(out, "is a deployment directory already") {
		t.Errorf("a second run: %v %s", err, out)
	}
	if out, err := run(filepath.Join(root, "compose", "site-in-the-checkout")); err == nil || !strings.Contains(out, "is inside the checkout") {
		t.Errorf("inside the checkout: %v %s", err, out)
	}
	if _, err := os.Stat(filepath.Join(root, "compose", "site-in-the-checkout")); err == nil {
		os.RemoveAll(filepath.Join(root, "compose", "site-in-the-checkout"))
		t.Error("the refused directory was made in the checkout")
	}
}

// TestComposeRefusesMissingSettings: without the deployment's settings, every docker-compose
// command refuses and names the setting and the fix (docker-compose config needs no daemon).
func TestComposeRefusesMissingSettings(t *testing.T) {
	dc, err := exec.LookPath("docker-compose")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("docker-compose is not installed; .ci/run must install it")
		}
		t.Skip("no docker-compose")
	}
	root, _ := filepath.Abs("../..")
	for _, tc := range []struct {
		name  string
		env   []string
		files []string
		want  string
	}{
		{"no LOCKHTTP_SITE", nil, []string{"compose.yaml"}, "LOCKHTTP_SITE is not set: run docker-compose in your deployment directory (compose/new-site.sh DIR makes one"},
		{"an agent without AGENT_BUILD", []string{"LOCKHTTP_SITE=" + t.TempDir()}, []string{"compose.yaml", "agent.example.yaml"}, "AGENT_BUILD is not set: in .env, name the directory of your agent's Dockerfile (the image is built here, never pulled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{}
			for _, f := range tc.files {
				args = append(args, "-f", filepath.Join(root, "compose", f))
			}
			cmd := exec.Command(dc, append(args, "config", "-q")...)
			cmd.Dir, cmd.Env = t.TempDir(), append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, tc.env...)
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), tc.want) {
				t.Errorf("docker-compose config: %v\n%s\nwant %q", err, out, tc.want)
			}
		})
	}
}
