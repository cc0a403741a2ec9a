package hub

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

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
	// Store keeps the tickets, decisions and grants. Nil: an embedded store (NewFileStore) on
	// StatePath.
	Store Store
	// StatePath is the embedded store's state file (tickets, decisions, grants), written
	// atomically on every change. Empty: state in memory only. Unused with Store.
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
	// CheckRule checks the rule an agent asks for against the approved policy and the floor
	// (the console hosting the hub: propose.Check), and says what taking it would change.
	// Nil: the hub refuses every request for a rule.
	CheckRule func(container, rule string) (hubapi.RuleAsk, error)
	// Metrics counts tickets opened and closed and the time to a human's decision (metrics.go).
	// Nil: nothing counted.
	Metrics *metrics.Hub
}

// storeTimeout bounds one call to the store.
const storeTimeout = 10 * time.Second

// gateStale is how long the counts of a gate that stopped calling stand: a gate reports what
// it holds every 5 s while its event stream is up.
const gateStale = 30 * time.Second

// Hub holds the tickets.
type Hub struct {
	cfg   Config
	now   func() time.Time
	log   *slog.Logger
	store Store

	mu      sync.Mutex
	subs    map[chan Event]struct{} // guarded by mu
	limited map[string]time.Time    // guarded by mu: when each container's last "limit" event went out

	ruleChecks ruleRate // each container's requests for rules this minute
	asksRead   ruleRate // each container's reads of its tickets this minute
}

// New opens the store (the embedded one on StatePath unless Store is set) and returns the hub.
// Tickets that were pending stay pending with their expiry; held requests lost with a restart
// of an embedded store's hub are not counted as holders.
func New(cfg Config) (*Hub, error) {
	if cfg.Key == nil {
		return nil, errors.New("hub: no signing key")
	}
	h := &Hub{cfg: cfg, log: cfg.Log, store: cfg.Store, subs: map[chan Event]struct{}{}, limited: map[string]time.Time{}}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	// Every time the hub keeps is to the microsecond, as a database keeps it.
	h.now = func() time.Time { return now().Truncate(time.Microsecond) }
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if h.store == nil {
		fs, err := NewFileStore(cfg.StatePath, h.log)
		if err != nil {
			return nil, err
		}
		h.store = fs
	}
	h.store.Watch(h.remote)
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

func (h *Hub) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), storeTimeout)
}

// PublicKey is the key the gate verifies decisions with.
func (h *Hub) PublicKey() ed25519.PublicKey { return h.cfg.Key.Public().(ed25519.PublicKey) }

func newTicketID() string {
	var b [6]byte
	rand.Read(b[:])
	return "t" + hex.EncodeToString(b[:])
}

// Ask is the gate's question for a request the policy asks about. See the Outcome constants.
func (h *Hub) Ask(req AskRequest) (AskAnswer, error) { return h.AskAs("", req) }

