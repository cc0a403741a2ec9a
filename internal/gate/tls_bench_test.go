package gate

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"
)

func benchGet(b *testing.B, c *http.Client, u string) {
	resp, err := c.Get(u)
	if err != nil {
		b.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		b.Fatalf("status %d", resp.StatusCode)
	}
}

func okHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello from the origin, a small body of a typical API answer\n")
	})
}

// newConnClient makes a client that opens a new connection (and TLS handshake) for every
// request, through the gate or directly.
func (tg *tlsGate) newConnClient(viaGate bool) *http.Client {
	tr := &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{RootCAs: tg.caPool}}
	if viaGate {
		u, _ := url.Parse("http://" + tg.addr)
		tr.Proxy = http.ProxyURL(u)
	} else {
		tr.TLSClientConfig = &tls.Config{RootCAs: tg.roots, ServerName: "origin.test"}
	}
	return &http.Client{Transport: tr}
}

func BenchmarkTLSNewConnDirect(b *testing.B) {
	tg := startTLSGate(b, okHandler())
	c := tg.newConnClient(false)
	u := tg.origin.URL + "/v1/items"
	cpu0 := cpuTime()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		benchGet(b, c, u)
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
}

// BenchmarkTLSNewConnWarm: a new client connection, CONNECT, TLS handshake with the gate (leaf
// certificate cached), a new TLS connection upstream, one GET.
func BenchmarkTLSNewConnWarm(b *testing.B) {
	tg := startTLSGate(b, okHandler())
	c := tg.newConnClient(true)
	u := fmt.Sprintf("https://origin.test:%d/v1/items", tg.port)
	benchGet(b, c, u) // warm the certificate cache
	cpu0 := cpuTime()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		benchGet(b, c, u)
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
}

// BenchmarkTLSNewConnCold is Warm with a host the gate has no certificate for yet: the signer
// (in this process, on a unix socket) issues one for every request.
func BenchmarkTLSNewConnCold(b *testing.B) {
	tg := startTLSGate(b, okHandler())
	c := tg.newConnClient(true)
	var n atomic.Int64
	cpu0 := cpuTime()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		benchGet(b, c, fmt.Sprintf("https://h%d.bench.test:%d/v1/items", n.Add(1), tg.port))
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
}

func benchKeepAlive(b *testing.B, viaGate bool) {
	tg := startTLSGate(b, okHandler())
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	u := tg.origin.URL + "/v1/items"
	if viaGate {
		pu, _ := url.Parse("http://" + tg.addr)
		tr.Proxy = http.ProxyURL(pu)
		tr.TLSClientConfig = &tls.Config{RootCAs: tg.caPool}
		u = fmt.Sprintf("https://origin.test:%d/v1/items", tg.port)
	} else {
		tr.TLSClientConfig = &tls.Config{RootCAs: tg.roots, ServerName: "origin.test"}
	}
	c := &http.Client{Transport: tr}
	for i := 0; i < 50; i++ {
		benchGet(b, c, u)
	}
	b.SetParallelism(4)
	cpu0 := cpuTime()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			benchGet(b, c, u)
		}
	})
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
}

func BenchmarkTLSKeepAliveDirect(b *testing.B)      { benchKeepAlive(b, false) }
func BenchmarkTLSKeepAliveThroughGate(b *testing.B) { benchKeepAlive(b, true) }
