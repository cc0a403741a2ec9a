package exfil

import (
	"bytes"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/testkit"
)

// newClock returns a clock that moves only when told.
func newClock() *testkit.Clock { return testkit.NewClock(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)) }

// marker is planted inside blobs; no reason may repeat it.
const marker = "Mk7rQ2xZpW"

// blobWithMarker is a base64 value of n characters with the marker in its middle.
func blobWithMarker(seed uint64, n int) string {
	half := (n - len(marker)) / 2
	return b64(seed, half) + marker + b64(seed+1, n-len(marker)-half)
}

// maxCopied is the longest run of input bytes a reason may repeat.
const maxCopied = 20

// copied returns a piece of a reason longer than maxCopied bytes that is in one of the
// inputs, or "".
func copied(reason string, inputs ...[]byte) string {
	for i := 0; i+maxCopied < len(reason); i++ {
		w := []byte(reason[i : i+maxCopied+1])
		for _, in := range inputs {
			if bytes.Contains(in, w) {
				return string(w)
			}
		}
	}
	return ""
}

// checkScore holds a score to what every score keeps: a finite value of at least zero, a
// reason for every point, Suspect agreeing with the threshold, and reasons that repeat no data.
func checkScore(t testing.TB, sc Score, threshold float64, r *Request) {
	t.Helper()
	if math.IsNaN(sc.Value) || math.IsInf(sc.Value, 0) || sc.Value < 0 {
		t.Fatalf("value %v", sc.Value)
	}
	if (sc.Value == 0) != (len(sc.Reasons) == 0) {
		t.Fatalf("value %v with reasons %q", sc.Value, sc.Reasons)
	}
	if sc.Suspect != (sc.Value >= threshold) {
		t.Fatalf("suspect %v with value %v, threshold %v", sc.Suspect, sc.Value, threshold)
	}
	inputs := [][]byte{[]byte(r.Path), []byte(r.Query), r.Body}
	for _, vs := range r.Header {
		for _, v := range vs {
			inputs = append(inputs, []byte(v))
		}
	}
	for _, reason := range sc.Reasons {
		if strings.Contains(reason, marker) {
			t.Fatalf("reason %q repeats the blob's marker", reason)
		}
		if c := copied(reason, inputs...); c != "" {
			t.Fatalf("reason %q repeats %q from the request", reason, c)
		}
		if strings.ContainsFunc(reason, func(r rune) bool { return r < ' ' || r == 0x7f }) {
			t.Fatalf("reason %q has a control character", reason)
		}
	}
}

// visit scores n plain GETs to host.
func visit(s *Scorer, host string, n int, trusted bool) {
	for range n {
		s.Score(&Request{Host: host, Path: "/", Trusted: trusted})
	}
}

func get(host, path, query string) Request {
	return Request{Host: host, Path: path, Query: query, Header: http.Header{
		"Accept":     {"application/json"},
		"User-Agent": {"agent/1.0"},
	}}
}

func post(host, path string, body []byte) Request {
	return Request{Host: host, Path: path, Body: body, BodySize: int64(len(body)), Header: http.Header{
		"Content-Type": {"application/octet-stream"},
	}}
}

func trusted(r Request) Request {
	r.Trusted = true
	return r
}

func withHeader(r Request, name, value string) Request {
	r.Header = r.Header.Clone()
	r.Header.Set(name, value)
	return r
}

// gitUploadPack is the body of a git fetch: wants and haves, one pkt-line each.
func gitUploadPack() []byte {
	var b bytes.Buffer
	for i := range 60 {
		verb := "want"
		if i >= 30 {
			verb = "have"
		}
		line := verb + " " + hexOf(uint64(100+i), 40) + "\n"
		if i == 0 {
			line = verb + " " + hexOf(100, 40) + " multi_ack_detailed side-band-64k thin-pack ofs-delta agent=git/2.43.0\n"
		}
		fmt.Fprintf(&b, "%04x%s", len(line)+4, line)
		if i == 29 {
			b.WriteString("0000")
		}
	}
	b.WriteString("0009done\n")
	return b.Bytes()
}

