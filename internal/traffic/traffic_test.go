package traffic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func entry(i int, verdict, code string) Entry {
	return Entry{Time: t0.Add(time.Duration(i) * time.Second), Event: "request", ID: fmt.Sprintf("r-%d", i), Container: "dev",
		Method: "GET", URL: fmt.Sprintf("https://example.com/%d", i), Verdict: verdict, Code: code, Status: 200}
}

// An audit line decodes into an Entry: the terminal and lox log read the same fields.
func TestAuditLineIsAnEntry(t *testing.T) {
	r := &audit.Record{Time: t0, Event: "request", ID: "r-1", Container: "dev", Agent: "claude", Method: "POST",
		URL: "https://api.example.com/x", Verdict: "ASK", Code: "E_DENIED", Rule: "ask-writes", Reason: "a human denied it",
		Status: 403, Ticket: "t1", Approver: "terminal:alice", Duration: time.Millisecond}
	var e Entry
	if err := json.Unmarshal(r.AppendJSON(nil), &e); err != nil {
		t.Fatal(err)
	}
	if want := FromRecord(r); e != want {
		t.Fatalf("decoded %+v\nwant    %+v", e, want)
	}
}

func TestFromRecordBounds(t *testing.T) {
	e := FromRecord(&audit.Record{URL: strings.Repeat("u", 10<<10), Reason: strings.Repeat("r", 10<<10), Rule: strings.Repeat("é", 1000)})
	if len(e.URL) > maxURL || len(e.Reason) > maxText || len(e.Rule) > maxShort || !strings.HasPrefix(e.Rule, "é") {
		t.Fatalf("lengths %d %d %d", len(e.URL), len(e.Reason), len(e.Rule))
	}
}

func TestLine(t *testing.T) {
	tests := []struct {
		name string
		e    Entry
		want []string
		not  []string
	}{
		{name: "free", e: Entry{Time: t0, Verdict: "FREE", Status: 200, Container: "dev", Method: "GET", URL: "https://example.com/", Rule: "reads"},
			want: []string{"FREE", "200", "dev GET https://example.com/", "[reads]"}, not: []string{"—"}},
		{name: "denied by a human", e: Entry{Time: t0, Verdict: "ASK", Code: "E_DENIED", Status: 403, Method: "POST", URL: "https://x.test/",
			Rule: "ask-writes", Approver: "phone:pixel", Reason: "not now"},
			want: []string{"ASK", "E_DENIED", "- POST", "[ask-writes, by phone:pixel]", "— not now"}, not: []string{"403"}},
		{name: "hostile", e: Entry{Time: t0, Verdict: "DENY", Code: "E_DENY_HOST", URL: "https://x.test/\x1b[2J\u202e", Reason: "\x07"},
			want: []string{`https://x.test/\x1b[2J\u{202E}`, `— \x07`}, not: []string{"\x1b", "\u202e", "\x07"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := tc.e.Line()
			for _, w := range tc.want {
				if !strings.Contains(l, w) {
					t.Errorf("want %q in %q", w, l)
				}
			}
			for _, w := range tc.not {
				if strings.Contains(l, w) {
					t.Errorf("%q should not be in %q", w, l)
				}
			}
		})
	}
}

