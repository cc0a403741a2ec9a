package gate

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/netip"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"

	"github.com/lockhttp/lockhttp/internal/judge"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/refusal"
	"github.com/lockhttp/lockhttp/internal/transport"
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
	// h2HeaderTable bounds the HPACK dynamic table the client may make the gate keep.
	h2HeaderTable = 4 << 10
	// h2StreamWindow and h2ConnWindow bound the request-body bytes a client may send ahead of
	// the gate reading them, per stream and per connection.
	h2StreamWindow = 1 << 20
	h2ConnWindow   = 4 << 20
	// h2MaxResets is how many streams a client may cancel before their answer on one
	// connection (rapid reset): past it the connection is closed. The same bound holds for the
	// streams the HTTP/2 server refuses by itself.
	h2MaxResets = 200
	// h2StreamRecords is how many of the streams the HTTP/2 server refuses by itself on one
	// connection get an audit record each; the rest are counted in the connection's record.
	h2StreamRecords = 16
	// h2MaxOpen bounds the streams the watch follows from their opening to a handler or their
	// end; more are counted, not followed.
	h2MaxOpen = 1024
	// h2MaxHeaderList is the largest header list a stream may send, decoded, as HTTP/2 counts
	// it (SETTINGS_MAX_HEADER_LIST_SIZE; x/net adds room for 10 fields' overhead): as an
	// HTTP/1.1 head.
	h2MaxHeaderList = 64 << 10
	// h2StreamCost is what an open stream is charged in the held bytes besides its header: its
	// handler's goroutine and the HTTP/2 server's state for it. Measured with the stream's
	// handler waiting for a body: about 18 KiB live (10 KiB of heap, an 8 KiB stack) and 23 KiB
	// of the gate's resident memory a stream; the charge rounds up, for a stack that grows
	// while the request is sent on.
	h2StreamCost = 32 << 10
	// h2FieldCost is what HTTP/2 counts for each field of a header list besides its name and
	// value.
	h2FieldCost = 32
)

// streamInfo is what the gate knows about one HTTP/2 stream: an HTTP/1.1 connection carries one
// request at a time, and keeps this in its connInfo; an HTTP/2 connection carries many.
type streamInfo struct {
	id uint32
	// charge is the bytes the stream itself is charged in the held bytes (streamCharge), from
	// its handler's start to its end.
	charge bodyHold
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

// serveH2 serves the HTTP/2 streams of tc with h, each stream a request, until the connection
// ends. id is the CONNECT's; tun the tunnel's binding.
func (g *Gate) serveH2(tc *tls.Conn, source netip.Addr, tun *judge.Binding, id string, h http.Handler) {
	st := &h2Streams{g: g, source: source, tun: tun, connect: id, open: map[uint32]bool{}, pace: true}
	hc := transport.NewH2Conn(tc, st)
	st.close = func() { hc.Close() }
	var resets atomic.Int64 // streams the client cancelled before their answer
	srv := &http2.Server{
		MaxConcurrentStreams:         h2MaxStreams,
		MaxReadFrameSize:             transport.H2MaxFrame,
		MaxDecoderHeaderTableSize:    h2HeaderTable,
		MaxEncoderHeaderTableSize:    h2HeaderTable,
		MaxUploadBufferPerStream:     h2StreamWindow,
		MaxUploadBufferPerConnection: h2ConnWindow,
		IdleTimeout:                  orDefault(g.cfg.IdleTimeout, 2*time.Minute),
		CountError: func(errType string) {
			// What the HTTP/2 server refused before any handler saw it (a malformed header
			// block, a bad content-length, too many resets): tallied for the connection's
			// record, and the log names the tunnel.
			st.countError(errType)
			g.log.Info("http2: refused", logID, id, "host", tun.Host, "error", errType)
		},
	}
	base := &http.Server{
		// The header list limit (SETTINGS_MAX_HEADER_LIST_SIZE, decoded size): as for HTTP/1.1.
		MaxHeaderBytes:    h2MaxHeaderList,
		ReadHeaderTimeout: orDefault(g.cfg.ReadHeaderTimeout, 30*time.Second),
		ErrorLog:          g.srvLog,
	}
	ctx := context.WithValue(context.Background(), connInfoKey{}, &connInfo{source: source, tunnel: tun, h2: true})
	srv.ServeConn(hc, &http2.ServeConnOpts{Context: ctx, BaseConfig: base, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sid, ok := hc.StreamOf(r)
		si := &streamInfo{id: sid, rc: http.NewResponseController(w)}
		r = r.WithContext(context.WithValue(r.Context(), streamInfoKey{}, si))
		// The stream's header is charged before anything else is done with it, and given back
		// however the stream ends: the handler returns once it is answered, reset by the
		// client or its connection is closed. (Charged before the claim, which lets the
		// connection's next header block reach the server.)
		defer si.charge.release()
		res, busy := g.chargeStream(r, source, si)
		if ok && !st.claim(sid, busy) {
			// The HTTP/2 server ended the stream before this handler began, and its record
			// is written: nothing more to do.
			return
		}
		if busy {
			g.refuseH2Busy(w, r, tun, res)
			if ok {
				st.busyDone()
			}
			return
		}
		if !ok {
			g.refuseH2Mark(w, r, tun)
			return
		}
		h.ServeHTTP(w, r)
		if r.Context().Err() != nil {
			// The client reset the stream before its answer was complete (or the connection
			// ended, and this count no longer matters).
			if resets.Add(1) > h2MaxResets {
				g.log.Info("http2: too many streams cancelled before their answer; closing the connection", logID, id, "host", tun.Host)
				st.closing(fmt.Sprintf("the gate closed the connection: more than %d streams were cancelled before their answer", h2MaxResets))
				hc.Close()
			}
		}
	})})
	st.finish()
}

