package secrets

import (
	"bytes"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the CPU time the process has used: on a shared machine, ns/op measures the wait
// for a CPU as well, so the benchmarks also report cpu-ns/op.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func benchRequest(body []byte, mt string) *Request {
	return &Request{
		Host:  "api.anthropic.com",
		Path:  "/v1/messages",
		Query: "beta=true",
		Header: http.Header{
			"User-Agent":        {"claude-cli/2.0.0 (external, cli)"},
			"Accept":            {"application/json"},
			"Content-Type":      {mt},
			"Anthropic-Version": {"2023-06-01"},
			"X-Stainless-Lang":  {"js"},
		},
		Body:      body,
		MediaType: mt,
	}
}

func benchScan(b *testing.B, r *Request) {
	d := testDetector(b)
	b.SetBytes(int64(len(r.Body)))
	b.ReportAllocs()
	start, n := cpuTime(), 0
	for b.Loop() {
		if f := d.Egress(r); f != nil {
			b.Fatalf("finding %+v", f)
		}
		n++
	}
	b.ReportMetric(float64(cpuTime()-start)/float64(n), "cpu-ns/op")
}

// BenchmarkScanJSON2K is the common case: a 2 KiB chat request with no credential.
func BenchmarkScanJSON2K(b *testing.B) {
	benchScan(b, benchRequest(typicalJSON(2<<10), "application/json"))
}

func BenchmarkScanJSON1M(b *testing.B) {
	benchScan(b, benchRequest(typicalJSON(1<<20), "application/json"))
}

// BenchmarkScanJSON1MEscaped is a chat body whose text holds \u escapes, as Python's
// json.dumps writes non-ASCII text: the JSON walk runs, and each escaped string is scanned
// unescaped too.
func BenchmarkScanJSON1MEscaped(b *testing.B) {
	body := bytes.ReplaceAll(typicalJSON(1<<20), []byte("Please"), []byte(`Caf\u00e9, please`))
	benchScan(b, benchRequest(body, "application/json"))
}

func BenchmarkScanBinary1M(b *testing.B) {
	body := make([]byte, 1<<20)
	x := uint32(2463534242)
	for i := range body {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		body[i] = byte(x)
	}
	benchScan(b, benchRequest(body, "application/octet-stream"))
}

func BenchmarkScanText1M(b *testing.B) {
	line := "The agent reads the file, runs the tests, and says what failed -- then it fixes parse_config_value in src/x_y.go. "
	benchScan(b, benchRequest([]byte(strings.Repeat(line, (1<<20)/len(line))), "text/plain"))
}

// BenchmarkScanAdversarial1M is a body crafted to make each pass work: near misses of every
// shape, packed.
func BenchmarkScanAdversarial1M(b *testing.B) {
	unit := "sk-ant-api03-x ghp_y hf_z AKIAx AIzay xoxb-1 eyJhbGciOiJub25lIn0. -----BEGIN " + "PRIVATE KEY----- hooks.slack.com/services/T "
	r := benchRequest([]byte(strings.Repeat(unit, (1<<20)/len(unit))), "text/plain")
	benchScan(b, r)
}

func BenchmarkMaskHeader(b *testing.B) {
	d := testDetector(b)
	b.ReportAllocs()
	for b.Loop() {
		d.MaskHeader("User-Agent", "claude-cli/2.0.0 (external, cli)")
		d.MaskHeader("Authorization", "Bearer "+"opaque-token-value")
	}
}

func BenchmarkMaskURL(b *testing.B) {
	u, _ := url.Parse("https://api.github.com/repos/lockhttp/lockhttp/pulls?state=open&per_page=100")
	b.ReportAllocs()
	for b.Loop() {
		MaskURL(u)
	}
}

// BenchmarkScanNoBody is the fixed cost: host, path, query and five headers.
func BenchmarkScanNoBody(b *testing.B) {
	benchScan(b, benchRequest(nil, "application/json"))
}

// BenchmarkScanJSON2KWithKey is the Claude API case: the request carries its own key.
func BenchmarkScanJSON2KWithKey(b *testing.B) {
	r := benchRequest(typicalJSON(2<<10), "application/json")
	r.Header.Set("X-Api-Key", fakeAnthropic())
	benchScan(b, r)
}
