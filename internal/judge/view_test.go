package judge

import (
	"errors"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/exfil"
	"github.com/lockhttp/lockhttp/internal/policy"
)

const viewPolicy = `version = 1
trusted = ["docs.example.com", "origin.example.com"]

[[rule]]
name = "uploads"
hosts = ["origin.example.com"]
methods = ["POST"]
verdict = "free"

[[rule]]
name = "ask-delete"
hosts = ["origin.example.com"]
methods = ["DELETE"]
verdict = "ask"

[[rule]]
name = "no-put"
hosts = ["origin.example.com"]
methods = ["PUT"]
verdict = "deny"

[sources]
agent = ["10.0.0.0/24"]
`

// arrive is a test's shorthand for what reached the gate: "METHOD URL" with headers and a body;
// an https URL arrives inside a tunnel to its host, as origin-form.
type arrive struct {
	method, url string
	header      http.Header
	body        string
	host        string // the Host header inside a tunnel; default: the URL's
	plain       bool   // an https URL in a plain proxy request, not inside a tunnel
	h2          bool   // on an HTTP/2 stream inside the tunnel (host is then :authority)
	cleartext   bool   // an http URL inside a cleartext tunnel to its host and port
	target      string // the target sent inside the tunnel; default: the URL in origin-form
}

func (a arrive) arrival(t *testing.T) *Arrival {
	t.Helper()
	u, err := url.Parse(a.url)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	for k, v := range a.header {
		h[k] = append([]string(nil), v...)
	}
	ar := &Arrival{Kind: Plain, Source: netip.MustParseAddr("10.0.0.5"), Method: a.method, URL: u, Host: u.Host, Header: h}
	if a.body != "" {
		ar.Body, ar.BodySize = []byte(a.body), int64(len(a.body))
	}
	if u.Scheme == "https" && !a.plain || a.cleartext {
		inner := *u
		inner.Scheme, inner.Host = "", ""
		port := 443
		if a.cleartext {
			port = 80
		}
		if p := u.Port(); p != "" {
			port, _ = strconv.Atoi(p)
		}
		ar.Kind, ar.URL, ar.Tunnel = Tunnel, &inner, &Binding{Host: u.Hostname(), Port: port, Cleartext: a.cleartext}
		if a.target != "" {
			if ar.URL, err = url.Parse(a.target); err != nil {
				t.Fatal(err)
			}
		}
		if a.host != "" {
			ar.Host = a.host
		}
	}
	if a.method == http.MethodConnect && !a.h2 {
		ar.Kind, ar.URL, ar.Host = Domain, nil, strings.TrimPrefix(a.url, "//")
	}
	ar.HTTP2 = a.h2
	return ar
}

