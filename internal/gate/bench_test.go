package gate

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/egress"
	"github.com/lockhttp/lockhttp/internal/policy"
)

// cpuTime is the CPU time (user + system) this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchPlain runs GETs of a small body from 8 concurrent keep-alive clients, directly or through
// a gate in this process (real listener, real audit with fsync), and reports the process's CPU
// per request next to the wall time.
func benchPlain(b *testing.B, viaGate bool) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello from the origin, a small body of a typical API answer\n")
	}))
	defer origin.Close()
	port := origin.Listener.Addr().(*net.TCPAddr).Port
	tr := &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}
	target := origin.URL + "/v1/items"
	if viaGate {
		aw, err := audit.Open(audit.Options{Dir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		defer aw.Close()
		g := New(Config{Audit: aw, Dialer: &egress.Dialer{}, Metrics: benchMetrics})
		p, err := policy.Load("bench.toml", []byte(fmt.Sprintf(gatePolicy, port)))
		if err != nil {
			b.Fatal(err)
		}
		g.SetPolicy(p)
		l, _ := net.Listen("tcp", "127.0.0.1:0")
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { g.Serve(ctx, l); close(done) }()
		defer func() { cancel(); <-done }()
		u, _ := url.Parse("http://" + l.Addr().String())
		tr.Proxy = http.ProxyURL(u)
		target = fmt.Sprintf("http://origin.test:%d/v1/items", port)
	}
	c := &http.Client{Transport: tr}
	get := func() {
		resp, err := c.Get(target)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	for i := 0; i < 100; i++ {
		get()
	}
	b.SetParallelism(4) // 8 clients on 2 cores
	cpu0 := cpuTime()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			get()
		}
	})
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
}

func BenchmarkPlainDirect(b *testing.B)      { benchPlain(b, false) }
func BenchmarkPlainThroughGate(b *testing.B) { benchPlain(b, true) }
