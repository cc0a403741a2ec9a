package secrets

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

var fuzzMediaTypes = []string{"", "application/json", "application/x-www-form-urlencoded", "multipart/form-data", "text/plain", "application/x-ndjson"}

// FuzzScan holds Scan to what the gate relies on: it never panics, no finding shows a value it
// found (Where, Hosts, Kind: all of %+v), each Hash is the value's, the work stays linear in
// the input, and MaskText leaves no value it finds.
func FuzzScan(f *testing.F) {
	b64 := base64.StdEncoding.EncodeToString
	seeds := []struct {
		query, header string
		body          string
		mt            uint8
	}{
		{"a=1", "Bearer " + fakeGitHub(), `{"a":"` + fakeAnthropic() + `"}`, 1},
		{"q=" + fakeOpenAI(), "Basic " + b64([]byte("u:"+fakeStripe())), "k=" + fakeSlack(), 2},
		{"", b64([]byte(fakeHuggingFace())), "--b\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\n" + fakeGoogle() + "\r\n--b--", 3},
		{"t=" + fakeJWTIss(), fakeJWTNoIss(), fakePEM("RSA PRIVATE KEY"), 4},
		{"", "hunter2-" + "correct-horse", `{"` + fakeAWS() + `":"` + fakeAWSSecret() + `","x":"ghp\u005f` + strings.Repeat("a1B2", 9) + `"}`, 1},
		{"%25" + "41KIA", "", `[{"a":[{"b":"\ud83d\ude00` + "acme_" + strings.Repeat("0f", 16) + `"}]}]`, 5},
		{"", "", strings.Repeat("sk-ant-api03-", 50) + strings.Repeat("eyJhbGciOiJub25lIn0.", 20) + strings.Repeat("-----BEGIN "+"PRIVATE KEY-----", 20), 0},
		{"", fakeJWT(`{"alg":"none"}`, `{"iss":"`+fakeGitHub()+`.example.com","x":"`+fakeSlack()+`"}`), "", 0},
	}
	for _, s := range seeds {
		f.Add(s.query, s.header, []byte(s.body), s.mt)
	}
	d := testDetector(f)
	f.Fuzz(func(t *testing.T, query, header string, body []byte, mt uint8) {
		r := &Request{
			Host:      "example.com",
			Path:      "/" + query,
			Query:     query,
			Header:    http.Header{"X-F": {header}, "Authorization": {header}, header: {"v"}},
			Body:      body,
			MediaType: fuzzMediaTypes[int(mt)%len(fuzzMediaTypes)],
		}
		s := scan{d: d, host: r.Host}
		s.request(r)
		values := make([]string, len(s.found))
		for i, f := range s.found {
			values[i] = f.value
		}
		in := 2*len(query) + 3*len(header) + len(body)
		// Each byte is read by a fixed number of passes per view, and a few views per place.
		if limit := 400*in + 1<<16; s.work > limit {
			t.Fatalf("work %d for %d bytes of input; want at most %d", s.work, in, limit)
		}
		fs := s.result()
		for i, f := range fs {
			if f.Hash != hash8(s.found[i].value) {
				t.Fatalf("finding %d: hash %s is not the value's", i, f.Hash)
			}
			printed := fmt.Sprintf("%+v", f)
			for _, v := range values {
				if strings.Contains(printed, v) {
					t.Fatalf("finding %s shows a value %q", printed, v)
				}
			}
		}
		if d.Egress(r) != nil && len(fs) == 0 {
			t.Fatal("Egress refused without a finding")
		}
		for _, text := range []string{header, string(body)} {
			m := d.MaskText(text)
			fd := d.newFinder(text, "", nil, unlimited)
			for _, h := range fd.find() {
				if !h.nested && strings.Contains(m, h.value) {
					t.Fatalf("MaskText left a %s value in %q", h.kind, m)
				}
			}
		}
		if m := d.MaskHeader("Authorization", header); header != "" && strings.Contains(m, strings.TrimSpace(header)) && len(strings.TrimSpace(header)) > 20 {
			t.Fatalf("MaskHeader left the value: %q", m)
		}
	})
}

// TestWorkIsLinear holds the scan's work (bytes examined, counted by the finder) to a constant
// per byte of input on inputs crafted against each pass: doubling the input doubles the work.
func TestWorkIsLinear(t *testing.T) {
	d := testDetector(t)
	units := map[string]string{
		"anthropic prefixes": "sk-ant-api03-",
		"anthropic long":     "sk-ant-api03-" + strings.Repeat("aB3", 200),
		"jwt headers":        "eyJhbGciOiJub25lIn0.",
		"jwt no boundary":    "eyJhbGciOiJub25lIn0",
		"jwt segments":       " eyJhbGciOiJub25lIn0.eyJpc3MiOiJ4In0.",
		"pem headers":        "-----BEGIN " + "PRIVATE KEY-----",
		"pem no end":         "-----BEGIN " + "PRIVATE KEY-----\n" + strings.Repeat("QUJD", 12) + "\n",
		"aws ids":            " AKIA" + "QWERTYUI23456789 ",
		"aws secrets":        " AKIA" + "QWERTYUI23456789 " + fakeAWSSecret() + " ",
		"github runs":        "ghp_ghp_ghp_",
		"slack hooks":        "hooks.slack.com/services/T/",
		"percent":            "%25%25%41",
		"json escapes":       `{"a":"\u0041\n\"`,
		"base64 header":      "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo= ",
		"underscores":        "_a_b_c_",
		"injected prefix":    "hunter2-correct-hors",
		"custom prefix":      "acme_0f0f",
	}
	for name, unit := range units {
		t.Run(name, func(t *testing.T) {
			ratio := func(n int) float64 {
				text := strings.Repeat(unit, n/len(unit)+1)[:n]
				var total, in int
				for _, mt := range fuzzMediaTypes {
					r := &Request{Host: "example.com", Path: "/" + text, Query: text,
						Header: http.Header{"X-F": {text}}, Body: []byte(text), MediaType: mt}
					s := scan{d: d, host: r.Host}
					s.request(r)
					total += s.work
					in += 4 * n
				}
				return float64(total) / float64(in)
			}
			small, large := ratio(16<<10), ratio(128<<10)
			t.Logf("work per byte %.1f, %.1f", small, large)
			if large > 1.25*small+1 || large > 100 {
				t.Fatalf("work per byte %.1f at 16 KiB, %.1f at 128 KiB; want it flat and under 100", small, large)
			}
		})
	}
}
