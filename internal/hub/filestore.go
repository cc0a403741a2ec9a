package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/lockhttp/lockhttp/internal/atomicfile"
	"github.com/lockhttp/lockhttp/internal/metrics"
)

// FileStore is the embedded store: the state in memory, written to one JSON file (atomically,
// at most once a second and at once after a decision) so that a restart keeps the tickets, the
// decisions and the grants. What the gates hold is not written: after a restart the gates
// report it again; a change of the counts alone does not rewrite the file (with 1,000 requests
// held, their retries rewrote every ticket every second). One process only: `lox run`'s default, needing nothing but its binaries.
type FileStore struct {
	path string
	log  *slog.Logger

	mu      sync.Mutex
	tickets map[string]*Ticket         // guarded by mu
	byFP    map[string]string          // guarded by mu: fingerprint → id of its latest ticket
	grants  map[string]time.Time       // guarded by mu: "container|host|port" → until
	held    map[string]map[string]int  // guarded by mu: ticket id → gate → requests it holds
	seen    map[string]time.Time       // guarded by mu: gate → when it last called
	claimed map[string]map[string]bool // guarded by mu: ticket id → the keys of the claims taken
	gate    GateState                  // guarded by mu: the latest report of any gate
	dirty   bool                       // guarded by mu: the file is behind
}

// fileState is the state file.
type fileState struct {
	Version int                  `json:"version"`
	Tickets []*Ticket            `json:"tickets"`
	Grants  map[string]time.Time `json:"grants"`
}

// NewFileStore loads the state file at path (none yet: no tickets); "" keeps the state in
// memory only.
func NewFileStore(path string, log *slog.Logger) (*FileStore, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &FileStore{path: path, log: log, tickets: map[string]*Ticket{}, byFP: map[string]string{},
		grants: map[string]time.Time{}, held: map[string]map[string]int{}, seen: map[string]time.Time{},
		claimed: map[string]map[string]bool{}}
	if path == "" {
		return s, nil
	}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("hub state: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("hub state %s: %w", path, err)
	}
	var st fileState
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("hub state %s: %w; move it aside to start with no tickets", path, err)
	}
	for _, t := range st.Tickets {
		t.Holders = 0 // the requests that were held did not survive the restart
		t.Waiting = ""
		s.tickets[t.ID] = t
		if prev, ok := s.byFP[t.Fingerprint]; !ok || s.tickets[prev].Created.Before(t.Created) {
			s.byFP[t.Fingerprint] = t.ID
		}
	}
	for k, v := range st.Grants {
		s.grants[k] = v
	}
	return s, nil
}

func grantKey(container, host string, port int) string {
	return container + "|" + host + "|" + strconv.Itoa(port)
}

// hold changes what gate holds on t by d (never below zero) and sets t.Holders to the sum.
// The caller holds mu.
func (s *FileStore) hold(t *Ticket, gate string, d int) {
	g := s.held[t.ID]
	if g == nil {
		g = map[string]int{}
		s.held[t.ID] = g
	}
	if g[gate] = max(0, g[gate]+d); g[gate] == 0 {
		delete(g, gate)
	}
	s.recount(t)
}

// recount sets t.Holders to what the gates hold on it. The caller holds mu.
func (s *FileStore) recount(t *Ticket) {
	n := 0
	for _, c := range s.held[t.ID] {
		n += c
	}
	if len(s.held[t.ID]) == 0 {
		delete(s.held, t.ID)
	}
	t.Holders = n
}

