package audit

import "time"

// Queued is how many records wait for the committer: the audit's queue depth.
func (w *Writer) Queued() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.queue)
}

// sync fsyncs df, timed for the metrics.
func (w *Writer) sync(df *dayFile) error {
	start := time.Now()
	err := df.f.Sync()
	w.m.Synced(time.Since(start))
	return err
}
