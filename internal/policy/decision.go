// Package policy reads, checks, compiles and evaluates the lockhttp policy: which requests go out
// (FREE), wait for a human (ASK) or are refused (DENY).
package policy

import "encoding/json"

// Verdict is what happens to a request.
type Verdict uint8

// Verdicts, from least to most restrictive: a larger value wins.
const (
	Free Verdict = iota
	Ask
	Deny
)

func (v Verdict) String() string {
	switch v {
	case Free:
		return "FREE"
	case Ask:
		return "ASK"
	case Deny:
		return "DENY"
	}
	return "UNKNOWN"
}

// MarshalJSON writes the verdict as its name.
func (v Verdict) MarshalJSON() ([]byte, error) { return json.Marshal(v.String()) }

// Code is the X-LockHTTP-Code of a refusal; the empty code goes with FREE and with an ASK that
// has not been refused yet.
type Code string

// The codes, as docs/codes.md lists them.
const (
	CodePending       Code = "E_PENDING"
	CodeNoConsole     Code = "E_NO_CONSOLE"
	CodeDenied        Code = "E_DENIED"
	CodeTimeout       Code = "E_TIMEOUT"
	CodeRule          Code = "E_RULE"
	CodeFloor         Code = "E_FLOOR"
	CodeSecretEgress  Code = "E_SECRET_EGRESS"
	CodeBodyTooLarge  Code = "E_BODY_TOO_LARGE"
	CodeSourceUnknown Code = "E_SOURCE_UNKNOWN"
	CodeInject        Code = "E_INJECT"
	CodeExfilSuspect  Code = "E_EXFIL_SUSPECT"
	CodePinned        Code = "E_PINNED"
	// CodeNoSigner: the host is to be decrypted and the signer cannot be reached.
	CodeNoSigner Code = "E_NO_SIGNER"
	// CodeNoAudit: the gate cannot write its audit, so nothing goes out.
	CodeNoAudit Code = "E_NO_AUDIT"
	// CodeBodyTimeout: the request body stalled, or arrived slower than body_min_rate, or not
	// within body_timeout.
	CodeBodyTimeout Code = "E_BODY_TIMEOUT"
	// CodeBusy: the gate holds as many request bytes for decisions (bodies, open HTTP/2
	// streams' headers) as held_limit or held_per_container allow.
	CodeBusy Code = "E_BUSY"
	// CodeAskLimit: the container has max_pending tickets waiting for a human.
	CodeAskLimit Code = "E_ASK_LIMIT"
	// CodeBudget: the container has used up a [[budget]] of the policy for now.
	CodeBudget Code = "E_BUDGET"
)

// Advice is what a refusal with this code tells the agent to do next.
func (c Code) Advice() string {
	switch c {
	case CodePending:
		return "A human has not answered yet. Retry the same request in a few seconds (the Retry-After header says how many): it waits on the same ticket, and passes once a human approves it."
	case CodeNoConsole:
		return "No console is running to ask a human (or the gate has not received its policy yet), so every request that needs approval is refused at once. Ask the user to run `lox run`, and retry only once it runs: until then every retry is refused the same way."
	case CodeDenied:
		return "A human denied this request. Do not retry it; ask the user."
	case CodeTimeout:
		return "Nobody answered in time and the ticket expired. You may retry at once: the same request then asks a human again, on a new ticket."
	case CodeRule:
		return "The policy refuses this request. Do not retry it; ask the user to change the rule if it is needed."
	case CodeFloor:
		return "The network floor refuses this whatever the policy says. Use a named public host on port 80 or 443."
	case CodeSecretEgress:
		return "The request carries a credential it may not send: one that belongs to another host, or a Claude credential that is not this container's. Never send a credential to a host it does not belong to; ask the user."
	case CodeBodyTooLarge:
		return "The body is larger than the gate can hold or inspect. Send less, or ask the user for a rule."
	case CodeSourceUnknown:
		return "The gate cannot tell which container sent this. Use the proxy address you were given."
	case CodeInject:
		return "The gate is meant to add a credential for this host and cannot: the request is plain http:// and the gate sends the credential over https only (use https://), or its secrets file lacks the secret or does not load (ask the user to put it there: for the Claude API, lox run --claude-key-file FILE, or lockhttp secrets add anthropic --secrets FILE). Never send the credential yourself."
	case CodeExfilSuspect:
		return "The request looks like data leaving the machine and was refused. Ask the user."
	case CodePinned:
		return "The client rejected the gate's certificate."
	case CodeNoAudit:
		return "The gate cannot write its audit, so nothing goes out until it can. Ask the user to check the gate (disk space, the audit directory); retry after the Retry-After seconds, and once it is fixed the request passes."
	case CodeBodyTimeout:
		return "The request body stalled or arrived too slowly, so the gate stopped reading it. Send the whole body at once, at a steady rate, and retry."
	case CodeBusy:
		return "The gate holds as many requests and bodies for decisions as it may (for all containers, or for this one). Retry after the Retry-After seconds, with fewer requests (and fewer large ones) at once."
	case CodeAskLimit:
		return "This container already has as many requests waiting for a human as it may. Wait for the human to answer those (retry the same requests: they wait on their tickets) before you send new ones that need approval."
	case CodeNoSigner:
		return "The gate decrypts this host and its certificate signer is not running, so it refuses the connection rather than pass it unseen. Ask the user to check the signer (lox run starts it); retry after the Retry-After seconds, and once it runs the request passes."
	case CodeBudget:
		return "This container has used up its budget in the policy for now (requests a minute, bytes sent an hour, or new hosts an hour). Slow down: wait the Retry-After seconds before sending again, and do not retry sooner, since every request counts. If the work needs more, ask the user to raise the budget."
	}
	return "Ask the user."
}

// Decision is the outcome of evaluating one request: the verdict, the code when it is a refusal,
// the rule that decided (a rule name, or one of the built-in names such as "trusted", "default",
// "deny", "source" and "floor:<check>") and the reason in words.
type Decision struct {
	Verdict Verdict `json:"verdict"`
	Code    Code    `json:"code"`
	Rule    string  `json:"rule"`
	Reason  string  `json:"reason"`
	// RetryAfter is, for a refusal that passes later by itself (E_BUDGET), the seconds until it
	// can; zero: the code's own Retry-After, or none.
	RetryAfter int `json:"retry_after,omitempty"`
}

// Built-in rule names used in decisions.
const (
	RuleDenyList = "deny"
	RuleTrusted  = "trusted"
	RuleDefault  = "default"
	RuleSource   = "source"
)
