package hub

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lockhttp/lockhttp/internal/atomicfile"
	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/claudeapi"
	"github.com/lockhttp/lockhttp/internal/hubapi"
	"github.com/lockhttp/lockhttp/internal/metrics"
)

// Defaults of Config's zero values.
const (
	DefaultTicketTTL  = 10 * time.Minute
	DefaultAuthWindow = 10 * time.Minute
	// keepDecided is how long decided and expired tickets stay in the state for the recent list.
	keepDecided = 24 * time.Hour
	maxRecent   = 200
	// maxDecided bounds the decided and expired tickets kept (the oldest go first), and
	// maxPendingAll the pending ones of all containers: the state file stays bounded.
	maxDecided    = 1000
	maxPendingAll = 5000
	// limitEvery is how often a container's "limit" event is published, at most.
	limitEvery = 10 * time.Second
)

// Errors of Decide that facades branch on.
var (
	ErrNotFound    = errors.New("no such ticket")
	ErrFingerprint = errors.New("the fingerprint does not match the ticket: the request changed, or the screen is stale; look at the ticket again")
	ErrDecided     = errors.New("the ticket is already decided or expired")
)

// Auditor records the hub's decisions.
type Auditor interface {
	Write(ctx context.Context, r *audit.Record) error
}

// Config is what a Hub needs.
type Config struct {
	// StatePath is the state file (tickets, decisions, grants), written atomically on every
	// change. Empty: state in memory only.
	StatePath string
	// Key signs decisions for the gate.
	Key ed25519.PrivateKey
	Now func() time.Time
	Log *slog.Logger
	// Audit receives one record per decision and expiry. Nil: none.
	Audit Auditor
	// TicketTTL is how long a ticket waits for a human before it expires. Zero: 10m.
	TicketTTL time.Duration
	// AuthWindow is how long an approval nobody was holding for stays good for one retry of the
	// identical request, and how long a denial answers retries at once. Zero: 10m.
	AuthWindow time.Duration
	// Bind keeps the binding an approval of a ticket with Bind makes (the console hosting the
	// hub: console.(*Console).Bind), naming who approved and the ticket. An approval whose
	// binding fails is not recorded. Nil: such tickets cannot be approved.
	Bind func(b Bind, by, ticket string) error
	// Issued keeps the binding of a Claude login the gate saw issued to a container (the
	// console hosting the hub: console.(*Console).BindIssued). Nil: the gate's BindIssued fails,
	// and the container's next request with the login asks.
	Issued func(i Issued) error
	// Metrics counts tickets opened and closed and the time to a human's decision (metrics.go).
	// Nil: nothing counted.
	Metrics *metrics.Hub
}

// Hub holds the tickets.
type Hub struct {
	cfg Config
	now func() time.Time
	log *slog.Logger

	mu      sync.Mutex
	tickets map[string]*Ticket      // guarded by mu
	byFP    map[string]string       // guarded by mu: fingerprint → id of its latest ticket
	grants  map[string]time.Time    // guarded by mu: "container|host|port" → until
	gate    GateState               // guarded by mu
	subs    map[chan Event]struct{} // guarded by mu
	dirty   bool                    // guarded by mu: the state file is behind
	limited map[string]time.Time    // guarded by mu: when each container's last "limit" event went out
}

// state is the state file.
type state struct {
	Version int                  `json:"version"`
	Tickets []*Ticket            `json:"tickets"`
	Grants  map[string]time.Time `json:"grants"`
}

