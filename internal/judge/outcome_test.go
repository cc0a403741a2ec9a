package judge

import (
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/policy"
)

// TestOutcomes: each outcome the gate reports past Decide, as the agent and the audit read it.
func TestOutcomes(t *testing.T) {
	ask := policy.Decision{Verdict: policy.Ask, Code: policy.CodePending, Rule: "writes", Reason: `rule "writes" (ask)`}
	const noOne = `rule "writes" (ask); no console is running to ask a human, so it is refused`
	for _, c := range []struct {
		name       string
		got        policy.Decision
		verdict    policy.Verdict
		code       policy.Code
		rule, want string
	}{
		{"no console", NoConsole(ask), policy.Ask, policy.CodeNoConsole, "writes", noOne},
		{"stopping", Stopping(ask), policy.Ask, policy.CodeNoConsole, "writes", noOne + " (the gate is stopping: send the request again once it is back)"},
		{"hub failed", HubFailed(ask), policy.Ask, policy.CodeNoConsole, "writes", noOne + " (the hub did not answer)"},
		{"held full", HeldFull(ask, "c1", 2, 3), policy.Ask, policy.CodeBusy, "writes",
			`rule "writes" (ask); and c1 (or the gate) already has as many requests held for a human as the gate holds at once (2 per container, 3 in all), so this one is not held; send it again later`},
		{"ask limit", AskLimit(ask, "c1", 4), policy.Ask, policy.CodeAskLimit, "writes",
			`rule "writes" (ask); and c1 already has 4 requests waiting for a human (max_pending), so no new ticket is opened`},
		{"restarting", Restarting(ask, "t-1"), policy.Ask, policy.CodePending, "writes",
			`rule "writes" (ask); the gate is restarting, so the request waits no longer: send it again, it waits on ticket t-1`},
		{"client gone", ClientGone("writes"), policy.Ask, policy.CodePending, "writes", "the client went away while the request waited for a human"},
		{"held", Held(ask, "t-1", 2*time.Minute), policy.Ask, policy.CodePending, "writes", `rule "writes" (ask); waiting for a human on ticket t-1 (held 2m0s)`},
		{"claim failed", ClaimFailed("writes", "t-1"), policy.Ask, policy.CodePending, "writes", "the decision on ticket t-1 could not be taken; send the request again"},
		{"still pending", StillPending("writes", "t-1"), policy.Ask, policy.CodePending, "writes", "ticket t-1 is still pending"},
		{"denied", Denied("writes", ""), policy.Ask, policy.CodeDenied, "writes", "a human denied it"},
		{"denied, escaped", Denied("writes", "no\x1b[31m"), policy.Ask, policy.CodeDenied, "writes", `a human denied it: no\x1b[31m`},
		{"timed out", TimedOut("writes", "t-1"), policy.Ask, policy.CodeTimeout, "writes", "ticket t-1 expired before a human answered"},
		{"heuristics denied", AskRefused(RuleHeuristics, Denied(RuleHeuristics, "")), policy.Ask, policy.CodeExfilSuspect, RuleHeuristics, "a human denied it"},
		{"heuristics, no one to ask", AskRefused(RuleHeuristics, NoConsole(policy.Decision{Verdict: policy.Ask, Rule: RuleHeuristics, Reason: "r"})),
			policy.Ask, policy.CodeExfilSuspect, RuleHeuristics, "r; no console is running to ask a human, so it is refused"},
		{"a rule's denial stays", AskRefused("writes", Denied("writes", "")), policy.Ask, policy.CodeDenied, "writes", "a human denied it"},
		{"heuristics timed out stays", AskRefused(RuleHeuristics, TimedOut(RuleHeuristics, "t")), policy.Ask, policy.CodeTimeout, RuleHeuristics, "ticket t expired before a human answered"},
		{"sni", SNI("other.test", "api.test", "the CONNECT host"), policy.Deny, policy.CodeFloor, "floor:sni", `the TLS server name "other.test" is not the CONNECT host "api.test"`},
		{"no sni", SNI("", "api.test", "the CONNECT host"), policy.Deny, policy.CodeFloor, "floor:sni", `the client sent no TLS server name (SNI); it must name the CONNECT host "api.test"`},
		{"unsignable", Unsignable("a.test", "refused to sign"), policy.Deny, policy.CodeFloor, "floor:unsignable",
			`the signer will not issue a certificate for "a.test" (refused to sign); list the host under splice to let it through undecrypted`},
		{"pinned", Pinned(), policy.Verdict(0), policy.CodePinned, "", "the client rejected the gate's certificate"},
		{"websocket frame", WebSocketFrame("a frame"), policy.Deny, policy.CodeFloor, "websocket:frame", "a frame; the gate reads every message of a WebSocket and closes one it cannot read"},
		{"body late", BodyLate(time.Second, 3), policy.Deny, policy.CodeBodyTimeout, RuleBodyTimeout, "the body did not arrive within body_timeout (1s; 3 bytes had)"},
		{"body slow", BodySlow(1024, 3, 1500*time.Microsecond), policy.Deny, policy.CodeBodyTimeout, RuleBodyTimeout,
			"the body arrived slower than body_min_rate (1024 bytes per second; 3 bytes in 2ms)"},
		{"body stalled", BodyStalled(time.Second, 3), policy.Deny, policy.CodeBodyTimeout, RuleBodyTimeout, "the body stalled: nothing arrived for 1s (3 bytes had)"},
	} {
		d := c.got
		if d.Verdict != c.verdict || d.Code != c.code || d.Rule != c.rule || d.Reason != c.want {
			t.Errorf("%s: %v %s %q %q, want %v %s %q %q", c.name, d.Verdict, d.Code, d.Rule, d.Reason, c.verdict, c.code, c.rule, c.want)
		}
	}
}
