// Package judge runs the ordered checks of one request (source, floor, policy) and returns the
// decision the gate acts on; lockhttp explain runs the same code.
package judge

import (
	"net/http"
	"net/netip"
	"strconv"

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

// Request is one request as the checks see it.
type Request struct {
	Kind Kind
	// Container is set when the caller already knows it (lockhttp explain); otherwise the
	// policy's [sources] name it from Source.
	Container string
	Source    netip.Addr
	Method    string
	// Scheme is "http" or "https"; it gives the default port of Authority.
	Scheme string
	// Authority is the URL's host[:port], or the CONNECT target host:port.
	Authority string
	// Path is the escaped URL path; empty for a CONNECT.
	Path   string
	Header http.Header
	// UserInfo reports that the URL carried a user name or password.
	UserInfo bool
	// Decrypt reports that the gate can decrypt a CONNECT (it has a signer): a CONNECT to a host
	// not on the splice list is then opened and each request inside decided on its own.
	Decrypt bool
	// Query is the raw query string.
	Query string
	// MediaType is the Content-Type's media type, lower case.
	MediaType string
	// Body holds the request body, at most buffer_limit+1 bytes; BodySize is how many bytes the
	// gate read (over buffer_limit: too large to inspect).
	Body     []byte
	BodySize int64
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
	// Inject is the credential to add when the request goes out, or nil.
	Inject *Inject
	// NeverAuto, Red and Findings come from the Claude API checks: how a ticket shows the
	// request.
	NeverAuto bool
	Red       bool
	Findings  []string
}

// Decide runs, in order, the source check, the floor's checks by name, port and request shape,
// the deny list and deny rules, secret egress, credential injection, the body size, the Claude
// API checks and the policy's other rules. The first refusal wins. It does no I/O: the floor's
// address checks happen when the gate dials (see package egress); in may be nil (no secrets file,
// no Claude credentials).
func Decide(p *policy.Policy, in *Inspect, r *Request) Result {
	// 1. Source.
	res, ok := Source(p, r)
	if !ok {
		return res
	}
	// 2. Floor.
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
	// 3. Policy.
	if r.Kind == Domain && r.Decrypt && !p.Spliced(host) {
		res.Decision, res.Intercept = p.EvaluateIntercept(host), true
		return res
	}
	res.Decision = p.Evaluate(policy.Request{Host: host, Method: r.Method, Path: r.Path, Connect: r.Kind == Domain})
	if r.Kind == Domain || res.Verdict == policy.Deny {
		return res
	}
	res.Decision = inspect(p, in, r, &res, res.Decision)
	return res
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
