package hubdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/metrics"
)

// db is a pool or a transaction.
type db interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// selectTicket reads tickets as the hub hands them out: what was asked (asked), what changed
// since (the columns), the decision and the requests every gate holds.
const selectTicket = `SELECT t.asked, t.status, t.uses, t.reported, t.gone, t.cut,
	coalesce((SELECT sum(h.n) FROM hub_holders h WHERE h.ticket = t.id), 0)::int,
	d.verdict, d.by_whom, d.reason, d.at, d.released
FROM hub_tickets t LEFT JOIN hub_decisions d ON d.ticket = t.id `

func scanTicket(row pgx.Row) (hub.Ticket, error) {
	var (
		asked               []byte
		status, gone        string
		uses, cut, holders  int
		reported            bool
		verdict, by, reason *string
		at                  *time.Time
		released            *int
	)
	if err := row.Scan(&asked, &status, &uses, &reported, &gone, &cut, &holders, &verdict, &by, &reason, &at, &released); err != nil {
		return hub.Ticket{}, err
	}
	var t hub.Ticket
	if err := json.Unmarshal(asked, &t); err != nil {
		return hub.Ticket{}, fmt.Errorf("hubdb: a ticket's asked column: %w", err)
	}
	t.Status, t.Uses, t.Reported, t.Gone, t.Cut, t.Holders = hub.Status(status), uses, reported, gone, cut, holders
	t.Created, t.Expires = t.Created.UTC(), t.Expires.UTC()
	if verdict != nil {
		t.Decision = &hub.Decision{Verdict: hub.Status(*verdict), By: *by, Reason: *reason, At: at.UTC(), Released: *released}
	}
	return t, nil
}

