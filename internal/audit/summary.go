package audit

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Summaries. A Write waits for its record's fsync, so a flood of refusals costs one fsync per
// batch and a record each; with Options.SummarizeAfter, the Writes of one container past that many
// in one second of the clock are counted instead: each goes into the summary record of its
// second (one per container, verdict, code, rule and status, of at most maxIDs requests; more make
// more records), which lists every request's id. The second's summaries are written together
// when it ends, with one write and one fsync, and each summarised Write returns only then, so a
// client is never shown an id that has no record on disk: the id is findable (grep the day file)
// in the "ids" of a record whose "count" says how many requests it covers.

// sumKey is what the requests of one summary record share.
type sumKey struct {
	container, verdict, code, rule string
	status                         int
}

// summaries are the summary records of one second of the clock, committed together.
type summaries struct {
	sec   int64
	recs  []*Record          // in order of their first request
	open  map[sumKey]*Record // the record of each key that still has room
	timer *time.Timer        // flushes them when the second ends
	done  chan struct{}      // closed once every record is committed (or failed)

	mu      sync.Mutex // guards pending and err
	pending int        // records not yet committed
	err     error      // the first commit error
}

// finish records the outcome of committing one of s's records.
func (s *summaries) finish(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil && s.err == nil {
		s.err = err
	}
	s.pending--
	if s.pending == 0 {
		close(s.done)
	}
}

// wait waits for s's commit, like Write waits for a record's.
func (s *summaries) wait(ctx context.Context) error {
	select {
	case <-s.done:
	case <-ctx.Done():
		select {
		case <-s.done:
		default:
			return ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// summarize counts r against its container's rate and returns the summaries it went into, or nil
// when it is to be written on its own.
func (w *Writer) summarize(r *Record) *summaries {
	now := w.now()
	sec := now.Unix()
	w.smu.Lock()
	defer w.smu.Unlock()
	if sec != w.rateSec {
		w.rateSec = sec
		clear(w.rate)
	}
	s := w.sums
	if s != nil && s.sec != sec { // the second is over: no need to wait for its timer
		w.flushLocked(s)
		s = nil
	}
	w.rate[r.Container]++
	if w.rate[r.Container] <= w.summarizeAfter {
		return nil
	}
	if s == nil {
		s = &summaries{sec: sec, open: make(map[sumKey]*Record), done: make(chan struct{})}
		w.sums = s
		wait := min(max(time.Unix(sec+1, 0).Sub(now), time.Millisecond), time.Second)
		s.timer = time.AfterFunc(wait, func() {
			w.smu.Lock()
			defer w.smu.Unlock()
			if w.sums == s {
				w.flushLocked(s)
			}
		})
	}
	k := sumKey{r.Container, r.Verdict, r.Code, r.Rule, r.Status}
	rec := s.open[k]
	if rec == nil || rec.Count == maxIDs {
		rec = &Record{Time: time.Unix(sec, 0).UTC(), Event: EventSummary, Container: r.Container,
			Method: r.Method, URL: r.URL, Verdict: r.Verdict, Code: r.Code, Rule: r.Rule, Policy: r.Policy,
			Status: r.Status, IDs: make([]string, 0, 16)}
		s.open[k] = rec
		s.recs = append(s.recs, rec)
	}
	rec.IDs = append(rec.IDs, r.ID)
	rec.Count++
	return s
}

// EventSummary is the event of a summary record.
const EventSummary = "summary"

// flushLocked hands s's records to the committer as one group (w.smu held).
func (w *Writer) flushLocked(s *summaries) {
	if w.sums == s {
		w.sums = nil
	}
	s.timer.Stop()
	items := make([]*item, len(s.recs))
	for i, rec := range s.recs {
		rec.Reason = fmt.Sprintf("%d requests of this container in this second past the first %d, answered by the gate "+
			"and summarised here instead of a record each; ids lists every one, method and url are the first one's",
			rec.Count, w.summarizeAfter)
		it := w.items.Get().(*item)
		it.rec = *rec
		it.refs.Store(1)
		it.wait, it.sync = true, true
		it.fan = s
		items[i] = it
	}
	s.pending = len(items)
	if !w.enqueue(items...) {
		for range items {
			s.finish(ErrClosed)
		}
	}
}

// flushSummaries hands the current second's summaries to the committer now (Close).
func (w *Writer) flushSummaries() {
	w.smu.Lock()
	defer w.smu.Unlock()
	if w.sums != nil {
		w.flushLocked(w.sums)
	}
}
