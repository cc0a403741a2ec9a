package secrets

import (
	"encoding/base64"
	"net/url"
	"strings"
	"testing"
)

func TestMaskText(t *testing.T) {
	d := testDetector(t)
	for _, k := range kindCases() {
		v := reported(k.value)
		forms := []struct{ name, text string }{
			{"plain", "before " + k.value + " after"},
			{"alone", v},
			{"percent-encoded", "q=" + url.QueryEscape(k.value) + "&x=1"},
			{"double-encoded", "/x/" + url.QueryEscape(url.QueryEscape(k.value))},
			{"json", `{"a":` + jsonString(k.value) + `}`},
			{"json unicode escapes", `{"a":` + uEscaped(k.value) + `}`},
			{"base64", "X-Blob: " + base64.StdEncoding.EncodeToString([]byte(k.value))},
			{"twice", v + "\n" + v},
		}
		for _, f := range forms {
			t.Run(k.name+"/"+f.name, func(t *testing.T) {
				m := d.MaskText(f.text)
				for _, form := range []string{v, url.QueryEscape(v), base64.StdEncoding.EncodeToString([]byte(k.value))} {
					if strings.Contains(m, form) {
						t.Fatalf("MaskText left the value: %q", m)
					}
				}
				if !strings.Contains(m, "["+string(k.kind)+":") {
					t.Fatalf("MaskText(%q) = %q; want a %s mask", f.text[:min(40, len(f.text))], m, k.kind)
				}
			})
		}
	}
}

func TestMaskTextKeepsHashOfFinding(t *testing.T) {
	d := testDetector(t)
	gh := fakeGitHub()
	want := "token " + Mask("github", gh) + " end"
	if got := d.MaskText("token " + gh + " end"); got != want {
		t.Fatalf("MaskText = %q; want %q", got, want)
	}
	r := newRequest("evil.example.net")
	r.Header.Set("X-T", gh)
	if f := d.Egress(r); f == nil || !strings.Contains(want, f.Hash) {
		t.Fatalf("finding %+v does not carry the hash of the mask %q", f, want)
	}
}

func TestMaskHeader(t *testing.T) {
	d := testDetector(t)
	gh := fakeGitHub()
	tests := []struct {
		name, header, value, want string
	}{
		{"bearer", "Authorization", "Bearer " + gh, "Bearer " + Mask("github", gh)},
		{"opaque bearer", "Authorization", "Bearer abc.def", "Bearer " + Mask("secret", "abc.def")},
		{"unknown scheme kept hidden", "Authorization", gh + " x", Mask("secret", gh+" x")},
		{"proxy", "Proxy-Authorization", "Basic dXNlcjpwYXNz", "Basic " + Mask("secret", "dXNlcjpwYXNz")},
		{"cookie", "Cookie", "a=1; b=2", Mask("secret", "a=1; b=2")},
		{"set-cookie", "Set-Cookie", "sid=xyz; Path=/", Mask("secret", "sid=xyz; Path=/")},
		{"x-api-key", "X-Api-Key", "k", Mask("secret", "k")},
		{"token-named", "X-Goog-Upload-Token", "plain", Mask("secret", "plain")},
		{"secret-named", "X-Client-Secret", "plain", Mask("secret", "plain")},
		{"auth-named", "X-Auth", "plain", Mask("secret", "plain")},
		{"key-named lower case", "x-amz-key", "plain", Mask("secret", "plain")},
		{"ordinary", "User-Agent", "curl/8.0", "curl/8.0"},
		{"ordinary with credential", "X-Note", "use " + gh, "use " + Mask("github", gh)},
		{"ordinary with base64 credential", "X-Note", base64.StdEncoding.EncodeToString([]byte(gh)), Mask("github", gh)},
		{"empty", "Authorization", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := d.MaskHeader(tt.header, tt.value); got != tt.want {
				t.Fatalf("MaskHeader(%q) = %q; want %q", tt.header, got, tt.want)
			}
		})
	}
}

func TestMaskURL(t *testing.T) {
	gh := fakeGitHub()
	hook := fakeSlackHook()
	tests := []struct {
		name, in string
		gone     []string
		kept     []string
	}{
		{"plain", "https://example.com/a/b?x=1", nil, []string{"https://example.com/a/b?x=1"}},
		{"userinfo", "https://user:pw@example.com/", []string{"user:pw"}, []string{"userinfo"}},
		{"sensitive param", "https://example.com/?access_token=abc123&x=1", []string{"abc123"}, []string{"x=1", "param"}},
		{"credential in another param", "https://example.com/?q=" + gh, []string{gh}, []string{"github"}},
		{"encoded credential in a param", "https://example.com/?q=" + url.QueryEscape(url.QueryEscape(gh)), []string{gh, url.QueryEscape(gh)}, []string{"github"}},
		{"credential as a param name", "https://example.com/?" + gh, []string{gh}, []string{"github"}},
		{"credential in the path", "https://example.com/keys/" + gh + "/x", []string{gh}, []string{"/keys/", "/x", "github"}},
		{"encoded credential in the path", "https://example.com/k/" + escapeAll(gh), []string{gh, escapeAll(gh)}, []string{"github"}},
		{"slack webhook", hook, []string{"AbCdEfGhIjKlMnOpQrStUvWx", "T0123ABCD"}, []string{"hooks.slack.com/services/", "slack"}},
		{"fragment", "https://example.com/cb#access_token=" + gh, []string{gh}, []string{"#access_token="}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := url.Parse(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			got := MaskURL(u)
			for _, g := range tt.gone {
				if strings.Contains(got, g) {
					t.Fatalf("MaskURL = %q; still shows %q", got, g)
				}
			}
			for _, k := range tt.kept {
				if !strings.Contains(got, k) && !strings.Contains(got, url.PathEscape("["+k)) && !strings.Contains(got, url.QueryEscape("["+k)) {
					t.Fatalf("MaskURL = %q; want %q in it", got, k)
				}
			}
		})
	}
	if MaskURL(nil) != "" {
		t.Fatal("MaskURL(nil) is not empty")
	}
}

func TestMaskURLWithInjected(t *testing.T) {
	d := testDetector(t)
	v := "hunter2-" + "correct-horse"
	u, _ := url.Parse("https://example.com/p/" + v + "?q=" + url.QueryEscape(v))
	if got := d.MaskURL(u); strings.Contains(got, v) || strings.Contains(got, url.QueryEscape(v)) {
		t.Fatalf("MaskURL = %q; shows the injected value", got)
	}
}
