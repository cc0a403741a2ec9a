// Package explain says what the gate would decide for one raw HTTP request, and why: it builds
// the Arrival the gate would build and runs the gate's one decision (judge.See, judge.Decide).
package explain

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"github.com/lockhttp/lockhttp/internal/budget"
	"github.com/lockhttp/lockhttp/internal/egress"
	"github.com/lockhttp/lockhttp/internal/exfil"
	"github.com/lockhttp/lockhttp/internal/floor"
	"github.com/lockhttp/lockhttp/internal/framing"
	"github.com/lockhttp/lockhttp/internal/judge"
	"github.com/lockhttp/lockhttp/internal/policy"
)

// maxRequest bounds the request read.
const maxRequest = 16 << 20

// Result is the printed answer: the decision, and what it was decided on.
type Result struct {
	policy.Decision
	Kind      string `json:"kind"`
	Container string `json:"container,omitempty"`
	Host      string `json:"host,omitempty"`
	Port      int    `json:"port,omitempty"`
	// Address is the checked address a FREE request would be sent to, when it was resolved.
	Address string `json:"address,omitempty"`
	// Score and Findings are the exfiltration heuristics' score and its reasons, when above zero.
	Score    float64  `json:"score,omitempty"`
	Findings []string `json:"findings,omitempty"`
	// Note says what explain could not tell (a name that did not resolve here, the heuristics'
	// memory).
	Note string `json:"note,omitempty"`
	// MCP is what the MCP step read of a request to an [[mcp]] endpoint of the policy.
	MCP *MCP `json:"mcp,omitempty"`
}

// MCP is a request to an [[mcp]] endpoint as the MCP step read it (judge.MCP).
type MCP struct {
	Endpoint string `json:"endpoint"`
	Batch    bool   `json:"batch,omitempty"`
	// Fingerprint is the call's fingerprint a ticket for the request is keyed by, when the
	// request is one call (else a ticket is keyed by the request's bytes).
	Fingerprint string `json:"fingerprint,omitempty"`
	// Messages are the body's messages, each with its decision; Decided is the index of the
	// one whose decision is the request's (-1: the request as a whole decided).
	Messages []MCPMessage `json:"messages,omitempty"`
	Decided  int          `json:"decided"`
	// Findings say what makes the body or its headers ambiguous.
	Findings []string `json:"findings,omitempty"`
}

// MCPMessage is one message of the body and its decision.
type MCPMessage struct {
	Kind   string `json:"kind"`
	Method string `json:"method,omitempty"`
	// Tool is the tool a tools/call calls; Target what another method acts on (a prompt, a
	// resource's URI).
	Tool        string `json:"tool,omitempty"`
	Target      string `json:"target,omitempty"`
	Fingerprint string `json:"fingerprint,omitempty"`
	policy.Decision
}

func mcpResult(m *judge.MCP) *MCP {
	out := &MCP{Endpoint: m.Endpoint, Batch: m.Batch, Fingerprint: m.Fingerprint, Decided: m.Decided, Findings: m.Findings}
	for _, mm := range m.Messages {
		x := MCPMessage{Kind: mm.Kind, Method: mm.Method, Fingerprint: mm.Fingerprint, Decision: mm.Decision}
		if mm.HasTarget && mm.Method == "tools/call" {
			x.Tool = mm.Target
		} else if mm.HasTarget {
			x.Target = mm.Target
		}
		out.Messages = append(out.Messages, x)
	}
	return out
}

// UsageError is an error in what explain was given (the request, the container), as opposed to
// a decision.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// Options are the inputs besides the request.
type Options struct {
	Policy    *policy.Policy
	Container string                  // empty: the policy's only container
	Resolve   map[string][]netip.Addr // answers used instead of DNS
	// Resolver is DNS for names not in Resolve; nil: no DNS, such names are noted as unresolved.
	Resolver egress.Resolver
	// NoDecrypt models a gate without a signer: every CONNECT is decided at the domain.
	NoDecrypt bool
	// Cleartext reads the request after a CONNECT head as plain HTTP sent through the tunnel
	// (no TLS), as the gate reads such a tunnel: an http:// request of the CONNECT's host and
	// port. Without it, that request is read as sent inside TLS.
	Cleartext bool
	// Transparent decides the request as arriving at the gate's transparent listener (a client
	// that ignores the proxy) on the port its Host names: a plain request by its Host, a CONNECT
	// head alone as a TLS connection naming that server, an https:// request (or a CONNECT and
	// the request after it) as inside such a connection. The result's kind says "transparent-".
	Transparent bool
	// Checks holds the secrets and Claude credentials the checks use; nil: the checks that need
	// them refuse, as the gate's do.
	Checks *judge.Checks
	// Memory is the heuristics' memory; nil: a new, empty one (the result says so).
	Memory judge.Memory
	// Budgets holds the containers' budget counts; nil: new, empty ones (the result says so
	// when a budget counts the request).
	Budgets judge.Budgets
	// Pins are the gate's pins of the MCP servers' tools (its mcp-pins.json); nil: none seen,
	// no tool changed.
	Pins judge.MCPPins
}