func getTicket(ctx context.Context, q db, id string) (hub.Ticket, bool, error) {
	t, err := scanTicket(q.QueryRow(ctx, selectTicket+`WHERE t.id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return hub.Ticket{}, false, nil
	}
	return t, err == nil, err
}

func listTickets(ctx context.Context, q db, where string, args ...any) ([]hub.Ticket, error) {
	rows, err := q.Query(ctx, selectTicket+where, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []hub.Ticket
	for rows.Next() {
		t, err := scanTicket(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// note is a notification's payload: who sent it (R, the replica), the Event's type (T) and what
// it names.
type note struct {
	R         string `json:"r"`
	T         string `json:"t"`
	ID        string `json:"id,omitempty"`
	Container string `json:"c,omitempty"`
	Pending   int    `json:"n,omitempty"`
}

// notify tells the other replicas, when tx commits.
func (s *Store) notify(ctx context.Context, q db, n note) error {
	n.R = s.replica
	b, _ := json.Marshal(n)
	_, err := q.Exec(ctx, `SELECT pg_notify($1, $2)`, channel, string(b))
	return err
}

// inTx runs f in a transaction and commits it.
func (s *Store) inTx(ctx context.Context, f func(tx pgx.Tx) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return unwrapConn(err)
	}
	defer tx.Rollback(context.Background())
	if err := f(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// hold changes what gate holds on ticket id by d, never below zero.
func hold(ctx context.Context, q db, id, gate string, d int) error {
	if d > 0 {
		_, err := q.Exec(ctx, `INSERT INTO hub_holders (ticket, gate, n) VALUES ($1, $2, $3)
ON CONFLICT (ticket, gate) DO UPDATE SET n = hub_holders.n + EXCLUDED.n`, id, gate, d)
		return err
	}
	if _, err := q.Exec(ctx, `UPDATE hub_holders SET n = greatest(n + $3, 0) WHERE ticket = $1 AND gate = $2`, id, gate, d); err != nil {
		return err
	}
	_, err := q.Exec(ctx, `DELETE FROM hub_holders WHERE ticket = $1 AND gate = $2 AND n = 0`, id, gate)
	return err
}

func holdersOf(ctx context.Context, q db, id string) (int, error) {
	var n int
	err := q.QueryRow(ctx, `SELECT coalesce(sum(n), 0)::int FROM hub_holders WHERE ticket = $1`, id).Scan(&n)
	return n, err
}

// touch records that gate called, the first time.
func touch(ctx context.Context, q db, gate string, now time.Time) error {
	_, err := q.Exec(ctx, `INSERT INTO hub_gates (gate, seen) VALUES ($1, $2) ON CONFLICT (gate) DO NOTHING`, gate, now)
	return err
}

// Ask is hub.Store's: each step one statement whose WHERE re-checks what it read, so that
// replicas asking at once join one ticket (the unique index on pending tickets: INSERT … ON
// CONFLICT) and spend an authorisation once (UPDATE … WHERE uses > 0 RETURNING).
func (s *Store) Ask(ctx context.Context, q hub.StoreAsk) (hub.StoreAnswer, error) {
	var ans hub.StoreAnswer
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		ans, err = s.ask(ctx, tx, q)
		return err
	})
	return ans, err
}

func (s *Store) ask(ctx context.Context, tx pgx.Tx, q hub.StoreAsk) (hub.StoreAnswer, error) {
	now := q.Now
	if err := touch(ctx, tx, q.Gate, now); err != nil {
		return hub.StoreAnswer{}, err
	}
	latest := func() (hub.Ticket, bool, error) {
		t, err := scanTicket(tx.QueryRow(ctx, selectTicket+`WHERE t.fingerprint = $1 ORDER BY t.created DESC, t.id DESC LIMIT 1`, q.Fingerprint))
		if errors.Is(err, pgx.ErrNoRows) {
			return hub.Ticket{}, false, nil
		}
		return t, err == nil, err
	}
	if q.Kind == hub.KindConnect {
		var until time.Time
		err := tx.QueryRow(ctx, `SELECT until FROM hub_grants WHERE container = $1 AND host = $2 AND port = $3`, q.Container, q.Host, q.Port).Scan(&until)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return hub.StoreAnswer{}, err
		}
		if err == nil && now.Before(until) {
			t, ok, err := latest()
			if err != nil {
				return hub.StoreAnswer{}, err
			}
			if ok && t.Status == hub.Approved {
				return hub.StoreAnswer{Outcome: hub.OutcomeApproved, Ticket: t}, nil
			}
		}
	}
	join := func(id string) (hub.StoreAnswer, bool, error) {
		tag, err := tx.Exec(ctx, `UPDATE hub_tickets SET gone = '', updated = clock_timestamp() WHERE id = $1 AND status = 'pending'`, id)
		if err != nil || tag.RowsAffected() == 0 {
			return hub.StoreAnswer{}, false, err
		}
		if err := hold(ctx, tx, id, q.Gate, 1); err != nil {
			return hub.StoreAnswer{}, false, err
		}
		if err := s.notify(ctx, tx, note{T: "ticket", ID: id}); err != nil {
			return hub.StoreAnswer{}, false, err
		}
		t, _, err := getTicket(ctx, tx, id)
		return hub.StoreAnswer{Outcome: hub.OutcomePending, Ticket: t}, err == nil, err
	}
	if q.NoHold {
		t, ok, err := latest()
		if err != nil {
			return hub.StoreAnswer{}, err
		}
		if ok && (t.Status == hub.Pending || t.Decision != nil && now.Sub(t.Decision.At) < q.Window || t.Status == hub.Expired && now.Sub(t.Expires) < q.Window) {
			return hub.StoreAnswer{Outcome: outcomeOf(t.Status), Ticket: t}, nil
		}
	}
	// A ticket decided between the read and the write is read again (at most a few times: a
	// decision is a human's).
	for range 4 {
		if q.NoHold {
			break
		}
		t, ok, err := latest()
		if err != nil {
			return hub.StoreAnswer{}, err
		}
		if !ok {
			break
		}
		recently := t.Decision != nil && now.Sub(t.Decision.At) < q.Window
		switch {
		case t.Status == hub.Pending:
			a, ok, err := join(t.ID)
			if err != nil || ok {
				return a, err
			}
			continue // decided or expired meanwhile
		case t.Status == hub.Approved && t.Uses > 0 && recently:
			tag, err := tx.Exec(ctx, `UPDATE hub_tickets SET uses = uses - 1, updated = clock_timestamp() WHERE id = $1 AND status = 'approved' AND uses > 0`, t.ID)
			if err != nil {
				return hub.StoreAnswer{}, err
			}
			if tag.RowsAffected() == 1 {
				t.Uses--
				return hub.StoreAnswer{Outcome: hub.OutcomeApproved, Ticket: t}, nil
			}
			// Another ask spent the last use: a new ticket.
		case t.Status == hub.Denied && recently:
			return hub.StoreAnswer{Outcome: hub.OutcomeDenied, Ticket: t}, nil
		case t.Status == hub.Expired && !t.Reported && now.Sub(t.Expires) < q.Window:
			tag, err := tx.Exec(ctx, `UPDATE hub_tickets SET reported = true, updated = clock_timestamp() WHERE id = $1 AND NOT reported`, t.ID)
			if err != nil {
				return hub.StoreAnswer{}, err
			}
			if tag.RowsAffected() == 1 {
				t.Reported = true
				return hub.StoreAnswer{Outcome: hub.OutcomeExpired, Ticket: t}, nil
			}
		}
		break
	}
	var n, all, kind int
	if err := tx.QueryRow(ctx, `SELECT count(*) FILTER (WHERE container = $1), count(*), count(*) FILTER (WHERE container = $1 AND asked->>'kind' = $2)
FROM hub_tickets WHERE status = 'pending'`,
		q.Container, q.Kind).Scan(&n, &all, &kind); err != nil {
		return hub.StoreAnswer{}, err
	}
	if q.MaxPending > 0 && n >= q.MaxPending || q.MaxPendingAll > 0 && all >= q.MaxPendingAll {
		if err := s.notify(ctx, tx, note{T: "limit", Container: q.Container, Pending: n}); err != nil {
			return hub.StoreAnswer{}, err
		}
		return hub.StoreAnswer{Outcome: hub.OutcomeLimit, Pending: n}, nil
	}
	if q.MaxPendingKind > 0 && kind >= q.MaxPendingKind {
		return hub.StoreAnswer{Outcome: hub.OutcomeLimit, Pending: kind}, nil
	}
	nt := q.New
	nt.Status, nt.Holders, nt.Uses, nt.Decision, nt.Gone, nt.Cut, nt.Waiting, nt.Reported = hub.Pending, 0, 0, nil, "", 0, "", false
	asked, err := json.Marshal(nt)
	if err != nil {
		return hub.StoreAnswer{}, err
	}
	var id string
	var created bool
	if err := tx.QueryRow(ctx, `INSERT INTO hub_tickets (id, fingerprint, container, status, created, expires, asked)
VALUES ($1, $2, $3, 'pending', $4, $5, $6)
ON CONFLICT (fingerprint) WHERE status = 'pending' DO UPDATE SET gone = '', updated = clock_timestamp()
RETURNING id, xmax = 0`, nt.ID, nt.Fingerprint, nt.Container, nt.Created, nt.Expires, asked).Scan(&id, &created); err != nil {
		return hub.StoreAnswer{}, err
	}
	if !q.NoHold {
		if err := hold(ctx, tx, id, q.Gate, 1); err != nil {
			return hub.StoreAnswer{}, err
		}
	}
	if err := s.notify(ctx, tx, note{T: "ticket", ID: id}); err != nil {
		return hub.StoreAnswer{}, err
	}
	t, _, err := getTicket(ctx, tx, id)
	return hub.StoreAnswer{Outcome: hub.OutcomePending, Ticket: t, Created: created}, err
}

// Claim spends one use of an approval (UPDATE … WHERE uses > 0: two gates never both spend
// the last) or takes a denial.
func (s *Store) Claim(ctx context.Context, id, fingerprint, gate, key string) (hub.Ticket, error) {
	var t hub.Ticket
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var fp, status string
		if key != "" {
			// The claim's key first: a retry of a claim taken already answers again. A claim
			// that fails rolls its key back with it.
			err := tx.QueryRow(ctx, `SELECT fingerprint FROM hub_tickets WHERE id = $1`, id).Scan(&fp)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				return hub.ErrNotFound
			case err != nil:
				return err
			case fp != fingerprint:
				return hub.ErrFingerprint
			}
			tag, err := tx.Exec(ctx, `INSERT INTO hub_claims (ticket, key) VALUES ($1, $2) ON CONFLICT DO NOTHING`, id, key)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				t, _, err = getTicket(ctx, tx, id)
				return err
			}
		}
		err := tx.QueryRow(ctx, `UPDATE hub_tickets SET uses = uses - 1, updated = clock_timestamp()
WHERE id = $1 AND fingerprint = $2 AND status = 'approved' AND uses > 0 RETURNING fingerprint, status`, id, fingerprint).Scan(&fp, &status)
		if errors.Is(err, pgx.ErrNoRows) {
			err = tx.QueryRow(ctx, `SELECT fingerprint, status FROM hub_tickets WHERE id = $1`, id).Scan(&fp, &status)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				return hub.ErrNotFound
			case err != nil:
				return err
			case fp != fingerprint:
				return hub.ErrFingerprint
			case status != string(hub.Denied):
				return hub.ErrDecided
			}
		} else if err != nil {
			return err
		}
		if key != "" && status == string(hub.Denied) {
			// A denial spends nothing: its claims keep no key (a gate could add keys without end).
			if _, err := tx.Exec(ctx, `DELETE FROM hub_claims WHERE ticket = $1 AND key = $2`, id, key); err != nil {
				return err
			}
		}
		if err := hold(ctx, tx, id, gate, -1); err != nil {
			return err
		}
		t, _, err = getTicket(ctx, tx, id)
		return err
	})
	return t, err
}

// Leave is hub.Store's.
func (s *Store) Leave(ctx context.Context, id, gate string, cut bool) (hub.Ticket, bool, error) {
	var t hub.Ticket
	var ok bool
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var status string
		err := tx.QueryRow(ctx, `UPDATE hub_tickets SET cut = cut + $2, updated = clock_timestamp() WHERE id = $1 RETURNING status`,
			id, map[bool]int{true: 1}[cut]).Scan(&status)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		var mine int
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(n), 0) FROM hub_holders WHERE ticket = $1 AND gate = $2`, id, gate).Scan(&mine); err != nil {
			return err
		}
		if mine > 0 {
			if err := hold(ctx, tx, id, gate, -1); err != nil {
				return err
			}
			n, err := holdersOf(ctx, tx, id)
			if err != nil {
				return err
			}
			if n == 0 && status == string(hub.Pending) {
				gone := hub.GoneLeft
				if cut {
					gone = hub.GoneRestart
				}
				if _, err := tx.Exec(ctx, `UPDATE hub_tickets SET gone = $2 WHERE id = $1`, id, gone); err != nil {
					return err
				}
			}
		}
		if status == string(hub.Pending) {
			if err := s.notify(ctx, tx, note{T: "ticket", ID: id}); err != nil {
				return err
			}
		}
		t, ok, err = getTicket(ctx, tx, id)
		return err
	})
	return t, ok, err
}

