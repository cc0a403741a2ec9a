package propose

import (
	"fmt"
	"math/rand"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/quick"
	"time"

	"github.com/lockhttp/lockhttp/internal/floor"
	"github.com/lockhttp/lockhttp/internal/policy"
)

// The property test's alphabet: what an agent could ask, shaped to meet every limit a proposal
// has (the floor, wildcard-looking names, spliced, trusted and denied hosts, CONNECT, globs,
// DoH paths, masks, dot segments, parameters) and every way a pattern could reach a denial (a
// literal segment where ids stand, case, parameters).
var (
	propContainers = []string{"agent", "agent", "agent", "agent", "other", "other", "ghost"}
	propHosts      = []string{"api.example.com", "api.example.com", "api.example.com", "api.example.com", "api.example.com",
		"api.example.com", "api.example.com", "api.example.com", "store.example.com", "store.example.com", "store.example.com", "docs.example.com", "paste.example.com",
		"pinned.example.com", "sub.api.example.com", "API.Example.COM", "10.0.0.1", "[::1]", "localhost", "metadata.google.internal",
		"dns.google", "lockhttp.internal", "*.example.com", "example", "xn--bcher-kva.example", "bücher.example", "169.254.169.254"}
	propMethods = []string{"GET", "GET", "GET", "GET", "GET", "GET", "POST", "POST", "PUT", "DELETE", "CONNECT", "get", "PURGE", "HEAD"}
	propPaths   = []string{"/", "/v1/items/1", "/v1/items/2", "/v1/items/3", "/v1/items/admin", "/v1/items/ADMIN", "/v2/x/10", "/v2/x/11",
		"/v2/x/secret", "/v2/x/10;jsessionid=1", "/v2/X/10", "/v3/4b0a97a/raw", "/v3/5989811/raw", "/v3/main/raw",
		"/u/3f2a9c1b-0d4e-4f5a-9b6c-7d8e9f0a1b2c", "/u/6c8e1f0a-1d2e-4a5b-8c7d-0e9f8a7b6c5d", "/u/Zk3pQ9vL2mX7tR4w",
		"/dns-query", "/dns-query/1", "/a/*/b", "/a/**", "/v1/items/1/../admin", "/v1/items/%2e%2e/admin", "/v1/items/1%2F..%2Fadmin",
		"/hooks/%5Btoken:3f2a9c1b%5D", "/x?q=1", "/v2/x/12", "/v2/x/13", "/%7Euser/1", "/~user/2", "/v1/items/1/", "//v1/items/1"}
	propOutcomes = []string{"approve", "approve", "approve", "approve", "approve", "deny", "", "hub-approve", "hub-approve", "hub-deny",
		"hub-only-approve", "hub-only-approve", "hub-only-deny", "summary-deny"}
)

// propCase is one random session: asks, the records and the hub's decisions they leave, and
// which requests a human denied, as the test reads them itself.
type propCase struct {
	obs    []Observation
	hub    []Decision
	denied []policy.Request
	cfg    Config
}

func (c propCase) String() string {
	var b strings.Builder
	for _, o := range c.obs {
		fmt.Fprintf(&b, "%s %s %s %s ticket=%s approver=%s code=%s\n", o.Container, o.Verdict, o.Method, o.URL, o.Ticket, o.Approver, o.Code)
	}
	for _, d := range c.hub {
		fmt.Fprintf(&b, "hub %s approved=%v %s %s %s\n", d.Ticket, d.Approved, d.Container, d.Method, d.URL)
	}
	return b.String()
}

