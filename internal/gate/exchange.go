package gate

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/egress"
	"github.com/lockhttp/lockhttp/internal/floor"
	"github.com/lockhttp/lockhttp/internal/judge"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/secrets"
	"github.com/lockhttp/lockhttp/internal/transport"
)

// Log field names of the canonical request line.
const (
	logID        = "id"
	logEvent     = "event"
	logContainer = "container"
	logMethod    = "method"
	logURL       = "url"
	logVerdict   = "verdict"
	logCode      = "code"
	logRule      = "rule"
	logStatus    = "status"
	logBytesIn   = "bytes_in"
	logBytesOut  = "bytes_out"
	logDuration  = "duration"
	logDetail    = "detail"
)

// exchange is one request's passage through the gate, from arrival to its audit record.
type exchange struct {
	g        *Gate
	rec      audit.Record
	source   netip.Addr
	ci       *connInfo // the connection's, or nil
	target   egress.Target
	decision policy.Decision
	bytesIn  atomic.Int64
	held     []byte      // the request body the gate read before deciding
	recorded atomic.Bool // the audit record has been written or queued
	// unrecorded is why the record could not be written (set once, by finish or finishSync, on
	// the goroutine that then completes the answer): a forwarded answer is cut, an answer of the
	// gate's own shows no request id (unrecordedRefusal).
	unrecorded error
	// closeAfter ends the client connection after the answer: the request asked for an upgrade,
	// and the framing check stopped following the connection when it saw it.
	closeAfter bool
	// tokenAnswer: the request calls the OAuth token endpoint, and the login its answer issues is
	// bound to the container (bindIssued) before the answer goes on.
	tokenAnswer bool

	traceparent string       // the request's traceparent header, kept only when the gate exports spans
	mcp         *mcpExchange // a request the judge read as MCP, for its answer (mcpanswer.go); nil otherwise

	// cutSlot is the journal place of a request the gate's stop cut while it was held: its file
	// goes once the record is written (heldjournal.go).
	cutSlot *heldSlot
}

func (g *Gate) newExchange(r *http.Request, event string) *exchange {
	ex := &exchange{g: g}
	if ci := infoFrom(r.Context()); ci != nil && ci.isTransparent() {
		// A transparent listener's: "transparent-request", "transparent-connect" (its TLS
		// connection, decided as a CONNECT to its server name), "transparent-tunnel-request".
		event = "transparent-" + event
	}
	ex.rec.Time = g.now()
	ex.rec.ID = g.newID()
	ex.rec.Event = event
	ex.rec.Method = r.Method
	// The record's URL is masked once, with the policy's detector when the gate has one.
	var d *secrets.Detector
	if in := g.insp.Load(); in != nil && g.pol.Load() != nil {
		d = in.Secrets
	}
	if r.Method == http.MethodConnect {
		ex.rec.URL = recordHost(d, r.Host)
	} else {
		ex.rec.URL = recordURL(d, r.URL)
	}
	if ci := infoFrom(r.Context()); ci != nil {
		ex.source, ex.ci = ci.source, ci
	}
	if si := streamFrom(r.Context()); si != nil {
		ex.rec.Stream = si.id
	}
	ex.closeAfter = r.Header.Get("Upgrade") != ""
	ex.traceparent = g.traceparent(r)
	return ex
}

// transparent reports an exchange that came to a transparent listener.
func (ex *exchange) transparent() bool { return ex.ci != nil && ex.ci.isTransparent() }

// recordHost is a host (or host:port) as the audit, the log and a ticket show it: what d (the
// built-in shapes when nil) recognises as a credential masked, and what looks like one hidden.
func recordHost(d *secrets.Detector, host string) string {
	if d != nil {
		host = d.MaskText(host)
	} else {
		host = secrets.MaskText(host)
	}
	return floor.HideTokens(host)
}

// recordURL is a URL as the audit, the log and a ticket show it: credentials in its host, path
// and query masked.
func recordURL(d *secrets.Detector, u *url.URL) string {
	c := *u
	c.Host = recordHost(d, u.Host)
	if d != nil {
		return d.MaskURL(&c)
	}
	return secrets.MaskURL(&c)
}

// decided records the decision and its context.
func (ex *exchange) decided(res judge.Result, pol *policy.Policy) {
	ex.decision = res.Decision
	ex.rec.Container = res.Container
	ex.rec.Verdict = res.Verdict.String()
	ex.rec.Code = string(res.Code)
	ex.rec.Rule = res.Rule
	ex.rec.Reason = res.Reason
	if pol != nil {
		ex.rec.Policy = pol.Version
	}
}

// refused records a refusal decided without the judge.
func (ex *exchange) refused(d policy.Decision, pol *policy.Policy) {
	ex.decided(judge.Result{Decision: d, Container: ex.rec.Container}, pol)
}

func (ex *exchange) fill(status int, bytesOut int64, detail string) {
	ex.rec.Status = status
	ex.rec.BytesIn = ex.bytesIn.Load()
	ex.rec.BytesOut = bytesOut
	ex.rec.Duration = ex.g.now().Sub(ex.rec.Time)
	if detail != "" {
		ex.rec.Detail = detail
	}
	ex.g.count(ex)
	ex.g.trace(ex)
}

