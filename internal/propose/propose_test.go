package propose

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/policy"
)

const testPolicy = `version = 1
trusted = ["docs.example.com"]
deny = ["paste.example.com"]
splice = ["pinned.example.com"]

[[rule]]
name = "ask-admin"
hosts = ["api.example.com"]
paths = ["/v1/items/admin"]
verdict = "ask"

[sources]
agent = ["10.0.0.0/24"]
other = ["10.0.1.0/24"]

[settings]
hold = "30s"
`

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// session builds observations: each call is one ask, its ticket decided as outcome says
// ("approve", "deny", "" for none) in the record a retry leaves.
type session struct {
	obs []Observation
	n   int
}

func (s *session) ask(container, method, url, outcome string) string {
	s.n++
	ticket := fmt.Sprintf("t%04d", s.n)
	o := Observation{Time: t0.Add(time.Duration(s.n) * time.Minute), Event: "tunnel-request", ID: fmt.Sprintf("r%d", s.n),
		Container: container, Method: method, URL: url, Verdict: "ASK", Ticket: ticket, Code: "E_PENDING"}
	s.obs = append(s.obs, o)
	switch outcome {
	case "approve":
		o.Code, o.Approver, o.Time = "", "cli:root", o.Time.Add(time.Second)
		s.obs = append(s.obs, o)
	case "deny":
		o.Code, o.Approver, o.Time = "E_DENIED", "terminal:alice", o.Time.Add(time.Second)
		s.obs = append(s.obs, o)
	}
	return ticket
}

func learn(t *testing.T, cfg Config, obs []Observation, ds []Decision) Result {
	t.Helper()
	if cfg.Text == nil {
		cfg.Text = []byte(testPolicy)
	}
	cfg.Name = "policy.toml"
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range obs {
		l.Observe(o)
	}
	for _, d := range ds {
		l.Decided(d)
	}
	return l.Result()
}

