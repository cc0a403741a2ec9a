package audit

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockhttp/lockhttp/internal/metrics"
)

// ErrClosed is returned by Write, and reported by Healthy, once Close has been called.
var ErrClosed = errors.New("audit: writer closed")

// maxBatch bounds how many records one write and one fsync carry.
const maxBatch = 1024

// Options configures Open. The zero value of each field is documented with it.
type Options struct {
	Dir    string           // directory of the day files; created 0700 if missing; required
	Now    func() time.Time // clock for a Record with a zero Time and for "today" at Open; nil means time.Now
	Logger *slog.Logger     // receives one line per failed batch and one on recovery; nil means discard
	// NoSync skips every fsync. For tests and benchmarks only: a crash can then lose records
	// that Write reported as written.
	NoSync bool
	// Metrics counts the batches, their records and fsync times. Nil: nothing counted.
	Metrics *metrics.Audit
	// SummarizeAfter is how many Writes of one container (Record.Container) in one second of
	// the clock get a record each; the ones past it are written as that second's summaries (see
	// summary.go). 0: every Write gets its own record.
	SummarizeAfter int
	// Budget bounds the bytes of the directory's files: a batch that would take them past it
	// fails (ErrBudget), as a full disk would, and so the gate refuses traffic until old files
	// are moved out or the budget is raised. 0: no budget.
	Budget int64
	// KeyFile is the audit key's private half (see key.go): the last record of a batch is signed
	// with it at most every signEvery, and a signed head is written each time records reach the
	// disk (within syncDelay of their write). A
	// key that cannot be read makes the writer unhealthy, as a failed write does, until it can
	// be (tried again at most once a second). "": records are chained and numbered, not signed.
	KeyFile string
	// CreateKey creates KeyFile (and its .pub) at Open when it is missing and the directory
	// holds no signed log yet; its public key is logged. A key is never created for a directory
	// that holds a signed log: its loss is an error to fix, not to paper over.
	CreateKey bool
	// Sink is told, by the committer, of each record that reached the disk (the database copy
	// reads them from the files). Nil: none.
	Sink Sink
}

// Sink follows the audit files: Durable says that the records up to seq are on disk, the last
// of them in file (a base name). It is called by the committer and must not block.
type Sink interface {
	Durable(seq int64, file string)
}

