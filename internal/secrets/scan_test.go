package secrets

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/floor"
)

// kindCase is one credential and the host it belongs to ("" for none).
type kindCase struct {
	name  string
	kind  Kind
	value string
	own   string
}

func kindCases() []kindCase {
	return []kindCase{
		{"github classic", KindGitHub, fakeGitHub(), "api.github.com"},
		{"github fine-grained", KindGitHub, fakeGitHubFine(), "github.com"},
		{"anthropic api", KindAnthropic, fakeAnthropic(), "api.anthropic.com"},
		{"anthropic oauth", KindAnthropic, fakeAnthropicOAuth(), "claude.ai"},
		{"openai project", KindOpenAI, fakeOpenAI(), "api.openai.com"},
		{"openai legacy", KindOpenAI, fakeOpenAILegacy(), "api.openai.com"},
		{"aws id", KindAWS, fakeAWS(), "sts.amazonaws.com"},
		{"slack", KindSlack, fakeSlack(), "slack.com"},
		{"slack webhook", KindSlack, fakeSlackHook(), "hooks.slack.com"},
		{"stripe live", KindStripe, fakeStripe(), "api.stripe.com"},
		{"stripe restricted test", KindStripe, fakeStripeTest(), "files.stripe.com"},
		{"huggingface", KindHuggingFace, fakeHuggingFace(), "huggingface.co"},
		{"google", KindGoogle, fakeGoogle(), "generativelanguage.googleapis.com"},
		{"jwt with issuer", KindJWT, fakeJWTIss(), "auth.example.com"},
		{"jwt without issuer", KindJWT, fakeJWTNoIss(), "auth.example.com"},
		{"private key rsa", KindPrivateKey, fakePEM("RSA PRIVATE KEY"), ""},
		{"private key openssh", KindPrivateKey, fakePEM("OPENSSH PRIVATE KEY"), ""},
		{"private key pkcs8", KindPrivateKey, fakePEM("PRIVATE KEY"), ""},
		{"private key encrypted", KindPrivateKey, fakePEM("ENCRYPTED PRIVATE KEY"), ""},
		{"private key ec", KindPrivateKey, fakePEM("EC PRIVATE KEY"), ""},
		{"custom", "custom:acme", "acme_" + strings.Repeat("0f", 16), "api.acme.test"},
		{"injected", "injected:deploy", "hunter2-" + "correct-horse", ""},
	}
}

// placeCase puts a credential somewhere in a request.
type placeCase struct {
	name  string
	where string
	put   func(r *Request, v string)
}

func escapeAll(v string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		fmt.Fprintf(&b, "%%%02X", v[i])
	}
	return b.String()
}

func jsonString(v string) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// uEscaped writes v as a JSON string with every character as a \u escape.
func uEscaped(v string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range v {
		fmt.Fprintf(&b, `\u%04x`, r)
	}
	b.WriteByte('"')
	return b.String()
}

func placeCases() []placeCase {
	b64 := base64.StdEncoding.EncodeToString
	return []placeCase{
		{"header", "header X-Data", func(r *Request, v string) { r.Header.Set("X-Data", "value "+v) }},
		{"bearer", "header Authorization", func(r *Request, v string) { r.Header.Set("Authorization", "Bearer "+v) }},
		{"query", "query token", func(r *Request, v string) { r.Query = "a=1&token=" + url.QueryEscape(v) }},
		{"query double-encoded", "query q", func(r *Request, v string) { r.Query = "q=" + url.QueryEscape(url.QueryEscape(v)) }},
		{"path percent-encoded", "path", func(r *Request, v string) { r.Path = "/repos/" + escapeAll(v) + "/x" }},
		{"path double-encoded", "path", func(r *Request, v string) { r.Path = "/x/" + strings.ReplaceAll(escapeAll(v), "%", "%25") }},
		{"json body", "body (json) messages[0].content", func(r *Request, v string) {
			r.MediaType = "application/json"
			r.Body = []byte(`{"model":"m","messages":[{"role":"user","content":` + jsonString("use "+v+" now") + `}]}`)
		}},
		{"json body unicode escapes", "body (json) messages[1].content", func(r *Request, v string) {
			r.MediaType = "application/vnd.api+json"
			r.Body = []byte(`{"messages":[{"content":"hi\n"},{"content":` + uEscaped(v) + `}]}`)
		}},
		{"form body", "body (form) key", func(r *Request, v string) {
			r.MediaType = "application/x-www-form-urlencoded"
			r.Body = []byte("a=b+c&key=" + url.QueryEscape(v) + "&z=1")
		}},
		{"multipart body", "body (multipart) file", func(r *Request, v string) {
			r.MediaType = "multipart/form-data"
			r.Body = []byte("--XyZ\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nplain\r\n--XyZ\r\n" +
				"Content-Disposition: form-data; name=\"file\"; filename=\"k.txt\"\r\nContent-Type: text/plain\r\n\r\n" +
				v + "\r\n--XyZ--\r\n")
		}},
		{"basic auth password", "header Authorization (basic password)", func(r *Request, v string) {
			r.Header.Set("Authorization", "Basic "+b64([]byte("x-access-token:"+v)))
		}},
		{"base64 custom header", "header X-Blob (base64)", func(r *Request, v string) { r.Header.Set("X-Blob", b64([]byte(v))) }},
	}
}

