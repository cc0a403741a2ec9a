package judge

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/claudeapi"
	"github.com/lockhttp/lockhttp/internal/policy"
)

// Fake credentials are built from parts so that the repository holds nothing a scanner takes
// for a real key.
var (
	ghToken     = "ghp_" + strings.Repeat("a1B2", 9)
	antKey      = "sk-ant-api03-" + strings.Repeat("Xy7_", 20) + "AA"
	otherAntKey = "sk-ant-api03-" + strings.Repeat("Qz9-", 20) + "BB"
	injectedVal = "inj_" + strings.Repeat("Zq5", 8)
)

const judgePolicy = `version = 1
trusted = ["github.com", "api.github.com", "docs.example.com"]

[[rule]]
name = "api-writes"
hosts = ["api.example.com", "api.github.com"]
methods = ["POST"]
verdict = "free"

[[inject]]
name = "example-key"
hosts = ["api.example.com"]
header = "Authorization"
secret = "example"
format = "Bearer {secret}"

[[inject]]
name = "missing"
hosts = ["needs.example.com"]
query = "key"
secret = "not-in-the-file"

[[secret]]
name = "acme"
pattern = "acme_[A-Za-z0-9]{24}"
hosts = ["api.acme.example"]

[sources]
agent = ["10.0.0.0/24"]
other = ["10.0.1.0/24"]

[settings]
buffer_limit = "64KiB"
`