func viewEnv(t *testing.T) *Env {
	t.Helper()
	p, err := policy.Load("view.toml", []byte(viewPolicy))
	if err != nil {
		t.Fatal(err)
	}
	in, err := NewChecks(p, nil, ErrNoSecretsFile, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &Env{Policy: p, Checks: in, Memory: exfil.New(exfil.Config{}), Decrypt: true}
}

// TestSee covers what the normalised view does to a request besides its decision: the agent's
// name taken out, the headers that must not go out, the scheme decided, the method's spelling;
// and the decisions on HTTP/2 streams, which lockhttp explain cannot express. Every other
// decision the view leads to is a case of the decide corpus (internal/explain/testdata/decide:
// view-*, framing-*, override-*, cleartext-*, tunnel-*).
func TestSee(t *testing.T) {
	basic := "Basic " + b64("agent-1:"+ghToken)
	cases := []struct {
		name    string
		in      arrive
		verdict policy.Verdict
		code    policy.Code
		rule    string
		agent   string
		gone    []string // headers that must not go out
		scheme  string   // the scheme decided; default: not checked
	}{
		{name: "a token in Proxy-Authorization is the gate's, never sent on",
			in:      arrive{method: "GET", url: "http://docs.example.com/a", header: http.Header{"Proxy-Authorization": {basic}}},
			verdict: policy.Free, rule: policy.RuleTrusted, agent: "agent-1", gone: []string{"Proxy-Authorization"}},
		{name: "a header that Connection names is stripped, with its token",
			in:      arrive{method: "GET", url: "http://docs.example.com/a", header: http.Header{"Connection": {"keep-alive, X-Tok"}, "X-Tok": {"token " + ghToken}}},
			verdict: policy.Free, rule: policy.RuleTrusted, gone: []string{"X-Tok", "Connection"}},
		{name: "a lower-case method goes out as its upper case",
			in:      arrive{method: "delete", url: "http://origin.example.com/x"},
			verdict: policy.Ask, rule: "ask-delete"},
		{name: "a WebSocket upgrade's offer of compression is removed", in: arrive{method: "GET", url: "http://docs.example.com/ws",
			header: http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}, "Sec-Websocket-Extensions": {"permessage-deflate"}}},
			verdict: policy.Free, rule: policy.RuleTrusted, gone: []string{"Sec-Websocket-Extensions"}},
		{name: "HTTP/2: a Host header beside :authority that names another host", in: arrive{method: "GET", url: "https://docs.example.com/", h2: true,
			header: http.Header{"Host": {"evil.example.net"}}},
			verdict: policy.Deny, code: policy.CodeFloor, rule: "floor:tunnel-binding"},
		{name: "HTTP/2: a Host header that agrees is decided, and not sent as a header", in: arrive{method: "GET", url: "https://docs.example.com/", h2: true,
			header: http.Header{"Host": {"docs.example.com"}}},
			verdict: policy.Free, rule: policy.RuleTrusted, gone: []string{"Host"}},
		{name: "HTTP/2: a connection-specific header", in: arrive{method: "GET", url: "https://docs.example.com/", h2: true,
			header: http.Header{"Transfer-Encoding": {"chunked"}}},
			verdict: policy.Deny, code: policy.CodeFloor, rule: "floor:h2-header"},
		{name: "HTTP/2: TE other than trailers", in: arrive{method: "GET", url: "https://docs.example.com/", h2: true,
			header: http.Header{"Te": {"gzip"}}},
			verdict: policy.Deny, code: policy.CodeFloor, rule: "floor:h2-header"},
		{name: "HTTP/2: TE trailers", in: arrive{method: "GET", url: "https://docs.example.com/", h2: true,
			header: http.Header{"Te": {"trailers"}}},
			verdict: policy.Free, rule: policy.RuleTrusted},
		{name: "HTTP/2: a CONNECT on a stream", in: arrive{method: "CONNECT", url: "https://docs.example.com/", h2: true},
			verdict: policy.Deny, code: policy.CodeFloor, rule: "framing:nested-connect"},
		{name: "a cleartext tunnel: a request is decided as an http:// URL of the tunnel's host", in: arrive{method: "GET", url: "http://docs.example.com/a", cleartext: true},
			verdict: policy.Free, rule: policy.RuleTrusted, scheme: "http"},
		{name: "a cleartext tunnel on another port: its Host names it", in: arrive{method: "GET", url: "http://docs.example.com:8080/a", cleartext: true},
			verdict: policy.Deny, code: policy.CodeFloor, rule: "floor:port", scheme: "http"},
		{name: "a cleartext tunnel: an absolute target naming its own host", in: arrive{method: "GET", url: "http://docs.example.com/a", cleartext: true, target: "http://docs.example.com/a"},
			verdict: policy.Free, rule: policy.RuleTrusted, scheme: "http"},
		{name: "a TLS tunnel: a request is decided as https://", in: arrive{method: "GET", url: "https://docs.example.com/a"},
			verdict: policy.Free, rule: policy.RuleTrusted, scheme: "https"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := viewEnv(t)
			a := c.in.arrival(t)
			v := See(a)
			res := Decide(env, v)
			if res.Verdict != c.verdict || res.Code != c.code || (c.rule != "" && res.Rule != c.rule) {
				t.Fatalf("got %v %q %q (%s); want %v %q %q", res.Verdict, res.Code, res.Rule, res.Reason, c.verdict, c.code, c.rule)
			}
			if c.scheme != "" && v.Scheme != c.scheme {
				t.Errorf("scheme %q, want %q", v.Scheme, c.scheme)
			}
			if v.Agent != c.agent {
				t.Errorf("agent %q, want %q", v.Agent, c.agent)
			}
			for _, k := range c.gone {
				if _, ok := v.Header[k]; ok {
					t.Errorf("header %s would go out", k)
				}
			}
			if c.in.method != strings.ToUpper(c.in.method) && v.Method != strings.ToUpper(c.in.method) {
				t.Errorf("method %q goes out; want the decided spelling", v.Method)
			}
		})
	}
}