// Decide is one transaction: the ticket locked, checked pending, the decision inserted (its key
// is the ticket: never two), the ticket updated, the other replicas notified, committed.
func (s *Store) Decide(ctx context.Context, id, fingerprint string, d hub.Decision, bind func(hub.Ticket) error) (hub.Ticket, error) {
	var t hub.Ticket
	expiredNow := false
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var fp, status string
		var expires time.Time
		err := tx.QueryRow(ctx, `SELECT fingerprint, status, expires FROM hub_tickets WHERE id = $1 FOR UPDATE`, id).Scan(&fp, &status, &expires)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return hub.ErrNotFound
		case err != nil:
			return err
		case fp != fingerprint:
			return hub.ErrFingerprint
		case status != string(hub.Pending):
			return hub.ErrDecided
		}
		if !d.At.Before(expires) {
			if _, err := tx.Exec(ctx, `UPDATE hub_tickets SET status = 'expired', updated = clock_timestamp() WHERE id = $1`, id); err != nil {
				return err
			}
			if err := s.notify(ctx, tx, note{T: "expired", ID: id}); err != nil {
				return err
			}
			expiredNow = true
			t, _, err = getTicket(ctx, tx, id)
			return err
		}
		cur, _, err := getTicket(ctx, tx, id)
		if err != nil {
			return err
		}
		if bind != nil {
			if err := bind(cur); err != nil {
				return err
			}
		}
		held := cur.Holders
		uses, released := 0, 0
		if d.Verdict == hub.Approved {
			uses, released = max(1, held), held
			if cur.Kind == hub.KindConnect && cur.Grant > 0 {
				if _, err := tx.Exec(ctx, `INSERT INTO hub_grants (container, host, port, until) VALUES ($1, $2, $3, $4)
ON CONFLICT (container, host, port) DO UPDATE SET until = EXCLUDED.until`, cur.Container, cur.Host, cur.Port, d.At.Add(cur.Grant)); err != nil {
					return err
				}
			}
		}
		if _, err := tx.Exec(ctx, `UPDATE hub_tickets SET status = $2, uses = $3, updated = clock_timestamp() WHERE id = $1 AND status = 'pending'`,
			id, string(d.Verdict), uses); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO hub_decisions (ticket, verdict, by_whom, reason, at, released) VALUES ($1, $2, $3, $4, $5, $6)`,
			id, string(d.Verdict), d.By, d.Reason, d.At, released); err != nil {
			return err
		}
		if err := s.notify(ctx, tx, note{T: "decided", ID: id}); err != nil {
			return err
		}
		t, _, err = getTicket(ctx, tx, id)
		return err
	})
	if err == nil && expiredNow {
		return t, hub.ErrExpiredNow
	}
	return t, err
}

// before is a pending ticket's count and Gone before a report.
type before struct {
	n    int
	gone string
	fp   string
}

// SetHoldings is hub.Store's: the tickets it changes are locked in the order of their ids.
func (s *Store) SetHoldings(ctx context.Context, gate string, h hub.Holdings, now time.Time) ([]hub.Ticket, error) {
	asking := make(map[string]bool, len(h.Asking))
	for _, fp := range h.Asking {
		asking[fp] = true
	}
	busy := make(map[string]bool, len(h.Busy))
	for _, id := range h.Busy {
		busy[id] = true
	}
	held := make([]string, 0, len(h.Held))
	for id := range h.Held {
		held = append(held, id)
	}
	cutIDs := make([]string, 0, len(h.Cut))
	for id := range h.Cut {
		cutIDs = append(cutIDs, id)
	}
	var out []hub.Ticket
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		out = nil
		if _, err := tx.Exec(ctx, `INSERT INTO hub_gates (gate, seen) VALUES ($1, $2)
