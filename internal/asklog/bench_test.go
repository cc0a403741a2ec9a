package asklog

import (
	"fmt"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/propose"
)

// BenchmarkAudit reads 200,000 records the audit writer wrote (one in ten an ask), as a month
// of a busy agent: what lockhttp propose and :propose spend reading before they learn.
func BenchmarkAudit(b *testing.B) {
	dir := b.TempDir()
	day := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	w, err := audit.Open(audit.Options{Dir: dir, NoSync: true, Now: func() time.Time { return day }})
	if err != nil {
		b.Fatal(err)
	}
	const n = 200_000
	for i := 0; i < n; i++ {
		r := &audit.Record{Time: day.Add(time.Duration(i) * 10 * time.Millisecond), Event: "tunnel-request", ID: fmt.Sprintf("r%d", i),
			Container: "local", Method: "GET", URL: fmt.Sprintf("https://h%d.example.com/api/v1/items/%d?page=2", i%50, i), Verdict: "FREE",
			Rule: "trusted", Status: 200, BytesOut: 512}
		if i%10 == 0 {
			r.Verdict, r.Rule, r.Ticket, r.Approver = "ASK", "default", fmt.Sprintf("t%d", i), "cli:root"
		}
		w.Submit(r)
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		count := 0
		st, err := Audit(dir, time.Time{}, func(propose.Observation) { count++ })
		if err != nil || count != n || st.Bad != 0 {
			b.Fatalf("%v: %d records, %+v", err, count, st)
		}
	}
}
