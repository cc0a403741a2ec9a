package phone

import (
	"bufio"
	"bytes"
	"context"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/lockhttp/lockhttp/internal/connlimit"
	"github.com/lockhttp/lockhttp/internal/display"
	"github.com/lockhttp/lockhttp/internal/fingerprint"
	"github.com/lockhttp/lockhttp/internal/httpjson"
	"github.com/lockhttp/lockhttp/internal/hub"
)

//go:embed page
var page embed.FS

// CSP is the Content-Security-Policy of every response under /phone/: the page loads only its
// own script and style files, talks only to its own origin, and cannot be framed.
const CSP = "default-src 'self'; connect-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

// Field names of the request log line.
const (
	logMethod   = "method"
	logPath     = "path"
	logStatus   = "status"
	logRemote   = "remote"
	logSession  = "session"
	logDuration = "duration"
	logError    = "err"
)

// Handler serves the page and its API:
//
//	GET  /phone/                          the page (app.js, app.css beside it)
//	POST /phone/v1/pair                   {"token","device"} → {"session","id","device"}   (Origin)
//	GET  /phone/v1/tickets                pending tickets, newest first                   (Bearer)
//	GET  /phone/v1/tickets/{id}                                                           (Bearer)
//	GET  /phone/v1/recent                 decided and expired tickets, latest first       (Bearer)
//	GET  /phone/v1/state                  the gate's state and this session               (Bearer)
//	POST /phone/v1/tickets/{id}/approve   {"fingerprint"}                         (Bearer, Origin)
//	POST /phone/v1/tickets/{id}/deny      {"fingerprint","reason"}                (Bearer, Origin)
//	POST /phone/v1/logout                 unpairs this session                    (Bearer, Origin)
//	GET  /phone/v1/ws                     websocket: {"type":"auth","token"} first (Origin)
//
// Every response carries CSP and the other security headers and Cache-Control: no-store.
func (s *Server) Handler() http.Handler {
	api := http.NewServeMux()
	api.HandleFunc("GET /phone/v1/tickets", s.listPending)
	api.HandleFunc("GET /phone/v1/tickets/{id}", s.getTicket)
	api.HandleFunc("GET /phone/v1/recent", s.listRecent)
	api.HandleFunc("GET /phone/v1/state", s.getState)
	api.HandleFunc("POST /phone/v1/tickets/{id}/approve", s.decide(true))
	api.HandleFunc("POST /phone/v1/tickets/{id}/deny", s.decide(false))
	api.HandleFunc("POST /phone/v1/logout", s.logout)
	api.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not found", "")
	})

	mux := http.NewServeMux()
	mux.HandleFunc("GET /phone", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/phone/", http.StatusMovedPermanently)
	})
	mux.Handle("GET /phone/{$}", asset("page/index.html", "text/html; charset=utf-8"))
	mux.Handle("GET /phone/app.js", asset("page/app.js", "text/javascript; charset=utf-8"))
	mux.Handle("GET /phone/app.css", asset("page/app.css", "text/css; charset=utf-8"))
	mux.HandleFunc("POST /phone/v1/pair", s.pair)
	mux.HandleFunc("GET /phone/v1/ws", s.serveWS)
	mux.Handle("/phone/v1/", s.authed(api))
	mux.HandleFunc("/phone/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not found", "")
	})
	return s.logged(secure(mux))
}

func asset(name, contentType string) http.Handler {
	data, err := page.ReadFile(name)
	if err != nil {
		panic("phone: missing embedded " + name) // the build embeds it
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.Write(data)
	})
}

// secure sets the security headers on every response.
func secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		h.Set("Permissions-Policy", "camera=(), microphone=(), geolocation=(), payment=()")
		next.ServeHTTP(w, r)
	})
}

// reqInfo is what the log line learns from the handlers.
type reqInfo struct {
	session string
	err     string
}

type infoKey struct{}
type sessionKey struct{}

func infoOf(r *http.Request) *reqInfo {
	if i, ok := r.Context().Value(infoKey{}).(*reqInfo); ok {
		return i
	}
	return &reqInfo{}
}

