package hub

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockhttp/lockhttp/internal/metrics"
)

// Store keeps the hub's state: the tickets (a denial remembered and an approval's single-use
// authorisations are a ticket's status and uses), the decisions, the CONNECT grants, what each
// gate holds on the tickets, and what each gate reported. Every method is one atomic step that
// any number of hubs sharing the store may run at once: the embedded store (NewFileStore, one
// process, a JSON file) and the PostgreSQL store (hubdb) keep the same contract, which
// storetest holds them to. Times come from the hub's clock, never the store's.
type Store interface {
	// Ask answers a gate's ask in this order: a CONNECT whose grant is open is approved with
	// its latest ticket (no use taken); the fingerprint's latest ticket, when pending, is joined
	// (the gate holds one more request on it, Gone cleared); when approved within the window
	// with uses left, one use is spent (one atomic step: two asks never both spend the last);
	// when denied within the window, the denial answers; when expired within the window and
	// not yet reported, it is reported once. Otherwise, past MaxPending of the container or
	// MaxPendingAll of every container, OutcomeLimit; else a new pending ticket (q.New, its ID
	// unique) is made, or joined when an identical one was made meanwhile.
	Ask(ctx context.Context, q StoreAsk) (StoreAnswer, error)
	// Claim takes the decision of a ticket gate held a request on: an approval's use (ErrDecided
	// when none is left) or a denial; gate holds one request fewer. A claim whose key (not "")
	// was taken already changes nothing and answers the ticket again. ErrNotFound,
	// ErrFingerprint.
	Claim(ctx context.Context, id, fingerprint, gate, key string) (Ticket, error)
	// Leave: a request gate held on ticket id stopped waiting; cut counts it as cut by the
	// gate's stop. It returns the ticket as it is now and whether it exists.
	Leave(ctx context.Context, id, gate string, cut bool) (Ticket, bool, error)
	// Decide records d on ticket id when it is pending, its fingerprint is fingerprint and it
	// has not expired at d.At: an approval's uses are the requests held then (at least one)
	// and a CONNECT's grant opens. bind, when not nil, runs before the decision is kept and
	// stops it with its error. A ticket past its expiry is expired by the call, which returns
	// it with ErrExpiredNow. ErrNotFound, ErrFingerprint, ErrDecided.
	Decide(ctx context.Context, id, fingerprint string, d Decision, bind func(Ticket) error) (Ticket, error)
	// SetHoldings sets what gate holds on the pending tickets to s (see Hub.SetHoldings),
	// and counts its cut requests; it returns the tickets whose count or Gone changed.
	SetHoldings(ctx context.Context, gate string, s Holdings, now time.Time) ([]Ticket, error)
	// Sweep expires the pending tickets past their expiry and returns them; it forgets what
	// is older than Retention and the decided tickets past MaxDecided, the grants past their
	// time, and the counts of gates not heard from within GateStale. Running it twice, or on
	// two hubs at once, expires each ticket once.
	Sweep(ctx context.Context, now time.Time, r Retention) ([]Ticket, error)
	// Get returns one ticket, ok false when there is none.
	Get(ctx context.Context, id string) (Ticket, bool, error)
	// Pending lists the pending tickets; Decided the decided and expired ones. Any order.
	Pending(ctx context.Context) ([]Ticket, error)
	Decided(ctx context.Context) ([]Ticket, error)
	// SetGate keeps what gate reported; Gate returns the latest report of any gate.
	SetGate(ctx context.Context, gate string, s GateState) error
	Gate(ctx context.Context) (GateState, error)
	// Counts is what the hub's gauges read.
	Counts(ctx context.Context, now time.Time, window time.Duration) (metrics.HubState, error)
	// Watch calls f with what other hubs sharing the store changed, from one goroutine, until
	// the store closes (never for this hub's own changes; never for the embedded store).
	Watch(f func(Change))
	// Close ends the store's connections and writes what it still holds.
	Close() error
}

// Noticer is a store shared by several hubs that names the one hub to send a ticket's
// notifications: Notice reports true to the first caller for a ticket, false to every other
// (whichever hub asks). A store of one hub has no need of it.
type Noticer interface {
	Notice(ctx context.Context, id string) (bool, error)
}

// StoreAsk is an ask as the store takes it.
type StoreAsk struct {
	AskRequest
	// Gate names the gate that asks (its instance: hubapi.HeaderGate), "" for a gate that names
	// none.
	Gate string
	// New is the ticket to make when none is joined, spent or reported.
	New Ticket
	// Now and Window: an approval or a denial answers retries within Window of its decision,
	// an expiry is reported within Window of it.
	Now    time.Time
	Window time.Duration
	// MaxPendingAll bounds the pending tickets of all containers.
	MaxPendingAll int
	// NoHold is an ask no request is held on (a KindRule ticket): the pending ticket of the
	// fingerprint is answered without a holder counted, a decided or expired one of the
	// window is answered as it stands (no use spent, no report taken), and a new ticket has no
	// holder.
	NoHold bool
	// MaxPendingKind, when above zero, bounds the pending tickets of the container of the
	// ask's Kind: past it, OutcomeLimit.
	MaxPendingKind int
}

// StoreAnswer is the store's answer to an ask: an outcome (hubapi's), the ticket, whether the
// ticket was made by this ask, and for OutcomeLimit the container's pending count.
type StoreAnswer struct {
	Outcome string
	Ticket  Ticket
	Created bool
	Pending int
}

// Retention bounds what Sweep keeps.
type Retention struct {
	// Keep is how long a decided or expired ticket stays (counted from its creation).
	Keep time.Duration
	// MaxDecided bounds the decided and expired tickets kept; the latest stay.
	MaxDecided int
	// GateStale: the counts of a gate not heard from within it are dropped (it was killed; a
	// gate reports every few seconds while it is up).
	GateStale time.Duration
}

// Change is what another hub sharing the store changed, as Watch reports it: Type is an
// Event's ("ticket", "decided", "expired", "gate", "limit") with its Ticket, Gate or Limit.
type Change = Event

// ErrExpiredNow is Decide's error for a ticket that expired before the decision: the call
// expired it. It is an ErrDecided.
var ErrExpiredNow = fmt.Errorf("%w: it expired before the decision", ErrDecided)

// errNoStore wraps a store's failure as the facades and the gate see it.
func storeFailed(err error) error {
	if err == nil || errors.Is(err, ErrNotFound) || errors.Is(err, ErrFingerprint) || errors.Is(err, ErrDecided) || errors.Is(err, ErrRuleAtTerminal) || errors.Is(err, errTake) {
		return err
	}
	return fmt.Errorf("hub: the hub's store failed (%w); try again", err)
}

// outcomeOf is the outcome of an ask answered with a ticket of status st as it stands.
func outcomeOf(st Status) string {
	switch st {
	case Approved:
		return OutcomeApproved
	case Denied:
		return OutcomeDenied
	case Expired:
		return OutcomeExpired
	}
	return OutcomePending
}
