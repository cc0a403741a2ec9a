package judge

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/lockhttp/lockhttp/internal/floor"
	"github.com/lockhttp/lockhttp/internal/mcp"
	"github.com/lockhttp/lockhttp/internal/policy"
)

// Rule names of the MCP step's decisions about a request as a whole (the others are the
// policy's: policy.RuleMCPProtocol, RuleMCPUnlisted, RuleMCPUnknownMethod, and a rule's own
// "mcp:<endpoint>:<rule>").
const (
	// RuleMCPAmbiguous: a body (or a message of it) that two servers could read two ways
	// (mcp.Parse's findings): it asks, shown in red, and is never free.
	RuleMCPAmbiguous = "mcp:ambiguous"
	// RuleMCPHeader: the Mcp-Method or Mcp-Name header says another call than the body
	// (mcp.CheckHeaders): refused, E_FLOOR.
	RuleMCPHeader = "mcp:header"
	// RuleMCPPinChanged: a tool whose definition the gate pinned at first sight has changed, or
	// a name it did not list then: the call asks though a rule frees it.
	RuleMCPPinChanged = "mcp:pin-changed"
	// RuleMCPAnswer: an answer of an MCP server the gate must cut (a tools/list result) that it
	// cannot read one way only, or that is over its bounds: the gate answers with a refusal.
	RuleMCPAnswer = "mcp:answer"
)

// PinChange is what the gate saw of a tool's definition since it pinned the endpoint's tools
// (mcp.Pins).
type PinChange = mcp.PinChange

const (
	PinSame    = mcp.PinSame    // as pinned, or never listed
	PinChanged = mcp.PinChanged // listed since with another definition
	PinNew     = mcp.PinNew     // a name not pinned (a renamed or added tool)
)

// MCPPins says, for a tool of an endpoint, what the gate saw of its definition: the gate's
// state (mcp.Pins, which lockhttp explain reads from the gate's file with --mcp-pins; without
// it every tool is PinSame).
type MCPPins interface {
	Pin(e *policy.MCPEndpoint, tool string) PinChange
}

// MCPPinChanged is the decision of a call that a rule frees of a tool whose definition changed
// (ch PinChanged) or that was first listed after the endpoint's tools were pinned (PinNew): a
// human must approve; the approval takes the new definition as the tool's pin.
func MCPPinChanged(endpoint, tool string, ch PinChange) policy.Decision {
	what := "its definition (name, description, schemas or annotations) changed since the gate pinned it"
	if ch == PinNew {
		what = "the server did not list it when the gate pinned the endpoint's tools (a renamed or added tool)"
	}
	return policy.Decision{Verdict: policy.Ask, Rule: RuleMCPPinChanged,
		Reason: fmt.Sprintf("tools/call of %s on MCP endpoint %q: %s, so a human must approve before it runs", floor.Shown(tool, floor.MaxShown), endpoint, what)}
}

// MCPAnswerRefused is the refusal that replaces an answer to tools/list the gate cannot cut:
// one that parsers read in more than one way, an event over the size bound, a compressed one.
var MCPAnswerRefused = policy.Decision{Verdict: policy.Deny, Code: policy.CodeFloor, Rule: RuleMCPAnswer,
	Reason: "the MCP server's answer to tools/list could not be read one way only within the gate's bounds, so the gate cut it rather than pass tools it could not check"}

// MCP is what the MCP step read of a request to an [[mcp]] endpoint of the policy.
type MCP struct {
	// Endpoint is the [[mcp]] endpoint's name.
	Endpoint string
	// Batch reports a body that is an array of messages.
	Batch bool
	// Messages are the messages of a POST's body, in order, each with its decision; none for
	// a GET or a DELETE.
	Messages []MCPMessage
	// Decided is the index in Messages of the message whose decision is the request's (the
	// first of the most restrictive); -1 when the decision is about the request as a whole (a
	// GET, a header that contradicts the body, a body that cannot be read).
	Decided int
	// Findings say what makes the body or its headers ambiguous, escaped and masked.
	Findings []string
	// Fingerprint is the call's fingerprint (mcp.Call.Fingerprint) when the request is one
	// call: a POST, without a method override, of one request message with no finding. A
	// ticket for the request is keyed by it (Result.Fingerprint). Empty otherwise: a batch or
	// an ambiguous body is approved byte for byte.
	Fingerprint string
}

