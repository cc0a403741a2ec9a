package hub

import (
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/lockhttp/lockhttp/internal/connlimit"
	"github.com/lockhttp/lockhttp/internal/hubapi"
)

// The hub's HTTP server (console -hub-listen): its timeouts and the caps on its connections.
// Every request but the gate's event stream and the phone's websocket is short: a body of at
// most 1 MiB from the gate or 16 KiB from a phone, and an answer from memory.
const (
	// ReadHeaderTimeout bounds reading a request's head.
	ReadHeaderTimeout = 5 * time.Second
	// ReadTimeout bounds reading a whole request, body included. The event stream lifts it
	// (the gate sends nothing more); a websocket is no longer the server's once upgraded.
	ReadTimeout = 15 * time.Second
	// WriteTimeout bounds answering a request; the event stream renews it for every line.
	WriteTimeout = 30 * time.Second
	// IdleTimeout closes a keep-alive connection idle this long: longer than the gate's own
	// 90 s, so that the gate closes an idle connection before the hub does.
	IdleTimeout = 120 * time.Second
	// MaxHeaderBytes bounds a request's head.
	MaxHeaderBytes = 32 << 10

	// MaxConns is the most connections the hub holds at once.
	MaxConns = 512
	// MaxProbationConns is the most connections held before a request on them carried a valid
	// token (the gate's, a facade's or a phone's session), from every peer together.
	MaxProbationConns = 128
	// MaxProbationPerPeer is the same per peer (connlimit.PeerKey: a local peer by its uid, a
	// remote one by its address). Past it, the peer's oldest such connection is closed. Its
	// clients keep under it (hubapi).
	MaxProbationPerPeer = hubapi.MaxProbationPerPeer
	// Probation is how long a connection may go without a request that carried a valid token:
	// longer than a phone's websocket may take to send its (phone.AuthWait).
	Probation = 10 * time.Second
)

// Listener wraps l with the hub's caps on connections. Serve it with NewServer; handlers
// that check a token call connlimit.Trust.
func Listener(l net.Listener, log *slog.Logger) *connlimit.Listener {
	return connlimit.New(l, connlimit.Config{Max: MaxConns, MaxProbation: MaxProbationConns,
		PerPeer: MaxProbationPerPeer, Probation: Probation, Log: log, Name: "hub"})
}

// NewServer is the hub's http.Server for h, served on l (from Listener).
func NewServer(h http.Handler, l *connlimit.Listener) *http.Server {
	return l.Server(&http.Server{
		Handler:           h,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
	})
}
