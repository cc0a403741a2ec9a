package judge

import (
	"fmt"
	"time"

	"github.com/lockhttp/lockhttp/internal/display"
	"github.com/lockhttp/lockhttp/internal/floor"
	"github.com/lockhttp/lockhttp/internal/policy"
)

// The outcomes the gate reports of its own, past Decide: what came of asking a human, of a
// tunnel's certificate and handshake, of a body or a WebSocket message the gate read, of a DNS
// query. Each is built here from fixed public text and values the agent may read (a rule name,
// a ticket id, a setting, a figure, a name quoted by floor.Shown). None takes an error: an
// internal cause (the hub's address and error, the signer's) goes to the gate's log and the
// record's detail, never into a reason.

// NoConsole turns an ASK into its refusal while no hub can ask a human.
func NoConsole(d policy.Decision) policy.Decision {
	d.Code = policy.CodeNoConsole
	d.Reason += "; no console is running to ask a human, so it is refused"
	return d
}

// Stopping is the refusal of the ASK d that arrives while the gate stops.
func Stopping(d policy.Decision) policy.Decision {
	d = NoConsole(d)
	d.Reason += " (the gate is stopping: send the request again once it is back)"
	return d
}

// HubFailed is the refusal of the ASK d that the hub did not take: what failed (the hub's
// address, the dial's error) is the gate's log's.
func HubFailed(d policy.Decision) policy.Decision {
	d = NoConsole(d)
	d.Reason += " (the hub did not answer)"
	return d
}

// AskRefused is a refused ASK (denied, or no one to ask) as the agent reads it: an ASK the
// exfiltration heuristics made is E_EXFIL_SUSPECT.
func AskRefused(rule string, d policy.Decision) policy.Decision {
	if rule == RuleHeuristics && (d.Code == policy.CodeDenied || d.Code == policy.CodeNoConsole) {
		d.Code = policy.CodeExfilSuspect
	}
	return d
}

// HeldFull is the refusal of the ASK d from container while the gate holds as many requests
// for a human as it may: perContainer for one container, all in all.
func HeldFull(d policy.Decision, container string, perContainer, all int) policy.Decision {
	return policy.Decision{Verdict: policy.Ask, Code: policy.CodeBusy, Rule: d.Rule,
		Reason: fmt.Sprintf("%s; and %s (or the gate) already has as many requests held for a human as the gate holds at once (%d per container, %d in all), so this one is not held; send it again later",
			d.Reason, container, perContainer, all)}
}

// AskLimit is the refusal of the ASK d from container, which has maxPending tickets waiting.
func AskLimit(d policy.Decision, container string, maxPending int) policy.Decision {
	return policy.Decision{Verdict: policy.Ask, Code: policy.CodeAskLimit, Rule: d.Rule,
		Reason: fmt.Sprintf("%s; and %s already has %d requests waiting for a human (max_pending), so no new ticket is opened", d.Reason, container, maxPending)}
}

// Restarting is the answer to the ASK d held on ticket when the gate's stop cut the hold.
func Restarting(d policy.Decision, ticket string) policy.Decision {
	return policy.Decision{Verdict: policy.Ask, Code: policy.CodePending, Rule: d.Rule,
		Reason: fmt.Sprintf("%s; the gate is restarting, so the request waits no longer: send it again, it waits on ticket %s", d.Reason, ticket)}
}

// ClientGone is the outcome of an ASK under rule whose client went away while it was held.
func ClientGone(rule string) policy.Decision {
	return policy.Decision{Verdict: policy.Ask, Code: policy.CodePending, Rule: rule, Reason: "the client went away while the request waited for a human"}
}

// Held is the answer to the ASK d held on ticket for hold without an answer.
func Held(d policy.Decision, ticket string, hold time.Duration) policy.Decision {
	return policy.Decision{Verdict: policy.Ask, Code: policy.CodePending, Rule: d.Rule,
		Reason: fmt.Sprintf("%s; waiting for a human on ticket %s (held %s)", d.Reason, ticket, hold)}
}

// ClaimFailed is the answer to an ASK under rule whose decision on ticket the gate could not
// take from the hub: why is the gate's log's.
func ClaimFailed(rule, ticket string) policy.Decision {
	return policy.Decision{Verdict: policy.Ask, Code: policy.CodePending, Rule: rule,
		Reason: "the decision on ticket " + ticket + " could not be taken; send the request again"}
}

// StillPending is the answer to an ASK under rule whose ticket is still pending.
func StillPending(rule, ticket string) policy.Decision {
	return policy.Decision{Verdict: policy.Ask, Code: policy.CodePending, Rule: rule, Reason: "ticket " + ticket + " is still pending"}
}

// Denied is the refusal of an ASK under rule that a human denied, with the human's reason
// (escaped), if any.
func Denied(rule, humanReason string) policy.Decision {
	why := "a human denied it"
	if humanReason != "" {
		why += ": " + display.Escape(humanReason, false)
	}
	return policy.Decision{Verdict: policy.Ask, Code: policy.CodeDenied, Rule: rule, Reason: why}
}

