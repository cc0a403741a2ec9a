package mcp

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"

	"github.com/lockhttp/lockhttp/internal/fingerprint"
	"github.com/lockhttp/lockhttp/internal/jsonlex"
)

// The bounds of a Report: past them an answer is still read and cut, and the report says how
// many it left out.
const (
	MaxTools    = 4096 // tool definitions recorded
	MaxRequests = 64   // server-to-client requests recorded
	MaxMarks    = 16   // prompt-injection phrases recorded
)

// PinPrefix starts every tool pin.
const PinPrefix = "pin1:"

// ErrAmbiguousAnswer: an answer that may hold a tools/list result cannot be read one way only,
// so it cannot be cut; the caller answers with a refusal instead.
var ErrAmbiguousAnswer = errors.New("an answer that parsers read in more than one way")

// Filter says how the answers to one request are read: the tools/list results among them cut to
// the tools Allow allows, and everything recorded in a Report.
type Filter struct {
	// Lists are the ids of the request's tools/list requests; the results for them are cut.
	// Empty: the answer is read and reported, never changed.
	Lists []ID
	// Allow reports whether the caller may see a tool; nil allows every tool. A tool without a
	// name is hidden.
	Allow func(name string) bool
}

// Tool is one tool definition of a tools/list result.
type Tool struct {
	Name string
	// Pin is "pin1:" and the hex SHA-256 of the definition's name, title, description,
	// inputSchema, outputSchema and annotations, each in canonical JSON: a changed definition
	// has another pin, and a renamed tool another name.
	Pin    string
	Hidden bool // cut from the answer
}

// ServerRequest is a request of the server to the client inside an answer: sampling,
// elicitation, roots, ping; or, in the 2026-07-28 revision, one a result asks the client to
// fulfil before it calls again (inputRequests).
type ServerRequest struct {
	Method   string
	ID       ID   // nil for one inside a result
	InResult bool // from a result's inputRequests
}

// Mark is a phrase of a known prompt injection found in an answer: marked, the answer unchanged.
type Mark struct {
	Phrase string
	Where  string // the path to the string, such as result.content[0].text
}

// Report is what was read in the answers to one request.
type Report struct {
	Hidden   int    // tools cut from tools/list results
	Tools    []Tool // the tool definitions of the tools/list results, shown and hidden
	Requests []ServerRequest
	Marks    []Mark
	// Findings says what could not be read as expected: an answer that is not JSON, ambiguous
	// JSON, a stream line that readers split differently.
	Findings []string
	// Left counts what the lists above left out past their bounds.
	Left int
}

func (r *Report) finding(format string, args ...any) {
	if len(r.Findings) >= MaxFindings {
		r.Left++
		return
	}
	r.Findings = append(r.Findings, fmt.Sprintf(format, args...))
}

// JSON reads a JSON answer (one message or a batch of them) and returns it with the tools/list
// results cut, and the report. Bytes outside a cut tools array are kept as they are. With
// Lists set, an answer that is not JSON or is ambiguous is ErrAmbiguousAnswer. An empty body
// (the answer to notifications and responses) is returned as it is.
func (f *Filter) JSON(body []byte) ([]byte, Report, error) {
	var rep Report
	out, err := f.read(body, &rep)
	return out, rep, err
}

// read reads one JSON text of server messages into rep and returns it cut.
func (f *Filter) read(text []byte, rep *Report) ([]byte, error) {
	if len(jsonTrim(text)) == 0 {
		return text, nil
	}
	a := answer{f: f, rep: rep}
	a.w.reset(text)
	a.w.onString = a.scan
	switch t := a.w.next(); t.Kind {
	case jsonlex.ObjectStart:
		a.message(0)
	case jsonlex.ArrayStart:
		for i := 0; ; i++ {
			t := a.w.next()
			if t.Kind == jsonlex.ArrayEnd {
				break
			}
			if t.Kind == jsonlex.ObjectStart {
				a.message(i)
			} else {
				a.w.value(t, nil, false)
			}
			if a.w.stopped {
				break
			}
		}
	default:
		a.w.value(t, nil, false)
	}
	if !a.w.stopped {
		if t := a.w.next(); t.Kind != jsonlex.End {
			a.w.lexStop()
		}
	}
	for _, fd := range a.w.findings {
		rep.finding("%s", fd.Text)
	}
	if len(a.w.findings) > 0 && len(f.Lists) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrAmbiguousAnswer, a.w.findings[0].Text)
	}
	if len(a.edits) == 0 {
		return text, nil
	}
	out := make([]byte, 0, len(text))
	at := 0
	for _, e := range a.edits {
		out = append(out, text[at:e.start]...)
		out = append(out, e.repl...)
		at = e.end
	}
	return append(out, text[at:]...), nil
}

