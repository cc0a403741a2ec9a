package metrics

import (
	"net/http/httptest"
	"testing"
	"time"
)

// The hot paths: a request counted on its resolved counters, a decision's time observed on its
// resolved series, an upstream answer's time; and one scrape of a gate's page.

func BenchmarkRequestsAdd(b *testing.B) {
	g := NewGate(NewRegistry("gate", "bench"), GateState{})
	c := g.Requests(RequestKey{Container: "agent", Kind: "request", Verdict: "FREE"})
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Add(100, 2000)
		}
	})
}

func BenchmarkDecided(b *testing.B) {
	g := NewGate(NewRegistry("gate", "bench"), GateState{})
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			g.Decided("request", 3*time.Microsecond)
		}
	})
}

func BenchmarkUpstream(b *testing.B) {
	g := NewGate(NewRegistry("gate", "bench"), GateState{})
	for i := 0; b.Loop(); i++ {
		g.Upstream(time.Duration(i%50) * time.Millisecond)
	}
}

func BenchmarkScrape(b *testing.B) {
	r := NewRegistry("gate", "bench")
	g := NewGate(r, GateState{Tunnels: func() int { return 1 }, Connections: func() int { return 2 }, HeldBytes: func() int64 { return 3 }})
	for _, c := range []string{"a", "b", "c", "d"} {
		for _, v := range []string{"FREE", "DENY", "ASK"} {
			g.Requests(RequestKey{Container: c, Kind: "request", Verdict: v}).Add(1, 1)
		}
	}
	g.Decided("request", time.Microsecond)
	NewSignerClient(r, nil).Called(CallIssued, time.Millisecond)
	NewAudit(r, nil).Batch(1, nil)
	h := r.Handler()
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		if rec.Code != 200 {
			b.Fatal(rec.Code)
		}
	}
}