// Writer appends Records to the audit files of one directory.
//
// Files: DIR/YYYY-MM-DD.jsonl, one per UTC day of Record.Time, mode 0600, one JSON object per
// line (see Record.AppendJSON) with a last key "prev": the hex of the first 16 bytes of SHA-256
// of the previous line in the same file (without its newline), or of the file's base name for
// the first line. The first line of 2026-11-30.jsonl could be (see ExampleOpen):
//
//	{"time":"2026-11-30T14:03:07.123456789Z","event":"request","id":"r-1","container":"c1","agent":"claude","method":"GET","url":"https://example.com/","verdict":"FREE","code":"","rule":"reads","status":200,"bytes_out":512,"duration_ms":1.250,"seq":1,"prev":"865b3a57bcbe6e74069abba52cb0cf31"}
//
// Before "prev" each record has "seq", its number in the directory's one chain (1, 2, … across
// days), and the first record of a day file (after the first ever) has "prev_file", the hash of
// the record before it in the day before, so a removed or emptied day file is found. With
// Options.KeyFile, the last record of a batch ends with "sig" (key id, a colon and the Ed25519
// signature of the line's bytes before it) when signEvery has passed since the last signed one,
// and DIR/head.json is a signed head naming the last record on disk (see docs/audit.md and
// VerifyDir).
//
// One committer goroutine takes what is queued (up to maxBatch records), encodes it into one
// buffer and appends it with one write and one fsync per day file (group commit), then wakes
// the waiting Writes.
type Writer struct {
	dir    string
	now    func() time.Time
	log    *slog.Logger
	noSync bool
	fsys   fileSystem
	m      *metrics.Audit

	items sync.Pool     // of *item
	wake  chan struct{} // cap 1: the queue went from empty to non-empty, or Close was called
	done  chan struct{} // closed when the committer has returned

	summarizeAfter int
	budget         int64

	smu     sync.Mutex     // guards rateSec, rate and sums
	rateSec int64          // the clock's second that rate counts
	rate    map[string]int // Writes per container in rateSec
	sums    *summaries     // the summaries of the current second, nil when none

	size     atomic.Int64 // bytes of the directory's files, as last counted plus what was written since
	syncs    atomic.Int64 // fsyncs that succeeded
	written  atomic.Int64 // records written
	lastScan time.Time    // when size was last counted (committer's)

	seal *sealer // the audit key; nil: unsigned
	sink Sink
	// headWarning is what Open found wrong with the signed head (SpoiledText), "" when nothing.
	headWarning string
	// The global chain, owned by the committer: the last record's number, its line's hash and
	// its day file's base name; unsynced reports records written since the last head.
	seq      int64
	lastHash [2 * hashLen]byte
	lastFile string
	unsynced bool
	headFile *os.File // DIR/head.json, open once written
	headSlot int      // the slot the next head goes into
	headBuf  []byte
	sigBuf   []byte    // the message a batch's signature covers
	lastSig  time.Time // when a record was last signed (committer's clock)
	closing  bool      // the committer's last rounds: Close was called
	// dirtySince is when a file last went from synced to holding records not fsync'ed (the
	// committer's clock): under a steady load of Appends they are synced within syncDelay too.
	dirtySince time.Time

	mu      sync.Mutex // guards queue, waiters and closed
	queue   []*item    // records waiting for the committer, in arrival order
	waiters int        // items in queue queued by Write or Append
	closed  bool       // set by Close; Write then fails

	health atomic.Pointer[error] // last batch error; nil after a success

	closeOnce sync.Once
	closeErr  error // result of Close, set once

	// Owned by the committer goroutine (and by Close after the committer has returned).
	files   []*dayFile // open day files, least recently used first; at most maxOpen
	batch   []*item    // the batch being committed
	spare   []*item    // swapped with queue when the whole queue fits in one batch
	buf     []byte     // encoded lines of one day of one batch, reused
	batches int64      // number of write+fsync rounds that succeeded (benchmarks read it)
	records int64      // number of records those rounds carried
}

// maxOpen is how many day files stay open: today's and yesterday's (late records of a batch
// that straddles midnight).
const maxOpen = 2

// item is one queued record and the channel its Write waits on. Items are pooled; refs counts
// the two owners (the Write and the committer), and the last to let go returns it to the pool.
type item struct {
	rec  Record
	done chan error // cap 1
	refs atomic.Int32
	wait bool       // queued by Write, Append or a summary: a caller waits to be told
	sync bool       // queued by Write or a summary: its batch is fsync'ed before the waiter is told
	fan  *summaries // a summary record: its outcome goes to the summaries, not to done
	err  error      // the outcome of its commit (the committer's, until it is told)
}

// syncDelay is how long records queued by Submit or Append may stay written but not fsync'ed
// when no Write comes to carry them to disk. The signed head follows each fsync.
const syncDelay = 100 * time.Millisecond

// signEvery is how often a record's line carries a signature of its own (the last record of a
// batch, when signEvery has passed since the last one). Every record is covered by the signed
// head within syncDelay; the records' own signatures keep the log verifiable without its head
// (up to its last signed record). A signature costs tens of microseconds: one per batch was
// most of the audit's cost when batches hold a record or two.
const signEvery = time.Second

// Submitted records wait up to writeDelay, or until asyncBatch of them are queued or a Write
// comes, before they are written: nobody waits for them, so they share write calls too.
const (
	writeDelay = 5 * time.Millisecond
	asyncBatch = 64
)

// Open creates Dir if missing, opens (or creates) today's file to continue its chain, and starts
// the committer goroutine. Close stops it.
func Open(o Options) (*Writer, error) {
	if o.Dir == "" {
		return nil, errors.New("audit: no directory given; set Options.Dir")
	}
	return open(o, osFS{})
}

