package policy

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// File is a policy file as written, version 1. Decode fills it strictly; Validate checks it;
// Compile turns it into a Policy. Validation fills no defaults: each field says what its zero
// value means.
type File struct {
	// Version must be 1.
	Version int `toml:"version"`
	// Trusted hosts: their reads (GET, HEAD, OPTIONS) are free when no rule matches.
	Trusted []string `toml:"trusted"`
	// Deny hosts: every request to them is refused (E_RULE).
	Deny []string `toml:"deny"`
	// Splice hosts are never decrypted: a CONNECT to them is decided at the domain.
	Splice []string `toml:"splice"`
	// Rules, in file order. Empty: only trusted, deny and the default apply.
	Rules []FileRule `toml:"rule"`
	// Floor exceptions. Zero: nothing opened, ports 80 and 443.
	Floor FileFloor `toml:"floor"`
	// Sources maps a container name to the addresses or CIDRs its connections come from.
	// Empty: every connection is refused with E_SOURCE_UNKNOWN.
	Sources map[string][]string `toml:"sources"`
	// Settings. Zero values mean the defaults named on each field.
	Settings FileSettings `toml:"settings"`
	// Secrets are credential shapes of your own, each with the hosts it belongs to. Empty: the
	// built-in shapes only.
	Secrets []FileSecret `toml:"secret"`
	// JWT holds where JSON Web Tokens may go. Zero: no host (every JWT is refused).
	JWT FileJWT `toml:"jwt"`
	// Inject rules add a credential from the gate's secrets file to requests to their hosts.
	// Empty: the gate injects nothing.
	Inject []FileInject `toml:"inject"`
	// Claude holds the Claude API settings. Zero: no credentials file (every Claude credential
	// is refused).
	Claude FileClaude `toml:"claude"`
	// Budgets bound what each container may send in a window. Empty: no budget, nothing is
	// counted.
	Budgets []FileBudget `toml:"budget"`
	// Notify are the channels the console tells of every new ticket (the gate ignores them).
	// Empty: tickets reach the terminal, lox and the phone page only.
	Notify []FileNotify `toml:"notify"`
	// Containers holds, by [sources] container name, the hosts trusted and denied for that
	// container alone ([container.NAME]). Empty: the top-level lists apply to every container
	// alike.
	Containers map[string]FileContainer `toml:"container"`
	// MCP are the remote MCP servers whose requests are decided as tool calls, each with its
	// rules (docs/mcp.md). Empty: none; a request to an MCP server is ordinary HTTP.
	MCP []FileMCP `toml:"mcp"`
}

// FileMCP is one [[mcp]]: a remote MCP server (Streamable HTTP) at one host and path, whose
// requests are read as MCP messages and decided by its rules.
type FileMCP struct {
	// Name is required and unique; it names the endpoint in rules, reasons, tickets and the
	// fingerprint of its calls.
	Name string `toml:"name"`
	// Host is the server's exact host name (no wildcard). Required.
	Host string `toml:"host"`
	// Path is the endpoint's URL path, as "/mcp". Required. It is matched as the most lenient
	// server reads a path: in any case, with or without a trailing slash, with ;parameters.
	Path string `toml:"path"`
	// Rules decide the tools/call messages by tool. Empty: every tool call asks.
	Rules []FileMCPRule `toml:"rule"`
}

// FileMCPRule is one [[mcp.rule]] of an endpoint: a verdict for the calls of some tools.
type FileMCPRule struct {
	// Name is required and unique within the endpoint; the decision names the rule
	// "mcp:<endpoint>:<name>".
	Name string `toml:"name"`
	// Tools are the tool names the rule decides: a name, or a pattern where "*" stands for any
	// run of characters ("read_*", "*"). Required. An ask or deny rule matches names in any
	// case; a free rule matches them as written.
	Tools []string `toml:"tools"`
	// Verdict is "free", "ask" or "deny". Required.
	Verdict string `toml:"verdict"`
	// Reason is shown to the agent and the human with the decision. Empty: none.
	Reason string `toml:"reason"`
	// Containers are the [sources] containers whose calls the rule decides. Nil (the key left
	// out): every container. An empty list is an error.
	Containers []string `toml:"containers"`
}

