// Package judge runs the ordered checks of one request (source, floor, policy) and returns the
// decision the gate acts on; lockhttp explain runs the same code.
package judge

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/lockhttp/lockhttp/internal/budget"
	"github.com/lockhttp/lockhttp/internal/exfil"
	"github.com/lockhttp/lockhttp/internal/floor"
	"github.com/lockhttp/lockhttp/internal/framing"
	"github.com/lockhttp/lockhttp/internal/policy"
)

// Kind is what is being decided.
type Kind uint8

const (
	// Plain is a plain-HTTP proxy request (absolute-form URL).
	Plain Kind = iota
	// Domain is a CONNECT decided at the domain: the tunnel carries whatever the client sends.
	Domain
	// Tunnel is a request decrypted inside a CONNECT tunnel.
	Tunnel
)

func (k Kind) String() string {
	switch k {
	case Plain:
		return "plain"
	case Domain:
		return "connect"
	case Tunnel:
		return "tunnel"
	}
	return "unknown"
}

// Request is one request as the checks see it: the normalised view that See builds from an
// Arrival. The gate forwards exactly this (its Header is the header that goes out).
type Request struct {
	Kind Kind
	// Container is set when the caller already knows it (lockhttp explain); otherwise the
	// policy's [sources] name it from Source.
	Container string
	Source    netip.Addr
	// Method is the method in upper case; Sent is the spelling that arrived.
	Method string
	Sent   string
	// Override is the method an override header or a _method parameter names, when it differs
	// from Method: both are decided and the more restrictive decision wins.
	Override string
	// Scheme is "http" or "https"; it gives the default port of Authority.
	Scheme string
	// Authority is the URL's host[:port], or the CONNECT target host:port.
	Authority string
	// Path is the escaped URL path; empty for a CONNECT.
	Path string
	// Header is the end-to-end header: hop-by-hop headers and those Connection names removed.
	Header http.Header
	// Agent is the agent's name from Proxy-Authorization, for the audit only.
	Agent string
	// Upgrade is the Upgrade header that arrived (only a WebSocket upgrade passes).
	Upgrade string
	// UserInfo reports that the URL carried a user name or password.
	UserInfo bool
	// Query is the raw query string.
	Query string
	// MediaType is the Content-Type's media type, lower case.
	MediaType string
	// Body holds the request body, at most buffer_limit+1 bytes; BodySize is how many bytes the
	// gate read (over buffer_limit: too large to inspect).
	Body     []byte
	BodySize int64
	// Refusal is what See found the floor refuses in the request's shape, or nil.
	Refusal *policy.Decision
	// Transparent reports a request that reached one of the gate's transparent listeners, or
	// came inside a TLS connection to one (Arrival.Transparent, Binding.Transparent).
	Transparent bool
}

// Result is the decision and what the checks learnt on the way: the container and the
// normalised target.
type Result struct {
	policy.Decision
	Container string
	Host      string
	Port      int
	// Intercept reports a CONNECT to be decrypted (Decision is then FREE or a refusal of the
	// whole host).
	Intercept bool
	// Self reports a request for the gate's own name: the gate answers it, nothing goes out.
	Self bool
	// Inject is the credential to add when the request goes out, or nil.
	Inject *Inject
	// Bind is set on an ASK about a Claude credential the container is not bound to: approving
	// the request binds it (through the hub and the console).
	Bind *Bind
	// TokenAnswer reports a call of Anthropic's OAuth token endpoint decrypted inside a tunnel
	// (claudeapi.TokenEndpoint): the Claude login its answer issues was issued to Container, and
	// the gate binds it (claudeapi.IssuedToken) before the answer reaches the agent.
	TokenAnswer bool
	// NeverAuto, Red and Findings come from the Claude API checks and the heuristics: how a
	// ticket shows the request.
	NeverAuto bool
	Red       bool
	Findings  []string
	// Score is the exfiltration score, when the heuristics ran and it is above zero.
	Score *exfil.Score
	// MCP is what the MCP step read of a request to an [[mcp]] endpoint of the policy, or nil.
	MCP *MCP
	// Fingerprint is what a ticket for this request is keyed by, when the judge names it: an
	// MCP call's fingerprint (mcp1:), so that one approval frees that call with those arguments
	// whatever its JSON-RPC id. Empty: the request's bytes (fingerprint.Of of what the gate
	// forwards).
	Fingerprint string
}

