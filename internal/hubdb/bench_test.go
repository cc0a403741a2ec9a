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

// benchStores are the stores benchHubs opened, the last last.
var benchStores []*Store

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
		benchStores = append(benchStores, s)
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

// BenchmarkGateNames: a holder of the gate's token reporting under a new gate name at each call
// (hubapi.HeaderGate) adds a row a name, until the sweep forgets the names silent for 30 s. It
// reports the rows and the table's bytes a row, then checks that a sweep 31 s on leaves none.
func BenchmarkGateNames(b *testing.B) {
	hs := benchHubs(b, 1)
	s := benchStores[len(benchStores)-1]
	for i := range b.N {
		hs[0].SetHoldingsAs(fmt.Sprintf("g%063d", i), hub.Holdings{})
	}
	b.StopTimer()
	var rows, bytes int64
	s.pool.QueryRow(context.Background(), `SELECT count(*), pg_total_relation_size('hub_gates') FROM hub_gates`).Scan(&rows, &bytes)
	b.ReportMetric(float64(rows), "rows")
	b.ReportMetric(float64(bytes)/float64(max(1, rows)), "bytes/row")
	if _, err := s.Sweep(context.Background(), time.Now().Add(31*time.Second), hub.Retention{Keep: 24 * time.Hour, GateStale: 30 * time.Second}); err != nil {
		b.Fatal(err)
	}
	s.pool.QueryRow(context.Background(), `SELECT count(*) FROM hub_gates`).Scan(&rows)
	if rows != 0 {
		b.Fatalf("%d gate rows after the sweep", rows)
	}
}