func TestScore(t *testing.T) {
	const (
		kib = 1 << 10
		mib = 1 << 20
	)
	uuid := func(i int) string { return fmt.Sprintf("%08x-e29b-41d4-a716-%012x", 0x550e8400+i, 0x446655440000+i) }
	blob200 := "q=" + blobWithMarker(1, 200)
	cases := []struct {
		name    string
		before  func(s *Scorer)
		req     Request
		suspect bool
		reasons []string // a fragment of each reason, in order; none: the value is 0
		below   float64  // when not 0: the value is below it
	}{
		{
			name:   "plain GET to a known host",
			before: func(s *Scorer) { visit(s, "api.github.com", 1, true) },
			req:    trusted(get("api.github.com", "/repos/lockhttp/lockhttp/issues", "state=open&per_page=100")),
		},
		{
			name:    "plain GET to a new host",
			req:     get("docs.example.org", "/guide/getting-started/installation", "lang=en"),
			reasons: nil,
		},
		{
			name:    "base64 query to a new host",
			req:     get("paste.example", "/collect", blob200),
			suspect: true,
			reasons: []string{`a 200-character base64 blob in the value of query parameter "q", to a host not seen before (+7.0)`},
		},
		{
			name:    "base64 query to an untrusted host seen before",
			before:  func(s *Scorer) { visit(s, "paste.example", 1, false) },
			req:     get("paste.example", "/collect", blob200),
			suspect: true,
			reasons: []string{`a 200-character base64 blob in the value of query parameter "q" (+4.6)`},
		},
		{
			name:    "base64 query to a trusted host seen many times",
			before:  func(s *Scorer) { visit(s, "www.googleapis.com", 50, true) },
			req:     trusted(get("www.googleapis.com", "/drive/v3/files", blob200)),
			reasons: []string{`a 200-character base64 blob in the value of query parameter "q", to a host the policy trusts (+2.3)`},
			below:   3,
		},
		{
			name:    "base64 query to a trusted new host",
			req:     trusted(get("www.googleapis.com", "/drive/v3/files", blob200)),
			reasons: []string{"a 200-character base64 blob in the value of query parameter \"q\", to a host not seen before that the policy trusts (+3.5)"},
		},
		{
			name:    "64 base64 characters to a new host",
			req:     get("paste.example", "/", "data="+b64(2, 64)),
			suspect: true,
			reasons: []string{`a 64-character base64 blob in the value of query parameter "data", to a host not seen before (+4.5)`},
		},
		{
			name:    "a 40-character cursor to a new host",
			req:     get("api.example.com", "/v1/items", "cursor="+b64url(3, 40)),
			reasons: []string{`a 40-character base64 blob in the value of query parameter "cursor", to a host not seen before (+3.5)`},
		},
		{
			name:    "blobs split across parameters to a new host",
			req:     get("paste.example", "/c", "a="+b64(4, 40)+"&b="+b64(5, 40)+"&c="+b64(6, 40)),
			suspect: true,
			reasons: []string{`a 40-character base64 blob in the value of query parameter "a" and 2 more (120 characters in all), to a host not seen before (+5.9)`},
		},
		{
			name:    "blob in a path segment",
			before:  func(s *Scorer) { visit(s, "files.example", 1, false) },
			req:     get("files.example", "/u/"+b64url(7, 70)+marker+b64url(8, 70)+"/x", ""),
			reasons: []string{"a 150-character base64 blob in path segment 2 (+4.2)"},
			suspect: true,
		},
		{
			name:    "blob under a parameter name not shown",
			before:  func(s *Scorer) { visit(s, "files.example", 1, false) },
			req:     get("files.example", "/", "%24weird="+blobWithMarker(8, 128)),
			reasons: []string{"a 128-character base64 blob in a query parameter value (+4.0)"},
			suspect: true,
		},
		{
			name:    "blob as a parameter name",
			before:  func(s *Scorer) { visit(s, "files.example", 1, false) },
			req:     get("files.example", "/", blobWithMarker(9, 64)),
			reasons: []string{"a 64-character base64 blob in a query parameter name (+3.0)"},
		},
		{
			name:    "git clone: refs",
			req:     get("git.example.org", "/lockhttp/lockhttp.git/info/refs", "service=git-upload-pack"),
			reasons: nil,
		},
		{
			name:   "git clone: wants and haves",
			before: func(s *Scorer) { visit(s, "git.example.org", 1, false) },
			req:    post("git.example.org", "/lockhttp/lockhttp.git/git-upload-pack", gitUploadPack()),
		},
		{
			name: "git dumb HTTP: a loose object",
			req:  get("git.example.org", "/lockhttp/lockhttp.git/objects/3f/"+hexOf(12, 38), ""),
		},
		{
			name:    "git object ids outside git",
			before:  func(s *Scorer) { visit(s, "github.com", 3, true) },
			req:     trusted(get("github.com", "/lockhttp/lockhttp/compare/"+hexOf(10, 40)+"..."+hexOf(11, 40), "")),
			reasons: []string{"a 40-character hex digest in path segment 4 and 1 more, to a host the policy trusts (+0.2)"},
		},
		{
			name:    "a SHA-256 to a new host",
			req:     get("registry.example.net", "/v2/library/alpine/blobs/sha256:"+hexOf(12, 64), ""),
			reasons: []string{"a 64-character hex digest in path segment 5, to a host not seen before (+0.9)"},
		},
		{
			name: "UUID-laden REST path",
			req: get("api.linear.example", "/v1/orgs/"+uuid(1)+"/projects/"+uuid(2)+"/issues/"+uuid(3),
				"after="+uuid(4)+"&ids="+uuid(5)+","+uuid(6)),
		},
		{
			name: "cache busters",
			req:  get("cdn.example", "/static/app.js", "v="+hexOf(13, 32)+"&_=1714564800000"),
		},
		{
			name: "JWT in a query",
			req:  get("api.example.com", "/me", "access_token=eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."+b64url(14, 120)+"."+b64url(15, 43)),
		},
		{
			name: "presigned URL",
			req: get("objects.example-cdn.com", "/release-assets/1/2", "X-Amz-Algorithm=AWS4-HMAC-SHA256"+
				"&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20260501%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20260501T120000Z"+
				"&X-Amz-Expires=300&X-Amz-Security-Token="+b64(16, 400)+"&X-Amz-SignedHeaders=host&X-Amz-Signature="+hexOf(17, 64)),
			reasons: []string{"a 400-character base64 signature or token of a presigned URL in the value of query parameter \"X-Amz-Security-Token\" and 2 more, to a host not seen before (+1.9)"},
		},
		{
			name:    "300 KiB POST to a new host",
			req:     post("upload.example", "/upload", randBytes(18, 300*kib)),
			suspect: true,
			reasons: []string{"a 300 KiB body, to a host not seen before (+4.0)"},
		},
		{
			name:    "300 KiB POST to a trusted new host",
			req:     trusted(post("upload.example", "/upload", randBytes(18, 300*kib))),
			reasons: []string{"a 300 KiB body, to a host not seen before that the policy trusts (+2.0)"},
		},
		{
			name: "300 KiB POST to a host that has sent back as much",
			before: func(s *Scorer) {
				visit(s, "upload.example", 1, false)
				s.Replied("upload.example", 300*kib)
			},
			req: post("upload.example", "/upload", randBytes(18, 300*kib)),
		},
		{
			name: "1.8 MiB more sent than received",
			before: func(s *Scorer) {
				visit(s, "upload.example", 1, false)
				s.Replied("upload.example", 100*kib)
				for range 4 {
					s.Score(&Request{Host: "upload.example", Path: "/part", BodySize: 400 * kib})
				}
			},
			req:     post("upload.example", "/part", randBytes(19, 300*kib)),
			suspect: true,
			reasons: []string{"1.8 MiB more sent than received within 10m0s (+4.8)"},
		},
		{
			name: "a body known by its size only",
			before: func(s *Scorer) {
				visit(s, "upload.example", 1, false)
			},
			req:     Request{Host: "upload.example", Path: "/big", Body: randBytes(20, 1024), BodySize: 3 * mib},
			suspect: true,
			reasons: []string{"3.0 MiB more sent than received within 10m0s (+5.6)"},
		},
		{
			name:   "a GET after an upload does not score again",
			before: func(s *Scorer) { s.Score(&Request{Host: "upload.example", Path: "/", BodySize: 2 * mib}) },
			req:    get("upload.example", "/status", ""),
		},
		{
			name:    "long header value to an untrusted host",
			before:  func(s *Scorer) { visit(s, "hook.example", 1, false) },
			req:     withHeader(get("hook.example", "/", ""), "X-Data", strings.Repeat("the data is words ", 300)),
			reasons: []string{`a 5 KiB value in header "X-Data" (+2.0)`},
		},
		{
			name:   "long header value to a trusted host",
			before: func(s *Scorer) { visit(s, "hook.example", 1, true) },
			req:    trusted(withHeader(get("hook.example", "/", ""), "X-Data", strings.Repeat("the data is words ", 300))),
		},
		{
			name:   "long cookie to an untrusted host",
			before: func(s *Scorer) { visit(s, "hook.example", 1, false) },
			req:    withHeader(get("hook.example", "/", ""), "Cookie", strings.Repeat("session=words; ", 400)),
		},
		{
			name:    "long query value of words to a new host",
			req:     get("search.example", "/", "q="+strings.Repeat("what+is+the+answer+", 120)),
			reasons: []string{`a 2 KiB value for query parameter "q", to a host not seen before (+3.0)`},
		},
		{
			name:    "base64 blob in a JSON body to a new host",
			req:     post("api.collector.example", "/v1/events", []byte(`{"event":"x","data":"`+blobWithMarker(21, 2000)+`"}`)),
			suspect: true,
			reasons: []string{"a 2000-character base64 blob in the body, to a host not seen before (+7.5)"},
		},
		{
			name:    "base64 image in a JSON body to a trusted host",
			before:  func(s *Scorer) { visit(s, "api.anthropic.com", 5, true) },
			req:     trusted(post("api.anthropic.com", "/v1/messages", []byte(`{"content":[{"type":"image","source":{"type":"base64","data":"`+b64(22, 100_000)+`"}}]}`))),
			reasons: []string{"a 100000-character base64 blob in the body, to a host the policy trusts (+2.5)"},
		},
		{
			name:    "a conversation in a JSON body to a trusted host",
			before:  func(s *Scorer) { visit(s, "api.anthropic.com", 5, true) },
			req:     trusted(post("api.anthropic.com", "/v1/messages", jsonBody(64<<10))),
			reasons: []string{"a 40-character hex digest in the body and "},
		},
		{
			name:    "a conversation in a JSON body to an untrusted host",
			before:  func(s *Scorer) { visit(s, "llm.example", 5, false) },
			req:     post("llm.example", "/v1/chat", jsonBody(64<<10)),
			reasons: []string{"a 40-character hex digest in the body and "},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := New(Config{Now: newClock().Now})
			if c.before != nil {
				c.before(s)
			}
			r := c.req
			sc := s.Score(&r)
			t.Log(sc)
			checkScore(t, sc, DefaultThreshold, &r)
			if sc.Suspect != c.suspect {
				t.Errorf("suspect = %v, want %v (%v)", sc.Suspect, c.suspect, sc)
			}
			if len(sc.Reasons) != len(c.reasons) {
				t.Fatalf("reasons %q, want %d like %q", sc.Reasons, len(c.reasons), c.reasons)
			}
			for i, want := range c.reasons {
				if !strings.Contains(sc.Reasons[i], want) {
					t.Errorf("reason %d = %q, want it to contain %q", i, sc.Reasons[i], want)
				}
			}
			if c.below != 0 && sc.Value >= c.below {
				t.Errorf("value %v, want below %v", sc.Value, c.below)
			}
		})
	}
}

