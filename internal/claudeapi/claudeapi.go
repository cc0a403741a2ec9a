// Package claudeapi judges decrypted requests to the Claude API, where a request can have
// Anthropic's servers act for the agent (MCP servers, code execution, server-side fetches) out
// of the gate's sight.
package claudeapi

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/lockhttp/lockhttp/internal/contentcoding"
	"github.com/lockhttp/lockhttp/internal/floor"
	"github.com/lockhttp/lockhttp/internal/policy"
)

// hosts are the hosts Judge decides: the Claude API, claude.ai, the console (under both its
// names: Claude Code signs in and refreshes its login at platform.claude.com) and its telemetry.
var hosts = [...]string{"api.anthropic.com", "claude.ai", "console.anthropic.com", "platform.claude.com", "statsig.anthropic.com"}

// domains are the domains whose other hosts ask by default (Governs).
var domains = []string{"anthropic.com", "claude.ai", "claude.com"}

// The rule names of Judge's and CheckCredentials' decisions ("claude-api:<check>").
const (
	RuleMessages   = "claude-api:messages"   // POST /v1/messages or /v1/messages/count_tokens, judged by its body
	RuleSize       = "claude-api:size"       // a Messages API body over the limit, raw or decoded
	RuleOAuth      = "claude-api:oauth"      // the OAuth endpoints
	RuleFiles      = "claude-api:files"      // /v1/files and everything under it
	RuleRead       = "claude-api:read"       // another GET, HEAD or OPTIONS
	RuleWrite      = "claude-api:write"      // another method
	RuleHost       = "claude-api:host"       // a host under the Claude domains that is not one of the five hosts
	RuleCredential = "claude-api:credential" // Authorization and x-api-key
	// RuleNewCredential asks about a credential the container is not bound to; approving binds it.
	RuleNewCredential = "claude-api:new-credential"
)

// Request is one decrypted request to one of the five hosts: api.anthropic.com, claude.ai,
// console.anthropic.com, platform.claude.com and statsig.anthropic.com.
type Request struct {
	Host   string // the host, read by floor.HostOf: case, a final dot and a port are ignored
	Method string // compared case-sensitively: only GET, HEAD and OPTIONS are reads
	Path   string // the escaped URL path; a query string, if left on, is cut off
	Header http.Header
	Body   []byte // the whole body, as sent (before any Content-Encoding is undone), unless Decoded
	// Decoded reports that Body is already decoded from the Content-Encoding the header names
	// (the gate decodes a body once per request).
	Decoded bool
	// Limit is the gate's buffer_limit: a body longer than Limit, as sent or decoded, is
	// refused with E_BODY_TOO_LARGE. Zero or less: no body may be judged, so any non-empty
	// Messages API body is refused.
	Limit int64
}

// Judgement is Judge's decision and what a human needs to answer an ASK.
type Judgement struct {
	policy.Decision // Rule is one of the Rule* names; Reason holds the first finding and a count of the rest
	// NeverAuto is set on every ASK: no facade, flag or setting may approve it; a human must.
	NeverAuto bool
	// Red asks approval screens to show the request in red: a Messages API call that would have
	// Anthropic act on the agent's behalf.
	Red bool
	// Findings is every reason found, in the order found; empty for a FREE decision.
	Findings []string
}

// Governs reports whether host (read by floor.HostOf: a host the floor refuses is none) is a
// Claude host: covered when it is one of the five hosts or a name under anthropic.com, claude.ai
// or claude.com (the names themselves included); known when it is one of the five hosts, which
// Judge decides. A covered host that is not known asks, never
// automatically (OtherHost), unless a policy rule decides it: the caller applies the rule.
func Governs(host string) (covered, known bool) {
	h := floor.HostOf(host)
	for _, k := range hosts {
		if h == k {
			return true, true
		}
	}
	for _, d := range domains {
		if h == d || strings.HasSuffix(h, "."+d) {
			return true, false
		}
	}
	return false, false
}

// OtherHost is the decision for a covered host that is not one of the five hosts when no policy
// rule decides it: ASK, NeverAuto, rule RuleHost.
func OtherHost(host string) Judgement {
	return ask(RuleHost, false, []string{fmt.Sprintf("%s is an Anthropic host that the gate has no Claude API checks for", hostShown(host))})
}

// hostShown is a host as a reason quotes it: normalised when the floor reads it as a host.
func hostShown(h string) string {
	if n := floor.HostOf(h); n != "" {
		h = n
	}
	return floor.Shown(h, floor.MaxShown)
}