// AskAs is Ask from the gate named gate (hubapi.HeaderGate): the requests each gate holds are
// counted apart, so that one gate's report of what it holds leaves the others' standing.
func (h *Hub) AskAs(gate string, req AskRequest) (AskAnswer, error) {
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
	t := Ticket{
		ID: newTicketID(), Kind: req.Kind, Container: req.Container, Agent: req.Agent, Method: req.Method,
		URL: req.URL, Headers: req.Headers, BodyPreview: req.BodyPreview, BodySize: req.BodySize,
		Rule: req.Rule, Reason: req.Reason, Fingerprint: req.Fingerprint, Created: now, Expires: now.Add(h.ttl()),
		NeverAuto: true, Warning: req.Warning, Red: req.Red, Host: req.Host, Port: req.Port, Grant: req.Grant,
		Bind: req.Bind, MCP: req.MCP, Status: Pending,
	}
	ctx, cancel := h.ctx()
	defer cancel()
	a, err := h.store.Ask(ctx, StoreAsk{AskRequest: req, Gate: gate, New: t, Now: now, Window: h.window(), MaxPendingAll: maxPendingAll})
	if err != nil {
		return AskAnswer{}, storeFailed(err)
	}
	switch a.Outcome {
	case OutcomeLimit:
		h.mu.Lock()
		last, ok := h.limited[req.Container]
		if !ok || now.Sub(last) >= limitEvery {
			h.limited[req.Container] = now
			h.publish(Event{Type: "limit", Limit: &Limit{Container: req.Container, Pending: a.Pending}})
			h.log.Warn("hub: a container has as many pending tickets as it may; its new asks are refused", "container", req.Container, "pending", a.Pending, "max_pending", req.MaxPending)
		}
		h.mu.Unlock()
		h.cfg.Metrics.Limited(req.Container)
		return AskAnswer{Outcome: OutcomeLimit}, nil
	case OutcomePending:
		h.mu.Lock()
		h.publish(Event{Type: "ticket", Ticket: h.copyTicket(&a.Ticket)})
		h.mu.Unlock()
		if a.Created {
			h.cfg.Metrics.Opened(a.Ticket.Container)
			h.log.Info("hub: new ticket", "id", a.Ticket.ID, "container", a.Ticket.Container, "method", a.Ticket.Method, "url", a.Ticket.URL, "rule", a.Ticket.Rule)
		}
		return AskAnswer{Outcome: OutcomePending, Ticket: a.Ticket}, nil
	case OutcomeApproved, OutcomeDenied:
		return AskAnswer{Outcome: a.Outcome, Ticket: a.Ticket, Signed: h.signed(&a.Ticket)}, nil
	}
	return AskAnswer{Outcome: a.Outcome, Ticket: a.Ticket}, nil
}

// Claim takes the decision of a ticket the caller was holding a request on: for an approval it
// uses one of its uses. ErrDecided means nothing is left to claim (ask again).
func (h *Hub) Claim(id, fingerprint string) (*SignedDecision, error) {
	return h.ClaimAs("", id, fingerprint, "")
}

// ClaimAs is Claim from the gate named gate (see AskAs); a claim whose key (hubapi.ClaimRequest)
// was taken already is answered again without spending another use.
func (h *Hub) ClaimAs(gate, id, fingerprint, key string) (*SignedDecision, error) {
	ctx, cancel := h.ctx()
	defer cancel()
	t, err := h.store.Claim(ctx, id, fingerprint, gate, key)
	if err != nil {
		return nil, storeFailed(err)
	}
	return h.signed(&t), nil
}

// Leave tells the hub that a request held on the ticket stopped waiting (E_PENDING, or the
// client went away).
func (h *Hub) Leave(id string) { h.leaveAs("", id, false) }

// LeaveCut tells the hub that a request held on the ticket was cut by the gate's stop: it was
// answered E_PENDING, and the ticket counts it as cut (Ticket.Cut, GoneRestart).
func (h *Hub) LeaveCut(id string) { h.leaveAs("", id, true) }

func (h *Hub) leaveAs(gate, id string, cut bool) (Ticket, bool) {
	ctx, cancel := h.ctx()
	defer cancel()
	t, ok, err := h.store.Leave(ctx, id, gate, cut)
	if err != nil {
		h.log.Error("hub: a leave was not kept; the gate's next report of what it holds corrects the count", "id", id, "err", err)
		return Ticket{}, false
	}
	return t, ok
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
	return h.decideWith(id, fingerprint, approve, by, reason, nil)
}

