package gate

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/netip"
	"reflect"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"

	"github.com/lockhttp/lockhttp/internal/judge"
)

// HTTP/2 inside a decrypted tunnel: the client offered h2 by ALPN and the policy lets the gate
// take it (settings.http2). The HTTP/2 server of golang.org/x/net reads the frames, HPACK and
// the stream states, and refuses what HTTP/2 itself forbids (a pseudo-header after a regular
// one, connection-specific headers, a content-length the DATA frames disagree with, :protocol,
// CONTINUATION past the header list limit) before any handler runs; each stream it accepts is
// one request, handed to the same handler as an HTTP/1.1 request inside the tunnel and decided
// on its own. A stream holds only itself: an ASK waits in its stream's handler while the others
// go on.

// The bounds of one HTTP/2 connection inside a tunnel.
const (
	// h2MaxStreams is how many streams a client may have open at once (its handlers run at
	// most this many at a time; x/net closes a connection that queues four times as many).
	h2MaxStreams = 100
	// h2MaxFrame is the largest frame the gate reads: HTTP/2's default.
	h2MaxFrame = 16 << 10
	// h2HeaderTable bounds the HPACK dynamic table the client may make the gate keep.
	h2HeaderTable = 4 << 10
	// h2StreamWindow and h2ConnWindow bound the request-body bytes a client may send ahead of
	// the gate reading them, per stream and per connection.
	h2StreamWindow = 1 << 20
	h2ConnWindow   = 4 << 20
	// h2MaxResets is how many streams a client may cancel before their answer on one
	// connection (rapid reset): past it the connection is closed.
	h2MaxResets = 200
)

// streamInfo is what the gate knows about one HTTP/2 stream: an HTTP/1.1 connection carries one
// request at a time, and keeps this in its connInfo; an HTTP/2 connection carries many.
type streamInfo struct {
	id uint32
	// hold is the body bytes the stream's request holds, given back when the proxy is done
	// with it.
	hold bodyHold
	// rc sets the stream's read deadline while its body is read.
	rc *http.ResponseController
}

type streamInfoKey struct{}

func streamFrom(ctx context.Context) *streamInfo {
	si, _ := ctx.Value(streamInfoKey{}).(*streamInfo)
	return si
}

// holdOf is the bodyHold of the request r: its stream's, or its connection's.
func holdOf(ctx context.Context) *bodyHold {
	if si := streamFrom(ctx); si != nil {
		return &si.hold
	}
	if ci := infoFrom(ctx); ci != nil {
		return &ci.hold
	}
	return nil
}

// h2Conn is one HTTP/2 connection inside a decrypted tunnel.
type h2Conn struct {
	tc     *tls.Conn
	resets atomic.Int64 // streams the client cancelled before their answer
}

// serveH2 serves the HTTP/2 streams of tc with h, each stream a request, until the connection
// ends.
func (g *Gate) serveH2(tc *tls.Conn, source netip.Addr, tun *judge.Binding, id string, h http.Handler) {
	hc := &h2Conn{tc: tc}
	srv := &http2.Server{
		MaxConcurrentStreams:         h2MaxStreams,
		MaxReadFrameSize:             h2MaxFrame,
		MaxDecoderHeaderTableSize:    h2HeaderTable,
		MaxEncoderHeaderTableSize:    h2HeaderTable,
		MaxUploadBufferPerStream:     h2StreamWindow,
		MaxUploadBufferPerConnection: h2ConnWindow,
		IdleTimeout:                  orDefault(g.cfg.IdleTimeout, 2*time.Minute),
		CountError: func(errType string) {
			// What the HTTP/2 server refused before any handler saw it (a malformed header
			// block, a bad content-length, too many resets): the log names the tunnel.
			g.log.Info("http2: refused", logID, id, "host", tun.Host, "error", errType)
		},
	}
	base := &http.Server{
		// The header list limit (SETTINGS_MAX_HEADER_LIST_SIZE, decoded size): as for HTTP/1.1.
		MaxHeaderBytes:    64 << 10,
		ReadHeaderTimeout: orDefault(g.cfg.ReadHeaderTimeout, 30*time.Second),
		ErrorLog:          g.srvLog,
	}
	ctx := context.WithValue(context.Background(), connInfoKey{}, &connInfo{source: source, tunnel: tun, h2: true})
	srv.ServeConn(tc, &http2.ServeConnOpts{Context: ctx, BaseConfig: base, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		si := &streamInfo{id: streamID(w), rc: http.NewResponseController(w)}
		r = r.WithContext(context.WithValue(r.Context(), streamInfoKey{}, si))
		h.ServeHTTP(w, r)
		if r.Context().Err() != nil {
			// The client reset the stream before its answer was complete (or the connection
			// ended, and this count no longer matters).
			if hc.resets.Add(1) > h2MaxResets {
				g.log.Info("http2: too many streams cancelled before their answer; closing the connection", logID, id, "host", tun.Host)
				tc.Close()
			}
		}
	})})
}

// streamID is the HTTP/2 stream id of a request's ResponseWriter. x/net/http2 does not export
// it; its response writer holds it at rws.stream.id, which this reads (a test fails if a new
// version of x/net moves it). 0 when it is not there.
func streamID(w http.ResponseWriter) (id uint32) {
	defer func() {
		if recover() != nil {
			id = 0
		}
	}()
	v := reflect.ValueOf(w)
	for _, f := range []string{"rws", "stream", "id"} {
		for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
			if v.IsNil() {
				return 0
			}
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct {
			return 0
		}
		if v = v.FieldByName(f); !v.IsValid() {
			return 0
		}
	}
	if v.Kind() != reflect.Uint32 {
		return 0
	}
	return uint32(v.Uint())
}