func testDetector(t testing.TB) *Detector {
	t.Helper()
	d, err := NewDetector(Config{
		Custom:   []Custom{{Name: "acme", Pattern: `acme_[0-9a-f]{32}`, Hosts: []string{"*.acme.test"}}},
		Injected: []Injected{{Name: "deploy", Value: "hunter2-" + "correct-horse"}},
		JWTHosts: []string{"auth.example.com"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func testDetectorWith(t testing.TB, c Config) *Detector {
	t.Helper()
	d, err := NewDetector(c)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func newRequest(host string) *Request {
	return &Request{Host: host, Path: "/", Header: http.Header{"User-Agent": {"agent/1.0"}, "Accept": {"*/*"}}}
}

// assertClean fails when any form of the value shows in what a finding prints.
func assertClean(t *testing.T, f Finding, v string) {
	t.Helper()
	printed := fmt.Sprintf("%+v %v %#v", f, f, f)
	for _, form := range []string{v, url.QueryEscape(v), base64.StdEncoding.EncodeToString([]byte(v)), strings.TrimSpace(v)} {
		if strings.Contains(printed, form) {
			t.Fatalf("the finding shows the value: %s", printed)
		}
	}
	if strings.Contains(f.Where, "acme_") || len(f.Where) > 120 {
		t.Fatalf("Where %q shows part of the value", f.Where)
	}
}

func TestScanKindsByPlace(t *testing.T) {
	d := testDetector(t)
	for _, k := range kindCases() {
		for _, p := range placeCases() {
			t.Run(k.name+"/"+p.name, func(t *testing.T) {
				if k.own != "" {
					r := newRequest(k.own)
					p.put(r, k.value)
					if f := d.Egress(r); f != nil {
						t.Fatalf("to its own host %s: refused %+v", k.own, *f)
					}
					fs := d.Scan(r)
					if !hasFinding(fs, k.kind, p.where) {
						t.Fatalf("to its own host: no %s finding at %q in %+v", k.kind, p.where, fs)
					}
					for _, f := range fs {
						assertClean(t, f, k.value)
					}
				}
				r := newRequest("evil.example.net")
				p.put(r, k.value)
				f := d.Egress(r)
				if f == nil {
					t.Fatalf("to another host: not refused; findings %+v", d.Scan(r))
				}
				if f.Kind != k.kind || f.Where != p.where {
					t.Fatalf("refused %s at %q; want %s at %q", f.Kind, f.Where, k.kind, p.where)
				}
				if want := hash8(reported(k.value)); f.Hash != want {
					t.Fatalf("hash %s; want the hash of the value %s", f.Hash, want)
				}
				assertClean(t, *f, k.value)
				for _, g := range d.Scan(r) {
					assertClean(t, g, k.value)
				}
			})
		}
	}
}

// reported is the part of a fake credential that a finding reports: a webhook without its
// scheme, a PEM block without the final line end.
func reported(v string) string {
	return strings.TrimSpace(strings.TrimPrefix(v, "https://"))
}

func hasFinding(fs []Finding, k Kind, where string) bool {
	for _, f := range fs {
		if f.Kind == k && f.Where == where {
			return true
		}
	}
	return false
}

func TestScanHostsOfKinds(t *testing.T) {
	d := testDetector(t)
	tests := []struct {
		name  string
		value string
		host  string
		ok    bool
	}{
		{"github to ghcr", fakeGitHub(), "ghcr.io", true},
		{"github to raw content", fakeGitHub(), "raw.githubusercontent.com", true},
		{"github to bare githubusercontent", fakeGitHub(), "githubusercontent.com", false},
		{"github to a look-alike", fakeGitHub(), "github.com.evil.net", false},
		{"github to a suffix look-alike", fakeGitHub(), "evilgithub.com", false},
		{"anthropic to statsig", fakeAnthropic(), "statsig.anthropic.com", true},
		{"anthropic to other anthropic host", fakeAnthropic(), "docs.anthropic.com", false},
		{"anthropic to openai", fakeAnthropic(), "api.openai.com", false},
		{"openai to a sub-domain", fakeOpenAI(), "files.openai.com", true},
		{"aws to bare", fakeAWS(), "amazonaws.com", true},
		{"slack to a workspace", fakeSlack(), "acme.slack.com", true},
		{"huggingface to cdn", fakeHuggingFace(), "cdn-lfs.hf.co", true},
		{"google to a google host", fakeGoogle(), "www.google.com", true},
		{"google to bare google", fakeGoogle(), "google.com", false},
		{"jwt to a configured host", fakeJWTIss(), "auth.example.com", true},
		{"jwt to a configured host's sibling", fakeJWTIss(), "api.example.com", false},
		{"jwt to the host its iss names", fakeJWT(`{"alg":"HS256"}`, `{"iss":"https://evil.example.net"}`), "evil.example.net", false},
		{"custom to its hosts", "acme_" + strings.Repeat("0f", 16), "eu.acme.test", true},
		{"custom to the bare suffix", "acme_" + strings.Repeat("0f", 16), "acme.test", false},
		{"host with upper case and dot", fakeGitHub(), "API.GitHub.com.", true},
		{"host with a port", fakeGitHub(), "api.github.com:443", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRequest(tt.host)
			r.Header.Set("Authorization", "Bearer "+tt.value)
			f := d.Egress(r)
			if (f == nil) != tt.ok {
				t.Fatalf("Egress to %s = %+v; want allowed %v", tt.host, f, tt.ok)
			}
		})
	}
}

func TestJWTHosts(t *testing.T) {
	d, err := NewDetector(Config{JWTHosts: []string{"*.example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, token, host string
		ok                bool
	}{
		{"configured host, issuer there", fakeJWTIss(), "auth.example.com", true},
		{"configured host, no issuer", fakeJWTNoIss(), "api.example.com", true},
		{"configured host, issuer elsewhere", fakeJWT(`{"alg":"ES256"}`, `{"iss":"login.example.org"}`), "api.example.com", true},
		{"elsewhere", fakeJWTIss(), "api.example.org", false},
		{"the host its iss names", fakeJWT(`{"alg":"ES256"}`, `{"iss":"login.example.org"}`), "login.example.org", false},
		{"the host its iss names, with a path", fakeJWT(`{"alg":"ES256"}`, `{"iss":"https://login.example.org/tenant/v2.0"}`), "login.example.org", false},
		{"the bare configured suffix", fakeJWTIss(), "example.com", false},
		{"header with spaces", fakeJWT("{ \"alg\" : \"none\" }", `{"iss":"a.example.org"}`), "b.example.com", true},
		{"header with a line break", fakeJWT("{\n \"alg\": \"none\"\n}", `{"iss":"a.example.org"}`), "a.example.org", false},
		{"jwe", fakeJWT(`{"alg":"RSA-OAEP","enc":"A256GCM"}`, "k") + ".iv.tag", "x.example.org", false},
		{"jwe to a configured host", fakeJWT(`{"alg":"RSA-OAEP","enc":"A256GCM"}`, "k") + ".iv.tag", "x.example.com", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRequest(tt.host)
			r.Header.Set("Cookie", "session="+tt.token)
			fs := d.Scan(r)
			if len(fs) != 1 || fs[0].Kind != KindJWT {
				t.Fatalf("findings %+v; want one jwt", fs)
			}
			if f := d.Egress(r); (f == nil) != tt.ok {
				t.Fatalf("Egress to %s = %+v; want allowed %v", tt.host, f, tt.ok)
			}
			if f := d.Egress(r); f != nil && f.Where != "header Cookie" {
				t.Fatalf("Where %q; want header Cookie", f.Where)
			}
		})
	}
}

// TestJWTClaimsDoNotWiden is the attacker holding a real token (header.payload.signature) for
// api.example.com, the one JWT host of the policy, who rewrites the payload to name a host of
// its own and keeps the real signature: whatever the claims say, in whatever shape, the token
// goes to api.example.com only.
func TestJWTClaimsDoNotWiden(t *testing.T) {
	d, err := NewDetector(Config{JWTHosts: []string{"api.example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	enc := base64.RawURLEncoding.EncodeToString
	sig := enc([]byte(strings.Repeat("real-signature", 4)))
	token := func(header, payload string) string {
		return enc([]byte(header)) + "." + enc([]byte(payload)) + "." + sig
	}
	hs := `{"alg":"RS256","typ":"JWT"}`
	// A Cyrillic "а" in place of the Latin "a", as a host receives it (punycode).
	lookAlike, refusal := floor.Host("\u0430pi.example.com")
	if refusal != nil {
		t.Fatal(refusal.Reason)
	}
	pad := strings.Repeat("x", maxJWTBody-200)
	tests := []struct {
		name, token, host string
	}{
		{"iss rewritten", token(hs, `{"iss":"https://attacker.example","sub":"agent"}`), "attacker.example"},
		{"iss a bare host", token(hs, `{"iss":"attacker.example"}`), "attacker.example"},
		{"iss with a path, query and fragment", token(hs, `{"iss":"https://attacker.example/t/v2.0?x=1#f"}`), "attacker.example"},
		{"iss in upper case with a trailing dot", token(hs, `{"iss":"HTTPS://ATTACKER.EXAMPLE."}`), "attacker.example"},
		{"iss with a port", token(hs, `{"iss":"https://attacker.example:8443"}`), "attacker.example"},
		{"iss with userinfo naming the configured host", token(hs, `{"iss":"https://api.example.com@attacker.example/"}`), "attacker.example"},
		{"iss with userinfo naming the attacker", token(hs, `{"iss":"https://attacker.example@api.example.com/"}`), "attacker.example"},
		{"iss an IPv4 literal", token(hs, `{"iss":"https://203.0.113.7/"}`), "203.0.113.7"},
		{"iss an IPv6 literal", token(hs, `{"iss":"https://[2001:db8::7]:443/"}`), "[2001:db8::7]"},
		{"iss a look-alike of the configured host", token(hs, `{"iss":"https://\u0430pi.example.com"}`), lookAlike},
		{"iss a look-alike in punycode", token(hs, `{"iss":"https://`+lookAlike+`"}`), lookAlike},
		{"iss a sub-domain of the configured host", token(hs, `{"iss":"https://evil.api.example.com"}`), "evil.api.example.com"},
		{"iss escaped", token(hs, `{"\u0069ss":"https:\/\/attacker\u002eexample"}`), "attacker.example"},
		{"iss twice, the attacker's first", token(hs, `{"iss":"https://attacker.example","iss":"https://api.example.com"}`), "attacker.example"},
		{"iss twice, the attacker's last", token(hs, `{"iss":"https://api.example.com","iss":"https://attacker.example"}`), "attacker.example"},
		{"iss nested", token(hs, `{"act":{"iss":"https://attacker.example"}}`), "attacker.example"},
		{"iss in an array", token(hs, `{"iss":["https://attacker.example"]}`), "attacker.example"},
		{"iss in the header", token(`{"alg":"RS256","iss":"https://attacker.example"}`, `{"sub":"agent"}`), "attacker.example"},
		{"iss after a long payload", token(hs, `{"pad":"`+pad+`","iss":"https://attacker.example"}`), "attacker.example"},
		{"iss in a payload too long to read", token(hs, `{"iss":"https://attacker.example","pad":"`+pad+pad+`"}`), "attacker.example"},
		{"payload not json", token(hs, `iss=https://attacker.example`), "attacker.example"},
		{"payload not base64", enc([]byte(hs)) + ".iss-attacker_examplex." + sig, "attacker.example"},
		{"jwe whose key segment names the attacker", token(`{"alg":"RSA-OAEP","enc":"A256GCM"}`, `{"iss":"https://attacker.example"}`) + ".aXY.dGFn", "attacker.example"},
		{"jwe whose header names the attacker", token(`{"alg":"dir","enc":"A256GCM","iss":"https://attacker.example"}`, "k") + ".aXY.dGFn", "attacker.example"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, place := range []string{"Authorization", "Cookie"} {
				v := "Bearer " + tt.token
				if place == "Cookie" {
					v = "session=" + tt.token
				}
				r := newRequest(tt.host)
				r.Header.Set(place, v)
				f := d.Egress(r)
				if fs := d.Scan(r); !hasFinding(fs, KindJWT, "header "+place) {
					t.Fatalf("%s: findings %+v; want a jwt", place, fs)
				}
				if f == nil || f.Kind != KindJWT {
					t.Fatalf("%s: Egress to %s = %+v; want the jwt refused", place, tt.host, f)
				}
				if !slices.Equal(f.Hosts, []string{"api.example.com"}) {
					t.Fatalf("%s: hosts %q; want only the configured host", place, f.Hosts)
				}
				// The configured host still takes it: the claims neither widen nor narrow.
				r.Host = "api.example.com"
				if f := d.Egress(r); f != nil {
					t.Fatalf("%s: Egress to the configured host = %+v; want allowed", place, f)
				}
			}
		})
	}
	// With no JWT hosts, a token goes nowhere, not even to the host its claims name.
	none := testDetectorWith(t, Config{})
	r := newRequest("attacker.example")
	r.Header.Set("Authorization", "Bearer "+token(hs, `{"iss":"https://attacker.example"}`))
	if f := none.Egress(r); f == nil || f.Kind != KindJWT || len(f.Hosts) != 0 {
		t.Fatalf("Egress without JWT hosts = %+v; want the jwt refused, with no hosts", f)
	}
}

func TestAWSSecretNextToID(t *testing.T) {
	d := testDetector(t)
	r := newRequest("evil.example.net")
	r.MediaType = "text/plain"
	r.Body = []byte("[default]\naws_access_key_id = " + fakeAWS() + "\naws_secret_access_key = " + fakeAWSSecret() + "\n")
	fs := d.Scan(r)
	if len(fs) != 2 || fs[0].Kind != KindAWS || fs[1].Kind != KindAWS || fs[1].Hash != hash8(fakeAWSSecret()) {
		t.Fatalf("findings %+v; want the id and the secret", fs)
	}
	// A secret-like string with no id near it is not a finding.
	r.Body = []byte("aws_secret_access_key = " + fakeAWSSecret() + "\n")
	if fs := d.Scan(r); len(fs) != 0 {
		t.Fatalf("findings %+v; want none without an id", fs)
	}
}

func TestAnthropicWinsOverOpenAI(t *testing.T) {
	d := testDetector(t)
	r := newRequest("api.anthropic.com")
	r.Header.Set("X-Api-Key", fakeAnthropic())
	fs := d.Scan(r)
	if len(fs) != 1 || fs[0].Kind != KindAnthropic {
		t.Fatalf("findings %+v; want one anthropic", fs)
	}
}

func TestInjectedAnywhere(t *testing.T) {
	v := "s3cr3t" + "-value-42"
	d, err := NewDetector(Config{Injected: []Injected{{Name: "db", Value: v}, {Name: "db-copy", Value: v}}})
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.StdEncoding.EncodeToString
	tests := []struct {
		name  string
		put   func(r *Request)
		where string
	}{
		{"json string", func(r *Request) {
			r.MediaType = "application/json"
			r.Body = []byte(`{"q":{"text":` + jsonString("pw="+v) + `}}`)
		}, "body (json) q.text"},
		{"json escaped", func(r *Request) {
			r.MediaType = "application/json"
			r.Body = []byte(`[{"x":` + uEscaped(v) + `}]`)
		}, "body (json) [0].x"},
		{"json key", func(r *Request) {
			r.MediaType = "application/json"
			r.Body = []byte(`{"a":{` + jsonString(v) + `:1}}`)
		}, "body (json) a (key)"},
		{"basic user", func(r *Request) { r.Header.Set("Authorization", "Basic "+b64([]byte(v+":x"))) }, "header Authorization (basic user)"},
		{"basic password", func(r *Request) { r.Header.Set("Authorization", "basic "+b64([]byte("u:"+v))) }, "header Authorization (basic password)"},
		{"cookie", func(r *Request) { r.Header.Set("Cookie", "a=1; pw="+url.QueryEscape(v)) }, "header Cookie"},
		{"host", func(r *Request) { r.Host = v + ".example.com" }, "host"},
		{"query name", func(r *Request) { r.Query = v }, `query "[injected:db:` + hash8(v) + `]"`},
		{"raw body", func(r *Request) { r.Body = []byte("xx" + v + "yy") }, "body"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, host := range []string{"api.github.com", "example.com"} {
				r := newRequest(host)
				tt.put(r)
				f := d.Egress(r)
				if f == nil || f.Kind != "injected:db" || f.Where != tt.where || len(f.Hosts) != 0 {
					t.Fatalf("Egress = %+v; want injected:db at %q, no hosts", f, tt.where)
				}
				assertClean(t, *f, v)
			}
		})
	}
}

func TestScanFindsEachValueOncePerPlace(t *testing.T) {
	d := testDetector(t)
	r := newRequest("evil.example.net")
	r.Query = "a=" + fakeGitHub() + "&a=" + url.QueryEscape(url.QueryEscape(fakeGitHub()))
	r.MediaType = "application/json"
	r.Body = []byte(`{"t":"` + fakeGitHub() + `\n","u":"` + fakeGitHub() + `"}`)
	fs := d.Scan(r)
	want := []string{"query a", "body (json) t", "body (json) u"}
	if len(fs) != len(want) {
		t.Fatalf("findings %+v; want %v", fs, want)
	}
	for i, w := range want {
		if fs[i].Where != w {
			t.Fatalf("finding %d at %q; want %q", i, fs[i].Where, w)
		}
	}
}

func TestScanOrderIsStable(t *testing.T) {
	d := testDetector(t)
	r := newRequest("evil.example.net")
	for _, h := range []string{"X-A", "X-B", "X-C", "X-D", "X-E"} {
		r.Header.Set(h, fakeGitHub())
	}
	r.Header.Set("X-F", fakeAWS())
	first := fmt.Sprint(d.Scan(r))
	for i := 0; i < 20; i++ {
		if got := fmt.Sprint(d.Scan(r)); got != first {
			t.Fatalf("order changed:\n%s\n%s", first, got)
		}
	}
	if f := d.Egress(r); f.Where != "header X-A" {
		t.Fatalf("first refusal at %q; want header X-A", f.Where)
	}
}

func TestScanManyFindingsKeepsARefusal(t *testing.T) {
	d := testDetector(t)
	var b strings.Builder
	for i := 0; i < 300; i++ {
		fmt.Fprintf(&b, "%s%04d ", fakeGitHub()[:36], i)
	}
	b.WriteString(fakeAWS())
	r := newRequest("api.github.com")
	r.Body = []byte(b.String())
	fs := d.Scan(r)
	if len(fs) != maxFindings+1 {
		t.Fatalf("%d findings; want %d", len(fs), maxFindings+1)
	}
	if f := d.Egress(r); f == nil || f.Kind != KindAWS {
		t.Fatalf("Egress = %+v; want the aws key past the cap", f)
	}
}

// A name from the request that holds a credential is masked in Where.
func TestWhereNeverShowsValue(t *testing.T) {
	d := testDetector(t)
	gh := fakeGitHub()
	tests := []struct {
		name string
		put  func(r *Request)
	}{
		{"json key", func(r *Request) {
			r.MediaType = "application/json"
			r.Body = []byte(`{"` + gh + `":{"x":"` + fakeAWS() + `"}}`)
		}},
		{"form name", func(r *Request) {
			r.MediaType = "application/x-www-form-urlencoded"
			r.Body = []byte(url.QueryEscape(gh) + "=" + fakeSlack())
		}},
		{"header name", func(r *Request) { r.Header["X-"+gh] = []string{fakeStripe()} }},
		{"multipart name", func(r *Request) {
			r.MediaType = "multipart/form-data"
			r.Body = []byte("--b\r\nContent-Disposition: form-data; name=\"" + gh + "\"\r\n\r\n" + fakeGoogle() + "\r\n--b--\r\n")
		}},
		{"jwt issuer", func(r *Request) {
			r.Header.Set("X-J", fakeJWT(`{"alg":"none"}`, `{"iss":"`+fakeHuggingFace()+`.example.com"}`))
		}},
		{"custom json key", func(r *Request) {
			r.MediaType = "application/json"
			r.Body = []byte(`{"k` + "acme_" + strings.Repeat("0f", 16) + `":"` + fakeAWS() + `"}`)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRequest("evil.example.net")
			tt.put(r)
			fs := d.Scan(r)
			if len(fs) < 2 {
				t.Fatalf("findings %+v; want at least two", fs)
			}
			printed := fmt.Sprintf("%+v", fs)
			for _, v := range []string{gh, fakeAWS(), fakeSlack(), fakeStripe(), fakeGoogle(), fakeHuggingFace(), "acme_" + strings.Repeat("0f", 16)} {
				if strings.Contains(printed, v) {
					t.Fatalf("findings show a value: %s", printed)
				}
			}
		})
	}
}

func TestNoFalsePositives(t *testing.T) {
	d := testDetector(t)
	img := make([]byte, 48<<10)
	x := uint32(2463534242)
	for i := range img {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		img[i] = byte(x)
	}
	imgB64 := base64.StdEncoding.EncodeToString(img)
	tests := []struct{ name, text string }{
		{"prose", "The quick brown fox jumps over the lazy dog. They keep their keys safe; a new view of the sky."},
		{"sk- in prose", "Prefix your key with sk- and never share an sk-ant- key; ask- and task- are words too."},
		{"uuids", "id 123e4567-e89b-12d3-a456-426614174000 and 550E8400-E29B-41D4-A716-446655440000"},
		{"git sha", "commit 4b825dc642cb6eb9a060e54bf8d69288fbee4904 and e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"},
		{"sha256", "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
		{"aws too short", "AKIAEXAMPLE and ASIA1234"},
		{"aws documentation example", "AKIA" + "IOSFODNN7EXAMPLE wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + "EXAMPLEKEY"},
		{"aws inside a longer word", "XAKIA" + "QWERTYUI23456789 and AKIA" + "QWERTYUI23456789XYZ"},
		{"github prefix short", "set GITHUB_TOKEN=ghp_xxx or gho_1234"},
		{"slack placeholder", "xoxb-your-token-here and https://hooks.slack.com/services/T00000000/B00000000/" + strings.Repeat("X", 24)},
		{"stripe-like test name", "def risk_test_DataFrameAggregationPerformance(): pass"},
		{"huggingface-like words", "the_hf_abcdefghijklmnopqrstuvwxyzabcdefgh1 and hf_short"},
		{"eye words", "eyes.are.open and eyJ is how JSON starts, eyJhbGciOiJI.notbase64!"},
		{"base64 not a jwt header", "eyJub3QiOiJqd3QifQ.eyJzdWIiOiIxIn0.c2ln"},
		{"pem header only", `const header = "-----BEGIN RSA ` + "PRIVATE KEY-----\"; // parse it"},
		{"certificate", "-----BEGIN CERTIFICATE-----\n" + imgB64[:200] + "\n-----END CERTIFICATE-----"},
		{"public key", "-----BEGIN PUBLIC KEY-----\n" + imgB64[:200] + "\n-----END PUBLIC KEY-----"},
		{"base64 image", "data:image/png;base64," + imgB64},
		{"google-like", "AIzaShort and xAIza" + strings.Repeat("b", 35)},
		{"legacy openai wrong length", "sk-" + strings.Repeat("a1", 20) + " sk-" + strings.Repeat("a1", 30)},
		{"anthropic words", "sk-ant-design-system-component-library-for-react-apps"},
		{"hex blob", strings.Repeat("0123456789abcdef", 256)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, r := range []*Request{
				{Host: "example.com", Path: "/", MediaType: "text/plain", Body: []byte(tt.text)},
				{Host: "example.com", Path: "/", MediaType: "application/json", Body: []byte(`{"t":` + jsonString(tt.text) + `}`)},
				{Host: "example.com", Path: "/", Query: "q=" + url.QueryEscape(tt.text)},
				{Host: "example.com", Path: "/", Header: http.Header{"X-T": {base64.StdEncoding.EncodeToString([]byte(tt.text))}}},
			} {
				if fs := d.Scan(r); len(fs) != 0 {
					t.Fatalf("findings %+v in %q", fs, tt.text[:min(len(tt.text), 80)])
				}
			}
			if m := d.MaskText(tt.text); m != tt.text {
				t.Fatalf("MaskText changed %q", tt.text[:min(len(tt.text), 80)])
			}
		})
	}
}

func TestScanTypicalBodies(t *testing.T) {
	d := testDetector(t)
	for _, tt := range []struct {
		name string
		r    *Request
	}{
		{"chat json", &Request{Host: "api.anthropic.com", Path: "/v1/messages", MediaType: "application/json", Body: typicalJSON(2 << 10)}},
		{"empty", &Request{}},
		{"nil body and header", &Request{Host: "example.com"}},
		{"truncated json", &Request{Host: "x.com", MediaType: "application/json", Body: []byte(`{"a":["b\u00`)}},
		{"broken multipart", &Request{Host: "x.com", MediaType: "multipart/form-data", Body: []byte("--\r\n\r\n--")}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if fs := d.Scan(tt.r); len(fs) != 0 {
				t.Fatalf("findings %+v", fs)
			}
		})
	}
	if d.Scan(nil) != nil || d.Egress(&Request{}) != nil {
		t.Fatal("nil request: findings")
	}
}

// typicalJSON is a chat request body of about n bytes with no credential.
func typicalJSON(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"model":"claude-sonnet-4-5","max_tokens":1024,"system":"You are a helpful coding assistant.\nAnswer briefly.","messages":[`)
	for i := 0; b.Len() < n-100; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"role":"user","content":[{"type":"text","text":"Please refactor the function parse_config in file src/config_%d.go; it has a bug near line %d.\nThanks!"}]}`, i, 10*i)
	}
	b.WriteString(`],"stream":true}`)
	return []byte(b.String())
}

func TestScanBodyShapes(t *testing.T) {
	d := testDetector(t)
	gh := fakeGitHub()
	b64 := base64.StdEncoding.EncodeToString
	tests := []struct {
		name, mt, body, where string
	}{
		{"multipart json part", "multipart/form-data",
			"--b\r\nContent-Disposition: form-data; name=\"meta\"\r\nContent-Type: application/json\r\n\r\n" +
				`{"cfg":{"token":"ghp\u005f` + gh[4:] + `"}}` + "\r\n--b--\r\n", "body (multipart) meta (json) cfg.token"},
		{"multipart base64 part", "multipart/mixed",
			"preamble\r\n--b\r\nContent-Transfer-Encoding: base64\r\n\r\n" + b64([]byte("key: "+gh)) + "\r\n--b--\r\n", "body (multipart) part 1 (base64)"},
		{"multipart part header", "multipart/form-data",
			"--b\r\nContent-Disposition: form-data; name=\"f\"; filename=\"" + gh + ".txt\"\r\n\r\nx\r\n--b--\r\n", "body (multipart) f"},
		{"ndjson", "application/x-ndjson", `{"a":1}` + "\n" + `{"b":"` + gh + `"}` + "\n", "body (json) b"},
		{"json sent as text", "text/plain", `  {"a":["x","` + gh + `"]}`, "body (json) a[1]"},
		{"json without a media type", "", `[{"k":"` + gh + `"}]`, "body (json) [0].k"},
		{"json with a charset", "Application/JSON; charset=utf-8", `{"k":"` + gh + `"}`, "body (json) k"},
		{"json root string", "application/json", `"` + gh + `"`, "body (json)"},
		{"json escaped slash", "application/json", `{"u":"https:\/\/hooks.slack.com\/services\/T0123ABCD\/B0123ABCD\/AbCdEfGhIjKlMnOpQrStUvWx"}`, "body (json) u"},
		{"json odd key", "application/json", `{"a b":{"c.d":"` + gh + `"}}`, `body (json) ["a b"]["c.d"]`},
		{"json truncated", "application/json", `{"a":[{"b":"x\n` + gh, "body (json) a[0].b"},
		{"form double-encoded", "application/x-www-form-urlencoded", "x=1&t=" + url.QueryEscape(url.QueryEscape(gh)), "body (form) t"},
		{"octet stream", "application/octet-stream", "\x00\x01" + gh + "\xff", "body"},
		{"key after an escaped line end", "application/json", `{"t":"a\n` + fakeAWS() + `"}`, "body (json) t"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRequest("evil.example.net")
			r.MediaType, r.Body = tt.mt, []byte(tt.body)
			f := d.Egress(r)
			if f == nil || f.Where != tt.where {
				t.Fatalf("Egress = %+v; want a finding at %q (all: %+v)", f, tt.where, d.Scan(r))
			}
		})
	}
}

// With an injected value that JSON escapes, every escaped string is scanned unescaped.
func TestInjectedWithEscapedCharacters(t *testing.T) {
	v := "pa/ss\"word-1"
	d, err := NewDetector(Config{Injected: []Injected{{Name: "x", Value: v}}})
	if err != nil {
		t.Fatal(err)
	}
	r := newRequest("example.com")
	r.MediaType = "application/json"
	r.Body = []byte(`{"a":"line\n` + strings.ReplaceAll(v, `"`, `\"`) + `"}`)
	if f := d.Egress(r); f == nil || f.Kind != "injected:x" || f.Where != "body (json) a" {
		t.Fatalf("Egress = %+v; want injected:x at body (json) a", f)
	}
}

func TestNestedInJWT(t *testing.T) {
	d := testDetectorWith(t, Config{JWTHosts: []string{"evil.example.net"}})
	jwt := fakeJWT(`{"alg":"none"}`, `{"iss":"evil.example.net","data":"`+fakeGitHub()+`"}`)
	r := newRequest("evil.example.net")
	r.Header.Set("Authorization", "Bearer "+jwt)
	f := d.Egress(r)
	if f == nil || f.Kind != KindGitHub || f.Where != "header Authorization (inside a jwt)" {
		t.Fatalf("Egress = %+v; want the github token inside the self-issued jwt", f)
	}
	if m := d.MaskText(jwt); strings.Contains(m, jwt) || !strings.HasPrefix(m, "[jwt:") {
		t.Fatalf("MaskText = %q", m)
	}
}
