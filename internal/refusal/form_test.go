package refusal

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/policy"
)

// allCodes are the codes of docs/codes.md.
var allCodes = []policy.Code{
	policy.CodePending, policy.CodeNoConsole, policy.CodeDenied, policy.CodeTimeout, policy.CodeRule,
	policy.CodeFloor, policy.CodeSecretEgress, policy.CodeBodyTooLarge, policy.CodeSourceUnknown,
	policy.CodeInject, policy.CodeExfilSuspect, policy.CodePinned, policy.CodeNoSigner, policy.CodeNoAudit,
}

// validPhrase fails t unless p is a reason phrase the gate may write: printable ASCII only (no
// CR, LF or other control), not empty, at most maxPhrase bytes.
func validPhrase(t *testing.T, p string) {
	t.Helper()
	if p == "" || len(p) > maxPhrase {
		t.Errorf("reason phrase of %d bytes (at most %d): %q", len(p), maxPhrase, p)
	}
	for i := 0; i < len(p); i++ {
		if p[i] < 0x20 || p[i] > 0x7e {
			t.Errorf("reason phrase has byte %#x at %d: %q", p[i], i, p)
			break
		}
	}
}

func TestReasonPhrase(t *testing.T) {
	t.Run("every code carries its whole advice", func(t *testing.T) {
		for _, c := range allCodes {
			d := policy.Decision{Verdict: policy.Deny, Code: c, Rule: "floor:ip-literal", Reason: "the reason \r\n is not shown"}
			status := Status(d)
			p := reasonPhrase(status, d)
			validPhrase(t, p)
			want := http.StatusText(status) + " (lockhttp " + string(c) + ", rule floor:ip-literal: " + c.Advice() + ")"
			if p != want {
				t.Errorf("%s: %q, want %q", c, p, want)
			}
		}
	})
	t.Run("a rule that is not a plain name is left out", func(t *testing.T) {
		for _, rule := range []string{"", "x\r\nSet-Cookie: a=b", "two words", "rule\x00nul", "р\u0443le", "a)b", strings.Repeat("a", 65)} {
			p := reasonPhrase(http.StatusForbidden, policy.Decision{Code: policy.CodeRule, Rule: rule})
			validPhrase(t, p)
			if want := "Forbidden (lockhttp E_RULE: " + policy.CodeRule.Advice() + ")"; p != want {
				t.Errorf("rule %q: %q, want %q", rule, p, want)
			}
		}
	})
	t.Run("phraseText is valid and bounded", func(t *testing.T) {
		for _, c := range []struct{ name, in, want string }{
			{"controls and line breaks", "a\r\nb\x00c\x7fd\te", "a??b?c?d?e"},
			{"not ASCII, one ? a character", "caf\u00e9 \u202e \xff", "caf? ? ?"},
			{"short text stays", "Forbidden", "Forbidden"},
		} {
			if got := phraseText(c.in, 40); got != c.want {
				t.Errorf("%s: %q, want %q", c.name, got, c.want)
			}
		}
		long := strings.Repeat("word\r\n ", 200)
		got := phraseText(long, maxPhrase-1)
		validPhrase(t, got+")")
		if !strings.HasSuffix(got, "...") || len(got) > maxPhrase-1 {
			t.Errorf("a long text cut: %d bytes, %q", len(got), got[max(0, len(got)-20):])
		}
	})
}

func TestAcceptsJSON(t *testing.T) {
	for _, c := range []struct {
		name   string
		accept []string
		want   bool
	}{
		{"npm's registry documents", []string{"application/vnd.npm.install-v1+json; q=1.0, application/json; q=0.8, */*"}, true},
		{"npm's full document", []string{"application/json"}, true},
		{"a +json type", []string{"application/problem+json"}, true},
		{"case and spaces", []string{" Application/JSON ; Q=0.9 "}, true},
		{"axios", []string{"application/json, text/plain, */*"}, true},
		{"two header lines", []string{"text/html", "application/json"}, true},
		{"none", nil, false},
		{"curl and npm's tarballs", []string{"*/*"}, false},
		{"a browser", []string{"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}, false},
		{"application wildcard", []string{"application/*"}, false},
		{"a wildcard type", []string{"*/json"}, false},
		{"JSON refused", []string{"application/json;q=0"}, false},
		{"plain text preferred", []string{"application/json;q=0.5, text/plain"}, false},
		{"text wildcard preferred", []string{"text/*, application/json;q=0.2"}, false},
		{"a bad quality", []string{"application/json;q=abc"}, false},
		{"a quality over 1", []string{"application/json;q=2"}, false},
		{"malformed", []string{"application/json;;=="}, false},
		{"after the ranges read", []string{strings.Repeat("text/html, ", maxAcceptRanges) + "application/json"}, false},
	} {
		if got := acceptsJSON(c.accept); got != c.want {
			t.Errorf("%s: %q: %v, want %v", c.name, c.accept, got, c.want)
		}
	}
}

// FuzzRefusalForms: whatever the request and the policy hold, the Accept parser does not fail,
// the reason phrase is valid and the JSON body is one valid object that keeps the code.
func FuzzRefusalForms(f *testing.F) {
	f.Add("application/json;q=0.5, text/plain", "no-secret", `rule "x" (deny)`, "http://a.test/\r\n\"}")
	f.Add("*/*", "x\r\nSet-Cookie: a", "\x1b[31m\u202e\xff", "http://a.test/%0d%0a")
	f.Fuzz(func(t *testing.T, accept, rule, reason, u string) {
		acceptsJSON([]string{accept})
		d := policy.Decision{Verdict: policy.Deny, Code: policy.CodeRule, Rule: rule, Reason: reason}
		validPhrase(t, reasonPhrase(Status(d), d))
		q := Request{Method: "GET", URL: u, ID: "r1-1"}
		var doc map[string]string
		if err := json.Unmarshal(refusalJSON(q, d), &doc); err != nil || doc["code"] != "E_RULE" || doc["request"] != "r1-1" ||
			!strings.Contains(doc["ask_for_a_rule"], "https://lockhttp.internal/mcp") {
			t.Fatalf("%v: %v", err, doc)
		}
	})
}