// New loads the state file (if any) and returns the hub. Tickets that were pending stay pending
// with their expiry; held requests lost with a restart are not counted as holders.
func New(cfg Config) (*Hub, error) {
	if cfg.Key == nil {
		return nil, errors.New("hub: no signing key")
	}
	h := &Hub{cfg: cfg, now: cfg.Now, log: cfg.Log, tickets: map[string]*Ticket{}, byFP: map[string]string{},
		grants: map[string]time.Time{}, subs: map[chan Event]struct{}{}, limited: map[string]time.Time{}}
	if h.now == nil {
		h.now = time.Now
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if cfg.StatePath != "" {
		if err := h.load(); err != nil {
			return nil, err
		}
	}
	return h, nil
}

func (h *Hub) ttl() time.Duration {
	if h.cfg.TicketTTL > 0 {
		return h.cfg.TicketTTL
	}
	return DefaultTicketTTL
}

func (h *Hub) window() time.Duration {
	if h.cfg.AuthWindow > 0 {
		return h.cfg.AuthWindow
	}
	return DefaultAuthWindow
}

// PublicKey is the key the gate verifies decisions with.
func (h *Hub) PublicKey() ed25519.PublicKey { return h.cfg.Key.Public().(ed25519.PublicKey) }

func newTicketID() string {
	var b [6]byte
	rand.Read(b[:])
	return "t" + hex.EncodeToString(b[:])
}

func grantKey(container, host string, port int) string {
	return container + "|" + host + "|" + strconv.Itoa(port)
}

// Ask is the gate's question for a request the policy asks about. See the Outcome constants.
func (h *Hub) Ask(req AskRequest) (AskAnswer, error) {
	if req.Fingerprint == "" || req.Container == "" {
		return AskAnswer{}, errors.New("hub: a ticket needs a container and a fingerprint")
	}
	if req.Kind != KindRequest && req.Kind != KindConnect {
		return AskAnswer{}, fmt.Errorf("hub: unknown ticket kind %q", req.Kind)
	}
	if b := req.Bind; b != nil && (req.Kind != KindRequest || b.Container != req.Container || !claudeapi.IsHash(b.Hash)) {
		return AskAnswer{}, errors.New("hub: a binding is for a request ticket, names the ticket's container and a sha256 hex hash")
	}
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if req.Kind == KindConnect {
		if until, ok := h.grants[grantKey(req.Container, req.Host, req.Port)]; ok && now.Before(until) {
			t := h.tickets[h.byFP[req.Fingerprint]]
			if t != nil && t.Status == Approved {
				return AskAnswer{Outcome: OutcomeApproved, Ticket: *t, Signed: h.signed(t)}, nil
			}
		}
	}
	if id, ok := h.byFP[req.Fingerprint]; ok {
		t := h.tickets[id]
		decidedRecently := t.Decision != nil && now.Sub(t.Decision.At) < h.window()
		switch {
		case t.Status == Pending:
			t.Holders++
			t.Gone = ""
			h.changed()
			h.publish(Event{Type: "ticket", Ticket: h.copyTicket(t)})
			return AskAnswer{Outcome: OutcomePending, Ticket: *t}, nil
		case t.Status == Approved && t.Uses > 0 && decidedRecently:
			t.Uses--
			h.changed()
			return AskAnswer{Outcome: OutcomeApproved, Ticket: *t, Signed: h.signed(t)}, nil
		case t.Status == Denied && decidedRecently:
			return AskAnswer{Outcome: OutcomeDenied, Ticket: *t, Signed: h.signed(t)}, nil
		case t.Status == Expired && !t.Reported && now.Sub(t.Expires) < h.window():
			t.Reported = true
			h.changed()
			return AskAnswer{Outcome: OutcomeExpired, Ticket: *t}, nil
		}
	}
	if n, all := h.pendingOf(req.Container); req.MaxPending > 0 && n >= req.MaxPending || all >= maxPendingAll {
		if last, ok := h.limited[req.Container]; !ok || now.Sub(last) >= limitEvery {
			h.limited[req.Container] = now
			h.publish(Event{Type: "limit", Limit: &Limit{Container: req.Container, Pending: n}})
			h.log.Warn("hub: a container has as many pending tickets as it may; its new asks are refused", "container", req.Container, "pending", n, "max_pending", req.MaxPending)
		}
		h.cfg.Metrics.Limited(req.Container)
		return AskAnswer{Outcome: OutcomeLimit}, nil
	}
	t := &Ticket{
		ID: newTicketID(), Kind: req.Kind, Container: req.Container, Agent: req.Agent, Method: req.Method,
		URL: req.URL, Headers: req.Headers, BodyPreview: req.BodyPreview, BodySize: req.BodySize,
		Rule: req.Rule, Reason: req.Reason, Fingerprint: req.Fingerprint, Created: now, Expires: now.Add(h.ttl()),
		NeverAuto: true, Warning: req.Warning, Red: req.Red, Host: req.Host, Port: req.Port, Grant: req.Grant,
		Bind: req.Bind, Status: Pending, Holders: 1,
	}
	h.tickets[t.ID] = t
	h.byFP[t.Fingerprint] = t.ID
	h.changed()
	h.publish(Event{Type: "ticket", Ticket: h.copyTicket(t)})
	h.cfg.Metrics.Opened(t.Container)
	h.log.Info("hub: new ticket", "id", t.ID, "container", t.Container, "method", t.Method, "url", t.URL, "rule", t.Rule)
	return AskAnswer{Outcome: OutcomePending, Ticket: *t}, nil
}

// pendingOf counts the pending tickets of container, and of all containers; the caller holds mu.
func (h *Hub) pendingOf(container string) (n, all int) {
	for _, t := range h.tickets {
		if t.Status == Pending {
			all++
			if t.Container == container {
				n++
			}
		}
	}
	return n, all
}

// Claim takes the decision of a ticket the caller was holding a request on: for an approval it
// uses one of its uses. ErrDecided means nothing is left to claim (ask again).
func (h *Hub) Claim(id, fingerprint string) (*SignedDecision, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t, ok := h.tickets[id]
	if !ok {
		return nil, ErrNotFound
	}
	if t.Fingerprint != fingerprint {
		return nil, ErrFingerprint
	}
	switch t.Status {
	case Approved:
		if t.Uses <= 0 {
			return nil, ErrDecided
		}
		t.Uses--
		if t.Holders > 0 {
			t.Holders--
		}
		h.changed()
		return h.signed(t), nil
	case Denied:
		if t.Holders > 0 {
			t.Holders--
		}
		h.changed()
		return h.signed(t), nil
	}
	return nil, ErrDecided
}

// Leave tells the hub that a request held on the ticket stopped waiting (E_PENDING, or the
// client went away).
func (h *Hub) Leave(id string) { h.leaveAs(id, false) }

// LeaveCut tells the hub that a request held on the ticket was cut by the gate's stop: it was
// answered E_PENDING, and the ticket counts it as cut (Ticket.Cut, GoneRestart).
func (h *Hub) LeaveCut(id string) { h.leaveAs(id, true) }

func (h *Hub) leaveAs(id string, cut bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t, ok := h.tickets[id]
	if !ok {
		return
	}
	if cut {
		t.Cut++
		h.changed()
	}
	if t.Holders > 0 {
		t.Holders--
		h.changed()
		if t.Holders == 0 && t.Status == Pending {
			t.Gone = GoneLeft
			if cut {
				t.Gone = GoneRestart
			}
		}
	}
}

func (h *Hub) signed(t *Ticket) *SignedDecision {
	if t.Decision == nil {
		return nil
	}
	d := &SignedDecision{Ticket: t.ID, Fingerprint: t.Fingerprint, Verdict: t.Decision.Verdict, By: t.Decision.By,
		Reason: t.Decision.Reason, At: t.Decision.At}
	sign(h.cfg.Key, d)
	return d
}

// Decide records a human's answer on a pending ticket. fingerprint is the one the facade showed:
// it must be the ticket's. by names the facade and the person ("terminal:alice"). Nothing but a
// call from a facade a human operates reaches here: there is no automatic approval.
func (h *Hub) Decide(id, fingerprint string, approve bool, by, reason string) (Ticket, error) {
	if strings.TrimSpace(by) == "" {
		return Ticket{}, errors.New("a decision names who made it")
	}
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	t, ok := h.tickets[id]
	if !ok {
		return Ticket{}, ErrNotFound
	}
	if t.Fingerprint != fingerprint {
		return Ticket{}, ErrFingerprint
	}
	if t.Status != Pending {
		return Ticket{}, ErrDecided
	}
	if !now.Before(t.Expires) {
		h.expireLocked(t)
		return Ticket{}, ErrDecided
	}
	if approve && t.Bind != nil {
		// The binding first: an approval whose binding is not kept would let this request out
		// and ask again about the next one, and the human would not know why.
		if h.cfg.Bind == nil {
			return Ticket{}, errors.New("this hub cannot bind a Claude credential (it runs without the console): deny the ticket, or list the credential in the policy's [claude] credentials file")
		}
		if err := h.cfg.Bind(*t.Bind, by, t.ID); err != nil {
			h.log.Error("hub: binding the credential failed; the ticket stays pending", "id", t.ID, "err", err)
			return Ticket{}, fmt.Errorf("not approved: the credential could not be bound (%v); the ticket stays pending", err)
		}
	}
	t.Status = Denied
	if approve {
		t.Status = Approved
		t.Uses = max(1, t.Holders)
		if t.Kind == KindConnect && t.Grant > 0 {
			h.grants[grantKey(t.Container, t.Host, t.Port)] = now.Add(t.Grant)
		}
	}
	t.Decision = &Decision{Verdict: t.Status, By: by, Reason: reason, At: now}
	if approve {
		t.Decision.Released = t.Holders
	}
	h.changed()
	h.publish(Event{Type: "decided", Ticket: h.copyTicket(t)})
	h.closed(t, facadeName(by), now)
	h.log.Info("hub: decided", "id", t.ID, "verdict", t.Status, "by", by, "held", t.Holders)
	h.record(t, "decided")
	return *h.copyTicket(t), nil
}

// BindIssued has the console bind a Claude login the gate saw issued to a container, without a
// ticket (Issued). It checks what the gate sends: a container name, a SHA-256 hex hash, a host
// name and a request id, each of bounded length.
func (h *Hub) BindIssued(i Issued) error {
	if !cleanToken(i.Container, 64) || !claudeapi.IsHash(i.Hash) || !cleanToken(i.Host, 253) || !cleanToken(i.Request, 64) {
		return errors.New("hub: an issued login names a container, a sha256 hex hash, the host that issued it and the gate's request")
	}
	if h.cfg.Issued == nil {
		return errors.New("hub: this hub cannot bind a Claude login (it runs without the console)")
	}
	if err := h.cfg.Issued(i); err != nil {
		return fmt.Errorf("hub: binding the issued login: %w", err)
	}
	h.log.Info("hub: an issued Claude login bound", "container", i.Container, "host", i.Host, "request", i.Request)
	return nil
}

// cleanToken reports whether s is 1 to n bytes of letters, digits, '.', '_', '-' and ':'.
func cleanToken(s string, n int) bool {
	if s == "" || len(s) > n {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-' || c == ':') {
			return false
		}
	}
	return true
}