func sessionOf(r *http.Request) *session {
	s, _ := r.Context().Value(sessionKey{}).(*session)
	return s
}

// logged writes one line per request. Tokens are never in it: the session's id names it.
func (s *Server) logged(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		info := &reqInfo{}
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), infoKey{}, info)))
		attrs := []slog.Attr{slog.String(logMethod, r.Method), slog.String(logPath, r.URL.Path),
			slog.Int(logStatus, sw.code()), slog.String(logRemote, r.RemoteAddr), slog.Duration(logDuration, time.Since(start))}
		if info.session != "" {
			attrs = append(attrs, slog.String(logSession, info.session))
		}
		if info.err != "" {
			attrs = append(attrs, slog.String(logError, info.err))
		}
		s.log.LogAttrs(r.Context(), slog.LevelInfo, "phone: request", attrs...)
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Hijack lets the websocket take the connection.
func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := w.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("phone: the connection cannot be hijacked")
	}
	c, rw, err := h.Hijack()
	if err == nil && w.status == 0 {
		w.status = http.StatusSwitchingProtocols
	}
	return c, rw, err
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

type apiError struct {
	Error string `json:"error"`
	Code  string `json:"code,omitempty"` // for the page to branch on: "fingerprint", "decided"
}

func writeError(w http.ResponseWriter, status int, msg, code string) {
	httpjson.Write(w, status, apiError{Error: msg, Code: code})
}

// readJSON decodes a bounded JSON body strictly (unknown fields and trailing data are errors)
// or writes the error and returns false.
func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		writeError(w, http.StatusUnsupportedMediaType, "send the body as application/json", "")
		return false
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		writeError(w, http.StatusBadRequest, "the request body could not be read", "")
		return false
	}
	if len(data) > maxBody {
		writeError(w, http.StatusRequestEntityTooLarge, "the request body is too large", "")
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "bad request: "+err.Error(), "")
		return false
	}
	if _, err := dec.Token(); err != io.EOF {
		writeError(w, http.StatusBadRequest, "bad request: data after the JSON object", "")
		return false
	}
	return true
}

// originOK reports whether the request's Origin is exactly the public origin.
func (s *Server) originOK(r *http.Request) bool {
	o := r.Header.Get("Origin")
	return o != "" && subtle.ConstantTimeCompare([]byte(o), []byte(s.origin)) == 1
}

func bearer(r *http.Request) string {
	tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return tok
}

func tooMany(w http.ResponseWriter) {
	w.Header().Set("Retry-After", "5")
	writeError(w, http.StatusTooManyRequests, "too many failed attempts from this address; wait a few seconds", "")
}

func (s *Server) badOrigin(w http.ResponseWriter, r *http.Request) {
	infoOf(r).err = "origin " + quoteShort(r.Header.Get("Origin"))
	writeError(w, http.StatusForbidden, "this request must come from the phone page at "+s.origin, "origin")
}

// authed lets through a request that carries a session token (Authorization: Bearer) and, for
// anything but GET and HEAD, the public Origin.
func (s *Server) authed(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := remoteKey(r)
		if !s.limit.allow(key) {
			tooMany(w)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead && !s.originOK(r) {
			s.badOrigin(w, r)
			return
		}
		ss := s.authenticate(bearer(r), r.RemoteAddr)
		if ss == nil {
			s.limit.fail(key)
			w.Header().Set("WWW-Authenticate", `Bearer realm="lockhttp phone"`)
			writeError(w, http.StatusUnauthorized, "this phone is not paired (or was unpaired); pair it again from the terminal", "unpaired")
			return
		}
		infoOf(r).session = ss.ID
		connlimit.Trust(r.Context())
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), sessionKey{}, ss)))
	})
}

