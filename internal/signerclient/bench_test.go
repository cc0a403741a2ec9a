package signerclient

import (
	"context"
	"fmt"
	"runtime"
	"testing"
)

// BenchmarkSignRoundTrip is a cold certificate: a signer call over the unix socket (request,
// signing, response) and the client's checks, for a new host each time.
func BenchmarkSignRoundTrip(b *testing.B) {
	h := startSigner(b, nil)
	c := h.client(b, func(o *Options) { o.MaxEntries = 16 })
	ctx := context.Background()
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Certificate(ctx, fmt.Sprintf("h%d.example.com", i)); err != nil {
			b.Fatal(err)
		}
		i++
	}
	if got := h.calls.Load(); got != int64(i) {
		b.Fatalf("%d signer calls for %d new hosts", got, i)
	}
}

// BenchmarkCertificateCached is a cache hit, from as many goroutines as GOMAXPROCS.
func BenchmarkCertificateCached(b *testing.B) {
	h := startSigner(b, nil)
	c := h.client(b, nil)
	ctx := context.Background()
	if _, err := c.Certificate(ctx, "example.com"); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.Certificate(ctx, "example.com"); err != nil {
				b.Error(err)
				return
			}
		}
	})
	if h.calls.Load() != 1 {
		b.Fatalf("%d signer calls, want 1", h.calls.Load())
	}
}

// TestMemoryThousandHosts fills the cache with 1,000 hosts and reports the live heap each
// cached certificate holds (after GC). The bound is loose: it catches a cache that keeps whole
// responses or a CA copy per entry, not small changes.
func TestMemoryThousandHosts(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 signer calls")
	}
	const n = 1000
	h := startSigner(t, nil)
	c := h.client(t, nil)
	ctx := context.Background()
	if _, err := c.Certificate(ctx, "warm.example.com"); err != nil { // the CA, the pool, the connection
		t.Fatal(err)
	}
	before := liveHeap()
	for i := range n {
		if _, err := c.Certificate(ctx, fmt.Sprintf("host-%04d.example.com", i)); err != nil {
			t.Fatal(err)
		}
	}
	after := liveHeap()
	runtime.KeepAlive(c)
	per := (int64(after) - int64(before)) / n
	t.Logf("live heap %d B before, %d B after %d hosts: %d B per cached certificate", before, after, n, per)
	if len(c.entries) != n+1 {
		t.Errorf("%d cached, want %d", len(c.entries), n+1)
	}
	if per > 16<<10 {
		t.Errorf("%d B per cached certificate; want well under 16 KiB", per)
	}
}

func liveHeap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