func TestFilters(t *testing.T) {
	free, deny, ask, askDenied := entry(1, "FREE", ""), entry(2, "DENY", "E_DENY_HOST"), entry(3, "ASK", ""), entry(4, "ASK", "E_DENIED")
	all := []Entry{free, deny, ask, askDenied}
	tests := []struct {
		f    Filter
		want []Entry
	}{
		{All, all},
		{Refused, []Entry{deny, askDenied}},
		{Asks, []Entry{ask, askDenied}},
	}
	for _, tc := range tests {
		t.Run(tc.f.String(), func(t *testing.T) {
			var got []Entry
			for _, e := range all {
				if tc.f.Match(e) {
					got = append(got, e)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("got %v\nwant %v", got, tc.want)
			}
			if p, err := ParseFilter(tc.f.String()); err != nil || p != tc.f {
				t.Fatalf("ParseFilter(%q) = %v, %v", tc.f, p, err)
			}
		})
	}
	if All.Next() != Refused || Refused.Next() != Asks || Asks.Next() != All {
		t.Fatal("Next does not cycle all → refused → asks → all")
	}
	if _, err := ParseFilter("denied"); err == nil || !strings.Contains(err.Error(), "use all, refused or asks") {
		t.Fatalf("ParseFilter(denied): %v", err)
	}
}

func TestLogKeepsTheLatest(t *testing.T) {
	l := NewLog(3)
	ch, cancel := l.Subscribe()
	defer cancel()
	l.Add(Batch{Entries: []Entry{entry(1, "FREE", ""), entry(2, "DENY", "E_DENY_HOST")}})
	l.Add(Batch{Entries: []Entry{entry(3, "FREE", ""), entry(4, "ASK", "")}, Dropped: 5})
	select {
	case <-ch:
	default:
		t.Fatal("no signal after Add")
	}
	select {
	case <-ch:
		t.Fatal("two signals: one stands for any number of batches")
	default:
	}
	ids := func(es []Entry) string {
		var s []string
		for _, e := range es {
			s = append(s, e.ID)
		}
		return strings.Join(s, " ")
	}
	if got := ids(l.Recent(0, All)); got != "r-4 r-3 r-2" {
		t.Fatalf("Recent(all) = %s", got)
	}
	if got := ids(l.Recent(1, All)); got != "r-4" {
		t.Fatalf("Recent(1) = %s", got)
	}
	if got := ids(l.Recent(0, Refused)); got != "r-2" {
		t.Fatalf("Recent(refused) = %s", got)
	}
	if l.Dropped() != 5 {
		t.Fatalf("Dropped = %d", l.Dropped())
	}
}

// The gate's batches are refused with the fix when they are not what the gate sends; bad input
// never reaches the log.
func TestHandler(t *testing.T) {
	tests := []struct {
		name, method, body string
		status             int
		want               string
		added              int
	}{
		{name: "a batch", method: "POST", body: `{"entries":[{"time":"2026-03-01T12:00:00Z","id":"r-1","verdict":"FREE","code":"","status":200}]}`, status: 204, added: 1},
		{name: "unknown field", method: "POST", body: `{"entries":[],"extra":1}`, status: 400, want: "unknown field"},
		{name: "unknown entry field", method: "POST", body: `{"entries":[{"bytes_out":1}]}`, status: 400, want: "unknown field"},
		{name: "trailing data", method: "POST", body: `{"entries":[]} {}`, status: 400, want: "data after the JSON object"},
		{name: "not json", method: "POST", body: `entries`, status: 400, want: "bad traffic batch"},
		{name: "too many", method: "POST", body: `{"entries":[` + strings.Repeat(`{},`, MaxBatch) + `{}]}`, status: 400, want: "at most 256"},
		{name: "too large", method: "POST", body: `{"entries":[{"url":"` + strings.Repeat("u", maxBody) + `"}]}`, status: 400, want: "larger than 2 MiB"},
		{name: "GET", method: "GET", status: 405, want: "POST"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLog(0)
			w := httptest.NewRecorder()
			l.Handler().ServeHTTP(w, httptest.NewRequest(tc.method, "/v1/gate/traffic", strings.NewReader(tc.body)))
			if w.Code != tc.status || !strings.Contains(w.Body.String(), tc.want) {
				t.Fatalf("%d %s, want %d %q", w.Code, w.Body, tc.status, tc.want)
			}
			if n := len(l.Recent(0, All)); n != tc.added {
				t.Fatalf("%d entries in the log, want %d", n, tc.added)
			}
		})
	}
}

// sink is a send function that records the batches and fails while told to.
type sink struct {
	mu       sync.Mutex
	batches  []Batch
	err      error
	failures int
}

func (s *sink) send(_ context.Context, b Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		s.failures++
		return s.err
	}
	s.batches = append(s.batches, b)
	return nil
}

func (s *sink) received() (ids []string, dropped int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.batches {
		for _, e := range b.Entries {
			ids = append(ids, e.ID)
		}
		dropped += b.Dropped
	}
	return ids, dropped
}

func (s *sink) failed() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failures
}

func (s *sink) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

