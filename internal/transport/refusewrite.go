package transport

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/lockhttp/lockhttp/internal/refusal"
)

// net/http writes the standard reason phrase and has no way to write another, so the gate
// writes a refusal's status line itself: it takes the client connection over (the main listener
// and a decrypted tunnel's HTTP/1.1 connections), writes the whole answer and closes the
// connection, as the refusal's Connection: close says. An HTTP/2 stream is answered on its own
// (WriteStreamRefusal), without a reason phrase, and its connection goes on.

// DrainLimit and DrainTimeout bound what of the refused request's body the gate reads and throws
// away before it answers and closes (net/http's server drains as much, for the reason WriteRefusal
// gives).
const (
	DrainLimit   = 256 << 10
	DrainTimeout = 5 * time.Second
)

// WriteRefusal writes rf to the client of r and closes its connection. It reads (and throws
// away) what it can of the request's body first, so that closing with the body unread does not
// reset the connection under the answer. Where the connection cannot be taken over, net/http
// writes rf with the standard phrase.
func WriteRefusal(w http.ResponseWriter, r *http.Request, rf *refusal.Refusal) {
	if r.ProtoMajor == 2 {
		WriteStreamRefusal(w, rf)
		return
	}
	rc := http.NewResponseController(w)
	if r.Body != nil && !rf.NoDrain {
		rc.SetReadDeadline(time.Now().Add(DrainTimeout))
		io.Copy(io.Discard, io.LimitReader(r.Body, DrainLimit))
	}
	c, brw, err := rc.Hijack()
	if err != nil {
		h := w.Header()
		for k, v := range rf.Header {
			h[k] = v
		}
		w.WriteHeader(rf.Status)
		w.Write(rf.Body)
		return
	}
	defer c.Close()
	c.SetWriteDeadline(time.Now().Add(DrainTimeout))
	rf.WriteRaw(brw.Writer)
}

// WriteStreamRefusal answers an HTTP/2 stream with rf and ends that stream only: the
// connection's other streams go on. HTTP/2 has no reason phrase, so the code and the rule are in
// the X-LockHTTP headers and the body; Connection: close would make the server close the whole
// connection (and HTTP/2 forbids the header), so it is left out. The request's body is not
// read: the stream is reset under it once the answer is written, which costs the connection
// nothing.
func WriteStreamRefusal(w http.ResponseWriter, rf *refusal.Refusal) {
	h := w.Header()
	for k, v := range rf.Header {
		h[k] = v
	}
	delete(h, "Connection") // forward may have copied it there already
	w.WriteHeader(rf.Status)
	if !rf.Head {
		w.Write(rf.Body)
	}
}

// RefusalWriter is the ResponseWriter forward writes to. When the request is refused (refuse
// sets refusal before forward writes the answer) it writes the refusal itself, with its reason
// phrase, and drops forward's copy; anything else passes through.
type RefusalWriter struct {
	http.ResponseWriter
	r *http.Request
	// Refusal is set by the gate's refuse before forward calls WriteHeader.
	Refusal *refusal.Refusal
	written bool // the refusal was written: forward's writes are dropped
	// WS is the WebSocket session the origin switched to (set by roundTrip): relaySwitched's hijack
	// of the agent's connection gets it wrapped, so that every frame is read.
	WS Attacher
}

// Attacher wraps a hijacked connection c, whose reader may hold bytes already.
type Attacher interface {
	Attach(c net.Conn, brw *bufio.ReadWriter) net.Conn
}

type refusalWriterKey struct{}

// WithRefusalWriter wraps w for forward and returns r with the wrapper in its context, where
// refuse finds it.
func WithRefusalWriter(w http.ResponseWriter, r *http.Request) (*RefusalWriter, *http.Request) {
	rw := &RefusalWriter{ResponseWriter: w, r: r}
	return rw, r.WithContext(context.WithValue(r.Context(), refusalWriterKey{}, rw))
}

func RefusalWriterFrom(ctx context.Context) *RefusalWriter {
	rw, _ := ctx.Value(refusalWriterKey{}).(*RefusalWriter)
	return rw
}

func (w *RefusalWriter) WriteHeader(code int) {
	if w.Refusal == nil {
		w.ResponseWriter.WriteHeader(code)
		return
	}
	if !w.written {
		w.written = true
		WriteRefusal(w.ResponseWriter, w.r, w.Refusal)
	}
}

func (w *RefusalWriter) Write(b []byte) (int, error) {
	if w.Refusal == nil {
		return w.ResponseWriter.Write(b)
	}
	w.WriteHeader(w.Refusal.Status)
	return len(b), nil
}

// Flush and Hijack are forward's (it flushes event streams and takes over WebSocket
// connections); Unwrap is http.ResponseController's.
func (w *RefusalWriter) Flush() {
	if w.Refusal == nil {
		http.NewResponseController(w.ResponseWriter).Flush()
	}
}

func (w *RefusalWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil || w.WS == nil {
		return c, brw, err
	}
	wc := w.WS.Attach(c, brw)
	return wc, bufio.NewReadWriter(bufio.NewReader(wc), bufio.NewWriter(wc)), nil
}

func (w *RefusalWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