// TimedOut is the refusal of an ASK under rule whose ticket expired unanswered.
func TimedOut(rule, ticket string) policy.Decision {
	return policy.Decision{Verdict: policy.Ask, Code: policy.CodeTimeout, Rule: rule,
		Reason: "ticket " + ticket + " expired before a human answered"}
}

// DecisionNoSigner refuses a host the gate decrypts while its signer gives no certificate.
var DecisionNoSigner = policy.Decision{Verdict: policy.Deny, Code: policy.CodeNoSigner, Rule: "signer",
	Reason: "the gate decrypts this host and cannot get a certificate from its signer; it refuses rather than pass the tunnel unseen"}

// Unsignable refuses host, for which the signer refuses to issue a certificate with its public
// reason why.
func Unsignable(host, why string) policy.Decision {
	return policy.Decision{Verdict: policy.Deny, Code: policy.CodeFloor, Rule: "floor:unsignable",
		Reason: fmt.Sprintf("the signer will not issue a certificate for %q (%s); list the host under splice to let it through undecrypted", host, why)}
}

// SNI refuses a TLS handshake in a tunnel whose ClientHello's server name (serverName, "" for
// none) does not name host; what says what names host ("the CONNECT host").
func SNI(serverName, host, what string) policy.Decision {
	why := fmt.Sprintf("the TLS server name %s is not %s %s", floor.Shown(serverName, 64), what, floor.Shown(host, floor.MaxShown))
	if serverName == "" {
		why = "the client sent no TLS server name (SNI); it must name " + what + " " + floor.Shown(host, floor.MaxShown)
	}
	return policy.Decision{Verdict: policy.Deny, Code: policy.CodeFloor, Rule: "floor:sni", Reason: why}
}

// Pinned is what the record of a tunnel says when the client rejected the gate's certificate:
// the TLS library's words are the record's detail.
func Pinned() policy.Decision {
	return policy.Decision{Code: policy.CodePinned, Reason: "the client rejected the gate's certificate"}
}

// DecisionNoHost refuses a request in origin form that names no host.
var DecisionNoHost = policy.Decision{Verdict: policy.Deny, Code: policy.CodeFloor, Rule: "floor:origin-form", Reason: "the request names no host"}

// WebSocketFrame refuses a WebSocket frame the gate cannot follow; why is wsframe's fixed text.
func WebSocketFrame(why string) policy.Decision {
	return policy.Decision{Verdict: policy.Deny, Code: policy.CodeFloor, Rule: "websocket:frame",
		Reason: why + "; the gate reads every message of a WebSocket and closes one it cannot read"}
}

// The refusals of a WebSocket message the gate could not read in time.
var (
	DecisionMessageLate = BodyTimeout("a WebSocket message did not arrive whole within body_timeout; the gate holds a message only as long as it would a body")
	DecisionControlLate = BodyTimeout("a WebSocket control frame's payload did not arrive within 60 s of its header")
)

// BodyLate refuses a body that did not arrive within timeout; got bytes had arrived.
func BodyLate(timeout time.Duration, got int64) policy.Decision {
	return BodyTimeout(fmt.Sprintf("the body did not arrive within body_timeout (%s; %d bytes had)", timeout, got))
}

// BodySlow refuses a body that arrived slower than minRate bytes a second: got bytes in elapsed.
func BodySlow(minRate, got int64, elapsed time.Duration) policy.Decision {
	return BodyTimeout(fmt.Sprintf("the body arrived slower than body_min_rate (%d bytes per second; %d bytes in %s)", minRate, got, elapsed.Round(time.Millisecond)))
}

// BodyStalled refuses a body of which nothing arrived for stall; got bytes had arrived.
func BodyStalled(stall time.Duration, got int64) policy.Decision {
	return BodyTimeout(fmt.Sprintf("the body stalled: nothing arrived for %s (%d bytes had)", stall, got))
}

// The refusals of a body the gate would hold past held_per_container or held_limit.
var (
	DecisionHeldPerContainer = Busy(RuleHeldPerContainer, "this container's requests hold as many bytes for decisions (bodies, WebSocket messages, the headers of open HTTP/2 streams) as held_per_container allows")
	DecisionHeldLimit        = Busy(RuleHeldLimit, "the gate holds as many bytes for decisions (bodies, WebSocket messages, the headers of open HTTP/2 streams) as held_limit allows, for all containers together")
)

// Rule names and decisions of the gate's DNS answers.
var (
	DecisionDNS = policy.Decision{Verdict: policy.Free, Rule: "dns",
		Reason: "the gate answers every A query with its own address and every other query with none; it resolves nothing for an agent, so no name leaves the machine"}
	DecisionDNSRefused = policy.Decision{Verdict: policy.Deny, Code: policy.CodeFloor, Rule: "floor:dns",
		Reason: "the gate answers DNS queries of class IN with one question; ANY, zone transfers, other classes and opcodes are not implemented"}
)
