package auditdb

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// The sink speaks PostgreSQL's protocol through pgconn alone, not pgx: pgx's type registry
// (pgtype) and statement cache would cost the gate's binary about 4 MB, mapped in every gate,
// for a handful of statements. Parameters are sent as text of the type named by their OID,
// results come back as text and are read here, each column checked: a value the database
// should not hold is an error that names it, never a panic.

// The types of the parameters, as PostgreSQL numbers them (pg_type.oid).
const (
	oidBool        = 16
	oidBytea       = 17
	oidInt8        = 20
	oidInt4        = 23
	oidText        = 25
	oidJSON        = 114
	oidTimestamptz = 1184
)

// maxMessage bounds one message from the server, so a row the database should not hold cannot
// take the gate's memory: a line of the audit (the audit bounds a line at 64 MiB) and the
// columns beside it. A variable for the tests.
var maxMessage = 65 << 20

// pgOnlyParams are the keys of a DSN that tuned pgx's statement cache, which this package
// does not use: they are dropped rather than sent to the server, which would refuse them, so a
// DSN written for the driver the gate used before still connects.
var pgOnlyParams = []string{"statement_cache_capacity", "description_cache_capacity", "default_query_exec_mode"}

func connect(ctx context.Context, dsn string) (*pgconn.PgConn, error) {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		// pgconn's error may quote the DSN, password and all: say only where to look.
		return nil, errors.New("auditdb: the DSN does not parse; write it as postgres://user@host:port/db or host=... dbname=...")
	}
	for _, k := range pgOnlyParams {
		delete(cfg.RuntimeParams, k)
	}
	cfg.ConnectTimeout = 5 * time.Second
	cfg.MaxProtocolMessageBodyLen = maxMessage
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("auditdb: connect to %s:%d database %s: %w", cfg.Host, cfg.Port, cfg.Database, errors.Unwrap(err))
	}
	return conn, nil
}

// params are a statement's parameters: each a value (nil: NULL) and its type, in text but for
// the bytea ones, sent as they are (formats: nil when all are text).
type params struct {
	values  [][]byte
	oids    []uint32
	formats []int16
}

func (p *params) add(oid uint32, v []byte) {
	p.values = append(p.values, v)
	p.oids = append(p.oids, oid)
	if p.formats != nil {
		p.formats = append(p.formats, 0)
	}
}

// bytes adds a bytea parameter, sent in binary: the bytes themselves (nil: NULL).
func (p *params) bytes(v []byte) {
	if p.formats == nil {
		p.formats = make([]int16, len(p.values), cap(p.values))
	}
	p.values = append(p.values, v)
	p.oids = append(p.oids, oidBytea)
	p.formats = append(p.formats, 1)
}

func (p *params) text(s string) { p.add(oidText, []byte(s)) }

func (p *params) textOrNull(s *string) {
	if s == nil {
		p.add(oidText, nil)
		return
	}
	p.text(*s)
}

func (p *params) int(oid uint32, n int64) { p.add(oid, strconv.AppendInt(nil, n, 10)) }

func (p *params) intOrNull(oid uint32, n *int64) {
	if n == nil {
		p.add(oid, nil)
		return
	}
	p.int(oid, *n)
}

// exec runs one statement of the simple protocol (it may hold several, separated by ';').
func exec(ctx context.Context, conn *pgconn.PgConn, sql string) error {
	_, err := conn.Exec(ctx, sql).ReadAll()
	return err
}

// execParams runs one statement with parameters, whose rows, if any, are discarded.
func execParams(ctx context.Context, conn *pgconn.PgConn, sql string, p params) error {
	_, err := conn.ExecParams(ctx, sql, p.values, p.oids, p.formats, nil).Close()
	return err
}

// query runs one statement with parameters and hands each row's values to each (nil: a NULL),
// after checking that it has cols of them: in text, but for the columns results says are
// binary (nil: none). The values are valid only during the call.
func query(ctx context.Context, conn *pgconn.PgConn, sql string, p params, cols int, results []int16, each func(vals [][]byte) error) error {
	rr := conn.ExecParams(ctx, sql, p.values, p.oids, p.formats, results)
	var failed error
	for failed == nil && rr.NextRow() {
		vals := rr.Values()
		if len(vals) != cols {
			failed = fmt.Errorf("a row of %d columns, want %d", len(vals), cols)
			break
		}
		failed = each(vals)
	}
	_, err := rr.Close() // reads what is left: the connection is free again
	if failed != nil {
		return failed
	}
	return err
}

// begin starts a transaction; the function it returns rolls it back unless commit ran and
// succeeded. A rollback that fails is left: the connection is closed after a failure anyway.
func begin(ctx context.Context, conn *pgconn.PgConn) (commit func() error, rollback func(), err error) {
	if err := exec(ctx, conn, "BEGIN"); err != nil {
		return nil, nil, err
	}
	done := false
	commit = func() error {
		err := exec(ctx, conn, "COMMIT")
		done = err == nil
		return err
	}
	rollback = func() {
		if done || conn.IsClosed() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		exec(ctx, conn, "ROLLBACK")
	}
	return commit, rollback, nil
}

// textValue reads a text column that must not be NULL.
func textValue(col string, v []byte) (string, error) {
	if v == nil {
		return "", fmt.Errorf("column %s is NULL", col)
	}
	return string(v), nil
}

// intValue reads an integer column that must not be NULL, in [lo, hi].
func intValue(col string, v []byte, lo, hi int64) (int64, error) {
	if v == nil {
		return 0, fmt.Errorf("column %s is NULL, want an integer", col)
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("column %s holds %s, want an integer from %d to %d", col, quoteValue(v), lo, hi)
	}
	return n, nil
}

// quoteValue quotes a value from the database for an error: its start, and its length when
// it is long; NULL for a NULL.
func quoteValue(v []byte) string {
	const show = 40
	if v == nil {
		return "NULL"
	}
	if len(v) <= show {
		return strconv.Quote(string(v))
	}
	return strconv.Quote(string(v[:show])) + "… (" + strconv.Itoa(len(v)) + " bytes)"
}

// timestamptz writes t as PostgreSQL reads a timestamptz: in UTC, to the microsecond (what the
// column keeps), the years before 1 as BC (PostgreSQL has no year 0).
func timestamptz(t time.Time) string {
	t = t.UTC()
	year, bc := t.Year(), ""
	if year <= 0 {
		year, bc = 1-year, " BC"
	}
	return fmt.Sprintf("%04d-%02d-%02d %02d:%02d:%02d.%06d+00%s", year, t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond()/1000, bc)
}

// int4 is f as an integer column takes it (its fraction dropped), and false when f is outside
// the column's range: the column is then NULL rather than the batch refused forever.
func int4(f float64) (int64, bool) {
	if !(f >= math.MinInt32 && f <= math.MaxInt32) {
		return 0, false
	}
	return int64(f), true
}

// placeholders writes ($from,…,$from+n-1).
func placeholders(b *strings.Builder, from, n int) {
	b.WriteByte('(')
	for c := range n {
		if c > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('$')
		b.WriteString(strconv.Itoa(from + c))
	}
	b.WriteByte(')')
}
