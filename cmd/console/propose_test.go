package main

import (
	"context"
	"crypto/ed25519"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/console"
	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

const proposeTOML = `version = 1
[sources]
local = ["127.0.0.1"]
`

// newProposer is a console on a policy file (mode 0640) with its state, a hub that approved two
// tickets the gate's audit holds, and the :propose command on them.
func newProposer(t *testing.T) (*proposer, *console.Console, string) {
	t.Helper()
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.toml")
	os.WriteFile(pol, []byte(proposeTOML), 0o640)
	c, err := console.New(console.Config{PolicyPath: pol, StatePath: filepath.Join(dir, "console-state.json")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go c.Watch(ctx, 20*time.Millisecond)
	_, key, _ := ed25519.GenerateKey(nil)
	h, err := hub.New(hub.Config{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	gateAudit := filepath.Join(dir, "audit")
	w, err := audit.Open(audit.Options{Dir: gateAudit, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"https://api.example.com/v1/items/1", "https://api.example.com/v1/items/2", "https://other.example.com/a"} {
		ans, err := h.Ask(hub.AskRequest{Kind: hub.KindRequest, Container: "local", Method: "GET", URL: u, Fingerprint: "fp " + u})
		if err != nil {
			t.Fatal(err)
		}
		h.Decide(ans.Ticket.ID, ans.Ticket.Fingerprint, true, "cli:root", "")
		// The hold ended before the decision: the audit holds the E_PENDING, the hub the approval.
		w.Write(context.Background(), &audit.Record{Time: time.Now(), Event: "tunnel-request", Container: "local", Method: "GET", URL: u,
			Verdict: "ASK", Code: "E_PENDING", Rule: "default", Ticket: ans.Ticket.ID})
	}
	w.Close()
	return &proposer{c: c, hub: h, policyPath: pol, gateAudit: gateAudit, now: time.Now}, c, pol
}

var idRE = regexp.MustCompile(`(?m)^  ([0-9a-f]{8})  free GET api\.example\.com /v1/items/\* for local`)

func TestProposeTakesOneRuleForReview(t *testing.T) {
	p, c, pol := newProposer(t)
	list, err := p.command("terminal:alice", nil)
	if err != nil {
		t.Fatal(err)
	}
	m := idRE.FindStringSubmatch(list)
	if m == nil || strings.Contains(list, "other.example.com") {
		t.Fatalf(":propose (approved twice on api.example.com, once on other.example.com):\n%s", list)
	}
	id := m[1]
	show, err := p.command("terminal:alice", []string{"show", id})
	if err != nil || !strings.Contains(show, "would have freed 2 observed requests; also frees unbounded never observed") ||
		!strings.Contains(show, ":propose take "+id) {
		t.Fatalf(":propose show: %v\n%s", err, show)
	}
	if _, err := p.command("terminal:alice", []string{"take", "00000000"}); err == nil {
		t.Error("a proposal that does not exist was taken")
	}

	// An edit waiting for review: nothing is taken with it.
	edited := strings.Replace(proposeTOML, "version = 1\n", "version = 1\ntrusted = [\"x.example.com\"]\n", 1)
	os.WriteFile(pol, []byte(edited), 0o640)
	if _, err := p.command("terminal:alice", []string{"take", id}); err == nil || !strings.Contains(err.Error(), "differs from the approved policy") {
		t.Fatalf("take over an edit: %v", err)
	}
	os.WriteFile(pol, []byte(proposeTOML), 0o640)
	testkit.WaitFor(t, 5*time.Second, "the console to read the file back", func() bool { return c.Pending() == nil })

	out, err := p.command("terminal:alice", []string{"take", id})
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(pol)
	rest, ok := strings.CutPrefix(string(data), proposeTOML)
	if !ok || strings.Count(rest, "[[rule]]") != 1 || !strings.Contains(rest, "# Learned: proposal "+id+", taken with :propose at the console's terminal by terminal:alice on ") {
		t.Fatalf("the file after take:\n%s", data)
	}
	if fi, _ := os.Stat(pol); fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v", fi.Mode().Perm())
	}
	version := strings.TrimPrefix(policy.Hash(data), "sha256:")[:12]
	if !strings.Contains(out, ":review approve "+version) {
		t.Errorf("take does not name the version to approve:\n%s", out)
	}
	// The console finds a loosening: the gate keeps the approved policy until :review.
	testkit.WaitFor(t, 5*time.Second, "the review", func() bool { return c.Pending() != nil })
	if r := c.Pending(); len(r.Changes.Loosenings) != 1 || !strings.Contains(r.Changes.Loosenings[0], "+ free GET on api.example.com at /v1/items/* for container local") {
		t.Errorf("the review: %+v", r.Changes)
	}
	if c.Current().Version == policy.Hash(data) {
		t.Fatal("applied without review")
	}
	// Taken back with drop, the file is the approved policy again.
	if _, err := p.command("terminal:alice", []string{"drop"}); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(pol); string(data) != proposeTOML {
		t.Fatalf("after drop:\n%s", data)
	}
	testkit.WaitFor(t, 5*time.Second, "the review to go", func() bool { return c.Pending() == nil })
	if _, err := p.command("terminal:alice", []string{"drop"}); err == nil {
		t.Error("drop with nothing taken")
	}
	// Taken again and approved: it is free now, and no longer proposed.
	if _, err := p.command("terminal:alice", []string{"take", id, "exact"}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "the review", func() bool { return c.Pending() != nil })
	if err := c.Approve(c.Pending().ShortVersion(), "terminal:alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.command("terminal:alice", []string{"show", id}); err == nil || !strings.Contains(err.Error(), "no longer proposed") {
		t.Errorf("an approved proposal: %v", err)
	}
}

// TestProposeFindsTheGateAudit: without -gate-audit, the audit directory lox run's up.json
// beside the console's state names.
func TestProposeFindsTheGateAudit(t *testing.T) {
	dir := t.TempDir()
	p := &proposer{statePath: filepath.Join(dir, "console-state.json")}
	if got := p.auditDir(); got != "" {
		t.Errorf("no up.json: %q", got)
	}
	os.WriteFile(filepath.Join(dir, "up.json"), []byte(`{"audit_dir":"/state/audit"}`), 0o600)
	if got := p.auditDir(); got != "/state/audit" {
		t.Errorf("up.json: %q", got)
	}
	p.gateAudit = "/vol/audit"
	if got := p.auditDir(); got != "/vol/audit" {
		t.Errorf("-gate-audit: %q", got)
	}
}
