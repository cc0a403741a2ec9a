// Package auditdb keeps a copy of the gate's audit in PostgreSQL, one row per line of the day
// files, copied from the files once they are on disk; the gates of a fleet share a database,
// each row under its gate's identity.
package auditdb

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/metrics"
)

// The tables: one row per line of a day file, keyed by the gate, its instance, the file and the
// line number, so a line copied twice is kept once; and each gate's last signed head. A gate is
// named by its identity (spiffe://lockhttp/gate/NAME: a fleet's gates share one database) and
// its instance (its host name: the replicas of one identity are so many chains); "" is a gate
// without one. migrations are applied in order, each once, by the first
// gate or lockhttp audit migrate that finds the database behind them; schemaVersion records how
// far a database is.
var migrations = []string{
	// 1: one gate's copy.
	`CREATE TABLE IF NOT EXISTS lockhttp_audit (
	file      text    NOT NULL,
	line_no   integer NOT NULL,
	seq       bigint  UNIQUE,
	line      text    NOT NULL,
	signed    boolean NOT NULL,
	time      timestamptz,
	event     text,
	id        text,
	container text,
	verdict   text,
	code      text,
	rule      text,
	status    integer,
	record    json,
	PRIMARY KEY (file, line_no)
);
CREATE TABLE IF NOT EXISTS lockhttp_audit_head (
	one  boolean PRIMARY KEY DEFAULT true CHECK (one),
	head json    NOT NULL
);`,
	// 2: the copies of a fleet's gates, each under its identity and instance (the replicas of
	// one identity, each its own chain): the rows of a database of one gate become those of the
	// gate without an identity or instance.
	`ALTER TABLE lockhttp_audit ADD COLUMN gate text NOT NULL DEFAULT '';
ALTER TABLE lockhttp_audit ADD COLUMN instance text NOT NULL DEFAULT '';
ALTER TABLE lockhttp_audit DROP CONSTRAINT lockhttp_audit_pkey;
ALTER TABLE lockhttp_audit DROP CONSTRAINT lockhttp_audit_seq_key;
ALTER TABLE lockhttp_audit ADD PRIMARY KEY (gate, instance, file, line_no);
ALTER TABLE lockhttp_audit ADD CONSTRAINT lockhttp_audit_chain_seq_key UNIQUE (gate, instance, seq);
ALTER TABLE lockhttp_audit_head ADD COLUMN gate text NOT NULL DEFAULT '';
ALTER TABLE lockhttp_audit_head ADD COLUMN instance text NOT NULL DEFAULT '';
ALTER TABLE lockhttp_audit_head DROP COLUMN one;
ALTER TABLE lockhttp_audit_head ADD PRIMARY KEY (gate, instance);`,
}

// migrateLock is the advisory lock the migrations are applied under: many gates start at once.
const migrateLock = 0x6c6f636b68747470 // "lockhttp"

// Migrate applies the migrations the database lacks.
func Migrate(ctx context.Context, dsn string) error {
	conn, err := connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return migrate(ctx, conn)
}

// migrate applies the missing migrations in one transaction, under migrateLock.
func migrate(ctx context.Context, conn *pgx.Conn) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("auditdb: migrate: %w", err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrateLock)); err != nil {
		return fmt.Errorf("auditdb: migrate: %w", err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS lockhttp_audit_schema (version integer NOT NULL)`); err != nil {
		return fmt.Errorf("auditdb: migrate: %w", err)
	}
	version := 0
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM lockhttp_audit_schema`).Scan(&version); err != nil {
		return fmt.Errorf("auditdb: migrate: %w", err)
	}
	if version > len(migrations) {
		return fmt.Errorf("auditdb: the database's audit tables are at version %d, newer than this binary's %d; upgrade the gate", version, len(migrations))
	}
	for i := version; i < len(migrations); i++ {
		if _, err := tx.Exec(ctx, migrations[i]); err != nil {
			return fmt.Errorf("auditdb: migration %d: %w", i+1, err)
		}
	}
	if version < len(migrations) {
		if _, err := tx.Exec(ctx, `DELETE FROM lockhttp_audit_schema; INSERT INTO lockhttp_audit_schema VALUES (`+fmt.Sprint(len(migrations))+`)`); err != nil {
			return fmt.Errorf("auditdb: migrate: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("auditdb: migrate: %w", err)
	}
	return nil
}

func connect(ctx context.Context, dsn string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		// pgx's error may quote the DSN, password and all: say only where to look.
		return nil, errors.New("auditdb: the DSN does not parse; write it as postgres://user@host:port/db or host=... dbname=...")
	}
	cfg.ConnectTimeout = 5 * time.Second
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("auditdb: connect to %s:%d database %s: %w", cfg.Host, cfg.Port, cfg.Database, errors.Unwrap(err))
	}
	return conn, nil
}

