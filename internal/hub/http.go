package hub

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/lockhttp/lockhttp/internal/display"
	"github.com/lockhttp/lockhttp/internal/httpjson"
	"github.com/lockhttp/lockhttp/internal/hubapi"
)

// maxAskBytes bounds a request to the hub.
const maxAskBytes = 1 << 20

// tokenOK compares a bearer token in constant time.
func tokenOK(r *http.Request, want string) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

func readJSON(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, maxAskBytes))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// apiError is a refusal's body (hubapi.ErrorResponse).
type apiError struct {
	Error string `json:"error"`
}

// GateHandler serves the gate's API under /v1/gate/, for a caller with token:
//
//	POST /v1/gate/ask     AskRequest → AskAnswer
//	POST /v1/gate/claim   {"id","fingerprint"} → SignedDecision
//	POST /v1/gate/leave   {"id","cut"} (cut: the gate's stop cut the request)
//	POST /v1/gate/holdings Holdings (what the gate holds: the counts of held requests)
//	POST /v1/gate/state   GateState
//	POST /v1/gate/issued  Issued (a Claude login the gate saw issued to a container: bound, no ticket)
//	GET  /v1/gate/tickets/{id} → Ticket (after a lost event stream)
//	POST /v1/gate/tickets {"ids"} → []Ticket, those of them no longer pending (the gate's reread)
//	POST /v1/gate/rule    RuleRequest → Ticket (an agent's request for a rule: rule.go)
//	GET  /v1/gate/asks?container=C → []Ticket (the container's own)
//	GET  /v1/gate/events  → one JSON Event per line as they happen, an empty line every 15 s
func (h *Hub) GateHandler(token string) http.Handler {
	return h.GateHandlerFor(Tokens(token, nil))
}

// GateHandlerFor is GateHandler for the gates c names.
func (h *Hub) GateHandlerFor(c Callers) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/gate/ask", func(w http.ResponseWriter, r *http.Request) {
		var req AskRequest
		if err := readJSON(r, &req); err != nil {
			httpjson.Write(w, 400, apiError{"bad ask: " + err.Error()})
			return
		}
		ans, err := h.AskAs(gateOf(r), req)
		if err != nil {
			httpjson.Write(w, 400, apiError{err.Error()})
			return
		}
		httpjson.Write(w, 200, ans)
	})
	mux.HandleFunc("POST /v1/gate/claim", func(w http.ResponseWriter, r *http.Request) {
		var req hubapi.ClaimRequest
		if err := readJSON(r, &req); err != nil {
			httpjson.Write(w, 400, apiError{"bad claim: " + err.Error()})
			return
		}
		if req.Key != "" && !cleanToken(req.Key, 64) {
			httpjson.Write(w, 400, apiError{"bad claim: a key is 1 to 64 letters, digits, '.', '_', '-' or ':'"})
			return
		}
		d, err := h.ClaimAs(gateOf(r), req.ID, req.Fingerprint, req.Key)
		if err != nil {
			httpjson.Write(w, statusOf(err), apiError{err.Error()})
			return
		}
		// The state file catches up within a second (Run): a claim is not worth a write of
		// every ticket on the request's path.
		httpjson.Write(w, 200, d)
	})
	mux.HandleFunc("POST /v1/gate/leave", func(w http.ResponseWriter, r *http.Request) {
		var req hubapi.LeaveRequest // Cut: the gate's stop cut the request (LeaveCut)
		if err := readJSON(r, &req); err != nil {
			httpjson.Write(w, 400, apiError{"bad leave: " + err.Error()})
			return
		}
		h.leave(gateOf(r), req.ID, req.Cut)
		w.WriteHeader(204)
	})
	mux.HandleFunc("POST /v1/gate/holdings", func(w http.ResponseWriter, r *http.Request) {
		var s Holdings
		if err := readJSON(r, &s); err != nil {
			httpjson.Write(w, 400, apiError{"bad holdings: " + err.Error()})
			return
		}
		if err := checkHoldings(s); err != nil {
			httpjson.Write(w, 400, apiError{"bad holdings: " + err.Error()})
			return
		}
		h.SetHoldingsAs(gateOf(r), s)
		w.WriteHeader(204)
	})
	mux.HandleFunc("POST /v1/gate/state", func(w http.ResponseWriter, r *http.Request) {
		var s GateState
		if err := readJSON(r, &s); err != nil {
			httpjson.Write(w, 400, apiError{"bad state: " + err.Error()})
			return
		}
		h.SetGateStateAs(gateOf(r), s)
		w.WriteHeader(204)
	})
	mux.HandleFunc("POST /v1/gate/issued", func(w http.ResponseWriter, r *http.Request) {
		var i Issued
		if err := readJSON(r, &i); err != nil {
			httpjson.Write(w, 400, apiError{"bad issued login: " + err.Error()})
			return
		}
		if err := h.BindIssued(i); err != nil {
			httpjson.Write(w, 400, apiError{err.Error()})
			return
		}
		w.WriteHeader(204)
	})
	mux.HandleFunc("GET /v1/gate/tickets/{id}", func(w http.ResponseWriter, r *http.Request) {
		t, ok := h.Get(r.PathValue("id"))
		if !ok {
			httpjson.Write(w, 404, apiError{ErrNotFound.Error()})
			return
		}
		httpjson.Write(w, 200, t)
	})
	mux.HandleFunc("POST /v1/gate/tickets", func(w http.ResponseWriter, r *http.Request) {
		var req hubapi.TicketsRequest
		if err := readJSON(r, &req); err != nil {
			httpjson.Write(w, 400, apiError{"bad tickets request: " + err.Error()})
			return
		}
		if len(req.IDs) > hubapi.MaxTicketsAsked {
			httpjson.Write(w, 400, apiError{fmt.Sprintf("bad tickets request: at most %d ids a call", hubapi.MaxTicketsAsked)})
			return
		}
		httpjson.Write(w, 200, nonNil(h.NotPending(req.IDs)))
	})
	mux.HandleFunc("GET /v1/gate/events", h.serveEvents)
	h.ruleRoutes(mux)
	return GateOnlyFor(c, mux)
}

