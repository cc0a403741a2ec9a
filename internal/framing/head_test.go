package framing

import (
	"bufio"
	"bytes"
	"net/http"
	"strings"
	"testing"
)

func TestParseHeadAccepts(t *testing.T) {
	get := func(target string) Head { return Head{Method: "GET", Target: target, Proto: "HTTP/1.1"} }
	with := func(h Head, f func(*Head)) Head { f(&h); return h }
	tests := []struct {
		name   string
		in     string
		tunnel bool
		want   Head
	}{
		{"origin-form", "GET /a/b?c=d HTTP/1.1\r\nHost: a.com\r\n\r\n", false, get("/a/b?c=d")},
		{"origin-form in a tunnel", "GET /a HTTP/1.1\r\nHost: a.com\r\n\r\n", true, get("/a")},
		{"absolute-form", "GET http://a.com/x HTTP/1.1\r\nHost: a.com\r\n\r\n", false, get("http://a.com/x")},
		{"absolute-form in a tunnel", "GET https://a.com/x HTTP/1.1\r\nHost: a.com\r\n\r\n", true, get("https://a.com/x")},
		{"absolute-form without a path", "GET http://a.com HTTP/1.1\r\nHost: a.com\r\n\r\n", false, get("http://a.com")},
		{"absolute-form with a query and no path", "GET http://a.com?x=/y HTTP/1.1\r\nHost: a.com\r\n\r\n", false, get("http://a.com?x=/y")},
		{"default port in the target only", "GET http://a.com:80/ HTTP/1.1\r\nHost: a.com\r\n\r\n", false, get("http://a.com:80/")},
		{"default port in Host only", "GET http://a.com/ HTTP/1.1\r\nHost: a.com:80\r\n\r\n", false, get("http://a.com/")},
		{"https default port", "GET https://a.com:443/ HTTP/1.1\r\nHost: a.com\r\n\r\n", false, get("https://a.com:443/")},
		{"other port on both sides", "GET http://a.com:8080/ HTTP/1.1\r\nHost: a.com:8080\r\n\r\n", false, get("http://a.com:8080/")},
		{"host and scheme case", "GET HTTP://A.Com/ HTTP/1.1\r\nHost: a.COM\r\n\r\n", false, get("HTTP://A.Com/")},
		{"userinfo is left to the gate", "GET http://u:p%40@a.com/ HTTP/1.1\r\nHost: a.com\r\n\r\n", false, get("http://u:p%40@a.com/")},
		{"IPv6 literal", "GET http://[2001:db8::1]:8080/ HTTP/1.1\r\nHost: [2001:DB8::1]:8080\r\n\r\n", false, get("http://[2001:db8::1]:8080/")},
		{"underscore in a host", "GET http://my_host.example.com/ HTTP/1.1\r\nHost: my_host.example.com\r\n\r\n", false, get("http://my_host.example.com/")},
		{"odd but legal query bytes", "GET /s?q={a|b}^`%zz HTTP/1.1\r\nHost: a.com\r\n\r\n", false, get("/s?q={a|b}^`%zz")},
		{"percent-escapes in the path", "GET /a%2Fb%20c HTTP/1.1\r\nHost: a.com\r\n\r\n", false, get("/a%2Fb%20c")},
		{"double slash origin-form", "GET //a.com/x HTTP/1.1\r\nHost: a.com\r\n\r\n", false, get("//a.com/x")},
		{"HTTP/1.0 without Host", "GET http://a.com/ HTTP/1.0\r\n\r\n", false, Head{Method: "GET", Target: "http://a.com/", Proto: "HTTP/1.0"}},
		{"HTTP/1.0 origin-form without Host", "GET / HTTP/1.0\r\n\r\n", false, Head{Method: "GET", Target: "/", Proto: "HTTP/1.0"}},
		{"HTTP/1.0 with a matching Host", "GET http://a.com/ HTTP/1.0\r\nHost: a.com\r\n\r\n", false, Head{Method: "GET", Target: "http://a.com/", Proto: "HTTP/1.0"}},
		{"extension method", "PROPFIND /dav HTTP/1.1\r\nHost: a.com\r\n\r\n", false, Head{Method: "PROPFIND", Target: "/dav", Proto: "HTTP/1.1"}},
		{"OPTIONS * in a tunnel", "OPTIONS * HTTP/1.1\r\nHost: a.com\r\n\r\n", true, Head{Method: "OPTIONS", Target: "*", Proto: "HTTP/1.1"}},
		{"CONNECT with Host", "CONNECT a.com:443 HTTP/1.1\r\nHost: a.com:443\r\n\r\n", false, Head{Method: "CONNECT", Target: "a.com:443", Proto: "HTTP/1.1", Connect: true}},
		{"CONNECT without Host", "CONNECT a.com:443 HTTP/1.1\r\n\r\n", false, Head{Method: "CONNECT", Target: "a.com:443", Proto: "HTTP/1.1", Connect: true}},
		{"CONNECT Host without port 443", "CONNECT a.com:443 HTTP/1.1\r\nHost: A.com\r\n\r\n", false, Head{Method: "CONNECT", Target: "a.com:443", Proto: "HTTP/1.1", Connect: true}},
		{"CONNECT Host without port 80", "CONNECT a.com:80 HTTP/1.1\r\nHost: a.com\r\n\r\n", false, Head{Method: "CONNECT", Target: "a.com:80", Proto: "HTTP/1.1", Connect: true}},
		{"CONNECT other port", "CONNECT a.com:8443 HTTP/1.1\r\nHost: a.com:8443\r\n\r\n", false, Head{Method: "CONNECT", Target: "a.com:8443", Proto: "HTTP/1.1", Connect: true}},
		{"CONNECT IPv6", "CONNECT [::1]:443 HTTP/1.1\r\nHost: [::1]:443\r\n\r\n", false, Head{Method: "CONNECT", Target: "[::1]:443", Proto: "HTTP/1.1", Connect: true}},
		// A CONNECT's Host is not compared with its target: the tunnel is the target's.
		{"CONNECT Host naming the proxy (Node)", "CONNECT a.com:443 HTTP/1.1\r\nHost: 127.0.0.1:3130\r\nConnection: keep-alive\r\n\r\n", false, Head{Method: "CONNECT", Target: "a.com:443", Proto: "HTTP/1.1", Connect: true}},
		{"CONNECT Host naming another host", "CONNECT a.com:443 HTTP/1.1\r\nHost: b.com:443\r\n\r\n", false, Head{Method: "CONNECT", Target: "a.com:443", Proto: "HTTP/1.1", Connect: true}},
		{"CONNECT Host without port, other port", "CONNECT a.com:8443 HTTP/1.1\r\nHost: a.com\r\n\r\n", false, Head{Method: "CONNECT", Target: "a.com:8443", Proto: "HTTP/1.1", Connect: true}},
		{"Content-Length", "POST /p HTTP/1.1\r\nHost: a.com\r\nContent-Length: 5\r\n\r\n", false,
			Head{Method: "POST", Target: "/p", Proto: "HTTP/1.1", Body: LengthBody, Length: 5}},
		{"Content-Length zero", "POST /p HTTP/1.1\r\nHost: a.com\r\nContent-Length: 0\r\n\r\n", false,
			Head{Method: "POST", Target: "/p", Proto: "HTTP/1.1", Body: LengthBody}},
		{"Content-Length with leading zeros and OWS", "POST /p HTTP/1.1\r\nHost: a.com\r\nContent-Length: \t0005  \r\n\r\n", false,
			Head{Method: "POST", Target: "/p", Proto: "HTTP/1.1", Body: LengthBody, Length: 5}},
		{"Content-Length without a space", "POST /p HTTP/1.1\r\nHost: a.com\r\ncontent-length:5\r\n\r\n", false,
			Head{Method: "POST", Target: "/p", Proto: "HTTP/1.1", Body: LengthBody, Length: 5}},
		{"Content-Length max int64", "POST /p HTTP/1.1\r\nHost: a.com\r\nContent-Length: 9223372036854775807\r\n\r\n", false,
			Head{Method: "POST", Target: "/p", Proto: "HTTP/1.1", Body: LengthBody, Length: 1<<63 - 1}},
		{"Content-Length on HTTP/1.0", "POST /p HTTP/1.0\r\nContent-Length: 3\r\n\r\n", false,
			Head{Method: "POST", Target: "/p", Proto: "HTTP/1.0", Body: LengthBody, Length: 3}},
		{"chunked, any case, OWS", "POST /p HTTP/1.1\r\nHost: a.com\r\nTransfer-Encoding:  Chunked \t\r\n\r\n", false,
			Head{Method: "POST", Target: "/p", Proto: "HTTP/1.1", Body: ChunkedBody}},
		{"chunked with a declared trailer", "POST /p HTTP/1.1\r\nHost: a.com\r\nTrailer: X-Checksum, , X-Sig\r\nTransfer-Encoding: chunked\r\n\r\n", false,
			Head{Method: "POST", Target: "/p", Proto: "HTTP/1.1", Body: ChunkedBody}},
		{"websocket upgrade", "GET http://a.com/ws HTTP/1.1\r\nHost: a.com\r\nConnection: Upgrade\r\nUpgrade: WebSocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", false,
			with(get("http://a.com/ws"), func(h *Head) { h.Upgrade = "websocket" })},
		{"Expect 100-continue", "PUT /p HTTP/1.1\r\nHost: a.com\r\nExpect: 100-Continue\r\nContent-Length: 2\r\n\r\n", false,
			Head{Method: "PUT", Target: "/p", Proto: "HTTP/1.1", Body: LengthBody, Length: 2}},
		{"obs-text, HTAB and empty values", "GET / HTTP/1.1\r\nHost: a.com\r\nX-A: caf\xc3\xa9\r\nX-B: a\tb\r\nX-C:\r\nX-D: \"q\" (c)\r\n\r\n", false, get("/")},
		{"names like the special ones", "GET / HTTP/1.1\r\nHost: a.com\r\nX-HTTP2-Settings: 1\r\nContent-Lengths: x\r\nHosts: a, b\r\n\r\n", false, get("/")},
		{"lowercase header names", "GET / HTTP/1.1\r\nhost: a.com\r\nCONTENT-LENGTH: 1\r\n\r\n", false,
			Head{Method: "GET", Target: "/", Proto: "HTTP/1.1", Body: LengthBody, Length: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, e := ParseHead([]byte(tt.in), tt.tunnel)
			if e != nil {
				t.Fatalf("ParseHead refused: %v", e)
			}
			if *h != tt.want {
				t.Errorf("got %+v\nwant %+v", *h, tt.want)
			}
			agreeWithNetHTTP(t, []byte(tt.in), h)
		})
	}
}

