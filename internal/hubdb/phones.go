package hubdb

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockhttp/lockhttp/internal/phone"
)

// The phones' pairing links and paired phones are rows (phone.PairingStore): a phone paired
// through one replica is paired on all, unpaired on one is unpaired on all.
var _ phone.PairingStore = (*Store)(nil)

// AddPairing is phone.PairingStore's.
func (s *Store) AddPairing(ctx context.Context, hash [32]byte, expires time.Time, max int) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM hub_pairings WHERE hash IN (SELECT hash FROM hub_pairings ORDER BY expires DESC OFFSET $1)`, max-1); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO hub_pairings (hash, expires) VALUES ($1, $2) ON CONFLICT (hash) DO UPDATE SET expires = EXCLUDED.expires`, hash[:], expires)
		return err
	})
}

// TakePairing is phone.PairingStore's: one DELETE … RETURNING, so two replicas never both take
// a link.
func (s *Store) TakePairing(ctx context.Context, hash [32]byte, now time.Time) (bool, error) {
	var expires time.Time
	err := s.pool.QueryRow(ctx, `DELETE FROM hub_pairings WHERE hash = $1 RETURNING expires`, hash[:]).Scan(&expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return now.Before(expires), nil
}

// AddSession is phone.PairingStore's: counted and inserted under an advisory lock.
func (s *Store) AddSession(ctx context.Context, p phone.Session, hash [32]byte, max int) (bool, error) {
	added := false
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(phonesLock)); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM hub_phones`).Scan(&n); err != nil {
			return err
		}
		if n >= max {
			return nil
		}
		_, err := tx.Exec(ctx, `INSERT INTO hub_phones (id, hash, device, remote, last_remote, created, last_seen) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
			p.ID, hash[:], p.Device, p.Remote, p.LastRemote, p.Created, p.LastSeen)
		added = err == nil
		return err
	})
	return added, err
}

const selectPhone = `SELECT id, device, remote, last_remote, created, last_seen FROM hub_phones `

func scanPhone(r pgx.Row) (phone.Session, error) {
	var p phone.Session
	err := r.Scan(&p.ID, &p.Device, &p.Remote, &p.LastRemote, &p.Created, &p.LastSeen)
	p.Created, p.LastSeen = p.Created.UTC(), p.LastSeen.UTC()
	return p, err
}

// SessionByHash is phone.PairingStore's.
func (s *Store) SessionByHash(ctx context.Context, hash [32]byte) (phone.Session, bool, error) {
	p, err := scanPhone(s.pool.QueryRow(ctx, selectPhone+`WHERE hash = $1`, hash[:]))
	if errors.Is(err, pgx.ErrNoRows) {
		return phone.Session{}, false, nil
	}
	return p, err == nil, err
}

// SeenSession is phone.PairingStore's.
func (s *Store) SeenSession(ctx context.Context, id, remote string, at time.Time) error {
	_, err := s.pool.Exec(ctx, `UPDATE hub_phones SET last_seen = greatest(last_seen, $3), last_remote = $2 WHERE id = $1`, id, remote, at)
	return err
}

// ListSessions is phone.PairingStore's.
func (s *Store) ListSessions(ctx context.Context) ([]phone.Session, error) {
	rows, err := s.pool.Query(ctx, selectPhone+`ORDER BY created, id`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (phone.Session, error) { return scanPhone(r) })
}

// DeleteSession is phone.PairingStore's; the other replicas are told, and close the phone's
// websockets.
func (s *Store) DeleteSession(ctx context.Context, id string) (phone.Session, bool, error) {
	var p phone.Session
	ok := false
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		p, err = scanPhone(tx.QueryRow(ctx, `DELETE FROM hub_phones WHERE id = $1 RETURNING id, device, remote, last_remote, created, last_seen`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		ok = true
		return s.notify(ctx, tx, note{T: "unpaired", ID: id})
	})
	return p, ok, err
}

// WatchUnpaired is phone.PairingStore's.
func (s *Store) WatchUnpaired(f func(id string)) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.unpaired = append(s.unpaired, f)
}

func (s *Store) phoneUnpaired(id string) {
	s.wmu.Lock()
	fs := append([]func(string){}, s.unpaired...)
	s.wmu.Unlock()
	for _, f := range fs {
		f(id)
	}
}
