package judge

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/lockhttp/lockhttp/internal/floor"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/secrets"
)

// Message is one WebSocket message going from the agent to the origin after an upgrade the gate
// let through (its frames unmasked, its fragments reassembled): decided by DecideMessage.
type Message struct {
	Container string
	// Host is the host the upgrade went to, normalised.
	Host string
	// Kind is "text", "binary", "close", "ping" or "pong".
	Kind    string
	Payload []byte
	// Size is what the message's frames took as the agent sent them, headers included (an
	// empty frame costs at least 6 bytes): what counts against the budgets' bytes_up_per_hour.
	// It is never less than what the gate sends on for the message, one frame in the shortest
	// encoding. Less than the payload's length (zero, as from a caller without frames): the
	// payload's length.
	Size int64
}

// Rule names of the decisions about WebSocket sessions and their messages.
const (
	RuleWebSocket          = "websocket"
	RuleWebSocketExtension = "websocket:extension"
)

// DecideMessage decides one message the agent sends through a WebSocket: refused when the
// secret checks cannot run, when it carries a credential that does not belong to the host or
// the value of a secret the gate injects (E_SECRET_EGRESS, as in a request's body), or when its
// Size would pass a budget's bytes_up_per_hour (E_BUDGET; it is counted when it fits);
// FREE otherwise. The gate closes the socket on a refusal. It does no I/O.
func DecideMessage(env *Env, m *Message) policy.Decision {
	d := decideMessage(env, m)
	if d.Verdict != policy.Free && env.Checks != nil && env.Checks.Secrets != nil {
		d.Reason = env.Checks.Secrets.MaskText(d.Reason)
	}
	return d
}

func decideMessage(env *Env, m *Message) policy.Decision {
	if env.Policy == nil {
		return DecisionNoPolicy
	}
	if env.AuditErr != nil {
		return DecisionNoAudit
	}
	if d, ok := unchecked(env.Checks); ok {
		return d
	}
	if len(m.Payload) > 0 {
		sr := &secrets.Request{Host: m.Host, Body: m.Payload}
		if f := env.Checks.Secrets.Egress(sr); f != nil {
			where := strings.Replace(f.Where, "body", "a "+m.Kind+" message", 1)
			return policy.Decision{Verdict: policy.Deny, Code: policy.CodeSecretEgress, Rule: "secret:" + string(f.Kind),
				Reason: fmt.Sprintf("%s (%s, %s) would go to %s through a WebSocket, which it does not belong to", credentialWords(f.Kind), where, f.Hash, floor.Shown(m.Host, floor.MaxShown))}
		}
	}
	if bs := env.Policy.BudgetsFor(m.Container, m.Host); len(bs) > 0 {
		if over := counter(env).TakeBytes(bs, m.Container, max(m.Size, int64(len(m.Payload)))); over != nil {
			return overBudget(Result{Container: m.Container, Host: m.Host}, over)
		}
	}
	return policy.Decision{Verdict: policy.Free, Rule: RuleWebSocket, Reason: "the message carries no credential that may not go to " + m.Host}
}

// DecideSwitch decides the origin's answer to a WebSocket upgrade the gate let through: an
// answer that turns on an extension (permessage-deflate, whose offer the gate removes from the
// upgrade: See) would hide the messages from DecideMessage, so it is refused.
func DecideSwitch(h http.Header) *policy.Decision {
	if ext := strings.TrimSpace(strings.Join(h.Values("Sec-Websocket-Extensions"), ",")); ext != "" {
		return &policy.Decision{Verdict: policy.Deny, Code: policy.CodeFloor, Rule: RuleWebSocketExtension,
			Reason: fmt.Sprintf("the origin turned on the WebSocket extension %s, which the upgrade did not offer; the gate reads every message and cannot read compressed or extended frames", floor.Shown(ext, 40))}
	}
	return nil
}
