package gate

import (
	"bytes"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/lockhttp/lockhttp/internal/display"
	"github.com/lockhttp/lockhttp/internal/judge"
	"github.com/lockhttp/lockhttp/internal/mcp"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/refusal"
)

// The gate's side of MCP answers (docs/mcp.md, "The answers"): a request to an [[mcp]]
// endpoint that the judge read as MCP (judge.Result.MCP) is answered so that the model can read
// a refusal (mcpRefusal), its tools/list answers are cut to the tools the container may call,
// and what its answers hold (the tools' definitions, the server's requests, injection phrases)
// is pinned and recorded. Every decision is the judge's or the policy's; this file does I/O.

// mcpExchange is what the gate keeps of an MCP request for its answer.
type mcpExchange struct {
	e         *policy.MCPEndpoint
	pol       *policy.Policy
	container string
	m         *judge.MCP
}

// mcpDecided notes an MCP request's decision in its exchange and its record.
func (g *Gate) mcpDecided(ex *exchange, res judge.Result, pol *policy.Policy) {
	m := res.MCP
	if m == nil || pol == nil {
		return
	}
	var e *policy.MCPEndpoint
	for _, c := range pol.MCPEndpoints() {
		if c.Name == m.Endpoint {
			e = c
		}
	}
	if e == nil {
		return
	}
	ex.mcp = &mcpExchange{e: e, pol: pol, container: res.Container, m: m}
	rm := &ex.rec.MCP
	rm.Endpoint = m.Endpoint
	if m.Decided >= 0 && m.Decided < len(m.Messages) {
		msg := m.Messages[m.Decided]
		rm.Method = display.Escape(msg.Method, false)
		if msg.HasTarget {
			rm.Tool = display.Escape(mask(g.insp.Load(), msg.Target), false)
		}
		rm.Call = msg.Fingerprint
	}
}

// mcpGoing prepares an MCP request that goes out: its answer uncompressed, so that it can be
// read and cut, and, when a human approved a call whose tool's definition changed, that
// definition taken as the tool's pin.
func (g *Gate) mcpGoing(r *http.Request, ex *exchange, res judge.Result) {
	x := ex.mcp
	if x == nil {
		return
	}
	r.Header.Set("Accept-Encoding", "identity")
	if res.Verdict != policy.Ask {
		return
	}
	for _, msg := range x.m.Messages {
		if msg.Decision.Rule == judge.RuleMCPPinChanged {
			g.mcp.accept(x.e, msg.Target)
		}
	}
}

// mcpRefused is the refusal of an MCP POST as its client reads it (refusal.MCP), or nil for
// any other request.
func mcpRefused(r *http.Request, ex *exchange, d policy.Decision) *refusal.Refusal {
	x := ex.mcp
	if x == nil || r == nil || r.Method != http.MethodPost || len(x.m.Messages) == 0 && len(x.m.Findings) == 0 {
		return nil
	}
	return refusal.MCP(ex.shown(), d, x.body(), func(i int) policy.Decision {
		if i >= 0 && i < len(x.m.Messages) && x.m.Messages[i].Decision.Verdict == policy.Deny && d.Verdict == policy.Deny {
			return x.m.Messages[i].Decision // in a refused batch, each refused element says its own rule
		}
		return d
	})
}

// kinds are mcp.Kind by the names the judge gives them.
var kinds = map[string]mcp.Kind{"invalid": mcp.Invalid, "request": mcp.Request, "notification": mcp.Notification, "response": mcp.Response}

// body is the request's body as the judge read it, for mcp.Answer: the messages' kinds, ids
// and methods, and a finding about the body as a whole when it could not be read to a request.
func (x *mcpExchange) body() *mcp.Body {
	b := &mcp.Body{Batch: x.m.Batch}
	requests := 0
	for _, msg := range x.m.Messages {
		k := kinds[msg.Kind]
		if k == mcp.Request || k == mcp.Invalid && msg.ID != nil {
			requests++
		}
		b.Messages = append(b.Messages, mcp.Message{Kind: k, ID: msg.ID, Method: msg.Method})
	}
	if requests == 0 && len(x.m.Findings) > 0 {
		b.Findings = append(b.Findings, mcp.Finding{Message: -1})
	}
	return b
}