// Judge decides one request to one of the five hosts (for any other host it asks, rule
// RuleHost). It does not look at credentials: the caller runs CheckCredentials first (secret
// egress comes before size and the Claude API checks).
//
// In order: the files API asks; POST to /v1/messages or /v1/messages/count_tokens is judged by
// its body (over Limit: DENY E_BODY_TOO_LARGE; otherwise FREE only when JudgeBody says so, else
// ASK, red); the OAuth paths are free; other reads are free; other writes ask. Every ASK is
// NeverAuto. Paths are read as the policy reads them (policy.CleanPath, policy.LoosePaths): a
// path that names a listed path in any lenient reading (another case, encoded or back slashes,
// a trailing slash, ;parameters cut) is judged as that path and never free, and the OAuth paths
// are free only when every reading is the path as sent.
func Judge(r Request) Judgement {
	if _, known := Governs(r.Host); !known {
		return ask(RuleHost, false, []string{fmt.Sprintf("%s is not one of the Claude API hosts this check decides", hostShown(r.Host))})
	}
	escaped, _, _ := strings.Cut(r.Path, "?")
	clean := policy.CleanPath(escaped)
	loose := loosePath(clean)
	read := r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodOptions

	if isFiles(loose) {
		return ask(RuleFiles, false, []string{"the Files API: an upload stays on Anthropic's side for later calls, and a download reads what was stored there"})
	}
	if (loose == "/v1/messages" || loose == "/v1/messages/count_tokens") && r.Method == http.MethodPost {
		j := judgeMessages(r)
		if clean != loose && j.Verdict == policy.Free {
			return ask(RuleMessages, true, []string{fmt.Sprintf("the path %s is %s written another way (case, slashes or parameters); the SDKs never send it", floor.Shown(clean, 80), floor.Shown(loose, 80))})
		}
		return j
	}
	plain := policy.LoosePaths(clean) == [3]string{clean, clean, clean} // no case, slash or parameter games
	if plain && (strings.HasPrefix(clean, "/v1/oauth/") || floor.HostOf(r.Host) == "claude.ai" && strings.HasPrefix(clean, "/oauth/")) {
		return Judgement{Decision: policy.Decision{Verdict: policy.Free, Rule: RuleOAuth, Reason: "an OAuth sign-in or token request"}}
	}
	if read {
		return Judgement{Decision: policy.Decision{Verdict: policy.Free, Rule: RuleRead, Reason: r.Method + " reads only; reads of the Claude hosts are free"}}
	}
	return ask(RuleWrite, false, []string{fmt.Sprintf("%s %s writes to Anthropic's side (only POST %s and %s are judged by their body)", methodShown(r.Method), floor.Shown(clean, 80), "/v1/messages", "/v1/messages/count_tokens")})
}

// judgeMessages judges the body of a Messages API request.
func judgeMessages(r Request) Judgement {
	limit := r.Limit
	if limit < 0 {
		limit = 0
	}
	if int64(len(r.Body)) > limit {
		return tooLarge(fmt.Sprintf("the body is %d bytes, over the limit of %d bytes the gate can inspect", len(r.Body), limit))
	}
	if ok, why := isJSON(r.Header); !ok {
		return ask(RuleMessages, true, []string{why})
	}
	body := r.Body
	if codings := contentcoding.Codings(r.Header); len(codings) > 0 && !r.Decoded {
		var err error
		body, err = contentcoding.Decode(r.Body, codings, limit)
		if errors.Is(err, contentcoding.ErrTooLarge) {
			return tooLarge(fmt.Sprintf("the body decodes (Content-Encoding %s) to more than the limit of %d bytes the gate can inspect", floor.Shown(strings.Join(codings, ", "), 64), limit))
		}
		if err != nil {
			return ask(RuleMessages, true, []string{err.Error()})
		}
	}
	free, findings := JudgeBody(body)
	if !free {
		return ask(RuleMessages, true, findings)
	}
	return Judgement{Decision: policy.Decision{Verdict: policy.Free, Rule: RuleMessages,
		Reason: "a Messages API call with no MCP server, no container, no server tool but web search and no fetched source"}}
}

func tooLarge(reason string) Judgement {
	return Judgement{Decision: policy.Decision{Verdict: policy.Deny, Code: policy.CodeBodyTooLarge, Rule: RuleSize, Reason: reason}}
}

// ask is a NeverAuto ASK with every finding; its reason is the first and a count of the rest.
func ask(rule string, red bool, findings []string) Judgement {
	reason := findings[0]
	if n := len(findings) - 1; n > 0 {
		reason += fmt.Sprintf(" (and %d more)", n)
	}
	return Judgement{Decision: policy.Decision{Verdict: policy.Ask, Rule: rule, Reason: reason},
		NeverAuto: true, Red: red, Findings: findings}
}

// loosePath is the endpoint Judge reads a cleaned path as: of the policy's lenient readings
// (policy.LoosePaths), one that names the Files API if any does, else one that names a Messages
// API endpoint if any does, else the servlet reading; with a trailing slash dropped, since a
// lenient router serves /v1/messages/ as /v1/messages.
func loosePath(clean string) string {
	var ends [3]string
	for i, p := range policy.LoosePaths(clean) {
		if len(p) > 1 {
			p = strings.TrimSuffix(p, "/")
		}
		ends[i] = p
	}
	for _, p := range ends {
		if isFiles(p) {
			return p
		}
	}
	for _, p := range ends {
		if p == "/v1/messages" || p == "/v1/messages/count_tokens" {
			return p
		}
	}
	return ends[1]
}

// isFiles reports whether a path read by loosePath is the Files API.
func isFiles(p string) bool { return p == "/v1/files" || strings.HasPrefix(p, "/v1/files/") }

// methodShown is the method as a reason names it: as sent when it is letters, '-' and '_' alone
// (no digit, so never a credential), cut to 16 bytes; "a request" for anything else.
func methodShown(m string) string {
	if m == "" {
		return "a request"
	}
	for i := 0; i < len(m); i++ {
		if c := m[i]; !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || c == '-' || c == '_') {
			return "a request"
		}
	}
	if len(m) > 16 {
		return m[:16] + "…"
	}
	return m
}