// agreeWithNetHTTP checks that net/http reads the accepted head b as h says.
func agreeWithNetHTTP(t *testing.T, b []byte, h *Head) {
	t.Helper()
	r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(b)))
	if err != nil {
		t.Fatalf("ParseHead accepted what http.ReadRequest refuses: %v", err)
	}
	if r.Method != h.Method || r.RequestURI != h.Target || r.Proto != h.Proto {
		t.Errorf("net/http reads %s %s %s", r.Method, r.RequestURI, r.Proto)
	}
	if h.Connect && r.Host != h.Target {
		// The gate binds a tunnel to r.Host: it must be the CONNECT target, whatever Host says.
		t.Errorf("net/http reads the CONNECT's host as %q, not its target %q", r.Host, h.Target)
	}
	want := map[BodyKind]int64{NoBody: 0, LengthBody: h.Length, ChunkedBody: -1}[h.Body]
	if r.ContentLength != want {
		t.Errorf("net/http reads ContentLength %d, want %d", r.ContentLength, want)
	}
}

func TestParseHeadRefuses(t *testing.T) {
	for _, f := range loadFixtures(t, "heads") {
		t.Run(f.name, func(t *testing.T) {
			if f.kind == "" {
				t.Fatal("a heads fixture must name the kind it is refused with")
			}
			head, _ := splitHead(f.data)
			h, e := ParseHead(head, f.tunnel)
			if e == nil {
				t.Fatalf("ParseHead accepted %+v", h)
			}
			if e.Kind != f.kind {
				t.Errorf("kind %s (%s), want %s", e.Kind, e.Reason, f.kind)
			}
			checkReason(t, e)
		})
	}
}