// jsonBody is a request to a chat API of about n bytes: prose, code, paths, ids.
func jsonBody(n int) []byte {
	parts := []string{
		"Here is the function that fails; can you see why the test does not pass?",
		"func (s *Scorer) Score(r *Request) Score {\\n\\tif r == nil {\\n\\t\\treturn Score{}\\n\\t}\\n}",
		"The error is: internal/exfil/exfil_test.go:42: TestScoreReasonsNeverQuoteTheBlob failed",
		"commit " + hexOf(30, 40) + " (HEAD -> main, origin/main)",
		"request id " + fmt.Sprintf("%08x-e29b-41d4-a716-446655440000", 0x1234) + " returned 502 Bad Gateway",
		"const getUserProfileSettingsForAccount2 = async (accountId) => fetch(`/api/v1/accounts/${accountId}/settings`)",
		"npm ERR! code ERESOLVE; see node_modules/.package-lock.json and packages/web-app/src/components/ProfileSettings.tsx",
		"2024-01-15-my-long-descriptive-article-title.md was renamed to 2024-01-16-my-longer-descriptive-article-title.md",
	}
	var b bytes.Buffer
	b.WriteString(`{"model":"claude-sonnet-4-5","max_tokens":4096,"messages":[`)
	for i := 0; b.Len() < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		fmt.Fprintf(&b, `{"role":%q,"content":[{"type":"text","text":"%s"}]}`, role, parts[i%len(parts)])
	}
	b.WriteString("]}")
	return b.Bytes()
}

