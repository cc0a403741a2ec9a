package hubdb

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// benchHubs starts PostgreSQL and returns n hubs (replicas) on one fresh database.
func benchHubs(b *testing.B, n int) []*hub.Hub {
	b.Helper()
	p := testkit.StartPostgres(b)
	conn, err := pgx.Connect(context.Background(), p.DSN)
	if err != nil {
		b.Fatal(err)
	}
	conn.Exec(context.Background(), "CREATE DATABASE bench")
	conn.Close(context.Background())
	dsn := strings.Replace(p.DSN, "dbname=postgres", "dbname=bench", 1)
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	var hs []*hub.Hub
	for range n {
		s, err := Open(context.Background(), Options{DSN: dsn})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		h, err := hub.New(hub.Config{Store: s, Key: key})
		if err != nil {
			b.Fatal(err)
		}
		hs = append(hs, h)
	}
	return hs
}

func benchAsk(fp string) hub.AskRequest {
	return hub.AskRequest{Kind: hub.KindRequest, Container: "agent", Method: "POST", URL: "https://example.com/x", Rule: "r", Fingerprint: fp}
}

// BenchmarkTicketsPostgres: new tickets through two hub replicas on one database, from
// concurrent gates (each ask a fingerprint of its own).
func BenchmarkTicketsPostgres(b *testing.B) {
	hs := benchHubs(b, 2)
	var n atomic.Int64
	b.SetParallelism(8)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			if a, err := hs[i%2].AskAs(fmt.Sprintf("g%d", i%3), benchAsk(fmt.Sprintf("fp1:t%d", i))); err != nil || a.Outcome != hub.OutcomePending {
				b.Fatalf("ask: %v %v", a.Outcome, err)
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "tickets/s")
}

// BenchmarkDecisionsPostgres: approvals of pending tickets through two hub replicas on one
// database, from concurrent facades.
func BenchmarkDecisionsPostgres(b *testing.B) {
	hs := benchHubs(b, 2)
	ids := make([]string, b.N)
	for i := range ids {
		a, err := hs[0].Ask(benchAsk(fmt.Sprintf("fp1:d%d", i)))
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = a.Ticket.ID
	}
	var n atomic.Int64
	b.SetParallelism(8)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1) - 1
			if _, err := hs[i%2].Decide(ids[i], fmt.Sprintf("fp1:d%d", i), true, "cli:bench", ""); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "decisions/s")
}
