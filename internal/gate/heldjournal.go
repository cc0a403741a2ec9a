package gate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/policy"
)

// The gate's journal of held requests. A request held for a human has no record until its hold
// ends; a gate killed meanwhile (SIGKILL, a crash, the OOM killer) cannot write one as it dies.
// So from the moment the hub answers "pending" to the end of the hold, the gate keeps a file for
// the request in the journal's directory (Config.HeldDir; cmd/gate: AUDIT_DIR/held), named by
// the request's id and holding its record as it stood when the hold began. The hold's end
// removes it. What the directory still holds when the gate starts is what a killed gate held:
// RecordCut writes each one's record, "cut by a gate restart", and the hub is told which tickets
// lost their requests. A gate that stops on a signal answers what it holds itself (E_PENDING,
// recorded as cut; see askHuman1) before its audit closes.
//
// A file is written with one write, not synced: a killed process loses nothing the kernel has;
// a crash of the machine may lose the entries of its last seconds, as it loses the audit's
// records not yet synced. A file cut short is still a record: its name is the request's id.

// Bounds of the journal: the most requests held at once, of one container and of all. Past them
// a request is refused E_BUSY before it is held (the hub is not asked). A file takes about 600
// bytes for a usual request, 12 KiB at most (the record's fields clipped as the audit clips them;
// measured with every field at its bound and full of characters JSON escapes), so the directory
// holds 48 MiB at most.
const (
	maxHeldPerContainer = 1024
	maxHeldAll          = 4096
	maxHeldFile         = 64 << 10 // what RecordCut reads of one file
)

// heldName is the name of a journal file: a request id of this gate's form (newID), ".json".
var heldName = regexp.MustCompile(`^(r[0-9a-f]{8}-[0-9a-z]{1,13})\.json$`)

// errGateStopping is the cause of a hold's context when the gate stops.
var errGateStopping = errors.New("the gate is stopping")

// heldJournal is the journal of held requests and their count.
type heldJournal struct {
	dir string // "": no journal (the holds are only counted)
	log *slog.Logger

	mu  sync.Mutex
	n   int            // guarded by mu: requests held now
	per map[string]int // guarded by mu: the same by container

	// cut counts the requests the gate's stop cut whose records are not yet written: the stop
	// waits for them (waitCut) before the audit closes.
	cut sync.WaitGroup
}

func newHeldJournal(dir string, log *slog.Logger) *heldJournal {
	return &heldJournal{dir: dir, log: log, per: map[string]int{}}
}

// heldSlot is one request's place in the journal, from reserve to end.
type heldSlot struct {
	j         *heldJournal
	container string
	path      string // the file, once written
	ended     bool
}

// reserve takes a place for a request of container about to be held, or returns false when the
// container, or the gate, holds as many as it may.
func (j *heldJournal) reserve(container string) (*heldSlot, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.per[container] >= maxHeldPerContainer || j.n >= maxHeldAll {
		return nil, false
	}
	j.n++
	j.per[container]++
	return &heldSlot{j: j, container: container}, true
}

// write puts the request's record, as it stands, in the journal: the hold has begun.
func (s *heldSlot) write(rec *audit.Record) error {
	if s.j.dir == "" {
		return nil
	}
	c := *rec
	c.URL = audit.Clip(c.URL, 2048)
	c.Reason = audit.Clip(c.Reason, 1024)
	c.Detail, c.Findings = audit.Clip(c.Detail, 1024), audit.Clip(c.Findings, 1024)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&c); err != nil {
		return err
	}
	data := buf.Bytes()
	path := filepath.Join(s.j.dir, rec.ID+".json")
	err := os.WriteFile(path, data, 0o600)
	if errors.Is(err, fs.ErrNotExist) {
		if err = os.MkdirAll(s.j.dir, 0o700); err == nil {
			err = os.WriteFile(path, data, 0o600)
		}
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("the journal of held requests (%s): %w", s.j.dir, err)
	}
	s.path = path
	return nil
}

// end ends the hold: the place is given back and the file removed, unless keep (the gate's stop
// cut the request: its file goes once its record is written, recordedCut).
func (s *heldSlot) end(keep bool) {
	if s == nil || s.ended {
		return
	}
	s.ended = true
	s.j.mu.Lock()
	s.j.n--
	if s.j.per[s.container]--; s.j.per[s.container] <= 0 {
		delete(s.j.per, s.container)
	}
	s.j.mu.Unlock()
	if s.path != "" && !keep {
		s.j.remove(s.path)
	}
}