// Expire marks pending tickets past their expiry; Run calls it every second.
func (h *Hub) Expire() {
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, t := range h.tickets {
		if t.Status == Pending && !now.Before(t.Expires) {
			h.expireLocked(t)
		}
	}
	// Forget old decided tickets and grants.
	for id, t := range h.tickets {
		if t.Status != Pending && now.Sub(t.Created) > keepDecided {
			delete(h.tickets, id)
			if h.byFP[t.Fingerprint] == id {
				delete(h.byFP, t.Fingerprint)
			}
			h.changed()
		}
	}
	// Keep at most maxDecided decided and expired tickets, the latest.
	var done []*Ticket
	for _, t := range h.tickets {
		if t.Status != Pending {
			done = append(done, t)
		}
	}
	if len(done) > maxDecided {
		sort.Slice(done, func(i, j int) bool { return done[i].Created.After(done[j].Created) })
		for _, t := range done[maxDecided:] {
			delete(h.tickets, t.ID)
			if h.byFP[t.Fingerprint] == t.ID {
				delete(h.byFP, t.Fingerprint)
			}
		}
		h.changed()
	}
	for k, until := range h.grants {
		if now.After(until) {
			delete(h.grants, k)
			h.changed()
		}
	}
}

func (h *Hub) expireLocked(t *Ticket) {
	t.Status = Expired
	h.changed()
	h.publish(Event{Type: "expired", Ticket: h.copyTicket(t)})
	h.closed(t, "", h.now())
	h.record(t, "expired")
}

