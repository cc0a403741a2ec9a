package secrets

import (
	"fmt"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"

	"github.com/lockhttp/lockhttp/internal/floor"
)

// Kind names a shape of credential: one of the constants below, "custom:<name>" for a pattern
// of the policy's, or "injected:<name>" for the value of a secret the gate injects.
type Kind string

// The built-in kinds. Each belongs to the hosts BuiltinHosts lists, except two:
//
// A private key (PEM "-----BEGIN … PRIVATE KEY-----" with a base64 body) belongs nowhere: it
// never leaves.
//
// A JWT (three base64url segments, or five for JWE, the first a JSON object with "alg") belongs
// to Config.JWTHosts only, so by default nowhere. Its claims do not widen that: they are not
// verified (the gate holds no issuer keys), and an agent holding a real token can rewrite its
// payload, "iss" included, and keep the real signature, which is what the receiver needs to
// replay it. JWTs are common in legitimate authentication, and a token is often issued by one
// host and used at another (accounts.google.com for *.googleapis.com): the policy lists the
// hosts an agent's tokens are for in JWTHosts. What a JWT carries is scanned too ("… (inside a
// jwt)"), so that a self-made token is no way around the other kinds' hosts.
const (
	KindGitHub      Kind = "github"
	KindAnthropic   Kind = "anthropic"
	KindOpenAI      Kind = "openai"
	KindAWS         Kind = "aws"
	KindSlack       Kind = "slack"
	KindStripe      Kind = "stripe"
	KindHuggingFace Kind = "huggingface"
	KindGoogle      Kind = "google"
	KindJWT         Kind = "jwt"
	KindPrivateKey  Kind = "private-key"
)

// Finding is one credential found in a request. It never holds the value: Where names the place
// and Hash lets records of the same value be matched.
type Finding struct {
	Kind Kind
	// Where names the place: "host", "path", "query <name>", "header <Name>",
	// "header <Name> (base64)", "header Authorization (basic password)", "body",
	// "body (json) messages[0].content", "body (form) <name>", "body (multipart) <name>".
	Where string
	// Hash is the first 8 hex digits of the SHA-256 of the value, as Mask writes it.
	Hash string
	// Hosts are the host patterns the credential belongs to (exact, "*.suffix" or "*");
	// empty: it belongs nowhere and may go to no host.
	Hosts []string
}

// Custom is a credential shape of the policy's own.
type Custom struct {
	// Name makes the kind "custom:<name>": letters, digits, '-', '_' and '.'; required.
	Name string
	// Pattern is an RE2 regular expression for the value; it must not match the empty string and
	// must not use ^ or $ (it is searched inside header values, URLs and bodies). A pattern
	// that begins with a literal ("acme_[0-9a-f]{32}") is tried only where that literal occurs.
	Pattern string
	// Hosts are host patterns as in the policy ("api.acme.com", "*.acme.com", "*"); empty: the
	// credential belongs nowhere.
	Hosts []string
}

// Injected is a secret the gate injects into requests: its value is found anywhere in a request
// (the agent should never hold it) and belongs to no host.
type Injected struct {
	Name  string // makes the kind "injected:<name>"; required
	Value string // at least MinInjected bytes
}

// MinInjected is the shortest injected value NewDetector accepts: shorter values would match
// ordinary text.
const MinInjected = 8

// Config is what the policy and the gate's secrets file add to the built-in shapes. The zero
// Config detects the built-in shapes only.
type Config struct {
	Custom   []Custom
	Injected []Injected
	// JWTHosts are the host patterns every JWT may go to, whatever its claims say; empty: a JWT
	// goes nowhere.
	JWTHosts []string
}

// Detector finds credentials in requests and masks them. It is built once (at policy load)
// and is safe for concurrent use.
type Detector struct {
	custom   []custom
	injected []injected
	jwtHosts []string
	// unescape: a custom pattern or injected value may hold what JSON escapes (quote,
	// backslash, slash, control characters) or a pattern looks at word boundaries, so every
	// escaped JSON string is scanned unescaped. Otherwise only strings with \u or \/ escapes
	// (or a hit) are: the raw scan sees the rest as it is.
	unescape bool
}

type custom struct {
	kind   Kind
	re     *regexp.Regexp
	prefix needle // literal every match begins with, or ""
	hosts  []string
}

type injected struct {
	kind  Kind
	value needle
}