func setup(t *testing.T) (*policy.Policy, *Checks) {
	t.Helper()
	p, err := policy.Load("judge.toml", []byte(judgePolicy))
	if err != nil {
		t.Fatal(err)
	}
	creds, err := claudeapi.ParseCredentials("creds.toml", []byte(fmt.Sprintf("version = 1\n[containers]\nagent = [\"sha256:%s\"]\nother = []\n", claudeapi.HashCredential(antKey))))
	if err != nil {
		t.Fatal(err)
	}
	in, err := NewChecks(p, map[string]string{"example": injectedVal}, nil, creds, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p, in
}

type tcase struct {
	name      string
	container string
	method    string
	url       string // scheme://host/path?query
	header    http.Header
	body      string
	verdict   policy.Verdict
	code      policy.Code
	rule      string
	reason    string
}

func run(t *testing.T, p *policy.Policy, in *Checks, c tcase) Result {
	t.Helper()
	scheme, rest, _ := strings.Cut(c.url, "://")
	authority, pathq, _ := strings.Cut(rest, "/")
	path, query, _ := strings.Cut("/"+pathq, "?")
	kind := Plain
	if scheme == "https" {
		kind = Tunnel
	}
	h := c.header
	if h == nil {
		h = http.Header{}
	}
	container := c.container
	if container == "" {
		container = "agent"
	}
	r := &Request{Kind: kind, Container: container, Source: netip.MustParseAddr("10.0.0.5"), Method: c.method,
		Scheme: scheme, Authority: authority, Path: path, Query: query, Header: h,
		MediaType: strings.ToLower(strings.Split(h.Get("Content-Type"), ";")[0])}
	if c.body != "" {
		r.Body, r.BodySize = []byte(c.body), int64(len(c.body))
	}
	return Decide(&Env{Policy: p, Checks: in}, r)
}

func TestDecideInspections(t *testing.T) {
	p, in := setup(t)
	basic := "Basic " + b64("user:"+ghToken)
	cases := []tcase{
		{name: "github token to github is free", method: "GET", url: "https://api.github.com/user", header: http.Header{"Authorization": {"token " + ghToken}}, verdict: policy.Free},
		{name: "github token in a header to another host", method: "GET", url: "https://docs.example.com/x", header: http.Header{"Authorization": {"token " + ghToken}}, verdict: policy.Deny, code: policy.CodeSecretEgress, rule: "secret:github", reason: "header Authorization"},
		{name: "in the query", method: "GET", url: "https://docs.example.com/x?t=" + ghToken, verdict: policy.Deny, code: policy.CodeSecretEgress, rule: "secret:github", reason: "query"},
		{name: "percent-encoded in the path", method: "GET", url: "https://docs.example.com/" + strings.ReplaceAll(ghToken, "_", "%5F"), verdict: policy.Deny, code: policy.CodeSecretEgress, rule: "secret:github", reason: "path"},
		{name: "in a JSON body", method: "POST", url: "https://api.example.com/v1", header: http.Header{"Content-Type": {"application/json"}}, body: `{"note":"` + ghToken + `"}`, verdict: policy.Deny, code: policy.CodeSecretEgress, rule: "secret:github", reason: "body"},
		{name: "escaped in a JSON body", method: "POST", url: "https://api.example.com/v1", header: http.Header{"Content-Type": {"application/json"}}, body: `{"note":"ghp\u005f` + ghToken[4:] + `"}`, verdict: policy.Deny, code: policy.CodeSecretEgress, rule: "secret:github"},
		{name: "in a form body", method: "POST", url: "https://api.example.com/v1", header: http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, body: "a=1&token=" + ghToken, verdict: policy.Deny, code: policy.CodeSecretEgress, rule: "secret:github"},
		{name: "in Basic auth", method: "GET", url: "https://docs.example.com/", header: http.Header{"Authorization": {basic}}, verdict: policy.Deny, code: policy.CodeSecretEgress, rule: "secret:github", reason: "basic"},
		{name: "gzip body", method: "POST", url: "https://api.example.com/v1", header: http.Header{"Content-Type": {"text/plain"}, "Content-Encoding": {"gzip"}}, body: gz("log: " + ghToken), verdict: policy.Deny, code: policy.CodeSecretEgress, rule: "secret:github"},
		{name: "custom secret to its host is fine", method: "GET", url: "https://api.acme.example/x?k=acme_" + strings.Repeat("Ab1", 8), verdict: policy.Ask, rule: policy.RuleDefault},
		{name: "custom secret elsewhere", method: "GET", url: "https://docs.example.com/x?k=acme_" + strings.Repeat("Ab1", 8), verdict: policy.Deny, code: policy.CodeSecretEgress, rule: "secret:custom:acme"},
		{name: "an injected value sent by the agent, even to its own host", method: "POST", url: "https://api.example.com/v1", body: "x=" + injectedVal, verdict: policy.Deny, code: policy.CodeSecretEgress, rule: "secret:injected:example"},
		{name: "injection", method: "POST", url: "https://api.example.com/v1", body: "x=1", verdict: policy.Free, rule: "api-writes"},
		{name: "injection with the secret missing", method: "GET", url: "https://needs.example.com/x", verdict: policy.Deny, code: policy.CodeInject, rule: "inject:missing", reason: "lacks it"},
		{name: "body over buffer_limit", method: "POST", url: "https://api.example.com/v1", body: strings.Repeat("a", 65*1024), verdict: policy.Deny, code: policy.CodeBodyTooLarge, rule: "buffer_limit"},
		{name: "gzip bomb", method: "POST", url: "https://api.example.com/v1", header: http.Header{"Content-Encoding": {"gzip"}}, body: gz(strings.Repeat("a", 1<<20)), verdict: policy.Deny, code: policy.CodeBodyTooLarge},
		{name: "an unknown coding asks", method: "POST", url: "https://api.example.com/v1", header: http.Header{"Content-Encoding": {"zstd"}}, body: "\x28\xb5\x2f\xfd", verdict: policy.Ask, rule: "content-coding"},
		// Claude API.
		{name: "messages, plain", method: "POST", url: "https://api.anthropic.com/v1/messages?beta=true", header: http.Header{"Content-Type": {"application/json"}, "X-Api-Key": {antKey}}, body: `{"model":"claude","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`, verdict: policy.Free, rule: claudeapi.RuleMessages},
		{name: "messages with mcp_servers", method: "POST", url: "https://api.anthropic.com/v1/messages", header: http.Header{"Content-Type": {"application/json"}, "X-Api-Key": {antKey}}, body: `{"model":"claude","messages":[],"mcp_servers":[{"type":"url","url":"https://mcp.example"}]}`, verdict: policy.Ask, rule: claudeapi.RuleMessages, reason: "mcp_servers"},
		{name: "a credential that is not this container's asks", container: "other", method: "POST", url: "https://api.anthropic.com/v1/messages", header: http.Header{"Content-Type": {"application/json"}, "X-Api-Key": {antKey}}, body: `{"model":"claude","max_tokens":10,"messages":[]}`, verdict: policy.Ask, rule: claudeapi.RuleNewCredential, reason: "container other sends a new Claude credential"},
		{name: "another key asks", method: "GET", url: "https://api.anthropic.com/v1/models", header: http.Header{"X-Api-Key": {otherAntKey}}, verdict: policy.Ask, rule: claudeapi.RuleNewCredential, reason: "approving binds it to agent"},
		{name: "a new key with mcp_servers names both", method: "POST", url: "https://api.anthropic.com/v1/messages", header: http.Header{"Content-Type": {"application/json"}, "X-Api-Key": {otherAntKey}}, body: `{"model":"claude","messages":[],"mcp_servers":[{"type":"url","url":"https://mcp.example"}]}`, verdict: policy.Ask, rule: claudeapi.RuleNewCredential, reason: "also claude-api:messages: "},
		{name: "a new key does not lift a size refusal", method: "POST", url: "https://api.anthropic.com/v1/messages", header: http.Header{"Content-Type": {"application/json"}, "X-Api-Key": {otherAntKey}}, body: strings.Repeat("a", 65*1024), verdict: policy.Deny, code: policy.CodeBodyTooLarge},
		{name: "two credentials", method: "GET", url: "https://api.anthropic.com/v1/models", header: http.Header{"X-Api-Key": {antKey}, "Authorization": {"Bearer " + antKey}}, verdict: policy.Deny, code: policy.CodeSecretEgress, rule: claudeapi.RuleCredential, reason: "two"},
		{name: "files ask", method: "GET", url: "https://api.anthropic.com/v1/files", header: http.Header{"X-Api-Key": {antKey}}, verdict: policy.Ask, rule: claudeapi.RuleFiles},
		{name: "reads are free", method: "GET", url: "https://api.anthropic.com/v1/models", header: http.Header{"X-Api-Key": {antKey}}, verdict: policy.Free, rule: claudeapi.RuleRead},
		{name: "batches ask", method: "POST", url: "https://api.anthropic.com/v1/messages/batches", header: http.Header{"X-Api-Key": {antKey}, "Content-Type": {"application/json"}}, body: `{}`, verdict: policy.Ask, rule: claudeapi.RuleWrite},
		{name: "an anthropic key to another host", method: "POST", url: "https://docs.example.com/x", header: http.Header{"X-Api-Key": {antKey}}, verdict: policy.Deny, code: policy.CodeSecretEgress, rule: "secret:anthropic"},
		{name: "another host under anthropic.com asks", method: "GET", url: "https://mcp-proxy.anthropic.com/x", verdict: policy.Ask, rule: claudeapi.RuleHost},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := run(t, p, in, c)
			if res.Verdict != c.verdict || res.Code != c.code || (c.rule != "" && res.Rule != c.rule) {
				t.Fatalf("got %v %q %q (%s); want %v %q %q", res.Verdict, res.Code, res.Rule, res.Reason, c.verdict, c.code, c.rule)
			}
			if !strings.Contains(strings.ToLower(res.Reason), strings.ToLower(c.reason)) {
				t.Errorf("reason %q does not mention %q", res.Reason, c.reason)
			}
			for _, secret := range []string{ghToken, antKey, otherAntKey, injectedVal} {
				if strings.Contains(res.Reason, secret) || strings.Contains(res.Reason, secret[8:20]) {
					t.Errorf("the reason shows a credential: %q", res.Reason)
				}
			}
		})
	}
}