func (h *Hub) record(t *Ticket, event string) {
	if h.cfg.Audit == nil {
		return
	}
	r := &audit.Record{Time: h.now(), Event: "ticket-" + event, ID: t.ID, Container: t.Container, Agent: t.Agent,
		Method: t.Method, URL: t.URL, Rule: t.Rule, Verdict: "ASK", Ticket: t.ID}
	if t.Decision != nil {
		r.Approver = t.Decision.By
		r.Reason = t.Decision.Reason
		r.Detail = string(t.Decision.Verdict) + " fingerprint " + t.Fingerprint
		if t.Status == Approved {
			if t.Decision.Released > 0 {
				r.Detail += fmt.Sprintf("; released %d held request(s)", t.Decision.Released)
			} else {
				r.Detail += "; no request was waiting (" + goneWords(t.Gone) + "): one identical retry may pass until " +
					t.Decision.At.Add(h.window()).UTC().Format(time.RFC3339)
			}
		}
	}
	// The audit write happens under the lock: decisions are rare and must be on record.
	if err := h.cfg.Audit.Write(context.Background(), r); err != nil {
		h.log.Error("hub: audit write failed", "err", err)
	}
}

// Run expires tickets and writes the state file until ctx ends.
func (h *Hub) Run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			h.Flush()
			return
		case <-t.C:
			h.Expire()
			h.Flush()
		}
	}
}

