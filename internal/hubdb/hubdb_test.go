package hubdb

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/hub/storetest"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

var (
	dbN  int
	dbMu sync.Mutex
)

// server is a PostgreSQL server of the test's own.
func server(t *testing.T) *testkit.Postgres {
	t.Helper()
	return testkit.StartPostgres(t)
}

// freshDB makes an empty database on p and returns its DSN.
func freshDB(t *testing.T, p *testkit.Postgres) string {
	t.Helper()
	dbMu.Lock()
	dbN++
	name := fmt.Sprintf("hub%d", dbN)
	dbMu.Unlock()
	conn, err := pgx.Connect(context.Background(), p.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	return strings.Replace(p.DSN, "dbname=postgres", "dbname="+name, 1)
}

func open(t *testing.T, dsn string) *Store {
	t.Helper()
	s, err := Open(context.Background(), Options{DSN: dsn})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// The PostgreSQL store passes the stores' conformance suite, replicas included.
func TestConformance(t *testing.T) {
	p := server(t)
	storetest.Run(t, func(t *testing.T) hub.Store {
		return open(t, freshDB(t, p))
	}, func(t *testing.T) (hub.Store, hub.Store) {
		dsn := freshDB(t, p)
		return open(t, dsn), open(t, dsn)
	})
}

// 1,000 rounds of 50 concurrent retries, on two replicas, spend a single-use authorisation
// exactly once per round.
func TestSingleUseThousandRounds(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 rounds")
	}
	p := server(t)
	dsn := freshDB(t, p)
	storetest.SpendRounds(t, &twoReplicas{Store: open(t, dsn), b: open(t, dsn)}, 1000, 50)
}

// twoReplicas sends every other ask to the second store.
type twoReplicas struct {
	*Store
	b *Store
	n atomic.Int64
}

func (r *twoReplicas) Ask(ctx context.Context, q hub.StoreAsk) (hub.StoreAnswer, error) {
	if r.n.Add(1)%2 == 0 {
		return r.b.Ask(ctx, q)
	}
	return r.Store.Ask(ctx, q)
}

// The schema is migrated once, by whichever replica starts first, and a database migrated by a
// newer release is refused with the fix.
func TestMigrations(t *testing.T) {
	p := server(t)
	dsn := freshDB(t, p)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := Open(context.Background(), Options{DSN: dsn})
			if err != nil {
				t.Error(err)
				return
			}
			s.Close()
		}()
	}
	wg.Wait()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var v int
	if err := conn.QueryRow(context.Background(), "SELECT version FROM lockhttp_hub_schema").Scan(&v); err != nil || v != SchemaVersion {
		t.Fatalf("schema version %d, %v; want %d", v, err, SchemaVersion)
	}
	if _, err := conn.Exec(context.Background(), "UPDATE lockhttp_hub_schema SET version = version + 1"); err != nil {
		t.Fatal(err)
	}
	_, err = Open(context.Background(), Options{DSN: dsn})
	if !errors.Is(err, ErrSchemaNewer) || !strings.Contains(err.Error(), "run the console of the release that migrated it") {
		t.Fatalf("a newer schema: %v", err)
	}
	if _, err := Open(context.Background(), Options{DSN: "postgres://u:hunter2@[::1"}); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("a bad DSN: %v", err)
	}
}

// Of two replicas, one sends a ticket's notifications, whichever asks first; the other is told
// not to.
func TestOneReplicaNotifies(t *testing.T) {
	p := server(t)
	dsn := freshDB(t, p)
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	var hs []*hub.Hub
	for range 2 {
		h, err := hub.New(hub.Config{Store: open(t, dsn), Key: key})
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	for i := range 20 {
		a, err := hs[i%2].Ask(hub.AskRequest{Kind: hub.KindRequest, Container: "agent", Method: "POST", URL: "https://example.com/", Rule: "r", Fingerprint: fmt.Sprintf("fp1:%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		yes := 0
		var wg sync.WaitGroup
		for _, h := range hs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if h.Notify(a.Ticket.ID) {
					mu.Lock()
					yes++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if yes != 1 {
			t.Fatalf("ticket %d: %d replicas send its notifications", i, yes)
		}
	}
}

// After its listening connection comes back, a replica rereads the tickets changed while it was
// away: each is told as its status says.
func TestCatchUp(t *testing.T) {
	p := server(t)
	dsn := freshDB(t, p)
	s1, s2 := open(t, dsn), open(t, dsn)
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	h, err := hub.New(hub.Config{Store: s1, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	req := func(fp string) hub.AskRequest {
		return hub.AskRequest{Kind: hub.KindRequest, Container: "agent", Method: "POST", URL: "https://example.com/", Rule: "r", Fingerprint: fp}
	}
	a, _ := h.Ask(req("fp1:a"))
	b, _ := h.Ask(req("fp1:b"))
	if _, err := h.Decide(a.Ticket.ID, "fp1:a", true, "cli:root", ""); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	s2.catchUp(context.Background(), time.Minute, func(c hub.Change) { got[c.Ticket.ID] = c.Type })
	if got[a.Ticket.ID] != "decided" || got[b.Ticket.ID] != "ticket" {
		t.Fatalf("caught up %v", got)
	}
	// And the listener does it when its connection is cut: a decision made while it was away
	// is told.
	told := make(chan hub.Change, 16)
	s2.Watch(func(c hub.Change) { told <- c })
	testkit.WaitFor(t, 10*time.Second, "replica 2 listening", func() bool {
		n, err := s2.Listening(context.Background())
		return err == nil && n >= 1
	})
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = 'LISTEN lockhttp_hub'"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Decide(b.Ticket.ID, "fp1:b", false, "cli:root", "no"); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case c := <-told:
			if c.Type == "decided" && c.Ticket != nil && c.Ticket.ID == b.Ticket.ID {
				return
			}
		case <-deadline:
			t.Fatal("the decision made while the listener was cut was never told")
		}
	}
}
