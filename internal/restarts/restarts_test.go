package restarts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
)

type fakeAudit struct {
	mu   sync.Mutex
	recs []audit.Record
	err  error
}

func (a *fakeAudit) Write(_ context.Context, r *audit.Record) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		return a.err
	}
	a.recs = append(a.recs, *r)
	return nil
}

var exited = time.Date(2026, 12, 1, 12, 3, 4, 0, time.UTC)

func report() Report {
	return Report{Seq: 2, Process: "gate", PID: 41, Exited: exited, Exit: "signal: killed", Line: "ERROR audit write failed",
		NewPID: 42, Restarted: exited.Add(time.Second), Totals: map[string]int{"signer": 0, "console": 0, "gate": 2}}
}

func post(t *testing.T, h http.Handler, method, body string) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(method, Path, strings.NewReader(body)))
	return w
}

func TestHandler(t *testing.T) {
	good, _ := jsonOf(report())
	tests := []struct {
		name   string
		method string
		body   string
		status int
		want   string // part of the error; "" for a report taken
	}{
		{"a restart", "POST", good, 204, ""},
		{"lox gave up", "POST", `{"seq":3,"process":"signer","pid":7,"exited":"2026-12-01T12:03:04Z","exit":"exit status 1","stopped":true,"totals":{}}`, 204, ""},
		{"not a POST", "GET", "", 405, "POST a restart report"},
		{"an unknown field", "POST", `{"seq":1,"process":"gate","pid":1,"new_pid":2,"extra":1}`, 400, `unknown field "extra"`},
		{"an unknown process", "POST", `{"seq":1,"process":"agent","pid":1,"new_pid":2}`, 400, `process "agent": use one of signer, console, gate`},
		{"no new pid", "POST", `{"seq":1,"process":"gate","pid":1}`, 400, "unless stopped, new_pid"},
		{"no seq", "POST", `{"process":"gate","pid":1,"new_pid":2}`, 400, "needs seq"},
		{"totals of another process", "POST", `{"seq":1,"process":"gate","pid":1,"new_pid":2,"totals":{"agent":1}}`, 400, `"agent" 1 is no process's count`},
		{"two objects", "POST", good + good, 400, "data after the JSON object"},
		{"too large", "POST", `{"seq":1,"process":"gate","pid":1,"new_pid":2,"exit":"` + strings.Repeat("x", maxBody) + `"}`, 400, "at most 16 KiB"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, l := &fakeAudit{}, &Log{}
			w := post(t, Handler(l, a, nil), tc.method, tc.body)
			var answer struct{ Error string }
			json.Unmarshal(w.Body.Bytes(), &answer)
			if w.Code != tc.status || !strings.Contains(answer.Error, tc.want) || (tc.want == "") != (answer.Error == "") {
				t.Fatalf("%d %s, want %d with %q", w.Code, w.Body, tc.status, tc.want)
			}
			if tc.want != "" {
				if len(a.recs) != 0 || len(l.Recent()) != 0 {
					t.Errorf("a refused report was kept: %v %v", a.recs, l.Recent())
				}
				return
			}
			if len(a.recs) != 1 || len(l.Recent()) != 1 {
				t.Fatalf("records %v, log %v", a.recs, l.Recent())
			}
		})
	}
}

// A restart's audit record names the process, lox's number and what happened, in words.
func TestRecord(t *testing.T) {
	a, l := &fakeAudit{}, &Log{}
	body, _ := jsonOf(report())
	if w := post(t, Handler(l, a, nil), "POST", body); w.Code != 204 {
		t.Fatal(w.Code, w.Body)
	}
	r := a.recs[0]
	if r.Event != "restart" || r.Rule != "gate" || r.ID != "lox-2" || !r.Time.Equal(exited) {
		t.Errorf("record %+v", r)
	}
	want := fmt.Sprintf(`the gate (pid 41) exited (signal: killed) at %s, its last line "ERROR audit write failed"; lox restarted it as pid 42 (restart 2 since the stack started)`,
		exited.Local().Format("15:04:05"))
	if r.Detail != want {
		t.Errorf("detail:\n%s\nwant\n%s", r.Detail, want)
	}
	stop := report()
	stop.Stopped, stop.NewPID = true, 0
	if r := stop.Record(); r.Event != "restart-limit" || !strings.HasSuffix(r.Detail, "; it exited 5 times within 1m0s: lox stopped the stack") {
		t.Errorf("the record of lox giving up: %+v", r)
	}
	// A control sequence in a log line is escaped in the words.
	hostile := report()
	hostile.Line = "\x1b]0;pwned\x07"
	if d := hostile.Text(); strings.ContainsAny(d, "\x1b\x07") {
		t.Errorf("unescaped: %q", d)
	}
}

// A report whose audit write fails is refused, so that lox sends it again; one sent twice is
// kept once.
func TestAuditFailureAndResend(t *testing.T) {
	a, l := &fakeAudit{err: errors.New("disk full")}, &Log{}
	h := Handler(l, a, nil)
	body, _ := jsonOf(report())
	if w := post(t, h, "POST", body); w.Code != 503 || !strings.Contains(w.Body.String(), "lox sends the report again") || len(l.Recent()) != 0 {
		t.Fatalf("%d %s, log %v", w.Code, w.Body, l.Recent())
	}
	a.err = nil
	for range 2 {
		if w := post(t, h, "POST", body); w.Code != 204 {
			t.Fatal(w.Code, w.Body)
		}
	}
	if len(l.Recent()) != 1 {
		t.Errorf("a report sent twice is kept %d times", len(l.Recent()))
	}
}

func TestLogKeepsTheLatest(t *testing.T) {
	l := &Log{}
	for i := 1; i <= keep+10; i++ {
		r := report()
		r.Seq = i
		l.Add(r)
	}
	got := l.Recent()
	if len(got) != keep || got[0].Seq != keep+10 || got[len(got)-1].Seq != 11 {
		t.Fatalf("%d kept, first %d, last %d", len(got), got[0].Seq, got[len(got)-1].Seq)
	}
}

func jsonOf(r Report) (string, error) {
	b, err := json.Marshal(r)
	return string(b), err
}
