package hubapi

// Holdings is what the gate holds on the hub's tickets, as it reports it (POST
// /v1/gate/holdings) when its event stream connects and every few seconds after: the hub sets
// its counts by it, so that a Leave or a Claim that never arrived (the hub stalled, the answer of
// an Ask was lost, the gate restarted, the hub restarted) does not leave a count standing.
type Holdings struct {
	// Held is, for each ticket the gate holds requests on, how many.
	Held map[string]int `json:"held"`
	// Asking are the fingerprints of the asks on their way: the tickets they create or join are
	// left as the hub counts them.
	Asking []string `json:"asking,omitempty"`
	// Busy are the tickets with a claim or a leave on its way, left as the hub counts them.
	Busy []string `json:"busy,omitempty"`
	// Cut is, for each ticket, how many requests held on it a kill of the gate cut: the gate
	// found them in its journal of held requests when it started again and wrote their records.
	// A gate reports them until a report is taken.
	Cut map[string]int `json:"cut,omitempty"`
}

// TicketsRequest is the body of POST /v1/gate/tickets: the tickets the gate's held requests wait
// on, reread in one call (a decision whose event the stream never carried), at most
// MaxTicketsAsked of them. The answer, []Ticket, is those of them no longer pending; an id the
// hub does not know is left out.
type TicketsRequest struct {
	IDs []string `json:"ids"`
}

// MaxTicketsAsked bounds the ids of one TicketsRequest.
const MaxTicketsAsked = 1000

// ClaimRequest is the body of POST /v1/gate/claim: the decision of a ticket a request was held
// on, for the fingerprint the gate asked with.
type ClaimRequest struct {
	ID          string `json:"id"`
	Fingerprint string `json:"fingerprint"`
	// Key names the held request's claim, the same on each retry of it (at most 64 letters,
	// digits, '.', '_', '-' and ':'): a claim whose key the hub took already is answered again
	// without spending another use, so a retry after a lost answer (a hub killed as it
	// answered) takes no other request's use. "": none; every claim spends.
	Key string `json:"key,omitempty"`
}

// LeaveRequest is the body of POST /v1/gate/leave: a request held on ticket ID stopped waiting.
type LeaveRequest struct {
	ID string `json:"id"`
	// Cut: the gate's stop cut the request (it was answered E_PENDING); the ticket counts it as
	// cut by a restart.
	Cut bool `json:"cut,omitempty"`
}

// DecideRequest is the body of a facade's POST /v1/tickets/{id}/approve and /deny.
type DecideRequest struct {
	// Fingerprint is the one the facade showed: it must be the ticket's.
	Fingerprint string `json:"fingerprint"`
	// By names the person; the hub puts the facade's name before it.
	By string `json:"by"`
	// Reason is what a denial tells the agent (a denial needs one).
	Reason string `json:"reason"`
}

// ErrorResponse is the body of the hub's refusals (4xx).
type ErrorResponse struct {
	Error string `json:"error"`
}

// Page sizes of the facades' GET /v1/tickets.
const (
	DefaultPage = 100
	MaxPage     = 500
)

// HeaderNext is the header of a page of tickets that has a next page: its cursor.
const HeaderNext = "X-LockHTTP-Next"

// MaxProbationPerPeer is the most connections the hub holds from one peer before a request on
// them carried a token (a local peer by its uid, a remote one by its address); past it, the
// peer's oldest such connection is closed. A client keeps its connections under it.
const MaxProbationPerPeer = 32

// HeaderGate names the gate on every call of its API: an instance name the gate picks at its
// start (1 to 64 letters, digits, '.', '_', '-' and ':'). The hub counts the requests each gate
// holds apart, so that several gates (and several hubs on one store) share tickets and one
// gate's report of what it holds leaves the others' counts standing. A call without it is from
// the one unnamed gate.
const HeaderGate = "LockHTTP-Gate"