// FileContainer is one [container.NAME]: host lists that apply to the requests of that
// container alone, beside the top-level ones.
type FileContainer struct {
	// Trusted hosts: this container's reads (GET, HEAD, OPTIONS) of them are free when no rule
	// matches. Empty: the top-level trusted only.
	Trusted []string `toml:"trusted"`
	// Deny hosts: every request of this container to them is refused (E_RULE). Empty: the
	// top-level deny only.
	Deny []string `toml:"deny"`
}

// FileBudget is one [[budget]]: how much each container it names may send in a window, each
// container counted on its own. At least one of the limits is required; a limit left out is
// no limit.
type FileBudget struct {
	// Name is required and unique; it names the refusal (rule "budget:<name>").
	Name string `toml:"name"`
	// Containers are the [sources] containers the budget counts, each on its own. Empty: every
	// container.
	Containers []string `toml:"containers"`
	// Hosts are the host patterns whose requests the budget counts, as rules take them. Empty:
	// every host.
	Hosts []string `toml:"hosts"`
	// RequestsPerMinute bounds the requests of one container in any minute. Nil: no bound.
	RequestsPerMinute *int64 `toml:"requests_per_minute"`
	// BytesUpPerHour bounds the bytes one container sends (URL path and query, headers and
	// body) in any hour. Unset: no bound.
	BytesUpPerHour Size `toml:"bytes_up_per_hour"`
	// NewHostsPerHour bounds how many hosts one container sends to in any hour. Nil: no bound.
	NewHostsPerHour *int64 `toml:"new_hosts_per_hour"`
}

// FileSecret is one [[secret]]: a credential shape the gate refuses to send outside its hosts.
type FileSecret struct {
	// Name is required and unique; it names the finding ("custom:<name>").
	Name string `toml:"name"`
	// Pattern is a regular expression (RE2 syntax) matching the credential. Required.
	Pattern string `toml:"pattern"`
	// Hosts the credential may go to. Empty: none (it never leaves).
	Hosts []string `toml:"hosts"`
}

// FileJWT is [jwt]: the hosts a JWT may go to, whatever its claims name (they are not verified).
type FileJWT struct {
	// Hosts are host patterns, as rules take them ("*" excepted). Empty: a JWT goes nowhere.
	Hosts []string `toml:"hosts"`
}

// FileInject is one [[inject]]: the gate adds a secret to requests to exactly these hosts.
type FileInject struct {
	// Name is required and unique.
	Name string `toml:"name"`
	// Hosts are exact host names (no wildcards). Required.
	Hosts []string `toml:"hosts"`
	// Header is the header to set (replacing what the agent sent). One of Header and Query.
	Header string `toml:"header"`
	// Query is the query parameter to set. One of Header and Query.
	Query string `toml:"query"`
	// Secret names the value in the gate's secrets file. Required.
	Secret string `toml:"secret"`
	// Format is the value written, with {secret} standing for the secret, such as
	// "Bearer {secret}". Empty: the secret alone.
	Format string `toml:"format"`
	// HTTP adds the credential to plain http:// requests too, where it crosses the network in
	// clear text. Default: https only; an http:// request to the hosts is refused.
	HTTP bool `toml:"http"`
	// Optional makes the rule add nothing while the gate's secrets file lacks the secret (or the
	// gate has none): requests pass as the agent sent them, its own credential checked as any
	// other, but a value in the rule's header or parameter that is no credential (a
	// placeholder) is still refused. Default: while the secret is absent, every request to the
	// hosts is refused (E_INJECT).
	Optional bool `toml:"optional"`
}

// FileClaude is [claude].
type FileClaude struct {
	// Credentials is the path, on the gate's machine, of the file naming each container's
	// Claude credentials by hash (docs/claude-api.md). Empty: no container may send one.
	Credentials string `toml:"credentials"`
}

// FileRule is one [[rule]].
type FileRule struct {
	// Name is required and unique.
	Name string `toml:"name"`
	// Hosts the rule applies to: "name", "*.suffix" or "*" (every host). Required.
	Hosts []string `toml:"hosts"`
	// Methods the rule applies to, upper case. Empty: every method.
	Methods []string `toml:"methods"`
	// Paths the rule applies to: globs on the URL path, "*" within a segment, "**" across
	// segments. Empty: every path.
	Paths []string `toml:"paths"`
	// Verdict is "free", "ask" or "deny". Required.
	Verdict string `toml:"verdict"`
	// Reason is shown to the agent and the human with the decision. Empty: none.
	Reason string `toml:"reason"`
	// Containers are the [sources] containers whose requests the rule decides. Nil (the key left
	// out): every container. An empty list is an error.
	Containers []string `toml:"containers"`
}