func open(o Options, fsys fileSystem) (*Writer, error) {
	w := &Writer{
		dir:    o.Dir,
		now:    o.Now,
		log:    o.Logger,
		noSync: o.NoSync,
		fsys:   fsys,
		m:      o.Metrics,
		wake:   make(chan struct{}, 1),
		done:   make(chan struct{}),

		summarizeAfter: o.SummarizeAfter,
		budget:         o.Budget,
		rate:           make(map[string]int),
		sink:           o.Sink,
	}
	if w.now == nil {
		w.now = time.Now
	}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	w.items.New = func() any { return &item{done: make(chan error, 1)} }
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, pathError("create", o.Dir, err)
	}
	if err := w.scan(); err != nil {
		return nil, err
	}
	last, err := lastRecord(o.Dir)
	if err != nil {
		return nil, err
	}
	w.seq, w.lastHash, w.lastFile = last.seq, last.hash, last.file
	if o.KeyFile != "" {
		if err := w.openKey(o); err != nil {
			return nil, err
		}
	}
	// Fail at start, not at the first request, when today's file cannot be opened or resumed.
	if _, err := w.file(dayOf(w.now())); err != nil {
		return nil, err
	}
	go w.run()
	if w.seal != nil && last.lines && !last.signed {
		// Records the gate wrote and did not sign (it stopped before their batch's end): sign
		// over them now, saying so.
		w.Submit(&Record{Event: EventSeal, Reason: "the gate started after records it had not signed (it stopped before signing their batch, or they were written without a key); this record's signature covers them"})
	}
	return w, nil
}

// EventSeal is the event of the record that signs over unsigned records at start.
const EventSeal = "audit-seal"

// openKey sets up the sealer, creating the key when asked and allowed.
func (w *Writer) openKey(o Options) error {
	w.seal = &sealer{path: o.KeyFile, now: w.now}
	if _, err := os.Lstat(o.KeyFile); errors.Is(err, os.ErrNotExist) {
		if !o.CreateKey || signedLog(o.Dir) {
			var kerr error = &keyError{fmt.Errorf("%s is missing and %s holds a signed log (or the key is not to be created); fix: restore the key from a backup; only if it is lost for good, make a new one with lockhttp audit keygen --key %s (verify the old records with the old public key)", o.KeyFile, o.Dir, o.KeyFile)}
			w.health.Store(&kerr)
			w.seal.err, w.seal.tried = kerr, w.now()
			return nil
		}
		pub, err := GenerateKey(o.KeyFile, nil)
		if err != nil {
			return err
		}
		w.log.Warn("audit: created the audit key; keep a copy of its public half out of reach of whoever can write the log",
			"key", o.KeyFile, "public", o.KeyFile+PubSuffix, "key_id", KeyID(pub))
	}
	key, _, err := w.seal.get()
	if err != nil {
		w.health.Store(&err)
		return nil
	}
	// A spoiled slot of the head is seen now, before this gate's heads overwrite it.
	path := filepath.Join(o.Dir, HeadName)
	pub := key.Public().(ed25519.PublicKey)
	if slots, err := SpoiledSlots(path, pub); err == nil && len(slots) > 0 {
		var seq int64
		if h, err := ReadHead(path, pub); err == nil && h.Check(map[string]ed25519.PublicKey{KeyID(pub): pub}) == nil {
			seq = h.Seq
		}
		w.headWarning = SpoiledText(path, slots, seq)
		w.log.Warn("audit: the signed head was found spoiled at start; run lockhttp verify-log", "dir", o.Dir, "finding", w.headWarning)
	}
	return nil
}

// Write queues r and waits until it is written (and fsync'ed unless NoSync); many concurrent
// Writes share one write and one fsync (group commit). A zero r.Time is set to the clock's now.
// Write copies r, so the caller may reuse it when Write returns. It returns an error when the
// write failed or the writer is closed (ErrClosed); when ctx ends first it returns ctx.Err() and
// the record stays queued (it is still written, and Healthy reports if that fails).
//
// With Options.SummarizeAfter, a Write past the container's rate goes into its second's summary
// and returns once that summary is on disk (within a second).
func (w *Writer) Write(ctx context.Context, r *Record) error {
	if w.summarizeAfter > 0 {
		if s := w.summarize(r); s != nil {
			return s.wait(ctx)
		}
	}
	return w.await(ctx, r, true)
}

