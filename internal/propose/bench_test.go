package propose

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// BenchmarkLearnFlood is an agent that asks about as many distinct paths as it can: 150,000 asks
// on 150,000 paths of one host (past maxShapes), each ticket approved, then Result. It measures
// what one :propose or lockhttp propose costs at the Learner's bounds, and the heap the Learner
// keeps (MB-kept).
func BenchmarkLearnFlood(b *testing.B) {
	const n = 100_000
	obs := make([]Observation, n)
	for i := range obs {
		obs[i] = Observation{Time: t0.Add(time.Duration(i) * time.Millisecond), Event: "tunnel-request", Container: "agent", Method: "GET",
			URL: fmt.Sprintf("https://api.example.com/flood/%d", i), Verdict: "ASK", Ticket: fmt.Sprintf("t%d", i), Approver: "cli:root"}
	}
	b.ReportAllocs()
	var kept uint64
	for b.Loop() {
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		l, err := New(Config{Name: "policy.toml", Text: []byte(testPolicy)})
		if err != nil {
			b.Fatal(err)
		}
		for _, o := range obs {
			l.Observe(o)
		}
		runtime.GC()
		runtime.ReadMemStats(&m1)
		kept = max(kept, m1.HeapAlloc-min(m0.HeapAlloc, m1.HeapAlloc))
		res := l.Result()
		if res.Truncated == 0 || len(res.Proposals) != 1 {
			b.Fatalf("truncated %d, %d proposals", res.Truncated, len(res.Proposals))
		}
	}
	b.ReportMetric(float64(kept)/(1<<20), "MB-kept")
}

// BenchmarkLearnSession is a month of an ordinary agent: 50,000 asks on 2,000 paths of 50 hosts.
func BenchmarkLearnSession(b *testing.B) {
	var obs []Observation
	for i := 0; i < 50_000; i++ {
		obs = append(obs, Observation{Time: t0.Add(time.Duration(i) * time.Minute), Event: "tunnel-request", Container: "agent", Method: "GET",
			URL: fmt.Sprintf("https://h%d.example.com/api/v1/items/%d", i%50, i%2000), Verdict: "ASK", Ticket: fmt.Sprintf("t%d", i), Approver: "cli:root"})
	}
	b.ReportAllocs()
	for b.Loop() {
		l, _ := New(Config{Name: "policy.toml", Text: []byte(testPolicy)})
		for _, o := range obs {
			l.Observe(o)
		}
		if res := l.Result(); len(res.Proposals) != 50 {
			b.Fatalf("%d proposals", len(res.Proposals))
		}
	}
}