// streamCharge is what the stream of r is charged in the held bytes while it is open: its
// header list as HTTP/2 counts it (names and values, the pseudo-headers included, and
// h2FieldCost a field; x/net's joined Cookie is counted as the one field it is, its length the
// joined length), the largest trailer list when it declares trailers (x/net decodes them
// while the body is read), and h2StreamCost. HPACK lets a client send a field the table holds
// with one byte: this counts what the gate holds, not what came on the wire.
func streamCharge(r *http.Request) int64 {
	n := int64(h2StreamCost)
	field := func(name, value string) { n += int64(len(name)+len(value)) + h2FieldCost }
	field(":method", r.Method)
	field(":scheme", "https")
	field(":authority", r.Host)
	field(":path", r.RequestURI)
	for k, vs := range r.Header {
		for _, v := range vs {
			field(k, v)
		}
	}
	if len(r.Trailer) > 0 {
		n += h2MaxHeaderList
	}
	return n
}

// chargeStream takes the stream's charge (streamCharge) from the held bytes of the container
// source belongs to, as a body's bytes are taken (without a policy yet, against the default
// bounds). It returns the refusal and true when the charge would pass held_per_container or
// held_limit.
func (g *Gate) chargeStream(r *http.Request, source netip.Addr, si *streamInfo) (judge.Result, bool) {
	pol := g.pol.Load()
	s := &policy.Settings{HeldLimit: policy.DefaultHeldLimit, HeldPerContainer: policy.DefaultHeldPerContainer}
	if pol != nil {
		s = &pol.Settings
	}
	container := sourceContainer(pol, source)
	err := si.charge.take(&g.held, container, streamCharge(r), s)
	if d, busy := bodyRefusal(err); busy {
		return judge.Result{Decision: d, Container: container}, true
	}
	return judge.Result{}, false
}

// refuseH2Busy refuses a stream whose charge the held bytes cannot take (E_BUSY, 503 with
// Retry-After): the stream alone is answered, with its record, and its connection goes on.
func (g *Gate) refuseH2Busy(w http.ResponseWriter, r *http.Request, tun *judge.Binding, res judge.Result) {
	r.URL.Scheme, r.URL.Host = tun.Scheme(), tun.Authority() // the record names the tunnel's host, as serveTunnel's requests do
	ex := g.newExchange(r, "tunnel-request")
	ex.decided(res, g.pol.Load())
	rf := newRefusal(r, ex, res.Decision)
	// The refusal is made: the header it was charged for is let go before the record is
	// written (a summarised refusal waits up to a second for its fsync), so that a stream
	// refused keeps nothing of its header while it waits.
	clear(r.Header)
	ex.finishSync(r.Context(), refusal.Status(res.Decision), "")
	transport.WriteStreamRefusal(w, rf)
}

// refuseH2Mark refuses a stream whose header block did not end with the gate's mark (transport/h2watch.go):
// a block that ends inside a representation, which HTTP/2 forbids, and which took the mark into
// a field of its own.
func (g *Gate) refuseH2Mark(w http.ResponseWriter, r *http.Request, tun *judge.Binding) {
	ex := g.newExchange(r, "tunnel-request")
	ex.rec.Method, ex.rec.URL = "-", tun.Root()
	a := g.arrival(r)
	a.Framing = judge.H2Refused(judge.H2Stream, "the stream's header block did not end where the gate marked it (a block that ends inside a field, which HTTP/2 forbids)")
	pol := g.pol.Load()
	v := judge.See(a)
	res := g.decide(g.env(pol), v, ex.rec.Event)
	g.decided(ex, v, res, pol)
	g.refuseWriter(w, r, ex, res.Decision)
}

// h2LastAnswer makes each answer of h end its HTTP/2 connection: the server sends GOAWAY, answers
// the streams already open and closes, as an HTTP/1.1 connection closes after a refusal inside
// a tunnel that the policy refuses as a whole.
func h2LastAnswer(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(lastAnswer{w}, r)
	})
}

// lastAnswer is a stream's ResponseWriter whose answer carries Connection: close, which the
// HTTP/2 server takes out and turns into a graceful GOAWAY (writeStreamRefusal takes it out
// before the answer is written; this puts it back).
type lastAnswer struct{ http.ResponseWriter }

func (w lastAnswer) WriteHeader(code int) {
	w.Header().Set("Connection", "close")
	w.ResponseWriter.WriteHeader(code)
}

func (w lastAnswer) Write(b []byte) (int, error) {
	w.Header().Set("Connection", "close")
	return w.ResponseWriter.Write(b)
}

func (w lastAnswer) Unwrap() http.ResponseWriter { return w.ResponseWriter }
