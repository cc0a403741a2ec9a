package hub

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/lockhttp/lockhttp/internal/httpjson"
	"github.com/lockhttp/lockhttp/internal/hubapi"
)

// The contract of an agent's request for a rule (hubapi).
type (
	RuleAsk     = hubapi.RuleAsk
	RuleRequest = hubapi.RuleRequest
)

// KindRule is an agent's request for a rule (hubapi.KindRule).
const KindRule = hubapi.KindRule

// ErrRuleAtTerminal refuses the approval of a rule ticket anywhere but at the console's
// terminal (TakeRule): a phone, a notification, lox and the facades' HTTP API deny one or leave
// it pending, never approve it.
var ErrRuleAtTerminal = errors.New("a rule an agent asks for is approved only at the console's terminal, where approving it opens :review on its diff; deny it here, or answer it there")

// errTake wraps what the terminal's take of a rule ticket failed on.
var errTake = errors.New("the rule was not taken")

// ruleWarning is what every facade shows with a rule ticket.
const ruleWarning = "AN AGENT ASKS FOR A RULE. The reason is the agent's own words, unverified. Approving it only takes the rule into the policy file at the console's terminal; the policy changes after :review approve there."

// AskRule makes (or answers) the ticket of an agent's request for a rule: the rule is checked by
// Config.CheckRule, the reason bounded, and a container has at most hubapi.MaxRulePending of
// them pending. The same rule with the same reason from the same container is one ticket.
func (h *Hub) AskRule(gate string, req RuleRequest) (Ticket, error) {
	switch {
	case !cleanToken(req.Container, 64):
		return Ticket{}, errors.New("a request for a rule names its container (1 to 64 letters, digits, '.', '_', '-' or ':')")
	case req.Agent != "" && !cleanToken(req.Agent, 64):
		return Ticket{}, errors.New("the agent's name is 1 to 64 letters, digits, '.', '_', '-' or ':'")
	case strings.TrimSpace(req.Rule) == "":
		return Ticket{}, errors.New("the rule is empty: give one [[rule]] block of the policy's TOML")
	case len(req.Rule) > hubapi.MaxRuleText:
		return Ticket{}, fmt.Errorf("the rule is %d bytes; at most %d", len(req.Rule), hubapi.MaxRuleText)
	case strings.TrimSpace(req.Reason) == "":
		return Ticket{}, errors.New("the reason is empty: say why the rule is needed")
	case len(req.Reason) > hubapi.MaxRuleReason:
		return Ticket{}, fmt.Errorf("the reason is %d bytes; at most %d", len(req.Reason), hubapi.MaxRuleReason)
	case !utf8.ValidString(req.Rule) || !utf8.ValidString(req.Reason):
		return Ticket{}, errors.New("the rule and the reason are UTF-8 text")
	case h.cfg.CheckRule == nil:
		return Ticket{}, errors.New("this hub cannot check a rule (it runs without the console)")
	case !h.ruleChecks.allow(req.Container, ruleChecksPerMinute, h.now()):
		return Ticket{}, fmt.Errorf("container %s asked for %d rules within a minute, the most it may: wait a minute", req.Container, ruleChecksPerMinute)
	}
	ra, err := h.cfg.CheckRule(req.Container, req.Rule)
	if err != nil {
		return Ticket{}, fmt.Errorf("the rule is refused: %w", err)
	}
	ra.AgentReason = req.Reason
	sum := sha256.Sum256([]byte(req.Container + "\x00" + ra.Rule + "\x00" + req.Reason))
	fp := "rule1:" + hex.EncodeToString(sum[:])
	now := h.now()
	// Every facade shows the method, the URL, the reason and the warning of a ticket, escaped:
	// a rule ticket's say what it is, and its reason is the agent's, marked so.
	t := Ticket{ID: newTicketID(), Kind: KindRule, Container: req.Container, Agent: req.Agent, Method: "RULE",
		URL: "policy rule asked by the agent: " + ra.Loosens, Rule: "agent-asks", Reason: hubapi.AgentWords(req.Reason), Fingerprint: fp, Created: now,
		Expires: now.Add(h.ttl()), NeverAuto: true, Warning: ruleWarning, Red: true, RuleAsk: &ra, Status: Pending}
	ctx, cancel := h.ctx()
	defer cancel()
	a, err := h.store.Ask(ctx, StoreAsk{AskRequest: AskRequest{Kind: KindRule, Container: req.Container, Fingerprint: fp},
		Gate: gate, New: t, Now: now, Window: h.window(), MaxPendingAll: maxPendingAll, NoHold: true, MaxPendingKind: hubapi.MaxRulePending})
	if err != nil {
		return Ticket{}, storeFailed(err)
	}
	switch a.Outcome {
	case OutcomeLimit:
		return Ticket{}, fmt.Errorf("container %s has %d requests for rules waiting for a human (at most %d): wait until one is answered", req.Container, a.Pending, hubapi.MaxRulePending)
	case OutcomePending:
		if a.Created {
			h.mu.Lock()
			h.publish(Event{Type: "ticket", Ticket: h.copyTicket(&a.Ticket)})
			h.mu.Unlock()
			h.cfg.Metrics.Opened(a.Ticket.Container)
			h.log.Info("hub: new rule ticket", "id", a.Ticket.ID, "container", a.Ticket.Container, "loosens", ra.Loosens)
		}
	}
	return *h.copyTicket(&a.Ticket), nil
}

