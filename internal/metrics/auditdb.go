package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// AuditDB is the families of the audit's database copy (the gate's, when it has a DSN).
type AuditDB struct {
	rows     prometheus.Counter
	failures prometheus.Counter
}

// AuditDBLag is how far the database copy is behind the audit files.
type AuditDBLag struct {
	// Records is how many records are on disk and not yet in the database.
	Records int64
	// Seconds is how long the oldest of them has been on disk; 0 when there is none.
	Seconds float64
}

// NewAuditDB registers the database copy's families in r; lag is read at each scrape.
func NewAuditDB(r *Registry, lag func() AuditDBLag) *AuditDB {
	a := &AuditDB{
		rows: prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "audit_db", Name: "rows_total",
			Help: "Audit lines copied to the database."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "audit_db", Name: "failures_total",
			Help: "Attempts to copy the audit to the database that failed (connect, create the tables, read, insert); the sink tries again, the files keep every record."}),
	}
	r.register(a.rows, a.failures, &lagCollector{lag: lag,
		records: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "audit_db", "lag_records"),
			"Audit records on disk not yet in the database.", nil, nil),
		seconds: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "audit_db", "lag_seconds"),
			"How long the oldest audit record not yet in the database has been on disk; 0 when the database has every record.", nil, nil),
	})
	return a
}

// Copied counts n lines copied.
func (a *AuditDB) Copied(n int) {
	if a == nil {
		return
	}
	a.rows.Add(float64(n))
}

// Failed counts one failed attempt.
func (a *AuditDB) Failed() {
	if a == nil {
		return
	}
	a.failures.Inc()
}

// lagCollector reads the lag once per scrape for both gauges.
type lagCollector struct {
	lag              func() AuditDBLag
	records, seconds *prometheus.Desc
}

func (c *lagCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.records
	ch <- c.seconds
}

func (c *lagCollector) Collect(ch chan<- prometheus.Metric) {
	l := c.lag()
	ch <- prometheus.MustNewConstMetric(c.records, prometheus.GaugeValue, float64(l.Records))
	ch <- prometheus.MustNewConstMetric(c.seconds, prometheus.GaugeValue, l.Seconds)
}