func TestProposals(t *testing.T) {
	s := &session{}
	// Three ids asked and approved: one proposal, /v1/items/*, which the ask rule on
	// /v1/items/admin still holds back.
	for _, id := range []string{"1", "2", "3"} {
		s.ask("agent", "GET", "https://api.example.com/v1/items/"+id+"?page=1", "approve")
	}
	s.ask("agent", "GET", "https://api.example.com/v1/items/admin", "approve")
	// Approved once: nothing.
	s.ask("agent", "POST", "https://api.example.com/v1/upload", "approve")
	// /search/a approved twice, /search/b denied: "a" is no id, so /search/a alone is proposed.
	s.ask("agent", "GET", "https://api.example.com/search/a", "approve")
	s.ask("agent", "GET", "https://api.example.com/search/a", "approve")
	s.ask("agent", "GET", "https://api.example.com/search/b", "deny")
	// /v2/x/10 and /v2/x/11 approved, /v2/x/12 denied: the pattern is denied, each path once.
	s.ask("agent", "GET", "https://api.example.com/v2/x/10", "approve")
	s.ask("agent", "GET", "https://api.example.com/v2/x/11", "approve")
	s.ask("agent", "GET", "https://api.example.com/v2/x/12", "deny")
	// /v3/y/{20,21} approved, /v3/y/secret denied: the pattern would free the denial, so each path
	// alone; /v3/y/20 was approved twice.
	s.ask("agent", "GET", "https://api.example.com/v3/y/20", "approve")
	s.ask("agent", "GET", "https://api.example.com/v3/y/20", "approve")
	s.ask("agent", "GET", "https://api.example.com/v3/y/21", "approve")
	s.ask("agent", "GET", "https://api.example.com/v3/y/secret", "deny")
	// The other container's approvals make a rule of its own.
	s.ask("other", "PUT", "https://store.example.com/objects/4b0a97a", "approve")
	s.ask("other", "PUT", "https://store.example.com/objects/5989811", "approve")
	// Never proposed: a CONNECT, a floor-refused host, a deny-listed one, a masked path.
	s.obs = append(s.obs,
		Observation{Time: t0, Event: "connect", Container: "agent", Method: "CONNECT", URL: "pinned.example.com:443", Verdict: "ASK", Ticket: "tc1", Approver: "cli:root"},
		Observation{Time: t0, Event: "connect", Container: "agent", Method: "CONNECT", URL: "pinned.example.com:443", Verdict: "ASK", Ticket: "tc2", Approver: "cli:root"})
	for i := 0; i < 2; i++ {
		s.ask("agent", "GET", "http://10.0.0.1/x", "approve")
		s.ask("agent", "GET", "http://metadata.google.internal/x", "approve")
		s.ask("agent", "GET", "https://paste.example.com/new", "approve")
		s.ask("agent", "GET", "https://api.example.com/hooks/%5Btoken:3f2a9c1b%5D", "approve")
		s.ask("agent", "GET", "https://api.example.com/star/*", "approve")
	}
	// FREE and DENY records teach nothing, however many.
	for i := 0; i < 5; i++ {
		s.obs = append(s.obs, Observation{Time: t0, Event: "request", Container: "agent", Method: "GET", URL: "https://free.example.com/x", Verdict: "FREE"})
	}
	// A ticket the hub knows and the audit does not (the hold ended, the agent never retried):
	// approved by the hub, it counts as a second approval of /v4/z/*.
	s.ask("agent", "DELETE", "https://api.example.com/v4/z/7", "approve")
	hub := []Decision{{Ticket: "hub1", Approved: true, By: "phone:pixel", At: t0.Add(time.Hour), Container: "agent",
		Method: "DELETE", URL: "https://api.example.com/v4/z/8", Created: t0.Add(50 * time.Minute)}}

	res := learn(t, Config{}, s.obs, hub)
	got := map[string]*Proposal{}
	for i := range res.Proposals {
		p := &res.Proposals[i]
		got[p.Method+" "+p.Host+" "+strings.Join(p.Form(false).Rule.Paths, ",")+" "+p.Container] = p
	}
	want := []string{
		"GET api.example.com /v1/items/* agent",
		"GET api.example.com /search/a agent",
		"GET api.example.com /v3/y/20 agent",
		"PUT store.example.com /objects/* other",
		"DELETE api.example.com /v4/z/* agent",
	}
	for _, w := range want {
		if got[w] == nil {
			t.Errorf("no proposal %q", w)
		}
	}
	if len(got) != len(want) {
		for k := range got {
			t.Logf("proposed: %s", k)
		}
		t.Errorf("%d proposals, want %d", len(got), len(want))
	}
	items := got["GET api.example.com /v1/items/* agent"]
	if items == nil {
		t.FailNow()
	}
	if items.Approvals != 3 || items.Asked != 6 || items.General.Freed != 6 || items.General.Saved != 3 || items.General.Other != 0 ||
		!items.General.Unbounded || items.General.Segment != 3 || items.General.Class != Number || items.General.Values != 3 {
		t.Errorf("items: %+v\ngeneral %+v", items, items.General)
	}
	if !strings.Contains(items.General.Frees(), "would have freed 6 observed requests; also frees unbounded never observed (segment 3 takes any value)") {
		t.Errorf("frees: %s", items.General.Frees())
	}
	if r := items.General.Rule; r.Verdict != "free" || len(r.Containers) != 1 || r.Containers[0] != "agent" || r.Methods[0] != "GET" || r.Hosts[0] != "api.example.com" {
		t.Errorf("rule %+v", r)
	}
	if ex := items.Exact.Rule.Paths; strings.Join(ex, ",") != "/v1/items/1,/v1/items/2,/v1/items/3" {
		t.Errorf("exact form %v", ex)
	}
	if len(items.Examples) != 3 || !strings.HasPrefix(items.Examples[0].Outcome, "approved by cli:root") {
		t.Errorf("examples %+v", items.Examples)
	}
	if z := got["DELETE api.example.com /v4/z/* agent"]; z != nil && (z.Approvals != 2 || !strings.Contains(strings.Join(z.Approvers, ","), "phone:pixel")) {
		t.Errorf("the hub's decision: %+v", z)
	}
	declined := map[string]string{}
	for _, d := range res.Declined {
		declined[d.Host+d.Pattern] = d.Why
	}
	if !strings.Contains(declined["api.example.com/v2/x/*"], "denied") || !strings.Contains(declined["api.example.com/v3/y/*"], "would free a request a human denied") {
		t.Errorf("declined: %v", declined)
	}
	skipped := map[string]int{}
	for _, c := range res.Skipped {
		skipped[c.Why] = c.Count
	}
	if skipped[skipConnect] != 2 || skipped[skipFloor] != 8 || skipped[skipNow] != 4 || skipped[skipMasked] != 4 || skipped[skipGlob] != 4 {
		t.Errorf("skipped: %v", res.Skipped)
	}
	// The period and the container select.
	res = learn(t, Config{Container: "other"}, s.obs, hub)
	if len(res.Proposals) != 1 || res.Proposals[0].Container != "other" {
		t.Errorf("--container other: %+v", res.Proposals)
	}
	res = learn(t, Config{Since: t0.Add(30 * time.Minute)}, s.obs, hub)
	for _, p := range res.Proposals {
		if p.Host == "api.example.com" && p.Method == "GET" {
			t.Errorf("a group asked before the period proposed: %+v", p)
		}
	}
}

