package gate

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
// (writeStreamRefusal), without a reason phrase, and its connection goes on.

// drainLimit and drainTimeout bound what of the refused request's body the gate reads and throws
// away before it answers and closes (net/http's server drains as much, for the reason writeRefusal
// gives).
const (
	drainLimit   = 256 << 10
	drainTimeout = 5 * time.Second
)

// writeRefusal writes rf to the client of r and closes its connection. It reads (and throws
// away) what it can of the request's body first, so that closing with the body unread does not
// reset the connection under the answer. Where the connection cannot be taken over, net/http
// writes rf with the standard phrase.
func writeRefusal(w http.ResponseWriter, r *http.Request, rf *refusal.Refusal) {
	if r.ProtoMajor == 2 {
		writeStreamRefusal(w, rf)
		return
	}
	rc := http.NewResponseController(w)
	if r.Body != nil && !rf.NoDrain {
		rc.SetReadDeadline(time.Now().Add(drainTimeout))
		io.Copy(io.Discard, io.LimitReader(r.Body, drainLimit))
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
	c.SetWriteDeadline(time.Now().Add(drainTimeout))
	rf.WriteRaw(brw.Writer)
}

// writeStreamRefusal answers an HTTP/2 stream with rf and ends that stream only: the
// connection's other streams go on. HTTP/2 has no reason phrase, so the code and the rule are in
// the X-LockHTTP headers and the body; Connection: close would make the server close the whole
// connection (and HTTP/2 forbids the header), so it is left out. The request's body is not
// read: the stream is reset under it once the answer is written, which costs the connection
// nothing.
func writeStreamRefusal(w http.ResponseWriter, rf *refusal.Refusal) {
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

// refusalWriter is the ResponseWriter forward writes to. When the request is refused (refuse
// sets refusal before forward writes the answer) it writes the refusal itself, with its reason
// phrase, and drops forward's copy; anything else passes through.
type refusalWriter struct {
	http.ResponseWriter
	r       *http.Request
	refusal *refusal.Refusal // set by refuse before forward calls WriteHeader
	written bool             // the refusal was written: forward's writes are dropped
	// ws is the WebSocket session the origin switched to (set by roundTrip): relaySwitched's hijack
	// of the agent's connection gets it wrapped, so that every frame is read.
	ws *wsSession
}

type refusalWriterKey struct{}

// withRefusalWriter wraps w for forward and returns r with the wrapper in its context, where
// refuse finds it.
func withRefusalWriter(w http.ResponseWriter, r *http.Request) (*refusalWriter, *http.Request) {
	rw := &refusalWriter{ResponseWriter: w, r: r}
	return rw, r.WithContext(context.WithValue(r.Context(), refusalWriterKey{}, rw))
}

func refusalWriterFrom(ctx context.Context) *refusalWriter {
	rw, _ := ctx.Value(refusalWriterKey{}).(*refusalWriter)
	return rw
}

func (w *refusalWriter) WriteHeader(code int) {
	if w.refusal == nil {
		w.ResponseWriter.WriteHeader(code)
		return
	}
	if !w.written {
		w.written = true
		writeRefusal(w.ResponseWriter, w.r, w.refusal)
	}
}

func (w *refusalWriter) Write(b []byte) (int, error) {
	if w.refusal == nil {
		return w.ResponseWriter.Write(b)
	}
	w.WriteHeader(w.refusal.Status)
	return len(b), nil
}

// Flush and Hijack are forward's (it flushes event streams and takes over WebSocket
// connections); Unwrap is http.ResponseController's.
func (w *refusalWriter) Flush() {
	if w.refusal == nil {
		http.NewResponseController(w.ResponseWriter).Flush()
	}
}

func (w *refusalWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil || w.ws == nil {
		return c, brw, err
	}
	wc := w.ws.attach(c, brw)
	return wc, bufio.NewReadWriter(bufio.NewReader(wc), bufio.NewWriter(wc)), nil
}

func (w *refusalWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