// requestIDs are the ids of the request's requests; lists those of its tools/list requests.
func (x *mcpExchange) ids() (requests, lists []mcp.ID) {
	for _, msg := range x.m.Messages {
		if msg.Kind != "request" || msg.ID == nil {
			continue
		}
		requests = append(requests, msg.ID)
		if msg.Method == "tools/list" {
			lists = append(lists, msg.ID)
		}
	}
	return requests, lists
}

// mcpReadLimit bounds a JSON answer, and one event of a stream, that the gate holds to cut or
// mark: 1 MiB (a tools/list of a hundred tools is about 100 KB). Cutting, a stream holds about
// three times an event in flight (its bytes as received, its line, its data: 3.4 MB for an event
// of 1 MiB, BenchmarkStreamHeld in internal/mcp); past the bound a tools/list answer is refused,
// any other passed on unread.
const mcpReadLimit = 1 << 20

// mcpAnswer reads the answer of an MCP endpoint on its way to the client: a JSON answer whole
// (up to mcpReadLimit), an event stream event by event (mcp.Stream). The tools/list results
// for the request's tools/list requests are cut to the tools the container may call (the policy
// does not refuse them); every tool listed is pinned; the server's requests and the injection
// phrases go to the record. An answer that must be cut and cannot be read one way only, or is
// over the bound, or compressed, is replaced (or, a stream, ended) by the refusal
// judge.MCPAnswerRefused under the request's ids.
func (g *Gate) mcpAnswer(ex *exchange, resp *http.Response) {
	x := ex.mcp
	if x == nil || resp.StatusCode == http.StatusSwitchingProtocols {
		return
	}
	requests, lists := x.ids()
	f := &mcp.Filter{Lists: lists, Allow: func(name string) bool {
		return x.pol.EvaluateMCP(x.e, x.container, policy.MCPMessage{Kind: policy.MCPTool, Method: "tools/call", Tool: name}).Verdict != policy.Deny
	}}
	cut := len(lists) > 0 && resp.StatusCode/100 == 2
	if !cut {
		f.Lists = nil // a failed answer holds no list: read, never cut
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	stream := mt == "text/event-stream"
	refusal := func() []byte {
		d := judge.MCPAnswerRefused
		rf := mcp.Refusal{Code: d.Code, Rule: d.Rule, Reason: d.Reason}
		var out [][]byte
		for _, id := range requests {
			out = append(out, rf.Error(id))
		}
		if stream {
			var b []byte
			for _, m := range out {
				b = append(append(append(b, "event: message\ndata: "...), m...), "\n\n"...)
			}
			return b
		}
		if len(out) == 1 && !x.m.Batch {
			return out[0]
		}
		return append(append([]byte{'['}, bytes.Join(out, []byte{','})...), ']')
	}
	setBody := func(body []byte) {
		resp.Body = struct {
			io.Reader
			io.Closer
		}{bytes.NewReader(body), resp.Body}
		resp.ContentLength = int64(len(body))
		resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	}
	replace := func(body []byte, why string) {
		ex.rec.MCP.Answer = joinWords(ex.rec.MCP.Answer, "the answer was replaced by the gate's refusal: "+why)
		setBody(body)
		resp.Header.Set("Content-Type", "application/json")
		resp.Header.Del("Content-Encoding")
	}
	if ce := resp.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		if cut {
			stream = false
			replace(refusal(), "it is compressed ("+display.Escape(ce, false)+")")
		} else {
			ex.rec.MCP.Answer = "the answer is compressed and was not read"
		}
		return
	}
	switch {
	case stream:
		resp.Body = &mcpStreamBody{rc: resp.Body, s: f.Stream(mcpReadLimit), refusal: refusal,
			end: func(rep mcp.Report, err error) { g.mcpReported(ex, rep, err) }}
		resp.ContentLength = -1
		resp.Header.Del("Content-Length")
	case mt == "application/json" || cut:
		data, err := io.ReadAll(io.LimitReader(resp.Body, mcpReadLimit+1))
		if err != nil || len(data) > mcpReadLimit {
			if cut {
				why := "it is over " + strconv.Itoa(mcpReadLimit) + " bytes"
				if err != nil {
					why = "it could not be read: " + err.Error()
				}
				replace(refusal(), why)
				return
			}
			ex.rec.MCP.Answer = "the answer is over " + strconv.Itoa(mcpReadLimit) + " bytes and was not read"
			resp.Body = struct {
				io.Reader
				io.Closer
			}{io.MultiReader(bytes.NewReader(data), resp.Body), resp.Body}
			return
		}
		out, rep, err := f.JSON(data)
		if err == nil && cut && mt != "application/json" {
			err = fmt.Errorf("%w: an answer to tools/list of type %q", mcp.ErrAmbiguousAnswer, mt)
		}
		g.mcpReported(ex, rep, err)
		if err != nil {
			replace(refusal(), "it could not be read one way only")
			return
		}
		setBody(out)
	}
}