func TestQueueSendsInOrder(t *testing.T) {
	q := NewQueue()
	s := &sink{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go q.Run(ctx, s.send)
	for i := range MaxBatch + 10 {
		q.Add(entry(i, "FREE", ""))
	}
	testkit.WaitFor(t, 5*time.Second, "every entry sent", func() bool { ids, _ := s.received(); return len(ids) == MaxBatch+10 })
	ids, _ := s.received()
	for i, id := range ids {
		if id != fmt.Sprintf("r-%d", i) {
			t.Fatalf("entry %d is %s: out of order", i, id)
		}
	}
	for _, b := range s.batches {
		if len(b.Entries) > MaxBatch {
			t.Fatalf("a batch of %d", len(b.Entries))
		}
	}
}

// While the hub is away the queue keeps what it can and counts the rest; when it is back the
// kept entries go, and the count with them.
func TestQueueKeepsThenCounts(t *testing.T) {
	q := NewQueue()
	s := &sink{}
	s.fail(errors.New("connection refused"))
	for i := range maxQueued + 7 {
		q.Add(entry(i, "FREE", ""))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go q.Run(ctx, s.send)
	testkit.WaitFor(t, 5*time.Second, "a failed send", func() bool { return s.failed() > 0 })
	s.fail(nil)
	testkit.WaitFor(t, 10*time.Second, "the kept entries sent", func() bool { ids, _ := s.received(); return len(ids) == maxQueued })
	if _, dropped := s.received(); dropped != 7 {
		t.Fatalf("dropped %d, want 7", dropped)
	}
}

// A batch the hub refuses (an old hub without the route, a bad entry) is dropped, counted, and
// the next ones still go.
func TestQueueDropsRefused(t *testing.T) {
	q := NewQueue()
	s := &sink{}
	s.fail(fmt.Errorf("hub answered 404: %w", ErrRefused))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go q.Run(ctx, s.send)
	q.Add(entry(1, "FREE", ""))
	testkit.WaitFor(t, 5*time.Second, "the refused entry dropped", func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return s.failed() > 0 && len(q.entries) == 0 && q.dropped == 1
	})
	s.fail(nil)
	q.Add(entry(2, "FREE", ""))
	testkit.WaitFor(t, 10*time.Second, "the next entry sent with the count", func() bool {
		ids, dropped := s.received()
		return len(ids) == 1 && ids[0] == "r-2" && dropped == 1
	})
}

// TestQueueSamplesForwarded: past MaxForwardedPerSecond forwarded requests a second, the queue
// keeps refusals and asks only and counts the rest; the next second starts again.
func TestQueueSamplesForwarded(t *testing.T) {
	q := NewQueue()
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for i := range 1000 {
		q.Add(Entry{Time: t0.Add(time.Duration(i) * time.Millisecond / 2), Verdict: "FREE", ID: "f"})
	}
	q.Add(Entry{Time: t0.Add(600 * time.Millisecond), Verdict: "DENY", Code: "E_RULE", ID: "refused"})
	q.Add(Entry{Time: t0.Add(700 * time.Millisecond), Verdict: "ASK", Code: "E_PENDING", ID: "ask"})
	q.Add(Entry{Time: t0.Add(time.Second), Verdict: "FREE", ID: "next second"})
	var got []Entry
	sampled := 0
	for q.pending() {
		b := q.take()
		got = append(got, b.Entries...)
		sampled += b.Sampled
	}
	if len(got) != MaxForwardedPerSecond+3 || sampled != 1000-MaxForwardedPerSecond {
		t.Fatalf("%d entries and %d sampled; want %d and %d", len(got), sampled, MaxForwardedPerSecond+3, 1000-MaxForwardedPerSecond)
	}
	for _, id := range []string{"refused", "ask", "next second"} {
		if !slices.ContainsFunc(got, func(e Entry) bool { return e.ID == id }) {
			t.Errorf("%q left out", id)
		}
	}
	l := NewLog(0)
	l.Add(Batch{Entries: got[:1], Sampled: sampled})
	if l.Sampled() != sampled {
		t.Errorf("log sampled %d, want %d", l.Sampled(), sampled)
	}
}
