package claudeapi

import (
	"strings"
	"testing"
)

func TestTokenEndpoint(t *testing.T) {
	for _, c := range []struct {
		host, method, path string
		want               bool
	}{
		{"platform.claude.com", "POST", "/v1/oauth/token", true},
		{"console.anthropic.com", "POST", "/v1/oauth/token", true},
		{"api.anthropic.com", "POST", "/v1/oauth/token?x=1", true},
		{"Platform.Claude.Com.:443", "POST", "/v1/oauth/token", true},
		{"platform.claude.com", "GET", "/v1/oauth/token", false},
		{"platform.claude.com", "post", "/v1/oauth/token", false},
		{"platform.claude.com", "POST", "/v1/oauth/token/", false},
		{"platform.claude.com", "POST", "/V1/oauth/token", false},
		{"platform.claude.com", "POST", "/v1/oauth/%74oken", false},
		{"platform.claude.com", "POST", "/v1/oauth/x/../token", false},
		{"platform.claude.com", "POST", "/v1/oauth/authorize", false},
		{"docs.anthropic.com", "POST", "/v1/oauth/token", false},
		{"example.com", "POST", "/v1/oauth/token", false},
	} {
		if got := TokenEndpoint(c.host, c.method, c.path); got != c.want {
			t.Errorf("TokenEndpoint(%q, %q, %q) = %v, want %v", c.host, c.method, c.path, got, c.want)
		}
	}
}

func TestIssuedToken(t *testing.T) {
	tok := "sk-ant-oat01-" + strings.Repeat("Tk9_", 20)
	for _, c := range []struct {
		name, body, want string
	}{
		{"an answer as the endpoint writes it", `{"token_type":"Bearer","access_token":"` + tok + `","expires_in":28800,"refresh_token":"sk-ant-ort01-xyz","scope":"user:inference"}`, tok},
		{"escapes are read", `{"access_token":"sk-ant-oat01-\u0041` + strings.Repeat("b", 20) + `"}`, "sk-ant-oat01-A" + strings.Repeat("b", 20)},
		{"the last of two counts", `{"access_token":"` + strings.Repeat("a", 20) + `","access_token":"` + tok + `"}`, tok},
		{"white space around", " \n{ \"access_token\" : \"" + tok + "\" }\n", tok},
		{"no access_token", `{"refresh_token":"` + tok + `"}`, ""},
		{"another case", `{"Access_Token":"` + tok + `"}`, ""},
		{"nested", `{"data":{"access_token":"` + tok + `"}}`, ""},
		{"not a string", `{"access_token":12345678901234567890}`, ""},
		{"null", `{"access_token":null}`, ""},
		{"too short", `{"access_token":"short"}`, ""},
		{"too long", `{"access_token":"` + strings.Repeat("a", 4097) + `"}`, ""},
		{"a space", `{"access_token":"` + tok + ` x"}`, ""},
		{"a control character", `{"access_token":"` + tok + `\n"}`, ""},
		{"not ASCII", `{"access_token":"` + tok + `é"}`, ""},
		{"an array", `[{"access_token":"` + tok + `"}]`, ""},
		{"trailing data", `{"access_token":"` + tok + `"} x`, ""},
		{"not JSON", `access_token=` + tok, ""},
		{"empty", ``, ""},
		{"JSON null", `null`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, ok := IssuedToken([]byte(c.body))
			if got != c.want || ok != (c.want != "") {
				t.Fatalf("IssuedToken = %q, %v; want %q", got, ok, c.want)
			}
		})
	}
}