// Append queues r and waits until it is written to its file, not until it is fsync'ed: that
// follows within syncDelay, or with the next Write's batch. A record Append returned for is in
// the file when the process is killed (the kernel has it); only a crash of the machine within
// syncDelay can lose it. Concurrent Appends share one write. The gate appends the record of a
// request it forwarded before the answer's last byte leaves it, so that no client holds an
// answer whose record a killed gate never wrote. Errors and ctx as for Write.
func (w *Writer) Append(ctx context.Context, r *Record) error {
	return w.await(ctx, r, false)
}

// await queues r for Write (sync) or Append and waits for the committer's word.
func (w *Writer) await(ctx context.Context, r *Record, sync bool) error {
	it := w.items.Get().(*item)
	it.rec = *r
	if it.rec.Time.IsZero() {
		it.rec.Time = w.now()
	}
	it.refs.Store(2)
	it.wait, it.sync = true, sync
	if !w.enqueue(it) {
		return ErrClosed
	}

	select {
	case err := <-it.done:
		w.release(it)
		return err
	case <-ctx.Done():
		select {
		case err := <-it.done: // written meanwhile: report that, not the context
			w.release(it)
			return err
		default:
		}
		w.release(it)
		return ctx.Err()
	}
}

// Submit queues r without waiting: the committer writes it with the next batch and fsyncs it
// with the next Write's batch, or within syncDelay. A failure is reported by Healthy (and the
// log). The gate submits the records of requests whose answer has already been sent; a refusal
// uses Write, so that its record is on disk before the answer.
func (w *Writer) Submit(r *Record) {
	it := w.items.Get().(*item)
	it.rec = *r
	if it.rec.Time.IsZero() {
		it.rec.Time = w.now()
	}
	it.refs.Store(1)
	it.wait, it.sync = false, false
	if !w.enqueue(it) {
		w.log.Error("audit record submitted after close: lost", "id", r.ID)
	}
}

// enqueue adds items to the queue, together, and wakes the committer; false when the writer is
// closed (they are then back in the pool).
func (w *Writer) enqueue(items ...*item) bool {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		for _, it := range items {
			it.rec, it.fan = Record{}, nil
			w.items.Put(it)
		}
		return false
	}
	n := len(w.queue)
	w.queue = append(w.queue, items...)
	signal := n == 0
	for _, it := range items {
		if it.wait {
			w.waiters++
			signal = true
		}
	}
	// The committer sleeps after it saw an empty queue, or lingers over submitted records only:
	// the first record, a Write, or a full batch of submitted records wakes it.
	signal = signal || n < asyncBatch && len(w.queue) >= asyncBatch
	w.mu.Unlock()
	if signal {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
	return true
}

// release drops one owner of it; the last one resets it and returns it to the pool.
func (w *Writer) release(it *item) {
	if it.refs.Add(-1) != 0 {
		return
	}
	select {
	case <-it.done: // a result nobody waited for
	default:
	}
	it.rec, it.fan = Record{}, nil
	w.items.Put(it)
}

// Healthy is nil while writes succeed, else the last write error (cleared by a later success).
// After Close it is ErrClosed. The gate checks it before letting a request out.
func (w *Writer) Healthy() error {
	if p := w.health.Load(); p != nil {
		return *p
	}
	return nil
}

// Close writes what is queued, then stops the committer and closes the files; later Writes fail
// with ErrClosed. It returns an error if a file does not close cleanly. Calling it again returns
// the same result.
func (w *Writer) Close() error {
	w.closeOnce.Do(func() {
		w.flushSummaries()
		w.mu.Lock()
		w.closed = true
		w.mu.Unlock()
		select {
		case w.wake <- struct{}{}:
		default:
		}
		<-w.done
		var errs []error
		for _, df := range w.files {
			if err := df.f.Close(); err != nil {
				errs = append(errs, pathError("close", df.path, err))
			}
		}
		w.files = nil
		if w.headFile != nil {
			w.headFile.Close()
		}
		w.closeErr = errors.Join(errs...)
		closed := ErrClosed
		w.health.Store(&closed)
	})
	return w.closeErr
}

