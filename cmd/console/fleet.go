package main

import (
	"context"
	"fmt"
	stdlog "log"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/connlimit"
	"github.com/lockhttp/lockhttp/internal/console"
	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/mtls"
)

// fleet is the console's side of mutual TLS: its identity and the gates and facades it admits.
type fleet struct {
	src        *mtls.Source
	gates      mtls.Allow
	facades    mtls.Allow
	log        *slog.Logger
	audit      *audit.Writer
	policyAddr string // where -tls-listen listens, once it does
	hubAddr    string // where -hub-tls-listen listens, once it does
}

// newFleet reads the console's identity (-tls-cert, -tls-key, -tls-ca, -tls-crl, -tls-deny).
func newFleet(ctx context.Context, o *options, log *slog.Logger, aw *audit.Writer) (*fleet, error) {
	src, err := o.tls.Load(log)
	if err != nil {
		return nil, err
	}
	log.Info("mutual TLS identity", "id", src.ID().String(), "gates", o.tlsGates.String(), "facades", o.tlsFacades.String())
	return &fleet{src: src, gates: o.tlsGates, facades: o.tlsFacades, log: log, audit: aw}, nil
}

// The caps on a listener of mutual TLS (connlimit): a connection whose peer has not proved an
// admitted identity within probation is closed, and a peer address holds at most perPeer such
// connections, so that handshakes that never finish hold bounded descriptors.
const (
	fleetMaxConns  = 4096
	fleetProbation = 10 * time.Second
	fleetPerPeer   = 16
	fleetMaxProbe  = 256
)

// listen listens on addr behind the caps and the TLS layer of a server admitting allow; name
// names it in the log and in the console's audit.
func (f *fleet) listen(ctx context.Context, addr, name string, allow mtls.Allow) (net.Listener, *connlimit.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	srv := mtls.NewServer(mtls.ServerOptions{Source: f.src, Allow: allow, Name: name, Log: f.log,
		Refused: func(remote string, r *mtls.Refusal) {
			f.audit.Write(context.Background(), &audit.Record{Time: time.Now(), Event: "peer-refused", Status: http.StatusForbidden,
				Detail: fmt.Sprintf("%s over mutual TLS: %s from %s refused: %s", name, orNone(r.ID), remote, r.Reason)})
		}})
	go srv.Watch(ctx)
	cl := connlimit.New(l, connlimit.Config{Max: fleetMaxConns, MaxProbation: fleetMaxProbe, PerPeer: fleetPerPeer,
		Probation: fleetProbation, Log: f.log, Name: name})
	return srv.Listener(cl), cl, nil
}

func orNone(id string) string {
	if id == "" {
		return "a certificate naming no identity"
	}
	return id
}

// servePolicy serves the policy to the gates on addr (-tls-listen) until ctx ends.
func (f *fleet) servePolicy(ctx context.Context, addr string, c *console.Console) error {
	tl, cl, err := f.listen(ctx, addr, "console-tls", mtls.Union(f.gates, f.facades))
	if err != nil {
		return err
	}
	srv := cl.Server(&http.Server{Handler: c.FleetHandler(f.gates, f.facades), ConnContext: mtls.ConnContext,
		ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second,
		IdleTimeout: 60 * time.Second, MaxHeaderBytes: 16 << 10, ErrorLog: quietErrors(f.log)})
	go srv.Serve(tl)
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	f.policyAddr = cl.Addr().String()
	f.log.Info("console serving gates over mutual TLS", "listen", f.policyAddr)
	return nil
}

// callers are the hub's callers over mutual TLS: a gate and a facade by the identity their
// certificate proves. A facade is named KIND/NAME (facade/alice) in the "by" of its decisions.
func (f *fleet) callers() hub.Callers {
	return hub.Callers{
		Gate: func(r *http.Request) bool {
			id, ok := mtls.PeerOf(r)
			return ok && f.gates.Admits(id)
		},
		Facade: func(r *http.Request) (string, bool) {
			id, ok := mtls.PeerOf(r)
			if !ok || !f.facades.Admits(id) {
				return "", false
			}
			return id.Short(), true
		},
		Refusal: "forbidden: this identity may not call this route of the hub (a gate asks, a facade decides)",
		Status:  http.StatusForbidden,
	}
}

// serveHub serves h (the hub's API, gates' and facades' routes) on addr (-hub-tls-listen) until
// ctx ends.
func (f *fleet) serveHub(ctx context.Context, addr string, h http.Handler) error {
	tl, cl, err := f.listen(ctx, addr, "hub-tls", mtls.Union(f.gates, f.facades))
	if err != nil {
		return err
	}
	srv := cl.Server(&http.Server{Handler: h, ConnContext: mtls.ConnContext,
		ReadHeaderTimeout: hub.ReadHeaderTimeout, ReadTimeout: hub.ReadTimeout, WriteTimeout: hub.WriteTimeout,
		IdleTimeout: hub.IdleTimeout, MaxHeaderBytes: hub.MaxHeaderBytes, ErrorLog: quietErrors(f.log)})
	go srv.Serve(tl)
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	f.hubAddr = cl.Addr().String()
	f.log.Info("hub serving gates and facades over mutual TLS", "listen", f.hubAddr)
	return nil
}

// noListener is a listener that accepts nothing until it is closed: the policy socket's place
// when the console has none (-tls-listen without -socket).
type noListener struct {
	once sync.Once
	done chan struct{}
}

func newNoListener() *noListener { return &noListener{done: make(chan struct{})} }

func (n *noListener) Accept() (net.Conn, error) {
	<-n.done
	return nil, net.ErrClosed
}

func (n *noListener) Close() error {
	n.once.Do(func() { close(n.done) })
	return nil
}

func (n *noListener) Addr() net.Addr { return &net.UnixAddr{Name: "none", Net: "unix"} }

// quietErrors is the TLS listeners' http.Server error log, at debug level: a refused handshake
// is logged by mtls (a stranger's counted every 10 s), not once per attempt.
func quietErrors(log *slog.Logger) *stdlog.Logger {
	return slog.NewLogLogger(log.Handler(), slog.LevelDebug)
}
