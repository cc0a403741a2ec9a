package hubdb

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockhttp/lockhttp/internal/hub"
)

// The listener is a connection of its own (not one of the pool's, which a LISTEN would tie up
// and pgxpool may close). After a reconnect it rereads every ticket changed while it was away
// and some seconds before, so that a notification lost with the connection loses no decision.
const (
	// catchUpSlack is how far before the connection was lost the rereading starts.
	catchUpSlack = 10 * time.Second
	// maxBackoff bounds the wait between two attempts to connect.
	maxBackoff = 5 * time.Second
)

// Watch starts the listener: f gets what the other replicas change, from one goroutine, until
// the store closes.
func (s *Store) Watch(f func(hub.Change)) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.listen(s.ctx, f)
	}()
}

// Listening reports how many listeners the database has on the hub's channel (for tests).
func (s *Store) Listening(ctx context.Context) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE query = $1`, "LISTEN "+channel).Scan(&n)
	return n, err
}

func (s *Store) listen(ctx context.Context, f func(hub.Change)) {
	backoff := 100 * time.Millisecond
	var lost time.Time // when the last connection was lost; zero before the first
	for ctx.Err() == nil {
		conn, err := pgx.ConnectConfig(ctx, s.cfg)
		if err == nil {
			_, err = conn.Exec(ctx, "LISTEN "+channel)
		}
		if err != nil {
			if conn != nil {
				conn.Close(context.Background())
			}
			if ctx.Err() == nil {
				s.log.Warn("hubdb: listening for the other replicas' changes failed; trying again (gates reread what they wait on meanwhile)", "err", unwrapConn(err))
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, maxBackoff)
			continue
		}
		backoff = 100 * time.Millisecond
		if !lost.IsZero() {
			s.catchUp(ctx, time.Since(lost)+catchUpSlack, f)
			s.bindingsChanged()
			s.log.Info("hubdb: listening again; the tickets changed meanwhile were reread")
		}
		for {
			n, err := conn.WaitForNotification(ctx)
			if err != nil {
				break
			}
			s.handle(ctx, n.Payload, f)
		}
		conn.Close(context.Background())
		lost = time.Now()
		if ctx.Err() == nil {
			s.log.Warn("hubdb: the listening connection was lost; connecting again")
		}
	}
}

// handle turns a notification of another replica into a change.
func (s *Store) handle(ctx context.Context, payload string, f func(hub.Change)) {
	var n note
	if json.Unmarshal([]byte(payload), &n) != nil || n.R == s.replica {
		return
	}
	switch n.T {
	case "ticket", "decided", "expired":
		t, ok, err := getTicket(ctx, s.pool, n.ID)
		if err != nil || !ok {
			return
		}
		f(hub.Change{Type: n.T, Ticket: &t})
	case "limit":
		f(hub.Change{Type: "limit", Limit: &hub.Limit{Container: n.Container, Pending: n.Pending}})
	case "bindings":
		s.bindingsChanged()
	case "unpaired":
		s.phoneUnpaired(n.ID)
	case "gate":
		g, err := s.Gate(ctx)
		if err == nil {
			f(hub.Change{Type: "gate", Gate: &g})
		}
	}
}

// catchUp tells f of every ticket changed within the last d, as its status says.
func (s *Store) catchUp(ctx context.Context, d time.Duration, f func(hub.Change)) {
	ts, err := listTickets(ctx, s.pool, `WHERE t.updated > clock_timestamp() - $1::interval`, d)
	if err != nil {
		s.log.Warn("hubdb: rereading the tickets changed while not listening failed (gates reread what they wait on)", "err", err)
		return
	}
	for i := range ts {
		typ := "ticket"
		switch ts[i].Status {
		case hub.Approved, hub.Denied:
			typ = "decided"
		case hub.Expired:
			typ = "expired"
		}
		f(hub.Change{Type: typ, Ticket: &ts[i]})
	}
}