// MCPMessage is one message of an MCP body and its decision.
type MCPMessage struct {
	// Kind is the message's kind: "request", "notification", "response" or "invalid".
	Kind string
	// ID is the JSON-RPC id as written (mcp.ID), nil when there is none: what an answer to the
	// message names.
	ID mcp.ID
	// Method is the JSON-RPC method; Target what it acts on (a tool's name), when HasTarget.
	Method    string
	Target    string
	HasTarget bool
	// Arguments is the canonical JSON of params.arguments, nil when absent; Rest that of the
	// other members of params (mcp.Message.Rest).
	Arguments []byte
	Rest      []byte
	// Fingerprint is the fingerprint of the message as a call of the container to the
	// endpoint, for a request or a notification without a finding.
	Fingerprint string
	Decision    policy.Decision
}

// mcpProtocol are the methods that act on no tool or data of the server, free by default
// beside the protocol's notifications and the client's responses.
var mcpProtocol = map[string]bool{
	"initialize": true, "ping": true, "server/discover": true, "subscriptions/listen": true,
	"tools/list": true, "resources/list": true, "resources/templates/list": true, "prompts/list": true,
}

// kindOf is what the policy decides a well-read message as.
func kindOf(m *mcp.Message) policy.MCPMessage {
	switch {
	case m.Kind == mcp.Response:
		return policy.MCPMessage{Kind: policy.MCPProtocol, Method: "a response to the server's request"}
	case m.Method == "tools/call":
		return policy.MCPMessage{Kind: policy.MCPTool, Method: m.Method, Tool: m.Target}
	case mcpProtocol[m.Method] || mcp.Known(m.Method) && strings.HasPrefix(m.Method, "notifications/"):
		return policy.MCPMessage{Kind: policy.MCPProtocol, Method: m.Method}
	case mcp.Known(m.Method):
		return policy.MCPMessage{Kind: policy.MCPOther, Method: m.Method}
	}
	return policy.MCPMessage{Kind: policy.MCPUnknown, Method: m.Method}
}

// decideMCP is the MCP step for a request to endpoint e, whose body (decoded) is body: each
// method the request may be read as (its own, and an override's) is decided, the most
// restrictive winning. A POST's body is read with mcp.Parse and its Mcp-Method and Mcp-Name
// headers held to it (one that contradicts it is refused); each message is decided by the
// policy (EvaluateMCP), one that a finding names asks in red, and the most restrictive message
// decides the batch. A GET (the server's event stream) or a DELETE (the end of a session) that
// carries no body or mirror header is the protocol's own; one that carries a body asks in red.
// Any other method asks. It sets res.MCP, and res.Fingerprint for a request that is one call.
func decideMCP(p *policy.Policy, e *policy.MCPEndpoint, in *Checks, pins MCPPins, r *Request, res *Result, body []byte) policy.Decision {
	m := &MCP{Endpoint: e.Name, Decided: -1}
	res.MCP = m
	mask := func(s string) string {
		if in != nil && in.Secrets != nil {
			return in.Secrets.MaskText(s)
		}
		return s
	}
	var best policy.Decision
	set := false
	consider := func(d policy.Decision, idx int) {
		if !set || d.Verdict > best.Verdict {
			best, set, m.Decided = d, true, idx
		}
	}
	ambiguous := func(finding string) policy.Decision {
		res.Red = true
		return policy.Decision{Verdict: policy.Ask, Rule: RuleMCPAmbiguous,
			Reason: fmt.Sprintf("the MCP body to endpoint %q can be read more than one way, so a human must look: %s", e.Name, finding)}
	}
	methods := []string{r.Method}
	if r.Override != "" && r.Override != r.Method {
		methods = append(methods, r.Override)
	}
	parsed := false
	for _, hm := range methods {
		switch hm {
		case http.MethodPost:
			if parsed {
				continue
			}
			parsed = true
			decideMCPBody(p, e, pins, r, res, body, mask, consider, ambiguous)
		case http.MethodGet, http.MethodDelete:
			what := "GET (the server's event stream)"
			if hm == http.MethodDelete {
				what = "DELETE (the end of the session)"
			}
			switch {
			case len(headerValuesFold(r.Header, mcp.HeaderMethod))+len(headerValuesFold(r.Header, mcp.HeaderName)) > 0:
				f := fmt.Sprintf("%s or %s on a %s, which carries no message", mcp.HeaderMethod, mcp.HeaderName, hm)
				m.Findings = append(m.Findings, f)
				consider(policy.Decision{Verdict: policy.Deny, Code: policy.CodeFloor, Rule: RuleMCPHeader,
					Reason: fmt.Sprintf("the request's MCP headers say another call than its body: %s", f)}, -1)
			case len(body) > 0 || r.BodySize > 0:
				f := fmt.Sprintf("a %s that carries a body: a server could read it as a message", hm)
				m.Findings = append(m.Findings, f)
				res.Findings = append(res.Findings, f)
				consider(ambiguous(f), -1)
			default:
				consider(p.EvaluateMCP(e, res.Container, policy.MCPMessage{Kind: policy.MCPProtocol, Method: what}), -1)
			}
		default:
			consider(p.EvaluateMCP(e, res.Container, policy.MCPMessage{Kind: policy.MCPUnknown, Method: hm}), -1)
		}
	}
	if len(methods) > 1 {
		m.Fingerprint = "" // decided as two methods: approved byte for byte
	}
	res.Fingerprint = m.Fingerprint
	return best
}