// NewDetector checks c and compiles its patterns. Errors name the custom pattern or injected
// secret at fault, never an injected value.
func NewDetector(c Config) (*Detector, error) {
	d := &Detector{}
	names := make(map[string]bool)
	for i, cu := range c.Custom {
		cc, unescape, err := compileCustom(cu)
		if err != nil && cu.Name == "" {
			return nil, fmt.Errorf("custom pattern %d: %w", i+1, err)
		}
		if err != nil {
			return nil, fmt.Errorf("custom pattern %q: %w", cu.Name, err)
		}
		if names[cu.Name] {
			return nil, fmt.Errorf("custom pattern %q is defined twice; give each custom pattern its own name", cu.Name)
		}
		names[cu.Name] = true
		d.unescape = d.unescape || unescape
		d.custom = append(d.custom, cc)
	}
	inames := make(map[string]bool)
	for i, in := range c.Injected {
		at := fmt.Sprintf("injected secret %q", in.Name)
		if in.Name == "" {
			return nil, fmt.Errorf("injected secret %d has no name; name each secret in the gate's secrets file", i+1)
		}
		if !validName(in.Name) {
			return nil, fmt.Errorf("%s: the name may hold only letters, digits, '-', '_' and '.' (at most 64)", at)
		}
		if inames[in.Name] {
			return nil, fmt.Errorf("%s is defined twice; give each secret its own name", at)
		}
		inames[in.Name] = true
		if len(in.Value) < MinInjected {
			return nil, fmt.Errorf("%s is shorter than %d bytes, too short to find without matching ordinary text; use a longer secret", at, MinInjected)
		}
		d.unescape = d.unescape || strings.ContainsFunc(in.Value, jsonEscaped)
		dup := false
		for _, o := range d.injected {
			dup = dup || o.value.s == in.Value
		}
		if !dup {
			d.injected = append(d.injected, injected{kind: Kind("injected:" + in.Name), value: newNeedle(in.Value)})
		}
	}
	hosts, err := hostPatterns(c.JWTHosts)
	if err != nil {
		return nil, fmt.Errorf("jwt hosts: %w", err)
	}
	d.jwtHosts = hosts
	return d, nil
}

// CheckJWTHosts checks the hosts JWTs may go to exactly as NewDetector does (it runs the same
// code), so that the policy refuses what the detector would.
func CheckJWTHosts(hosts []string) error {
	_, err := hostPatterns(hosts)
	return err
}

// CustomError is why a custom pattern is refused: the field at fault, so that a caller can point
// at where it is written, and what to do about it.
type CustomError struct {
	// Field is "name", "pattern" or "hosts".
	Field string
	// Msg says what is wrong and the fix, without the pattern's name: "pattern matches the
	// empty string, so it would match everywhere; make it match at least one character".
	Msg string
}

func (e *CustomError) Error() string { return e.Msg }

// CheckCustom checks one custom pattern exactly as NewDetector does (it runs the same code): its
// name, pattern and hosts. Whether another pattern has the same name is the caller's to check.
// A refusal is a *CustomError.
func CheckCustom(c Custom) error {
	_, _, err := compileCustom(c)
	return err
}