// Options configures a Sink.
type Options struct {
	Dir string // the audit directory the gate writes
	DSN string // the database (never logged)
	// Gate is the gate's identity, which its rows carry (spiffe://lockhttp/gate/NAME, from its
	// certificate), and Instance its name among the gates of that identity (its host name); "":
	// none.
	Gate     string
	Instance string
	Logger   *slog.Logger // nil: discard
	// Retry is how long the sink waits after a failure before it tries again. Zero: 2s.
	Retry time.Duration
	// Metrics counts the rows copied and the failures (metrics.NewAuditDB, whose lag is the
	// sink's Lag). Nil: nothing counted.
	Metrics *metrics.AuditDB
	// Now is the clock of the lag. Nil: time.Now.
	Now func() time.Time
}

// maxMarks bounds the record numbers the sink remembers with the time they reached the disk
// (for Lag): past it the last mark takes the newer numbers and keeps its time, so the lag of
// a long outage is counted from its start, never from later.
const maxMarks = 4096

// mark is a record number and when it was on disk: the records up to it and after the mark
// before it reached the disk then.
type mark struct {
	seq int64
	at  time.Time
}

// Sink copies the audit's records to the database as they reach the disk: it is told (Durable)
// how far the files are on disk, and copies the lines after the last one the database has,
// reading them from the files. So the queue is bounded (a position, not records in memory), a
// database that is down loses nothing (the sink catches up from the files when it returns), and
// no line is written twice (the table's key is the file and the line number).
type Sink struct {
	o      Options
	log    *slog.Logger
	notify chan struct{} // cap 1

	now     func() time.Time
	durable atomic.Int64 // the last record number on disk
	rows    atomic.Int64 // rows copied since start
	dbSeq   atomic.Int64 // the last record number the database has
	mu      sync.Mutex
	err     error  // guarded by mu: the last failure, nil once copying succeeds
	marks   []mark // guarded by mu: the record numbers on disk after dbSeq, oldest first, with when
}

// New returns a sink; Run copies.
func New(o Options) *Sink {
	s := &Sink{o: o, log: o.Logger, notify: make(chan struct{}, 1)}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.o.Retry == 0 {
		s.o.Retry = 2 * time.Second
	}
	s.now = o.Now
	if s.now == nil {
		s.now = time.Now
	}
	return s
}