func (s *Server) pair(w http.ResponseWriter, r *http.Request) {
	key := remoteKey(r)
	if !s.limit.allow(key) {
		tooMany(w)
		return
	}
	if !s.originOK(r) {
		s.badOrigin(w, r)
		return
	}
	var req struct {
		Token  string `json:"token"`
		Device string `json:"device"`
	}
	if !readJSON(w, r, &req) {
		return
	}
	device := cleanDevice(req.Device)
	tok, ss, err := s.redeem(req.Token, device, r.RemoteAddr)
	switch {
	case errors.Is(err, errBadPairing):
		s.limit.fail(key)
		infoOf(r).err = err.Error()
		writeError(w, http.StatusUnauthorized, "this pairing link is used, expired or wrong; show a new QR code in the terminal", "pairing")
		return
	case errors.Is(err, errTooManyPhone):
		writeError(w, http.StatusConflict, "too many devices are paired; unpair one in the terminal first", "")
		return
	case err != nil:
		infoOf(r).err = err.Error()
		writeError(w, http.StatusInternalServerError, "pairing failed; see the hub's log", "")
		return
	}
	infoOf(r).session = ss.ID
	connlimit.Trust(r.Context())
	s.log.Info("phone: paired", "session", ss.ID, "device", ss.Device, "remote", r.RemoteAddr)
	httpjson.Write(w, http.StatusOK, struct {
		Session string `json:"session"`
		ID      string `json:"id"`
		Device  string `json:"device"`
	}{tok, ss.ID, ss.Device})
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	ss := sessionOf(r)
	s.Revoke(ss.ID)
	s.log.Info("phone: unpaired by the phone", "session", ss.ID, "device", ss.Device)
	w.WriteHeader(http.StatusNoContent)
}

// ticketView is a ticket as the page gets it: escaped (hub.Ticket.Escaped; the page puts text
// on the page as text, which keeps HTML inert, and the escape keeps controls, bidi, invisible
// and look-alike characters visible), times also in Unix milliseconds, and the fingerprint's
// short form.
type ticketView struct {
	hub.Ticket
	FingerprintShort string `json:"fingerprint_short"`
	CreatedMS        int64  `json:"created_ms"`
	ExpiresMS        int64  `json:"expires_ms"`
	DecidedMS        int64  `json:"decided_ms,omitempty"`
}

func viewOf(t hub.Ticket) ticketView {
	t = t.Escaped()
	v := ticketView{Ticket: t, FingerprintShort: fingerprint.Short(t.Fingerprint), CreatedMS: ms(t.Created), ExpiresMS: ms(t.Expires)}
	if t.Decision != nil {
		v.DecidedMS = ms(t.Decision.At)
	}
	return v
}

func viewsOf(ts []hub.Ticket) []ticketView {
	out := make([]ticketView, 0, len(ts))
	for _, t := range ts {
		out = append(out, viewOf(t))
	}
	return out
}

// gateView is the gate's state as the page gets it, escaped.
type gateView struct {
	hub.GateState
	ReportedMS int64 `json:"reported_ms"` // 0: the gate never reported
	StaleMS    int64 `json:"stale_ms"`    // a report older than this means the gate is not reporting
}

func gateViewOf(g hub.GateState) gateView {
	return gateView{GateState: g.Escaped(), ReportedMS: ms(g.Reported), StaleMS: gateStale.Milliseconds()}
}

func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// listPending answers a page of the pending tickets (?limit=, at most hub.MaxPage; ?cursor=,
// the X-LockHTTP-Next of the page before), never one unbounded answer.
func (s *Server) listPending(w http.ResponseWriter, r *http.Request) {
	limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
	page, next := s.hub.PendingPage(limit, r.URL.Query().Get("cursor"))
	if next != "" {
		w.Header().Set(hub.HeaderNext, next)
	}
	if r.URL.Query().Get("paged") != "" {
		// The page's own reader: the tickets and the next cursor in one object.
		httpjson.Write(w, http.StatusOK, pendingPage{Tickets: viewsOf(page), Next: next})
		return
	}
	httpjson.Write(w, http.StatusOK, viewsOf(page))
}

func (s *Server) listRecent(w http.ResponseWriter, r *http.Request) {
	httpjson.Write(w, http.StatusOK, viewsOf(s.hub.Recent(recentN)))
}