// TakeRule approves rule ticket id for the person at the console's terminal (by starts with
// "terminal:"). take runs before the approval is kept and stops it with its error: it writes the
// rule into the policy file, where it waits for :review. Nothing else approves a rule ticket.
func (h *Hub) TakeRule(id, fingerprint, by string, take func(Ticket) error) (Ticket, error) {
	if !strings.HasPrefix(by, "terminal:") {
		return Ticket{}, ErrRuleAtTerminal
	}
	return h.decideWith(id, fingerprint, true, by, "taken into the policy file for :review", func(t Ticket) error {
		if t.Kind != KindRule || t.RuleAsk == nil {
			return fmt.Errorf("%w: ticket %s is not an agent's request for a rule", errTake, t.ID)
		}
		if err := take(t); err != nil {
			return fmt.Errorf("%w: %w", errTake, err)
		}
		return nil
	})
}

// Asks lists the tickets of container, pending and decided, newest first, at most
// hubapi.MaxAsksListed: what the agent's pending tool answers. A container reads it at most
// asksPerMinute times a minute.
func (h *Hub) Asks(container string) ([]Ticket, error) {
	var out []Ticket
	if !h.asksRead.allow(container, asksPerMinute, h.now()) {
		return nil, fmt.Errorf("container %s read its tickets %d times within a minute, the most it may: wait a minute", container, asksPerMinute)
	}
	for _, t := range append(h.Pending(), h.Recent(0)...) {
		if t.Container == container {
			out = append(out, t)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Created.After(out[j].Created) })
	if len(out) > hubapi.MaxAsksListed {
		out = out[:hubapi.MaxAsksListed]
	}
	return out, nil
}

// ruleRoutes adds the gate's routes of an agent's requests:
//
//	POST /v1/gate/rule               RuleRequest → Ticket
//	GET  /v1/gate/asks?container=C   → []Ticket, the container's own
func (h *Hub) ruleRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/gate/rule", func(w http.ResponseWriter, r *http.Request) {
		var req RuleRequest
		if err := readJSON(r, &req); err != nil {
			httpjson.Write(w, 400, apiError{"bad request for a rule: " + err.Error()})
			return
		}
		t, err := h.AskRule(gateOf(r), req)
		if err != nil {
			httpjson.Write(w, 400, apiError{err.Error()})
			return
		}
		httpjson.Write(w, 200, t)
	})
	mux.HandleFunc("GET /v1/gate/asks", func(w http.ResponseWriter, r *http.Request) {
		c := r.URL.Query().Get("container")
		if !cleanToken(c, 64) {
			httpjson.Write(w, 400, apiError{"name the container: ?container=NAME"})
			return
		}
		out, err := h.Asks(c)
		if err != nil {
			httpjson.Write(w, http.StatusTooManyRequests, apiError{err.Error()})
			return
		}
		if out == nil {
			out = []Ticket{}
		}
		httpjson.Write(w, 200, out)
	})
}

// ruleChecksPerMinute bounds the rules a container may ask for in a minute: each costs the
// console a check against the approved policy (about 14 ms), refused or not.
const ruleChecksPerMinute = 10

// asksPerMinute bounds the lists of its tickets a container reads in a minute: each reads every
// ticket the hub keeps. Past it the list is empty until the next minute.
const asksPerMinute = 60

// ruleRate counts each container's requests for rules in the current minute.
type ruleRate struct {
	mu     sync.Mutex
	minute int64          // guarded by mu: the minute counted
	counts map[string]int // guarded by mu: the requests of each container in it
}

func (r *ruleRate) allow(container string, limit int, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if m := now.Unix() / 60; m != r.minute || r.counts == nil {
		r.minute, r.counts = m, map[string]int{}
	}
	if r.counts[container] >= limit {
		return false
	}
	r.counts[container]++
	return true
}
