package phone

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
	"unicode"
)

// Session is one paired device. Without a PairingStore sessions live in memory only: a hub
// restart unpairs every phone.
type Session struct {
	ID     string `json:"id"`     // public name of the session (not its token)
	Device string `json:"device"` // the name the phone gave; decisions are by "phone:<Device>"
	Remote string `json:"remote"` // the address it paired from
	// LastRemote is the address of its latest request or websocket (behind a reverse proxy, the
	// proxy's).
	LastRemote string    `json:"last_remote"`
	Created    time.Time `json:"created"`
	// LastSeen is its latest request, websocket or answered ping (every 25 s while the page is
	// open).
	LastSeen time.Time `json:"last_seen"`
	// Sockets is how many websockets it has open now: 0 when the page is closed.
	Sockets int `json:"sockets"`
}

// session is a Session with its secret.
type session struct {
	Session
	hash    [32]byte      // SHA-256 of the session token; the token itself is not kept
	revoked chan struct{} // closed by Revoke: the session's websockets end
	sockets int           // guarded by Server.mu: websockets open (MaxSockets at most)
}

var (
	errBadPairing   = errors.New("phone: pairing token unknown, used or expired")
	errTooManyPhone = errors.New("phone: too many paired devices")
)

// token returns n random bytes, base64url without padding.
func (s *Server) token(n int) (string, error) {
	b := make([]byte, n)
	if _, err := io.ReadFull(s.rand, b); err != nil {
		return "", fmt.Errorf("phone: reading randomness: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// NewPairing makes a single-use pairing token, good for PairingTTL, and returns the link that
// pairs a phone: <PublicURL>/phone/#pair=<token>. The token is in the fragment, which a browser
// never sends, so it reaches no server or proxy log. Show it as a QR code on a screen nobody else
// sees.
func (s *Server) NewPairing() (string, error) {
	tok, err := s.token(32)
	if err != nil {
		return "", err
	}
	now := s.now()
	if s.store != nil {
		ctx, cancel := storeCtx()
		defer cancel()
		if err := s.store.AddPairing(ctx, sha256.Sum256([]byte(tok)), now.Add(PairingTTL), maxPairings); err != nil {
			return "", fmt.Errorf("phone: keeping the pairing link: %w", err)
		}
		return s.origin + "/phone/#pair=" + tok, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for h, exp := range s.pairings {
		if !now.Before(exp) {
			delete(s.pairings, h)
		}
	}
	for len(s.pairings) >= maxPairings {
		var oldest [32]byte
		var at time.Time
		for h, exp := range s.pairings {
			if at.IsZero() || exp.Before(at) {
				oldest, at = h, exp
			}
		}
		delete(s.pairings, oldest)
	}
	s.pairings[sha256.Sum256([]byte(tok))] = now.Add(PairingTTL)
	return s.origin + "/phone/#pair=" + tok, nil
}

// redeem trades a pairing token for a new session: the token is used up.
func (s *Server) redeem(pairToken, device, remote string) (tok string, sess Session, err error) {
	tok, err = s.token(32)
	if err != nil {
		return "", Session{}, err
	}
	idb := make([]byte, 6)
	if _, err := io.ReadFull(s.rand, idb); err != nil {
		return "", Session{}, fmt.Errorf("phone: reading randomness: %w", err)
	}
	now := s.now()
	want := sha256.Sum256([]byte(pairToken))
	if s.store != nil {
		return s.redeemStored(want, pairToken, tok, "p"+hex.EncodeToString(idb), device, remote, now)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var found *[32]byte
	for h := range s.pairings {
		if subtle.ConstantTimeCompare(h[:], want[:]) == 1 {
			found = &h
		}
	}
	if found == nil || pairToken == "" {
		return "", Session{}, errBadPairing
	}
	exp := s.pairings[*found]
	delete(s.pairings, *found)
	if !now.Before(exp) {
		return "", Session{}, errBadPairing
	}
	if len(s.sessions) >= maxSessions {
		return "", Session{}, errTooManyPhone
	}
	ss := &session{
		Session: Session{ID: "p" + hex.EncodeToString(idb), Device: device, Remote: remote, LastRemote: remote, Created: now, LastSeen: now},
		hash:    sha256.Sum256([]byte(tok)),
		revoked: make(chan struct{}),
	}
	s.sessions[ss.ID] = ss
	return tok, ss.Session, nil
}

// authenticate returns the session whose token is tok, or nil, and records it as seen from
// remote. Every session's hash is compared in constant time.
func (s *Server) authenticate(tok, remote string) *session {
	if tok == "" {
		return nil
	}
	h := sha256.Sum256([]byte(tok))
	if s.store != nil {
		return s.authenticateStored(h, remote)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var found *session
	for _, ss := range s.sessions {
		if subtle.ConstantTimeCompare(h[:], ss.hash[:]) == 1 {
			found = ss
		}
	}
	if found != nil {
		found.LastSeen, found.LastRemote = s.now(), remote
	}
	return found
}

// seen records a sign of life of ss (a websocket's pong).
func (s *Server) seen(ss *session) {
	s.mu.Lock()
	ss.LastSeen = s.now()
	s.mu.Unlock()
	if s.store != nil {
		s.seenStored(ss)
	}
}

// revoked reports whether ss was unpaired since it was authenticated.
func revoked(ss *session) bool {
	select {
	case <-ss.revoked:
		return true
	default:
		return false
	}
}

// Sessions lists the paired devices, oldest first.
func (s *Server) Sessions() []Session {
	if s.store != nil {
		return s.sessionsStored()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Session, 0, len(s.sessions))
	for _, ss := range s.sessions {
		v := ss.Session
		v.Sockets = ss.sockets
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Created.Equal(out[j].Created) {
			return out[i].ID < out[j].ID
		}
		return out[i].Created.Before(out[j].Created)
	})
	return out
}

// Revoke unpairs a device: its token stops working at once, for every request (one already
// past the token check decides nothing), and its websockets close with CloseUnauthorized. It
// reports whether the session existed.
func (s *Server) Revoke(id string) bool {
	_, ok := s.Unpair(id)
	return ok
}

// Unpair is Revoke that returns the session it ended, for the caller's log line and audit.
func (s *Server) Unpair(id string) (Session, bool) {
	if s.store != nil {
		return s.unpairStored(id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ss, ok := s.sessions[id]
	if !ok {
		return Session{}, false
	}
	delete(s.sessions, id)
	close(ss.revoked)
	v := ss.Session
	v.Sockets = ss.sockets
	return v, true
}

// cleanDevice keeps a short name made of letters, digits, spaces and -_.' for the "by" of a
// decision; empty means "phone".
func cleanDevice(name string) string {
	var b strings.Builder
	n := 0
	for _, r := range strings.TrimSpace(name) {
		if n == maxDevice {
			break
		}
		if unicode.IsLetter(r) || unicode.IsDigit(r) || r == ' ' || r == '-' || r == '_' || r == '.' || r == '\'' {
			b.WriteRune(r)
			n++
		}
	}
	d := strings.Join(strings.Fields(b.String()), " ")
	if d == "" {
		return "phone"
	}
	return d
}