ON CONFLICT (gate) DO UPDATE SET seen = greatest(hub_gates.seen, EXCLUDED.seen)`, gate, now); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT t.id, t.status, t.gone, t.fingerprint FROM hub_tickets t
WHERE t.id = ANY($2) OR t.status = 'pending' AND (t.id = ANY($1) OR EXISTS (SELECT 1 FROM hub_holders x WHERE x.ticket = t.id AND x.gate = $3))
ORDER BY t.id FOR UPDATE`, held, cutIDs, gate)
		if err != nil {
			return err
		}
		pending := map[string]*before{}
		var ids []string
		for rows.Next() {
			var id, status, gone, fp string
			if err := rows.Scan(&id, &status, &gone, &fp); err != nil {
				rows.Close()
				return err
			}
			if status == string(hub.Pending) {
				pending[id] = &before{gone: gone, fp: fp}
				ids = append(ids, id)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, id := range ids {
			if pending[id].n, err = holdersOf(ctx, tx, id); err != nil {
				return err
			}
		}
		for id, n := range h.Cut {
			tag, err := tx.Exec(ctx, `UPDATE hub_tickets SET cut = cut + $2, updated = clock_timestamp() WHERE id = $1`, id, n)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				continue
			}
			if err := cutElsewhere(ctx, tx, id, gate, n); err != nil {
				return err
			}
			s.log.Info("hub: held requests cut by a restart of the gate", "id", id, "cut", n)
		}
		for _, id := range ids {
			b := pending[id]
			if busy[id] || asking[b.fp] {
				continue
			}
			want := max(0, h.Held[id])
			if _, err := tx.Exec(ctx, `DELETE FROM hub_holders WHERE ticket = $1 AND gate = $2`, id, gate); err != nil {
				return err
			}
			if want > 0 {
				if err := hold(ctx, tx, id, gate, want); err != nil {
					return err
				}
			}
		}
		for _, id := range ids {
			b := pending[id]
			if busy[id] || asking[b.fp] {
				if h.Cut[id] == 0 {
					continue
				}
			}
			n, err := holdersOf(ctx, tx, id)
			if err != nil {
				return err
			}
			gone := goneAfter(n, b.n, b.gone, h.Cut[id] > 0)
			if n == b.n && gone == b.gone {
				continue
			}
			if _, err := tx.Exec(ctx, `UPDATE hub_tickets SET gone = $2, updated = clock_timestamp() WHERE id = $1`, id, gone); err != nil {
				return err
			}
			if err := s.notify(ctx, tx, note{T: "ticket", ID: id}); err != nil {
				return err
			}
			t, _, err := getTicket(ctx, tx, id)
			if err != nil {
				return err
			}
			out = append(out, t)
		}
		return nil
	})
	return out, err
}

