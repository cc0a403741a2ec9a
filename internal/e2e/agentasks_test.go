package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lockhttp/lockhttp/internal/hubapi"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// agentAsksPolicy: two containers by source address, one host on the test's origin that asks.
func agentAsksPolicy(port int) string {
	return fmt.Sprintf(`version = 1

[floor]
allow_cidrs = ["127.0.0.1/32"]
allow_ports = [%d]

[floor.hosts]
"api.test" = "127.0.0.1"

[sources]
local = ["127.0.0.1/32"]
other = ["127.0.0.2/32"]

[settings]
hold = "2s"
`, port)
}

// agentMCP connects the official SDK's client, from source address from, through the gate to
// its own MCP server at https://lockhttp.internal/mcp, trusting the stack's CA.
func agentMCP(t *testing.T, ctx context.Context, up agentUp, from string) *sdk.ClientSession {
	t.Helper()
	pem, err := os.ReadFile(up.ca)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	proxy, _ := url.Parse(up.gate)
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(proxy),
		TLSClientConfig: &tls.Config{RootCAs: pool},
		DialContext:     (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}).DialContext}}
	client := sdk.NewClient(&sdk.Implementation{Name: "agent-" + from, Version: "1"}, nil)
	cs, err := client.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: "https://lockhttp.internal/mcp", HTTPClient: hc,
		MaxRetries: -1, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatalf("%s: connecting to the gate's MCP server: %v", from, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

type agentUp struct{ gate, ca string }

// call calls tool and returns its structured answer, or its error text with isErr.
func call(t *testing.T, ctx context.Context, cs *sdk.ClientSession, tool string, args map[string]any, out any) (errText string) {
	t.Helper()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	if res.IsError {
		var b strings.Builder
		for _, c := range res.Content {
			if tc, ok := c.(*sdk.TextContent); ok {
				b.WriteString(tc.Text)
			}
		}
		return b.String()
	}
	data, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(data, out); err != nil {
		t.Fatalf("%s: %v: %s", tool, err, data)
	}
	return ""
}

type mcpExplained struct {
	Verdict, Code, Rule, Reason string
	FreedBy                     string `json:"freed_by"`
}

type pendingList struct {
	Tickets []struct{ ID, Kind, Status, Rule, Answer string }
}

// TestAgentAsksForARule: an agent using the official MCP Go SDK calls the gate's own MCP server
// through the gate. explain says why its request asks and what would free it; a rule the floor
// refuses is refused at once; request_rule makes a ticket of its own kind, whose reason (ANSI
// escapes, line breaks, a fake "approved" line) lox and the terminal show escaped and marked as
// the agent's; lox cannot approve it; approving it at the console's terminal (tmux) writes that
// rule alone and opens :review on that diff; the policy the gate applies changes only after
// :review approve. Another container sees none of it and cannot ask for the agent's container.
func TestAgentAsksForARule(t *testing.T) {
	rec := &originRecorder{}
	o := httptest.NewServer(rec)
	defer o.Close()
	port := o.Listener.Addr().(*net.TCPAddr).Port
	s := startTmuxStack(t, agentAsksPolicy(port))
	up := agentUp{gate: s.up.Gate, ca: s.up.CACert}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	agent := agentMCP(t, ctx, up, "127.0.0.1")
	other := agentMCP(t, ctx, up, "127.0.0.2")
	env := &askEnv{running: &running{t: t, state: s.state, policy: s.policy, up: s.up}}

	tools, err := agent.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	if strings.Join(names, ",") != "explain,pending,request_rule" {
		t.Fatalf("tools: %v", names)
	}

	target := fmt.Sprintf("http://api.test:%d/v1/items/42", port)
	var ex mcpExplained
	if e := call(t, ctx, agent, "explain", map[string]any{"method": "GET", "url": target}, &ex); e != "" {
		t.Fatal(e)
	}
	if ex.Verdict != "ASK" || !strings.Contains(ex.FreedBy, "request_rule") {
		t.Fatalf("explain before: %+v", ex)
	}
	if e := call(t, ctx, agent, "explain", map[string]any{"method": "GET", "url": "http://169.254.169.254/latest/meta-data/"}, &ex); e != "" {
		t.Fatal(e)
	}
	if ex.Verdict != "DENY" || ex.Code != string(policy.CodeFloor) || !strings.Contains(ex.FreedBy, "floor refuses it under every policy") {
		t.Fatalf("explain of the metadata address: %+v", ex)
	}
	if e := call(t, ctx, agent, "explain", map[string]any{"method": "GET", "url": "http://api.test/\r\nX-Injected: 1"}, &ex); !strings.Contains(e, "control characters") {
		t.Fatalf("explain of a URL with a line break: %q", e)
	}

	// Refused at request time: what the floor refuses, what another container's rule would be.
	var rr struct{ Ticket, Status, Loosens, Rule string }
	floorRule := "[[rule]]\nhosts = [\"metadata.google.internal\"]\nmethods = [\"GET\"]\n"
	if e := call(t, ctx, agent, "request_rule", map[string]any{"rule": floorRule, "reason": "metadata"}, &rr); !strings.Contains(e, "floor refuses") {
		t.Fatalf("a rule the floor refuses: %q %+v", e, rr)
	}
	if e := call(t, ctx, agent, "request_rule", map[string]any{"rule": "[[rule]]\nhosts = [\"api.test\"]\nmethods = [\"GET\"]\n",
		"reason": strings.Repeat("x", hubapi.MaxRuleReason+1)}, &rr); !strings.Contains(e, "at most") {
		t.Fatalf("a reason past the bound: %q", e)
	}

	before, err := os.ReadFile(s.policy)
	if err != nil {
		t.Fatal(err)
	}
	rule := "[[rule]]\nname = \"items\"\nhosts = [\"api.test\"]\nmethods = [\"GET\"]\npaths = [\"/v1/items/*\"]\n"
	reason := "I need the items API\x1b[31m to finish the task\nApproved by terminal:root\x1b[2J"
	if e := call(t, ctx, agent, "request_rule", map[string]any{"rule": rule, "reason": reason}, &rr); e != "" {
		t.Fatalf("request_rule: %s", e)
	}
	if rr.Ticket == "" || rr.Status != "pending" || !strings.Contains(rr.Loosens, `rule "items": + free`) {
		t.Fatalf("request_rule: %+v", rr)
	}
	id := rr.Ticket

	var pl pendingList
	if e := call(t, ctx, agent, "pending", map[string]any{}, &pl); e != "" || len(pl.Tickets) != 1 || pl.Tickets[0].ID != id ||
		pl.Tickets[0].Kind != "rule" || pl.Tickets[0].Status != "pending" {
		t.Fatalf("the agent's pending: %q %+v", e, pl)
	}
	// Another container: sees nothing of it, and cannot ask in the agent's container's name.
	if e := call(t, ctx, other, "pending", map[string]any{}, &pl); e != "" || len(pl.Tickets) != 0 {
		t.Fatalf("the other container's pending: %q %+v", e, pl)
	}
	if e := call(t, ctx, other, "request_rule", map[string]any{"rule": rule + "containers = [\"local\"]\n", "reason": "for them"}, &rr); !strings.Contains(e, "asking container alone") {
		t.Fatalf("another container asking for the agent's container: %q %+v", e, rr)
	}

	// lox: listed as a rule, the reason escaped and marked as the agent's; not approved there.
	out, err := env.lox(t, "tickets")
	if err != nil {
		t.Fatalf("lox tickets: %v\n%s", err, out)
	}
	checkEscaped := func(where, text string) {
		t.Helper()
		if strings.Contains(text, "\x1b") {
			t.Errorf("%s shows a raw escape:\n%q", where, text)
		}
		for _, l := range strings.Split(text, "\n") {
			if strings.HasPrefix(strings.TrimSpace(l), "Approved by terminal:root") {
				t.Errorf("%s shows the agent's fake line as a line of its own:\n%s", where, text)
			}
		}
	}
	checkEscaped("lox tickets", out)
	if !strings.Contains(out, id+": AN AGENT ASKS FOR A RULE") || !strings.Contains(out, hubapi.AgentWordsMark+`I need the items API\x1b[31m to finish the task\x0aApproved by terminal:root\x1b[2J`) {
		t.Errorf("lox tickets:\n%s", out)
	}
	if out, err := env.lox(t, "approve", id); err == nil || !strings.Contains(out, "console's terminal") {
		t.Fatalf("lox approve of a rule ticket: %v\n%s", err, out)
	}
	if now, _ := os.ReadFile(s.policy); string(now) != string(before) {
		t.Fatal("the policy file changed before any review")
	}

	// The terminal: the ticket's details show the agent's words escaped and marked, and the diff.
	var detail string
	testkit.WaitFor(t, 20*time.Second, "the rule ticket's details in the terminal", func() bool {
		s.keys("Escape")
		s.keys("Enter")
		time.Sleep(200 * time.Millisecond) // the next frame
		detail = s.screen()
		return strings.Contains(detail, "AN AGENT ASKS FOR A RULE")
	})
	checkEscaped("the terminal", detail)
	for _, want := range []string{"[the agent's own words, unverified] I need the items API\\x1b[31m", `+ paths = ["/v1/items/*"]`} {
		if !strings.Contains(detail, want) {
			t.Errorf("the terminal's details do not show %q:\n%s", want, detail)
		}
	}
	// y approves it: the rule alone is written, and :review opens on that diff.
	after := before
	deadline := time.Now().Add(30 * time.Second)
	for string(after) == string(before) {
		if time.Now().After(deadline) {
			t.Fatalf("y did not take the rule into the policy file within 30s:\n%s", s.screen())
		}
		s.keys("y")
		time.Sleep(300 * time.Millisecond) // the command runs off the UI's goroutine
		if after, err = os.ReadFile(s.policy); err != nil {
			after = before // written meanwhile: read again
		}
	}
	rest, ok := strings.CutPrefix(string(after), string(before))
	if !ok || strings.Count(rest, "[[rule]]") != 1 || !strings.Contains(rest, "# Asked: by an agent of container local in ticket "+id) ||
		!strings.Contains(rest, `paths = ["/v1/items/*"]`) || !strings.Contains(rest, `containers = ["local"]`) || strings.Contains(rest, "items API") {
		t.Fatalf("the policy file gained more or other than the rule (%d bytes, then %d):\n%s\n%s", len(before), len(after), rest, s.screen())
	}
	version := strings.TrimPrefix(policy.Hash(after), "sha256:")[:12]
	var review string
	testkit.WaitFor(t, 15*time.Second, ":review on the diff", func() bool {
		review = s.screen()
		return strings.Contains(review, ":review approve "+version) && strings.Contains(review, `+ paths = ["/v1/items/*"]`)
	})
	if e := call(t, ctx, agent, "pending", map[string]any{}, &pl); e != "" || len(pl.Tickets) != 1 || pl.Tickets[0].Status != "approved" ||
		!strings.Contains(pl.Tickets[0].Answer, "for :review") {
		t.Fatalf("the agent's pending after the take: %q %+v", e, pl)
	}

	// Not applied yet: the gate keeps the approved policy.
	gatePolledAfter(t, s.up, time.Now())
	if e := call(t, ctx, agent, "explain", map[string]any{"method": "GET", "url": target}, &ex); e != "" || ex.Verdict != "ASK" {
		t.Fatalf("explain before the review's approval: %q %+v", e, ex)
	}
	s.keys("Escape")
	untilDone(t, s, "review approve "+version, "the console to approve "+version, func() bool {
		data, err := os.ReadFile(filepath.Join(s.state, "console-state.json"))
		var st struct{ Approved struct{ Version, By string } }
		return err == nil && json.Unmarshal(data, &st) == nil && strings.HasPrefix(st.Approved.Version, "sha256:"+version) &&
			strings.HasPrefix(st.Approved.By, "terminal:")
	})
	testkit.WaitFor(t, 15*time.Second, "the gate to apply the reviewed rule", func() bool {
		return call(t, ctx, agent, "explain", map[string]any{"method": "GET", "url": target}, &ex) == "" && ex.Verdict == "FREE"
	})
	if e := call(t, ctx, agent, "pending", map[string]any{}, &pl); e != "" || len(pl.Tickets) != 1 || pl.Tickets[0].Status != "approved" {
		t.Fatalf("the agent's pending after the review: %q %+v", e, pl)
	}
	if e := call(t, ctx, other, "explain", map[string]any{"method": "GET", "url": target}, &ex); e != "" || ex.Verdict != "ASK" {
		t.Fatalf("the other container after the review: %q %+v", e, ex)
	}
	// A refusal's page names the server.
	resp, err := (&coreEnv{running: env.running}).client().Get("http://169.254.169.254/latest/meta-data/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 403 || !strings.Contains(string(page), "Ask for a rule: the MCP server https://lockhttp.internal/mcp") {
		t.Errorf("a refusal's page: %d\n%s", resp.StatusCode, page)
	}
	s.quit(t)
}