// mcpReported records what was read of an answer (rep) and why it was cut (err): the tools
// hidden, the pins that changed, the server's requests and the injection phrases; the phrases
// are also kept for the next ticket of the container on the endpoint.
func (g *Gate) mcpReported(ex *exchange, rep mcp.Report, err error) {
	x, rm := ex.mcp, &ex.rec.MCP
	in := g.insp.Load()
	shown := func(s string) string { return display.Escape(mask(in, s), false) }
	if err == nil {
		// An answer that was cut is no list the client got: nothing of it hidden or pinned.
		rm.Hidden += rep.Hidden
		if len(rep.Tools) > 0 {
			rm.Answer = joinWords(rm.Answer, g.mcp.listed(x.e, rep.Tools, shown))
		}
	}
	var reqs []string
	for _, r := range rep.Requests {
		s := shown(r.Method)
		if r.InResult {
			s += " (in a result's inputRequests)"
		}
		reqs = append(reqs, s)
	}
	rm.Requests = joinWords(rm.Requests, strings.Join(reqs, "; "))
	var marks []string
	for _, m := range rep.Marks {
		marks = append(marks, strconv.Quote(m.Phrase)+" at "+shown(m.Where))
	}
	if len(marks) > 0 {
		rm.Marks = joinWords(rm.Marks, strings.Join(marks, "; "))
		g.mcp.marked(x.container, x.e, marks)
	}
	for _, fd := range rep.Findings {
		rm.Answer = joinWords(rm.Answer, shown(fd))
	}
	if rep.Left > 0 {
		rm.Answer = joinWords(rm.Answer, strconv.Itoa(rep.Left)+" more left out")
	}
	if err != nil {
		rm.Answer = joinWords(rm.Answer, "cut: "+shown(err.Error()))
	}
}

func joinWords(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}

// mcpStreamBody passes an event stream through an mcp.Stream: every event the stream lets
// through, as soon as it ends (cutting) or at once (reading). When the stream cannot cut (an
// event over its bound, one it cannot read one way only), the answer ends with the refusal
// under the request's ids, and the server's stream is closed.
type mcpStreamBody struct {
	rc      io.ReadCloser
	s       *mcp.Stream
	refusal func() []byte
	end     func(mcp.Report, error)
	out     []byte // what is to be passed on; out[pos:] is left
	pos     int
	buf     []byte
	done    bool // the server's stream ended, or was cut
	cutErr  error
	ended   bool // end was called
}

// mcpStreamRead is how much of the server's stream is read at a time.
const mcpStreamRead = 16 << 10

func (b *mcpStreamBody) Read(p []byte) (int, error) {
	for b.pos == len(b.out) {
		if b.done {
			b.finish()
			return 0, io.EOF
		}
		if b.buf == nil {
			b.buf = make([]byte, mcpStreamRead)
		}
		n, err := b.rc.Read(b.buf)
		b.out, b.pos = b.out[:0], 0
		if n > 0 {
			var ferr error
			b.out, ferr = b.s.Feed(b.out, b.buf[:n])
			if ferr != nil {
				b.cut(ferr)
				continue
			}
		}
		switch {
		case err == io.EOF:
			var ferr error
			b.out, ferr = b.s.End(b.out)
			if ferr != nil {
				b.cut(ferr)
			}
			b.done = true
		case err != nil:
			b.finish()
			return 0, err
		}
	}
	n := copy(p, b.out[b.pos:])
	b.pos += n
	return n, nil
}

// cut ends the answer with the refusal.
func (b *mcpStreamBody) cut(err error) {
	b.cutErr, b.done = err, true
	b.out = append(b.out, b.refusal()...)
}

// finish records what was read, once.
func (b *mcpStreamBody) finish() {
	if !b.ended {
		b.ended = true
		b.end(b.s.Report(), b.cutErr)
	}
}

func (b *mcpStreamBody) Close() error {
	b.finish()
	return b.rc.Close()
}
