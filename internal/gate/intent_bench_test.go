package gate

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/egress"
	"github.com/lockhttp/lockhttp/internal/policy"
)

// noIntents is the real audit writer with the intent records left out: the gate's forward path
// as it was before them, for BenchmarkForwardIntent to compare with.
type noIntents struct{ *audit.Writer }

func (a noIntents) Append(ctx context.Context, r *audit.Record) error {
	if r.Event == audit.EventIntent {
		return nil
	}
	return a.Writer.Append(ctx, r)
}

// BenchmarkForwardIntent: FREE plain-HTTP GETs of a small body from 50 concurrent keep-alive
// clients through a gate in this process (real listener, real origin, the real audit with its
// fsyncs), with and without the intent record written (and waited for) before each request goes
// out. It reports the process's CPU per request (client and origin included: BenchmarkPlainDirect
// is their part) and the requests' latency, median and 99th percentile.
//
//	go test -run '^$' -bench 'ForwardIntent|PlainDirect' -benchtime 20000x -count 5 ./internal/gate
func BenchmarkForwardIntent(b *testing.B) {
	for _, with := range []bool{false, true} {
		name := "without"
		if with {
			name = "with"
		}
		b.Run(name, func(b *testing.B) { benchIntent(b, with) })
	}
}

func benchIntent(b *testing.B, with bool) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello from the origin, a small body of a typical API answer\n")
	}))
	defer origin.Close()
	port := origin.Listener.Addr().(*net.TCPAddr).Port
	aw, err := audit.Open(audit.Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer aw.Close()
	var a Auditor = aw
	if !with {
		a = noIntents{aw}
	}
	g := New(Config{Audit: a, Dialer: &egress.Dialer{}, Metrics: benchMetrics})
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
	tr := &http.Transport{Proxy: http.ProxyURL(u), MaxIdleConnsPerHost: 64, DisableCompression: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	target := fmt.Sprintf("http://origin.test:%d/v1/items", port)
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
	for range 100 {
		get()
	}
	var mu sync.Mutex
	var lat []time.Duration
	b.SetParallelism(25) // 50 clients on 2 cores
	cpu0 := cpuTime()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var mine []time.Duration
		for pb.Next() {
			t0 := time.Now()
			get()
			mine = append(mine, time.Since(t0))
		}
		mu.Lock()
		lat = append(lat, mine...)
		mu.Unlock()
	})
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	}
}