func TestSubdomains(t *testing.T) {
	cases := []struct {
		name      string
		hosts     func(i int) string // the i-th request's host, from 0
		n         int
		trusted   bool
		firstHit  int    // the first request (from 1) that scores; 0: none
		suspect   bool   // whether those from firstHit on are suspect
		reason    string // a fragment of the reason at firstHit
		lastValue float64
	}{
		{
			name:     "hex subdomains of a collector",
			hosts:    func(i int) string { return hexOf(uint64(200+i), 16) + ".collector.example" },
			n:        30,
			firstHit: 21,
			suspect:  true,
			reason:   `the 21st distinct subdomain of "collector.example" within 10m0s`,
		},
		{
			name:      "long random labels",
			hosts:     func(i int) string { return strings.ToLower(b32(uint64(300+i), 40)) + ".t.attacker.example" },
			n:         40,
			firstHit:  21,
			suspect:   true,
			reason:    `the 21st distinct subdomain of "attacker.example" within 10m0s, a long one, random-looking (+6.0)`,
			lastValue: 6,
		},
		{
			name:     "a CDN with a few subdomains",
			hosts:    func(i int) string { return []string{"static", "img", "js", "css", "fonts"}[i%5] + ".cdn.example" },
			n:        50,
			firstHit: 0,
		},
		{
			name:     "a trusted domain with many subdomains",
			hosts:    func(i int) string { return fmt.Sprintf("avatars%d.githubusercontent.example", i) },
			n:        30,
			trusted:  true,
			firstHit: 21,
			reason:   `the 21st distinct subdomain of "githubusercontent.example" within 10m0s, to a host the policy trusts (+2.0)`,
		},
		{
			name:     "past the remembered bound",
			hosts:    func(i int) string { return fmt.Sprintf("x%d.many.example", i) },
			n:        100,
			firstHit: 21,
			suspect:  true,
			reason:   "the 21st",
		},
		{
			name:     "subdomains of a public suffix's own names",
			hosts:    func(i int) string { return fmt.Sprintf("site%d.github.io", i) },
			n:        30,
			firstHit: 0,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := New(Config{Now: newClock().Now})
			var last Score
			for i := range c.n {
				r := Request{Host: c.hosts(i), Path: "/", Trusted: c.trusted}
				sc := s.Score(&r)
				checkScore(t, sc, DefaultThreshold, &r)
				last = sc
				scored := c.firstHit > 0 && i+1 >= c.firstHit
				if scored != (sc.Value > 0) || scored && sc.Suspect != c.suspect {
					t.Fatalf("request %d (%s): %v", i+1, r.Host, sc)
				}
				if i+1 == c.firstHit && !strings.Contains(strings.Join(sc.Reasons, "; "), c.reason) {
					t.Errorf("request %d: reasons %q, want %q", i+1, sc.Reasons, c.reason)
				}
			}
			if c.lastValue != 0 && last.Value != c.lastValue {
				t.Errorf("last value %v, want %v", last.Value, c.lastValue)
			}
		})
	}
}

