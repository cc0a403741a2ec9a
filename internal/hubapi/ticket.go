// Package hubapi is what crosses the hub's sockets, imported alike by the hub, the gate's client
// and the facades so that no client links the hub's tickets, state or signing key: the ticket,
// the gate's ask and the hub's answer, the signed decision and its check, the gate's reports (a
// leave, the requests it holds and those a restart cut, its state), the events and the facades'
// requests.
package hubapi

// The gate's routes (its token):
//
//	POST /v1/gate/ask       AskRequest → AskAnswer
//	POST /v1/gate/claim     ClaimRequest → SignedDecision
//	POST /v1/gate/leave     LeaveRequest
//	POST /v1/gate/holdings  Holdings
//	POST /v1/gate/state     GateState
//	POST /v1/gate/issued    Issued (a Claude login the gate saw issued to a container)
//	GET  /v1/gate/tickets/{id} → Ticket
//	POST /v1/gate/tickets   TicketsRequest → []Ticket, those no longer pending
//	POST /v1/gate/rule      RuleRequest → Ticket (an agent's request for a rule, KindRule)
//	GET  /v1/gate/asks?container=C → []Ticket, the container's own (at most MaxAsksListed)
//	GET  /v1/gate/events    → one JSON Event per line, an empty line every 15 s
//
// The facades' routes (a facade's token):
//
//	GET  /v1/tickets        → []Ticket, pending, a page at a time (?limit=, ?cursor= HeaderNext)
//	GET  /v1/tickets/{id}   → Ticket
//	GET  /v1/recent         → []Ticket, decided and expired
//	GET  /v1/state          → GateState
//	POST /v1/tickets/{id}/approve, /deny  DecideRequest → Ticket
//
// A refusal on either is an ErrorResponse with a 4xx status.

import (
	"time"

	"github.com/lockhttp/lockhttp/internal/display"
)

// Status is where a ticket stands.
type Status string

// Ticket statuses.
const (
	Pending  Status = "pending"
	Approved Status = "approved"
	Denied   Status = "denied"
	Expired  Status = "expired"
)

// Kinds of tickets.
const (
	KindRequest = "request" // one request, decided by its fingerprint
	KindConnect = "connect" // a CONNECT decided at the domain: approval opens container × host × port
	// KindRule (rule.go): an agent's request for a rule, with its reason.
)

// Header is one header line as a human sees it (masked, escaped).
type Header struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Ticket is one held request (or a group of identical ones) waiting for a human.
type Ticket struct {
	ID          string    `json:"id"`
	Kind        string    `json:"kind"`
	Container   string    `json:"container"`
	Agent       string    `json:"agent,omitempty"`
	Method      string    `json:"method"`
	URL         string    `json:"url"`
	Headers     []Header  `json:"headers,omitempty"`
	BodyPreview string    `json:"body_preview,omitempty"`
	BodySize    int64     `json:"body_size"`
	Rule        string    `json:"rule"`
	Reason      string    `json:"reason"`
	Fingerprint string    `json:"fingerprint"`
	Created     time.Time `json:"created"`
	Expires     time.Time `json:"expires"`
	// NeverAuto is true for every gate ticket: no facade, flag or setting approves it without a
	// human.
	NeverAuto bool `json:"never_auto"`
	// Warning is shown with the ticket, prominently (a CONNECT's "reads and writes both pass,
	// unseen"; a Claude API call that hands Anthropic a tool).
	Warning string `json:"warning,omitempty"`
	// Red asks facades to show the ticket in red.
	Red bool `json:"red,omitempty"`
	// Host and Port are a CONNECT's target; Grant is how long its approval opens it.
	Host  string        `json:"host,omitempty"`
	Port  int           `json:"port,omitempty"`
	Grant time.Duration `json:"grant,omitempty"`
	// Bind is the Claude credential an approval binds to the container, or nil.
	Bind *Bind `json:"bind,omitempty"`
	// MCP is the MCP call the ticket asks about, or nil: a request to an [[mcp]] endpoint of
	// the policy that is one call, keyed by the call's fingerprint ("mcp1:") rather than its
	// bytes, so that an approval frees that call with those arguments once, whatever its id.
	MCP *MCPCall `json:"mcp,omitempty"`
	// RuleAsk is an agent's request for a rule, on a KindRule ticket; nil on every other kind.
	RuleAsk *RuleAsk `json:"rule_ask,omitempty"`

	Status   Status    `json:"status"`
	Decision *Decision `json:"decision,omitempty"`
	// Holders is how many requests are held on the ticket now.
	Holders int `json:"holders"`
	// Gone says why no request is held on a pending ticket any more (Holders 0): GoneRestart or
	// GoneLeft; "" while requests are held, or when the hub does not know (after its own
	// restart). A request that joins the ticket clears it.
	Gone string `json:"gone,omitempty"`
	// Cut counts the requests held on the ticket that a restart of the gate cut (a stop: they
	// were answered E_PENDING; a kill: they got no answer). Each has its record in the gate's
	// audit, written by the gate that stopped or by its next start.
	Cut int `json:"cut,omitempty"`
	// Waiting says in words, for a facade, that no request waits on the ticket and what
	// approving it then does (or, once approved, what the approval did); "" while requests are
	// held. The hub fills it on every copy it hands out (see waitingText).
	Waiting string `json:"waiting,omitempty"`
	// Uses is how many requests an approval still lets through (the held ones, or one retry).
	Uses int `json:"uses"`
	// Reported marks an expired ticket whose expiry a retry has been told (E_TIMEOUT) once.
	Reported bool `json:"reported,omitempty"`
}