// gateOf is the gate's name on r (hubapi.HeaderGate, checked by requireToken): "" when it
// names none.
func gateOf(r *http.Request) string { return r.Header.Get(hubapi.HeaderGate) }

func statusOf(err error) int {
	switch {
	case errors.Is(err, ErrNotFound):
		return 404
	case errors.Is(err, ErrFingerprint), errors.Is(err, ErrDecided):
		return 409
	case errors.Is(err, ErrRuleAtTerminal):
		return 403
	}
	return 400
}

// eventsBeat is how often the event stream writes an empty line when nothing happens.
const eventsBeat = 15 * time.Second

// serveEvents streams events as JSON lines. The stream outlives the server's read and write
// timeouts: it lifts the read deadline (the gate sends nothing more, and a close still ends
// the request) and gives every line WriteTimeout, so a gate that stops reading is cut.
func (h *Hub) serveEvents(w http.ResponseWriter, r *http.Request) {
	ch, cancel := h.Subscribe()
	defer cancel()
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Time{})
	send := func(write func() error) bool {
		rc.SetWriteDeadline(time.Now().Add(WriteTimeout))
		return write() == nil && rc.Flush() == nil
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	if !send(func() error { w.WriteHeader(200); return nil }) {
		return
	}
	enc := json.NewEncoder(w)
	beat := time.NewTicker(eventsBeat)
	defer beat.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case ev, ok := <-ch:
			if !ok {
				return // fell behind: the client reconnects and rereads
			}
			if !send(func() error { return enc.Encode(ev) }) {
				return
			}
		case <-beat.C:
			if !send(func() error { _, err := io.WriteString(w, "\n"); return err }) {
				return
			}
		}
	}
}

// FacadeHandler serves the facades' API under /v1/, for callers holding one of tokens (facade
// name → token; the name prefixes the "by" of their decisions):
//
//	GET  /v1/tickets            pending tickets, newest first, a page at a time (?limit=N,
//	                            at most MaxPage; ?cursor= the X-LockHTTP-Next of the last page)
//	GET  /v1/tickets/{id}
//	GET  /v1/recent             decided and expired tickets, latest first
//	GET  /v1/state              the gate's state
//	POST /v1/tickets/{id}/approve {"fingerprint","by"}
//	POST /v1/tickets/{id}/deny    {"fingerprint","by","reason"}
func (h *Hub) FacadeHandler(tokens map[string]string) http.Handler {
	return h.FacadeHandlerFor(Tokens("", tokens))
}