// run is the committer: it commits batches until Close is called and the queue is empty.
func (w *Writer) run() {
	defer close(w.done)
	var timer *time.Timer
	for {
		if w.lingers() {
			if timer == nil {
				timer = time.NewTimer(writeDelay)
			} else {
				timer.Reset(writeDelay)
			}
			select {
			case <-w.wake:
				timer.Stop()
			case <-timer.C:
			}
		}
		w.gather()
		closed := w.take()
		w.closing = closed
		if len(w.batch) == 0 {
			if closed {
				w.syncDirty()
				return
			}
			if !w.anyDirty() {
				<-w.wake
				continue
			}
			if timer == nil {
				timer = time.NewTimer(syncDelay)
			} else {
				timer.Reset(syncDelay)
			}
			select {
			case <-w.wake:
				timer.Stop()
			case <-timer.C:
				w.syncDirty()
			}
			continue
		}
		w.commit()
		if w.anyDirty() && w.now().Sub(w.dirtySince) >= syncDelay {
			// A steady load of Appends leaves no quiet moment for the timer above.
			w.syncDirty()
		}
	}
}

// gather lets the goroutines that are ready to run queue their records before the committer
// takes a batch: under load, a request that queues its record wakes the committer at once, and
// the committer would otherwise write that one record alone, with a write call and a hand-off
// for each (group commit in name only). Each yield puts the committer behind the goroutines that
// can run; it takes the batch once a yield brought nothing more, or after gatherRounds. With
// nothing else to run, a yield returns at once: an idle gate adds no wait.
func (w *Writer) gather() {
	n := w.Queued()
	for i := 0; i < gatherRounds && n > 0; i++ {
		runtime.Gosched()
		m := w.Queued()
		if m == n {
			return
		}
		n = m
	}
}

// gatherRounds bounds the yields of gather.
const gatherRounds = 4

// lingers reports that only a few submitted records are queued: worth waiting for company.
func (w *Writer) lingers() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.queue) > 0 && w.waiters == 0 && len(w.queue) < asyncBatch && !w.closed
}

func (w *Writer) anyDirty() bool {
	for _, df := range w.files {
		if df.dirty {
			return true
		}
	}
	return false
}

// syncDirty fsyncs the files that hold submitted records not yet on disk.
func (w *Writer) syncDirty() {
	for _, df := range w.files {
		if !df.dirty || w.noSync {
			df.dirty = false
			continue
		}
		err := w.sync(df)
		if err != nil {
			err = pathError("sync", df.path, err)
			w.drop(df)
		} else {
			df.dirty = false
		}
		w.report(err, 0)
		if err != nil {
			return // w.files changed; the next round tries the rest
		}
	}
	w.durable()
}

// take moves up to maxBatch queued items into w.batch and reports whether Close was called.
func (w *Writer) take() (closed bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case len(w.queue) == 0:
		w.batch = w.batch[:0]
	case len(w.queue) <= maxBatch:
		w.batch, w.queue, w.spare = w.queue, w.spare[:0], nil
		w.waiters = 0
	default:
		w.batch = append(w.spare[:0], w.queue[:maxBatch]...)
		n := copy(w.queue, w.queue[maxBatch:])
		clear(w.queue[n:])
		w.queue = w.queue[:n]
		w.spare = nil
		w.waiters = 0
		for _, it := range w.queue {
			if it.wait {
				w.waiters++
			}
		}
	}
	return w.closed
}