// genCase builds a session from data: each 4 bytes one ask.
func genCase(data []byte) propCase {
	pick := func(b byte, xs []string) string { return xs[int(b)%len(xs)] }
	var c propCase
	c.cfg.Text = []byte(testPolicy)
	if len(data) > 0 && data[0]%5 == 0 {
		c.cfg.Container = "agent"
	}
	for i := 0; i+4 <= len(data) && i < 4*400; i += 4 {
		ct, host, method, path := pick(data[i], propContainers), pick(data[i+1], propHosts), pick(data[i+2], propMethods), pick(data[i+3], propPaths)
		outcome := pick(data[i+2]/byte(len(propMethods))+data[i+3]/byte(len(propPaths))*7+data[i], propOutcomes)
		scheme := "https"
		if data[i+1]&0x80 != 0 {
			scheme = "http"
		}
		u := scheme + "://" + host + path
		event := "tunnel-request"
		if method == "CONNECT" {
			event, u = "connect", host+":443"
		}
		ticket := fmt.Sprintf("t%d", i)
		at := t0.Add(time.Duration(i) * time.Minute)
		o := Observation{Time: at, Event: event, Container: ct, Method: method, URL: u, Verdict: "ASK", Ticket: ticket, Code: "E_PENDING"}
		switch outcome {
		case "approve":
			o.Code, o.Approver = "", "cli:root"
		case "deny":
			o.Code, o.Approver = "E_DENIED", "cli:root"
		case "hub-approve", "hub-deny":
			c.hub = append(c.hub, Decision{Ticket: ticket, Approved: outcome == "hub-approve", By: "terminal:alice", At: at})
		case "summary-deny":
			// A denial past the audit's rate: a summary with its URL, its ticket in no record.
			o = Observation{Time: at, Event: "summary", Container: ct, Method: method, URL: u, Verdict: "ASK", Code: "E_DENIED", Rule: "default"}
		case "hub-only-approve", "hub-only-deny":
			c.hub = append(c.hub, Decision{Ticket: ticket, Approved: outcome == "hub-only-approve", By: "phone:p", At: at,
				Container: ct, Method: method, URL: u, Created: at})
		}
		if !strings.HasPrefix(outcome, "hub-only") {
			c.obs = append(c.obs, o)
		}
		if outcome == "deny" || outcome == "hub-deny" || outcome == "hub-only-deny" || outcome == "summary-deny" {
			if r, ok := asRequest(ct, method, u); ok {
				c.denied = append(c.denied, r)
			}
		}
	}
	return c
}

// asRequest reads a URL as the gate's policy decides it, independently of the code under test.
func asRequest(container, method, raw string) (policy.Request, bool) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return policy.Request{}, false
	}
	h, ref := floor.Host(u.Hostname())
	if ref != nil {
		return policy.Request{}, false
	}
	return policy.Request{Host: h, Method: strings.ToUpper(method), Path: u.EscapedPath(), Container: container}, true
}

// checked counts the forms holds checked, for the property test's log.
var checked int

// holds checks every proposal of the case against the properties; it returns what fails.
func holds(c propCase) []string {
	c.cfg.Name = "policy.toml"
	l, err := New(c.cfg)
	if err != nil {
		return []string{err.Error()}
	}
	for _, o := range c.obs {
		l.Observe(o)
	}
	for _, d := range c.hub {
		l.Decided(d)
	}
	res := l.Result()
	approved, _ := policy.Load("policy.toml", c.cfg.Text)
	oldDoc, _ := policy.Decode("policy.toml", c.cfg.Text)
	var bad []string
	for _, p := range res.Proposals {
		for _, exact := range []bool{false, true} {
			f := p.Form(exact)
			if f == nil {
				continue
			}
			checked++
			bad = append(bad, formHolds(p, f, approved, oldDoc, c)...)
		}
	}
	return bad
}

func formHolds(p Proposal, f *Form, approved *policy.Policy, oldDoc *policy.Document, c propCase) []string {
	var bad []string
	fail := func(format string, args ...any) { bad = append(bad, p.ID+": "+fmt.Sprintf(format, args...)) }
	r := f.Rule
	// No wildcard host; a host the floor lets through, by name, as written.
	for _, h := range r.Hosts {
		n, ref := floor.Host(h)
		if strings.Contains(h, "*") || ref != nil || n != h || floor.Name(h) != nil {
			fail("host %q: a wildcard or a host the floor refuses", h)
		}
	}
	if len(r.Hosts) != 1 || r.Verdict != "free" || len(r.Containers) != 1 || !approved.HasContainer(r.Containers[0]) {
		fail("not a free rule for one host and one container: %+v", r)
	}
	if c.cfg.Container != "" && r.Containers[0] != c.cfg.Container {
		fail("container %v, asked for %q", r.Containers, c.cfg.Container)
	}
	for _, m := range r.Methods {
		if m == "CONNECT" {
			fail("CONNECT: a tunnel opened unseen")
		}
	}
	for _, path := range r.Paths {
		if floor.Request(r.Methods[0], strings.ReplaceAll(path, "*", "x"), nil) != nil || strings.Contains(path, "**") {
			fail("path %q the floor refuses, or more than one segment", path)
		}
	}
	block, err := p.Block(f, Origin{Tool: "test", By: "terminal:t", At: t0})
	if err != nil {
		fail("block: %v", err)
		return bad
	}
	text := Apply(c.cfg.Text, block)
	doc, err := policy.Decode("policy.toml", text)
	if err != nil {
		fail("does not decode: %v", err)
		return bad
	}
	cand, err := doc.Compile()
	if err != nil {
		fail("does not load: %v", err)
		return bad
	}
	// Nothing of the file but one more rule: no trusted host, no splice, no allow_cidrs or port,
	// no [floor.hosts], no source, no list of a container, no setting, no inject.
	o, n := oldDoc.File, doc.File
	if !slices.Equal(o.Trusted, n.Trusted) || !slices.Equal(o.Splice, n.Splice) || !slices.Equal(o.Deny, n.Deny) ||
		!reflect.DeepEqual(o.Floor, n.Floor) || !reflect.DeepEqual(o.Sources, n.Sources) || !reflect.DeepEqual(o.Containers, n.Containers) ||
		!reflect.DeepEqual(o.Settings, n.Settings) || !reflect.DeepEqual(o.Inject, n.Inject) || len(n.Rules) != len(o.Rules)+1 {
		fail("the file changed beyond one rule")
	}
	for _, h := range []string{"api.example.com", "store.example.com", "pinned.example.com", "docs.example.com", "x.example.com"} {
		for _, ct := range []string{"agent", "other"} {
			if cand.Trusted(h, ct) != approved.Trusted(h, ct) || cand.Spliced(h) != approved.Spliced(h) {
				fail("trust or splice of %s changed", h)
			}
			if d := cand.Evaluate(policy.Request{Host: h, Method: "CONNECT", Connect: true, Container: ct}); d.Verdict < approved.Evaluate(policy.Request{Host: h, Method: "CONNECT", Connect: true, Container: ct}).Verdict {
				fail("the CONNECT to %s decided at the domain loosened", h)
			}
		}
	}
	cmp := policy.Compare(approved, cand)
	for _, e := range cmp.Examples {
		if e.Kind != policy.ExampleRequest && e.Kind != policy.ExampleTunnel {
			fail("the comparison finds %s", e)
		}
	}
	// Never frees a request a human denied.
	for _, d := range c.denied {
		if cand.Evaluate(d).Verdict == policy.Free && approved.Evaluate(d).Verdict != policy.Free {
			fail("frees %s %s%s of %s, which a human denied", d.Method, d.Host, d.Path, d.Container)
		}
	}
	return bad
}

