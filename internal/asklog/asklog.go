// Package asklog reads what a period asked of humans, for propose: the records of the gate's
// audit, the decisions of the hub's state file and of the console's audit.
package asklog

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/hubapi"
	"github.com/lockhttp/lockhttp/internal/propose"
)

// Bounds of what is read.
const (
	// maxLine bounds one audit line: a record takes under 10 KiB (docs/audit.md), a summary of
	// 256 ids about 5 KiB. A longer line is not a record and is counted as bad.
	maxLine = 64 << 10
	// maxHubState is the hub's own bound on its state file.
	maxHubState = 64 << 20
)

// Stats says what Audit and Decisions read.
type Stats struct {
	Files   int // day files read
	Records int // records passed on
	Bad     int // lines that are not records (cut short, too long, not JSON)
	// Unfinished counts the intent records (a request going out) that no record of the
	// request's outcome followed: the gate was killed while they were out. Each is passed on as
	// the request's record (its status 0); an intent its outcome followed is not passed on.
	Unfinished int
}

// maxOpenIntents bounds the intents Audit keeps until their outcome: more open at once are passed
// on as they are read.
const maxOpenIntents = 1 << 16

// record is the part of an audit record propose reads (docs/audit.md names the fields).
type record struct {
	Time      time.Time `json:"time"`
	Event     string    `json:"event"`
	ID        string    `json:"id"`
	Container string    `json:"container"`
	Method    string    `json:"method"`
	URL       string    `json:"url"`
	Verdict   string    `json:"verdict"`
	Code      string    `json:"code"`
	Rule      string    `json:"rule"`
	Ticket    string    `json:"ticket"`
	Approver  string    `json:"approver"`
	Detail    string    `json:"detail"`
	IDs       []string  `json:"ids"`
}

// Audit reads the gate's audit in dir (its day files, YYYY-MM-DD.jsonl) from the day of since
// on, the whole audit when since is zero, and passes each record to each, oldest file first.
//
// An intent record (a request going out, audit.EventIntent) is passed on only when no record of
// its outcome follows it (Stats.Unfinished), after the rest, as the request's own record: the
// request went out as it says, and the gate was killed before its answer came back.
func Audit(dir string, since time.Time, each func(propose.Observation)) (Stats, error) {
	return observe(func(f func(*record)) (Stats, error) { return days(dir, since, f) }, each)
}

// AuditSources reads a gate's audit as Audit does, from its day files as srcs gives them
// (audit.DirSources, or a database copy read back, auditdb.Load), in their order.
func AuditSources(srcs []audit.Source, since time.Time, each func(propose.Observation)) (Stats, error) {
	return observe(func(f func(*record)) (Stats, error) { return sources(srcs, since, f) }, each)
}

// observe hands the records read finds to each, as propose's observations.
func observe(read func(func(*record)) (Stats, error), each func(propose.Observation)) (Stats, error) {
	pass := func(r *record) {
		each(propose.Observation{Time: r.Time, Event: r.Event, ID: r.ID, Container: r.Container, Method: r.Method,
			URL: r.URL, Verdict: r.Verdict, Code: r.Code, Rule: r.Rule, Ticket: r.Ticket, Approver: r.Approver})
	}
	open := map[string]*record{}
	intents := 0 // intent records kept in open, passed on or completed
	st, err := read(func(r *record) {
		if r.Event == audit.EventIntent {
			r.Event = "request"
			if r.Method == "CONNECT" {
				r.Event = "connect"
			}
			if _, dup := open[r.ID]; dup || r.ID == "" || len(open) >= maxOpenIntents {
				pass(r)
				return
			}
			open[r.ID] = r
			intents++
			return
		}
		if len(open) > 0 {
			delete(open, r.ID)
			for _, id := range r.IDs {
				delete(open, id)
			}
		}
		pass(r)
	})
	left := make([]*record, 0, len(open))
	for _, r := range open {
		left = append(left, r)
	}
	sort.Slice(left, func(i, j int) bool { return left[i].Time.Before(left[j].Time) })
	for _, r := range left {
		pass(r)
	}
	st.Unfinished = len(left)
	st.Records -= intents - len(left) // the completed intents were not passed on
	return st, err
}

// ConsoleDecisions reads the console's audit in dir (the hub writes a "ticket-decided" record
// for every human decision there) from the day of since on, and passes each decision to each.
func ConsoleDecisions(dir string, since time.Time, each func(propose.Decision)) (Stats, error) {
	return days(dir, since, func(r *record) {
		if r.Event != "ticket-decided" || r.ID == "" || r.Approver == "" {
			return
		}
		approved := strings.HasPrefix(r.Detail, string(hubapi.Approved)+" ")
		if !approved && !strings.HasPrefix(r.Detail, string(hubapi.Denied)+" ") {
			return
		}
		kind := hubapi.KindRequest
		if r.Method == "CONNECT" {
			kind = hubapi.KindConnect
		}
		each(propose.Decision{Ticket: r.ID, Approved: approved, By: r.Approver, At: r.Time, Kind: kind,
			Container: r.Container, Method: r.Method, URL: r.URL, Created: r.Time})
	})
}