// decideMCPBody decides the messages of a POST's body (see decideMCP).
func decideMCPBody(p *policy.Policy, e *policy.MCPEndpoint, pins MCPPins, r *Request, res *Result, body []byte,
	mask func(string) string, consider func(policy.Decision, int), ambiguous func(string) policy.Decision) {
	m := res.MCP
	b := mcp.Parse(body)
	m.Batch = b.Batch
	hf := mcp.CheckHeaders(r.Header, b)
	for _, f := range append(hf, b.Findings...) {
		text := mask(findingText(b, f))
		m.Findings = append(m.Findings, text)
		res.Findings = append(res.Findings, text)
	}
	if len(hf) > 0 {
		consider(policy.Decision{Verdict: policy.Deny, Code: policy.CodeFloor, Rule: RuleMCPHeader,
			Reason: "the request's MCP headers say another call than its body: " + m.Findings[0]}, -1)
	}
	endpoint := e.Name
	if r.Query != "" {
		// What the server reads besides the body: a call with another query is another call.
		endpoint += "?" + r.Query
	}
	first := func(i int) string {
		for _, f := range b.Findings {
			if f.Message == i || f.Message == -1 {
				return mask(findingText(b, f))
			}
		}
		return "the body cannot be read"
	}
	for i := range b.Messages {
		msg := &b.Messages[i]
		mm := MCPMessage{Kind: msg.Kind.String(), ID: msg.ID, Method: msg.Method, Target: msg.Target, HasTarget: msg.HasTarget,
			Arguments: msg.Arguments, Rest: msg.Rest}
		var d policy.Decision
		switch {
		case msg.Ambiguous || msg.Kind == mcp.Invalid:
			d = ambiguous(first(i))
		default:
			d = p.EvaluateMCP(e, res.Container, kindOf(msg))
			if d.Verdict == policy.Free && msg.Method == "tools/call" && pins != nil {
				if ch := pins.Pin(e, msg.Target); ch != PinSame {
					d = MCPPinChanged(e.Name, msg.Target, ch)
				}
			}
			if msg.Kind == mcp.Request || msg.Kind == mcp.Notification {
				mm.Fingerprint = msg.Call(res.Container, endpoint).Fingerprint()
			}
		}
		if b.Batch {
			d.Reason = fmt.Sprintf("message %d of the batch of %d: %s", i+1, len(b.Messages), d.Reason)
		}
		mm.Decision = d
		m.Messages = append(m.Messages, mm)
		consider(d, i)
	}
	if len(b.Findings) > 0 {
		consider(ambiguous(first(-1)), -1) // never free, whatever the messages read decided
	}
	if !b.Batch && len(b.Messages) == 1 && len(b.Findings) == 0 && len(hf) == 0 && b.Messages[0].Kind == mcp.Request {
		m.Fingerprint = m.Messages[0].Fingerprint
	}
}

// findingText is a finding as a reason or a ticket says it: which message of a batch it names.
func findingText(b *mcp.Body, f mcp.Finding) string {
	if b.Batch && f.Message >= 0 {
		return fmt.Sprintf("message %d of the batch: %s", f.Message+1, f.Text)
	}
	return f.Text
}

// headerValuesFold is every value of the header name, whatever its case in h.
func headerValuesFold(h http.Header, name string) []string {
	var vs []string
	for k, v := range h {
		if strings.EqualFold(k, name) {
			vs = append(vs, v...)
		}
	}
	return vs
}
