package gate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lockhttp/lockhttp/internal/explain"
	"github.com/lockhttp/lockhttp/internal/floor"
	"github.com/lockhttp/lockhttp/internal/hubapi"
	"github.com/lockhttp/lockhttp/internal/hubclient"
	"github.com/lockhttp/lockhttp/internal/judge"
	"github.com/lockhttp/lockhttp/internal/policy"
)

// SelfMCPPath is where the gate serves its own MCP server to the agents, on its own name
// (https://lockhttp.internal/mcp): the tools explain, pending and request_rule, over MCP's
// Streamable HTTP transport, stateless, each answer one JSON body. Every tool answers about
// the calling container alone, as the gate knows it (the policy's [sources]), whatever the
// arguments say.
const SelfMCPPath = floor.SelfMCPPath

// Bounds of the gate's MCP server.
const (
	// maxSelfMCPBody bounds one request's body: a request_rule of the largest rule and reason,
	// escaped in JSON, fits many times over.
	maxSelfMCPBody = 64 << 10
	// maxExplainURL bounds the URL explain is asked about.
	maxExplainURL = 8 << 10
	// selfMCPWait bounds one call's work (the hub's answer).
	selfMCPWait = 15 * time.Second
)

// RuleHub is what the MCP server needs of the hub besides Hub: a client of the hub's gate API
// (hubclient.Client) has it.
type RuleHub interface {
	AskRule(ctx context.Context, req hubapi.RuleRequest) (hubapi.Ticket, error)
	Asks(ctx context.Context, container string) ([]hubapi.Ticket, error)
}

// selfMCP answers a request to the gate's MCP server for container and records it; res is the
// decision of the request (the gate's own name), pol the policy it was decided under.
func (g *Gate) selfMCP(r *http.Request, ex *exchange, res judge.Result, pol *policy.Policy) *http.Response {
	status, h, body := g.serveSelfMCP(r, ex, res.Container, pol)
	if err := ex.finishSync(r.Context(), status, "the gate's MCP server"); err != nil {
		return refusalResponse(r, unrecordedRefusal(r, ex, err))
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	h.Set(HeaderRequest, ex.rec.ID)
	if ex.closeAfter {
		h.Set("Connection", "close")
	}
	return answer(r, status, h, body)
}

// serveSelfMCP runs the MCP server on the request's body, held by the gate already (ex.held),
// and returns the answer.
func (g *Gate) serveSelfMCP(r *http.Request, ex *exchange, container string, pol *policy.Policy) (int, http.Header, []byte) {
	plain := func(status int, text string) (int, http.Header, []byte) {
		h := http.Header{}
		h.Set("Content-Type", "text/plain; charset=utf-8")
		return status, h, []byte(text + "\n")
	}
	if container == "" {
		return plain(http.StatusForbidden, "the gate's MCP server answers only a container the policy's [sources] name")
	}
	if len(ex.held) > maxSelfMCPBody {
		return plain(http.StatusRequestEntityTooLarge, fmt.Sprintf("the gate's MCP server reads at most %d bytes a request", maxSelfMCPBody))
	}
	tools := &selfTools{g: g, container: container, agent: ex.rec.Agent, pol: pol}
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return tools.server() },
		&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true, DisableLocalhostProtection: true})
	ctx, cancel := context.WithTimeout(r.Context(), selfMCPWait)
	defer cancel()
	in, err := http.NewRequestWithContext(ctx, r.Method, SelfMCPPath, bytes.NewReader(ex.held))
	if err != nil {
		return plain(http.StatusBadRequest, "the request could not be read")
	}
	for _, k := range []string{"Content-Type", "Accept", "Mcp-Protocol-Version", "Mcp-Session-Id", "Mcp-Method", "Mcp-Name"} {
		if v := r.Header.Values(k); len(v) > 0 {
			in.Header[k] = v
		}
	}
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, in)
	h := http.Header{}
	for _, k := range []string{"Content-Type", "Mcp-Session-Id", "Allow"} {
		if v := rec.Header().Get(k); v != "" {
			h.Set(k, v)
		}
	}
	return rec.Code, h, rec.Body.Bytes()
}

// selfTools are the tools of one call, bound to the calling container.
type selfTools struct {
	g         *Gate
	container string
	agent     string
	pol       *policy.Policy
}

// ExplainIn is the explain tool's input.
type ExplainIn struct {
	Method string `json:"method" jsonschema:"the request's method, e.g. GET"`
	URL    string `json:"url" jsonschema:"the request's absolute URL, http:// or https://"`
}