func (j *heldJournal) remove(path string) {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		j.log.Warn("gate: removing a held request's journal file failed; its next start records it as cut", "file", path, "err", err)
	}
}

// stopCut marks a request the gate's stop cut: its record is on its way (recordedCut).
func (s *heldSlot) stopCut() { s.j.cut.Add(1) }

// recordedCut follows the record of a request the gate's stop cut: its file is removed (when the
// record was written; else the next start records it) and the stop waits no more for it.
func (s *heldSlot) recordedCut(written bool) {
	if written && s.path != "" {
		s.j.remove(s.path)
	}
	s.j.cut.Done()
}

// waitCut waits up to timeout for the records of the requests the gate's stop cut.
func (j *heldJournal) waitCut(timeout time.Duration) bool {
	done := make(chan struct{})
	go func() { j.cut.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// cutDetail is the record's detail of a held request a restart of the gate cut.
func cutDetail(ticket, how string) string {
	return "cut by a gate restart: the gate stopped while this request was held for a human on ticket " + ticket + "; " + how
}

// RecordCut writes the record of each request the journal of held requests still holds: the
// requests a gate that was killed held (see heldJournal). Each record is the request's as it
// stood when its hold began, with the code E_PENDING, no status (no answer was sent) and the
// detail "cut by a gate restart: …"; its file is removed once the record is on disk. It returns,
// for each ticket, how many of its requests were cut, for the hub (hubclient.ReportCut). Call it
// once, when the gate starts, before Serve. An error (the audit cannot be written) leaves the
// files not yet recorded for the next start.
func (g *Gate) RecordCut(ctx context.Context) (map[string]int, error) {
	cut := map[string]int{}
	dir := g.holds.dir
	if dir == "" {
		return cut, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return cut, fmt.Errorf("the journal of held requests: %w", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return cut, fmt.Errorf("the journal of held requests: %w", err)
	}
	var names []string
	for _, e := range ents {
		if !e.Type().IsRegular() || !heldName.MatchString(e.Name()) {
			g.log.Warn("gate: a file in the journal of held requests that the gate did not write; left alone", "dir", dir, "file", e.Name())
			continue
		}
		names = append(names, e.Name())
	}
	sort.Strings(names)
	started := g.now().UTC().Format(time.RFC3339)
	for _, name := range names {
		path := filepath.Join(dir, name)
		id := heldName.FindStringSubmatch(name)[1]
		rec, ok := readHeld(path, id)
		how := "its client got no answer (the gate was killed); written when the gate started again at " + started
		if !ok {
			how += "; the journal's entry was cut short (a crash of the machine), so only its id is known"
		}
		rec.Verdict = policy.Ask.String()
		rec.Code = string(policy.CodePending)
		rec.Status, rec.BytesOut, rec.Duration = 0, 0, 0
		rec.Detail = cutDetail(orUnknown(rec.Ticket), how)
		if err := g.audit.Write(ctx, &rec); err != nil {
			return cut, fmt.Errorf("recording the held requests a killed gate cut: %w", err)
		}
		g.log.Warn("gate: a request held when the gate last stopped was cut; recorded", logID, rec.ID, "ticket", rec.Ticket,
			logURL, audit.Clip(rec.URL, logMaxURL))
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return cut, fmt.Errorf("the journal of held requests: %w", err)
		}
		if rec.Ticket != "" {
			cut[rec.Ticket]++
		}
	}
	return cut, nil
}

// readHeld reads one journal file; ok is false when it does not hold a whole record of request
// id (a file cut short by a crash of the machine): the record then has the id alone.
func readHeld(path, id string) (audit.Record, bool) {
	bare := audit.Record{ID: id, Event: "request"}
	f, err := os.Open(path)
	if err != nil {
		return bare, false
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxHeldFile))
	if err != nil {
		return bare, false
	}
	var rec audit.Record
	if json.Unmarshal(data, &rec) != nil || rec.ID != id || rec.Time.IsZero() {
		return bare, false
	}
	return rec, true
}

func orUnknown(s string) string {
	if strings.TrimSpace(s) == "" {
		return "(unknown)"
	}
	return s
}