// FacadeHandlerFor is FacadeHandler for the facades c names.
func (h *Hub) FacadeHandlerFor(c Callers) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/tickets", func(w http.ResponseWriter, r *http.Request) {
		limit, err := pageLimit(r)
		if err != nil {
			httpjson.Write(w, 400, apiError{err.Error()})
			return
		}
		page, next := h.PendingPage(limit, r.URL.Query().Get("cursor"))
		if next != "" {
			w.Header().Set(HeaderNext, next)
		}
		httpjson.Write(w, 200, nonNil(page))
	})
	mux.HandleFunc("GET /v1/tickets/{id}", func(w http.ResponseWriter, r *http.Request) {
		t, ok := h.Get(r.PathValue("id"))
		if !ok {
			httpjson.Write(w, 404, apiError{ErrNotFound.Error()})
			return
		}
		httpjson.Write(w, 200, t)
	})
	mux.HandleFunc("GET /v1/recent", func(w http.ResponseWriter, r *http.Request) {
		httpjson.Write(w, 200, nonNil(h.Recent(50)))
	})
	mux.HandleFunc("GET /v1/state", func(w http.ResponseWriter, r *http.Request) {
		httpjson.Write(w, 200, h.GateState())
	})
	decide := func(approve bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			var req hubapi.DecideRequest
			if err := readJSON(r, &req); err != nil {
				httpjson.Write(w, 400, apiError{"bad decision: " + err.Error()})
				return
			}
			reason := display.Clean(req.Reason)
			if !approve && reason == "" {
				httpjson.Write(w, 400, apiError{"a denial needs a reason: the agent is told it"})
				return
			}
			facade := facadeOf(r)
			by := facade
			if n := CleanName(req.By); n != "" {
				by = facade + ":" + n
			}
			t, err := h.Decide(r.PathValue("id"), req.Fingerprint, approve, by, reason)
			if err != nil {
				httpjson.Write(w, statusOf(err), apiError{err.Error()})
				return
			}
			h.Flush()
			httpjson.Write(w, 200, t)
		}
	}
	mux.HandleFunc("POST /v1/tickets/{id}/approve", decide(true))
	mux.HandleFunc("POST /v1/tickets/{id}/deny", decide(false))
	return FacadeOnly(c, mux.ServeHTTP)
}

// FacadeHandlerFunc serves f to callers holding one of the facade tokens (for routes a host of
// the hub adds, such as a phone pairing link).
func (h *Hub) FacadeHandlerFunc(tokens map[string]string, f http.HandlerFunc) http.Handler {
	return FacadeOnly(Tokens("", tokens), f)
}

// HeaderNext is the header of a page of tickets that has a next page: its cursor (hubapi).
const HeaderNext = hubapi.HeaderNext

// pageLimit reads ?limit=: a page size from 1 to MaxPage, or 0 for the default.
func pageLimit(r *http.Request) (int, error) {
	s := r.URL.Query().Get("limit")
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > MaxPage {
		return 0, fmt.Errorf("limit must be 1 to %d", MaxPage)
	}
	return n, nil
}

func nonNil(t []Ticket) []Ticket {
	if t == nil {
		return []Ticket{}
	}
	return t
}

// CleanName is a name a human gave as the "by" of a decision repeats it after the facade's
// name and a ':': typed text made clean (display.Clean), without ':', at most 40 bytes. Empty
// means none was given.
func CleanName(s string) string {
	return strings.TrimSpace(display.Cut(display.Clean(strings.ReplaceAll(s, ":", "")), 40))
}

// GateOnly serves next to the caller holding the gate's token only, as GateHandler's routes are
// (for routes the hub's host adds for the gate, such as its traffic).
func GateOnly(token string, next http.Handler) http.Handler {
	return GateOnlyFor(Tokens(token, nil), next)
}