// TestDecideFailsClosed breaks each part the gate builds beside the policy in turn: each
// refuses what it would have checked. (A secrets file that does not load is a corpus case:
// judge-secrets-file-unloaded.)
func TestDecideFailsClosed(t *testing.T) {
	req := arrive{method: "GET", url: "https://docs.example.com/"}
	cases := []struct {
		name string
		env  func(e *Env)
		code policy.Code
		rule string
	}{
		{"no policy", func(e *Env) { e.Policy = nil }, policy.CodeNoConsole, "no-policy"},
		{"the audit cannot be written", func(e *Env) { e.AuditErr = errors.New("disk full") }, policy.CodeNoAudit, "audit"},
		{"no detector", func(e *Env) { e.Checks = nil }, policy.CodeSecretEgress, RuleSecretsUnbuilt},
		{"a detector that could not be built", func(e *Env) {
			e.Checks = &Checks{BuildErr: errors.New("bad pattern"), SecretsErr: ErrNoSecretsFile}
		}, policy.CodeSecretEgress, RuleSecretsUnbuilt},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := viewEnv(t)
			c.env(env)
			res := Decide(env, See(req.arrival(t)))
			if res.Verdict != policy.Deny || res.Code != c.code || res.Rule != c.rule {
				t.Fatalf("got %v %q %q (%s); want DENY %q %q", res.Verdict, res.Code, res.Rule, res.Reason, c.code, c.rule)
			}
			if strings.Contains(res.Reason, "/run/secrets") || strings.Contains(res.Reason, "bad pattern") || strings.Contains(res.Reason, "disk full") {
				t.Errorf("the reason the agent reads carries an internal cause: %q", res.Reason)
			}
		})
	}
	// A bad [[secret]] pattern: NewChecks reports it and still returns Checks that refuse.
	p, err := policy.Load("view.toml", []byte(viewPolicy))
	if err != nil {
		t.Fatal(err)
	}
	in, _ := NewChecks(p, map[string]string{"k": "short"}, nil, nil, nil)
	if in == nil {
		t.Fatal("NewChecks returned nil")
	}
}

// TestSeeTransparent: a request to a transparent listener is decided by its Host, as a plain
// request to http://Host/...; a TLS connection to one by its ClientHello's server name, as a
// CONNECT; neither carries an agent name, and what contradicts itself is refused.
func TestSeeTransparent(t *testing.T) {
	env := viewEnv(t)
	basic := http.Header{"Proxy-Authorization": {"Basic YWdlbnQ6eA=="}} // agent:x
	cases := []struct {
		name    string
		a       Arrival
		rule    string // the deciding rule, or the refusal's
		verdict policy.Verdict
		auth    string
	}{
		{"origin-form, decided by Host", Arrival{Kind: Plain, Method: "GET", URL: &url.URL{Path: "/docs"}, Host: "docs.example.com", Port: 80}, "trusted", policy.Free, "docs.example.com"},
		{"absolute-form naming its Host", Arrival{Kind: Plain, Method: "PUT", URL: &url.URL{Scheme: "http", Host: "origin.example.com", Path: "/x"}, Host: "origin.example.com", Port: 80}, "no-put", policy.Deny, "origin.example.com"},
		{"the request line naming another host", Arrival{Kind: Plain, Method: "GET", URL: &url.URL{Scheme: "http", Host: "evil.example", Path: "/"}, Host: "docs.example.com", Port: 80}, "floor:tunnel-binding", policy.Deny, ""},
		{"https in the request line", Arrival{Kind: Plain, Method: "GET", URL: &url.URL{Scheme: "https", Host: "docs.example.com", Path: "/"}, Host: "docs.example.com", Port: 80}, "floor:scheme", policy.Deny, ""},
		{"no Host", Arrival{Kind: Plain, Method: "GET", URL: &url.URL{Path: "/"}, Port: 80}, "floor:origin-form", policy.Deny, ""},
		{"a Host naming another port", Arrival{Kind: Plain, Method: "GET", URL: &url.URL{Path: "/"}, Host: "docs.example.com:8080", Port: 80}, "floor:tunnel-binding", policy.Deny, ""},
		{"port 8080 named", Arrival{Kind: Plain, Method: "GET", URL: &url.URL{Path: "/"}, Host: "docs.example.com:8080", Port: 8080}, "floor:port", policy.Deny, "docs.example.com:8080"},
		{"TLS by its server name", Arrival{Kind: Domain, Host: "docs.example.com:443", Port: 443}, "decrypt", policy.Free, "docs.example.com:443"},
		{"TLS without a server name", Arrival{Kind: Domain, Port: 443}, "floor:sni", policy.Deny, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := c.a
			a.Transparent, a.Source, a.Header = true, netip.MustParseAddr("10.0.0.5"), basic.Clone()
			v := See(&a)
			if !v.Transparent || v.Agent != "" {
				t.Errorf("transparent %v agent %q: want transparent, no agent", v.Transparent, v.Agent)
			}
			if c.auth != "" && v.Authority != c.auth {
				t.Errorf("authority %q, want %q", v.Authority, c.auth)
			}
			res := Decide(env, v)
			if res.Verdict != c.verdict || res.Rule != c.rule {
				t.Errorf("%v %q (%s), want %v %q", res.Verdict, res.Rule, res.Reason, c.verdict, c.rule)
			}
		})
	}
	// The same origin-form request on the proxy (not transparent) is refused, and names its agent.
	a := &Arrival{Kind: Plain, Method: "GET", URL: &url.URL{Path: "/docs"}, Host: "docs.example.com", Header: basic.Clone(), Source: netip.MustParseAddr("10.0.0.5")}
	if v := See(a); v.Refusal == nil || v.Refusal.Rule != "floor:origin-form" || v.Agent != "agent" {
		t.Errorf("origin-form on the proxy: %+v", v)
	}
}
