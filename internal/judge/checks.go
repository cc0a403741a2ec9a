package judge

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/lockhttp/lockhttp/internal/claudeapi"
	"github.com/lockhttp/lockhttp/internal/contentcoding"
	"github.com/lockhttp/lockhttp/internal/floor"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/secrets"
)

// Checks holds what the checks after the policy's deny rules need besides the policy: the
// credential detector, the values of the gate's injected secrets and the containers' Claude
// credentials. The gate builds one whenever it applies a policy.
type Checks struct {
	Secrets *secrets.Detector
	// Injected maps a secret's name to its value, from the gate's secrets file.
	Injected map[string]string
	// SecretsErr says why the gate has no injected values: ErrNoSecretsFile when it was given no
	// secrets file (every injection then refuses), or why the file it was given did not load
	// (every request then refuses: the check for the injected values cannot run).
	SecretsErr error
	// BuildErr says why the detector could not be built (Secrets is then nil and every request
	// refuses: the secret checks cannot run).
	BuildErr error
	// Claude is the containers' Claude credentials; nil means none may send one.
	Claude *claudeapi.Credentials
	// ClaudeErr says why the credentials file named in the policy did not load.
	ClaudeErr error
}

// ErrNoSecretsFile is the SecretsErr of a gate given no secrets file.
var ErrNoSecretsFile = errors.New("the gate has no secrets file (gate -secrets)")

// NewChecks builds the detector from the policy's [[secret]] rules, its [jwt] hosts and the
// injected values. It always returns Checks: when the detector cannot be built, the error is
// also in BuildErr, and Decide refuses every request the detector would have checked.
func NewChecks(p *policy.Policy, injected map[string]string, secretsErr error, claude *claudeapi.Credentials, claudeErr error) (*Checks, error) {
	var cfg secrets.Config
	for _, s := range p.SecretRules() {
		cfg.Custom = append(cfg.Custom, secrets.Custom{Name: s.Name, Pattern: s.Pattern, Hosts: s.Hosts})
	}
	cfg.JWTHosts = p.JWTHosts()
	for name, v := range injected {
		cfg.Injected = append(cfg.Injected, secrets.Injected{Name: name, Value: v})
	}
	in := &Checks{Injected: injected, SecretsErr: secretsErr, Claude: claude, ClaudeErr: claudeErr}
	d, err := secrets.NewDetector(cfg)
	if err != nil {
		in.BuildErr = err
		return in, err
	}
	in.Secrets = d
	return in, nil
}

// Bind is what approving a request binds: a Claude credential, by its SHA-256 hex, to the
// container that sent it.
type Bind struct {
	Container string
	Hash      string
	Kind      claudeapi.Kind // what the credential is, for the ticket's words
}

// Inject is a credential the gate adds to a request that goes out.
type Inject struct {
	Rule   string
	Header string // set this header (replacing the agent's), or
	Query  string // set this query parameter
	Value  string
}