func TestParseHeadRefusesInline(t *testing.T) {
	long := "GET /" + strings.Repeat("\x01", 100) + " HTTP/1.1\r\nHost: a.com\r\n\r\n"
	tests := []struct {
		name   string
		in     string
		tunnel bool
		kind   Kind
	}{
		{"empty", "", false, BadRequest},
		{"only the end", "\r\n\r\n", false, BadRequest},
		{"empty request line", "\r\nGET / HTTP/1.1\r\nHost: a.com\r\n\r\n", false, BadRequest},
		{"no empty line at the end", "GET / HTTP/1.1\r\nHost: a.com\r\n", false, BadRequest},
		{"bytes after the head", "GET / HTTP/1.1\r\nHost: a.com\r\n\r\nX-A: 1\r\n\r\n", false, BadRequest},
		{"long offending target", long, false, BadRequest},
		{"HTTP/1.1 origin-form without Host", "GET / HTTP/1.1\r\n\r\n", false, BadRequest},
		{"h2c before a host mismatch", "GET http://a.com/ HTTP/1.1\r\nHost: b.com\r\nUpgrade: h2c\r\n\r\n", false, H2C},
		{"malformed before h2c", "GET http://a.com/ HTTP/1.1\r\nHost: a.com\r\nUpgrade: h2c\r\n folded\r\n\r\n", false, BadRequest},
		{"nested CONNECT with a matching Host", "CONNECT a.com:443 HTTP/1.1\r\nHost: a.com:443\r\n\r\n", true, NestedConnect},
		{"preface with headers", "PRI * HTTP/2.0\r\nHost: a.com\r\n\r\n", false, H2Preface},
		{"OPTIONS * on HTTP/1.1 in a tunnel without Host", "OPTIONS * HTTP/1.1\r\n\r\n", true, BadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, e := ParseHead([]byte(tt.in), tt.tunnel)
			if e == nil {
				t.Fatalf("ParseHead accepted %+v", h)
			}
			if e.Kind != tt.kind {
				t.Errorf("kind %s (%s), want %s", e.Kind, e.Reason, tt.kind)
			}
			checkReason(t, e)
		})
	}
}

