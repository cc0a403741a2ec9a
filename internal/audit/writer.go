package audit

import (
	"context"
	"errors"
	"log/slog"
	"os"
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
}

// Writer appends Records to the audit files of one directory.
//
// Files: DIR/YYYY-MM-DD.jsonl, one per UTC day of Record.Time, mode 0600, one JSON object per
// line (see Record.AppendJSON) with a last key "prev": the hex of the first 16 bytes of SHA-256
// of the previous line in the same file (without its newline), or of the file's base name for
// the first line. The first line of 2026-11-30.jsonl could be (see ExampleOpen):
//
//	{"time":"2026-11-30T14:03:07.123456789Z","event":"request","id":"r-1","container":"c1","agent":"claude","method":"GET","url":"https://example.com/","verdict":"FREE","code":"","rule":"reads","status":200,"bytes_out":512,"duration_ms":1.250,"prev":"865b3a57bcbe6e74069abba52cb0cf31"}
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

	mu      sync.Mutex // guards queue, waiters and closed
	queue   []*item    // records waiting for the committer, in arrival order
	waiters int        // items in queue queued by Write
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
	wait bool // queued by Write: its batch is fsync'ed before the waiter is told
}

// syncDelay is how long records queued by Submit may stay written but not fsync'ed when no
// Write comes to carry them to disk.
const syncDelay = 100 * time.Millisecond

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
	// Fail at start, not at the first request, when today's file cannot be opened or resumed.
	if _, err := w.file(dayOf(w.now())); err != nil {
		return nil, err
	}
	go w.run()
	return w, nil
}

// Write queues r and waits until it is written (and fsync'ed unless NoSync); many concurrent
// Writes share one write and one fsync (group commit). A zero r.Time is set to the clock's now.
// Write copies r, so the caller may reuse it when Write returns. It returns an error when the
// write failed or the writer is closed (ErrClosed); when ctx ends first it returns ctx.Err() and
// the record stays queued (it is still written, and Healthy reports if that fails).
func (w *Writer) Write(ctx context.Context, r *Record) error {
	it := w.items.Get().(*item)
	it.rec = *r
	if it.rec.Time.IsZero() {
		it.rec.Time = w.now()
	}
	it.refs.Store(2)
	it.wait = true
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
	it.wait = false
	if !w.enqueue(it) {
		w.log.Error("audit record submitted after close: lost", "id", r.ID)
	}
}

// enqueue adds it to the queue and wakes the committer; false when the writer is closed (it is
// then back in the pool).
func (w *Writer) enqueue(it *item) bool {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		it.rec = Record{}
		w.items.Put(it)
		return false
	}
	w.queue = append(w.queue, it)
	if it.wait {
		w.waiters++
	}
	// The committer sleeps after it saw an empty queue, or lingers over submitted records only:
	// the first record, a Write, or a full batch of submitted records wakes it.
	signal := len(w.queue) == 1 || it.wait || len(w.queue) == asyncBatch
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
	it.rec = Record{}
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
		closed := w.take()
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
	}
}

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
		err := w.commitDay(d, batch[:n])
		w.report(err, n)
		w.m.Batch(n, err)
		for _, it := range batch[:n] {
			if it.wait {
				it.done <- err
			}
			w.release(it)
		}
		batch = batch[n:]
	}
	clear(w.batch)
	w.spare, w.batch = w.batch[:0], nil
}

// maxWrite is the size at which a batch's buffer is written out before the batch is complete
// (the fsync stays one per batch), so a batch of huge records needs no huge buffer.
const maxWrite = 1 << 20

// commitDay appends the records of items, all of day d, to d's file with one write (more when
// they exceed maxWrite bytes) and one fsync.
func (w *Writer) commitDay(d day, items []*item) error {
	df, err := w.file(d)
	if err != nil {
		return err
	}
	buf := w.buf[:0]
	prev := df.prev
	needSync := false
	for _, it := range items {
		needSync = needSync || it.wait
		start := len(buf)
		buf = it.rec.appendFields(buf)
		buf = append(buf, `,"prev":"`...)
		buf = append(buf, prev[:]...)
		buf = append(buf, '"', '}')
		prev = chainHash(buf[start:])
		buf = append(buf, '\n')
		if len(buf) >= maxWrite {
			if _, err = df.f.Write(buf); err != nil {
				break
			}
			buf = buf[:0]
		}
	}
	if err == nil && len(buf) > 0 {
		_, err = df.f.Write(buf)
	}
	if cap(buf) > 4*maxWrite {
		buf = nil // one huge record grew it; do not keep that much
	}
	w.buf = buf[:0]
	if err != nil {
		err = pathError("write", df.path, err)
	} else if needSync && !w.noSync {
		if err = w.sync(df); err != nil {
			err = pathError("sync", df.path, err)
		}
	}
	if err != nil {
		// What reached the disk is unknown (a short write leaves a torn line): drop the file so
		// the next batch reopens it and continues the chain from what is really there.
		w.drop(df)
		return err
	}
	df.prev = prev
	df.dirty = !needSync
	w.batches++
	w.records += int64(len(items))
	return nil
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