// Durable implements audit.Sink.
func (s *Sink) Durable(seq int64, file string) {
	s.onDisk(seq)
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// onDisk notes that the records up to seq are on disk, now.
func (s *Sink) onDisk(seq int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if seq <= s.durable.Load() {
		return
	}
	s.durable.Store(seq)
	if n := len(s.marks); n >= maxMarks {
		s.marks[n-1].seq = seq
		return
	}
	s.marks = append(s.marks, mark{seq: seq, at: s.now()})
}

// copied notes that the database has the records up to seq.
func (s *Sink) copied(seq int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if seq <= s.dbSeq.Load() {
		return
	}
	s.dbSeq.Store(seq)
	i := 0
	for i < len(s.marks) && s.marks[i].seq <= seq {
		i++
	}
	s.marks = append(s.marks[:0], s.marks[i:]...)
}

// Lag is how far the database is behind the files: the records on disk it does not have, and
// how long the oldest of them has been on disk.
func (s *Sink) Lag() metrics.AuditDBLag {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := metrics.AuditDBLag{Records: max(s.durable.Load()-s.dbSeq.Load(), 0)}
	if l.Records > 0 && len(s.marks) > 0 {
		l.Seconds = max(s.now().Sub(s.marks[0].at).Seconds(), 0)
	}
	return l
}

// Status is the sink's state, for the gate's status and the doctor.
func (s *Sink) Status() audit.SinkStatus {
	st := audit.SinkStatus{State: "ok", Rows: s.rows.Load(), Behind: max(s.durable.Load()-s.dbSeq.Load(), 0)}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		st.State, st.Error = "down", s.err.Error()
	}
	return st
}

func (s *Sink) setErr(err error) {
	s.mu.Lock()
	was := s.err
	s.err = err
	s.mu.Unlock()
	switch {
	case err != nil && was == nil:
		s.log.Warn("audit database copy failed; records stay in the files and are copied when it is back", "err", err)
	case err == nil && was != nil:
		s.log.Info("audit database copy works again", "after", was.Error())
	}
}

// Run copies until ctx ends.
func (s *Sink) Run(ctx context.Context) {
	for ctx.Err() == nil {
		err := s.session(ctx)
		if ctx.Err() != nil {
			return
		}
		s.o.Metrics.Failed()
		s.setErr(err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(s.o.Retry):
		}
	}
}

// position is where the copy stands in the files.
type position struct {
	file   string
	lineNo int
	offset int64 // of the line after lineNo, when known (0: read from the start)
}