// Request decides the raw request in raw (request line, headers, optional body) as the gate
// would: it builds the same Arrival the gate builds, hands it to judge.See and judge.Decide, and
// then resolves and checks the address of what would go out. A head written with bare LF line
// ends (no CR anywhere) is read as if it had CRLF. An absolute https:// request is decided as
// a request decrypted inside a tunnel to its host.
func Request(ctx context.Context, raw []byte, o Options) (*Result, error) {
	container, err := pickContainer(o.Policy, o.Container)
	if err != nil {
		return nil, err
	}
	a, err := Arrival(raw, o.Policy.Settings.BufferLimit)
	if err != nil {
		return nil, err
	}
	if o.Cleartext {
		if a.Tunnel == nil || !bytes.HasPrefix(raw, []byte("CONNECT ")) {
			return nil, &UsageError{Msg: "--cleartext reads a CONNECT head and the plain request sent after it in the tunnel; give both, one after the other"}
		}
		a.Tunnel.Cleartext = true
	}
	if o.Transparent {
		switch {
		case a.Tunnel != nil:
			a.Tunnel.Transparent = true
		case a.Kind == judge.Domain:
			a.Transparent = true
			_, a.Port, _ = floor.Authority(a.Host, 0)
		default:
			a.Transparent = true
			_, a.Port, _ = floor.Authority(a.Host, 80)
		}
	}
	a.Container = container
	memory := o.Memory
	if memory == nil {
		memory = exfil.New(exfil.Config{})
	}
	budgets := o.Budgets
	if budgets == nil {
		budgets = budget.New(budget.Config{})
	}
	v := judge.See(a)
	res := judge.Decide(&judge.Env{Policy: o.Policy, Checks: o.Checks, Memory: memory, Budgets: budgets, Decrypt: !o.NoDecrypt, Pins: o.Pins}, v)
	out := &Result{Decision: res.Decision, Kind: v.Kind.String(), Container: res.Container, Host: res.Host, Port: res.Port}
	if a.Framing != nil {
		out.Kind = "framing"
	}
	if res.MCP != nil {
		out.MCP = mcpResult(res.MCP)
	}
	if res.Score != nil {
		out.Score = res.Score.Value
		out.Findings = res.Score.Reasons
	}
	if o.Memory == nil && v.Kind != judge.Domain {
		out.Note = "the heuristics ran with an empty memory: the gate remembers the hosts and bytes it saw, and may score this higher"
	}
	switch {
	case res.Intercept:
		out.Kind = "connect-decrypted"
	case v.Kind == judge.Domain:
		out.Kind = "connect-domain"
		if !o.NoDecrypt && res.Verdict != policy.Deny && !res.Self {
			out.Note = "on the splice list: decided at the domain, never decrypted"
		}
	}
	if v.Transparent {
		out.Kind = "transparent-" + out.Kind
	}
	if res.Verdict == policy.Free && !res.Intercept && !res.Self {
		// The gate resolves and checks the address only for what goes out; so does explain. A
		// decrypted CONNECT goes nowhere by itself: the requests inside it are resolved.
		d := &egress.Dialer{Resolver: staticResolver{answers: o.Resolve, next: o.Resolver}}
		addrs, err := d.Resolve(ctx, egress.Target{Host: res.Host, Port: res.Port, Floor: &o.Policy.Floor})
		var refused *egress.RefusedError
		switch {
		case errors.As(err, &refused):
			out.Decision = judge.Address(refused.Refusal)
		case errors.Is(err, errNoDNS):
			out.Note = fmt.Sprintf("%q was not resolved (give --resolve %s=IP); the gate refuses it if it resolves into a range the floor refuses", res.Host, res.Host)
		case err != nil:
			out.Note = "the gate could not reach it from here: " + err.Error()
		default:
			out.Address = net.JoinHostPort(addrs[0].String(), fmt.Sprint(res.Port))
		}
	}
	if o.Budgets == nil && out.Verdict != policy.Deny && !res.Intercept && !res.Self && len(o.Policy.BudgetsFor(res.Container, res.Host)) > 0 {
		note := "the budgets counted from zero: the gate counts what the container sent in the last minute and hour, and refuses with E_BUDGET what would pass a budget"
		if out.Note != "" {
			note = out.Note + "; " + note
		}
		out.Note = note
	}
	return out, nil
}