// changed marks the state file behind; the caller holds mu. Writes happen in Flush so that a
// burst of changes costs one write.
func (h *Hub) changed() { h.dirty = true }

// Flush writes the state file if it is behind.
func (h *Hub) Flush() {
	if h.cfg.StatePath == "" {
		return
	}
	h.mu.Lock()
	if !h.dirty {
		h.mu.Unlock()
		return
	}
	st := state{Version: 1, Grants: map[string]time.Time{}}
	for _, t := range h.tickets {
		c := h.copyTicket(t)
		c.Waiting = "" // said again on every copy handed out
		st.Tickets = append(st.Tickets, c)
	}
	for k, v := range h.grants {
		st.Grants[k] = v
	}
	h.dirty = false
	h.mu.Unlock()
	sort.Slice(st.Tickets, func(i, j int) bool { return st.Tickets[i].Created.Before(st.Tickets[j].Created) })
	data, _ := json.MarshalIndent(st, "", " ")
	if err := atomicfile.WriteFile(h.cfg.StatePath, data, 0o600); err != nil {
		h.log.Error("hub: writing the state file failed", "err", err)
		h.mu.Lock()
		h.dirty = true
		h.mu.Unlock()
	}
}

// FlushNow writes the state file at once (after a decision, so that a restart keeps it).
func (h *Hub) FlushNow() { h.Flush() }