// TestDeniedOutsideThePeriod: a denial is never freed, whenever it was.
func TestDeniedOutsideThePeriod(t *testing.T) {
	s := &session{}
	s.ask("agent", "GET", "https://api.example.com/v5/k/9", "deny")
	s.ask("agent", "GET", "https://api.example.com/v5/k/1", "approve")
	s.ask("agent", "GET", "https://api.example.com/v5/k/2", "approve")
	res := learn(t, Config{Since: t0.Add(90 * time.Second)}, s.obs, nil)
	if len(res.Proposals) != 0 {
		t.Fatalf("a pattern that frees a denial before the period: %+v", res.Proposals)
	}
}

// TestSummarisedDenial: denials past the audit's rate are one summary, with the first one's URL:
// that request is denied, and a pattern that frees it is not proposed.
func TestSummarisedDenial(t *testing.T) {
	s := &session{}
	s.ask("agent", "GET", "https://api.example.com/v8/s/1", "approve")
	s.ask("agent", "GET", "https://api.example.com/v8/s/2", "approve")
	if res := learn(t, Config{}, s.obs, nil); len(res.Proposals) != 1 {
		t.Fatalf("without the summary: %+v", res.Proposals)
	}
	s.obs = append(s.obs, Observation{Time: t0, Event: "summary", Container: "agent", Method: "GET", URL: "https://api.example.com/v8/s/3",
		Verdict: "ASK", Code: "E_DENIED", Rule: "default"})
	if res := learn(t, Config{}, s.obs, nil); len(res.Proposals) != 0 {
		t.Fatalf("a pattern freeing a summarised denial: %+v", res.Proposals)
	}
}

func TestDecisionOverridesRecords(t *testing.T) {
	s := &session{}
	a := s.ask("agent", "GET", "https://api.example.com/v6/q/1", "")
	b := s.ask("agent", "GET", "https://api.example.com/v6/q/2", "")
	res := learn(t, Config{}, s.obs, []Decision{{Ticket: a, Approved: true, By: "cli:root"}, {Ticket: b, Approved: true, By: "cli:root"}})
	if len(res.Proposals) != 1 || res.Proposals[0].Approvals != 2 {
		t.Fatalf("two tickets the hub approved: %+v", res.Proposals)
	}
	res = learn(t, Config{}, s.obs, []Decision{{Ticket: a, Approved: true, By: "cli:root"}, {Ticket: b, Approved: false, By: "cli:root"}})
	if len(res.Proposals) != 0 {
		t.Fatalf("one denied: %+v", res.Proposals)
	}
}

func TestBlockReadsBack(t *testing.T) {
	s := &session{}
	s.ask("agent", "POST", "https://api.example.com/v7/upload/3f2a9c1b-0d4e-4f5a-9b6c-7d8e9f0a1b2c", "approve")
	s.ask("agent", "POST", "https://api.example.com/v7/upload/6c8e1f0a-1d2e-4a5b-8c7d-0e9f8a7b6c5d", "approve")
	res := learn(t, Config{}, s.obs, nil)
	if len(res.Proposals) != 1 {
		t.Fatalf("%+v", res)
	}
	p := &res.Proposals[0]
	for _, exact := range []bool{false, true} {
		block, err := p.Block(p.Form(exact), Origin{Tool: ":propose at the console's terminal", By: "terminal:alice\n[[rule]]", At: t0})
		if err != nil {
			t.Fatal(err)
		}
		text := Apply([]byte(testPolicy), block)
		pol, err := policy.Load("policy.toml", text)
		if err != nil {
			t.Fatalf("%v\n%s", err, text)
		}
		if pol.RuleCount() != 2 {
			t.Errorf("a name with a newline wrote a rule of its own:\n%s", block)
		}
		d := pol.Evaluate(policy.Request{Host: "api.example.com", Method: "POST", Path: "/v7/upload/3f2a9c1b-0d4e-4f5a-9b6c-7d8e9f0a1b2c", Container: "agent"})
		if d.Verdict != policy.Free || d.Rule != p.Form(exact).Rule.Name {
			t.Errorf("exact=%v: %+v", exact, d)
		}
		for _, line := range strings.Split(block, "\n") {
			if line != "" && !strings.HasPrefix(line, "#") && !strings.HasPrefix(line, "[[rule]]") && !strings.Contains(line, " = ") {
				t.Errorf("line %q", line)
			}
		}
		if !strings.Contains(block, "proposal "+p.ID) || !strings.Contains(block, "2026-12-01") || !strings.Contains(block, "approved in 2 human") {
			t.Errorf("the comment does not say where the rule came from:\n%s", block)
		}
	}
	if p.General.Class != UUID {
		t.Errorf("class %q", p.General.Class)
	}
}

