// Package explain says what the gate would decide for one raw HTTP request, and why, by running
// the gate's own checks on it.
package explain

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/lockhttp/lockhttp/internal/egress"
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
	// Note says what explain could not tell (a name that did not resolve here).
	Note string `json:"note,omitempty"`
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
	// Inspect holds the secrets and Claude credentials the checks use; nil: none.
	Inspect *judge.Inspect
}

// Request decides the raw request in raw (request line, headers, optional body). A head written
// with bare LF line ends (no CR anywhere) is read as if it had CRLF.
func Request(ctx context.Context, raw []byte, o Options) (*Result, error) {
	container, err := pickContainer(o.Policy, o.Container)
	if err != nil {
		return nil, err
	}
	head, body := splitHead(raw)
	h, ferr := framing.ParseHead(head, false)
	if ferr != nil {
		d := judge.Framing(ferr)
		return &Result{Decision: d, Kind: "framing", Container: container}, nil
	}
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(append(head, body...))))
	if err != nil {
		return nil, &UsageError{Msg: "reading the request: " + err.Error()}
	}
	jr := &judge.Request{Container: container, Method: req.Method, Header: req.Header, Decrypt: !o.NoDecrypt}
	switch {
	case h.Connect:
		jr.Kind, jr.Authority = judge.Domain, req.Host
	case req.URL.IsAbs():
		jr.Scheme, jr.Authority, jr.Path = req.URL.Scheme, req.URL.Host, req.URL.EscapedPath()
		jr.UserInfo = req.URL.User != nil
		jr.Kind = judge.Plain
		if req.URL.Scheme == "https" {
			jr.Kind = judge.Tunnel
		} else if req.URL.Scheme != "http" {
			d := policy.Decision{Verdict: policy.Deny, Code: policy.CodeFloor, Rule: "floor:scheme",
				Reason: fmt.Sprintf("the URL scheme %q is not http or https", req.URL.Scheme)}
			return &Result{Decision: d, Kind: "plain", Container: container}, nil
		}
	default:
		d := policy.Decision{Verdict: policy.Deny, Code: policy.CodeFloor, Rule: "floor:origin-form",
			Reason: "the request names no host (origin-form); write the request line as GET http://host/path HTTP/1.1, CONNECT host:443 HTTP/1.1 or POST https://host/path HTTP/1.1"}
		return &Result{Decision: d, Kind: "plain", Container: container}, nil
	}
	if up := req.Header.Get("Upgrade"); up != "" && !strings.EqualFold(strings.TrimSpace(up), "websocket") {
		d := policy.Decision{Verdict: policy.Deny, Code: policy.CodeFloor, Rule: "floor:upgrade",
			Reason: fmt.Sprintf("the protocol upgrade to %q is not allowed; only WebSocket upgrades are decided and passed", up)}
		return &Result{Decision: d, Kind: jr.Kind.String(), Container: container}, nil
	}
	jr.Query, jr.MediaType = req.URL.RawQuery, mediaType(req.Header)
	if req.Body != nil {
		data, err := io.ReadAll(io.LimitReader(req.Body, o.Policy.Settings.BufferLimit+1))
		if err != nil {
			return nil, &UsageError{Msg: "reading the request body: " + err.Error()}
		}
		if len(data) > 0 {
			jr.Body, jr.BodySize = data, int64(len(data))
		}
	}
	res := judge.Decide(o.Policy, o.Inspect, jr)
	out := &Result{Decision: res.Decision, Kind: jr.Kind.String(), Container: res.Container, Host: res.Host, Port: res.Port}
	switch {
	case res.Intercept:
		out.Kind = "connect-decrypted"
	case jr.Kind == judge.Domain:
		out.Kind = "connect-domain"
		if jr.Decrypt {
			out.Note = "on the splice list: decided at the domain, never decrypted"
		}
	}
	if res.Verdict == policy.Free && !res.Intercept {
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
	return out, nil
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

func mediaType(h http.Header) string {
	mt, _, err := mime.ParseMediaType(h.Get("Content-Type"))
	if err != nil {
		return strings.ToLower(strings.TrimSpace(h.Get("Content-Type")))
	}
	return mt
}