// MCPCall is the MCP call a ticket asks about, as a human reads it.
type MCPCall struct {
	// Server is the name of the policy's [[mcp]] endpoint the call goes to.
	Server string `json:"server"`
	// Method is the JSON-RPC method ("tools/call"); Tool what it acts on (the tool's name).
	Method string `json:"method"`
	Tool   string `json:"tool,omitempty"`
	// Arguments are the call's arguments as the fingerprint covers them (canonical JSON),
	// pretty-printed, credentials masked, escaped for display; "" when it has none. Params are
	// the rest of its params likewise ("" when none).
	Arguments string `json:"arguments,omitempty"`
	Params    string `json:"params,omitempty"`
}

// Decision is a human's answer.
type Decision struct {
	Verdict Status    `json:"verdict"` // Approved or Denied
	By      string    `json:"by"`      // facade and name: "terminal:alice", "cli:root", "phone:pixel-7"
	Reason  string    `json:"reason,omitempty"`
	At      time.Time `json:"at"`
	// Released is how many held requests an approval let through (the ticket's Holders then);
	// 0: none was waiting, and the approval stands for one identical retry within the hub's
	// authorisation window.
	Released int `json:"released"`
}

// Why no request is held on a pending ticket any more (Ticket.Gone).
const (
	// GoneRestart: the gate stopped or was killed while its requests were held.
	GoneRestart = "restart"
	// GoneLeft: the hold ended (the agent was told E_PENDING, to retry), or the client went away.
	GoneLeft = "left"
)

// Event tells subscribers what changed.
type Event struct {
	Type   string     `json:"type"` // "ticket" (new or joined), "decided", "expired", "gate", "limit"
	Ticket *Ticket    `json:"ticket,omitempty"`
	Gate   *GateState `json:"gate,omitempty"`
	// Limit is set on a "limit" event: a container has as many pending tickets as it may, and
	// its new asks are refused (E_ASK_LIMIT) until a human answers some.
	Limit *Limit `json:"limit,omitempty"`
}

// Limit says that a container reached its pending-ticket bound.
type Limit struct {
	Container string `json:"container"`
	Pending   int    `json:"pending"`
}

// GateState is what the gate reports about itself, for the facades' at-a-glance view.
type GateState struct {
	PolicyVersion string    `json:"policy_version"`
	Signer        string    `json:"signer"` // "off", "ok" or the error
	Audit         string    `json:"audit"`  // "ok" or the error
	Listen        string    `json:"listen"`
	Reported      time.Time `json:"reported"` // when the hub heard from the gate last
	// Budgets are the containers near or over a [[budget]] of the policy, the most pressing
	// first.
	Budgets []GateBudget `json:"budgets,omitempty"`
}

// GateBudget is a container near or over one budget.
type GateBudget struct {
	Budget    string `json:"budget"`
	Container string `json:"container"`
	Percent   int    `json:"percent"` // the largest share of a limit used
	Refused   int64  `json:"refused"` // requests refused in the last hour
}