func TestClassify(t *testing.T) {
	for seg, want := range map[string]Class{
		"42": Number, "0": Number, "20261203": Number,
		"3f2a9c1b-0d4e-4f5a-9b6c-7d8e9f0a1b2c": UUID, "3F2A9C1B-0D4E-4F5A-9B6C-7D8E9F0A1B2C": UUID,
		"3F2a9c1b-0d4e-4f5a-9b6c-7d8e9f0a1b2c": Base64URL, // mixed case: no UUID, still an id
		"4b0a97a":                              Hex, "f80d8dd2a1": Hex, "DEADBEEF42": Hex,
		"deadbeef": "", "facade": "", "4b0A97a": "", "4b0a97": "",
		"Zk3pQ9vL2mX7tR4w": Base64URL, "Zk3p-Q9vL_2mX7tR": Base64URL, "Zk3pQ9vLabcdeX7tR4w": "",
		"getting-started-v2": "", "GettingStartedV2": "", "Zk3pQ9vL2mX7tR4": "",
		"v1": "", "items": "", "admin": "", "a.json": "", "42.json": "", "%34%32": "", "4;2": "",
		strings.Repeat("9", 65): "", "": "",
	} {
		if got := classify(seg); got != want {
			t.Errorf("classify(%q) = %q, want %q", seg, got, want)
		}
	}
	for path, want := range map[string]string{
		"/v1/items/42":              "/v1/items/*",
		"/repos/42/commits/4b0a97a": "/repos/42/commits/4b0a97a", // two ids: as written
		"/":                         "/",
		"/a/b":                      "/a/b",
		"/42":                       "/*",
	} {
		if got, _, _ := generalise(path); got != want {
			t.Errorf("generalise(%q) = %q, want %q", path, got, want)
		}
	}
}

// TestExamplesEscaped: an example is the agent's text; it is shown escaped, whatever the record
// holds.
func TestExamplesEscaped(t *testing.T) {
	s := &session{}
	s.ask("agent", "GET", "https://api.example.com/v9/e/1?q=\u202etxt.exe\u200b", "approve")
	s.ask("agent", "GET", "https://api.example.com/v9/e/2", "approve")
	res := learn(t, Config{}, s.obs, nil)
	if len(res.Proposals) != 1 {
		t.Fatalf("%+v", res)
	}
	text := res.Text("policy.toml", []byte(testPolicy))
	if strings.ContainsAny(text, "\u202e\u200b") || !strings.Contains(text, `q=\u{202E}txt.exe\u{200B}`) {
		t.Errorf("the example is not escaped:\n%s", text)
	}
}

// TestCheck: a rule from elsewhere is held to what a proposal may be.
func TestCheck(t *testing.T) {
	ok := policy.FileRule{Name: "r", Hosts: []string{"api.example.com"}, Methods: []string{"GET"}, Paths: []string{"/v1/*"}, Containers: []string{"agent"}, Verdict: "free"}
	if line, err := Check("policy.toml", []byte(testPolicy), ok); err != nil || !strings.HasPrefix(line, `rule "r": + free GET on api.example.com at /v1/*`) {
		t.Fatalf("%v %q", err, line)
	}
	for name, mut := range map[string]func(r *policy.FileRule){
		"a wildcard host":         func(r *policy.FileRule) { r.Hosts = []string{"*.example.com"} },
		"every host":              func(r *policy.FileRule) { r.Hosts = []string{"*"} },
		"two hosts":               func(r *policy.FileRule) { r.Hosts = []string{"api.example.com", "store.example.com"} },
		"an IP literal":           func(r *policy.FileRule) { r.Hosts = []string{"10.0.0.1"} },
		"a local name":            func(r *policy.FileRule) { r.Hosts = []string{"git.internal"} },
		"a host in another case":  func(r *policy.FileRule) { r.Hosts = []string{"API.example.com"} },
		"CONNECT":                 func(r *policy.FileRule) { r.Methods = []string{"CONNECT"}; r.Paths = nil },
		"every method":            func(r *policy.FileRule) { r.Methods = nil },
		"two stars":               func(r *policy.FileRule) { r.Paths = []string{"/*/*"} },
		"a globstar":              func(r *policy.FileRule) { r.Paths = []string{"/v1/**"} },
		"a star within a segment": func(r *policy.FileRule) { r.Paths = []string{"/v1/a*"} },
		"a DoH path":              func(r *policy.FileRule) { r.Paths = []string{"/dns-query"} },
		"every container":         func(r *policy.FileRule) { r.Containers = nil },
		"an unknown container":    func(r *policy.FileRule) { r.Containers = []string{"ghost"} },
		"an ask rule":             func(r *policy.FileRule) { r.Verdict = "ask" },
		"a name taken":            func(r *policy.FileRule) { r.Name = "ask-admin" },
		"a quote in the reason":   func(r *policy.FileRule) { r.Reason = "\"\n[[rule]]" },
	} {
		r := ok
		mut(&r)
		if _, err := Check("policy.toml", []byte(testPolicy), r); err == nil {
			t.Errorf("%s: held", name)
		}
	}
}