// TestProposalsProperty holds every proposal of random sessions to the properties (holds).
func TestProposalsProperty(t *testing.T) {
	n := 0
	check := func(data []byte) bool {
		c := genCase(data)
		bad := holds(c)
		if len(bad) > 0 {
			t.Errorf("%s\nsession:\n%s", strings.Join(bad, "\n"), c)
			return false
		}
		n++
		return true
	}
	cfg := &quick.Config{MaxCount: 300, Rand: rand.New(rand.NewSource(1)), Values: func(v []reflect.Value, r *rand.Rand) {
		b := make([]byte, 4*(20+r.Intn(120)))
		r.Read(b)
		v[0] = reflect.ValueOf(b)
	}}
	if err := quick.Check(check, cfg); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d sessions held, %d proposed rules checked", n, checked)
	if checked < n {
		t.Errorf("the sessions proposed %d rules in all: they do not exercise the properties", checked)
	}
}

// TestPropertyCanFail: holds finds a rule that frees a denial, so the property test can fail.
func TestPropertyCanFail(t *testing.T) {
	c := genCase(nil)
	c.denied = []policy.Request{{Host: "api.example.com", Method: "GET", Path: "/v2/x/secret", Container: "agent"}}
	p := Proposal{ID: "deadbeef", Container: "agent", Host: "api.example.com", Method: "GET", First: t0, Last: t0}
	f := &Form{Rule: policy.FileRule{Name: "x", Hosts: []string{"api.example.com"}, Methods: []string{"GET"}, Paths: []string{"/v2/x/*"}, Containers: []string{"agent"}, Verdict: "free"}}
	approved, _ := policy.Load("policy.toml", c.cfg.Text)
	doc, _ := policy.Decode("policy.toml", c.cfg.Text)
	if bad := formHolds(p, f, approved, doc, c); len(bad) != 1 || !strings.Contains(bad[0], "a human denied") {
		t.Errorf("a rule freeing a denial: %v", bad)
	}
	f.Rule.Hosts = []string{"*.example.com"}
	if bad := formHolds(p, f, approved, doc, c); len(bad) == 0 {
		t.Error("a wildcard host held")
	}
}

// FuzzProposals holds the proposals of sessions the fuzzer makes to the same properties.
func FuzzProposals(f *testing.F) {
	f.Add([]byte{1, 0, 0, 1, 1, 0, 0, 2, 1, 0, 0, 3, 1, 0, 0, 4})
	f.Add([]byte{0, 0, 0, 6, 0, 0, 0, 7, 0, 0, 0, 8, 0, 0, 0, 6, 0, 0, 0, 7})
	f.Fuzz(func(t *testing.T, data []byte) {
		c := genCase(data)
		if bad := holds(c); len(bad) > 0 {
			t.Fatalf("%s\nsession:\n%s", strings.Join(bad, "\n"), c)
		}
	})
}
