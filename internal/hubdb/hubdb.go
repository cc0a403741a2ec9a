// Package hubdb is the hub's state in PostgreSQL (hub.Store): tickets, decisions, grants and
// what each gate holds are rows, so that any number of hub replicas share them without a
// leader; a change is told to the other replicas by NOTIFY in the transaction that makes it.
package hubdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockhttp/lockhttp/internal/hub"
)

// channel is the NOTIFY channel of the hub's changes.
const channel = "lockhttp_hub"

// Advisory locks: one replica at a time migrates the schema, or changes the bindings.
const (
	migrateLock  = 0x6c6f636b68756231 // "lockhub1"
	bindingsLock = 0x6c6f636b62696e64 // "lockbind"
	phonesLock   = 0x6c6f636b70686f6e // "lockphon"
)

// migrations are the schema's versions, in order: migrations[i] takes the schema from version i
// to i+1. Append only; a released migration never changes.
var migrations = []string{
	// 1: tickets (a denial remembered, an approval's single-use authorisations and an expiry's
	// report are a ticket's status, uses and reported), decisions, the requests each gate holds,
	// the claims taken (by their keys), the replica that notifies each ticket, CONNECT grants, the credential bindings (the console's),
	// the phones' pairing links and paired phones (by their tokens' SHA-256), the gates and
	// their reports.
	`CREATE TABLE hub_tickets (
	id          text PRIMARY KEY,
	fingerprint text NOT NULL,
	container   text NOT NULL,
	status      text NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'expired')),
	created     timestamptz NOT NULL,
	expires     timestamptz NOT NULL,
	uses        integer NOT NULL DEFAULT 0 CHECK (uses >= 0),
	reported    boolean NOT NULL DEFAULT false,
	gone        text NOT NULL DEFAULT '',
	cut         integer NOT NULL DEFAULT 0,
	asked       jsonb NOT NULL,
	updated     timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE UNIQUE INDEX hub_tickets_one_pending ON hub_tickets (fingerprint) WHERE status = 'pending';
CREATE INDEX hub_tickets_latest ON hub_tickets (fingerprint, created DESC, id DESC);
CREATE INDEX hub_tickets_status ON hub_tickets (status, expires);
CREATE INDEX hub_tickets_updated ON hub_tickets (updated);
CREATE TABLE hub_decisions (
	ticket   text PRIMARY KEY REFERENCES hub_tickets (id) ON DELETE CASCADE,
	verdict  text NOT NULL CHECK (verdict IN ('approved', 'denied')),
	by_whom  text NOT NULL,
	reason   text NOT NULL DEFAULT '',
	at       timestamptz NOT NULL,
	released integer NOT NULL
);
CREATE TABLE hub_holders (
	ticket text NOT NULL REFERENCES hub_tickets (id) ON DELETE CASCADE,
	gate   text NOT NULL,
	n      integer NOT NULL CHECK (n >= 0),
	PRIMARY KEY (ticket, gate)
);
CREATE TABLE hub_claims (
	ticket text NOT NULL REFERENCES hub_tickets (id) ON DELETE CASCADE,
	key    text NOT NULL,
	PRIMARY KEY (ticket, key)
);
CREATE TABLE hub_notices (
	ticket text PRIMARY KEY REFERENCES hub_tickets (id) ON DELETE CASCADE
);
CREATE TABLE hub_grants (
	container text NOT NULL,
	host      text NOT NULL,
	port      integer NOT NULL,
	until     timestamptz NOT NULL,
	PRIMARY KEY (container, host, port)
);
CREATE TABLE hub_bindings (
	seq       bigserial PRIMARY KEY,
	container text NOT NULL,
	hash      text NOT NULL,
	by_whom   text NOT NULL,
	ticket    text NOT NULL DEFAULT '',
	at        timestamptz NOT NULL,
	issued    text NOT NULL DEFAULT '',
	request   text NOT NULL DEFAULT '',
	UNIQUE (container, hash)
);
CREATE TABLE hub_pairings (
	hash    bytea PRIMARY KEY,
	expires timestamptz NOT NULL
);
CREATE TABLE hub_phones (
	id          text PRIMARY KEY,
	hash        bytea NOT NULL UNIQUE,
	device      text NOT NULL,
	remote      text NOT NULL,
	last_remote text NOT NULL,
	created     timestamptz NOT NULL,
	last_seen   timestamptz NOT NULL
);
CREATE TABLE hub_gates (
	gate     text PRIMARY KEY,
	seen     timestamptz NOT NULL,
	state    jsonb,
	reported timestamptz
);`,
}