func jsonTrim(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\n' || b[0] == '\r') {
		b = b[1:]
	}
	return b
}

// answer reads one JSON text of server messages.
type answer struct {
	f     *Filter
	rep   *Report
	w     walker
	edits []edit
}

// edit replaces text[start:end] with repl.
type edit struct {
	start, end int
	repl       []byte
}

// listed reports whether id is that of one of the request's tools/list requests.
func (a *answer) listed(id ID) bool {
	if id == nil {
		return false
	}
	k := id.Key()
	return slices.ContainsFunc(a.f.Lists, func(l ID) bool { return l.Key() == k })
}

// toolsRead is what a result's tools array held.
type toolsRead struct {
	present    bool
	start, end int // the array, brackets included
	elems      []toolElem
}

type toolElem struct {
	start, end int
	tool       Tool
	named      bool
}

// message reads the server message whose '{' was just read.
func (a *answer) message(idx int) {
	w := &a.w
	w.msg = idx
	var (
		ks        keys
		id        ID
		method    string
		hasMethod bool
		tools     toolsRead
		inputs    []string
	)
	for {
		t := w.next()
		if t.Kind == jsonlex.ObjectEnd {
			break
		}
		if t.Kind != jsonlex.Key {
			w.lexStop()
			return
		}
		key := string(w.text(t))
		w.key(&ks, key, t, true)
		vt := w.next()
		switch {
		case key == "id" && (vt.Kind == jsonlex.String || vt.Kind == jsonlex.Number):
			id = append(ID(nil), w.raw(vt)...)
			w.value(vt, nil, false)
		case key == "method" && vt.Kind == jsonlex.String:
			method, hasMethod = string(w.text(vt)), true
			w.value(vt, nil, false)
		case key == "result" && vt.Kind == jsonlex.ObjectStart:
			tools, inputs = a.result()
		default:
			w.value(vt, nil, false)
		}
		if w.stopped {
			return
		}
	}
	if hasMethod && id != nil {
		a.request(ServerRequest{Method: method, ID: id})
	}
	for _, m := range inputs {
		a.request(ServerRequest{Method: m, InResult: true})
	}
	if !tools.present || !a.listed(id) {
		return
	}
	var kept [][]byte
	for _, e := range tools.elems {
		e.tool.Hidden = !e.named || a.f.Allow != nil && !a.f.Allow(e.tool.Name)
		if e.tool.Hidden {
			a.rep.Hidden++
		} else {
			kept = append(kept, w.b[e.start:e.end])
		}
		if e.named {
			if len(a.rep.Tools) < MaxTools {
				a.rep.Tools = append(a.rep.Tools, e.tool)
			} else {
				a.rep.Left++
			}
		}
	}
	if len(kept) == len(tools.elems) {
		return
	}
	repl := []byte{'['}
	for i, k := range kept {
		if i > 0 {
			repl = append(repl, ',')
		}
		repl = append(repl, k...)
	}
	a.edits = append(a.edits, edit{tools.start, tools.end, append(repl, ']')})
}

func (a *answer) request(r ServerRequest) {
	if len(a.rep.Requests) < MaxRequests {
		a.rep.Requests = append(a.rep.Requests, r)
	} else {
		a.rep.Left++
	}
}

// result reads the result object whose '{' was just read: its tools array, and the methods of
// its inputRequests.
func (a *answer) result() (tools toolsRead, inputs []string) {
	w := &a.w
	var ks keys
	for {
		t := w.next()
		if t.Kind == jsonlex.ObjectEnd {
			return tools, inputs
		}
		if t.Kind != jsonlex.Key {
			w.lexStop()
			return tools, inputs
		}
		key := string(w.text(t))
		w.key(&ks, key, t, true)
		vt := w.next()
		switch {
		case key == "tools" && vt.Kind == jsonlex.ArrayStart:
			tools = a.tools(vt)
		case key == "inputRequests" && vt.Kind == jsonlex.ObjectStart:
			inputs = a.inputRequests()
		default:
			w.value(vt, nil, false)
		}
		if w.stopped {
			return tools, inputs
		}
	}
}