// session connects, creates the tables, and copies until a failure.
func (s *Sink) session(ctx context.Context) error {
	conn, err := connect(ctx, s.o.DSN)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if err := migrate(ctx, conn); err != nil {
		return err
	}
	// Where the copy stands in each file: a record of an old day can follow the new day's first
	// ones, so every file is followed, not only the newest.
	pos := map[string]*position{}
	rows, err := conn.Query(ctx, `SELECT file, max(line_no), max(seq) FROM lockhttp_audit WHERE gate = $1 AND instance = $2 GROUP BY file`, s.o.Gate, s.o.Instance)
	if err != nil {
		return fmt.Errorf("auditdb: read where the copy stands: %w", err)
	}
	for rows.Next() {
		var p position
		var seq *int64
		if err := rows.Scan(&p.file, &p.lineNo, &seq); err != nil {
			rows.Close()
			return fmt.Errorf("auditdb: read where the copy stands: %w", err)
		}
		pos[p.file] = &p
		if seq != nil {
			s.copied(*seq)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("auditdb: read where the copy stands: %w", err)
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		for {
			more, err := s.copyUp(ctx, conn, pos)
			if err != nil {
				return err
			}
			if !more {
				break
			}
		}
		s.setErr(nil)
		select {
		case <-ctx.Done():
			return nil
		case <-s.notify:
		case <-tick.C:
		}
	}
}

// row is one line to copy.
type row struct {
	file   string
	lineNo int
	line   string
	seq    *int64
	rec    map[string]any
}

// copyUp copies the lines of each file after its position that are on disk, in batches, then
// the head. more reports that a file had more lines than one round reads.
func (s *Sink) copyUp(ctx context.Context, conn *pgx.Conn, pos map[string]*position) (more bool, err error) {
	names, err := dayNames(s.o.Dir)
	if err != nil {
		return false, err
	}
	// The head is read first and copied last: the records it names are on disk (it is written
	// after them), so they are copied before it and the copy never names a record it lacks.
	var head []byte
	durable := s.durable.Load()
	if h, err := audit.ReadHead(filepath.Join(s.o.Dir, audit.HeadName)); err == nil {
		durable = max(durable, h.Seq)
		s.onDisk(h.Seq) // records of an earlier run of the gate count in the lag too
		head, _ = json.Marshal(h)
	}
	for _, name := range names {
		p := pos[name]
		if p == nil {
			p = &position{file: name}
			pos[name] = p
		}
		path := filepath.Join(s.o.Dir, name)
		if fi, err := os.Stat(path); err != nil || p.offset > 0 && fi.Size() == p.offset {
			continue // nothing new
		}
		rows, next, err := readFrom(path, *p, durable)
		if err != nil {
			return false, err
		}
		more = more || len(rows) == maxRows
		for len(rows) > 0 {
			n := min(len(rows), 500)
			if err := insert(ctx, conn, s.o.Gate, s.o.Instance, rows[:n]); err != nil {
				return false, err
			}
			for _, r := range rows[:n] {
				if r.seq != nil {
					s.copied(*r.seq)
				}
			}
			s.rows.Add(int64(n))
			s.o.Metrics.Copied(n)
			rows = rows[n:]
		}
		*p = next
	}
	if head != nil {
		if _, err := conn.Exec(ctx, `INSERT INTO lockhttp_audit_head (gate, instance, head) VALUES ($1, $2, $3)
			ON CONFLICT (gate, instance) DO UPDATE SET head = EXCLUDED.head`, s.o.Gate, s.o.Instance, string(head)); err != nil {
			return false, fmt.Errorf("auditdb: write the head: %w", err)
		}
	}
	return more, nil
}

func insert(ctx context.Context, conn *pgx.Conn, gate, instance string, rows []row) error {
	const cols = 16
	var b strings.Builder
	b.WriteString(`INSERT INTO lockhttp_audit (gate, instance, file, line_no, seq, line, signed, time, event, id, container, verdict, code, rule, status, record) VALUES `)
	args := make([]any, 0, len(rows)*cols)
	for i, r := range rows {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('(')
		for c := range cols {
			if c > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "$%d", i*cols+c+1)
		}
		b.WriteByte(')')
		var t *time.Time
		if ts, ok := r.rec["time"].(string); ok {
			if p, err := time.Parse(time.RFC3339Nano, ts); err == nil {
				t = &p
			}
		}
		var status *int
		if f, ok := r.rec["status"].(float64); ok {
			n := int(f)
			status = &n
		}
		var record *string
		if r.rec != nil {
			record = &r.line
		}
		args = append(args, gate, instance, r.file, r.lineNo, r.seq, r.line, strings.Contains(r.line, `,"sig":"`), t,
			str(r.rec, "event"), str(r.rec, "id"), str(r.rec, "container"), str(r.rec, "verdict"), str(r.rec, "code"), str(r.rec, "rule"), status, record)
	}
	b.WriteString(" ON CONFLICT DO NOTHING")
	if _, err := conn.Exec(ctx, b.String(), args...); err != nil {
		return fmt.Errorf("auditdb: insert %d rows from %s: %w", len(rows), rows[0].file, err)
	}
	return nil
}

func str(m map[string]any, k string) *string {
	if s, ok := m[k].(string); ok {
		return &s
	}
	return nil
}

// dayNames lists the directory's day files, oldest first.
func dayNames(dir string) ([]string, error) {
	m, err := filepath.Glob(filepath.Join(dir, "????-??-??.jsonl"))
	if err != nil {
		return nil, err
	}
	for i := range m {
		m[i] = filepath.Base(m[i])
	}
	slices.Sort(m)
	return m, nil
}

// maxRows bounds one read of a file, so catching up after a long outage goes in steps.
const maxRows = 20000