func (s *FileStore) Ask(_ context.Context, q StoreAsk) (StoreAnswer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := q.Now
	if _, ok := s.seen[q.Gate]; !ok {
		s.seen[q.Gate] = now
	}
	if q.Kind == KindConnect {
		if until, ok := s.grants[grantKey(q.Container, q.Host, q.Port)]; ok && now.Before(until) {
			if t := s.tickets[s.byFP[q.Fingerprint]]; t != nil && t.Status == Approved {
				return StoreAnswer{Outcome: OutcomeApproved, Ticket: *cloneTicket(t)}, nil
			}
		}
	}
	if t, ok := s.tickets[s.byFP[q.Fingerprint]]; ok && q.NoHold {
		if t.Status == Pending || t.Decision != nil && now.Sub(t.Decision.At) < q.Window || t.Status == Expired && now.Sub(t.Expires) < q.Window {
			return StoreAnswer{Outcome: outcomeOf(t.Status), Ticket: *cloneTicket(t)}, nil
		}
	} else if ok {
		recently := t.Decision != nil && now.Sub(t.Decision.At) < q.Window
		switch {
		case t.Status == Pending:
			// One more request held: the file does not keep the counts (a restart zeroes
			// them), only what Gone says.
			s.hold(t, q.Gate, 1)
			if t.Gone != "" {
				t.Gone = ""
				s.dirty = true
			}
			return StoreAnswer{Outcome: OutcomePending, Ticket: *cloneTicket(t)}, nil
		case t.Status == Approved && t.Uses > 0 && recently:
			t.Uses--
			s.dirty = true
			return StoreAnswer{Outcome: OutcomeApproved, Ticket: *cloneTicket(t)}, nil
		case t.Status == Denied && recently:
			return StoreAnswer{Outcome: OutcomeDenied, Ticket: *cloneTicket(t)}, nil
		case t.Status == Expired && !t.Reported && now.Sub(t.Expires) < q.Window:
			t.Reported = true
			s.dirty = true
			return StoreAnswer{Outcome: OutcomeExpired, Ticket: *cloneTicket(t)}, nil
		}
	}
	n, all, kind := 0, 0, 0
	for _, t := range s.tickets {
		if t.Status == Pending {
			all++
			if t.Container == q.Container {
				n++
				if t.Kind == q.Kind {
					kind++
				}
			}
		}
	}
	if q.MaxPending > 0 && n >= q.MaxPending || q.MaxPendingAll > 0 && all >= q.MaxPendingAll {
		return StoreAnswer{Outcome: OutcomeLimit, Pending: n}, nil
	}
	if q.MaxPendingKind > 0 && kind >= q.MaxPendingKind {
		return StoreAnswer{Outcome: OutcomeLimit, Pending: kind}, nil
	}
	t := cloneTicket(&q.New)
	t.Holders = 0
	s.tickets[t.ID] = t
	s.byFP[t.Fingerprint] = t.ID
	if !q.NoHold {
		s.hold(t, q.Gate, 1)
	}
	s.dirty = true
	return StoreAnswer{Outcome: OutcomePending, Ticket: *cloneTicket(t), Created: true}, nil
}

func (s *FileStore) Claim(_ context.Context, id, fingerprint, gate, key string) (Ticket, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tickets[id]
	if !ok {
		return Ticket{}, ErrNotFound
	}
	if t.Fingerprint != fingerprint {
		return Ticket{}, ErrFingerprint
	}
	if key != "" && s.claimed[id][key] {
		return *cloneTicket(t), nil
	}
	switch t.Status {
	case Approved:
		if t.Uses <= 0 {
			return Ticket{}, ErrDecided
		}
		t.Uses--
	case Denied:
	default:
		return Ticket{}, ErrDecided
	}
	if key != "" && t.Status == Approved { // a denial spends nothing: no key kept
		if s.claimed[id] == nil {
			s.claimed[id] = map[string]bool{}
		}
		s.claimed[id][key] = true
	}
	s.hold(t, gate, -1)
	s.dirty = true
	return *cloneTicket(t), nil
}

func (s *FileStore) Leave(_ context.Context, id, gate string, cut bool) (Ticket, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tickets[id]
	if !ok {
		return Ticket{}, false, nil
	}
	if cut {
		t.Cut++
		s.dirty = true
	}
	if s.held[id][gate] > 0 {
		s.hold(t, gate, -1)
		if t.Holders == 0 && t.Status == Pending {
			t.Gone = GoneLeft
			if cut {
				t.Gone = GoneRestart
			}
			s.dirty = true
		}
	}
	return *cloneTicket(t), true, nil
}