func (h *Hub) load() error {
	f, err := os.Open(h.cfg.StatePath)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("hub state: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, 64<<20))
	if err != nil {
		return fmt.Errorf("hub state %s: %w", h.cfg.StatePath, err)
	}
	var st state
	if err := json.Unmarshal(data, &st); err != nil {
		return fmt.Errorf("hub state %s: %w; move it aside to start with no tickets", h.cfg.StatePath, err)
	}
	for _, t := range st.Tickets {
		t.Holders = 0 // the requests that were held did not survive the restart
		h.tickets[t.ID] = t
		if prev, ok := h.byFP[t.Fingerprint]; !ok || h.tickets[prev].Created.Before(t.Created) {
			h.byFP[t.Fingerprint] = t.ID
		}
	}
	for k, v := range st.Grants {
		h.grants[k] = v
	}
	return nil
}

// copyTicket is t as the hub hands it out: a copy, with Waiting filled.
func (h *Hub) copyTicket(t *Ticket) *Ticket {
	c := cloneTicket(t)
	c.Waiting = h.waitingText(t)
	return c
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

// Pending lists the pending tickets, newest first.
func (h *Hub) Pending() []Ticket {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []Ticket
	for _, t := range h.tickets {
		if t.Status == Pending {
			out = append(out, *h.copyTicket(t))
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.After(out[j].Created)
		}
		return out[i].ID > out[j].ID
	})
	return out
}

// Page sizes of PendingPage (hubapi).
const (
	DefaultPage = hubapi.DefaultPage
	MaxPage     = hubapi.MaxPage
)

// PendingPage is one page of Pending: at most limit tickets (DefaultPage when limit is 0 or
// less, at most MaxPage) and about maxPageBytes after cursor ("" for the first page), and the
// cursor of the next page, "" when there is none. A cursor names the last ticket of a page by its time and id, so that a
// ticket decided between two pages moves no other ticket from one page to the other.
func (h *Hub) PendingPage(limit int, cursor string) ([]Ticket, string) {
	if limit <= 0 {
		limit = DefaultPage
	}
	limit = min(limit, MaxPage)
	all := h.Pending()
	start := 0
	if cursor != "" {
		start = len(all)
		for i, t := range all {
			if cursorOf(t) == cursor || olderThan(t, cursor) {
				start = i
				if cursorOf(t) == cursor {
					start = i + 1
				}
				break
			}
		}
	}
	end, size := start, 0
	for end < len(all) && end-start < limit && (end == start || size+ticketSize(&all[end]) <= maxPageBytes) {
		size += ticketSize(&all[end])
		end++
	}
	page := all[start:end]
	next := ""
	if end < len(all) {
		next = cursorOf(page[len(page)-1])
	}
	return page, next
}

// maxPageBytes bounds a page of tickets as the facades read it (about: ticketSize), under what
// their clients read in one answer.
const maxPageBytes = 1 << 20

// ticketSize is about how many bytes t takes as JSON.
func ticketSize(t *Ticket) int {
	n := 512 + len(t.URL) + len(t.BodyPreview) + len(t.Reason) + len(t.Warning)
	for _, h := range t.Headers {
		n += len(h.Name) + len(h.Value) + 32
	}
	return n
}

// cursorOf names t in the order Pending lists tickets: its creation time and id.
func cursorOf(t Ticket) string {
	return strconv.FormatInt(t.Created.UnixNano(), 10) + "." + t.ID
}

// olderThan reports whether t comes after the ticket cursor names in Pending's order (newest
// first).
func olderThan(t Ticket, cursor string) bool {
	ns, id, ok := strings.Cut(cursor, ".")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil {
		return true
	}
	c := t.Created.UnixNano()
	return c < n || c == n && t.ID < id
}

// Recent lists decided and expired tickets, the latest decision first, at most n.
func (h *Hub) Recent(n int) []Ticket {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []Ticket
	for _, t := range h.tickets {
		if t.Status != Pending {
			out = append(out, *h.copyTicket(t))
		}
	}
	at := func(t Ticket) time.Time {
		if t.Decision != nil {
			return t.Decision.At
		}
		return t.Expires
	}
	sort.Slice(out, func(i, j int) bool { return at(out[i]).After(at(out[j])) })
	if n > 0 && len(out) > n {
		out = out[:n]
	}
	return out
}

// Get returns one ticket.
func (h *Hub) Get(id string) (Ticket, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t, ok := h.tickets[id]
	if !ok {
		return Ticket{}, false
	}
	return *h.copyTicket(t), true
}

// SetGateState records what the gate reported.
func (h *Hub) SetGateState(s GateState) {
	s.Reported = h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gate = s
	h.publish(Event{Type: "gate", Gate: &s})
}

// GateState is what the gate reported last (zero Reported: never).
func (h *Hub) GateState() GateState {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gate
}

// Subscribe returns a channel of events and a function that ends the subscription. A
// subscriber that falls more than 1,024 events behind is dropped (its channel is closed): it
// must subscribe again and reread the tickets.
func (h *Hub) Subscribe() (<-chan Event, func()) {
	ch := make(chan Event, 1024)
	h.mu.Lock()
	h.subs[ch] = struct{}{}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if _, ok := h.subs[ch]; ok {
			delete(h.subs, ch)
			close(ch)
		}
	}
}

// publish sends ev to every subscriber; the caller holds mu.
func (h *Hub) publish(ev Event) {
	for ch := range h.subs {
		select {
		case ch <- ev:
		default:
			delete(h.subs, ch)
			close(ch)
		}
	}
}