// days reads the day files of dir from the day of since on, line by line, bounded.
func days(dir string, since time.Time, each func(*record)) (Stats, error) {
	var st Stats
	entries, err := os.ReadDir(dir)
	if err != nil {
		return st, fmt.Errorf("audit directory %s: %w", dir, err)
	}
	var names []string
	first := ""
	if !since.IsZero() {
		first = since.UTC().Format("2006-01-02") + ".jsonl"
	}
	for _, e := range entries {
		n := e.Name()
		if !e.Type().IsRegular() || !dayName(n) || n < first {
			continue
		}
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		path := filepath.Join(dir, n)
		f, err := os.Open(path)
		if err != nil {
			return st, fmt.Errorf("audit file %s: %w", path, err)
		}
		st.Files++
		err = records(f, &st, each)
		f.Close()
		if err != nil {
			return st, fmt.Errorf("audit file %s: %w", path, err)
		}
	}
	return st, nil
}

// sources reads the day files of srcs from the day of since on, as days reads a directory's.
func sources(srcs []audit.Source, since time.Time, each func(*record)) (Stats, error) {
	var st Stats
	first := ""
	if !since.IsZero() {
		first = since.UTC().Format("2006-01-02") + ".jsonl"
	}
	for _, s := range srcs {
		if !dayName(s.Name) || s.Name < first {
			continue
		}
		rc, err := s.Open()
		if err != nil {
			return st, fmt.Errorf("audit file %s: %w", s.Name, err)
		}
		st.Files++
		err = records(rc, &st, each)
		rc.Close()
		if err != nil {
			return st, fmt.Errorf("audit file %s: %w", s.Name, err)
		}
	}
	return st, nil
}

// records passes each record of one day file to each, counting them and the bad lines in st.
func records(r io.Reader, st *Stats, each func(*record)) error {
	return lines(r, func(line []byte) {
		var rec record
		if json.Unmarshal(line, &rec) != nil {
			st.Bad++
			return
		}
		st.Records++
		each(&rec)
	}, &st.Bad)
}

// dayName reports whether n is a day file's name: YYYY-MM-DD.jsonl.
func dayName(n string) bool {
	d, ok := strings.CutSuffix(n, ".jsonl")
	if !ok {
		return false
	}
	_, err := time.Parse("2006-01-02", d)
	return err == nil
}

// lines calls each with every line of r at most maxLine long; longer lines are counted in bad.
func lines(r io.Reader, each func([]byte), bad *int) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var line []byte
	long := false
	for {
		chunk, err := br.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			if len(line)+len(chunk) > maxLine {
				long = true
			} else {
				line = append(line, chunk...)
			}
			continue
		case err != nil && !errors.Is(err, io.EOF):
			return err
		}
		if len(line)+len(chunk) > maxLine {
			long = true
		}
		if long {
			*bad++
		} else {
			line = append(line, chunk...)
			if l := strings.TrimSpace(string(line)); l != "" {
				each([]byte(l))
			}
		}
		line, long = line[:0], false
		if err != nil {
			return nil
		}
	}
}

// HubState reads the decided tickets of the hub's state file (its -hub-state; lox run's
// STATE/hub.json).
func HubState(path string) ([]propose.Decision, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("hub state: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxHubState+1))
	if err != nil {
		return nil, fmt.Errorf("hub state %s: %w", path, err)
	}
	if len(data) > maxHubState {
		return nil, fmt.Errorf("hub state %s is larger than %d bytes; is it the hub's -hub-state file?", path, maxHubState)
	}
	var st struct {
		Version int             `json:"version"`
		Tickets []hubapi.Ticket `json:"tickets"`
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("hub state %s: %w; is it the hub's -hub-state file?", path, err)
	}
	if st.Version != 1 {
		return nil, fmt.Errorf("hub state %s: format version %d, this lockhttp reads 1", path, st.Version)
	}
	return Tickets(st.Tickets), nil
}

// Tickets are the decisions of the decided tickets of ts (the hub's, in memory or its state).
func Tickets(ts []hubapi.Ticket) []propose.Decision {
	var out []propose.Decision
	for _, t := range ts {
		d := t.Decision
		if d == nil || (d.Verdict != hubapi.Approved && d.Verdict != hubapi.Denied) {
			continue
		}
		out = append(out, propose.Decision{Ticket: t.ID, Approved: d.Verdict == hubapi.Approved, By: d.By, At: d.At,
			Kind: t.Kind, Container: t.Container, Method: t.Method, URL: t.URL, Created: t.Created})
	}
	return out
}
