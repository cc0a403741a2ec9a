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
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"

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
	// 3: the lines the text column cannot hold as they are. raw keeps the bytes of a line that
	// is not UTF-8 text free of NUL bytes, or that the database refused (Load reads raw then);
	// note says why a row is not the line as it is (NULL: it is), and line then holds the note.
	`ALTER TABLE lockhttp_audit ADD COLUMN raw bytea;
ALTER TABLE lockhttp_audit ADD COLUMN note text;`,
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
func migrate(ctx context.Context, conn *pgconn.PgConn) error {
	commit, rollback, err := begin(ctx, conn)
	if err != nil {
		return fmt.Errorf("auditdb: migrate: %w", err)
	}
	defer rollback()
	var lock params
	lock.int(oidInt8, migrateLock)
	if err := execParams(ctx, conn, `SELECT pg_advisory_xact_lock($1)`, lock); err != nil {
		return fmt.Errorf("auditdb: migrate: %w", err)
	}
	if err := exec(ctx, conn, `CREATE TABLE IF NOT EXISTS lockhttp_audit_schema (version integer NOT NULL)`); err != nil {
		return fmt.Errorf("auditdb: migrate: %w", err)
	}
	version, err := schemaVersion(ctx, conn)
	if err != nil {
		return fmt.Errorf("auditdb: migrate: %w", err)
	}
	if version > len(migrations) {
		return fmt.Errorf("auditdb: the database's audit tables are at version %d, newer than this binary's %d; upgrade the gate", version, len(migrations))
	}
	for i := version; i < len(migrations); i++ {
		if err := exec(ctx, conn, migrations[i]); err != nil {
			return fmt.Errorf("auditdb: migration %d: %w", i+1, err)
		}
	}
	if version < len(migrations) {
		if err := exec(ctx, conn, `DELETE FROM lockhttp_audit_schema; INSERT INTO lockhttp_audit_schema VALUES (`+fmt.Sprint(len(migrations))+`)`); err != nil {
			return fmt.Errorf("auditdb: migrate: %w", err)
		}
	}
	if err := commit(); err != nil {
		return fmt.Errorf("auditdb: migrate: %w", err)
	}
	return nil
}

