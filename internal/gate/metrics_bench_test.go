package gate

import (
	"testing"

	"github.com/lockhttp/lockhttp/internal/metrics"
)

// benchMetrics is the metrics the benchmarks' gates count on: nil (nothing counted) unless a
// *Metrics benchmark sets it, so that the same benchmark runs with and without them.
var benchMetrics *metrics.Gate

// withMetrics runs bench with a gate that counts on a registry of its own.
func withMetrics(b *testing.B, bench func(*testing.B)) {
	benchMetrics = metrics.NewGate(metrics.NewRegistry("gate", "bench"), metrics.GateState{})
	defer func() { benchMetrics = nil }()
	bench(b)
}

func BenchmarkPlainThroughGateMetrics(b *testing.B) {
	withMetrics(b, func(b *testing.B) { benchPlain(b, true) })
}

func BenchmarkTLSKeepAliveThroughGateMetrics(b *testing.B) {
	withMetrics(b, func(b *testing.B) { benchKeepAlive(b, true) })
}

// BenchmarkCountKeepAlive is the metrics' cost alone on a keep-alive connection: the request
// counted on the counters its connection's last request resolved.
func BenchmarkCountKeepAlive(b *testing.B) {
	m := metrics.NewGate(metrics.NewRegistry("gate", "bench"), metrics.GateState{})
	g := New(Config{Metrics: m})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ex := &exchange{g: g, ci: &connInfo{}}
		ex.rec.Container, ex.rec.Event, ex.rec.Verdict, ex.rec.BytesIn, ex.rec.BytesOut = "agent", "tunnel-request", "FREE", 120, 512
		for pb.Next() {
			g.count(ex)
		}
	})
}