// FileFloor is [floor]: exceptions to the network floor, opened on purpose.
type FileFloor struct {
	// AllowCIDRs opens addresses the floor would refuse (private, loopback, ...). Empty: none.
	// Metadata addresses and the gate's own address stay refused.
	AllowCIDRs []string `toml:"allow_cidrs"`
	// AllowPorts replaces the allowed destination ports. Empty: 80 and 443.
	AllowPorts []int `toml:"allow_ports"`
	// Hosts maps a name to an address, consulted before DNS like a hosts file. Empty: DNS only.
	Hosts map[string]string `toml:"hosts"`
}

// FileSettings is [settings].
type FileSettings struct {
	// Hold is how long an ASK is held for a human before E_PENDING. Zero: 10s (DefaultHold).
	Hold Duration `toml:"hold"`
	// ConnectGrant is how long an approved CONNECT stays open for container × host × port. Zero: 10m.
	ConnectGrant Duration `toml:"connect_grant"`
	// BufferLimit is the largest body the gate holds or inspects. Zero: 8 MiB.
	BufferLimit Size `toml:"buffer_limit"`
	// Heuristics is "shadow" (log the exfiltration score) or "enforce" (ask above the
	// threshold). Empty: "shadow".
	Heuristics string `toml:"heuristics"`
	// BodyTimeout is how long a request body may take to arrive in full. Zero: 60s.
	BodyTimeout Duration `toml:"body_timeout"`
	// BodyMinRate is the least average rate, in bytes per second, of a request body after its
	// first 5 seconds. Zero: 1KiB; "0" is refused (the 10-second stall limit stays either way).
	BodyMinRate Size `toml:"body_min_rate"`
	// HeldLimit is how many request-body bytes the gate holds for decisions across all
	// connections. Zero: 256MiB.
	HeldLimit Size `toml:"held_limit"`
	// HeldPerContainer is how many of them one container may hold. Zero: 64MiB.
	HeldPerContainer Size `toml:"held_per_container"`
	// MaxPending is how many tickets one container may have waiting for a human. Zero: 50.
	MaxPending int `toml:"max_pending"`
	// HTTP2 is "on" (the gate offers h2 by ALPN inside decrypted tunnels, beside http/1.1, and
	// decides each stream on its own) or "off" (http/1.1 only). Empty: "on".
	HTTP2 string `toml:"http2"`
}

// Duration is a TOML string such as "60s" or "10m".
type Duration struct {
	time.Duration
	Set bool
}

// UnmarshalText reads a Go duration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("%q is not a duration; write it like \"60s\" or \"10m\"", b)
	}
	d.Duration, d.Set = v, true
	return nil
}

// Size is a byte count: an integer, or a string with a unit ("512KiB", "8MiB", "1GiB", "100kB").
type Size struct {
	Bytes int64
	Set   bool
}

// UnmarshalText reads a size; BurntSushi/toml hands integers over as their decimal text.
func (s *Size) UnmarshalText(b []byte) error {
	v, err := ParseSize(string(b))
	if err != nil {
		return err
	}
	s.Bytes, s.Set = v, true
	return nil
}

// ParseSize reads "1048576", "512KiB", "8MiB", "1GiB", "100kB", "2MB" or "64B".
func ParseSize(text string) (int64, error) {
	t := strings.TrimSpace(text)
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"kB", 1000}, {"KB", 1000}, {"MB", 1000 * 1000}, {"GB", 1000 * 1000 * 1000}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<40)/mult {
		return 0, fmt.Errorf("%q is not a size; write a byte count or a number with KiB, MiB or GiB, like \"8MiB\"", text)
	}
	return n * mult, nil
}

// FormatSize writes a byte count as ParseSize reads it: with the largest binary unit that
// divides it ("50MiB", "1536KiB"), else in bytes ("1000B").
func FormatSize(n int64) string {
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}