// Escaped is t as a facade shows it: every text field through display.Escape, the body preview
// keeping its line breaks. The gate escapes what it sends already; a facade escapes again (it
// changes nothing then) so that nothing else that reaches the hub is shown raw. Decide with the
// ID and the fingerprint of t, not of its Escaped copy.
func (t Ticket) Escaped() Ticket {
	e := func(s string) string { return display.Escape(s, false) }
	t.ID, t.Kind, t.Container, t.Agent, t.Method, t.URL = e(t.ID), e(t.Kind), e(t.Container), e(t.Agent), e(t.Method), e(t.URL)
	t.Rule, t.Reason, t.Fingerprint, t.Warning, t.Host = e(t.Rule), e(t.Reason), e(t.Fingerprint), e(t.Warning), e(t.Host)
	t.Status = Status(e(string(t.Status)))
	t.Gone, t.Waiting = e(t.Gone), e(t.Waiting)
	t.BodyPreview = display.Escape(t.BodyPreview, true)
	if t.Headers != nil {
		hs := make([]Header, len(t.Headers))
		for i, h := range t.Headers {
			hs[i] = Header{Name: e(h.Name), Value: e(h.Value)}
		}
		t.Headers = hs
	}
	if t.Decision != nil {
		d := *t.Decision
		d.Verdict, d.By, d.Reason = Status(e(string(d.Verdict))), e(d.By), e(d.Reason)
		t.Decision = &d
	}
	if t.MCP != nil {
		c := *t.MCP
		c.Server, c.Method, c.Tool = e(c.Server), e(c.Method), e(c.Tool)
		c.Arguments, c.Params = display.Escape(c.Arguments, true), display.Escape(c.Params, true)
		t.MCP = &c
	}
	if t.RuleAsk != nil {
		r := t.RuleAsk.Escaped()
		t.RuleAsk = &r
	}
	return t
}

// Escaped is g as a facade shows it: every text field through display.Escape.
func (g GateState) Escaped() GateState {
	e := func(s string) string { return display.Escape(s, false) }
	g.PolicyVersion, g.Signer, g.Audit, g.Listen = e(g.PolicyVersion), e(g.Signer), e(g.Audit), e(g.Listen)
	if g.Budgets != nil {
		bs := make([]GateBudget, len(g.Budgets))
		for i, b := range g.Budgets {
			b.Budget, b.Container = e(b.Budget), e(b.Container)
			bs[i] = b
		}
		g.Budgets = bs
	}
	return g
}

// AskRequest is what the gate sends when the policy asks.
type AskRequest struct {
	Kind        string        `json:"kind"`
	Container   string        `json:"container"`
	Agent       string        `json:"agent,omitempty"`
	Method      string        `json:"method"`
	URL         string        `json:"url"`
	Headers     []Header      `json:"headers,omitempty"`
	BodyPreview string        `json:"body_preview,omitempty"`
	BodySize    int64         `json:"body_size"`
	Rule        string        `json:"rule"`
	Reason      string        `json:"reason"`
	Fingerprint string        `json:"fingerprint"`
	Warning     string        `json:"warning,omitempty"`
	Red         bool          `json:"red,omitempty"`
	Host        string        `json:"host,omitempty"`
	Port        int           `json:"port,omitempty"`
	Grant       time.Duration `json:"grant,omitempty"`
	Bind        *Bind         `json:"bind,omitempty"`
	// MCP is the MCP call the request is, when the ticket is keyed by its call (Ticket.MCP).
	MCP *MCPCall `json:"mcp,omitempty"`
	// MaxPending is how many pending tickets the container may have (the policy's
	// max_pending); past it a request that would open a new ticket is OutcomeLimit. Zero: no
	// bound from the gate (the hub's own, maxPendingAll, still holds).
	MaxPending int `json:"max_pending,omitempty"`
}

// Bind is what approving a ticket binds: a Claude credential, by its SHA-256 hex (never the
// credential), to the container that sent it. The console keeps the binding
// (console.(*Console).Bind); the gate then lets the container send it without asking.
type Bind struct {
	Container string `json:"container"`
	Hash      string `json:"hash"`
}

// Issued is a Claude login the gate saw issued to a container: the answer of Anthropic's OAuth
// token endpoint to the container's request, decrypted inside its tunnel. The console binds it
// (console.(*Console).BindIssued) without a ticket. Only its SHA-256 hex crosses.
type Issued struct {
	Container string `json:"container"`
	Hash      string `json:"hash"`
	// Host is the host whose token endpoint issued it; Request is the gate's request id.
	Host    string `json:"host"`
	Request string `json:"request"`
}

// Outcomes of Ask.
const (
	OutcomePending  = "pending"  // hold the request and wait for the ticket's decision
	OutcomeApproved = "approved" // go: an approval (or a CONNECT grant) covers it, and one use was taken
	OutcomeDenied   = "denied"   // refuse with the human's reason
	OutcomeExpired  = "expired"  // the ticket expired unanswered: E_TIMEOUT, once
	OutcomeLimit    = "limit"    // no new ticket: the container has MaxPending pending (E_ASK_LIMIT)
)

// AskAnswer is the hub's answer to Ask.
type AskAnswer struct {
	Outcome string          `json:"outcome"`
	Ticket  Ticket          `json:"ticket"`
	Signed  *SignedDecision `json:"signed,omitempty"` // with approved and denied
}