func b32(seed uint64, n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz234567"
	b := randBytes(seed, n)
	for i := range b {
		b[i] = alphabet[b[i]%32]
	}
	return string(b)
}

// TestWindow holds the sliding window to the injected clock: subdomains and bytes older than
// the window no longer count.
func TestWindow(t *testing.T) {
	sub := func(i int) string { return fmt.Sprintf("n%d.collector.example", i) }
	cases := []struct {
		name    string
		run     func(s *Scorer, c *testkit.Clock) Score
		suspect bool
	}{
		{"subdomains within the window", func(s *Scorer, c *testkit.Clock) Score {
			for i := range 20 {
				visit(s, sub(i), 1, false)
			}
			c.Advance(9 * time.Minute)
			return s.Score(&Request{Host: sub(20), Path: "/"})
		}, true},
		{"subdomains past the window", func(s *Scorer, c *testkit.Clock) Score {
			for i := range 20 {
				visit(s, sub(i), 1, false)
			}
			c.Advance(10 * time.Minute)
			var sc Score
			for i := 20; i < 35; i++ {
				if sc = s.Score(&Request{Host: sub(i), Path: "/"}); sc.Value > 0 {
					return sc
				}
			}
			return sc
		}, false},
		{"a subdomain seen again stays in the window", func(s *Scorer, c *testkit.Clock) Score {
			for i := range 20 {
				visit(s, sub(i), 1, false)
			}
			c.Advance(9 * time.Minute)
			for i := range 20 {
				visit(s, sub(i), 1, false)
			}
			c.Advance(9 * time.Minute)
			return s.Score(&Request{Host: sub(20), Path: "/"})
		}, true},
		{"bytes within the window", func(s *Scorer, c *testkit.Clock) Score {
			visit(s, "up.example", 1, false)
			s.Score(&Request{Host: "up.example", Path: "/", BodySize: 700 << 10})
			c.Advance(8 * time.Minute)
			return s.Score(&Request{Host: "up.example", Path: "/", BodySize: 700 << 10})
		}, true},
		{"bytes past the window", func(s *Scorer, c *testkit.Clock) Score {
			visit(s, "up.example", 1, false)
			s.Score(&Request{Host: "up.example", Path: "/", BodySize: 700 << 10})
			c.Advance(10 * time.Minute)
			return s.Score(&Request{Host: "up.example", Path: "/", BodySize: 700 << 10})
		}, false},
		{"replies within the window", func(s *Scorer, c *testkit.Clock) Score {
			visit(s, "up.example", 1, false)
			s.Score(&Request{Host: "up.example", Path: "/", BodySize: 700 << 10})
			c.Advance(time.Minute)
			s.Replied("up.example", 700<<10)
			return s.Score(&Request{Host: "up.example", Path: "/", BodySize: 700 << 10})
		}, false},
		{"replies past the window", func(s *Scorer, c *testkit.Clock) Score {
			visit(s, "up.example", 1, false)
			s.Replied("up.example", 1400<<10)
			c.Advance(10 * time.Minute)
			s.Score(&Request{Host: "up.example", Path: "/", BodySize: 700 << 10})
			return s.Score(&Request{Host: "up.example", Path: "/", BodySize: 700 << 10})
		}, true},
		{"a reply from a host never scored is ignored", func(s *Scorer, c *testkit.Clock) Score {
			s.Replied("up.example", 10<<20)
			return s.Score(&Request{Host: "up.example", Path: "/", BodySize: 300 << 10})
		}, true},
		{"the clock going back", func(s *Scorer, c *testkit.Clock) Score {
			visit(s, "up.example", 1, false)
			s.Score(&Request{Host: "up.example", Path: "/", BodySize: 700 << 10})
			c.Advance(-time.Hour)
			return s.Score(&Request{Host: "up.example", Path: "/", BodySize: 700 << 10})
		}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clk := newClock()
			s := New(Config{Now: clk.Now})
			if sc := c.run(s, clk); sc.Suspect != c.suspect {
				t.Errorf("suspect = %v, want %v: %v", sc.Suspect, c.suspect, sc)
			}
		})
	}
}

