package exfil

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// FuzzScore holds Score to what the gate relies on whatever the agent sends: it never panics,
// its value is finite and at least zero, Suspect agrees with it, and its reasons repeat no more
// than maxCopied bytes of the path, the query, the body or a header value.
func FuzzScore(f *testing.F) {
	f.Add("/collect", "q="+blobWithMarker(1, 200), []byte(nil), "", byte(0))
	f.Add("/u/"+b64url(2, 100), "", []byte(`{"data":"`+b64(3, 300)+`"}`), "", byte(1))
	f.Add("/repo.git/git-upload-pack", "", gitUploadPack(), "", byte(2))
	f.Add("/v1/"+"123e4567-e89b-12d3-a456-426614174000", "a=eyJhbGciOiJub25lIn0."+b64url(4, 50)+".", []byte("x=%2B%2F%3D"), "", byte(3))
	f.Add("/", "X-Amz-Signature="+hexOf(5, 64)+"&X-Amz-Expires=1&X-Amz-Credential="+b64(6, 80), []byte(nil), b64(7, 5000), byte(4))
	f.Add("/%2F%2B", "%3D%3D="+b64(8, 40)+"%3D", jsonBody(2000), "sha512-"+b64(9, 88), byte(5))
	hosts := []string{"paste.example", "a.collector.example", "b.collector.example", "api.github.com", "site.github.io", "example.co.uk", "x.example.co.uk", "com"}
	clk := newClock()
	s := New(Config{Now: clk.Now, MaxHosts: 4})
	f.Fuzz(func(t *testing.T, path, query string, body []byte, header string, sel byte) {
		clk.Advance(time.Duration(sel) * time.Second)
		r := &Request{
			Host:     hosts[int(sel)%len(hosts)],
			Path:     path,
			Query:    query,
			Body:     body,
			BodySize: int64(len(body)) << (sel % 16),
			Header:   http.Header{"X-Data": {header}, "Cookie": {header}},
			Trusted:  sel&0x80 != 0,
		}
		sc := s.Score(r)
		checkScore(t, sc, DefaultThreshold, r)
		if len(sc.Reasons) > 4 {
			t.Fatalf("%d reasons: %q", len(sc.Reasons), sc.Reasons)
		}
		s.Replied(r.Host, int64(len(body)))
	})
}

// FuzzScanField holds the striding search to the byte-by-byte one: both find the same blobs,
// in a string and in a []byte alike.
func FuzzScanField(f *testing.F) {
	for _, s := range []string{
		b64(1, 100), "x=" + hexOf(2, 64) + "&y=" + b64url(3, 40) + "%3D%3D",
		"eyJhbGciOiJIUzI1NiJ9." + b64url(4, 60) + "." + b64url(5, 43) + " " + b64(6, 33),
		"123e4567-e89b-12d3-a456-426614174000" + b64(7, 40), strings.Repeat("%2B", 40),
		"a." + b64(8, 31) + "=" + b64(9, 31) + "==.", string(jsonBody(600)),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var stride, bytewise, str blobs
		scanField(in, place{part: partBody}, scanOpts{}, &stride)
		if end := scanRuns(in, 0, len(in), place{part: partBody}, scanOpts{}, &bytewise); end != len(in) {
			t.Fatalf("scanRuns stopped at %d of %d", end, len(in))
		}
		scanField(string(in), place{part: partBody}, scanOpts{}, &str)
		if stride != bytewise || str != stride {
			t.Fatalf("striding %+v, byte by byte %+v, string %+v", stride, bytewise, str)
		}
		if stride.points() < 0 || stride.points() > blobMax {
			t.Fatalf("points %v", stride.points())
		}
	})
}