// finish writes the audit record of a request whose response is complete but for what is
// still on its way to the client, and returns once the record is in the audit file (not
// fsync'ed: Auditor.Append): a gate killed after it loses no record of an answer a client got.
// Many requests' records share one write. When the record could not be written it returns why:
// the answer must not complete (countingBody holds its last bytes back and forward cuts it).
func (ex *exchange) finish(status int, bytesOut int64, detail string) error {
	if ex.recorded.Swap(true) {
		return ex.unrecorded
	}
	ex.fill(status, bytesOut, detail)
	ctx, cancel := context.WithTimeout(context.Background(), auditWait)
	defer cancel()
	err := ex.g.audit.Append(ctx, &ex.rec)
	if err != nil {
		ex.failed(err)
	}
	ex.recordedCut(err)
	ex.g.logRecord(&ex.rec)
	return err
}

// recordedCut tells the journal of held requests that the record of a request the gate's stop
// cut was written (err nil) or not.
func (ex *exchange) recordedCut(err error) {
	if ex.cutSlot != nil {
		ex.cutSlot.recordedCut(err == nil)
	}
}

// auditWait bounds how long a refusal waits for its record to reach the disk.
const auditWait = 10 * time.Second

// finishSync writes the audit record and waits until it is on disk: for refusals, before the
// response is sent. The wait does not end with the request's context (a client that went away,
// or the framing check's substituted request, whose context ends at once). When the record could
// not be written it returns why: the answer then shows no request id (unrecordedRefusal).
func (ex *exchange) finishSync(ctx context.Context, status int, detail string) error {
	if ex.recorded.Swap(true) {
		return ex.unrecorded
	}
	ex.fill(status, 0, detail)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditWait)
	defer cancel()
	err := ex.g.audit.Write(wctx, &ex.rec)
	if err != nil {
		ex.failed(err)
	}
	ex.recordedCut(err)
	ex.g.logRecord(&ex.rec)
	return err
}

// failed reports a record that could not be written: the log line names the request (its id is
// in no record: its client never gets a whole answer showing it), and the count is the gate's
// status's and its metrics'.
func (ex *exchange) failed(err error) {
	ex.unrecorded = err
	ex.g.unrecorded.Add(1)
	ex.g.cfg.Metrics.Unrecorded()
	ex.g.log.Error("audit write failed: this request has no record (a forwarded answer is cut, an answer of the gate's own shows no id)",
		logID, ex.rec.ID, logEvent, ex.rec.Event, logURL, audit.Clip(ex.rec.URL, logMaxURL), logVerdict, ex.rec.Verdict, logStatus, ex.rec.Status, "err", err)
}

// logRecord writes the request's canonical log line: at debug level for what went out (the
// audit has it; a log line per forwarded request would cost a write call each), at info level
// for refusals and failures.
func (g *Gate) logRecord(r *audit.Record) {
	level := slog.LevelDebug
	if r.Verdict != "FREE" || r.Status >= 500 {
		level = slog.LevelInfo
	}
	if !g.log.Enabled(context.Background(), level) {
		return
	}
	g.log.LogAttrs(context.Background(), level, "request",
		slog.String(logID, r.ID), slog.String(logEvent, r.Event), slog.String(logContainer, r.Container),
		slog.String(logMethod, r.Method), slog.String(logURL, audit.Clip(r.URL, logMaxURL)), slog.String(logVerdict, r.Verdict),
		slog.String(logCode, r.Code), slog.String(logRule, r.Rule), slog.Int(logStatus, r.Status),
		slog.Int64(logBytesIn, r.BytesIn), slog.Int64(logBytesOut, r.BytesOut),
		slog.Duration(logDuration, r.Duration), slog.String(logDetail, audit.Clip(r.Detail, logMaxDetail)))
}

// The log line's URL and detail are clipped as the audit clips them (the agent chooses both).
const (
	logMaxURL    = 2048
	logMaxDetail = 1024
)

// countingBody counts a response body and records the exchange when it is closed.
type countingBody struct {
	rc     io.ReadCloser
	ex     *exchange
	status int
	length int64 // the response's Content-Length; -1 when unknown
	n      int64
	done   atomic.Bool // the exchange is recorded
	err    error       // the record could not be written: every read fails
}

// errUnrecorded ends the copy of an answer whose record could not be written.
var errUnrecorded = errors.New("the answer's audit record could not be written: the answer is cut")

// Read counts the bytes of the body; the read that brings its last bytes (the Content-Length
// reached, or the end) records the exchange before it returns them, so that its record is in
// the audit before the client can hold the whole answer. When the record could not be written,
// that read returns none of its bytes, and errUnrecorded: the answer stays short.
func (b *countingBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.rc.Read(p)
	b.n += int64(n)
	if err == io.EOF || (b.length >= 0 && b.n >= b.length) {
		if b.record() != nil {
			b.err = errUnrecorded
			return 0, b.err
		}
	}
	return n, err
}

// WriteTo copies the body to w through a pooled buffer: the proxy copies every answer with
// io.Copy, which would otherwise allocate 32 KiB per request (the writer it copies to is not a
// ReaderFrom).
func (b *countingBody) WriteTo(w io.Writer) (int64, error) {
	bp := transport.CopyBufs.Get().(*[]byte)
	defer transport.CopyBufs.Put(bp)
	// The struct hides this WriteTo from io.CopyBuffer, which would call it again.
	return io.CopyBuffer(w, struct{ io.Reader }{b}, *bp)
}

func (b *countingBody) Close() error {
	err := b.rc.Close()
	b.record()
	return err
}

func (b *countingBody) record() error {
	if b.done.Swap(true) {
		return nil
	}
	b.ex.g.exfil.Replied(b.ex.target.Host, b.n)
	return b.ex.finish(b.status, b.n, "")
}