// commit writes w.batch, one write and one fsync per day it touches, and wakes every waiter.
func (w *Writer) commit() {
	batch := w.batch
	for len(batch) > 0 {
		d := dayOf(batch[0].rec.Time)
		n := 1
		for n < len(batch) && dayOf(batch[n].rec.Time) == d {
			n++
		}
		err := classify(w.commitDay(d, batch[:n]))
		w.report(err, n)
		w.m.Batch(n, err)
		for _, it := range batch[:n] {
			it.err = err
		}
		batch = batch[n:]
	}
	// The head names the batch before anyone waiting on it is told.
	if !w.anyDirty() {
		w.durable()
	}
	for _, it := range w.batch {
		switch {
		case it.fan != nil:
			it.fan.finish(it.err)
		case it.wait:
			it.done <- it.err
		}
		it.err = nil
		w.release(it)
	}
	clear(w.batch)
	w.spare, w.batch = w.batch[:0], nil
}

// durable writes the signed head and tells the sink, once what was written is on disk.
func (w *Writer) durable() {
	if !w.unsynced {
		return
	}
	if err := w.writeHead(); err != nil {
		w.report(err, 0)
		return
	}
	w.unsynced = false
	if w.sink != nil {
		w.sink.Durable(w.seq, w.lastFile)
	}
}

// writeHead writes a signed head naming the last record into DIR/head.json. The file has two
// slots of headSlot bytes, written in turn with one pwrite each: a write cut short by a crash
// spoils one slot, and the other still holds the head before it, so the head is replaced
// atomically as a reader sees it (ReadHeads). It has no fsync of its own: after a crash the head
// may be older than the log, never newer.
func (w *Writer) writeHead() error {
	if w.seal == nil || w.seq == 0 {
		return nil
	}
	key, kid, err := w.seal.get()
	if err != nil {
		return err
	}
	path := filepath.Join(w.dir, HeadName)
	if w.headFile == nil {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return classify(pathError("open", path, err))
		}
		w.headFile = f
	}
	h := Head{Seq: w.seq, Hash: string(w.lastHash[:]), File: w.lastFile, Time: w.now().UTC()}
	h.sign(key, kid)
	b := h.appendSlot(w.headBuf[:0])
	w.headBuf = b
	if _, err := w.headFile.WriteAt(b, int64(w.headSlot)*headSlot); err != nil {
		w.headFile.Close()
		w.headFile = nil
		return classify(pathError("write", path, err))
	}
	w.headSlot ^= 1
	return nil
}

// maxWrite is the size at which a batch's buffer is written out before the batch is complete
// (the fsync stays one per batch), so a batch of huge records needs no huge buffer.
const maxWrite = 1 << 20

// commitDay appends the records of items, all of day d, to d's file with one write (more when
// they exceed maxWrite bytes) and one fsync. When a write or the fsync fails, the file is cut back
// to where the batch began, so that a failed batch leaves no torn line and the chain goes on from
// the last record that was written.
func (w *Writer) commitDay(d day, items []*item) error {
	df, err := w.file(d)
	if err != nil {
		return err
	}
	var (
		key ed25519.PrivateKey
		kid string
	)
	if w.seal != nil {
		if key, kid, err = w.seal.get(); err != nil {
			return err
		}
	}
	// The last record of the batch is signed once signEvery has passed since the last signed
	// one, and at Close; the signed head, written once the batch is on disk, covers the rest.
	signs := key != nil && (w.closing || w.now().Sub(w.lastSig) >= signEvery)
	buf := w.buf[:0]
	prev := df.prev
	seq, last := w.seq, w.lastHash
	needSync := false
	var wrote int64
	for i, it := range items {
		needSync = needSync || it.sync
		start := len(buf)
		seq++
		buf = it.rec.appendFields(buf)
		buf = append(buf, `,"seq":`...)
		buf = strconv.AppendInt(buf, seq, 10)
		if i == 0 && df.size == 0 && seq > 1 {
			// The first record of a day names the record before it, in the day before.
			buf = append(buf, `,"prev_file":"`...)
			buf = append(buf, last[:]...)
			buf = append(buf, '"')
		}
		buf = append(buf, `,"prev":"`...)
		buf = append(buf, prev[:]...)
		buf = append(buf, '"')
		if signs && i == len(items)-1 {
			buf = appendSig(buf, start, key, kid, &w.sigBuf)
		} else {
			buf = append(buf, '}')
		}
		prev = chainHash(buf[start:])
		last = prev
		buf = append(buf, '\n')
		if len(buf) >= maxWrite {
			if err = w.write(df, buf); err != nil {
				break
			}
			wrote += int64(len(buf))
			buf = buf[:0]
		}
	}
	if err == nil && len(buf) > 0 {
		err = w.write(df, buf)
		wrote += int64(len(buf))
	}
	if cap(buf) > 4*maxWrite {
		buf = nil // one huge batch grew it; do not keep that much
	}
	w.buf = buf[:0]
	if err == nil && needSync && !w.noSync {
		if err = w.sync(df); err != nil {
			err = pathError("sync", df.path, err)
		} else {
			w.syncs.Add(1)
		}
	}
	if err != nil {
		w.cutBack(df)
		return err
	}
	df.size += wrote
	df.prev = prev
	if !needSync && !df.dirty {
		w.dirtySince = w.now()
	}
	df.dirty = !needSync
	if signs {
		w.lastSig = w.now()
	}
	w.seq, w.lastHash, w.lastFile = seq, last, filepath.Base(df.path)
	w.unsynced = true
	w.batches++
	w.records += int64(len(items))
	w.written.Add(int64(len(items)))
	return nil
}