// tools reads the tools array whose '[' is open.
func (a *answer) tools(open jsonlex.Token) toolsRead {
	w := &a.w
	tr := toolsRead{present: true, start: open.Start}
	for {
		t := w.next()
		if t.Kind == jsonlex.ArrayEnd {
			tr.end = t.End
			return tr
		}
		e := toolElem{start: t.Offset()}
		if t.Kind == jsonlex.ObjectStart {
			e.tool, e.named = a.tool()
		} else {
			w.value(t, nil, false)
		}
		if w.stopped {
			return tr
		}
		e.end = w.end
		tr.elems = append(tr.elems, e)
	}
}

// pinned are the members of a tool definition its pin covers.
var pinned = []string{"name", "title", "description", "inputSchema", "outputSchema", "annotations"}

// tool reads the tool definition whose '{' was just read.
func (a *answer) tool() (Tool, bool) {
	w := &a.w
	var (
		ks    keys
		tool  Tool
		named bool
		parts = map[string][]byte{}
	)
	for {
		t := w.next()
		if t.Kind == jsonlex.ObjectEnd {
			break
		}
		if t.Kind != jsonlex.Key {
			w.lexStop()
			return tool, false
		}
		key := string(w.text(t))
		w.key(&ks, key, t, true)
		vt := w.next()
		if slices.Contains(pinned, key) {
			if key == "name" && vt.Kind == jsonlex.String {
				tool.Name, named = string(w.text(vt)), true
			}
			parts[key] = w.value(vt, nil, true)
		} else {
			w.value(vt, nil, false)
		}
		if w.stopped {
			return tool, false
		}
	}
	w.inexact = false
	tool.Pin = pin(parts)
	return tool, named
}

// pin hashes a tool definition's pinned members, each a length-prefixed canonical JSON value;
// an absent member is empty, which no canonical JSON is.
func pin(parts map[string][]byte) string {
	h := sha256.New()
	for _, k := range pinned {
		fingerprint.Field(h, k, string(parts[k]))
	}
	return PinPrefix + hex.EncodeToString(h.Sum(nil))
}

// PinTool reads one tool definition (a JSON object, as in a tools/list result) and returns its
// name and pin. An ambiguous definition is an error.
func PinTool(def []byte) (Tool, error) {
	var a answer
	a.w.reset(def)
	t := a.w.next()
	if t.Kind != jsonlex.ObjectStart {
		return Tool{}, errors.New("a tool definition is a JSON object")
	}
	tool, named := a.tool()
	if !a.w.stopped {
		if t := a.w.next(); t.Kind != jsonlex.End {
			a.w.lexStop()
		}
	}
	switch {
	case a.w.stopped:
		return Tool{}, errors.New(a.w.stopText)
	case len(a.w.findings) > 0:
		return Tool{}, fmt.Errorf("%w: %s", ErrAmbiguous, a.w.findings[0].Text)
	case !named:
		return Tool{}, errors.New("a tool definition without a string name")
	}
	return tool, nil
}

// inputRequests reads a result's inputRequests object, whose '{' was just read, and returns the
// method of each request in it.
func (a *answer) inputRequests() []string {
	w := &a.w
	var (
		ks      keys
		methods []string
	)
	for {
		t := w.next()
		if t.Kind == jsonlex.ObjectEnd {
			return methods
		}
		if t.Kind != jsonlex.Key {
			w.lexStop()
			return methods
		}
		w.key(&ks, string(w.text(t)), t, false)
		vt := w.next()
		if vt.Kind != jsonlex.ObjectStart {
			w.value(vt, nil, false)
			methods = append(methods, "")
			continue
		}
		var (
			iks    keys
			method string
		)
		for {
			t := w.next()
			if t.Kind == jsonlex.ObjectEnd {
				break
			}
			if t.Kind != jsonlex.Key {
				w.lexStop()
				return methods
			}
			key := string(w.text(t))
			w.key(&iks, key, t, true)
			vt := w.next()
			if key == "method" && vt.Kind == jsonlex.String {
				method = string(w.text(vt))
			}
			w.value(vt, nil, false)
			if w.stopped {
				return methods
			}
		}
		methods = append(methods, method)
	}
}

// scan marks the prompt-injection phrases in one string of an answer.
func (a *answer) scan(s []byte) {
	for _, p := range injected(s) {
		if len(a.rep.Marks) >= MaxMarks {
			a.rep.Left++
			return
		}
		a.rep.Marks = append(a.rep.Marks, Mark{Phrase: p, Where: a.w.where()})
	}
}
