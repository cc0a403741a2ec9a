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

// TestSee covers what the normalised view does to a request before any rule sees it: each case
// was decided differently by the gate and by lockhttp explain, or not caught at all, before
// the view was one function.
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
		{name: "the same token in an end-to-end header is refused",
			in:      arrive{method: "GET", url: "http://docs.example.com/a", header: http.Header{"X-Tok": {"token " + ghToken}}},
			verdict: policy.Deny, code: policy.CodeSecretEgress, rule: "secret:github"},
		{name: "a lower-case method is decided as its upper case",
			in:      arrive{method: "delete", url: "http://origin.example.com/x"},
			verdict: policy.Ask, rule: "ask-delete"},
		{name: "mixed case too", in: arrive{method: "Put", url: "https://origin.example.com/x"},
			verdict: policy.Deny, code: policy.CodeRule, rule: "no-put"},
		{name: "X-HTTP-Method-Override is decided as the method it names",
			in:      arrive{method: "POST", url: "http://origin.example.com/x", header: http.Header{"X-Http-Method-Override": {"DELETE"}}},
			verdict: policy.Ask, rule: "ask-delete"},
		{name: "X-HTTP-Method too", in: arrive{method: "POST", url: "https://origin.example.com/x", header: http.Header{"X-Http-Method": {"put"}}},
			verdict: policy.Deny, code: policy.CodeRule, rule: "no-put"},
		{name: "X-Method-Override too", in: arrive{method: "POST", url: "https://origin.example.com/x", header: http.Header{"X-Method-Override": {"PUT"}}},
			verdict: policy.Deny, code: policy.CodeRule, rule: "no-put"},
		{name: "a _method query parameter", in: arrive{method: "POST", url: "http://origin.example.com/x?_method=DELETE"},
			verdict: policy.Ask, rule: "ask-delete"},
		{name: "a _method form field", in: arrive{method: "POST", url: "http://origin.example.com/x",
			header: http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, body: "a=1&_method=put"},
			verdict: policy.Deny, code: policy.CodeRule, rule: "no-put"},
		{name: "an override to a read does not make a write a read",
			in:      arrive{method: "PUT", url: "http://origin.example.com/x", header: http.Header{"X-Http-Method-Override": {"GET"}}},
			verdict: policy.Deny, code: policy.CodeRule, rule: "no-put"},
		{name: "overrides that disagree are refused",
			in:      arrive{method: "POST", url: "http://origin.example.com/x?_method=GET", header: http.Header{"X-Http-Method-Override": {"DELETE"}}},
			verdict: policy.Deny, code: policy.CodeFloor, rule: "floor:method-override"},
		{name: "an override that is not a method is refused",
			in:      arrive{method: "POST", url: "http://origin.example.com/x", header: http.Header{"X-Http-Method-Override": {"DE LETE"}}},
			verdict: policy.Deny, code: policy.CodeFloor, rule: "floor:method-override"},
		{name: "an h2c upgrade is refused", in: arrive{method: "GET", url: "http://docs.example.com/", header: http.Header{"Connection": {"Upgrade, HTTP2-Settings"}, "Upgrade": {"h2c"}}},
			verdict: policy.Deny, code: policy.CodeFloor, rule: "floor:upgrade"},
		{name: "a WebSocket upgrade is decided, its offer of compression removed", in: arrive{method: "GET", url: "http://docs.example.com/ws",
			header: http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}, "Sec-Websocket-Extensions": {"permessage-deflate"}}},
			verdict: policy.Free, rule: policy.RuleTrusted, gone: []string{"Sec-Websocket-Extensions"}},
		{name: "https:// in a plain proxy request", in: arrive{method: "GET", url: "https://docs.example.com/", plain: true},
			verdict: policy.Deny, code: policy.CodeFloor, rule: "floor:scheme"},
		{name: "a scheme other than http", in: arrive{method: "GET", url: "ftp://docs.example.com/"},
			verdict: policy.Deny, code: policy.CodeFloor, rule: "floor:scheme"},
		{name: "origin-form", in: arrive{method: "GET", url: "/just/a/path"},
			verdict: policy.Deny, code: policy.CodeFloor, rule: "floor:origin-form"},
		{name: "a Host inside a tunnel that names another host", in: arrive{method: "GET", url: "https://docs.example.com/", host: "evil.example.net"},
			verdict: policy.Deny, code: policy.CodeFloor, rule: "floor:tunnel-binding"},
		{name: "a Host inside a tunnel that names another port", in: arrive{method: "GET", url: "https://docs.example.com/", host: "docs.example.com:8443"},
			verdict: policy.Deny, code: policy.CodeFloor, rule: "floor:tunnel-binding"},
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
		{name: "a cleartext tunnel: a request is decided as an http:// URL of the tunnel's host", in: arrive{method: "GET", url: "http://docs.example.com/a", cleartext: true},
			verdict: policy.Free, rule: policy.RuleTrusted, scheme: "http"},
		{name: "a cleartext tunnel on another port: its Host names it, and the floor's ports apply", in: arrive{method: "GET", url: "http://docs.example.com:8080/a", cleartext: true},
			verdict: policy.Deny, code: policy.CodeFloor, rule: "floor:port", scheme: "http"},
		{name: "a cleartext tunnel: a Host with no port means 80, not the tunnel's 8080", in: arrive{method: "GET", url: "http://docs.example.com:8080/a", cleartext: true, host: "docs.example.com"},
			verdict: policy.Deny, code: policy.CodeFloor, rule: "floor:tunnel-binding"},
		{name: "a cleartext tunnel: a Host naming 443", in: arrive{method: "GET", url: "http://docs.example.com/a", cleartext: true, host: "docs.example.com:443"},
			verdict: policy.Deny, code: policy.CodeFloor, rule: "floor:tunnel-binding"},
		{name: "a cleartext tunnel: an absolute https:// target", in: arrive{method: "GET", url: "http://docs.example.com/a", cleartext: true, target: "https://docs.example.com:80/a"},
			verdict: policy.Deny, code: policy.CodeFloor, rule: "floor:tunnel-binding"},
		{name: "a cleartext tunnel: an absolute target naming another host", in: arrive{method: "GET", url: "http://docs.example.com/a", cleartext: true, target: "http://evil.example.net/a"},
			verdict: policy.Deny, code: policy.CodeFloor, rule: "floor:tunnel-binding"},
		{name: "a cleartext tunnel: an absolute target naming its own host", in: arrive{method: "GET", url: "http://docs.example.com/a", cleartext: true, target: "http://docs.example.com/a"},
			verdict: policy.Free, rule: policy.RuleTrusted, scheme: "http"},
		{name: "a TLS tunnel: an absolute http:// target", in: arrive{method: "GET", url: "https://docs.example.com/a", target: "http://docs.example.com:443/a"},
			verdict: policy.Deny, code: policy.CodeFloor, rule: "floor:tunnel-binding"},
		{name: "a TLS tunnel: a request is decided as https://", in: arrive{method: "GET", url: "https://docs.example.com/a"},
			verdict: policy.Free, rule: policy.RuleTrusted, scheme: "https"},
		{name: "a CONNECT inside a tunnel (an HTTP/2 stream)", in: arrive{method: "CONNECT", url: "https://docs.example.com/", h2: true},
			verdict: policy.Deny, code: policy.CodeFloor, rule: "framing:nested-connect"},
		{name: "the gate's own name", in: arrive{method: "GET", url: "http://lockhttp.internal/"},
			verdict: policy.Free, rule: RuleSelf},
		{name: "the gate's own name decrypted", in: arrive{method: "CONNECT", url: "//lockhttp.internal:443"},
			verdict: policy.Free, rule: RuleSelf},
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
// refuses what it would have checked.
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
		{"a secrets file that does not load", func(e *Env) {
			in, _ := NewChecks(e.Policy, nil, errors.New("/run/secrets: mode 0644"), nil, nil)
			e.Checks = in
		}, policy.CodeInject, RuleSecretsUnloaded},
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

// TestReasonNeverCarriesASecret: a reason quotes parts of the request; a credential among them
// is masked.
func TestReasonNeverCarriesASecret(t *testing.T) {
	env := viewEnv(t)
	cases := []arrive{
		{method: "POST", url: "http://docs.example.com/x", header: http.Header{"Connection": {"Upgrade"}, "Upgrade": {"h2c-" + ghToken}}},
		{method: "POST", url: "http://docs.example.com/x", header: http.Header{"X-Http-Method-Override": {ghToken}}},
		{method: "CONNECT", url: "//" + strings.ToLower(ghToken) + ".local:443"},
		{method: "GET", url: "http://" + ghToken + ".localhost/"},
	}
	for _, c := range cases {
		res := Decide(env, See(c.arrival(t)))
		if res.Verdict != policy.Deny {
			t.Fatalf("%s %s: %v", c.method, c.url, res.Decision)
		}
		if strings.Contains(strings.ToLower(res.Reason), strings.ToLower(ghToken[4:20])) {
			t.Errorf("%s %s: the reason shows the credential: %q", c.method, c.url, res.Reason)
		}
	}
}