// ExplainOut is the explain tool's answer: the gate's decision of that request from this
// container, and what would free it.
type ExplainOut struct {
	Verdict string `json:"verdict"`
	Code    string `json:"code,omitempty"`
	Rule    string `json:"rule,omitempty"`
	Reason  string `json:"reason"`
	// FreedBy says what would let the request through.
	FreedBy string `json:"freed_by"`
	Note    string `json:"note,omitempty"`
}

// PendingIn is the pending tool's input: none.
type PendingIn struct{}

// PendingOut lists the container's tickets, newest first.
type PendingOut struct {
	Tickets []AgentTicket `json:"tickets"`
}

// AgentTicket is one ticket as its agent sees it.
type AgentTicket struct {
	ID      string `json:"id"`
	Kind    string `json:"kind"`
	Status  string `json:"status"`
	Method  string `json:"method,omitempty"`
	URL     string `json:"url,omitempty"`
	Rule    string `json:"rule,omitempty"`
	Created string `json:"created"`
	Expires string `json:"expires"`
	// Answer is a human's reason for a denial, or what an approval did.
	Answer string `json:"answer,omitempty"`
}

// RequestRuleIn is the request_rule tool's input.
type RequestRuleIn struct {
	Rule   string `json:"rule" jsonschema:"one [[rule]] block of the policy's TOML: a free rule for one exact host, one method, paths, and containers = [your container] (or none: yours)"`
	Reason string `json:"reason" jsonschema:"why you need it, in your words; a human reads it"`
}

// RequestRuleOut is the request_rule tool's answer.
type RequestRuleOut struct {
	Ticket  string `json:"ticket"`
	Status  string `json:"status"`
	Loosens string `json:"loosens"`
	Rule    string `json:"rule"`
	Next    string `json:"next"`
}

func (s *selfTools) server() *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "lockhttp", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "explain",
		Description: "Why the gate refuses (or asks about) a request from your container, and what would free it."}, s.explain)
	mcp.AddTool(srv, &mcp.Tool{Name: "pending",
		Description: "Your container's tickets (requests held for a human, rules you asked for) and their state."}, s.pending)
	mcp.AddTool(srv, &mcp.Tool{Name: "request_rule",
		Description: "Ask a human for a rule of the policy, with your reason. A human reviews it at the console; nothing changes until then."}, s.requestRule)
	return srv
}

// errTool is a tool's refusal, as the agent reads it (IsError).
func errTool(format string, args ...any) (*mcp.CallToolResult, error) {
	r := &mcp.CallToolResult{IsError: true}
	r.Content = []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, args...)}}
	return r, nil
}

func (s *selfTools) explain(ctx context.Context, _ *mcp.CallToolRequest, in ExplainIn) (*mcp.CallToolResult, ExplainOut, error) {
	method := in.Method
	if method == "" || len(method) > 16 || strings.IndexFunc(method, func(r rune) bool { return r < 'A' || r > 'Z' }) >= 0 {
		r, _ := errTool("method: one HTTP method in capitals, such as GET")
		return r, ExplainOut{}, nil
	}
	if len(in.URL) > maxExplainURL || strings.IndexFunc(in.URL, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
		r, _ := errTool("url: at most %d bytes, no spaces or control characters", maxExplainURL)
		return r, ExplainOut{}, nil
	}
	u, err := url.Parse(in.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		r, _ := errTool("url: an absolute http:// or https:// URL without user info")
		return r, ExplainOut{}, nil
	}
	raw := method + " " + u.String() + " HTTP/1.1\r\nHost: " + u.Host + "\r\n\r\n"
	res, err := explain.Request(ctx, []byte(raw), explain.Options{Policy: s.pol, Container: s.container,
		Checks: s.g.insp.Load(), NoDecrypt: s.g.certs == nil})
	var usage *explain.UsageError
	if errors.As(err, &usage) {
		r, _ := errTool("%s", usage.Msg)
		return r, ExplainOut{}, nil
	}
	if err != nil {
		s.g.log.Warn("gate: the MCP server's explain failed", "container", s.container, "err", err)
		r, _ := errTool("the request could not be explained")
		return r, ExplainOut{}, nil
	}
	out := ExplainOut{Verdict: res.Verdict.String(), Code: string(res.Code), Rule: res.Rule, Reason: res.Reason,
		FreedBy: freedBy(res.Decision), Note: res.Note}
	return nil, out, nil
}