// Memory is what the exfiltration heuristics remember of earlier requests; *exfil.Scorer is
// one. lockhttp explain passes a new, empty one.
type Memory interface {
	Score(r *exfil.Request) exfil.Score
}

// Budgets counts what each container sends against the policy's [[budget]] sections;
// *budget.Counter is one. lockhttp explain passes a new, empty one.
type Budgets interface {
	// Take counts a request of container to host that sends bytes against every budget in bs
	// if it fits them all, and otherwise counts nothing and says why.
	Take(bs []*policy.Budget, container, host string, bytes int64) *budget.Over
	// TakeBytes counts bytes container sends on a connection already decided (a WebSocket
	// message) against the bytes_up_per_hour of every budget in bs, if they fit them all.
	TakeBytes(bs []*policy.Budget, container string, bytes int64) *budget.Over
}

// Env is what a decision needs besides the request: the policy, the checks built with it and
// the state of the gate.
type Env struct {
	// Policy is the approved policy the console served; nil: none yet, nothing goes out.
	Policy *policy.Policy
	// Checks holds the detector, injected values and Claude credentials built for Policy; nil:
	// they could not be built, and every request they would check is refused.
	Checks *Checks
	// Memory is the heuristics' memory; nil: the heuristics do not run.
	Memory Memory
	// Budgets holds the containers' counts against the policy's budgets; nil: an empty one for
	// this request alone (a request over a budget by itself is refused, nothing is remembered).
	Budgets Budgets
	// Decrypt reports that the gate can decrypt a CONNECT (it has a signer): a CONNECT to a host
	// not on the splice list is then opened and each request inside decided on its own.
	Decrypt bool
	// AuditErr is why the gate cannot write its audit, or nil: while it is set nothing goes out.
	AuditErr error
	// Pins says what the gate saw of the MCP endpoints' tool definitions (mcp.go); nil: none
	// seen, no tool has changed.
	Pins MCPPins
}

// Decisions of the gate's own state and of its own name.
var (
	DecisionNoPolicy = policy.Decision{Verdict: policy.Deny, Code: policy.CodeNoConsole, Rule: "no-policy",
		Reason: "the gate has no policy yet: the console has not served one, so nothing goes out"}
	DecisionNoAudit = policy.Decision{Verdict: policy.Deny, Code: policy.CodeNoAudit, Rule: "audit",
		Reason: "the gate cannot write its audit, so nothing goes out until it can"}
	DecisionSelf = policy.Decision{Verdict: policy.Free, Rule: RuleSelf,
		Reason: "the gate's own name (" + floor.SelfName + "): answered by the gate, nothing goes out"}
	decisionSelfNoSigner = policy.Decision{Verdict: policy.Deny, Code: policy.CodeFloor, Rule: RuleSelf,
		Reason: "the gate runs without a signer, so it decrypts nothing; http://" + floor.SelfName + "/ answers in plain HTTP"}
)

// NoAudit is DecisionNoAudit, with the audit's own public reason when it gives one (a full
// disk): the decision while the audit cannot be written, and the answer of the gate's own that
// replaces one whose record could not be written.
func NoAudit(err error) policy.Decision {
	d := DecisionNoAudit
	var pr interface{ PublicReason() string }
	if errors.As(err, &pr) {
		d.Reason = pr.PublicReason()
	}
	return d
}

// Rule names of decisions made outside the policy's rules.
const (
	RuleSelf       = "self"
	RuleHeuristics = "heuristics"
	RuleSecretHost = "secret:host"
	// RuleBudget prefixes the rule of a budget's refusal: "budget:<name>".
	RuleBudget = "budget:"
)