// write appends buf to df's file, within the budget.
func (w *Writer) write(df *dayFile, buf []byte) error {
	if w.budget > 0 && w.size.Load()+int64(len(buf)) > w.budget {
		// Old files may have been moved out since the last count.
		if w.now().Sub(w.lastScan) >= time.Second {
			w.scan()
		}
		if w.size.Load()+int64(len(buf)) > w.budget {
			return &budgetError{dir: w.dir, budget: w.budget, size: w.size.Load()}
		}
	}
	n, err := df.f.Write(buf)
	w.size.Add(int64(n))
	if err != nil {
		return pathError("write", df.path, err)
	}
	return nil
}

// cutBack truncates df's file to where the failed batch began; when that fails too, df is
// dropped, so that the next batch reopens it and continues the chain from what is really there.
func (w *Writer) cutBack(df *dayFile) {
	fi, err := df.f.Stat()
	if err == nil {
		err = df.f.Truncate(df.size)
	}
	if err != nil {
		w.drop(df)
		return
	}
	w.size.Add(df.size - fi.Size())
}

// file returns the open file for d, opening it (and closing the least recently used one) when
// needed, and marks it most recently used.
func (w *Writer) file(d day) (*dayFile, error) {
	for i, df := range w.files {
		if df.day == d {
			if i != len(w.files)-1 {
				copy(w.files[i:], w.files[i+1:])
				w.files[len(w.files)-1] = df
			}
			return df, nil
		}
	}
	df, err := openDay(w.fsys, w.dir, d, !w.noSync)
	if err != nil {
		return nil, err
	}
	if len(w.files) == maxOpen {
		old := w.files[0]
		if err := old.f.Close(); err != nil {
			// Its records were fsync'ed already; a failed close loses nothing.
			w.log.Warn("audit file close failed", "path", old.path, "err", err)
		}
		w.files = append(w.files[:0], w.files[1:]...)
	}
	w.files = append(w.files, df)
	return df, nil
}

// drop closes df and forgets it.
func (w *Writer) drop(df *dayFile) {
	df.f.Close() // the write error is what matters
	for i, o := range w.files {
		if o == df {
			w.files = append(w.files[:i], w.files[i+1:]...)
			break
		}
	}
}

// report sets Healthy from the outcome of one day's commit of n records and logs changes: one
// line per failed commit, one when writes succeed again.
func (w *Writer) report(err error, n int) {
	err = classify(err)
	if err != nil {
		e := err // only a failure allocates
		w.health.Store(&e)
		w.log.Error("audit write failed; the gate refuses traffic until audit writes succeed",
			"records", n, "err", err)
		return
	}
	if p := w.health.Load(); p != nil {
		w.health.Store(nil)
		w.log.Info("audit writes succeed again", "after", (*p).Error())
	}
}
