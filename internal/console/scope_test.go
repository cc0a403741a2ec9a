package console

import (
	"os"
	"strings"
	"testing"
)

// scopeReviewBase frees pushes for the container coder alone and refuses gists to reviewer
// alone.
const scopeReviewBase = `version = 1

[[rule]]
name = "coder-push"
hosts = ["github.com"]
methods = ["POST"]
containers = ["coder"]
verdict = "free"

[[rule]]
name = "no-gists"
hosts = ["gist.github.com"]
containers = ["reviewer", "coder"]
verdict = "deny"

[sources]
coder = ["10.0.0.2"]
reviewer = ["10.0.0.3"]
`

// TestReviewShowsTheContainers: widening a free rule's containers and narrowing a deny rule's
// wait for review, and the review names the changes and a request of the container decided less
// restrictively; the reverse applies at once.
func TestReviewShowsTheContainers(t *testing.T) {
	e := newReviewEnv(t)
	os.WriteFile(e.policy, []byte(scopeReviewBase), 0o600)
	c := e.start(t)
	before := c.Current().Version
	loose := strings.Replace(scopeReviewBase, `containers = ["coder"]`, `containers = ["coder", "reviewer"]`, 1)
	loose = strings.Replace(loose, `containers = ["reviewer", "coder"]`, `containers = ["coder"]`, 1)
	e.write(t, loose)
	c.reload()
	r := c.Pending()
	if r == nil || c.Current().Version != before {
		t.Fatal("a loosening was served without review")
	}
	text := r.Text()
	for _, want := range []string{
		`+ rule "coder-push": containers: + reviewer`,
		`+ rule "no-gists": containers: - reviewer`,
		`! from container reviewer: GET https://gist.github.com/ would be ASK (rule "default"), was DENY (rule "no-gists")`,
		`+ containers = ["coder", "reviewer"]`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the review does not show %q:\n%s", want, text)
		}
	}
	// Narrowing the free rule's containers and widening the deny rule's to every container
	// tighten: applied at once.
	tight := strings.Replace(scopeReviewBase, `containers = ["reviewer", "coder"]`+"\n", "", 1)
	e.write(t, tight)
	if changed, _ := c.reload(); !changed || c.Pending() != nil || c.Current().TOML != tight {
		t.Fatalf("a tightening did not apply at once: pending %v", c.Pending() != nil)
	}
}