// Decide runs, in order, the gate's state (a policy, a working audit), the source check, the
// floor's checks of the request's shape (See's refusal), the gate's own name, the floor's checks
// by name, port and request shape, the deny list and deny rules, secret egress, credential
// injection, the body size, the Claude API checks, the policy's other rules, the container's
// budgets (which count what passes them) and the exfiltration heuristics; a request to an
// [[mcp]] endpoint is decided message by message by the endpoint's rules in place of the rules'
// verdict (decideMCP). The first refusal wins. It does no I/O: the floor's address checks happen when the gate dials (see package
// egress).
func Decide(env *Env, r *Request) Result {
	res := decide(env, r)
	if env.Checks != nil && env.Checks.Secrets != nil && res.Verdict != policy.Free {
		// A reason quotes parts of the request (a host, a header); none may carry a credential.
		res.Reason = env.Checks.Secrets.MaskText(res.Reason)
	}
	return res
}

func decide(env *Env, r *Request) Result {
	p := env.Policy
	if p == nil {
		return Result{Decision: DecisionNoPolicy, Container: r.Container}
	}
	// 1. Source.
	res, ok := Source(p, r)
	if !ok {
		return res
	}
	if env.AuditErr != nil {
		res.Decision = NoAudit(env.AuditErr)
		return res
	}
	// 2. Floor: the request's shape.
	if r.Refusal != nil {
		res.Decision = *r.Refusal
		return res
	}
	if r.UserInfo {
		return floorDeny(res, &floor.Refusal{Check: floor.Userinfo,
			Reason: "the URL carries a user name or password; the gate refuses user info in URLs"})
	}
	defPort := 0
	if r.Kind != Domain {
		defPort = 80
		if r.Scheme == "https" {
			defPort = 443
		}
	}
	host, port, ref := floor.Authority(r.Authority, defPort)
	if ref != nil {
		return floorDeny(res, ref)
	}
	res.Host, res.Port = host, port
	// The gate's own name: answered by the gate on any port.
	if host == floor.SelfName {
		res.Self, res.Decision = true, DecisionSelf
		if r.Kind == Domain {
			if !env.Decrypt {
				res.Self, res.Decision = false, decisionSelfNoSigner
				return res
			}
			res.Intercept = true
		}
		return res
	}
	// A credential in the host name would reach the resolver, the signer and the origin whatever
	// the rules say: secret egress, before anything looks the name up. (The name as sent, before
	// the floor lowered its case.)
	if d, ok := hostSecret(env.Checks, r.Authority); ok {
		res.Decision = d
		return res
	}
	if ref := floor.Name(host); ref != nil {
		_, mapped := p.Floor.Hosts[host]
		waived := mapped && (ref.Check == floor.SingleLabel || ref.Check == floor.LocalName)
		if !waived {
			return floorDeny(res, ref)
		}
	}
	if ref := floor.PortAllowed(port, p.Floor.AllowPorts); ref != nil {
		return floorDeny(res, ref)
	}
	if r.Kind != Domain {
		if ref := floor.Request(r.Method, r.Path, r.Header); ref != nil {
			return floorDeny(res, ref)
		}
	}
	// 3. Policy: the rules and lists that apply to the container step 1 named.
	if r.Kind == Domain && env.Decrypt && !p.Spliced(host) {
		res.Decision, res.Intercept = p.EvaluateIntercept(host, res.Container), true
		return res
	}
	res.Decision = p.Evaluate(policy.Request{Host: host, Method: r.Method, Path: r.Path, Connect: r.Kind == Domain, Container: res.Container})
	if r.Override != "" && r.Kind != Domain {
		// An override header or _method parameter: decided as both methods, the more
		// restrictive winning, whichever the origin honours.
		if d := p.Evaluate(policy.Request{Host: host, Method: r.Override, Path: r.Path, Container: res.Container}); d.Verdict > res.Verdict {
			res.Decision = d
		}
	}
	if res.Verdict == policy.Deny {
		return res
	}
	if r.Kind != Domain {
		res.Decision = checkContent(p, env.Checks, env.Pins, r, &res, res.Decision)
		if res.Verdict == policy.Deny {
			return res
		}
	}
	// 9. Budgets: what is about to go out or to ask is counted, unless it would pass one.
	if over := takeBudgets(env, r, &res); over != nil {
		res.Decision = overBudget(res, over)
		res.Inject, res.Bind, res.TokenAnswer = nil, nil, false
		return res
	}
	if r.Kind == Domain {
		return res
	}
	// 10. Heuristics.
	heuristics(env, r, &res)
	return res
}

