package metrics

import (
	"time"
)

// Audit is an audit writer's families (the gate's and the console's, each in its process).
type Audit struct {
	records  *counter
	failures *counter
	batch    *histogram
	fsync    *histogram
}

// NewAudit registers the audit families in r; queued is read at each scrape (nil: no gauge).
func NewAudit(r *Registry, queued func() int) *Audit {
	a := &Audit{
		records: r.newCounter(Namespace+"_audit_records_total", "Audit records written to the day files."),
		failures: r.newCounter(Namespace+"_audit_write_failures_total",
			"Audit batches whose write or fsync failed (the gate refuses traffic until a write succeeds)."),
		batch: r.newHistogram(Namespace+"_audit_batch_records", "Records carried by one write (group commit).", batchBuckets),
		fsync: r.newHistogram(Namespace+"_audit_fsync_duration_seconds", "Time one fsync of an audit file took.", networkBuckets),
	}
	if queued != nil {
		r.newGaugeFunc(Namespace+"_audit_queue_depth", "Audit records queued and not yet written.", func() float64 { return float64(queued()) })
	}
	return a
}

// Batch counts one write of n records; err is its outcome.
func (a *Audit) Batch(n int, err error) {
	if a == nil {
		return
	}
	if err != nil {
		a.failures.Inc()
		return
	}
	a.records.Add(uint64(max(n, 0)))
	a.batch.Observe(float64(n))
}

// Synced observes one fsync's time.
func (a *Audit) Synced(d time.Duration) {
	if a == nil {
		return
	}
	a.fsync.Observe(seconds(d))
}
