package exfil

import (
	"fmt"
	"net/http"
	"testing"
)

// BenchmarkScore measures the hot path: requests to hosts the scorer knows.
func BenchmarkScore(b *testing.B) {
	header := http.Header{
		"Accept":          {"application/vnd.github+json"},
		"User-Agent":      {"curl/8.5.0"},
		"Accept-Encoding": {"gzip"},
		"Authorization":   {"Bearer " + b64(1, 40)},
	}
	body := jsonBody(64 << 10)
	cases := []struct {
		name string
		r    Request
	}{
		{"typical GET", Request{Host: "api.github.com", Path: "/repos/lockhttp/lockhttp/pulls", Query: "state=open&per_page=100&page=2", Header: header, Trusted: true}},
		{"typical GET untrusted", Request{Host: "registry.example.com", Path: "/v2/library/alpine/manifests/3.20", Query: "", Header: header}},
		{"GET with a blob", Request{Host: "paste.example", Path: "/collect", Query: "q=" + b64(2, 200), Header: header}},
		{"64 KiB JSON POST", Request{Host: "api.anthropic.com", Path: "/v1/messages", Body: body, BodySize: int64(len(body)), Header: header, Trusted: true}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			s := New(Config{})
			s.Score(&c.r)
			b.SetBytes(int64(len(c.r.Path) + len(c.r.Query) + len(c.r.Body)))
			b.ReportAllocs()
			for b.Loop() {
				s.Score(&c.r)
			}
		})
	}
}

// BenchmarkScoreNewHosts measures a request to a host not seen before, the memory full.
func BenchmarkScoreNewHosts(b *testing.B) {
	s := New(Config{MaxHosts: 1000})
	hosts := make([]string, 4096)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("www.example%d.com", i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		s.Score(&Request{Host: hosts[i%len(hosts)], Path: "/"})
		i++
	}
}

// BenchmarkScoreParallel measures typical GETs from many goroutines, to a few hosts.
func BenchmarkScoreParallel(b *testing.B) {
	s := New(Config{})
	hosts := []string{"api.github.com", "registry.npmjs.org", "pypi.org", "proxy.golang.org"}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			s.Score(&Request{Host: hosts[i%len(hosts)], Path: "/repos/lockhttp/lockhttp/pulls", Query: "state=open"})
			s.Replied(hosts[i%len(hosts)], 4096)
			i++
		}
	})
}

// BenchmarkScanBody measures the blob search alone, on a 64 KiB JSON body.
func BenchmarkScanBody(b *testing.B) {
	body := jsonBody(64 << 10)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		var bs blobs
		scanField(body, place{part: partBody}, scanOpts{}, &bs)
	}
}