// readFrom reads the complete lines of path after pos whose records are on disk (numbered at
// most durable; a line without a number goes with the next one). It returns them and the
// position after the last one.
func readFrom(path string, pos position, durable int64) ([]row, position, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, pos, fmt.Errorf("auditdb: %w", err)
	}
	defer f.Close()
	lineNo, offset := 0, int64(0)
	if pos.offset > 0 {
		if _, err := f.Seek(pos.offset, io.SeekStart); err != nil {
			return nil, pos, err
		}
		lineNo, offset = pos.lineNo, pos.offset
	}
	r := bufio.NewReaderSize(f, 64<<10)
	var rows, held []row
	next := position{file: pos.file, lineNo: lineNo, offset: offset}
	for len(rows) < maxRows {
		line, err := r.ReadBytes('\n')
		if err != nil {
			break // EOF, or a line still being written
		}
		lineNo++
		offset += int64(len(line))
		if lineNo <= pos.lineNo {
			next.lineNo, next.offset = lineNo, offset
			continue
		}
		text := string(line[:len(line)-1])
		rw := row{file: filepath.Base(path), lineNo: lineNo, line: text}
		var rec map[string]any
		if json.Unmarshal(line, &rec) == nil {
			rw.rec = rec
			if n, ok := rec["seq"].(float64); ok {
				s := int64(n)
				rw.seq = &s
			}
		}
		if rw.seq == nil {
			held = append(held, rw)
			continue
		}
		if *rw.seq > durable {
			break
		}
		rows = append(rows, held...)
		held = held[:0]
		rows = append(rows, rw)
		next.lineNo, next.offset = lineNo, offset
	}
	return rows, next, nil
}

// Copy is one gate's database copy read back: its lines as day files, and its head.
type Copy struct {
	// Gate is the gate's identity and Instance its name among the gates of that identity (""
	// for none).
	Gate, Instance string
	Sources        []audit.Source
	Head           *audit.Head
}

// Name names the copy's chain: GATE@INSTANCE, or GATE alone for a gate without an instance.
func (c *Copy) Name() string {
	if c.Instance == "" {
		return c.Gate
	}
	return c.Gate + "@" + c.Instance
}

// Load reads every gate's database copy for verification, in the order of their names.
func Load(ctx context.Context, dsn string) ([]*Copy, error) {
	conn, err := connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT gate, instance, file, line FROM lockhttp_audit ORDER BY gate, instance, file, line_no`)
	if err != nil {
		return nil, fmt.Errorf("auditdb: read the copy: %w (create it with lockhttp audit migrate)", err)
	}
	var copies []*Copy
	byChain := map[[2]string]*Copy{}
	chain := func(gate, instance string) *Copy {
		k := [2]string{gate, instance}
		if byChain[k] == nil {
			byChain[k] = &Copy{Gate: gate, Instance: instance}
			copies = append(copies, byChain[k])
		}
		return byChain[k]
	}
	files := map[[3]string]*bytes.Buffer{}
	var order [][3]string
	for rows.Next() {
		var gate, instance, file, line string
		if err := rows.Scan(&gate, &instance, &file, &line); err != nil {
			return nil, err
		}
		chain(gate, instance)
		k := [3]string{gate, instance, file}
		b := files[k]
		if b == nil {
			b = &bytes.Buffer{}
			files[k] = b
			order = append(order, k)
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("auditdb: read the copy: %w", err)
	}
	for _, k := range order {
		data := files[k].Bytes()
		c := byChain[[2]string{k[0], k[1]}]
		c.Sources = append(c.Sources, audit.Source{Name: k[2], Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }})
	}
	heads, err := conn.Query(ctx, `SELECT gate, instance, head::text FROM lockhttp_audit_head`)
	if err != nil {
		return nil, fmt.Errorf("auditdb: read the heads: %w", err)
	}
	defer heads.Close()
	for heads.Next() {
		var gate, instance, head string
		if err := heads.Scan(&gate, &instance, &head); err != nil {
			return nil, err
		}
		var h audit.Head
		if json.Unmarshal([]byte(head), &h) != nil {
			continue
		}
		// A head whose records are all gone is verified too, and found short.
		chain(gate, instance).Head = &h
	}
	if err := heads.Err(); err != nil {
		return nil, fmt.Errorf("auditdb: read the heads: %w", err)
	}
	slices.SortFunc(copies, func(a, b *Copy) int { return strings.Compare(a.Name(), b.Name()) })
	return copies, nil
}