// takeBudgets counts a request about to go out or to ask against the budgets of its container
// and host, and returns why it does not fit, or nil (counted, or no budget applies). What it
// sends up is its path and query, headers and body; a CONNECT's tunnel is counted when it
// closes (the gate adds it).
func takeBudgets(env *Env, r *Request, res *Result) *budget.Over {
	bs := env.Policy.BudgetsFor(res.Container, res.Host)
	if len(bs) == 0 {
		return nil
	}
	var up int64
	if r.Kind != Domain {
		up = int64(len(r.Path)+len(r.Query)) + max(r.BodySize, int64(len(r.Body)))
		for k, vs := range r.Header {
			for _, v := range vs {
				up += int64(len(k) + len(v))
			}
		}
	}
	return counter(env).Take(bs, res.Container, res.Host, up)
}

// counter is env's budget counter, or an empty one for this decision alone when it has none:
// what passes a budget by itself is refused either way.
func counter(env *Env) Budgets {
	if env.Budgets == nil {
		return budget.New(budget.Config{})
	}
	return env.Budgets
}

// overBudget is the refusal of a request that does not fit a budget: E_BUDGET, rule
// "budget:<name>", with RetryAfter when waiting makes it fit.
func overBudget(res Result, o *budget.Over) policy.Decision {
	d := policy.Decision{Verdict: policy.Deny, Code: policy.CodeBudget, Rule: RuleBudget + o.Budget}
	who := "container " + quoted(res.Container)
	switch o.Limit {
	case budget.LimitRequests:
		d.Reason = fmt.Sprintf("%s has sent %d requests in the last minute under budget %q (requests_per_minute = %d)", who, o.Used, o.Budget, o.Max)
	case budget.LimitBytes:
		if o.RetryAfter == 0 {
			d.Reason = fmt.Sprintf("the request sends %d bytes, more than budget %q lets %s send in an hour (bytes_up_per_hour = %q), so it never fits; send less", o.Amount, o.Budget, who, policy.FormatSize(o.Max))
		} else {
			d.Reason = fmt.Sprintf("%s has sent %d bytes in the last hour under budget %q, and the request's %d more would pass bytes_up_per_hour = %q", who, o.Used, o.Budget, o.Amount, policy.FormatSize(o.Max))
		}
	case budget.LimitHosts:
		d.Reason = fmt.Sprintf("%s has sent to %d hosts in the last hour under budget %q (new_hosts_per_hour = %d), and %s is not one of them", who, o.Used, o.Budget, o.Max, floor.Shown(res.Host, floor.MaxShown))
	default:
		d.Reason = fmt.Sprintf("the gate's memory for budget counts is full, so it cannot count the request against budget %q; it refuses it rather than let it out uncounted", o.Budget)
	}
	if o.RetryAfter > 0 {
		d.RetryAfter = int((o.RetryAfter + time.Second - 1) / time.Second)
		d.Reason += fmt.Sprintf("; it fits again in %d s", d.RetryAfter)
	}
	return d
}