// checkContent runs steps 4 to 8 on a request the policy's rules did not refuse: secret egress (and
// the Claude credentials), credential injection, the body size, the MCP step and the Claude API
// checks; d is the rules' decision. It returns the final decision.
func checkContent(p *policy.Policy, in *Checks, pins MCPPins, r *Request, res *Result, d policy.Decision) policy.Decision {
	host, limit := res.Host, p.Settings.BufferLimit
	body, decoded := r.Body, false
	var cannotRead string
	if codings := contentcoding.Codings(r.Header); len(codings) > 0 && len(body) > 0 {
		dec, err := contentcoding.Decode(body, codings, limit)
		switch {
		case errors.Is(err, contentcoding.ErrTooLarge):
			return tooLarge(fmt.Sprintf("decoded, the body is larger than buffer_limit (%d bytes)", limit))
		case err != nil:
			cannotRead = err.Error()
		default:
			body, decoded = dec, true
		}
	}
	// 4. Secret egress. Checks that cannot run refuse what they would have checked.
	if d, ok := unchecked(in); ok {
		return d
	}
	{
		sr := &secrets.Request{Host: host, Path: r.Path, Query: r.Query, Header: r.Header, Body: body, MediaType: r.MediaType}
		if f := in.Secrets.Egress(sr); f != nil {
			return policy.Decision{Verdict: policy.Deny, Code: policy.CodeSecretEgress, Rule: "secret:" + string(f.Kind),
				Reason: fmt.Sprintf("%s (%s, %s) would go to %s, which it does not belong to", credentialWords(f.Kind), f.Where, f.Hash, floor.Shown(host, floor.MaxShown))}
		}
	}
	// The host's [[inject]] rule applies while the gate holds its secret; an optional one whose
	// secret the gate lacks adds nothing, and the request is checked as if the host had no rule.
	inj := p.InjectionFor(host)
	var val string
	have := false
	if inj != nil && in.SecretsErr == nil {
		val, have = in.Injected[inj.Secret]
	}
	injecting := inj != nil && (have || !inj.Optional)
	covered, known := claudeapi.Governs(host)
	var newCred claudeapi.CredentialCheck
	if known {
		var allowed []string
		if in.Claude != nil {
			allowed = in.Claude.Allowed(res.Container)
		}
		allowed = append(allowed[:len(allowed):len(allowed)], p.ClaudeBound[res.Container]...)
		// The header an [[inject]] rule of the host sets is replaced on the way out: what the
		// agent put there (a placeholder) never leaves, so it is not the agent's credential.
		h := r.Header
		if injecting && inj.Header != "" && len(h.Values(inj.Header)) > 0 {
			h = h.Clone()
			h.Del(inj.Header)
		}
		cd := claudeapi.CheckCredentials(h, res.Container, allowed)
		switch {
		case cd.New != nil && in.ClaudeErr != nil:
			// The file that may list it did not load: refuse rather than ask about a credential
			// the operator may have listed.
			return policy.Decision{Verdict: policy.Deny, Code: policy.CodeSecretEgress, Rule: claudeapi.RuleCredential,
				Reason: "the " + cd.New.Header + " header carries a Claude credential this container is not bound to, and the Claude credentials file named in the policy did not load (the gate's log says why)"}
		case cd.Header != "" && injecting:
			// The gate adds the container's credential for this host: one the agent sends in
			// another header, bound to it or not, would go out beside it.
			return policy.Decision{Verdict: policy.Deny, Code: policy.CodeSecretEgress, Rule: claudeapi.RuleCredential,
				Reason: fmt.Sprintf("the gate adds the Claude credential to requests to %s (inject rule %q), and the request carries another one in %s; send none", floor.Shown(host, floor.MaxShown), inj.Name, cd.Header)}
		case cd.New != nil:
			newCred = cd
			res.Bind = &Bind{Container: res.Container, Hash: cd.New.Hash, Kind: cd.New.Kind}
		case cd.Verdict == policy.Deny:
			return cd.Decision
		}
		// A login the token endpoint issues inside a decrypted tunnel is the container's: the
		// gate reads it from the answer and binds it.
		res.TokenAnswer = r.Kind == Tunnel && r.Scheme == "https" && claudeapi.TokenEndpoint(host, r.Method, r.Path)
	}
	// 5. Credential injection.
	switch {
	case inj != nil && !injecting:
		// An optional rule without its secret: the agent's own credential goes out, checked as
		// any other. A value that is none (a placeholder) would reach the origin for nothing.
		if v, ok := placeholder(in, inj, r); ok {
			res.Bind, res.TokenAnswer = nil, false
			return policy.Decision{Verdict: policy.Deny, Code: policy.CodeInject, Rule: "inject:" + inj.Name,
				Reason: fmt.Sprintf("the policy's inject rule %q adds the secret %q to requests to %s, and the gate's secrets file lacks it; the request's %s holds no credential the gate knows (a placeholder), so the gate has nothing to send in its place", inj.Name, inj.Secret, floor.Shown(host, floor.MaxShown), v)}
		}
	case inj != nil:
		if r.Scheme != "https" && !inj.HTTP {
			// The credential would cross the network in clear text.
			return policy.Decision{Verdict: policy.Deny, Code: policy.CodeInject, Rule: "inject:" + inj.Name,
				Reason: fmt.Sprintf("the policy's inject rule %q adds a secret to requests to %s over https only, and this request is plain http://; use https://", inj.Name, floor.Shown(host, floor.MaxShown))}
		}
		if !have {
			why := fmt.Sprintf("the policy's inject rule %q adds the secret %q to requests to %s, and the gate's secrets file lacks it", inj.Name, inj.Secret, floor.Shown(host, floor.MaxShown))
			if in.SecretsErr != nil && !errors.Is(in.SecretsErr, ErrNoSecretsFile) {
				why = fmt.Sprintf("the policy's inject rule %q adds a secret to requests to %s, and the gate's secrets file does not load", inj.Name, floor.Shown(host, floor.MaxShown))
			}
			return policy.Decision{Verdict: policy.Deny, Code: policy.CodeInject, Rule: "inject:" + inj.Name, Reason: why}
		}
		res.Inject = &Inject{Rule: inj.Name, Header: inj.Header, Query: inj.Query, Value: inj.Value(val)}
	}
	// 6. Size.
	if r.BodySize > limit {
		return tooLarge(fmt.Sprintf("the body is larger than buffer_limit (%d bytes), so the gate cannot inspect it", limit))
	}
	// 7. MCP: a request to an [[mcp]] endpoint is decided message by message by the endpoint's
	// rules, in place of the rules' verdict (their deny lists and deny rules refused at step 3).
	if e := p.MCP(host, r.Path); e != nil {
		md := decideMCP(p, e, in, pins, r, res, body)
		if md.Verdict == policy.Deny {
			return md
		}
		d = md
	}
	// 7. The Claude API.
	if covered {
		byRule := d.Rule != policy.RuleDefault && d.Rule != policy.RuleTrusted
		var j claudeapi.Judgement
		if known {
			j = claudeapi.Judge(claudeapi.Request{Host: host, Method: r.Method, Path: r.Path, Header: r.Header, Body: body, Decoded: decoded, Limit: limit})
		} else if !byRule {
			j = claudeapi.OtherHost(host)
		} else {
			j.Verdict = policy.Free
		}
		if j.Verdict == policy.Deny {
			return j.Decision
		}
		if !byRule || j.Verdict > d.Verdict {
			res.NeverAuto, res.Red, res.Findings = j.NeverAuto, j.Red, j.Findings
			d = j.Decision
		}
	}
	// 8. The rules' verdict stands; a body the gate could not read asks a human.
	if cannotRead != "" && d.Verdict == policy.Free {
		d = policy.Decision{Verdict: policy.Ask, Rule: "content-coding", Reason: cannotRead + ", so the gate cannot inspect it: a human must look"}
	}
	// A credential the container is not bound to asks, never automatically: the approval binds
	// it. An ASK for another reason is named after it, so that the human reads both.
	if newCred.New != nil {
		res.NeverAuto = true
		if d.Verdict == policy.Ask {
			newCred.Reason += "; also " + d.Rule + ": " + d.Reason
		}
		d = newCred.Decision
	}
	return d
}