func TestConfig(t *testing.T) {
	blob := &Request{Host: "paste.example", Path: "/", Query: "q=" + b64(40, 64)} // 3 points, 4.5 new
	cases := []struct {
		name    string
		c       Config
		suspect bool
	}{
		{"zero threshold is the default", Config{}, true},
		{"negative threshold is the default", Config{Threshold: -1}, true},
		{"NaN threshold is the default", Config{Threshold: math.NaN()}, true},
		{"higher threshold", Config{Threshold: 5}, false},
		{"lower threshold", Config{Threshold: 1}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if sc := New(c.c).Score(blob); sc.Suspect != c.suspect {
				t.Errorf("suspect = %v, want %v: %v", sc.Suspect, c.suspect, sc)
			}
		})
	}
	t.Run("window", func(t *testing.T) {
		clk := newClock()
		s := New(Config{Now: clk.Now, Window: time.Minute})
		visit(s, "up.example", 1, false)
		s.Score(&Request{Host: "up.example", Path: "/", BodySize: 700 << 10})
		clk.Advance(time.Minute)
		if sc := s.Score(&Request{Host: "up.example", Path: "/", BodySize: 700 << 10}); sc.Suspect {
			t.Errorf("a one-minute window still counts bytes of a minute ago: %v", sc)
		}
	})
	t.Run("nil request", func(t *testing.T) {
		if sc := New(Config{}).Score(nil); sc.Value != 0 || sc.Suspect || sc.Reasons != nil {
			t.Errorf("Score(nil) = %v", sc)
		}
	})
	t.Run("empty host is not remembered", func(t *testing.T) {
		s := New(Config{})
		s.Score(&Request{Path: "/", BodySize: 2 << 20})
		if n := s.hosts.len(); n != 0 {
			t.Errorf("%d hosts remembered", n)
		}
	})
}

