package claudeapi

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/policy"
)

const (
	longKey = "sk-ant-api03-" + "QQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQ" + "Wx_9"
	keyA    = "sk-ant-api03-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	keyB    = "sk-ant-oat01-BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB"
)

func TestHashCredential(t *testing.T) {
	// printf %s abc | sha256sum
	if got, want := HashCredential("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"; got != want {
		t.Fatalf("HashCredential(abc) = %s, want %s", got, want)
	}
}

func TestCheckCredentials(t *testing.T) {
	allowed := []string{HashCredential(keyA), "sha256:" + strings.ToUpper(HashCredential(keyB))}
	cases := []struct {
		name     string
		header   http.Header
		allowed  []string
		verdict  policy.Verdict
		fragment string
	}{
		{"none", http.Header{"Content-Type": {"application/json"}}, allowed, policy.Free, "no Claude credential"},
		{"none, nothing allowed", http.Header{}, nil, policy.Free, "no Claude credential"},
		{"x-api-key allowed", http.Header{"X-Api-Key": {keyA}}, allowed, policy.Free, "x-api-key header carries this container's"},
		{"bearer allowed", http.Header{"Authorization": {"Bearer " + keyB}}, allowed, policy.Free, "Authorization header carries this container's"},
		{"bearer scheme in any case, extra spaces", http.Header{"Authorization": {"bearer   " + keyB + " "}}, allowed, policy.Free, "this container's"},
		{"header name not canonical", http.Header{"x-api-key": {keyA}}, allowed, policy.Free, "this container's"},
		// A Claude login is named as one, with no end: its owner never saw it.
		{"a login not allowed", http.Header{"Authorization": {"Bearer " + keyB}}, []string{HashCredential(keyA)}, policy.Ask, "container agent-1 sends a new Claude credential, a Claude login (an OAuth token, sha256 " + HashCredential(keyB)[:12] + "…) issued outside this gate, in Authorization: Claude Code holds one after you log it in with your Claude account (a subscription: /login, or claude setup-token); approving binds it to agent-1, and its later requests with it pass without asking"},
		{"a login in x-api-key", http.Header{"X-Api-Key": {keyB}}, []string{HashCredential(keyA)}, policy.Ask, "a Claude login (an OAuth token, sha256 " + HashCredential(keyB)[:12] + "…) issued outside this gate, in x-api-key"},
		// An API key shows its end, as the Console lists it.
		{"an API key not allowed", http.Header{"Authorization": {"Bearer " + keyA}}, []string{HashCredential(keyB)}, policy.Ask, "container agent-1 sends a new Claude credential, an Anthropic API key (sha256 " + HashCredential(keyA)[:12] + "…, key ending …AAAA), in Authorization: check its end against the keys your Anthropic Console lists; approving binds it to agent-1"},
		{"an admin key", http.Header{"X-Api-Key": {"sk-ant-admin01-" + strings.Repeat("C", 40)}}, nil, policy.Ask, "an Anthropic Admin API key (sha256 "},
		{"a value of no known shape", http.Header{"X-Api-Key": {strings.Repeat("D", 40)}}, nil, policy.Ask, "container agent-1 sends a new Claude credential (sha256 " + HashCredential(strings.Repeat("D", 40))[:12] + "…, key ending …DDDD) in x-api-key; approving binds it to agent-1"},
		{"nothing allowed", http.Header{"X-Api-Key": {keyA}}, nil, policy.Ask, "new Claude credential"},
		{"another scheme counts whole", http.Header{"Authorization": {"Basic " + keyA}}, allowed, policy.Ask, "new Claude credential"},
		{"bad allowed entries are skipped", http.Header{"X-Api-Key": {keyA}}, []string{"zz", "", HashCredential(keyA)[:10]}, policy.Ask, "new Claude credential"},
		{"a key shows its last 4 characters", http.Header{"X-Api-Key": {longKey}}, allowed, policy.Ask, "(sha256 " + HashCredential(longKey)[:12] + "…, key ending …Wx_9)"},
		{"odd last characters are not shown", http.Header{"X-Api-Key": {longKey[:40] + "a\x01bc"}}, allowed, policy.Ask, "(sha256 " + HashCredential(longKey[:40] + "a\x01bc")[:12] + "…)"},
		{"both headers", http.Header{"X-Api-Key": {keyA}, "Authorization": {"Bearer " + keyB}}, allowed, policy.Deny, "two credentials (Authorization, x-api-key)"},
		{"both headers, same key", http.Header{"X-Api-Key": {keyA}, "Authorization": {"Bearer " + keyA}}, allowed, policy.Deny, "two credentials"},
		{"x-api-key twice", http.Header{"X-Api-Key": {keyA, keyA}}, allowed, policy.Deny, "two credentials (x-api-key, x-api-key)"},
		{"x-api-key under two spellings", http.Header{"X-Api-Key": {keyA}, "x-api-key": {keyB}}, allowed, policy.Deny, "two credentials"},
		{"authorization twice", http.Header{"Authorization": {"Bearer " + keyA, "Bearer " + keyB}}, allowed, policy.Deny, "two credentials"},
		{"empty values carry nothing", http.Header{"X-Api-Key": {" "}, "Authorization": {"Bearer " + keyA}}, allowed, policy.Free, "this container's"},
		{"bare bearer carries nothing", http.Header{"Authorization": {"Bearer"}, "X-Api-Key": {keyA}}, allowed, policy.Free, "this container's"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := CheckCredentials(c.header, "agent-1", c.allowed)
			wantRule := RuleCredential
			if c.verdict == policy.Ask {
				wantRule = RuleNewCredential
			}
			if got.Verdict != c.verdict || got.Rule != wantRule {
				t.Fatalf("got %s rule %q (%s), want %s %s", got.Verdict, got.Rule, got.Reason, c.verdict, wantRule)
			}
			// The one credential's header is named, bound or new.
			if wantHeader := c.verdict != policy.Deny && c.fragment != "no Claude credential"; (got.Header != "") != wantHeader {
				t.Fatalf("Header %q for %v", got.Header, c.header)
			}
			// Only an ASK names the credential it would bind, by its full hash.
			if (got.New != nil) != (c.verdict == policy.Ask) {
				t.Fatalf("New = %+v for a %s", got.New, got.Verdict)
			}
			if got.New != nil {
				if !strings.Contains(got.Reason, got.New.Shown) || !strings.HasPrefix(got.New.Shown, "sha256 "+got.New.Hash[:12]) {
					t.Fatalf("reason %q and Shown %q do not name the hash %s", got.Reason, got.New.Shown, got.New.Hash)
				}
			}
			wantCode := policy.Code("")
			if c.verdict == policy.Deny {
				wantCode = policy.CodeSecretEgress
			}
			if got.Code != wantCode {
				t.Fatalf("code %q, want %q", got.Code, wantCode)
			}
			if !strings.Contains(got.Reason, c.fragment) {
				t.Fatalf("reason %q: no %q", got.Reason, c.fragment)
			}
			if strings.Contains(got.Reason, "sk-ant") || got.New != nil && strings.Contains(got.New.Shown, "sk-ant") {
				t.Fatalf("reason %q shows a credential", got.Reason)
			}
		})
	}
}