// compileCustom checks and compiles one custom pattern, for NewDetector and CheckCustom. It
// reports whether the pattern may match what JSON escapes (see Detector.unescape). A refusal
// is a *CustomError.
func compileCustom(cu Custom) (custom, bool, error) {
	refuse := func(field, format string, args ...any) (custom, bool, error) {
		return custom{}, false, &CustomError{Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	if cu.Name == "" {
		return refuse("name", "name is missing; give it a name of letters, digits, '-', '_' and '.'")
	}
	if !validName(cu.Name) {
		return refuse("name", "the name may hold only letters, digits, '-', '_' and '.' (at most 64); rename it")
	}
	if cu.Pattern == "" {
		return refuse("pattern", "pattern is missing; give the regular expression of the credential")
	}
	tree, err := syntax.Parse(cu.Pattern, syntax.Perl)
	if err != nil {
		return refuse("pattern", "pattern does not compile: %v; use RE2 syntax (https://github.com/google/re2/wiki/Syntax)", err)
	}
	if anchored(tree) {
		return refuse("pattern", "pattern uses ^, $, \\A or \\z, but it is searched inside header values, URLs and bodies; remove them (use \\b for a word boundary)")
	}
	re, err := regexp.Compile(cu.Pattern)
	if err != nil {
		return refuse("pattern", "pattern does not compile: %v; use RE2 syntax (https://github.com/google/re2/wiki/Syntax)", err)
	}
	if re.MatchString("") {
		return refuse("pattern", "pattern matches the empty string, so it would match everywhere; make it match at least one character")
	}
	hosts, err := hostPatterns(cu.Hosts)
	if err != nil {
		return refuse("hosts", "%v", err)
	}
	prefix, _ := re.LiteralPrefix()
	return custom{kind: Kind("custom:" + cu.Name), re: re, prefix: newNeedle(prefix), hosts: hosts}, mayMatchEscaped(tree), nil
}

func validName(n string) bool {
	if len(n) == 0 || len(n) > 64 {
		return false
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !(class[c]&cBase62 != 0 || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// anchored reports whether the pattern uses a begin or end anchor anywhere.
func anchored(re *syntax.Regexp) bool {
	switch re.Op {
	case syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText, syntax.OpEndText:
		return true
	}
	for _, s := range re.Sub {
		if anchored(s) {
			return true
		}
	}
	return false
}

// jsonEscaped reports whether a JSON encoder may write r as an escape other than \uXXXX.
func jsonEscaped(r rune) bool {
	return r == '"' || r == '\\' || r == '/' || r < 0x20 || r == 0x7f
}

// mayMatchEscaped reports whether a pattern may match a character that JSON escapes, or
// tests word boundaries (which an escape such as \n changes).
func mayMatchEscaped(re *syntax.Regexp) bool {
	switch re.Op {
	case syntax.OpAnyChar, syntax.OpAnyCharNotNL, syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return true
	case syntax.OpLiteral:
		if slices.ContainsFunc(re.Rune, jsonEscaped) {
			return true
		}
	case syntax.OpCharClass:
		for i := 0; i+1 < len(re.Rune); i += 2 {
			lo, hi := re.Rune[i], re.Rune[i+1]
			if lo <= 0x20 || lo <= '"' && '"' <= hi || lo <= '/' && '/' <= hi || lo <= '\\' && '\\' <= hi || lo <= 0x7f && 0x7f <= hi {
				return true
			}
		}
	}
	return slices.ContainsFunc(re.Sub, mayMatchEscaped)
}

// hostPatterns checks and normalises host patterns with the policy's rules: "*", "*.suffix" or
// an exact name.
func hostPatterns(in []string) ([]string, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := make([]string, 0, len(in))
	for _, t := range in {
		if t == "*" {
			out = append(out, t)
			continue
		}
		name, wild := t, false
		if strings.HasPrefix(t, "*.") {
			name, wild = t[2:], true
		}
		if strings.Contains(name, "*") {
			return nil, fmt.Errorf("host pattern %q: a * may only stand alone or begin the pattern; write it like \"*.example.com\"", t)
		}
		if strings.Contains(name, ":") && !strings.HasPrefix(name, "[") {
			return nil, fmt.Errorf("host pattern %q: patterns name hosts without a port; remove the port", t)
		}
		norm, r := floor.Host(name)
		if r != nil {
			return nil, fmt.Errorf("host pattern %q: %s", t, r.Reason)
		}
		if wild {
			norm = "*." + norm
		}
		out = append(out, norm)
	}
	return out, nil
}

// hostMatch reports whether host matches one of the patterns: an exact name, "*.suffix" (which
// does not match the bare suffix) or "*".
func hostMatch(patterns []string, host string) bool {
	for _, p := range patterns {
		switch {
		case p == "*":
			return true
		case strings.HasPrefix(p, "*."):
			suf := p[1:] // ".suffix"
			if len(host) > len(suf) && strings.HasSuffix(host, suf) {
				return true
			}
		case p == host:
			return true
		}
	}
	return false
}

// Built-in host patterns of each kind.
var (
	hostsGitHub      = []string{"github.com", "*.github.com", "*.githubusercontent.com", "ghcr.io"}
	hostsAnthropic   = []string{"api.anthropic.com", "console.anthropic.com", "platform.claude.com", "claude.ai", "statsig.anthropic.com"}
	hostsOpenAI      = []string{"api.openai.com", "*.openai.com"}
	hostsAWS         = []string{"amazonaws.com", "*.amazonaws.com"}
	hostsSlack       = []string{"slack.com", "*.slack.com"}
	hostsStripe      = []string{"api.stripe.com", "*.stripe.com"}
	hostsHuggingFace = []string{"huggingface.co", "*.huggingface.co", "*.hf.co"}
	hostsGoogle      = []string{"googleapis.com", "*.googleapis.com", "*.google.com"}
)

// BuiltinHosts returns the host patterns a built-in kind belongs to (a copy); nil for kinds that
// belong nowhere (private-key) or whose hosts the policy names (jwt: Config.JWTHosts).
func BuiltinHosts(k Kind) []string {
	var h []string
	switch k {
	case KindGitHub:
		h = hostsGitHub
	case KindAnthropic:
		h = hostsAnthropic
	case KindOpenAI:
		h = hostsOpenAI
	case KindAWS:
		h = hostsAWS
	case KindSlack:
		h = hostsSlack
	case KindStripe:
		h = hostsStripe
	case KindHuggingFace:
		h = hostsHuggingFace
	case KindGoogle:
		h = hostsGoogle
	}
	return append([]string(nil), h...)
}