// goneAfter is hub's rule for Gone once a pending ticket's count went from before to n.
func goneAfter(n, before int, gone string, cut bool) string {
	switch {
	case n > 0:
		return ""
	case cut:
		return hub.GoneRestart
	case before > 0:
		return hub.GoneLeft
	}
	return gone
}

// cutElsewhere takes n requests off what gates other than gate hold on ticket id, those heard
// from longest ago first (hub.FileStore's rule).
func cutElsewhere(ctx context.Context, tx pgx.Tx, id, gate string, n int) error {
	rows, err := tx.Query(ctx, `SELECT h.gate, h.n FROM hub_holders h LEFT JOIN hub_gates g ON g.gate = h.gate
WHERE h.ticket = $1 AND h.gate <> $2 ORDER BY g.seen NULLS FIRST, h.gate`, id, gate)
	if err != nil {
		return err
	}
	type row struct {
		gate string
		n    int
	}
	var rs []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.gate, &r.n); err != nil {
			rows.Close()
			return err
		}
		rs = append(rs, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, r := range rs {
		if n == 0 {
			break
		}
		d := min(n, r.n)
		if err := hold(ctx, tx, id, r.gate, -d); err != nil {
			return err
		}
		n -= d
	}
	return nil
}

// Sweep is hub.Store's: each statement's WHERE re-checks what it changes, so two replicas
// sweeping at once expire each ticket once (the second finds it expired).
func (s *Store) Sweep(ctx context.Context, now time.Time, r hub.Retention) ([]hub.Ticket, error) {
	var out []hub.Ticket
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		out = nil
		rows, err := tx.Query(ctx, `UPDATE hub_tickets SET status = 'expired', updated = clock_timestamp()
WHERE status = 'pending' AND expires <= $1 RETURNING id`, now)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, id := range ids {
			t, ok, err := getTicket(ctx, tx, id)
			if err != nil {
				return err
			}
			if ok {
				out = append(out, t)
			}
			if err := s.notify(ctx, tx, note{T: "expired", ID: id}); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `DELETE FROM hub_tickets WHERE status <> 'pending' AND created < $1`, now.Add(-r.Keep)); err != nil {
			return err
		}
		if r.MaxDecided > 0 {
			if _, err := tx.Exec(ctx, `DELETE FROM hub_tickets WHERE id IN (
	SELECT id FROM hub_tickets WHERE status <> 'pending' ORDER BY created DESC, id DESC OFFSET $1)`, r.MaxDecided); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `DELETE FROM hub_grants WHERE until < $1`, now); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM hub_pairings WHERE expires < $1`, now); err != nil {
			return err
		}
		if r.GateStale > 0 {
			rows, err := tx.Query(ctx, `WITH stale AS (
	DELETE FROM hub_holders h USING hub_gates g WHERE g.gate = h.gate AND g.seen < $1 RETURNING h.ticket
)
UPDATE hub_tickets t SET gone = 'restart', updated = clock_timestamp()
WHERE t.id IN (SELECT ticket FROM stale) AND t.status = 'pending'
	AND NOT EXISTS (SELECT 1 FROM hub_holders x WHERE x.ticket = t.id AND x.gate NOT IN (SELECT gate FROM hub_gates WHERE seen < $1))
RETURNING t.id`, now.Add(-r.GateStale))
			if err != nil {
				return err
			}
			ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return err
			}
			for _, id := range ids {
				if err := s.notify(ctx, tx, note{T: "ticket", ID: id}); err != nil {
					return err
				}
			}
			// A gate silent past GateStale is forgotten (a gate takes a new name at every start),
			// but for the latest report of any gate, which the facades show as it stands.
			if _, err := tx.Exec(ctx, `DELETE FROM hub_gates WHERE seen < $1 AND (reported IS NULL OR reported < $1)
	AND gate <> coalesce((SELECT gate FROM hub_gates WHERE state IS NOT NULL ORDER BY reported DESC LIMIT 1), '')`, now.Add(-r.GateStale)); err != nil {
				return err
			}
		}
		return nil
	})
	return out, err
}

// Get is hub.Store's.
func (s *Store) Get(ctx context.Context, id string) (hub.Ticket, bool, error) {
	return getTicket(ctx, s.pool, id)
}

// Pending is hub.Store's.
func (s *Store) Pending(ctx context.Context) ([]hub.Ticket, error) {
	return listTickets(ctx, s.pool, `WHERE t.status = 'pending'`)
}

// Decided is hub.Store's.
func (s *Store) Decided(ctx context.Context) ([]hub.Ticket, error) {
	return listTickets(ctx, s.pool, `WHERE t.status <> 'pending'`)
}

// SetGate is hub.Store's.
func (s *Store) SetGate(ctx context.Context, gate string, g hub.GateState) error {
	state, err := json.Marshal(g)
	if err != nil {
		return err
	}
	return s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO hub_gates (gate, seen, state, reported) VALUES ($1, $2, $3, $2)
ON CONFLICT (gate) DO UPDATE SET state = EXCLUDED.state, reported = EXCLUDED.reported`, gate, g.Reported, state); err != nil {
			return err
		}
		return s.notify(ctx, tx, note{T: "gate"})
	})
}