func (h *Hub) decideWith(id, fingerprint string, approve bool, by, reason string, take func(Ticket) error) (Ticket, error) {
	if strings.TrimSpace(by) == "" {
		return Ticket{}, errors.New("a decision names who made it")
	}
	now := h.now()
	d := Decision{Verdict: Denied, By: by, Reason: reason, At: now}
	var bind func(Ticket) error
	if approve {
		d.Verdict = Approved
		if take != nil {
			return h.decide(id, fingerprint, d, take)
		}
		// The binding first: an approval whose binding is not kept would let this request out
		// and ask again about the next one, and the human would not know why.
		bind = func(t Ticket) error {
			if t.Kind == KindRule {
				return ErrRuleAtTerminal
			}
			if t.Bind == nil {
				return nil
			}
			if h.cfg.Bind == nil {
				return errors.New("this hub cannot bind a Claude credential (it runs without the console): deny the ticket, or list the credential in the policy's [claude] credentials file")
			}
			if err := h.cfg.Bind(*t.Bind, by, t.ID); err != nil {
				h.log.Error("hub: binding the credential failed; the ticket stays pending", "id", t.ID, "err", err)
				return fmt.Errorf("not approved: the credential could not be bound (%v); the ticket stays pending", err)
			}
			return nil
		}
	}
	return h.decide(id, fingerprint, d, bind)
}

// decide keeps d on ticket id, bind first (see Store.Decide), and tells the subscribers.
func (h *Hub) decide(id, fingerprint string, d Decision, bind func(Ticket) error) (Ticket, error) {
	by, now := d.By, d.At
	ctx, cancel := h.ctx()
	defer cancel()
	t, err := h.store.Decide(ctx, id, fingerprint, d, bind)
	if errors.Is(err, ErrExpiredNow) {
		h.expired(t)
		return Ticket{}, ErrDecided
	}
	if err != nil {
		return Ticket{}, storeFailed(err)
	}
	h.mu.Lock()
	h.publish(Event{Type: "decided", Ticket: h.copyTicket(&t)})
	h.mu.Unlock()
	h.closed(&t, facadeName(by), now)
	h.log.Info("hub: decided", "id", t.ID, "verdict", t.Status, "by", by, "held", t.Holders)
	h.record(&t, "decided")
	return *h.copyTicket(&t), nil
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

// Expire marks pending tickets past their expiry and forgets old ones; Run calls it every
// second. Each expiry is published, counted and recorded by the hub whose sweep made it.
func (h *Hub) Expire() {
	ctx, cancel := h.ctx()
	defer cancel()
	gone, err := h.store.Sweep(ctx, h.now(), Retention{Keep: keepDecided, MaxDecided: maxDecided, GateStale: gateStale})
	if err != nil {
		h.log.Error("hub: the expiry sweep failed; the next one tries again", "err", err)
		return
	}
	for _, t := range gone {
		h.expired(t)
	}
}

// expired publishes, counts and records the expiry of t.
func (h *Hub) expired(t Ticket) {
	h.mu.Lock()
	h.publish(Event{Type: "expired", Ticket: h.copyTicket(&t)})
	h.mu.Unlock()
	h.closed(&t, "", h.now())
	h.record(&t, "expired")
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
	if err := h.cfg.Audit.Write(context.Background(), r); err != nil {
		h.log.Error("hub: audit write failed", "err", err)
	}
}

// Run expires tickets and writes the embedded store's state file until ctx ends, then closes
// the store.
func (h *Hub) Run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			h.Flush()
			h.store.Close()
			return
		case <-t.C:
			h.Expire()
			h.Flush()
		}
	}
}

// Flush writes the embedded store's state file if it is behind (a store of its own keeps every
// change as it is made).
func (h *Hub) Flush() {
	if f, ok := h.store.(interface{ Flush() }); ok {
		f.Flush()
	}
}

// FlushNow writes the state file at once (after a decision, so that a restart keeps it).
func (h *Hub) FlushNow() { h.Flush() }

// copyTicket is t as the hub hands it out: a copy, with Waiting filled.
func (h *Hub) copyTicket(t *Ticket) *Ticket {
	c := cloneTicket(t)
	c.Waiting = h.waitingText(t)
	return c
}

