// Package hub holds the ASK tickets: a request the policy wants a human to see waits on a
// ticket until a person approves or denies it on a facade (the terminal, lox, a phone).
package hub

import "github.com/lockhttp/lockhttp/internal/hubapi"

// The contract of the hub's sockets (hubapi), named here for the hub's own code and the
// facades it serves in its process (the terminal, the phone page, the notification channels).
type (
	Status         = hubapi.Status
	Header         = hubapi.Header
	Ticket         = hubapi.Ticket
	Decision       = hubapi.Decision
	Event          = hubapi.Event
	Limit          = hubapi.Limit
	GateState      = hubapi.GateState
	GateBudget     = hubapi.GateBudget
	AskRequest     = hubapi.AskRequest
	Bind           = hubapi.Bind
	MCPCall        = hubapi.MCPCall
	Issued         = hubapi.Issued
	AskAnswer      = hubapi.AskAnswer
	SignedDecision = hubapi.SignedDecision
	Holdings       = hubapi.Holdings
)

// Ticket statuses, kinds, why nothing is held, and the outcomes of Ask (hubapi).
const (
	Pending  = hubapi.Pending
	Approved = hubapi.Approved
	Denied   = hubapi.Denied
	Expired  = hubapi.Expired

	KindRequest = hubapi.KindRequest
	KindConnect = hubapi.KindConnect

	GoneRestart = hubapi.GoneRestart
	GoneLeft    = hubapi.GoneLeft

	OutcomePending  = hubapi.OutcomePending
	OutcomeApproved = hubapi.OutcomeApproved
	OutcomeDenied   = hubapi.OutcomeDenied
	OutcomeExpired  = hubapi.OutcomeExpired
	OutcomeLimit    = hubapi.OutcomeLimit
)