// SchemaVersion is the schema this binary knows.
var SchemaVersion = len(migrations)

// Options configures a Store.
type Options struct {
	// DSN is the database (never logged, never in an error).
	DSN string
	// Log receives the store's warnings. Nil: none.
	Log *slog.Logger
	// MaxConns bounds the pool's connections (the listener's is apart). Zero: 16.
	MaxConns int32
}

// Store is the hub's state in PostgreSQL.
type Store struct {
	pool    *pgxpool.Pool
	cfg     *pgx.ConnConfig // the listener's
	log     *slog.Logger
	replica string // names this store's notifications, which its own listener skips

	ctx    context.Context
	cancel context.CancelFunc

	wmu      sync.Mutex
	bindings []func()          // guarded by wmu: told when another replica changed the bindings
	unpaired []func(id string) // guarded by wmu: told when another replica unpaired a phone
	wg       sync.WaitGroup
	once     sync.Once
}

// Open connects, applies the migrations the database lacks and returns the store. A database
// whose schema is newer than this binary knows is refused.
func Open(ctx context.Context, o Options) (*Store, error) {
	pc, err := pgxpool.ParseConfig(o.DSN)
	if err != nil {
		// pgx's error may quote the DSN, password and all: say only where to look.
		return nil, errors.New("hubdb: the DSN does not parse; write it as postgres://user@host:port/db or host=... dbname=...")
	}
	pc.ConnConfig.ConnectTimeout = 5 * time.Second
	pc.MaxConns = 16
	if o.MaxConns > 0 {
		pc.MaxConns = o.MaxConns
	}
	where := fmt.Sprintf("%s:%d database %s", pc.ConnConfig.Host, pc.ConnConfig.Port, pc.ConnConfig.Database)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("hubdb: %s: %w", where, errors.Unwrap(err))
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var id [6]byte
	rand.Read(id[:])
	s := &Store{pool: pool, cfg: pc.ConnConfig.Copy(), log: log, replica: hex.EncodeToString(id[:])}
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("hubdb: %s: %w", where, err)
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// ErrSchemaNewer is Open's error for a database migrated by a newer release.
var ErrSchemaNewer = errors.New("the hub's schema in the database is newer than this binary knows")

// migrate brings the schema to SchemaVersion, one replica at a time.
func (s *Store) migrate(ctx context.Context) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return unwrapConn(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrateLock)); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS lockhttp_hub_schema (
	one     boolean PRIMARY KEY DEFAULT true CHECK (one),
	version integer NOT NULL
)`); err != nil {
		return fmt.Errorf("creating the schema's version table: %w", err)
	}
	var v int
	err = tx.QueryRow(ctx, `SELECT version FROM lockhttp_hub_schema`).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		_, err = tx.Exec(ctx, `INSERT INTO lockhttp_hub_schema (version) VALUES (0)`)
	}
	if err != nil {
		return fmt.Errorf("reading the schema's version: %w", err)
	}
	if v > len(migrations) {
		return fmt.Errorf("%w (version %d; this console knows %d): run the console of the release that migrated it, or a newer one, on every replica", ErrSchemaNewer, v, len(migrations))
	}
	for i := v; i < len(migrations); i++ {
		if _, err := tx.Exec(ctx, migrations[i]); err != nil {
			return fmt.Errorf("migrating the schema to version %d: %w", i+1, err)
		}
	}
	if _, err := tx.Exec(ctx, `UPDATE lockhttp_hub_schema SET version = $1`, len(migrations)); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// unwrapConn drops pgx's wrapping of a connection error, which may name the DSN.
func unwrapConn(err error) error {
	if u := errors.Unwrap(err); u != nil {
		return u
	}
	return err
}

// Close stops the listener and closes the pool.
func (s *Store) Close() error {
	s.once.Do(func() {
		s.cancel()
		s.wg.Wait()
		s.pool.Close()
	})
	return nil
}

// Pool is the store's connection pool (for tests and benchmarks).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

var _ hub.Store = (*Store)(nil)
