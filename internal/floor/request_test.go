package floor

import (
	"net/http"
	"strings"
	"testing"
)

func TestRequest(t *testing.T) {
	h := func(kv ...string) http.Header {
		hd := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			hd.Add(kv[i], kv[i+1])
		}
		return hd
	}
	tests := []struct {
		name   string
		method string
		path   string
		header http.Header
		reason string // "" means allowed
	}{
		{name: "plain get", method: "GET", path: "/repos/x/y", header: h("Accept", "application/json")},
		{name: "root", method: "GET", path: "/"},
		{name: "empty path", method: "GET", path: ""},
		{name: "dns-query elsewhere", method: "GET", path: "/api/dns-query"},
		{name: "longer segment", method: "GET", path: "/dns-query-stats"},
		{name: "dns-query in the query", method: "GET", path: "/search?q=/dns-query"},
		{name: "json", method: "POST", path: "/api", header: h("Content-Type", "application/json", "Accept", "*/*")},
		{name: "dns-message in a parameter", method: "GET", path: "/", header: h("Accept", "text/plain; note=application/dns-message-ish")},
		{name: "nil header", method: "GET", path: "/x", header: nil},

		{name: "get path", method: "GET", path: "/dns-query", reason: "GET request to the /dns-query path"},
		{name: "get with query", method: "GET", path: "/dns-query?dns=AAABAAABAAAAAAAAA3d3dwdleGFtcGxlA2NvbQAAAQAB", reason: "/dns-query"},
		{name: "upper case", method: "GET", path: "/DNS-Query", reason: "/dns-query"},
		{name: "under it", method: "GET", path: "/dns-query/abc123", reason: "/dns-query"},
		{name: "trailing slash", method: "GET", path: "/dns-query/", reason: "/dns-query"},
		{name: "percent-encoded", method: "GET", path: "/dns%2Dquery", reason: "/dns-query"},
		{name: "percent-encoded lower hex", method: "GET", path: "/%64%6e%73-query", reason: "/dns-query"},
		{name: "double encoded", method: "GET", path: "/dns%252Dquery", reason: "/dns-query"},
		{name: "dot segments", method: "GET", path: "/a/../dns-query", reason: "/dns-query"},
		{name: "double slash", method: "GET", path: "//dns-query", reason: "/dns-query"},
		{name: "backslash", method: "GET", path: `\dns-query`, reason: "/dns-query"},
		{name: "no leading slash", method: "GET", path: "dns-query", reason: "/dns-query"},
		{name: "matrix parameter", method: "GET", path: "/dns-query;x=1", reason: "/dns-query"},
		{name: "encoded slash before", method: "GET", path: "/x%2F..%2Fdns-query", reason: "/dns-query"},

		{name: "post message", method: "POST", path: "/resolve", header: h("Content-Type", "application/dns-message"), reason: `POST request with Content-Type "application/dns-message"`},
		{name: "content type upper case with parameters", method: "POST", path: "/x", header: h("Content-Type", "Application/DNS-Message; charset=binary"), reason: "Content-Type"},
		{name: "content type json api", method: "POST", path: "/x", header: h("Content-Type", "application/dns-json"), reason: "Content-Type"},
		{name: "accept message", method: "GET", path: "/x?dns=AAAB", header: h("Accept", "application/dns-message"), reason: `accepts "application/dns-message"`},
		{name: "accept json", method: "GET", path: "/resolve?name=example.com", header: h("Accept", "application/dns-json"), reason: `"application/dns-json"`},
		{name: "accept among several", method: "GET", path: "/x", header: h("Accept", "text/html, application/DNS-JSON;q=0.9, */*;q=0.1"), reason: `"application/DNS-JSON;q=0.9"`},
		{name: "accept on a second line", method: "GET", path: "/x", header: h("Accept", "text/html", "Accept", "application/dns-message"), reason: "accepts"},
		{name: "accept with spaces and tabs", method: "GET", path: "/x", header: h("Accept", " \tapplication/dns-message \t"), reason: "accepts"},
		{name: "odd method", method: "GET\nX-Evil: 1", path: "/dns-query", reason: "a request to the /dns-query path"},
		{name: "draft media type", method: "POST", path: "/x", header: h("Content-Type", "application/dns-udpwireformat"), reason: "Content-Type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Request(tt.method, tt.path, tt.header)
			if tt.reason == "" {
				if r != nil {
					t.Fatalf("Request(%q, %q) = %v, want nil", tt.method, tt.path, r)
				}
				return
			}
			if r == nil || r.Check != DoH || !strings.Contains(r.Reason, tt.reason) {
				t.Fatalf("Request(%q, %q) = %v, want %s with %q", tt.method, tt.path, r, DoH, tt.reason)
			}
			checkReason(t, r)
		})
	}
}

func TestRequestKeepsQuerySecret(t *testing.T) {
	r := Request("GET", "/dns-query?token=hunter2", nil)
	if r == nil || strings.Contains(r.Reason, "hunter2") {
		t.Fatalf("reason repeats the query: %v", r)
	}
}