// A credential a human bound to the container (served by the console beside the policy) passes
// for that container only; the ASK about a new one carries what its approval binds, and never
// passes without a human.
func TestBoundCredential(t *testing.T) {
	p, in := setup(t)
	models := tcase{method: "GET", url: "https://api.anthropic.com/v1/models", header: http.Header{"X-Api-Key": {otherAntKey}}}
	res := run(t, p, in, models)
	if res.Verdict != policy.Ask || res.Bind == nil || !res.NeverAuto {
		t.Fatalf("a new credential: %v %s bind %+v never-auto %v", res.Verdict, res.Rule, res.Bind, res.NeverAuto)
	}
	if res.Bind.Container != "agent" || res.Bind.Hash != claudeapi.HashCredential(otherAntKey) {
		t.Fatalf("bind %+v, want agent and the key's hash", res.Bind)
	}
	bound := *p
	bound.ClaudeBound = map[string][]string{"agent": {claudeapi.HashCredential(otherAntKey)}}
	if res := run(t, &bound, in, models); res.Verdict != policy.Free || res.Bind != nil {
		t.Fatalf("a bound credential: %v %s (%s) bind %+v", res.Verdict, res.Rule, res.Reason, res.Bind)
	}
	// The file's credential still passes beside the bound one.
	if res := run(t, &bound, in, tcase{method: "GET", url: "https://api.anthropic.com/v1/models", header: http.Header{"X-Api-Key": {antKey}}}); res.Verdict != policy.Free {
		t.Fatalf("the file's credential: %v %s", res.Verdict, res.Rule)
	}
	other := models
	other.container = "other"
	if res := run(t, &bound, in, other); res.Verdict != policy.Ask || res.Bind == nil || res.Bind.Container != "other" {
		t.Fatalf("agent's bound credential from other: %v %s bind %+v", res.Verdict, res.Rule, res.Bind)
	}
	two := tcase{method: "GET", url: "https://api.anthropic.com/v1/models", header: http.Header{"X-Api-Key": {otherAntKey}, "Authorization": {"Bearer " + otherAntKey}}}
	if res := run(t, &bound, in, two); res.Verdict != policy.Deny || res.Code != policy.CodeSecretEgress {
		t.Fatalf("two credentials: %v %s", res.Verdict, res.Rule)
	}
	// A credentials file that did not load: refused, not asked.
	broken, _ := NewChecks(p, map[string]string{"example": injectedVal}, nil, nil, fmt.Errorf("creds.toml: mode 0644"))
	if res := run(t, p, broken, models); res.Verdict != policy.Deny || res.Code != policy.CodeSecretEgress || res.Bind != nil || !strings.Contains(res.Reason, "did not load") {
		t.Fatalf("file did not load: %v %s (%s)", res.Verdict, res.Rule, res.Reason)
	}
}

