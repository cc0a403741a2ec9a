package hubapi

import "github.com/lockhttp/lockhttp/internal/display"

// KindRule is a ticket of an agent's own request for a rule (POST /v1/gate/rule): not a request
// held, but a proposed change of the policy with the agent's reason. Approving it does not apply
// it: only the console's terminal takes it into the policy file, where it waits for :review like
// any loosening (docs/proposals.md, "The agent asks").
const KindRule = "rule"

// Bounds of an agent's request for a rule, checked by the gate and again by the hub.
const (
	// MaxRuleText bounds the proposed rule's TOML, in bytes.
	MaxRuleText = 2 << 10
	// MaxRuleReason bounds the agent's reason, in bytes.
	MaxRuleReason = 1 << 10
	// MaxRulePending bounds the pending rule tickets of one container; past it a new request is
	// refused until a human answers one.
	MaxRulePending = 5
	// MaxAsksListed bounds the tickets GET /v1/gate/asks answers for one container.
	MaxAsksListed = 100
)

// RuleAsk is what an agent asked for on a KindRule ticket.
type RuleAsk struct {
	// Rule is the rule as the console checked it, one [[rule]] block of the policy's TOML in
	// the console's own rendering; Diff is the change of the policy file that taking it makes.
	Rule string `json:"rule"`
	Diff string `json:"diff"`
	// Loosens is the console's comparison of the approved policy with the rule added: the one
	// loosening it finds.
	Loosens string `json:"loosens"`
	// AgentReason is the agent's reason, in its own words: untrusted text, always shown escaped
	// and marked as the agent's.
	AgentReason string `json:"agent_reason"`
	// Version is the approved policy's version the rule was checked against.
	Version string `json:"version"`
}

// RuleRequest is the body of the gate's POST /v1/gate/rule: the rule text and reason an agent
// sent, and the container the gate knows it by.
type RuleRequest struct {
	Container string `json:"container"`
	Agent     string `json:"agent,omitempty"`
	Rule      string `json:"rule"`
	Reason    string `json:"reason"`
}

// Escaped is r as a facade shows it: every field through display.Escape, the rule and the diff
// keeping their line breaks, the agent's reason on one line.
func (r RuleAsk) Escaped() RuleAsk {
	r.Rule, r.Diff = display.Escape(r.Rule, true), display.Escape(r.Diff, true)
	r.Loosens, r.AgentReason, r.Version = display.Escape(r.Loosens, false), display.Escape(r.AgentReason, false), display.Escape(r.Version, false)
	return r
}

// AgentWordsMark opens a text that is the agent's own, for every facade alike: what follows it
// to the end of the line was written by the agent and proves nothing. The agent's line breaks
// are shown escaped, so its words never reach another line.
const AgentWordsMark = "[the agent's own words, unverified] "

// AgentWords is s marked as the agent's (AgentWordsMark before it).
func AgentWords(s string) string { return AgentWordsMark + s }
