package gate

import (
	"context"
	"net/http"

	"github.com/lockhttp/lockhttp/internal/framing"
	"github.com/lockhttp/lockhttp/internal/transport"
)

// serveH1 serves the requests on fc with h on transport's HTTP/1.1 server, on a goroutine of its
// own, and returns at once: ci rides in each request's context, and its watch is the server's
// client-gone watch. end runs once the connection is closed, by the server or by whoever
// hijacked it; all, when not nil, is the set of connections a shutdown closes.
func (g *Gate) serveH1(fc *framing.Conn, ci *connInfo, h http.Handler, all *transport.H1Conns, end func()) {
	c := transport.NewH1Conn(&g.h1, fc, context.WithValue(context.Background(), connInfoKey{}, ci), h, all, end)
	ci.watch = c.Watch
	c.Serve()
}