// Arrival reads a raw request into what the gate would have received: a CONNECT, a plain proxy
// request (http://), or a request decrypted inside a tunnel. A tunnel request is written either
// as the gate receives it, a CONNECT head followed by the request the client sends inside, or
// as one absolute https:// request line, read as the origin-form request a client sends inside
// a tunnel to the URL's host and port. The body is read up to limit+1 bytes, as the gate reads
// it. A head the framing check refuses is an Arrival with Framing set.
func Arrival(raw []byte, limit int64) (*judge.Arrival, error) {
	head, body := splitHead(raw)
	var tunnel *judge.Binding
	if line, _, _ := bytes.Cut(head, []byte("\r\n")); bytes.HasPrefix(line, []byte("CONNECT ")) && len(bytes.TrimSpace(body)) > 0 {
		// A CONNECT and the request inside its tunnel.
		authority, _, _ := bytes.Cut(line[len("CONNECT "):], []byte(" "))
		host, port, ref := floor.Authority(string(authority), 0)
		if ref == nil {
			tunnel = &judge.Binding{Host: host, Port: port}
			head, body = splitHead(body)
		}
	} else if origin, binding, ok := insideTunnel(head); ok {
		tunnel, head = binding, origin
	}
	h, ferr := framing.ParseHead(head, tunnel != nil)
	if ferr != nil {
		a := &judge.Arrival{Kind: judge.Plain, Framing: ferr, Header: http.Header{}}
		if tunnel != nil {
			a.Kind, a.Tunnel = judge.Tunnel, tunnel
		}
		return a, nil
	}
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(append(head, body...))))
	if err != nil {
		return nil, &UsageError{Msg: "reading the request: " + err.Error()}
	}
	a := &judge.Arrival{Kind: judge.Plain, Method: req.Method, URL: req.URL, Host: req.Host, Header: req.Header}
	switch {
	case tunnel != nil:
		a.Kind, a.Tunnel = judge.Tunnel, tunnel
	case h.Connect:
		a.Kind, a.URL = judge.Domain, nil
	}
	if req.Body != nil {
		data, err := io.ReadAll(io.LimitReader(req.Body, limit+1))
		if err != nil {
			return nil, &UsageError{Msg: "reading the request body: " + err.Error()}
		}
		if len(data) > 0 {
			a.Body, a.BodySize = data, int64(len(data))
		}
	}
	return a, nil
}

// insideTunnel reads a head whose request line names an absolute https:// URL as the request a
// client sends inside a tunnel to the URL's host and port: the same head with an origin-form
// target. A URL with user info is left as it is (the floor refuses it).
func insideTunnel(head []byte) (origin []byte, tunnel *judge.Binding, ok bool) {
	line, rest, _ := bytes.Cut(head, []byte("\r\n"))
	method, after, ok1 := bytes.Cut(line, []byte(" "))
	target, proto, ok2 := bytes.Cut(after, []byte(" "))
	if !ok1 || !ok2 || !bytes.HasPrefix(bytes.ToLower(target), []byte("https://")) {
		return nil, nil, false
	}
	u, err := url.Parse(string(target))
	if err != nil || u.User != nil {
		return nil, nil, false
	}
	host, port, ref := floor.Authority(u.Host, 443)
	if ref != nil {
		return nil, nil, false
	}
	inner := u.EscapedPath()
	if inner == "" {
		inner = "/"
	}
	if u.RawQuery != "" || u.ForceQuery {
		inner += "?" + u.RawQuery
	}
	var b bytes.Buffer
	b.Write(method)
	b.WriteByte(' ')
	b.WriteString(inner)
	b.WriteByte(' ')
	b.Write(proto)
	b.WriteString("\r\n")
	b.Write(rest)
	return b.Bytes(), &judge.Binding{Host: host, Port: port}, true
}

func pickContainer(p *policy.Policy, name string) (string, error) {
	if name != "" {
		return name, nil
	}
	names := p.Containers()
	switch len(names) {
	case 1:
		return names[0], nil
	case 0:
		return "", &UsageError{Msg: "the policy's [sources] name no container, so the gate refuses every request (E_SOURCE_UNKNOWN); add one"}
	}
	return "", &UsageError{Msg: fmt.Sprintf("the policy names several containers (%s); choose one with --container", strings.Join(names, ", "))}
}

// splitHead returns the head (ending in CRLF CRLF) and the rest. A head without any CR has its
// line ends made CRLF; a head missing its empty last line gets one.
func splitHead(raw []byte) (head, body []byte) {
	if i := bytes.Index(raw, []byte("\r\n\r\n")); i >= 0 {
		return raw[:i+4], raw[i+4:]
	}
	if bytes.IndexByte(raw, '\r') < 0 {
		if i := bytes.Index(raw, []byte("\n\n")); i >= 0 {
			head, body = raw[:i+1], raw[i+2:]
		} else {
			head = bytes.TrimRight(raw, "\n")
			head = append(append([]byte{}, head...), '\n')
		}
		head = bytes.ReplaceAll(head, []byte("\n"), []byte("\r\n"))
		return append(head, '\r', '\n'), body
	}
	head = bytes.TrimRight(raw, "\r\n")
	return append(append([]byte{}, head...), "\r\n\r\n"...), nil
}

var errNoDNS = errors.New("no DNS in explain")

type staticResolver struct {
	answers map[string][]netip.Addr
	next    egress.Resolver
}

func (r staticResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if a, ok := r.answers[host]; ok {
		return a, nil
	}
	if r.next == nil {
		return nil, errNoDNS
	}
	return r.next.LookupNetIP(ctx, network, host)
}