// hostSecret refuses a target whose host carries a credential the detector knows. A detector
// that could not be built refuses here too (the check cannot run).
func hostSecret(in *Checks, authority string) (policy.Decision, bool) {
	if d, ok := unchecked(in); ok && d.Rule == RuleSecretsUnbuilt {
		return d, true
	}
	if in.Secrets.MaskText(authority) == authority {
		return policy.Decision{}, false
	}
	return policy.Decision{Verdict: policy.Deny, Code: policy.CodeSecretEgress, Rule: RuleSecretHost,
		Reason: "the host name carries a credential; a name is sent to the resolver and the origin, so the gate refuses it before looking it up"}, true
}

// heuristics scores a request about to go out or to be asked about. Under heuristics =
// "enforce", a FREE request over the threshold asks instead; under "shadow" (the default) the
// score is only recorded.
func heuristics(env *Env, r *Request, res *Result) {
	if env.Memory == nil {
		return
	}
	p := env.Policy
	sc := env.Memory.Score(&exfil.Request{Host: res.Host, Path: r.Path, Query: r.Query, Header: r.Header,
		Body: r.Body, BodySize: r.BodySize, Trusted: p.Trusted(res.Host, res.Container)})
	if sc.Value <= 0 {
		return
	}
	res.Score = &sc
	if !sc.Suspect || p.Settings.Heuristics != "enforce" || res.Verdict != policy.Free {
		return
	}
	res.Decision = policy.Decision{Verdict: policy.Ask, Rule: RuleHeuristics,
		Reason: fmt.Sprintf("the request looks like data leaving (exfiltration score %.1f): %s", sc.Value, strings.Join(sc.Reasons, "; "))}
	res.Findings = append(res.Findings, sc.Reasons...)
}

// Rule names of the refusals of bodies the gate could not read for a decision.
const (
	RuleBodyTimeout      = "body:timeout"
	RuleHeldLimit        = "held_limit"
	RuleHeldPerContainer = "held_per_container"
)

// BodyTimeout is the decision for a request whose body stalled, trickled or took longer than
// body_timeout: the gate stopped reading it (why says which).
func BodyTimeout(why string) policy.Decision {
	return policy.Decision{Verdict: policy.Deny, Code: policy.CodeBodyTimeout, Rule: RuleBodyTimeout, Reason: why}
}

// Busy is the decision for a request whose body would pass held_limit or held_per_container
// (rule): the gate refuses it rather than hold more.
func Busy(rule, why string) policy.Decision {
	return policy.Decision{Verdict: policy.Deny, Code: policy.CodeBusy, Rule: rule, Reason: why}
}

// Framing is the decision for a request whose framing the gate refused before parsing it.
func Framing(e *framing.Error) policy.Decision {
	return policy.Decision{Verdict: policy.Deny, Code: policy.CodeFloor, Rule: "framing:" + string(e.Kind), Reason: e.Reason}
}

// Address is the decision for a target whose resolved address the floor refused.
func Address(ref *floor.Refusal) policy.Decision {
	return policy.Decision{Verdict: policy.Deny, Code: policy.CodeFloor, Rule: "floor:" + string(ref.Check), Reason: ref.Reason}
}

// Source runs the source check alone: the container that sent r, or the refusal
// (E_SOURCE_UNKNOWN) and false. The gate answers requests for its own name after it.
func Source(p *policy.Policy, r *Request) (Result, bool) {
	var res Result
	res.Container = r.Container
	if res.Container == "" {
		res.Container = p.Container(r.Source)
	}
	if res.Container == "" || !p.HasContainer(res.Container) {
		who := "this connection's address"
		if r.Container != "" {
			who = "container " + quoted(r.Container)
		}
		return deny(res, policy.CodeSourceUnknown, policy.RuleSource,
			"[sources] names no container for "+who), false
	}
	return res, true
}

func floorDeny(res Result, ref *floor.Refusal) Result {
	res.Decision = Address(ref)
	return res
}

func deny(res Result, code policy.Code, rule, reason string) Result {
	res.Decision = policy.Decision{Verdict: policy.Deny, Code: code, Rule: rule, Reason: reason}
	return res
}

func quoted(s string) string {
	if len(s) > 64 {
		s = s[:64]
	}
	return strconv.Quote(s)
}
