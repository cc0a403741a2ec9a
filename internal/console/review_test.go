package console

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const reviewBase = `version = 1
trusted = ["github.com"]

[[rule]]
name = "gh-push"
hosts = ["github.com"]
methods = ["POST"]
verdict = "ask"

[sources]
local = ["127.0.0.1"]
`

type reviewEnv struct {
	dir, policy, state string
	audit              *memAudit
}

func newReviewEnv(t *testing.T) *reviewEnv {
	dir := t.TempDir()
	e := &reviewEnv{dir: dir, policy: filepath.Join(dir, "policy.toml"), state: filepath.Join(dir, "state.json"), audit: &memAudit{}}
	os.WriteFile(e.policy, []byte(reviewBase), 0o600)
	return e
}

func (e *reviewEnv) start(t *testing.T) *Console {
	t.Helper()
	c, err := New(Config{PolicyPath: e.policy, StatePath: e.state, Audit: e.audit})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (e *reviewEnv) write(t *testing.T, text string) {
	t.Helper()
	os.WriteFile(e.policy, []byte(text), 0o600)
}

func TestFirstStartApprovesTheFile(t *testing.T) {
	e := newReviewEnv(t)
	c := e.start(t)
	if c.Current() == nil || c.Current().TOML != reviewBase || c.Pending() != nil {
		t.Fatal("the file was not approved on the first start")
	}
	if !strings.Contains(strings.Join(c.StatusLines(), "\n"), "first start") {
		t.Errorf("status: %v", c.StatusLines())
	}
}

func TestTighteningAppliesAtOnce(t *testing.T) {
	e := newReviewEnv(t)
	c := e.start(t)
	e.write(t, strings.Replace(reviewBase, `verdict = "ask"`, `verdict = "deny"`, 1))
	if changed, _ := c.reload(); !changed || c.Pending() != nil || !strings.Contains(c.Current().TOML, `"deny"`) {
		t.Fatal("a tightening did not apply at once")
	}
}

func TestLooseningWaitsForReview(t *testing.T) {
	e := newReviewEnv(t)
	c := e.start(t)
	before := c.Current().Version
	loose := strings.Replace(reviewBase, `verdict = "ask"`, `verdict = "free"`, 1) + "deny = [\"pastebin.com\"]\n"
	loose = strings.Replace(loose, "deny = [\"pastebin.com\"]\n", "", 1)
	loose = strings.Replace(loose, `trusted = ["github.com"]`, "trusted = [\"github.com\"]\ndeny = [\"pastebin.com\"]", 1)
	e.write(t, loose)
	c.reload()
	r := c.Pending()
	if r == nil || c.Current().Version != before {
		t.Fatal("a loosening was served without review")
	}
	text := r.Text()
	for _, want := range []string{`rule "gh-push": verdict ask → free`, `deny: + "pastebin.com"`, `- verdict = "ask"`, `+ verdict = "free"`, ":review approve " + r.ShortVersion()} {
		if !strings.Contains(text, want) {
			t.Errorf("the review does not show %q:\n%s", want, text)
		}
	}
	if !strings.Contains(strings.Join(c.StatusLines(), "\n"), "WAIT FOR REVIEW") {
		t.Errorf("status: %v", c.StatusLines())
	}
	// The version shown must be the one approved.
	if err := c.Approve("00000000", "terminal:alice"); !errors.Is(err, ErrStale) {
		t.Fatalf("approving another version: %v", err)
	}
	if err := c.Approve(r.ShortVersion(), "terminal:alice"); err != nil {
		t.Fatal(err)
	}
	if c.Current().Version != r.Version || c.Pending() != nil {
		t.Fatal("the approved loosening is not served")
	}
	found := false
	for _, rec := range e.audit.recs {
		found = found || (rec.Event == "policy-review" && rec.Rule == "approved" && rec.Approver == "terminal:alice")
	}
	if !found {
		t.Error("no audit record of the approval")
	}
}

func TestRejectedLooseningNeverApplies(t *testing.T) {
	e := newReviewEnv(t)
	c := e.start(t)
	before := c.Current().Version
	e.write(t, strings.Replace(reviewBase, `verdict = "ask"`, `verdict = "free"`, 1))
	c.reload()
	r := c.Pending()
	if err := c.Reject(r.ShortVersion(), "terminal:bob", ""); err == nil {
		t.Fatal("a rejection without a reason")
	}
	if err := c.Reject(r.ShortVersion(), "terminal:bob", "pushes need a human"); err != nil {
		t.Fatal(err)
	}
	c.reload()
	if c.Current().Version != before {
		t.Fatal("a rejected loosening applied")
	}
	if st := strings.Join(c.StatusLines(), "\n"); !strings.Contains(st, "DIFFERS") || !strings.Contains(st, "terminal:bob") {
		t.Errorf("status: %s", st)
	}
	// A restart keeps serving the approved policy and remembers the rejection.
	c2 := e.start(t)
	if c2.Current().Version != before || c2.Pending() == nil || c2.Pending().Rejected == nil {
		t.Fatal("after a restart: the loosening or the rejection was lost")
	}
}

func TestRestartWithAnUnapprovedLooseningServesTheApproved(t *testing.T) {
	e := newReviewEnv(t)
	c := e.start(t)
	approved := c.Current().Version
	e.write(t, strings.Replace(reviewBase, `verdict = "ask"`, `verdict = "free"`, 1))
	c2 := e.start(t)
	if c2.Current().Version != approved || c2.Pending() == nil {
		t.Fatal("a restart served the unapproved file")
	}
	// Even an invalid file at a restart keeps the approved policy.
	e.write(t, "version = 1\ntrusted = 3\n")
	c3 := e.start(t)
	if c3.Current().Version != approved {
		t.Fatal("an invalid file at a restart changed the policy")
	}
}

// TestConnectNarrowingWaitsForReview: methods = ["CONNECT"] added to a free whole-host rule reads
// as a narrowing, but the CONNECT decided at the domain then sees a rule naming CONNECT, and its
// free verdict beats the host's ask rule for pushes: a spliced or undecrypted tunnel that asked
// would open, carrying POSTs unseen. The edit waits for review, and the review shows the
// CONNECT that would open as the example.
func TestConnectNarrowingWaitsForReview(t *testing.T) {
	const base = `version = 1

[[rule]]
name = "gh"
hosts = ["github.com"]
verdict = "free"

[[rule]]
name = "gh-push"
hosts = ["github.com"]
methods = ["POST"]
paths = ["/**/git-receive-pack"]
verdict = "ask"

[sources]
local = ["127.0.0.1"]
`
	e := newReviewEnv(t)
	e.write(t, base)
	c := e.start(t)
	approved := c.Current().Version
	e.write(t, strings.Replace(base, "hosts = [\"github.com\"]\nverdict = \"free\"", "hosts = [\"github.com\"]\nmethods = [\"CONNECT\"]\nverdict = \"free\"", 1))
	if changed, _ := c.reload(); changed || c.Current().Version != approved {
		t.Fatal("the edit applied without review")
	}
	r := c.Pending()
	if r == nil {
		t.Fatal("nothing waits for review")
	}
	text := r.Text()
	for _, want := range []string{
		`+ rule "gh": methods: every method → CONNECT`,
		"For example, decided less restrictively than under the approved policy:",
		`! CONNECT github.com:443 decided at the domain (spliced, or no signer) would be FREE (rule "gh"), was ASK (rule "gh-push")`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the review does not show %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "Changes that tighten it") {
		t.Errorf("the change is shown as a tightening too:\n%s", text)
	}
}

// TestReviewShowsTheExample: a loosening the rule-by-rule comparison names still shows a request
// it decides less restrictively.
func TestReviewShowsTheExample(t *testing.T) {
	e := newReviewEnv(t)
	c := e.start(t)
	e.write(t, strings.Replace(reviewBase, `verdict = "ask"`, `verdict = "free"`, 1))
	c.reload()
	r := c.Pending()
	if r == nil {
		t.Fatal("nothing waits for review")
	}
	if want := `! POST https://github.com/ would be FREE (rule "gh-push"), was ASK (rule "gh-push")`; !strings.Contains(r.Text(), want) {
		t.Errorf("the review does not show %q:\n%s", want, r.Text())
	}
}