// Gate is hub.Store's.
func (s *Store) Gate(ctx context.Context) (hub.GateState, error) {
	var g hub.GateState
	var state []byte
	err := s.pool.QueryRow(ctx, `SELECT state FROM hub_gates WHERE state IS NOT NULL ORDER BY reported DESC LIMIT 1`).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		return g, nil
	}
	if err != nil {
		return g, err
	}
	err = json.Unmarshal(state, &g)
	g.Reported = g.Reported.UTC()
	return g, err
}

// Counts is hub.Store's.
func (s *Store) Counts(ctx context.Context, now time.Time, window time.Duration) (metrics.HubState, error) {
	st := metrics.HubState{Pending: map[string]int{}}
	rows, err := s.pool.Query(ctx, `SELECT container, count(*) FILTER (WHERE status = 'pending') FROM hub_tickets GROUP BY container`)
	if err != nil {
		return st, err
	}
	for rows.Next() {
		var c string
		var n int
		if err := rows.Scan(&c, &n); err != nil {
			rows.Close()
			return st, err
		}
		st.Pending[c] = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return st, err
	}
	err = s.pool.QueryRow(ctx, `SELECT
	(SELECT count(*) FROM hub_tickets t JOIN hub_decisions d ON d.ticket = t.id WHERE t.status = 'approved' AND t.uses > 0 AND d.at > $1),
	(SELECT count(*) FROM hub_grants WHERE until > $2)`, now.Add(-window), now).Scan(&st.Authorisations, &st.Grants)
	return st, err
}

// Notice is hub.Noticer's: the first replica to insert the ticket's row sends its notifications.
func (s *Store) Notice(ctx context.Context, id string) (bool, error) {
	tag, err := s.pool.Exec(ctx, `INSERT INTO hub_notices (ticket) SELECT id FROM hub_tickets WHERE id = $1 ON CONFLICT DO NOTHING`, id)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

var _ hub.Noticer = (*Store)(nil)

// outcomeOf is the outcome of an ask answered with a ticket of status st as it stands.
func outcomeOf(st hub.Status) string {
	switch st {
	case hub.Approved:
		return hub.OutcomeApproved
	case hub.Denied:
		return hub.OutcomeDenied
	case hub.Expired:
		return hub.OutcomeExpired
	}
	return hub.OutcomePending
}
