package main

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/lockhttp/lockhttp/internal/connlimit"
	"github.com/lockhttp/lockhttp/internal/mtls"
	"github.com/lockhttp/lockhttp/internal/signer"
)

// serveFleet serves the signer's routes to the gates of a fleet on o.tlsListen over mutual TLS
// until ctx ends: a gate proves an identity o.tlsGates admits, every other peer is refused in
// the handshake; connections that prove nothing within 10 s are closed, at most 16 at once
// from one address.
func serveFleet(ctx context.Context, o serveOptions, srv *signer.Server, log *slog.Logger) error {
	src, err := o.tls.Load(log)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", o.tlsListen)
	if err != nil {
		return err
	}
	ms := mtls.NewServer(mtls.ServerOptions{Source: src, Allow: o.tlsGates, Name: "signer-tls", Log: log})
	go ms.Watch(ctx)
	cl := connlimit.New(l, connlimit.Config{Max: 1024, MaxProbation: 128, PerPeer: 16, Probation: 10 * time.Second, Log: log, Name: "signer-tls"})
	hs := cl.Server(&http.Server{
		Handler: srv.FleetHandler(func(r *http.Request) (string, bool) {
			id, ok := mtls.PeerOf(r)
			return id.String(), ok && o.tlsGates.Admits(id)
		}),
		ConnContext:       mtls.ConnContext,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	})
	go hs.Serve(ms.Listener(cl))
	go func() {
		<-ctx.Done()
		hs.Close()
	}()
	log.Info("signer serving gates over mutual TLS", "listen", l.Addr().String(), "id", src.ID().String(), "gates", o.tlsGates.String())
	return nil
}