func (s *FileStore) Decide(_ context.Context, id, fingerprint string, d Decision, bind func(Ticket) error) (Ticket, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tickets[id]
	if !ok {
		return Ticket{}, ErrNotFound
	}
	if t.Fingerprint != fingerprint {
		return Ticket{}, ErrFingerprint
	}
	if t.Status != Pending {
		return Ticket{}, ErrDecided
	}
	if !d.At.Before(t.Expires) {
		t.Status = Expired
		s.dirty = true
		return *cloneTicket(t), ErrExpiredNow
	}
	if bind != nil {
		if err := bind(*cloneTicket(t)); err != nil {
			return Ticket{}, err
		}
	}
	t.Status = d.Verdict
	d.Released = 0
	if d.Verdict == Approved {
		t.Uses = max(1, t.Holders)
		d.Released = t.Holders
		if t.Kind == KindConnect && t.Grant > 0 {
			s.grants[grantKey(t.Container, t.Host, t.Port)] = d.At.Add(t.Grant)
		}
	}
	t.Decision = &d
	s.dirty = true
	return *cloneTicket(t), nil
}

func (s *FileStore) SetHoldings(_ context.Context, gate string, h Holdings, now time.Time) ([]Ticket, error) {
	asking := make(map[string]bool, len(h.Asking))
	for _, fp := range h.Asking {
		asking[fp] = true
	}
	busy := make(map[string]bool, len(h.Busy))
	for _, id := range h.Busy {
		busy[id] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen[gate] = now
	type was struct {
		n    int
		gone string
	}
	before := map[string]was{}
	for _, t := range s.tickets {
		if t.Status == Pending {
			before[t.ID] = was{t.Holders, t.Gone}
		}
	}
	for id, n := range h.Cut {
		t, ok := s.tickets[id]
		if !ok {
			continue
		}
		t.Cut += n
		s.dirty = true
		s.cutElsewhere(t, gate, n)
		s.log.Info("hub: held requests cut by a restart of the gate", "id", t.ID, "cut", n)
	}
	var out []Ticket
	for _, t := range s.tickets {
		b, ok := before[t.ID]
		if !ok {
			continue
		}
		if !busy[t.ID] && !asking[t.Fingerprint] {
			if g, want := s.held[t.ID], max(0, h.Held[t.ID]); g[gate] != want {
				s.hold(t, gate, want-g[gate])
			}
		} else if h.Cut[t.ID] == 0 {
			continue
		}
		t.Gone = goneAfter(t.Holders, b.n, b.gone, h.Cut[t.ID] > 0)
		if t.Holders != b.n || t.Gone != b.gone {
			if t.Gone != b.gone {
				s.dirty = true // the counts alone are not the file's
			}
			out = append(out, *cloneTicket(t))
		}
	}
	return out, nil
}

// goneAfter is a pending ticket's Gone once its count went from before to n: "" while requests
// are held; GoneRestart when a restart cut them; GoneLeft when they stopped being held
// otherwise; else as it was.
func goneAfter(n, before int, gone string, cut bool) string {
	switch {
	case n > 0:
		return ""
	case cut:
		return GoneRestart
	case before > 0:
		return GoneLeft // a leave that never arrived
	}
	return gone
}

// cutElsewhere takes n requests off what gates other than gate hold on t, those heard from
// longest ago first: a gate that restarts under a new name reports the requests its last run
// held as cut, and that run's counts are still standing. A live gate's next report puts its own
// back. The caller holds mu.
func (s *FileStore) cutElsewhere(t *Ticket, gate string, n int) {
	var others []string
	for g := range s.held[t.ID] {
		if g != gate {
			others = append(others, g)
		}
	}
	sort.Slice(others, func(i, j int) bool {
		if !s.seen[others[i]].Equal(s.seen[others[j]]) {
			return s.seen[others[i]].Before(s.seen[others[j]])
		}
		return others[i] < others[j]
	})
	for _, g := range others {
		if n == 0 {
			break
		}
		d := min(n, s.held[t.ID][g])
		s.hold(t, g, -d)
		n -= d
	}
}

func (s *FileStore) Sweep(_ context.Context, now time.Time, r Retention) ([]Ticket, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var expired []Ticket
	for _, t := range s.tickets {
		if t.Status == Pending && !now.Before(t.Expires) {
			t.Status = Expired
			s.dirty = true
			expired = append(expired, *cloneTicket(t))
		}
	}
	drop := func(t *Ticket) {
		delete(s.tickets, t.ID)
		delete(s.held, t.ID)
		delete(s.claimed, t.ID)
		if s.byFP[t.Fingerprint] == t.ID {
			delete(s.byFP, t.Fingerprint)
		}
		s.dirty = true
	}
	var done []*Ticket
	for _, t := range s.tickets {
		switch {
		case t.Status == Pending:
		case now.Sub(t.Created) > r.Keep:
			drop(t)
		default:
			done = append(done, t)
		}
	}
	if r.MaxDecided > 0 && len(done) > r.MaxDecided {
		sort.Slice(done, func(i, j int) bool { return done[i].Created.After(done[j].Created) })
		for _, t := range done[r.MaxDecided:] {
			drop(t)
		}
	}
	for k, until := range s.grants {
		if now.After(until) {
			delete(s.grants, k)
			s.dirty = true
		}
	}
	if r.GateStale > 0 {
		for g, at := range s.seen {
			if now.Sub(at) <= r.GateStale {
				continue
			}
			delete(s.seen, g)
			for id, hs := range s.held {
				if hs[g] == 0 {
					continue
				}
				t := s.tickets[id]
				before, gone := t.Holders, t.Gone
				s.hold(t, g, -hs[g])
				if t.Status == Pending && t.Holders == 0 && before > 0 {
					t.Gone = GoneRestart // a gate that stopped reporting was killed
				}
				if t.Holders != before || t.Gone != gone {
					s.dirty = true
				}
			}
		}
	}
	return expired, nil
}

func (s *FileStore) Get(_ context.Context, id string) (Ticket, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tickets[id]
	if !ok {
		return Ticket{}, false, nil
	}
	return *cloneTicket(t), true, nil
}

func (s *FileStore) list(pending bool) []Ticket {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Ticket
	for _, t := range s.tickets {
		if (t.Status == Pending) == pending {
			out = append(out, *cloneTicket(t))
		}
	}
	return out
}

func (s *FileStore) Pending(context.Context) ([]Ticket, error) { return s.list(true), nil }
func (s *FileStore) Decided(context.Context) ([]Ticket, error) { return s.list(false), nil }

func (s *FileStore) SetGate(_ context.Context, gate string, g GateState) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gate = g
	return nil
}

