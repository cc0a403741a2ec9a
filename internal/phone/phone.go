// Package phone serves the phone page: a paired phone lists the hub's pending tickets live and
// approves or denies them.
package phone

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lockhttp/lockhttp/internal/hub"
)

// Limits and times of the phone page.
const (
	// PairingTTL is how long a pairing link stays good (once).
	PairingTTL = 10 * time.Minute
	// AuthWait is how long a websocket may take to send its session token.
	AuthWait = 5 * time.Second

	maxBody     = 16 << 10 // bytes of a request body to /phone/v1/*
	maxReason   = 1000     // bytes of a decision's reason
	maxDevice   = 40       // characters of a device name
	maxSessions = 64       // paired devices at once
	maxPairings = 16       // unused pairing links at once; a new one pushes out the oldest
	recentN     = 50       // decided and expired tickets the page lists
	// gateStale is how old the gate's last report may be before the page says it is not reporting.
	gateStale = 30 * time.Second
)

// Config is what a Server needs.
type Config struct {
	// Hub holds the tickets. Required.
	Hub *hub.Hub
	// PublicURL is how the phone reaches the hub, e.g. "http://192.168.1.20:3131": scheme, host
	// and port only. Its origin is the only one a state-changing request or a websocket may come
	// from, and pairing links start with it. Required.
	PublicURL string
	// Now is the clock. Nil: time.Now.
	Now func() time.Time
	// Log receives one line per request. Nil: none.
	Log *slog.Logger
	// Rand is the source of tokens. Nil: crypto/rand.
	Rand io.Reader
	// Pairings keeps the pairing links and the paired phones where every hub replica reads
	// them (the hub's database). Nil: in this process only.
	Pairings PairingStore
}

// Server is the phone page and its API.
type Server struct {
	hub      *hub.Hub
	origin   string // scheme://host[:port] of PublicURL, the one allowed Origin
	now      func() time.Time
	log      *slog.Logger
	rand     io.Reader
	store    PairingStore
	limit    *limiter
	authWait time.Duration // AuthWait; tests shorten it

	mu       sync.Mutex
	pairings map[[32]byte]time.Time // guarded by mu: SHA-256 of an unused pairing token → expiry
	sessions map[string]*session    // guarded by mu: session id → session
	closed   bool                   // guarded by mu: Close was called
	done     chan struct{}          // closed by Close: every websocket ends
}

// New checks the configuration and returns the server. It does not listen: mount Handler.
func New(c Config) (*Server, error) {
	if c.Hub == nil {
		return nil, errors.New("phone: no hub")
	}
	origin, err := originOf(c.PublicURL)
	if err != nil {
		return nil, err
	}
	s := &Server{hub: c.Hub, origin: origin, now: c.Now, log: c.Log, rand: c.Rand, store: c.Pairings, authWait: AuthWait,
		pairings: map[[32]byte]time.Time{}, sessions: map[string]*session{}, done: make(chan struct{})}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.rand == nil {
		s.rand = rand.Reader
	}
	s.limit = newLimiter(s.now)
	if s.store != nil {
		s.store.WatchUnpaired(func(id string) { s.forget(id) })
	}
	return s, nil
}

// Origin is the origin that state-changing requests and websockets must come from.
func (s *Server) Origin() string { return s.origin }

// Close ends every live websocket (http.Server.Shutdown does not see hijacked connections).
// The handler keeps answering plain requests.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.done)
	}
}

// originOf checks that raw is http(s)://host[:port] and returns its origin as a browser sends
// it: scheme and host in lower case, no default port.
func originOf(raw string) (string, error) {
	bad := func(why string) error {
		return fmt.Errorf("phone: public URL %q %s; use http(s)://host[:port], the address the phone opens", raw, why)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", bad("does not parse")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", bad("is not http or https")
	}
	if u.Opaque != "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.ForceQuery ||
		u.Fragment != "" || strings.Contains(raw, "#") {
		return "", bad("has more than a scheme, a host and a port")
	}
	host, port := strings.ToLower(u.Hostname()), u.Port()
	if host == "" || strings.ContainsAny(host, "%/ ") {
		return "", bad("has no usable host")
	}
	if strings.HasSuffix(u.Host, ":") {
		return "", bad("has an empty port")
	}
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return "", bad("has a bad port")
		}
		port = strconv.Itoa(n)
		if (u.Scheme == "http" && n == 80) || (u.Scheme == "https" && n == 443) {
			port = ""
		}
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port != "" {
		host += ":" + port
	}
	return u.Scheme + "://" + host, nil
}
