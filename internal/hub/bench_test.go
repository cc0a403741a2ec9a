package hub_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/hub"
)

func fileHub(b *testing.B) *hub.Hub {
	b.Helper()
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	h, err := hub.New(hub.Config{Key: key, StatePath: filepath.Join(b.TempDir(), "hub.json")})
	if err != nil {
		b.Fatal(err)
	}
	return h
}

func benchAsk(fp string) hub.AskRequest {
	return hub.AskRequest{Kind: hub.KindRequest, Container: "agent", Method: "POST", URL: "https://example.com/x", Rule: "r", Fingerprint: fp}
}

// BenchmarkTicketsFile: new tickets through the embedded store (in memory; the state file is
// written by Run, once a second), from concurrent gates. Compare BenchmarkTicketsPostgres
// (hubdb).
func BenchmarkTicketsFile(b *testing.B) {
	h := fileHub(b)
	var n atomic.Int64
	b.SetParallelism(8)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			if _, err := h.AskAs(fmt.Sprintf("g%d", i%3), benchAsk(fmt.Sprintf("fp1:t%d", i))); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "tickets/s")
}

// BenchmarkDecisionsFile: approvals through the embedded store, each written to the state file
// at once, as the facades' API does (Flush after a decision).
func BenchmarkDecisionsFile(b *testing.B) {
	h := fileHub(b)
	ids := make([]string, b.N)
	for i := range ids {
		a, err := h.Ask(benchAsk(fmt.Sprintf("fp1:d%d", i)))
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = a.Ticket.ID
	}
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		if _, err := h.Decide(ids[i], fmt.Sprintf("fp1:d%d", i), true, "cli:bench", ""); err != nil {
			b.Fatal(err)
		}
		h.Flush()
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "decisions/s")
}