// Pending lists the pending tickets, newest first.
func (h *Hub) Pending() []Ticket {
	ctx, cancel := h.ctx()
	defer cancel()
	ts, err := h.store.Pending(ctx)
	if err != nil {
		h.log.Error("hub: reading the pending tickets failed", "err", err)
		return nil
	}
	out := make([]Ticket, 0, len(ts))
	for i := range ts {
		out = append(out, *h.copyTicket(&ts[i]))
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
	ctx, cancel := h.ctx()
	defer cancel()
	ts, err := h.store.Decided(ctx)
	if err != nil {
		h.log.Error("hub: reading the decided tickets failed", "err", err)
		return nil
	}
	out := make([]Ticket, 0, len(ts))
	for i := range ts {
		out = append(out, *h.copyTicket(&ts[i]))
	}
	at := func(t Ticket) time.Time {
		if t.Decision != nil {
			return t.Decision.At
		}
		return t.Expires
	}
	sort.Slice(out, func(i, j int) bool {
		if !at(out[i]).Equal(at(out[j])) {
			return at(out[i]).After(at(out[j]))
		}
		return out[i].ID > out[j].ID
	})
	if n > 0 && len(out) > n {
		out = out[:n]
	}
	return out
}

// Get returns one ticket.
func (h *Hub) Get(id string) (Ticket, bool) {
	ctx, cancel := h.ctx()
	defer cancel()
	t, ok, err := h.store.Get(ctx, id)
	if err != nil {
		h.log.Error("hub: reading a ticket failed", "id", id, "err", err)
		return Ticket{}, false
	}
	if !ok {
		return Ticket{}, false
	}
	return *h.copyTicket(&t), true
}

// NotPending is the tickets of ids that are no longer pending (decided or expired): what a
// gate's requests wait on, reread in one call. Unknown ids are left out.
func (h *Hub) NotPending(ids []string) []Ticket {
	var out []Ticket
	for _, id := range ids {
		ctx, cancel := h.ctx()
		t, ok, err := h.store.Get(ctx, id)
		cancel()
		if err != nil {
			h.log.Error("hub: reading a ticket failed", "id", id, "err", err)
			continue
		}
		if ok && t.Status != Pending {
			out = append(out, *h.copyTicket(&t))
		}
	}
	return out
}

// SetGateState records what the gate reported.
func (h *Hub) SetGateState(s GateState) { h.SetGateStateAs("", s) }

// SetGateStateAs records what the gate named gate reported.
func (h *Hub) SetGateStateAs(gate string, s GateState) {
	s.Reported = h.now()
	ctx, cancel := h.ctx()
	defer cancel()
	if err := h.store.SetGate(ctx, gate, s); err != nil {
		h.log.Error("hub: keeping the gate's state failed", "err", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.publish(Event{Type: "gate", Gate: &s})
}

// GateState is what a gate reported last (zero Reported: never).
func (h *Hub) GateState() GateState {
	ctx, cancel := h.ctx()
	defer cancel()
	g, err := h.store.Gate(ctx)
	if err != nil {
		h.log.Error("hub: reading the gate's state failed", "err", err)
	}
	return g
}

// Notify reports whether this hub sends ticket id's notifications: always with a store of its
// own; with a shared one, only the first hub of the fleet to ask (Noticer), so that a ticket
// reaches each channel once whichever replica the gate asked and however many see it. On a
// store error it reports true: a notice sent twice beats one lost.
func (h *Hub) Notify(id string) bool {
	n, ok := h.store.(Noticer)
	if !ok {
		return true
	}
	ctx, cancel := h.ctx()
	defer cancel()
	first, err := n.Notice(ctx, id)
	if err != nil {
		h.log.Warn("hub: could not learn whether another replica sends the notifications of a ticket; this one sends them", "id", id, "err", err)
		return true
	}
	return first
}

// remote publishes what another hub sharing the store changed (Store.Watch).
func (h *Hub) remote(c Change) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c.Ticket != nil {
		c.Ticket = h.copyTicket(c.Ticket)
	}
	h.publish(c)
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
