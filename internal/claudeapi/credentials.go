package claudeapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/lockhttp/lockhttp/internal/policy"
)

// HashCredential is the SHA-256 of a credential in lower-case hex: what CheckCredentials
// compares and what the credentials file lists (after "sha256:"). It is what
// `printf %s "$KEY" | sha256sum` prints.
func HashCredential(value string) string {
	sum := sha256.Sum256([]byte(value))
	return hex.EncodeToString(sum[:])
}

// IsHash reports whether s is a credential's hash as HashCredential writes it: 64 lower-case
// hex digits. Bindings (the hub's tickets, the console's state, the served policy) hold only
// such hashes.
func IsHash(s string) bool {
	return len(s) == sha256.Size*2 && IsHexPrefix(s)
}

// IsHexPrefix reports whether s is made of lower-case hex digits only (a hash or a prefix of one).
func IsHexPrefix(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// credential is one credential a request carries, named by the header it came in.
type credential struct {
	header string
	value  string
}

// credentials lists the credentials h carries: the token of each "Authorization: Bearer X"
// (any other Authorization value counts whole) and each x-api-key value, header names compared
// case-insensitively, every value line counted. Empty values carry nothing.
func credentials(h http.Header) []credential {
	var out []credential
	for k, vs := range h {
		switch {
		case strings.EqualFold(k, "Authorization"):
			for _, v := range vs {
				v = strings.TrimSpace(v)
				if scheme, token, ok := strings.Cut(v, " "); ok && strings.EqualFold(scheme, "Bearer") {
					v = strings.TrimSpace(token)
				} else if strings.EqualFold(v, "Bearer") {
					v = ""
				}
				if v != "" {
					out = append(out, credential{header: "Authorization", value: v})
				}
			}
		case strings.EqualFold(k, "X-Api-Key"):
			for _, v := range vs {
				if v = strings.TrimSpace(v); v != "" {
					out = append(out, credential{header: "x-api-key", value: v})
				}
			}
		}
	}
	return out
}

// CredentialCheck is CheckCredentials' answer: the decision, and the credential a container is
// not bound to when the decision asks about it.
type CredentialCheck struct {
	policy.Decision
	// New is the one credential of a request that the container may not send yet (the decision
	// then asks a human, who binds it by approving), or nil.
	New *NewCredential
	// Header is the header of the request's one credential, bound or new: "Authorization" or
	// "x-api-key"; "" when it carries none (or two).
	Header string
}

// NewCredential is a credential a container sends that it is not bound to.
type NewCredential struct {
	// Header is the header it came in: "Authorization" or "x-api-key".
	Header string
	// Hash is HashCredential of it: what an approval binds to the container.
	Hash string
	// Kind is what it is, read from its prefix: a Claude login, an API key, …
	Kind Kind
	// Shown is how a human recognises it without seeing it: the hash's first 12 hex digits and,
	// for a key long enough, its last 4 characters, as Anthropic's console lists keys. A Claude
	// login shows no end: its owner never saw it.
	Shown string
}

// Kind is what a Claude credential is, as its prefix says.
type Kind uint8

// The kinds of Claude credential.
const (
	// KindOther is a value of no known shape.
	KindOther Kind = iota
	// KindLogin is a Claude login: an OAuth access token ("sk-ant-oat…"), which Claude Code
	// holds after its user logs in with a Claude account (/login, or claude setup-token).
	KindLogin
	// KindAPIKey is an API key ("sk-ant-api…"), which the Anthropic Console lists by its end.
	KindAPIKey
	// KindAdminKey is an Admin API key ("sk-ant-admin…").
	KindAdminKey
)

// KindOf reads a credential's kind from its prefix.
func KindOf(value string) Kind {
	switch {
	case strings.HasPrefix(value, "sk-ant-oat"):
		return KindLogin
	case strings.HasPrefix(value, "sk-ant-api"):
		return KindAPIKey
	case strings.HasPrefix(value, "sk-ant-admin"):
		return KindAdminKey
	}
	return KindOther
}

// words is how a ticket names a credential of kind k, Shown being its shown form.
func (k Kind) words(shown string) string {
	switch k {
	case KindLogin:
		return "a Claude login (an OAuth token, " + shown + ") issued outside this gate"
	case KindAPIKey:
		return "an Anthropic API key (" + shown + ")"
	case KindAdminKey:
		return "an Anthropic Admin API key (" + shown + ")"
	}
	return "(" + shown + ")"
}

// check is what a human checks before approving a credential of kind k.
func (k Kind) check() string {
	switch k {
	case KindLogin:
		return "Claude Code holds one after you log it in with your Claude account (a subscription: /login, or claude setup-token)"
	case KindAPIKey, KindAdminKey:
		return "check its end against the keys your Anthropic Console lists"
	}
	return ""
}

// BindWarning is the warning a ticket that binds a credential of kind k to container shows.
func BindWarning(k Kind, container string) string {
	if k == KindLogin {
		return fmt.Sprintf("Approving binds this Claude login to %s: its later requests with it pass without asking. Approve only if you logged Claude Code in with your Claude account for this container.", container)
	}
	return fmt.Sprintf("Approving binds this Claude credential to %s: its later requests with it pass without asking. Approve only a key you gave this container.", container)
}

// shownSuffix is how many characters of a credential's end Shown quotes, and the length a
// credential must have before any is quoted (a short value is not a key, and 4 of its characters
// would be too much of it).
const (
	shownSuffix    = 4
	shownSuffixMin = 32
)

// showCredential is NewCredential.Shown for a credential with SHA-256 hex hash.
func showCredential(value, hash string) string {
	s := "sha256 " + hash[:12] + "…"
	if len(value) < shownSuffixMin || KindOf(value) == KindLogin {
		return s
	}
	tail := value[len(value)-shownSuffix:]
	for i := 0; i < len(tail); i++ {
		c := tail[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return s
		}
	}
	return s + ", key ending …" + tail
}

// CheckCredentials checks the Claude credential of a request from container to one of the five
// hosts against allowed, the SHA-256 hex (HashCredential) of each credential the container may
// use (from the credentials file, those a human bound by approving and those the gate saw
// issued to it). No credential is FREE (the gate may inject one); one whose hash is in allowed
// is FREE; two or more (both headers, or one header twice) are DENY E_SECRET_EGRESS; one that
// is not in allowed asks a human (New says which), whose approval binds it to the container. A
// reason names the header, the credential's kind and its Shown form, never its value.
func CheckCredentials(h http.Header, container string, allowed []string) CredentialCheck {
	creds := credentials(h)
	switch len(creds) {
	case 0:
		return CredentialCheck{Decision: policy.Decision{Verdict: policy.Free, Rule: RuleCredential, Reason: "no Claude credential in Authorization or x-api-key"}}
	case 1:
	default:
		names := make([]string, len(creds))
		for i, c := range creds {
			names[i] = c.header
		}
		sort.Strings(names)
		return CredentialCheck{Decision: policy.Decision{Verdict: policy.Deny, Code: policy.CodeSecretEgress, Rule: RuleCredential,
			Reason: fmt.Sprintf("the request carries two credentials (%s); send one, the container's own", strings.Join(names, ", "))}}
	}
	c := creds[0]
	sum := sha256.Sum256([]byte(c.value))
	found := 0
	for _, a := range allowed {
		want, err := hex.DecodeString(strings.TrimPrefix(strings.ToLower(strings.TrimSpace(a)), "sha256:"))
		if err != nil || len(want) != sha256.Size {
			continue
		}
		found |= subtle.ConstantTimeCompare(want, sum[:])
	}
	if found == 1 {
		return CredentialCheck{Header: c.header, Decision: policy.Decision{Verdict: policy.Free, Rule: RuleCredential, Reason: "the " + c.header + " header carries this container's Claude credential"}}
	}
	hash := hex.EncodeToString(sum[:])
	n := &NewCredential{Header: c.header, Hash: hash, Kind: KindOf(c.value), Shown: showCredential(c.value, hash)}
	reason := fmt.Sprintf("container %s sends a new Claude credential, %s, in %s", container, n.Kind.words(n.Shown), c.header)
	if n.Kind == KindOther {
		reason = fmt.Sprintf("container %s sends a new Claude credential (%s) in %s", container, n.Shown, c.header)
	}
	if check := n.Kind.check(); check != "" {
		reason += ": " + check
	}
	reason += fmt.Sprintf("; approving binds it to %s, and its later requests with it pass without asking", container)
	return CredentialCheck{New: n, Header: c.header, Decision: policy.Decision{Verdict: policy.Ask, Rule: RuleNewCredential, Reason: reason}}
}

// Credentials is a checked credentials file: for each container, the SHA-256 hex of each Claude
// credential it may send.
type Credentials struct {
	byContainer map[string][]string
}

// Allowed is the list CheckCredentials takes for container: nil for a container the file does
// not name, so that every credential it sends is refused.
func (c *Credentials) Allowed(container string) []string {
	if c == nil {
		return nil
	}
	return c.byContainer[container]
}

// Containers lists the containers the file names, sorted.
func (c *Credentials) Containers() []string {
	if c == nil {
		return nil
	}
	out := make([]string, 0, len(c.byContainer))
	for k := range c.byContainer {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// credentialsFile is the credentials file as written, version 1.
type credentialsFile struct {
	// Version must be 1.
	Version int `toml:"version"`
	// Containers maps a container name (as in the policy's [sources]) to "sha256:<hex>" of each
	// Claude credential it may send. Empty: no container may send one.
	Containers map[string][]string `toml:"containers"`
}

// typeFix says what the file holds, for an error of the TOML decoder about a type.
const typeFix = `the file holds version = 1 and a [containers] table that maps each container name to an array of "sha256:<hex>" strings`

var tomlTypeErr = regexp.MustCompile(`^toml: line (\d+) \(last key "([^"]*)"\): `)

const hashFix = `write "sha256:" and the 64 hex digits that printf %s "$KEY" | sha256sum prints (never the key itself)`

// ParseCredentials reads a credentials file strictly: TOML syntax, types, unknown keys, the
// version, container names and each entry's form. name is how errors refer to the file. An
// error never quotes an entry: it may be a key pasted by mistake.
func ParseCredentials(name string, data []byte) (*Credentials, error) {
	var f credentialsFile
	md, err := toml.Decode(string(data), &f)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("%s:%d: %s", name, pe.Position.Line, pe.Message)
		}
		if m := tomlTypeErr.FindStringSubmatch(err.Error()); m != nil {
			return nil, fmt.Errorf("%s:%s: %s: wrong type; %s", name, m[1], m[2], typeFix)
		}
		return nil, fmt.Errorf("%s: %w; %s", name, err, typeFix)
	}
	var errs []error
	for _, k := range md.Undecoded() {
		errs = append(errs, fmt.Errorf("%s:%d: %s: unknown key; the file holds version and [containers] only", name, line(data, k[len(k)-1]), k))
	}
	if !md.IsDefined("version") {
		errs = append(errs, fmt.Errorf("%s:1: version: missing; start the file with version = 1", name))
	} else if f.Version != 1 {
		errs = append(errs, fmt.Errorf("%s:%d: version: %d is not supported; this lockhttp reads version = 1", name, line(data, "version"), f.Version))
	}
	c := &Credentials{byContainer: make(map[string][]string, len(f.Containers))}
	for _, container := range sortedKeys(f.Containers) {
		at := fmt.Sprintf("%s:%d: containers.%s", name, line(data, container), container)
		if !validContainer(container) {
			errs = append(errs, fmt.Errorf("%s: container names use a-z, 0-9, '.', '_' and '-' only, starting with a letter or digit, as in the policy's [sources]", at))
			continue
		}
		seen := make(map[string]bool)
		for i, e := range f.Containers[container] {
			h, ok := strings.CutPrefix(e, "sha256:")
			h = strings.ToLower(h)
			if b, err := hex.DecodeString(h); !ok || err != nil || len(b) != sha256.Size {
				errs = append(errs, fmt.Errorf("%s[%d]: not sha256:<64 hex digits>; %s", at, i, hashFix))
				continue
			}
			if seen[h] {
				errs = append(errs, fmt.Errorf("%s[%d]: listed twice; remove one", at, i))
				continue
			}
			seen[h] = true
			c.byContainer[container] = append(c.byContainer[container], h)
		}
		if c.byContainer[container] == nil {
			c.byContainer[container] = []string{}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

func sortedKeys(m map[string][]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func validContainer(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := 'a' <= c && c <= 'z' || '0' <= c && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return false
		}
	}
	return true
}

// line is the 1-based line on which key is first assigned (key = ... or "key" = ...), or 0.
func line(data []byte, key string) int {
	for i, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		for _, form := range []string{key, `"` + key + `"`, "'" + key + "'", "containers." + key} {
			if rest, ok := strings.CutPrefix(l, form); ok && strings.HasPrefix(strings.TrimSpace(rest), "=") {
				return i + 1
			}
		}
	}
	return 0
}
