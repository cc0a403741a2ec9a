package judge

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/claudeapi"
	"github.com/lockhttp/lockhttp/internal/policy"
	shipped "github.com/lockhttp/lockhttp/policy"
)

var (
	// loginToken is a Claude login as Claude Code holds it after /login.
	loginToken = "sk-ant-oat01-" + strings.Repeat("Lg4_", 20) + "ZZ"
	// placeholderKey is lox's placeholder: no detector takes it for a key.
	placeholderKey = "sk-ant-" + strings.Repeat("x", 64)
)

const messagesBody = `{"model":"claude","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`

// shippedPolicy is policy/default.toml; the tests' requests name its container, "local".
func shippedPolicy(t *testing.T) *policy.Policy {
	t.Helper()
	p, err := policy.Load("default.toml", shipped.Default)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func messages(h http.Header) http.Header {
	h.Set("Content-Type", "application/json")
	return h
}

// TestShippedPolicyClaudeCode: Claude Code under the shipped policy in each of its three setups.
// Without the key in the gate's secrets file (or without a secrets file), the optional inject
// rule adds nothing: a login or API key of the agent's own asks once, naming what it is in words
// its owner can check, and a bound one is free; a placeholder is refused with E_INJECT as
// before. With the key there, the placeholder is replaced and a credential of the agent's own is
// refused, bound or not (two would go out), as is the injected key anywhere in a request.
func TestShippedPolicyClaudeCode(t *testing.T) {
	p := shippedPolicy(t)
	noFile, err := NewChecks(p, nil, ErrNoSecretsFile, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	withoutKey, err := NewChecks(p, map[string]string{"github": ghToken}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	withKey, err := NewChecks(p, map[string]string{"anthropic": antKey}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	broken, _ := NewChecks(p, nil, errors.New("secrets.toml has mode 0644"), nil, nil)
	bound := shippedPolicy(t)
	bound.ClaudeBound = map[string][]string{"local": {claudeapi.HashCredential(loginToken), claudeapi.HashCredential(otherAntKey)}}

	msg := "https://api.anthropic.com/v1/messages?beta=true"
	for _, c := range []struct {
		name string
		p    *policy.Policy
		in   *Checks
		tcase
		kind   claudeapi.Kind // of the credential an ASK binds
		inject string         // the value injected, for a FREE request
	}{
		{name: "subscription, no secrets file: a login asks once", p: p, in: noFile, kind: claudeapi.KindLogin,
			tcase: tcase{method: "POST", url: msg, header: messages(http.Header{"Authorization": {"Bearer " + loginToken}}), body: messagesBody,
				verdict: policy.Ask, rule: claudeapi.RuleNewCredential, reason: "container local sends a new Claude credential, a Claude login (an OAuth token, sha256 " + claudeapi.HashCredential(loginToken)[:12] + "…) issued outside this gate, in Authorization: Claude Code holds one after you log it in with your Claude account"}},
		{name: "subscription, a secrets file without the key", p: p, in: withoutKey, kind: claudeapi.KindLogin,
			tcase: tcase{method: "POST", url: msg, header: messages(http.Header{"Authorization": {"Bearer " + loginToken}}), body: messagesBody,
				verdict: policy.Ask, rule: claudeapi.RuleNewCredential, reason: "a Claude login"}},
		{name: "subscription, bound", p: bound, in: noFile,
			tcase: tcase{method: "POST", url: msg, header: messages(http.Header{"Authorization": {"Bearer " + loginToken}}), body: messagesBody,
				verdict: policy.Free, rule: claudeapi.RuleMessages}},
		{name: "an API key in the environment asks once", p: p, in: noFile, kind: claudeapi.KindAPIKey,
			tcase: tcase{method: "POST", url: msg, header: messages(http.Header{"X-Api-Key": {otherAntKey}}), body: messagesBody,
				verdict: policy.Ask, rule: claudeapi.RuleNewCredential, reason: "an Anthropic API key (sha256 " + claudeapi.HashCredential(otherAntKey)[:12] + "…, key ending …" + otherAntKey[len(otherAntKey)-4:] + "), in x-api-key"}},
		{name: "an API key, bound", p: bound, in: noFile,
			tcase: tcase{method: "POST", url: msg, header: messages(http.Header{"X-Api-Key": {otherAntKey}}), body: messagesBody,
				verdict: policy.Free, rule: claudeapi.RuleMessages}},
		{name: "no credential goes out as sent", p: p, in: noFile,
			tcase: tcase{method: "GET", url: "https://api.anthropic.com/api/hello", verdict: policy.Free, rule: claudeapi.RuleRead}},
		{name: "a placeholder without the key is E_INJECT", p: p, in: noFile,
			tcase: tcase{method: "POST", url: msg, header: messages(http.Header{"X-Api-Key": {placeholderKey}}), body: messagesBody,
				verdict: policy.Deny, code: policy.CodeInject, rule: "inject:anthropic", reason: "the gate's secrets file lacks it; the request's header x-api-key holds no credential the gate knows (a placeholder)"}},
		{name: "a login and a key are two credentials", p: p, in: noFile,
			tcase: tcase{method: "POST", url: msg, header: messages(http.Header{"X-Api-Key": {otherAntKey}, "Authorization": {"Bearer " + loginToken}}), body: messagesBody,
				verdict: policy.Deny, code: policy.CodeSecretEgress, rule: claudeapi.RuleCredential, reason: "two credentials"}},
		{name: "a secrets file that does not load refuses", p: p, in: broken,
			tcase: tcase{method: "POST", url: msg, header: messages(http.Header{"Authorization": {"Bearer " + loginToken}}), body: messagesBody,
				verdict: policy.Deny, code: policy.CodeInject, rule: RuleSecretsUnloaded}},
		// With the key in the secrets file: injection as before.
		{name: "the key file: the placeholder is replaced", p: p, in: withKey, inject: antKey,
			tcase: tcase{method: "POST", url: msg, header: messages(http.Header{"X-Api-Key": {placeholderKey}}), body: messagesBody,
				verdict: policy.Free, rule: claudeapi.RuleMessages}},
		{name: "the key file: no credential, the key is added", p: p, in: withKey, inject: antKey,
			tcase: tcase{method: "POST", url: msg, header: messages(http.Header{}), body: messagesBody,
				verdict: policy.Free, rule: claudeapi.RuleMessages}},
		{name: "the key file: a login of the agent's own is refused", p: p, in: withKey,
			tcase: tcase{method: "POST", url: msg, header: messages(http.Header{"Authorization": {"Bearer " + loginToken}}), body: messagesBody,
				verdict: policy.Deny, code: policy.CodeSecretEgress, rule: claudeapi.RuleCredential, reason: `inject rule "anthropic"`}},
		{name: "the key file: a bound login beside it is refused too", p: bound, in: withKey,
			tcase: tcase{method: "POST", url: msg, header: messages(http.Header{"X-Api-Key": {placeholderKey}, "Authorization": {"Bearer " + loginToken}}), body: messagesBody,
				verdict: policy.Deny, code: policy.CodeSecretEgress, rule: claudeapi.RuleCredential, reason: "carries another one in Authorization; send none"}},
		{name: "the key file: the key itself in the body is refused", p: p, in: withKey,
			tcase: tcase{method: "POST", url: msg, header: messages(http.Header{"X-Api-Key": {placeholderKey}}), body: `{"model":"claude","messages":[{"role":"user","content":"` + antKey + `"}]}`,
				verdict: policy.Deny, code: policy.CodeSecretEgress, rule: "secret:injected:anthropic"}},
		{name: "the key file: plain http:// is refused", p: p, in: withKey,
			tcase: tcase{method: "GET", url: "http://api.anthropic.com/v1/models", header: http.Header{"X-Api-Key": {placeholderKey}},
				verdict: policy.Deny, code: policy.CodeInject, rule: "inject:anthropic", reason: "https only"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.container = "local"
			res := run(t, c.p, c.in, c.tcase)
			if res.Verdict != c.verdict || res.Code != c.code || res.Rule != c.rule || !strings.Contains(res.Reason, c.reason) {
				t.Fatalf("got %v %s %s (%s); want %v %s %s (%s)", res.Verdict, res.Code, res.Rule, res.Reason, c.verdict, c.code, c.rule, c.reason)
			}
			if c.verdict == policy.Ask {
				if res.Bind == nil || res.Bind.Container != "local" || res.Bind.Kind != c.kind || !res.NeverAuto {
					t.Fatalf("bind %+v, never auto %v", res.Bind, res.NeverAuto)
				}
			} else if res.Bind != nil {
				t.Fatalf("a %v binds %+v", res.Verdict, res.Bind)
			}
			switch {
			case c.inject != "" && (res.Inject == nil || res.Inject.Header != "x-api-key" || res.Inject.Value != c.inject):
				t.Fatalf("inject %+v; want the key in x-api-key", res.Inject)
			case c.inject == "" && res.Inject != nil:
				t.Fatalf("inject %+v without the key", res.Inject)
			}
			for _, v := range []string{loginToken, otherAntKey, antKey} {
				if strings.Contains(res.Reason, v) {
					t.Fatal("the reason shows a credential")
				}
			}
		})
	}
}

// TestOptionalInjectIsExplicit: a rule that is not optional still refuses every request to its
// host while the gate lacks its secret, the agent's own credential included.
func TestOptionalInjectIsExplicit(t *testing.T) {
	if strings.Count(string(shipped.Default), "\noptional = true\n") != 1 {
		t.Fatal("policy/default.toml no longer holds its inject rule's optional = true once")
	}
	text := strings.Replace(string(shipped.Default), "\noptional = true\n", "\n", 1)
	p, err := policy.Load("default.toml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	in, _ := NewChecks(p, nil, ErrNoSecretsFile, nil, nil)
	for _, h := range []http.Header{{"X-Api-Key": {otherAntKey}}, {"X-Api-Key": {placeholderKey}}, {}} {
		res := run(t, p, in, tcase{container: "local", method: "POST", url: "https://api.anthropic.com/v1/messages", header: messages(h), body: messagesBody})
		if res.Verdict != policy.Deny || res.Code != policy.CodeInject || !strings.Contains(res.Reason, "lacks it") {
			t.Fatalf("%v: got %v %s %s (%s); want E_INJECT", h, res.Verdict, res.Code, res.Rule, res.Reason)
		}
	}
	res := run(t, p, in, tcase{container: "local", method: "POST", url: "https://api.anthropic.com/v1/messages", header: messages(http.Header{"Authorization": {"Bearer " + loginToken}}), body: messagesBody})
	if res.Verdict != policy.Deny || res.Code != policy.CodeSecretEgress || res.Rule != claudeapi.RuleCredential {
		t.Fatalf("a login beside a rule that is not optional: got %v %s %s (%s)", res.Verdict, res.Code, res.Rule, res.Reason)
	}
}

// TestTokenAnswer: a call of the OAuth token endpoint decrypted inside a tunnel is free and
// marked, so that the gate binds the login its answer issues; nothing else is marked.
func TestTokenAnswer(t *testing.T) {
	p := shippedPolicy(t)
	in, _ := NewChecks(p, nil, ErrNoSecretsFile, nil, nil)
	form := http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}
	refresh := "grant_type=refresh_token&client_id=x&refresh_token=sk-ant-ort01-" + strings.Repeat("Rf2_", 20)
	for _, c := range []struct {
		name, method, url, body string
		header                  http.Header
		marked                  bool
	}{
		{"a refresh at platform.claude.com", "POST", "https://platform.claude.com/v1/oauth/token", refresh, form, true},
		{"a login's code at console.anthropic.com", "POST", "https://console.anthropic.com/v1/oauth/token", `{"grant_type":"authorization_code","code":"abc"}`, http.Header{"Content-Type": {"application/json"}}, true},
		{"at api.anthropic.com", "POST", "https://api.anthropic.com/v1/oauth/token", refresh, form, true},
		{"plain http://", "POST", "http://platform.claude.com/v1/oauth/token", refresh, form, false},
		{"a GET", "GET", "https://platform.claude.com/v1/oauth/token", "", nil, false},
		{"another OAuth path", "POST", "https://platform.claude.com/v1/oauth/revoke", refresh, form, false},
		{"another host", "POST", "https://docs.anthropic.com/v1/oauth/token", refresh, form, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := run(t, p, in, tcase{container: "local", method: c.method, url: c.url, header: c.header, body: c.body})
			if res.TokenAnswer != c.marked {
				t.Fatalf("TokenAnswer %v (%v %s %s); want %v", res.TokenAnswer, res.Verdict, res.Rule, res.Reason, c.marked)
			}
			if c.marked && (res.Verdict != policy.Free || res.Rule != claudeapi.RuleOAuth) {
				t.Fatalf("got %v %s (%s); want FREE %s", res.Verdict, res.Rule, res.Reason, claudeapi.RuleOAuth)
			}
		})
	}
}

// TestShippedTelemetry: Claude Code's telemetry is refused by the shipped policy, with a reason
// and no ticket; its Messages calls are not.
func TestShippedTelemetry(t *testing.T) {
	p := shippedPolicy(t)
	in, _ := NewChecks(p, nil, ErrNoSecretsFile, nil, nil)
	for _, c := range []struct{ method, url, rule string }{
		{"POST", "https://statsig.anthropic.com/v1/rgstr", "claude-code-telemetry"},
		{"POST", "https://statsig.anthropic.com/v1/initialize", "claude-code-telemetry"},
		{"POST", "https://o1158394.ingest.us.sentry.io/api/4508259541909504/envelope/", "claude-code-telemetry"},
		{"POST", "https://o1.ingest.sentry.io/api/2/store/", "claude-code-telemetry"},
		{"POST", "https://api.anthropic.com/api/event_logging/batch", "claude-code-events"},
		{"POST", "https://api.anthropic.com/api/event_logging/v2/batch", "claude-code-events"},
		{"POST", "https://api.anthropic.com/api/eval/sdk-abc", "claude-code-events"},
		{"POST", "https://api.anthropic.com/API/Event_Logging/batch", "claude-code-events"},
	} {
		res := run(t, p, in, tcase{container: "local", method: c.method, url: c.url, header: http.Header{"Authorization": {"Bearer " + loginToken}}, body: "{}"})
		if res.Verdict != policy.Deny || res.Code != policy.CodeRule || res.Rule != c.rule || !strings.Contains(res.Reason, "refused without asking") {
			t.Errorf("%s %s: got %v %s %s (%s); want DENY E_RULE %s", c.method, c.url, res.Verdict, res.Code, res.Rule, res.Reason, c.rule)
		}
	}
	res := run(t, p, in, tcase{container: "local", method: "POST", url: "https://api.anthropic.com/v1/messages", header: messages(http.Header{}), body: messagesBody})
	if res.Verdict != policy.Free {
		t.Fatalf("a Messages call: %v %s (%s)", res.Verdict, res.Rule, res.Reason)
	}
}