// The hash an approval binds is the one of the value sent, whatever header and scheme.
func TestNewCredentialHash(t *testing.T) {
	for _, h := range []http.Header{{"X-Api-Key": {" " + keyB + " "}}, {"Authorization": {"Bearer " + keyB}}} {
		got := CheckCredentials(h, "c", nil)
		if got.New == nil || got.New.Hash != HashCredential(keyB) {
			t.Fatalf("%v: New %+v, want the hash of the key", h, got.New)
		}
	}
	if got := CheckCredentials(http.Header{"Authorization": {"Basic " + keyB}}, "c", nil); got.New == nil || got.New.Hash != HashCredential("Basic "+keyB) {
		t.Fatalf("another scheme: New %+v, want the hash of the whole value", got.New)
	}
}

func TestParseCredentials(t *testing.T) {
	c, err := ParseCredentials("credentials.toml", readTestdata(t, "credentials/good.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Containers(), ","); got != "agent-1,agent.2,no-key" {
		t.Fatalf("containers %s", got)
	}
	if got := CheckCredentials(http.Header{"X-Api-Key": {"abc"}}, "agent-1", c.Allowed("agent-1")); got.Verdict != policy.Free {
		t.Fatalf("agent-1's key: %v", got)
	}
	if got := CheckCredentials(http.Header{"X-Api-Key": {"abc"}}, "agent.2", c.Allowed("agent.2")); got.Verdict != policy.Ask {
		t.Fatalf("agent-1's key from agent.2: %v", got)
	}
	if got := c.Allowed("no-key"); got == nil || len(got) != 0 {
		t.Fatalf("no-key: %q", got)
	}
	if got := c.Allowed("unknown"); got != nil {
		t.Fatalf("unknown: %q", got)
	}

	cases := []struct {
		file string
		want string
	}{
		{"no_version.toml", "no_version.toml:1: version: missing; start the file with version = 1"},
		{"version_2.toml", "version_2.toml:1: version: 2 is not supported"},
		{"unknown_key.toml", "unknown_key.toml:3: credentials: unknown key"},
		{"raw_key.toml", "raw_key.toml:4: containers.agent-1[1]: not sha256:<64 hex digits>; write \"sha256:\""},
		{"short_hash.toml", "short_hash.toml:4: containers.agent-1[0]: not sha256:<64 hex digits>"},
		{"no_prefix.toml", "no_prefix.toml:4: containers.agent-1[0]: not sha256:<64 hex digits>"},
		{"bad_name.toml", "bad_name.toml:4: containers.Agent_1: container names use a-z"},
		{"twice.toml", "twice.toml:4: containers.agent-1[1]: listed twice"},
		{"not_array.toml", "not_array.toml:4: containers.agent-1: wrong type; the file holds version = 1 and a [containers] table"},
		{"version_string.toml", "version_string.toml:1: version: wrong type"},
		{"syntax.toml", "syntax.toml:4: "},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			data := readTestdata(t, filepath.Join("credentials", c.file))
			_, err := ParseCredentials(c.file, data)
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q: no %q", err, c.want)
			}
			if strings.Contains(err.Error(), "sk-ant") {
				t.Fatalf("error %q shows a credential", err)
			}
		})
	}
}

// TestCredentialsDoc: the example in docs/claude-api.md parses.
func TestCredentialsDoc(t *testing.T) {
	doc, err := os.ReadFile("../../docs/claude-api.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), "```toml\n")
	if !ok {
		t.Fatal("no toml example in docs/claude-api.md")
	}
	example, _, _ := strings.Cut(after, "```")
	if _, err := ParseCredentials("docs/claude-api.md", []byte(example)); err != nil {
		t.Fatal(err)
	}
}

// IsHash takes exactly what HashCredential writes; a key, an upper-case or short hash is not one.
func TestIsHash(t *testing.T) {
	h := HashCredential(keyA)
	for _, c := range []struct {
		s    string
		want bool
	}{{h, true}, {strings.ToUpper(h), false}, {h[:63], false}, {h + "0", false}, {"sha256:" + h[:57], false}, {keyA, false}, {"", false}} {
		if got := IsHash(c.s); got != c.want {
			t.Errorf("IsHash(%q) = %v, want %v", c.s, got, c.want)
		}
	}
}
