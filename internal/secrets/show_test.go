package secrets

import (
	"encoding/base64"
	"strings"
	"testing"
)

func TestShowHeader(t *testing.T) {
	d := testDetector(t)
	gh, aws := fakeGitHub(), fakeAWS()
	acme := "acme_" + strings.Repeat("0f", 16)
	tests := []struct {
		name, header, value string
		wantName, wantValue string
	}{
		// A name never hides a value.
		{"session-named", "X-Session-Data", "hello-world-plain", "X-Session-Data", "hello-world-plain"},
		{"token-named", "X-Goog-Upload-Token", "plain", "X-Goog-Upload-Token", "plain"},
		{"secret-named", "X-Client-Secret", "plain", "X-Client-Secret", "plain"},
		{"x-api-key plain", "X-Api-Key", "not-a-key", "X-Api-Key", "not-a-key"},
		{"set-cookie is not a cookie", "Set-Cookie", "sid=xyz; Path=/", "Set-Cookie", "sid=xyz; Path=/"},
		{"ordinary", "User-Agent", "curl/8.0", "User-Agent", "curl/8.0"},
		// What the detector knows is masked, whatever the name.
		{"token-named github", "X-Api-Token", gh, "X-Api-Token", Mask("github", gh)},
		{"ordinary with credential", "X-Note", "use " + gh + " now", "X-Note", "use " + Mask("github", gh) + " now"},
		{"base64 credential", "X-Note", base64.StdEncoding.EncodeToString([]byte(gh)), "X-Note", Mask("github", gh)},
		{"aws", "X-Data", aws, "X-Data", Mask("aws", aws)},
		{"custom", "X-Data", acme, "X-Data", Mask("custom:acme", acme)},
		{"injected", "X-Data", "hunter2-correct-horse", "X-Data", Mask("injected:deploy", "hunter2-correct-horse")},
		{"credential in the name", "X-" + gh, "1", "X-" + Mask("github", gh), "1"},
		// Credentials by construction.
		{"bearer", "Authorization", "Bearer opaque-value", "Authorization", "Bearer " + Mask("secret", "opaque-value")},
		{"bearer github", "Authorization", "Bearer " + gh, "Authorization", "Bearer " + Mask("github", gh)},
		{"bare key", "Authorization", "opaque-value", "Authorization", Mask("secret", "opaque-value")},
		{"proxy basic", "proxy-authorization", "Basic dXNlcjpwYXNz", "proxy-authorization", "Basic " + Mask("secret", "dXNlcjpwYXNz")},
		{"cookies", "Cookie", "a=1; theme=dark;b; c=", "Cookie",
			"a=" + Mask("secret", "1") + "; theme=" + Mask("secret", "dark") + ";" + Mask("secret", "b") + "; c="},
		{"cookie github", "Cookie", "t=" + gh, "Cookie", "t=" + Mask("github", gh)},
		{"empty", "Authorization", "", "Authorization", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, v := d.ShowHeader(tt.header, tt.value)
			if n != tt.wantName || v != tt.wantValue {
				t.Fatalf("ShowHeader(%q, %q) = %q, %q; want %q, %q", tt.header, tt.value, n, v, tt.wantName, tt.wantValue)
			}
		})
	}
}

func TestShowHeaderDefault(t *testing.T) {
	gh := fakeGitHub()
	if _, v := ShowHeader("X-Session-Data", "hello-world-plain"); v != "hello-world-plain" {
		t.Errorf("plain value: %q", v)
	}
	if _, v := ShowHeader("X-Api-Token", gh); v != Mask("github", gh) {
		t.Errorf("github token: %q", v)
	}
}
