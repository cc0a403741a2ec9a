package judge

import (
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

// The decisions of these inspections (secret egress, injection, the body's size and coding, the
// Claude API) are cases of the decide corpus, internal/explain/testdata/decide. What stays
// here is what a decision carries besides its verdict, code, rule and reason.

// TestBoundCredential: the ASK about a credential the container is not bound to carries what
// its approval binds and never passes without a human; once bound, nothing is left to bind.
// (The verdicts are corpus cases: judge-claude-*.)
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
	other := models
	other.container = "other"
	if res := run(t, &bound, in, other); res.Bind == nil || res.Bind.Container != "other" {
		t.Fatalf("agent's bound credential from other: %v %s bind %+v", res.Verdict, res.Rule, res.Bind)
	}
	// A credentials file that did not load: refused, nothing to bind.
	broken, _ := NewChecks(p, map[string]string{"example": injectedVal}, nil, nil, fmt.Errorf("creds.toml: mode 0644"))
	if res := run(t, p, broken, models); res.Verdict != policy.Deny || res.Bind != nil {
		t.Fatalf("file did not load: %v %s (%s) bind %+v", res.Verdict, res.Rule, res.Reason, res.Bind)
	}
}

// TestInjectInstruction: a FREE request to an injecting host carries the credential to add; no
// other request does. (The refusals are corpus cases: judge-inject-*, inject-*.)
func TestInjectInstruction(t *testing.T) {
	p, in := setup(t)
	res := run(t, p, in, tcase{method: "POST", url: "https://api.example.com/v1", body: "x"})
	if res.Inject == nil || res.Inject.Header != "Authorization" || res.Inject.Value != "Bearer "+injectedVal {
		t.Fatalf("inject %+v", res.Inject)
	}
	// No injection for another host, nor for a refused request.
	if res := run(t, p, in, tcase{method: "GET", url: "https://docs.example.com/"}); res.Inject != nil {
		t.Fatal("injected for another host")
	}
	if res := run(t, p, in, tcase{method: "POST", url: "http://api.example.com/v1", body: "x"}); res.Inject != nil || res.Verdict != policy.Deny {
		t.Fatalf("plain http:// to an injecting host: %+v %+v", res.Decision, res.Inject)
	}
	// The same through a CONNECT to port 443 whose client speaks plain HTTP inside: http://.
	u, _ := url.Parse("/v1")
	plainIn := &Arrival{Kind: Tunnel, Source: netip.MustParseAddr("10.0.0.5"), Container: "agent", Method: "GET", URL: u, Host: "api.example.com:443",
		Header: http.Header{}, Tunnel: &Binding{Host: "api.example.com", Port: 443, Cleartext: true}}
	if res := Decide(&Env{Policy: p, Checks: in}, See(plainIn)); res.Inject != nil || res.Verdict != policy.Deny {
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
}