func (s *FileStore) Gate(context.Context) (GateState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gate, nil
}

func (s *FileStore) Counts(_ context.Context, now time.Time, window time.Duration) (metrics.HubState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := metrics.HubState{Pending: map[string]int{}}
	for _, t := range s.tickets {
		st.Pending[t.Container] += 0 // a container with tickets of the last day shows 0, not nothing
		switch {
		case t.Status == Pending:
			st.Pending[t.Container]++
		case t.Status == Approved && t.Uses > 0 && t.Decision != nil && now.Sub(t.Decision.At) < window:
			st.Authorisations++
		}
	}
	for _, until := range s.grants {
		if now.Before(until) {
			st.Grants++
		}
	}
	return st, nil
}

// Watch: no other hub shares an embedded store.
func (s *FileStore) Watch(func(Change)) {}

// Flush writes the state file if it is behind.
func (s *FileStore) Flush() {
	if s.path == "" {
		return
	}
	s.mu.Lock()
	if !s.dirty {
		s.mu.Unlock()
		return
	}
	st := fileState{Version: 1, Grants: map[string]time.Time{}}
	for _, t := range s.tickets {
		c := cloneTicket(t)
		c.Waiting = ""
		st.Tickets = append(st.Tickets, c)
	}
	for k, v := range s.grants {
		st.Grants[k] = v
	}
	s.dirty = false
	s.mu.Unlock()
	sort.Slice(st.Tickets, func(i, j int) bool { return st.Tickets[i].Created.Before(st.Tickets[j].Created) })
	data, _ := json.MarshalIndent(st, "", " ")
	if err := atomicfile.WriteFile(s.path, data, 0o600); err != nil {
		s.log.Error("hub: writing the state file failed", "err", err)
		s.mu.Lock()
		s.dirty = true
		s.mu.Unlock()
	}
}

// Close writes the state file.
func (s *FileStore) Close() error {
	s.Flush()
	return nil
}

// cloneTicket is a deep copy of t.
func cloneTicket(t *Ticket) *Ticket {
	c := *t
	c.Headers = append([]Header(nil), t.Headers...)
	if t.Bind != nil {
		b := *t.Bind
		c.Bind = &b
	}
	if t.Decision != nil {
		d := *t.Decision
		c.Decision = &d
	}
	return &c
}