// freedBy says what would let a request decided d through, for the agent.
func freedBy(d policy.Decision) string {
	switch {
	case d.Verdict == policy.Free:
		return "nothing: it goes out"
	case d.Code == policy.CodeFloor:
		return "nothing you can ask for: the floor refuses it under every policy"
	case d.Verdict == policy.Ask:
		return "a human's approval when you send it (the gate holds it and asks), or a rule: call request_rule with the rule and your reason"
	case d.Code == policy.CodeRule || d.Code == policy.CodeDenied:
		return "a rule of the policy that frees it, approved by a human: call request_rule with the rule and your reason"
	}
	return "nothing the policy changes: " + d.Reason
}

func (s *selfTools) ruleHub() (RuleHub, bool) {
	rh, ok := s.g.hub.(RuleHub)
	return rh, ok && s.g.hub != nil
}

func (s *selfTools) pending(ctx context.Context, _ *mcp.CallToolRequest, _ PendingIn) (*mcp.CallToolResult, PendingOut, error) {
	rh, ok := s.ruleHub()
	if !ok {
		r, _ := errTool("this gate has no hub: nothing is asked of a human")
		return r, PendingOut{}, nil
	}
	ts, err := rh.Asks(ctx, s.container)
	var se *hubclient.StatusError
	if errors.As(err, &se) && se.Status == http.StatusTooManyRequests {
		r, _ := errTool("%s", se.Msg)
		return r, PendingOut{}, nil
	}
	if err != nil {
		s.g.log.Warn("gate: the MCP server could not list tickets", "container", s.container, "err", err)
		r, _ := errTool("the hub did not answer; try again later")
		return r, PendingOut{}, nil
	}
	out := PendingOut{Tickets: []AgentTicket{}}
	for _, t := range ts {
		if t.Container != s.container || len(out.Tickets) >= hubapi.MaxAsksListed {
			continue
		}
		a := AgentTicket{ID: t.ID, Kind: t.Kind, Status: string(t.Status), Created: t.Created.UTC().Format(time.RFC3339),
			Expires: t.Expires.UTC().Format(time.RFC3339)}
		if t.RuleAsk != nil {
			a.Rule = t.RuleAsk.Rule
		} else {
			a.Method, a.URL = t.Method, t.URL
		}
		if d := t.Decision; d != nil {
			a.Answer = d.Reason
		}
		out.Tickets = append(out.Tickets, a)
	}
	return nil, out, nil
}

func (s *selfTools) requestRule(ctx context.Context, _ *mcp.CallToolRequest, in RequestRuleIn) (*mcp.CallToolResult, RequestRuleOut, error) {
	switch {
	case strings.TrimSpace(in.Rule) == "":
		r, _ := errTool("rule: give one [[rule]] block of the policy's TOML")
		return r, RequestRuleOut{}, nil
	case len(in.Rule) > hubapi.MaxRuleText:
		r, _ := errTool("rule: %d bytes; at most %d", len(in.Rule), hubapi.MaxRuleText)
		return r, RequestRuleOut{}, nil
	case strings.TrimSpace(in.Reason) == "":
		r, _ := errTool("reason: say why you need the rule; a human reads it")
		return r, RequestRuleOut{}, nil
	case len(in.Reason) > hubapi.MaxRuleReason:
		r, _ := errTool("reason: %d bytes; at most %d", len(in.Reason), hubapi.MaxRuleReason)
		return r, RequestRuleOut{}, nil
	}
	rh, ok := s.ruleHub()
	if !ok {
		r, _ := errTool("this gate has no hub: nobody can answer a request for a rule")
		return r, RequestRuleOut{}, nil
	}
	t, err := rh.AskRule(ctx, hubapi.RuleRequest{Container: s.container, Agent: s.agent, Rule: in.Rule, Reason: in.Reason})
	var se *hubclient.StatusError
	if errors.As(err, &se) && se.Status == http.StatusBadRequest {
		r, _ := errTool("refused: %s", se.Msg)
		return r, RequestRuleOut{}, nil
	}
	if err != nil || t.RuleAsk == nil {
		s.g.log.Warn("gate: the MCP server could not ask for a rule", "container", s.container, "err", err)
		r, _ := errTool("the hub did not answer; try again later")
		return r, RequestRuleOut{}, nil
	}
	return nil, RequestRuleOut{Ticket: t.ID, Status: string(t.Status), Loosens: t.RuleAsk.Loosens, Rule: t.RuleAsk.Rule,
		Next: "a human reviews it at the console; call pending to see its state. Nothing changes until they approve it in review"}, nil
}