// TestParseHeadClients checks heads captured from real clients going through a proxy (and curl
// speaking origin-form, as inside a tunnel).
func TestParseHeadClients(t *testing.T) {
	want := map[string]Head{
		"curl-get":          {Method: "GET", Target: "http://example.com/index.html"},
		"curl-connect":      {Method: "CONNECT", Target: "example.com:443", Connect: true},
		"curl-post-form":    {Method: "POST", Target: "http://example.com/form", Body: LengthBody, Length: 7},
		"curl-post-chunked": {Method: "POST", Target: "http://example.com/upload", Body: ChunkedBody},
		"curl-origin":       {Method: "GET", Target: "/api/v1/items?x=1"},
		"git-info-refs":     {Method: "GET", Target: "http://example.com/org/repo.git/info/refs?service=git-upload-pack"},
		"git-upload-pack":   {Method: "POST", Target: "http://example.com/org/repo.git/git-upload-pack", Body: LengthBody, Length: 82},
		"git-connect":       {Method: "CONNECT", Target: "github.com:443", Connect: true},
		"npm-get":           {Method: "GET", Target: "http://registry.npmjs.org/lodash"},
		"npm-connect":       {Method: "CONNECT", Target: "registry.npmjs.org:443", Connect: true},
		"wget-get":          {Method: "GET", Target: "http://example.com/file.tar.gz"},
		"python-urllib-get": {Method: "GET", Target: "http://example.com/pypi/simple/"},
		"go-get":            {Method: "GET", Target: "http://example.com/go/get?q=1"},
		"go-connect":        {Method: "CONNECT", Target: "example.com:443", Connect: true},
		"node-connect":      {Method: "CONNECT", Target: "www.google.com:80", Connect: true},
		"go-post":           {Method: "POST", Target: "http://example.com/go/post", Body: LengthBody, Length: 7},
		"go-post-chunked":   {Method: "POST", Target: "http://example.com/go/chunked", Body: ChunkedBody},
	}
	fixtures := loadFixtures(t, "clients")
	if len(fixtures) != len(want) {
		t.Errorf("%d client fixtures, %d expectations", len(fixtures), len(want))
	}
	for _, f := range fixtures {
		t.Run(f.name, func(t *testing.T) {
			w, ok := want[f.name]
			if !ok {
				t.Fatal("no expectation for this fixture")
			}
			w.Proto = "HTTP/1.1"
			head, body := splitHead(f.data)
			for _, tunnel := range []bool{false, true} {
				h, e := ParseHead(head, tunnel)
				if tunnel && w.Connect {
					if e == nil || e.Kind != NestedConnect {
						t.Errorf("in a tunnel: got %v, want %s", e, NestedConnect)
					}
					continue
				}
				if e != nil {
					t.Fatalf("tunnel %v: ParseHead refused: %v", tunnel, e)
				}
				if *h != w {
					t.Errorf("got %+v\nwant %+v", *h, w)
				}
				agreeWithNetHTTP(t, head, h)
			}
			if w.Body == ChunkedBody {
				var c Chunked
				if n, done, e := c.Scan(body); e != nil || !done || n != len(body) {
					t.Errorf("the captured chunked body: n %d of %d, done %v, err %v", n, len(body), done, e)
				}
			}
		})
	}
}

func TestParseHeadDoesNotRetainInput(t *testing.T) {
	b := []byte("GET http://a.com/x HTTP/1.1\r\nHost: a.com\r\nUpgrade: WebSocket\r\n\r\n")
	h, e := ParseHead(b, false)
	if e != nil {
		t.Fatal(e)
	}
	for i := range b {
		b[i] = 'Z'
	}
	if h.Method != "GET" || h.Target != "http://a.com/x" || h.Upgrade != "websocket" {
		t.Errorf("head changed with its input: %+v", *h)
	}
}

func TestErrorText(t *testing.T) {
	e := &Error{Kind: HostMismatch, Reason: "the Host header does not match the target authority"}
	if got, want := e.Error(), `framing: host-mismatch: the Host header does not match the target authority`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	for _, n := range []int{1, 11, 40, 41, 1000} {
		if got := quoteName([]byte(strings.Repeat("\xff\n", n))); len(got) > maxQuote+8 || strings.ContainsAny(got, "\n\r") {
			t.Errorf("quoteName = %q: too long or not one line", got)
		}
	}
	for _, k := range []BodyKind{NoBody, LengthBody, ChunkedBody, 9} {
		if k.String() == "" {
			t.Errorf("BodyKind(%d) has no name", k)
		}
	}
}
