package phone

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"sort"
	"time"
)

// PairingStore keeps the pairing links and the paired phones where every hub replica sharing a
// store reads them (hubdb), so that a phone paired through one replica is paired on all, and a
// phone unpaired on one is unpaired on all. Tokens are kept as their SHA-256 only.
type PairingStore interface {
	// AddPairing keeps an unused pairing link (its token's hash) until expires; past max
	// unused links, the oldest go.
	AddPairing(ctx context.Context, hash [32]byte, expires time.Time, max int) error
	// TakePairing uses a link up: true once for a hash not expired at now, false after (two
	// replicas never both take it).
	TakePairing(ctx context.Context, hash [32]byte, now time.Time) (bool, error)
	// AddSession keeps a paired phone with its token's hash; false when max are paired.
	AddSession(ctx context.Context, s Session, hash [32]byte, max int) (bool, error)
	// SessionByHash returns the phone whose token hashes to hash.
	SessionByHash(ctx context.Context, hash [32]byte) (Session, bool, error)
	// SeenSession records a sign of life of phone id from remote.
	SeenSession(ctx context.Context, id, remote string, at time.Time) error
	// ListSessions lists the paired phones.
	ListSessions(ctx context.Context) ([]Session, error)
	// DeleteSession unpairs phone id; it returns the phone as it was and whether it existed.
	DeleteSession(ctx context.Context, id string) (Session, bool, error)
	// WatchUnpaired calls f with the id of each phone another replica unpaired.
	WatchUnpaired(f func(id string))
}

func storeCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 10*time.Second)
}

// redeemStored is redeem with a PairingStore: the link is taken in the store (once, whichever
// replica asks), then the session kept there.
func (s *Server) redeemStored(want [32]byte, pairToken, tok, id, device, remote string, now time.Time) (string, Session, error) {
	if pairToken == "" {
		return "", Session{}, errBadPairing
	}
	ctx, cancel := storeCtx()
	defer cancel()
	ok, err := s.store.TakePairing(ctx, want, now)
	if err != nil {
		return "", Session{}, err
	}
	if !ok {
		return "", Session{}, errBadPairing
	}
	ss := &session{Session: Session{ID: id, Device: device, Remote: remote, LastRemote: remote, Created: now, LastSeen: now},
		hash: sha256Of(tok), revoked: make(chan struct{})}
	added, err := s.store.AddSession(ctx, ss.Session, ss.hash, maxSessions)
	if err != nil {
		return "", Session{}, err
	}
	if !added {
		return "", Session{}, errTooManyPhone
	}
	s.mu.Lock()
	s.sessions[ss.ID] = ss
	s.mu.Unlock()
	return tok, ss.Session, nil
}

// authenticateStored is authenticate with a PairingStore: the store says whether the token is
// a paired phone's, at every request, so that an unpairing on any replica holds at once; the
// session's websockets and their end stay this replica's.
func (s *Server) authenticateStored(h [32]byte, remote string) *session {
	ctx, cancel := storeCtx()
	defer cancel()
	st, ok, err := s.store.SessionByHash(ctx, h)
	if err != nil {
		s.log.Error("phone: reading the paired phones failed; the request is refused", "err", err)
		return nil
	}
	if !ok {
		return nil
	}
	now := s.now()
	s.mu.Lock()
	ss := s.sessions[st.ID]
	if ss == nil || subtle.ConstantTimeCompare(ss.hash[:], h[:]) != 1 {
		ss = &session{Session: st, hash: h, revoked: make(chan struct{})}
		s.sessions[st.ID] = ss
	}
	ss.Device, ss.Remote, ss.Created = st.Device, st.Remote, st.Created
	ss.LastSeen, ss.LastRemote = now, remote
	s.mu.Unlock()
	if err := s.store.SeenSession(ctx, st.ID, remote, now); err != nil {
		s.log.Warn("phone: recording a paired phone's request failed", "session", st.ID, "err", err)
	}
	return ss
}

// seenStored records a websocket's pong, and ends the session here when the store no longer
// has it (an unpairing whose notice was lost).
func (s *Server) seenStored(ss *session) {
	ctx, cancel := storeCtx()
	defer cancel()
	if _, ok, err := s.store.SessionByHash(ctx, ss.hash); err == nil && !ok {
		s.forget(ss.ID)
		return
	}
	s.mu.Lock()
	at, remote := ss.LastSeen, ss.LastRemote
	s.mu.Unlock()
	s.store.SeenSession(ctx, ss.ID, remote, at)
}

// sessionsStored lists the store's phones, with the websockets this replica holds for each.
func (s *Server) sessionsStored() []Session {
	ctx, cancel := storeCtx()
	defer cancel()
	out, err := s.store.ListSessions(ctx)
	if err != nil {
		s.log.Error("phone: listing the paired phones failed", "err", err)
		return []Session{}
	}
	s.mu.Lock()
	for i := range out {
		if ss := s.sessions[out[i].ID]; ss != nil {
			out[i].Sockets = ss.sockets
		}
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Created.Equal(out[j].Created) {
			return out[i].ID < out[j].ID
		}
		return out[i].Created.Before(out[j].Created)
	})
	if out == nil {
		out = []Session{}
	}
	return out
}

// unpairStored deletes the session from the store, then ends it here; the other replicas end
// theirs when told (WatchUnpaired), or at the session's next request or pong.
func (s *Server) unpairStored(id string) (Session, bool) {
	ctx, cancel := storeCtx()
	defer cancel()
	v, ok, err := s.store.DeleteSession(ctx, id)
	if err != nil {
		s.log.Error("phone: unpairing failed", "session", id, "err", err)
		return Session{}, false
	}
	if n := s.forget(id); n > 0 {
		v.Sockets = n
	}
	return v, ok
}

// forget ends session id on this replica: its websockets close. It returns how many it had.
func (s *Server) forget(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss, ok := s.sessions[id]
	if !ok {
		return 0
	}
	delete(s.sessions, id)
	close(ss.revoked)
	return ss.sockets
}

func sha256Of(s string) [32]byte { return sha256.Sum256([]byte(s)) }
