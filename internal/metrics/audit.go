package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Audit is an audit writer's families (the gate's and the console's, each in its process).
type Audit struct {
	records  prometheus.Counter
	failures prometheus.Counter
	batch    prometheus.Histogram
	fsync    prometheus.Histogram
}

// NewAudit registers the audit families in r; queued is read at each scrape (nil: no gauge).
func NewAudit(r *Registry, queued func() int) *Audit {
	a := &Audit{
		records: prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "audit", Name: "records_total",
			Help: "Audit records written to the day files."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "audit", Name: "write_failures_total",
			Help: "Audit batches whose write or fsync failed (the gate refuses traffic until a write succeeds)."}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Subsystem: "audit", Name: "batch_records",
			Help: "Records carried by one write (group commit).", Buckets: batchBuckets}),
		fsync: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Subsystem: "audit", Name: "fsync_duration_seconds",
			Help: "Time one fsync of an audit file took.", Buckets: networkBuckets}),
	}
	r.register(a.records, a.failures, a.batch, a.fsync)
	if queued != nil {
		r.register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: Namespace, Subsystem: "audit", Name: "queue_depth",
			Help: "Audit records queued and not yet written."}, func() float64 { return float64(queued()) }))
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
	a.records.Add(float64(n))
	a.batch.Observe(float64(n))
}

// Synced observes one fsync's time.
func (a *Audit) Synced(d time.Duration) {
	if a == nil {
		return
	}
	a.fsync.Observe(seconds(d))
}