// placeholder reports whether the header or query parameter an inject rule sets carries, in r,
// a value the secret checks do not take for a credential, and names where.
func placeholder(in *Checks, inj *policy.Injection, r *Request) (string, bool) {
	if inj.Header != "" {
		vs := r.Header.Values(inj.Header)
		for _, v := range vs {
			if strings.TrimSpace(v) == "" {
				continue
			}
			sr := &secrets.Request{Host: "", Path: "/", Header: http.Header{inj.Header: {v}}}
			if len(in.Secrets.Scan(sr)) == 0 {
				return "header " + inj.Header, true
			}
		}
		return "", false
	}
	q, err := url.ParseQuery(r.Query)
	if err != nil {
		return "", false
	}
	for _, v := range q[inj.Query] {
		if v == "" {
			continue
		}
		sr := &secrets.Request{Host: "", Path: "/", Query: url.Values{inj.Query: {v}}.Encode()}
		if len(in.Secrets.Scan(sr)) == 0 {
			return "query parameter " + inj.Query, true
		}
	}
	return "", false
}

// Rule names of the refusals of checks that cannot run.
const (
	RuleSecretsUnbuilt  = "secret:unavailable"
	RuleSecretsUnloaded = "secret:injected-unloaded"
)

// unchecked is the refusal of a request that the secret checks cannot check: the detector was
// not built (a [[secret]] rule it refuses), or the gate's secrets file did not load (the values
// it injects, which no request may carry, are unknown).
func unchecked(in *Checks) (policy.Decision, bool) {
	switch {
	case in == nil || in.Secrets == nil:
		return policy.Decision{Verdict: policy.Deny, Code: policy.CodeSecretEgress, Rule: RuleSecretsUnbuilt,
			Reason: "the gate could not build its secret checks from the policy's [[secret]] rules, so it refuses what they would check; the gate's log says why"}, true
	case in.SecretsErr != nil && !errors.Is(in.SecretsErr, ErrNoSecretsFile):
		return policy.Decision{Verdict: policy.Deny, Code: policy.CodeInject, Rule: RuleSecretsUnloaded,
			Reason: "the gate's secrets file does not load, so it cannot check that no request carries the secrets it injects; it refuses every request until the file loads (the gate's log says why)"}, true
	}
	return policy.Decision{}, false
}

func tooLarge(why string) policy.Decision {
	return policy.Decision{Verdict: policy.Deny, Code: policy.CodeBodyTooLarge, Rule: "buffer_limit", Reason: why}
}

// credentialWords names a credential of kind k in a reason, with its article: "a github
// credential", "an anthropic credential", "a secret the gate injects (name) credential".
func credentialWords(k secrets.Kind) string {
	s := string(k)
	if name, ok := strings.CutPrefix(s, "injected:"); ok {
		return "a secret the gate injects (" + name + ") credential"
	}
	if s != "" && strings.IndexByte("aeiou", s[0]) >= 0 {
		return "an " + s + " credential"
	}
	return "a " + s + " credential"
}