// schemaVersion reads how far the database's tables are.
func schemaVersion(ctx context.Context, conn *pgconn.PgConn) (int, error) {
	version, rows := 0, 0
	err := query(ctx, conn, `SELECT coalesce(max(version), 0) FROM lockhttp_audit_schema`, params{}, 1, nil, func(vals [][]byte) error {
		v, err := intValue("version", vals[0], 0, math.MaxInt32)
		version, rows = int(v), rows+1
		return err
	})
	if err == nil && rows != 1 {
		err = fmt.Errorf("%d rows, want 1", rows)
	}
	if err != nil {
		return 0, fmt.Errorf("read lockhttp_audit_schema: %w", err)
	}
	return version, nil
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
	// Timeout bounds each step of the copy (connecting and reading where it stands, one
	// round of copying): a database that stops answering, or holds a lock the copy waits on,
	// is a failure the sink retries, never a copy stalled for good. Zero: 2m.
	Timeout time.Duration
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
	if s.o.Timeout == 0 {
		s.o.Timeout = 2 * time.Minute
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
	sctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	conn, pos, err := s.open(sctx)
	cancel()
	if err != nil {
		return s.timedOut(sctx, err)
	}
	defer conn.Close(context.Background())
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		for {
			rctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
			more, err := s.copyUp(rctx, conn, pos)
			cancel()
			if err != nil {
				return s.timedOut(rctx, err)
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

// open connects, creates the tables, and reads where the copy stands in each file.
func (s *Sink) open(ctx context.Context) (*pgconn.PgConn, map[string]*position, error) {
	conn, err := connect(ctx, s.o.DSN)
	if err != nil {
		return nil, nil, err
	}
	if err := migrate(ctx, conn); err != nil {
		conn.Close(context.Background())
		return nil, nil, err
	}
	// Where the copy stands in each file: a record of an old day can follow the new day's first
	// ones, so every file is followed, not only the newest.
	pos, err := s.positions(ctx, conn)
	if err != nil {
		conn.Close(context.Background())
		return nil, nil, err
	}
	return conn, pos, nil
}

// timedOut says so when err came of a step's deadline.
func (s *Sink) timedOut(ctx context.Context, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("auditdb: the database did not finish a step of the copy within %v (it does not answer, or a lock holds the copy): %w", s.o.Timeout, err)
	}
	return err
}

// positions reads where the copy stands in each file the database has of this gate, and notes
// the last record number it has.
func (s *Sink) positions(ctx context.Context, conn *pgconn.PgConn) (map[string]*position, error) {
	pos := map[string]*position{}
	var p params
	p.text(s.o.Gate)
	p.text(s.o.Instance)
	var last int64
	err := query(ctx, conn, `SELECT file, max(line_no), max(seq) FROM lockhttp_audit WHERE gate = $1 AND instance = $2 GROUP BY file`, p, 3, nil, func(vals [][]byte) error {
		file, err := textValue("file", vals[0])
		if err != nil {
			return err
		}
		lineNo, err := intValue("line_no", vals[1], 0, math.MaxInt32)
		if err != nil {
			return fmt.Errorf("file %s: %w", quoteValue(vals[0]), err)
		}
		pos[file] = &position{file: file, lineNo: int(lineNo)}
		if vals[2] != nil { // NULL: the file's lines have no record number
			seq, err := intValue("seq", vals[2], math.MinInt64, math.MaxInt64)
			if err != nil {
				return fmt.Errorf("file %s: %w", quoteValue(vals[0]), err)
			}
			last = max(last, seq)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("auditdb: read where the copy stands: %w", err)
	}
	s.copied(last)
	return pos, nil
}

// row is one line to copy.
type row struct {
	file   string
	lineNo int
	line   string
	seq    *int64
	rec    map[string]any
	// raw is the line's bytes when the text column cannot hold them (nil: line is the line);
	// note says why the row is not the line as it is ("": it is), and line is then the note.
	raw  []byte
	note string
}

// keepBytes makes r a row that keeps the line's bytes in raw, because of why: its columns
// read from the record are left NULL.
func (r *row) keepBytes(why string) {
	if r.raw == nil {
		r.raw = []byte(r.line)
	}
	r.note = why
	r.line = fmt.Sprintf("auditdb: line %d of %s is kept as bytes in column raw (column note says why)", r.lineNo, r.file)
	r.rec = nil
}

// size is about what the row takes in memory and in a statement.
func (r *row) size() int { return len(r.line) + len(r.raw) + 256 }

// copyUp copies the lines of each file after its position that are on disk, in batches, then
// the head. more reports that a file had more lines than one round reads.
func (s *Sink) copyUp(ctx context.Context, conn *pgconn.PgConn, pos map[string]*position) (more bool, err error) {
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
		rows, next, full, err := readFrom(path, *p, durable)
		if err != nil {
			return false, err
		}
		more = more || full
		for len(rows) > 0 {
			n, size := 0, 0
			for n < len(rows) && n < maxBatchRows && (n == 0 || size+rows[n].size() <= maxBatchBytes) {
				size += rows[n].size()
				n++
			}
			if err := s.insert(ctx, conn, rows[:n]); err != nil {
				return false, err
			}
			for _, r := range rows[:n] {
				if r.seq != nil {
					s.copied(*r.seq)
				}
				if r.note != "" {
					s.log.Warn("audit database copy: a line is not in column line as it is; its row says why", "file", r.file, "line", r.lineNo, "note", r.note)
				}
			}
			s.rows.Add(int64(n))
			s.o.Metrics.Copied(n)
			rows = rows[n:]
		}
		*p = next
	}
	if head != nil {
		var p params
		p.text(s.o.Gate)
		p.text(s.o.Instance)
		p.add(oidJSON, head)
		if err := execParams(ctx, conn, `INSERT INTO lockhttp_audit_head (gate, instance, head) VALUES ($1, $2, $3)
			ON CONFLICT (gate, instance) DO UPDATE SET head = EXCLUDED.head`, p); err != nil {
			return false, fmt.Errorf("auditdb: write the head: %w", err)
		}
	}
	return more, nil
}

// Bounds of one INSERT: at most maxBatchRows rows of about maxBatchBytes in all (a longer
// line goes alone), so a statement stays far under what the server takes in one message (1 GiB).
const (
	maxBatchRows  = 500
	maxBatchBytes = 8 << 20
)

// insert writes rows. When the database refuses a value (a data exception, a constraint of its
// own), it writes them one by one, and a row it refuses is written again with the line's
// bytes in raw and the refusal in note: one line, whatever an agent put into it, never stops
// the copy, and it is still copied whole.
func (s *Sink) insert(ctx context.Context, conn *pgconn.PgConn, rows []row) error {
	err := insert(ctx, conn, s.o.Gate, s.o.Instance, rows)
	if !refused(err) {
		return err
	}
	for i := range rows {
		err := insert(ctx, conn, s.o.Gate, s.o.Instance, rows[i:i+1])
		if !refused(err) {
			if err != nil {
				return err
			}
			continue
		}
		pe := (*pgconn.PgError)(nil)
		errors.As(err, &pe)
		rows[i].keepBytes(fmt.Sprintf("the database refused the line as text: %s (SQLSTATE %s)", pe.Message, pe.Code))
		if err := insert(ctx, conn, s.o.Gate, s.o.Instance, rows[i:i+1]); err != nil {
			return err
		}
	}
	return nil
}

// refused reports whether err is the database refusing a value: a data exception (class 22),
// a constraint (23) or a limit (54), which the same statement would meet again.
func refused(err error) bool {
	pe := (*pgconn.PgError)(nil)
	if !errors.As(err, &pe) {
		return false
	}
	return strings.HasPrefix(pe.Code, "22") || strings.HasPrefix(pe.Code, "23") || strings.HasPrefix(pe.Code, "54")
}

// insert writes rows in one statement; a line the database has is kept as it is.
func insert(ctx context.Context, conn *pgconn.PgConn, gate, instance string, rows []row) error {
	const cols = 18
	var b strings.Builder
	b.WriteString(`INSERT INTO lockhttp_audit (gate, instance, file, line_no, seq, line, signed, time, event, id, container, verdict, code, rule, status, record, raw, note) VALUES `)
	p := params{values: make([][]byte, 0, len(rows)*cols), oids: make([]uint32, 0, len(rows)*cols)}
	for i, r := range rows {
		if i > 0 {
			b.WriteByte(',')
		}
		placeholders(&b, i*cols+1, cols)
		p.text(gate)
		p.text(instance)
		p.text(r.file)
		p.int(oidInt4, int64(r.lineNo))
		p.intOrNull(oidInt8, r.seq)
		p.text(r.line)
		signed := strings.Contains(r.line, `,"sig":"`)
		if r.raw != nil {
			signed = bytes.Contains(r.raw, []byte(`,"sig":"`))
		}
		p.add(oidBool, []byte(strconv.FormatBool(signed)))
		var t []byte
		if ts, ok := r.rec["time"].(string); ok {
			if parsed, err := time.Parse(time.RFC3339Nano, ts); err == nil {
				t = []byte(timestamptz(parsed))
			}
		}
		p.add(oidTimestamptz, t)
		for _, k := range []string{"event", "id", "container", "verdict", "code", "rule"} {
			p.textOrNull(str(r.rec, k))
		}
		var status *int64
		if f, ok := r.rec["status"].(float64); ok {
			if n, ok := int4(f); ok {
				status = &n
			}
		}
		p.intOrNull(oidInt4, status)
		var record []byte
		if r.rec != nil {
			record = []byte(r.line)
		}
		p.add(oidJSON, record)
		p.bytes(r.raw)
		var note *string
		if r.note != "" {
			note = &r.note
		}
		p.textOrNull(note)
	}
	b.WriteString(" ON CONFLICT DO NOTHING")
	if err := execParams(ctx, conn, b.String(), p); err != nil {
		return fmt.Errorf("auditdb: insert %d rows from %s: %w", len(rows), rows[0].file, err)
	}
	return nil
}

// str is the string at k of m, as a text column holds it: a NUL (which an agent can put into a
// field, written \u0000 in the line; the text type refuses it) becomes U+FFFD. The line and
// the record column keep the value as it is.
func str(m map[string]any, k string) *string {
	if s, ok := m[k].(string); ok {
		s = strings.ReplaceAll(s, "\x00", "\uFFFD")
		return &s
	}
	return nil
}

// dayNames lists the directory's day files, oldest first.
func dayNames(dir string) ([]string, error) {
	m, err := filepath.Glob(filepath.Join(dir, "[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9].jsonl"))
	if err != nil {
		return nil, err
	}
	for i := range m {
		m[i] = filepath.Base(m[i]) // of digits: a name the text column holds
	}
	slices.Sort(m)
	return m, nil
}

// maxRows and maxReadBytes bound one read of a file, so catching up after a long outage goes
// in steps, in bounded memory.
const (
	maxRows      = 20000
	maxReadBytes = 32 << 20
)

// maxLine is the audit's bound on a line (audit's maxLine: the writer never writes a longer
// one, and Verify rejects it); a longer line in a file is not copied, but noted in its place.
const maxLine = 64 << 20

// readFrom reads the complete lines of path after pos whose records are on disk (numbered at
// most durable; a line without a number goes with the next one, unless a read holds only such
// lines). It returns them, the position after the last one, and whether it stopped at its
// bounds (maxRows, maxReadBytes) with more to read. A line longer than maxLine is read through
// and dropped in bounded memory: its row says so.
func readFrom(path string, pos position, durable int64) (rows []row, next position, full bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, pos, false, fmt.Errorf("auditdb: %w", err)
	}
	defer f.Close()
	lineNo, offset := 0, int64(0)
	if pos.offset > 0 {
		if _, err := f.Seek(pos.offset, io.SeekStart); err != nil {
			return nil, pos, false, fmt.Errorf("auditdb: %w", err)
		}
		lineNo, offset = pos.lineNo, pos.offset
	}
	r := bufio.NewReaderSize(f, 64<<10)
	var held []row
	var size, heldSize int
	next = position{file: pos.file, lineNo: lineNo, offset: offset}
	heldNext := next
	for {
		if len(rows)+len(held) >= maxRows || size+heldSize >= maxReadBytes {
			full = true
			break
		}
		line, n, long, err := readLine(r, f, offset, maxLine+1)
		if err != nil {
			if err != io.EOF {
				return nil, pos, false, fmt.Errorf("auditdb: read %s: %w", path, err)
			}
			break // EOF, or a line still being written
		}
		lineNo++
		offset += n
		if lineNo <= pos.lineNo {
			next.lineNo, next.offset = lineNo, offset
			heldNext = next
			continue
		}
		rw := row{file: filepath.Base(path), lineNo: lineNo}
		switch {
		case long:
			why := fmt.Sprintf("the line is %d bytes long, past the audit's bound of %d: not copied", n-1, maxLine)
			rw.line, rw.note = fmt.Sprintf("auditdb: line %d of %s is not in the copy: %s", lineNo, rw.file, why), why
		default:
			line = line[:len(line)-1]
			rw.line = string(line)
			var rec map[string]any
			if json.Unmarshal(line, &rec) == nil {
				rw.rec = rec
				if f, ok := rec["seq"].(float64); ok && f >= math.MinInt64 && f < math.MaxInt64 {
					s := int64(f)
					rw.seq = &s
				}
			}
			if !utf8.Valid(line) || bytes.IndexByte(line, 0) >= 0 {
				rw.keepBytes("the line is not UTF-8 text free of NUL bytes, which the text column holds")
			}
		}
		if rw.seq == nil {
			held = append(held, rw)
			heldSize += rw.size()
			heldNext.lineNo, heldNext.offset = lineNo, offset
			continue
		}
		if *rw.seq > durable {
			break
		}
		rows = append(rows, held...)
		size += heldSize + rw.size()
		held, heldSize = held[:0], 0
		rows = append(rows, rw)
		next.lineNo, next.offset = lineNo, offset
		heldNext = next
	}
	if full && len(rows) == 0 {
		// Only lines without a number, more than one read holds: copied as they are, or the
		// copy would read them again for ever.
		rows, next = held, heldNext
	}
	return rows, next, full, nil
}

// readLine reads the line of f at start from r (which reads f there), its newline included. A
// line that fits r's buffer comes from it (valid until the next read); a longer one is read
// through, then read again whole from f into a slice of its size when it is at most limit
// bytes, and dropped (long) when it is longer: so memory is the line's size at most, and a line
// past the bound takes none. n is the line's length; err is io.EOF for a line without its
// newline yet.
func readLine(r *bufio.Reader, f io.ReaderAt, start int64, limit int) (line []byte, n int64, long bool, err error) {
	chunk, err := r.ReadSlice('\n')
	n = int64(len(chunk))
	if err == nil {
		return chunk, n, false, nil
	}
	for err == bufio.ErrBufferFull {
		chunk, err = r.ReadSlice('\n')
		n += int64(len(chunk))
	}
	if err != nil {
		return nil, n, false, err
	}
	if n > int64(limit) {
		return nil, n, true, nil
	}
	line = make([]byte, n)
	if _, err := f.ReadAt(line, start); err != nil {
		return nil, n, false, err
	}
	return line, n, false, nil
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

// describe names the copy's chain in an error.
func (c *Copy) describe() string {
	if c.Gate == "" && c.Instance == "" {
		return "the gate without an identity"
	}
	return c.Name()
}

// Load reads every gate's database copy for verification, in the order of their names.
func Load(ctx context.Context, dsn string) ([]*Copy, error) {
	conn, err := connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
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
	// raw, in binary: the line's bytes themselves, when the text column could not hold them. A
	// database of a version before raw (3) has none.
	raw := "raw"
	if v, err := schemaVersion(ctx, conn); err == nil && v < 3 {
		raw = "NULL::bytea"
	}
	err = query(ctx, conn, `SELECT gate, instance, file, line, `+raw+` FROM lockhttp_audit ORDER BY gate, instance, file, line_no`, params{}, 5, []int16{0, 0, 0, 0, 1}, func(vals [][]byte) error {
		var k [3]string
		for i, col := range []string{"gate", "instance", "file"} {
			v, err := textValue(col, vals[i])
			if err != nil {
				return err
			}
			k[i] = v
		}
		line, err := textValue("line", vals[3])
		if err != nil {
			return fmt.Errorf("file %s of %s: %w", quoteValue([]byte(k[2])), chain(k[0], k[1]).describe(), err)
		}
		if vals[4] != nil {
			line = string(vals[4])
		}
		chain(k[0], k[1])
		b := files[k]
		if b == nil {
			b = &bytes.Buffer{}
			files[k] = b
			order = append(order, k)
		}
		b.WriteString(line)
		b.WriteByte('\n')
		return nil
	})
	if pe := (*pgconn.PgError)(nil); errors.As(err, &pe) && pe.Code == "42P01" { // undefined_table
		return nil, fmt.Errorf("auditdb: read the copy: %w (create it with lockhttp audit migrate)", err)
	} else if err != nil {
		return nil, fmt.Errorf("auditdb: read the copy: %w", err)
	}
	for _, k := range order {
		data := files[k].Bytes()
		c := byChain[[2]string{k[0], k[1]}]
		c.Sources = append(c.Sources, audit.Source{Name: k[2], Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }})
	}
	err = query(ctx, conn, `SELECT gate, instance, head::text FROM lockhttp_audit_head`, params{}, 3, nil, func(vals [][]byte) error {
		gate, err := textValue("gate", vals[0])
		if err != nil {
			return err
		}
		instance, err := textValue("instance", vals[1])
		if err != nil {
			return err
		}
		c := chain(gate, instance)
		var h audit.Head
		if err := json.Unmarshal(vals[2], &h); err != nil || vals[2] == nil {
			// Not a head the gate wrote (it writes a JSON object, signed): refused rather than
			// taken as missing, which would only warn.
			return fmt.Errorf("the head of %s is %s, not a head the gate writes: something other than the gate wrote it", c.describe(), quoteValue(vals[2]))
		}
		// A head whose records are all gone is verified too, and found short.
		c.Head = &h
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("auditdb: read the heads: %w", err)
	}
	slices.SortFunc(copies, func(a, b *Copy) int { return strings.Compare(a.Name(), b.Name()) })
	return copies, nil
}