func TestScoreString(t *testing.T) {
	cases := []struct {
		name string
		s    Score
		want string
	}{
		{"zero", Score{}, "0.0"},
		{"reasons", Score{Value: 2.25, Reasons: []string{"a (+2.0)", "b (+0.2)"}}, "2.2: a (+2.0); b (+0.2)"},
		{"suspect", Score{Value: 7, Suspect: true, Reasons: []string{"a (+7.0)"}}, "7.0 (suspect): a (+7.0)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.s.String(); got != c.want {
				t.Errorf("String() = %q, want %q", got, c.want)
			}
		})
	}
}

// TestForgetting holds memory to its bounds: 100,000 distinct hosts, half of them subdomains
// of one name, leave MaxHosts hosts, at most MaxHosts domains and maxSubdomains subdomains.
func TestForgetting(t *testing.T) {
	for _, maxHosts := range []int{0, 1000} {
		t.Run(fmt.Sprintf("MaxHosts=%d", maxHosts), func(t *testing.T) {
			s := New(Config{Now: newClock().Now, MaxHosts: maxHosts})
			bound := maxHosts
			if bound == 0 {
				bound = DefaultMaxHosts
			}
			for i := range 100_000 {
				h := fmt.Sprintf("h%d.example-%d.com", i, i)
				if i%2 == 0 {
					h = fmt.Sprintf("s%d.tunnel.example", i)
				}
				s.Score(&Request{Host: h, Path: "/", BodySize: 10})
				if i%2 == 1 {
					s.Replied(h, 100)
				}
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			if n := s.hosts.len(); n != bound {
				t.Errorf("%d hosts remembered, want %d", n, bound)
			}
			if n := s.domains.len(); n > bound {
				t.Errorf("%d domains remembered, want at most %d", n, bound)
			}
			checkList(t, s.hosts)
			checkList(t, s.domains)
			for _, e := range s.domains.m {
				if len(e.val.subs) > maxSubdomains || cap(e.val.subs) > 2*maxSubdomains {
					t.Errorf("domain %q: %d subdomains (capacity %d)", e.key, len(e.val.subs), cap(e.val.subs))
				}
			}
			if d := s.domains.m["tunnel.example"]; d == nil || len(d.val.subs) != maxSubdomains {
				t.Errorf("tunnel.example: %+v, want %d subdomains", d, maxSubdomains)
			}
		})
	}
}

// checkList holds an lru's list to its map: the same entries, each once.
func checkList[V any](t *testing.T, l *lru[V]) {
	t.Helper()
	n := 0
	for e := l.root.next; e != &l.root; e = e.next {
		if l.m[e.key] != e || e.next.prev != e {
			t.Fatalf("entry %q is not linked as mapped", e.key)
		}
		if n++; n > len(l.m) {
			t.Fatalf("list longer than the map (%d)", len(l.m))
		}
	}
	if n != len(l.m) {
		t.Fatalf("list of %d, map of %d", n, len(l.m))
	}
}

func TestLRU(t *testing.T) {
	clk := newClock()
	s := New(Config{Now: clk.Now, MaxHosts: 2})
	blob := "q=" + b64(50, 64) // 3 points, 4.5 to a new host
	visit(s, "a.example", 1, false)
	visit(s, "b.example", 1, false)
	visit(s, "a.example", 1, false) // a is now the most recent
	visit(s, "c.example", 1, false) // forgets b
	cases := []struct {
		host string
		new  bool
	}{
		{"a.example", false},
		{"c.example", false},
		{"b.example", true},
		{"a.example", true}, // forgotten when b came back
	}
	for _, c := range cases {
		t.Run(c.host, func(t *testing.T) {
			sc := s.Score(&Request{Host: c.host, Path: "/", Query: blob})
			if isNew := strings.Contains(sc.String(), "not seen before"); isNew != c.new {
				t.Errorf("new = %v, want %v: %v", isNew, c.new, sc)
			}
		})
	}
}

// TestConcurrent scores from many goroutines; run it with -race.
func TestConcurrent(t *testing.T) {
	s := New(Config{MaxHosts: 64})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				h := fmt.Sprintf("h%d.c%d.example", i%50, g%2)
				s.Score(&Request{Host: h, Path: "/", Query: "q=" + b64(uint64(i%7), 40), BodySize: int64(i)})
				s.Replied(h, int64(i))
			}
		})
	}
	wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.hosts.len(); n != 64 {
		t.Errorf("%d hosts, want 64", n)
	}
	if n := s.domains.len(); n != 2 {
		t.Errorf("%d domains, want 2", n)
	}
	checkList(t, s.hosts)
}
