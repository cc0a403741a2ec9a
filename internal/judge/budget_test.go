package judge

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/budget"
	"github.com/lockhttp/lockhttp/internal/exfil"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

const budgetPolicy = `version = 1
trusted = ["docs.example.com"]
deny = ["denied.example.com"]
splice = ["spliced.example.com"]

[[rule]]
name = "writes-ask"
hosts = ["docs.example.com"]
methods = ["POST"]
verdict = "ask"

[[rule]]
name = "tunnel"
hosts = ["spliced.example.com"]
methods = ["CONNECT"]
verdict = "free"

[sources]
agent = ["10.0.0.0/24"]
other = ["10.0.1.0/24"]

[[budget]]
name = "rpm"
containers = ["agent"]
requests_per_minute = 2

[[budget]]
name = "up"
hosts = ["upload.example.com"]
bytes_up_per_hour = "1KiB"
`

// countingMemory is the heuristics' memory, counting what it was shown.
type countingMemory struct{ n int }

func (m *countingMemory) Score(r *exfil.Request) exfil.Score { m.n++; return exfil.Score{} }

// TestDecideBudgets: step 9 counts what is about to go out or to ask, against the budgets of
// the container and the host; what an earlier step refuses is neither counted nor refused by a
// budget; what a budget refuses is not counted and does not reach the heuristics.
func TestDecideBudgets(t *testing.T) {
	p, err := policy.Load("b.toml", []byte(budgetPolicy))
	if err != nil {
		t.Fatal(err)
	}
	in, err := NewChecks(p, nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	clk := testkit.NewClock(time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC))
	counter := budget.New(budget.Config{Now: clk.Now})
	mem := &countingMemory{}
	env := &Env{Policy: p, Checks: in, Budgets: counter, Memory: mem, Decrypt: true}
	decide := func(container, method, url string, body string) Result {
		t.Helper()
		scheme, rest, _ := strings.Cut(url, "://")
		authority, path, _ := strings.Cut(rest, "/")
		r := &Request{Kind: Tunnel, Container: container, Source: netip.MustParseAddr("10.0.0.5"), Method: method,
			Scheme: scheme, Authority: authority, Path: "/" + path, Header: http.Header{}}
		if scheme == "connect" {
			r.Kind, r.Scheme, r.Path = Domain, "", ""
		}
		if body != "" {
			r.Body, r.BodySize = []byte(body), int64(len(body))
		}
		return Decide(env, r)
	}
	requests := func(container string) int64 {
		for _, u := range counter.Usage(p) {
			if u.Budget == "rpm" && u.Container == container {
				return u.Requests
			}
		}
		return -1
	}
	expect := func(res Result, v policy.Verdict, rule string) {
		t.Helper()
		if res.Verdict != v || res.Rule != rule {
			t.Fatalf("%v %s %s (%s); want %v %s", res.Verdict, res.Code, res.Rule, res.Reason, v, rule)
		}
	}

	// Refusals before the budget step are not counted.
	expect(decide("agent", "GET", "https://denied.example.com/", ""), policy.Deny, policy.RuleDenyList)
	expect(decide("agent", "GET", "https://docs.example.com/"+"ghp_"+strings.Repeat("a1B2", 9), ""), policy.Deny, "secret:github")
	if n := requests("agent"); n != 0 {
		t.Fatalf("refused requests were counted: %d", n)
	}
	// A decrypted CONNECT goes nowhere by itself and is not counted; the gate's own name neither.
	if res := decide("agent", "CONNECT", "connect://docs.example.com:443", ""); !res.Intercept || requests("agent") != 0 {
		t.Fatalf("a CONNECT to decrypt: %+v, counted %d", res.Decision, requests("agent"))
	}
	expect(decide("agent", "GET", "https://lockhttp.internal/", ""), policy.Free, RuleSelf)
	// A FREE and an ASK count.
	expect(decide("agent", "GET", "https://docs.example.com/a", ""), policy.Free, policy.RuleTrusted)
	expect(decide("agent", "POST", "https://docs.example.com/a", "x=1"), policy.Ask, "writes-ask")
	if n, m := requests("agent"), mem.n; n != 2 || m != 2 {
		t.Fatalf("counted %d, heuristics saw %d; want 2 and 2", n, m)
	}
	// Over: E_BUDGET with the seconds until the first leaves, counted for nothing; an earlier
	// step's refusal still wins.
	res := decide("agent", "GET", "https://docs.example.com/b", "")
	expect(res, policy.Deny, "budget:rpm")
	if res.Code != policy.CodeBudget || res.RetryAfter != 61 || !strings.Contains(res.Reason, `container "agent" has sent 2 requests in the last minute under budget "rpm" (requests_per_minute = 2); it fits again in 61 s`) {
		t.Fatalf("over budget: %+v", res.Decision)
	}
	if requests("agent") != 2 || mem.n != 2 {
		t.Fatalf("the refused request was counted (%d) or scored (%d)", requests("agent"), mem.n)
	}
	expect(decide("agent", "GET", "https://denied.example.com/", ""), policy.Deny, policy.RuleDenyList)
	// The other container is not under "rpm".
	expect(decide("other", "GET", "https://docs.example.com/b", ""), policy.Free, policy.RuleTrusted)
	// A CONNECT decided at the domain counts as one request to its host.
	clk.Advance(61 * time.Second)
	expect(decide("agent", "CONNECT", "connect://spliced.example.com:443", ""), policy.Free, "tunnel")
	if requests("agent") != 1 {
		t.Fatalf("a spliced CONNECT: counted %d, want 1", requests("agent"))
	}
	// Bytes: the path, headers and body; a body over the whole budget never fits.
	expect(decide("other", "POST", "https://upload.example.com/u", strings.Repeat("a", 1000)), policy.Ask, policy.RuleDefault)
	res = decide("other", "POST", "https://upload.example.com/u", strings.Repeat("a", 100))
	expect(res, policy.Deny, "budget:up")
	if res.RetryAfter != 3659 || !strings.Contains(res.Reason, `has sent 1002 bytes in the last hour under budget "up", and the request's 102 more would pass bytes_up_per_hour = "1KiB"`) {
		t.Fatalf("over bytes: %+v", res.Decision)
	}
	res = decide("agent", "POST", "https://upload.example.com/u", strings.Repeat("a", 2000))
	if res.Rule != "budget:up" || res.RetryAfter != 0 || !strings.Contains(res.Reason, "never fits") {
		t.Fatalf("a body over the whole budget: %+v", res.Decision)
	}
}

// TestDecideBudgetsWithoutCounter: with no counter (Env.Budgets nil) every request is counted
// from zero: nothing is remembered. (One over a budget by itself is refused: corpus cases
// budget-*.)
func TestDecideBudgetsWithoutCounter(t *testing.T) {
	p, err := policy.Load("b.toml", []byte(budgetPolicy))
	if err != nil {
		t.Fatal(err)
	}
	in, _ := NewChecks(p, nil, nil, nil, nil)
	for i := 0; i < 5; i++ {
		r := &Request{Kind: Tunnel, Container: "agent", Method: "GET", Scheme: "https", Authority: "docs.example.com", Path: "/", Header: http.Header{}}
		if res := Decide(&Env{Policy: p, Checks: in}, r); res.Verdict != policy.Free {
			t.Fatalf("request %d: %+v", i, res.Decision)
		}
	}
}
