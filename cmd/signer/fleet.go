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
	hs, ml := mtlsServer(ctx, l, src, o.tlsGates, "signer-tls", srv.FleetHandler, log)
	go hs.Serve(ml)
	go func() {
		<-ctx.Done()
		hs.Close()
	}()
	log.Info("signer serving gates over mutual TLS", "listen", l.Addr().String(), "id", src.ID().String(), "gates", o.tlsGates.String())
	return nil
}

// mtlsServer is the HTTP server of a signer's listener of mutual TLS on l: a peer proves an
// identity allow admits or is refused in the handshake; connections that prove nothing within
// 10 s are closed, at most 16 at once from one address. handler gets the caller's identity. Its
// listener ml is what the server serves.
func mtlsServer(ctx context.Context, l net.Listener, src *mtls.Source, allow mtls.Allow, name string,
	handler func(func(*http.Request) (string, bool)) http.Handler, log *slog.Logger) (hs *http.Server, ml net.Listener) {
	ms := mtls.NewServer(mtls.ServerOptions{Source: src, Allow: allow, Name: name, Log: log})
	go ms.Watch(ctx)
	cl := connlimit.New(l, connlimit.Config{Max: 1024, MaxProbation: 128, PerPeer: 16, Probation: 10 * time.Second, Log: log, Name: name})
	hs = cl.Server(&http.Server{
		Handler: handler(func(r *http.Request) (string, bool) {
			id, ok := mtls.PeerOf(r)
			return id.String(), ok && allow.Admits(id)
		}),
		ConnContext:       mtls.ConnContext,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	})
	return hs, ms.Listener(cl)
}