func TestInjectInstruction(t *testing.T) {
	p, in := setup(t)
	res := run(t, p, in, tcase{method: "POST", url: "https://api.example.com/v1", body: "x"})
	if res.Inject == nil || res.Inject.Header != "Authorization" || res.Inject.Value != "Bearer "+injectedVal {
		t.Fatalf("inject %+v", res.Inject)
	}
	// No injection for another host, nor for a denied request.
	if res := run(t, p, in, tcase{method: "GET", url: "https://docs.example.com/"}); res.Inject != nil {
		t.Fatal("injected for another host")
	}
	// Plain http:// to an injecting host is refused: the credential would cross the network in
	// clear text. A rule with http = true adds it there too.
	if res := run(t, p, in, tcase{method: "POST", url: "http://api.example.com/v1", body: "x"}); res.Inject != nil || res.Code != policy.CodeInject ||
		res.Rule != "inject:example-key" || !strings.Contains(res.Reason, "https only") {
		t.Fatalf("plain http:// to an injecting host: %+v %+v", res.Decision, res.Inject)
	}
	// The same through a CONNECT to port 443 whose client speaks plain HTTP inside: http://.
	u, _ := url.Parse("/v1")
	plainIn := &Arrival{Kind: Tunnel, Source: netip.MustParseAddr("10.0.0.5"), Container: "agent", Method: "GET", URL: u, Host: "api.example.com:443",
		Header: http.Header{}, Tunnel: &Binding{Host: "api.example.com", Port: 443, Cleartext: true}}
	if res := Decide(&Env{Policy: p, Checks: in}, See(plainIn)); res.Inject != nil || res.Code != policy.CodeInject || res.Rule != "inject:example-key" {
		t.Fatalf("plain HTTP through a CONNECT to an injecting host's 443: %+v %+v", res.Decision, res.Inject)
	}
	hp, err := policy.Load("judge.toml", []byte(strings.Replace(judgePolicy, `name = "example-key"`, "name = \"example-key\"\nhttp = true", 1)))
	if err != nil {
		t.Fatal(err)
	}
	hin, _ := NewChecks(hp, map[string]string{"example": injectedVal}, nil, nil, nil)
	if res := run(t, hp, hin, tcase{method: "POST", url: "http://api.example.com/v1", body: "x"}); res.Inject == nil || res.Inject.Value != "Bearer "+injectedVal {
		t.Fatalf("http = true, plain http://: %+v %+v", res.Decision, res.Inject)
	}
	// A secrets file that did not load refuses injecting hosts.
	in2, _ := NewChecks(p, nil, fmt.Errorf("mode 0644"), nil, nil)
	if res := run(t, p, in2, tcase{method: "POST", url: "https://api.example.com/v1", body: "x"}); res.Code != policy.CodeInject || !strings.Contains(res.Reason, "does not load") {
		t.Fatalf("%+v", res.Decision)
	}
}

func gz(s string) string {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	w.Write([]byte(s))
	w.Close()
	return b.String()
}
