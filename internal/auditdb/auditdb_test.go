package auditdb

import (
	"context"
	"net"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/metrics"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// TestLagWhileDown: with the database unreachable the sink's failures are counted and its lag
// grows with each batch on disk, counted from the oldest record it lacks; as the database takes
// the records the lag falls, and it is 0 once it has them all.
func TestLagWhileDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().(*net.TCPAddr)
	l.Close() // nothing listens there: the database is down
	clock := testkit.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	var s *Sink
	reg := metrics.NewRegistry("gate", "test")
	m := metrics.NewAuditDB(reg, func() metrics.AuditDBLag { return s.Lag() })
	s = New(Options{Dir: t.TempDir(), DSN: "postgres://lockhttp@127.0.0.1:" + strconv.Itoa(addr.Port) + "/audit?sslmode=disable",
		Retry: 10 * time.Millisecond, Metrics: m, Now: clock.Now})
	if got := s.Lag(); got != (metrics.AuditDBLag{}) {
		t.Fatalf("lag before any record: %+v", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	testkit.WaitFor(t, 10*time.Second, "two failed attempts counted", func() bool {
		return gathered(t, reg, "lockhttp_audit_db_failures_total") >= 2
	})

	steps := []struct {
		name    string
		advance time.Duration
		durable int64 // 0: none this step
		copied  int64 // 0: none this step
		want    metrics.AuditDBLag
	}{
		{"a batch on disk", 0, 10, 0, metrics.AuditDBLag{Records: 10, Seconds: 0}},
		{"five seconds down", 5 * time.Second, 0, 0, metrics.AuditDBLag{Records: 10, Seconds: 5}},
		{"another batch: counted from the oldest", 5 * time.Second, 25, 0, metrics.AuditDBLag{Records: 25, Seconds: 10}},
		{"still down", 20 * time.Second, 0, 0, metrics.AuditDBLag{Records: 25, Seconds: 30}},
		{"back: the first batch copied", 0, 0, 10, metrics.AuditDBLag{Records: 15, Seconds: 20}},
		{"back: all copied", 0, 0, 25, metrics.AuditDBLag{}},
		{"a batch copied at once", time.Second, 30, 30, metrics.AuditDBLag{}},
	}
	for _, st := range steps {
		clock.Advance(st.advance)
		if st.durable > 0 {
			s.Durable(st.durable, "2026-03-01.jsonl")
		}
		if st.copied > 0 {
			s.copied(st.copied)
		}
		if got := s.Lag(); got != st.want {
			t.Fatalf("%s: lag %+v, want %+v", st.name, got, st.want)
		}
		if r, sec := gathered(t, reg, "lockhttp_audit_db_lag_records"), gathered(t, reg, "lockhttp_audit_db_lag_seconds"); r != float64(st.want.Records) || sec != st.want.Seconds {
			t.Fatalf("%s: scraped lag %v records, %v s; want %+v", st.name, r, sec, st.want)
		}
	}
}

// TestLagMarksBounded: past maxMarks batches the sink keeps a bounded list, and the lag is
// never counted from later than the oldest record the database lacks.
func TestLagMarksBounded(t *testing.T) {
	clock := testkit.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	s := New(Options{Dir: t.TempDir(), Now: clock.Now})
	for i := range int64(maxMarks + 100) {
		s.Durable(i+1, "f")
		clock.Advance(time.Second)
	}
	if len(s.marks) > maxMarks {
		t.Fatalf("%d marks, want at most %d", len(s.marks), maxMarks)
	}
	s.copied(maxMarks + 50) // the oldest lacking record reached the disk maxMarks+50 s ago
	if got := s.Lag(); got.Records != 50 || got.Seconds < 50 {
		t.Fatalf("lag %+v, want 50 records for at least 50 s", got)
	}
}

// gathered is the value of the series name (a family without labels) that reg serves.
func gathered(t *testing.T, reg *metrics.Registry, name string) float64 {
	t.Helper()
	w := httptest.NewRecorder()
	reg.Handler().ServeHTTP(w, httptest.NewRequest("GET", metrics.Path, nil))
	for _, line := range strings.Split(w.Body.String(), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("no series %s in:\n%s", name, w.Body.String())
	return 0
}
