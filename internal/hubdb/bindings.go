package hubdb

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockhttp/lockhttp/internal/console"
)

// The credential bindings are rows, so that a binding approved on one replica is served by every
// console to its gates (console.BindingStore).
var _ console.BindingStore = (*Store)(nil)

func listBindings(ctx context.Context, q db) ([]console.Binding, error) {
	rows, err := q.Query(ctx, `SELECT container, hash, by_whom, ticket, at, issued, request FROM hub_bindings ORDER BY seq`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (console.Binding, error) {
		var b console.Binding
		err := r.Scan(&b.Container, &b.Hash, &b.By, &b.Ticket, &b.At, &b.Issued, &b.Request)
		b.At = b.At.UTC()
		return b, err
	})
}

// ListBindings is console.BindingStore's.
func (s *Store) ListBindings(ctx context.Context) ([]console.Binding, error) {
	return listBindings(ctx, s.pool)
}

// UpdateBindings is console.BindingStore's: under an advisory lock, so that two replicas'
// changes never interleave; the rows f dropped are deleted, the new ones inserted after the
// others (the oldest first stays so), and the other replicas are told.
func (s *Store) UpdateBindings(ctx context.Context, f func([]console.Binding) ([]console.Binding, error)) ([]console.Binding, error) {
	var out []console.Binding
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(bindingsLock)); err != nil {
			return err
		}
		cur, err := listBindings(ctx, tx)
		if err != nil {
			return err
		}
		next, err := f(cur)
		if err != nil {
			return err
		}
		type key struct{ c, h string }
		keep := map[key]bool{}
		for _, b := range next {
			keep[key{b.Container, b.Hash}] = true
		}
		had := map[key]bool{}
		for _, b := range cur {
			had[key{b.Container, b.Hash}] = true
			if !keep[key{b.Container, b.Hash}] {
				if _, err := tx.Exec(ctx, `DELETE FROM hub_bindings WHERE container = $1 AND hash = $2`, b.Container, b.Hash); err != nil {
					return err
				}
			}
		}
		for _, b := range next {
			if had[key{b.Container, b.Hash}] {
				continue
			}
			at := b.At
			if at.IsZero() {
				at = time.Now()
			}
			if _, err := tx.Exec(ctx, `INSERT INTO hub_bindings (container, hash, by_whom, ticket, at, issued, request) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
				b.Container, b.Hash, b.By, b.Ticket, at, b.Issued, b.Request); err != nil {
				return err
			}
		}
		if err := s.notify(ctx, tx, note{T: "bindings"}); err != nil {
			return err
		}
		out, err = listBindings(ctx, tx)
		return err
	})
	return out, err
}

// WatchBindings is console.BindingStore's: f runs on the listener's goroutine after another
// replica's change, and after the listener reconnects.
func (s *Store) WatchBindings(f func()) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.bindings = append(s.bindings, f)
}

func (s *Store) bindingsChanged() {
	s.wmu.Lock()
	fs := append([]func(){}, s.bindings...)
	s.wmu.Unlock()
	for _, f := range fs {
		f()
	}
}
