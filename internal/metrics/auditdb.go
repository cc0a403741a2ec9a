package metrics

// AuditDB is the families of the audit's database copy (the gate's, when it has a DSN).
type AuditDB struct {
	rows     *counter
	failures *counter
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
		rows: r.newCounter(Namespace+"_audit_db_rows_total", "Audit lines copied to the database."),
		failures: r.newCounter(Namespace+"_audit_db_failures_total",
			"Attempts to copy the audit to the database that failed (connect, create the tables, read, insert); the sink tries again, the files keep every record."),
	}
	records := newDesc(Namespace+"_audit_db_lag_records", "Audit records on disk not yet in the database.", Gauge)
	seconds := newDesc(Namespace+"_audit_db_lag_seconds",
		"How long the oldest audit record not yet in the database has been on disk; 0 when the database has every record.", Gauge)
	// The lag is read once per scrape for both gauges.
	r.register([]string{records.name, seconds.name}, collectFunc(func(out []Family) []Family {
		l := lag()
		fr, fs := records.family(1), seconds.family(1)
		fr.Series = append(fr.Series, Series{Value: float64(l.Records)})
		fs.Series = append(fs.Series, Series{Value: l.Seconds})
		return append(out, fr, fs)
	}))
	return a
}

// Copied counts n lines copied.
func (a *AuditDB) Copied(n int) {
	if a == nil {
		return
	}
	a.rows.Add(uint64(max(n, 0)))
}

// Failed counts one failed attempt.
func (a *AuditDB) Failed() {
	if a == nil {
		return
	}
	a.failures.Inc()
}