func (s *Server) getTicket(w http.ResponseWriter, r *http.Request) {
	t, ok := s.hub.Get(r.PathValue("id"))
	if !ok {
		writeError(w, http.StatusNotFound, "no such ticket", "")
		return
	}
	httpjson.Write(w, http.StatusOK, viewOf(t))
}

// stateMsg is this session's view of the hub: GET /phone/v1/state, and the websocket's first
// message (type "snapshot", with the tickets).
// pendingPage is a page of pending tickets as the phone page reads it (?paged=1).
type pendingPage struct {
	Tickets []ticketView `json:"tickets"`
	Next    string       `json:"next,omitempty"`
}

type stateMsg struct {
	Type    string       `json:"type,omitempty"`
	Session string       `json:"session"`
	Device  string       `json:"device"`
	NowMS   int64        `json:"now_ms"`
	Gate    gateView     `json:"gate"`
	Pending []ticketView `json:"pending,omitempty"`
	// PendingNext is the cursor of the next page of pending tickets when Pending is not all of
	// them: the page reads the rest from GET /phone/v1/tickets?cursor=, a page at a time.
	PendingNext string       `json:"pending_next,omitempty"`
	Recent      []ticketView `json:"recent,omitempty"`
}

func (s *Server) getState(w http.ResponseWriter, r *http.Request) {
	ss := sessionOf(r)
	httpjson.Write(w, http.StatusOK, stateMsg{Session: ss.ID, Device: ss.Device, NowMS: ms(s.now()), Gate: gateViewOf(s.hub.GateState())})
}

// decide answers a ticket for the human holding the phone. The fingerprint is the one the page
// showed; a stale one is refused (409) and the page must show the ticket again.
func (s *Server) decide(approve bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ss := sessionOf(r)
		var fp, reason string
		if approve {
			var req struct {
				Fingerprint string `json:"fingerprint"`
			}
			if !readJSON(w, r, &req) {
				return
			}
			fp = req.Fingerprint
		} else {
			var req struct {
				Fingerprint string `json:"fingerprint"`
				Reason      string `json:"reason"`
			}
			if !readJSON(w, r, &req) {
				return
			}
			fp, reason = req.Fingerprint, display.Clean(req.Reason)
			if reason == "" {
				writeError(w, http.StatusBadRequest, "a denial needs a reason: the agent is told it", "reason")
				return
			}
		}
		if fp == "" {
			writeError(w, http.StatusBadRequest, "a decision names the fingerprint of the ticket the page showed", "")
			return
		}
		if len(reason) > maxReason {
			writeError(w, http.StatusBadRequest, "the reason is too long (1,000 bytes at most)", "reason")
			return
		}
		if revoked(ss) {
			// Unpaired while this request was on its way: it decides nothing.
			infoOf(r).err = "session unpaired during the request"
			writeError(w, http.StatusUnauthorized, "this phone was unpaired; pair it again from the terminal", "unpaired")
			return
		}
		t, err := s.hub.Decide(r.PathValue("id"), fp, approve, "phone:"+ss.Device, reason)
		switch {
		case errors.Is(err, hub.ErrFingerprint):
			writeError(w, http.StatusConflict, "the request changed; look again", "fingerprint")
			return
		case errors.Is(err, hub.ErrDecided):
			writeError(w, http.StatusConflict, "this ticket is already decided or expired", "decided")
			return
		case errors.Is(err, hub.ErrNotFound):
			writeError(w, http.StatusNotFound, "no such ticket", "")
			return
		case errors.Is(err, hub.ErrRuleAtTerminal):
			writeError(w, http.StatusForbidden, "a rule an agent asks for is approved at the console's terminal only; deny it here, or answer it there", "terminal")
			return
		case err != nil:
			infoOf(r).err = err.Error()
			writeError(w, http.StatusInternalServerError, "the hub could not record the decision; see its log", "")
			return
		}
		s.hub.Flush()
		httpjson.Write(w, http.StatusOK, viewOf(t))
	}
}

// quoteShort quotes an untrusted value for the log, cut to 100 bytes (display.Truncate).
func quoteShort(v string) string {
	b, _ := json.Marshal(display.Truncate(v, 100))
	return string(b)
}
