package mcp

import (
	"fmt"
	"strings"
	"unicode"

	"github.com/lockhttp/lockhttp/internal/floor"
	"github.com/lockhttp/lockhttp/internal/jsonlex"
)

// Methods the protocol defines, in every revision up to 2026-07-28. A method that differs from
// one of them only by case is a finding: a server that matches methods without case would run
// it as that method.
var knownMethods = []string{
	"initialize", "ping", "server/discover", "subscriptions/listen",
	"tools/list", "tools/call",
	"prompts/list", "prompts/get",
	"resources/list", "resources/read", "resources/templates/list", "resources/subscribe", "resources/unsubscribe",
	"completion/complete", "logging/setLevel",
	"roots/list", "sampling/createMessage", "elicitation/create",
	"tasks/get", "tasks/list", "tasks/cancel", "tasks/result",
	"notifications/initialized", "notifications/cancelled", "notifications/progress", "notifications/message",
	"notifications/roots/list_changed", "notifications/tools/list_changed", "notifications/prompts/list_changed",
	"notifications/resources/list_changed", "notifications/resources/updated", "notifications/elicitation/complete",
	"notifications/subscriptions/acknowledged", "notifications/tasks/status",
}

// Known reports whether method is one the protocol defines, in any revision up to 2026-07-28,
// as written (not in another case).
func Known(method string) bool {
	k, ok := knownFolds[foldKey(method)]
	return ok && k == method
}

var knownFolds = func() map[string]string {
	m := make(map[string]string, len(knownMethods))
	for _, k := range knownMethods {
		m[foldKey(k)] = k
	}
	return m
}()

// targetKey is the member of params that names what a method acts on (what Mcp-Name mirrors),
// or "" for a method that has none.
func targetKey(method string) string {
	switch method {
	case "tools/call", "prompts/get":
		return "name"
	case "resources/read":
		return "uri"
	}
	return ""
}

// Parse reads a Streamable HTTP request body: one JSON-RPC message, or a batch (an array of
// them, as the 2025-03-26 revision allows). Each message's jsonrpc, id, method and params are
// read, and for tools/call, prompts/get and resources/read what it acts on (Target) and the
// canonical JSON of its arguments; the body is read strictly, and everything that two servers
// could read two ways is a finding (Body.Findings):
//
//   - a body over MaxBody bytes, nested deeper than MaxDepth, a batch of more than MaxBatch
//     messages or none; text the strict lexer refuses (invalid JSON or UTF-8, a lone surrogate
//     escape, a number past a float64, data after the value);
//   - in any object, a key twice, or two keys that differ only by case under Unicode case
//     folding ("Name" beside "name", "paramſ" beside "params"), or a key that holds a control or
//     invisible character ("name\u0000"); a key of a message or its params written with escapes
//     ("n\u0061me");
//   - a message without jsonrpc "2.0"; an id that is not a string or a number, or longer than
//     MaxID; a method that is not a string, is empty, holds white space or a control or invisible
//     character, is longer than MaxName, or differs only by case from a method of the protocol;
//     params that are not an object; a response (result or error) that carries a method, or
//     lacks an id; a message that is neither a request nor a response;
//   - for tools/call and prompts/get, a name that is missing, not a string, empty, longer than
//     MaxName, with white space at either end or a control or invisible character, and
//     arguments that are not an object; for resources/read, a uri likewise;
//   - a number in params with more digits than a float64 holds.
//
// Parse never fails: what it cannot read is a finding, and a body with findings asks, shown in
// red, and is never free.
func Parse(body []byte) *Body {
	out := &Body{}
	if len(body) > MaxBody {
		out.Findings = []Finding{{Message: -1, Text: fmt.Sprintf("the body is %d bytes, over the %d bytes the gate reads as MCP", len(body), MaxBody)}}
		return out
	}
	var w walker
	w.reset(body)
	switch t := w.next(); t.Kind {
	case jsonlex.ObjectStart:
		out.Messages = append(out.Messages, w.message(0))
	case jsonlex.ArrayStart:
		out.Batch = true
		for i := 0; ; i++ {
			t := w.next()
			if t.Kind == jsonlex.ArrayEnd {
				if i == 0 {
					w.findAt(-1, "an empty batch: JSON-RPC answers it with an error, and no server runs anything")
				}
				break
			}
			if i >= MaxBatch {
				w.stop("a batch of more than %d messages; it is not read further", MaxBatch)
				break
			}
			if t.Kind == jsonlex.ObjectStart {
				out.Messages = append(out.Messages, w.message(i))
			} else {
				w.msg = i
				w.find("[%d]: %s where a JSON-RPC message (an object) is expected", i, kindText(t))
				w.value(t, nil, false)
				out.Messages = append(out.Messages, Message{Kind: Invalid})
			}
			if w.stopped {
				break
			}
		}
	case jsonlex.Invalid:
		if len(body) == 0 || len(strings.TrimSpace(string(body))) == 0 {
			w.stop("the body is empty; an MCP request is a JSON-RPC message")
		} else {
			w.lexStop()
		}
	default:
		w.value(t, nil, false)
		w.findAt(-1, "the body is %s, not a JSON-RPC message or batch", kindText(t))
	}
	if !w.stopped {
		if t := w.next(); t.Kind != jsonlex.End {
			w.lexStop()
		}
	}
	if w.dropped > 0 {
		// The last place is kept for the count, so a reader knows the list is cut.
		w.findings[len(w.findings)-1] = Finding{Message: -1, Text: fmt.Sprintf("and %d more findings", w.dropped+1)}
	}
	out.Findings = w.findings
	for _, f := range out.Findings {
		for i := range out.Messages {
			if f.Message == -1 || f.Message == i {
				out.Messages[i].Ambiguous = true
			}
		}
	}
	return out
}

// params is what a message's params hold, read before the method may be known (JSON does not
// order members).
type params struct {
	members []member // every member but _meta, its value's canonical JSON in buf
	buf     []byte
	kinds   map[string]jsonlex.Token // the first token of each member's value, for its kind
	strs    map[string]string        // the unescaped value of each string member
}

// message reads the message whose '{' was just read, the idx-th of the body.
func (w *walker) message(idx int) Message {
	w.msg = idx
	var (
		m         Message
		ks        keys
		version   string
		hasVer    bool
		hasID     bool
		hasMethod bool
		methodOK  bool
		hasResult bool
		hasError  bool
		hasParams bool
		p         params
	)
	for {
		t := w.next()
		if t.Kind == jsonlex.ObjectEnd {
			break
		}
		if t.Kind != jsonlex.Key {
			w.lexStop()
			return m
		}
		key := string(w.text(t))
		w.key(&ks, key, t, true)
		vt := w.next()
		switch key {
		case "jsonrpc":
			hasVer = true
			if vt.Kind == jsonlex.String {
				version = string(w.text(vt))
			} else {
				version = "(" + kindText(vt) + ")"
			}
			w.value(vt, nil, false)
		case "id":
			hasID = true
			switch vt.Kind {
			case jsonlex.String, jsonlex.Number:
				m.ID = append(ID(nil), w.raw(vt)...)
				if len(m.ID) > MaxID {
					w.find("the id is %d bytes, over %d", len(m.ID), MaxID)
				}
			default:
				m.ID = nil
				w.find("the id is %s; JSON-RPC ids in MCP are strings or numbers", kindText(vt))
			}
			w.value(vt, nil, false)
		case "method":
			hasMethod = true
			methodOK = vt.Kind == jsonlex.String
			if methodOK {
				m.Method = string(w.text(vt))
			} else {
				m.Method = ""
				w.find("the method is %s, not a string", kindText(vt))
			}
			w.value(vt, nil, false)
		case "params":
			hasParams = true
			if vt.Kind == jsonlex.ObjectStart {
				p = w.params()
			} else {
				w.find("params is %s; MCP params are an object", kindText(vt))
				w.value(vt, nil, false)
			}
		case "result":
			hasResult = true
			w.value(vt, nil, false)
		case "error":
			hasError = true
			w.value(vt, nil, false)
		default:
			w.value(vt, nil, false)
		}
		if w.stopped {
			return m
		}
	}
	switch {
	case !hasVer:
		w.find("no jsonrpc member; a JSON-RPC 2.0 message has \"jsonrpc\": \"2.0\"")
	case version != "2.0":
		w.find("jsonrpc is %s, not \"2.0\"", floor.Shown(version, 40))
	}
	if methodOK {
		w.checkMethod(m.Method)
	}
	validID := hasID && m.ID != nil
	switch {
	case hasMethod && (hasResult || hasError):
		w.find("a response (result or error) that carries a method: servers differ on whether it is a request")
	case hasResult && hasError:
		w.find("both a result and an error: neither a request nor one response")
	case hasMethod:
		if methodOK && (!hasID || validID) {
			m.Kind = Notification
			if hasID {
				m.Kind = Request
			}
		}
	case hasResult || hasError:
		if !hasID {
			w.find("a response without an id")
		} else if validID {
			m.Kind = Response
		}
	default:
		w.find("neither a method nor a result or an error: not a JSON-RPC message")
	}
	if hasParams {
		w.assemble(&m, &p)
	} else if k := targetKey(m.Method); k != "" && m.Kind != Invalid {
		w.find("%s without params: no %s", m.Method, k)
	}
	if w.inexact {
		w.find("%s", w.inexactText)
		w.inexact = false
	}
	return m
}

// checkMethod finds what makes a method ambiguous.
func (w *walker) checkMethod(method string) {
	switch {
	case method == "":
		w.find("an empty method")
	case len(method) > MaxName:
		w.find("the method is %d bytes, over %d", len(method), MaxName)
	case hasOdd(method) || strings.IndexFunc(method, unicode.IsSpace) >= 0:
		w.find("the method %s holds white space or a control or invisible character; servers differ in what method they read", floor.Shown(method, 60))
	default:
		if k, ok := knownFolds[foldKey(method)]; ok && k != method {
			w.find("the method %s differs from %s only by case; a server that matches methods without case runs it as %s", floor.Shown(method, 60), k, k)
		}
	}
}

// params reads the params object whose '{' was just read: every member's canonical JSON but
// _meta's, which is read and checked only.
func (w *walker) params() params {
	var (
		p  params
		ks keys
	)
	p.kinds = map[string]jsonlex.Token{}
	p.strs = map[string]string{}
	for {
		t := w.next()
		if t.Kind == jsonlex.ObjectEnd {
			break
		}
		if t.Kind != jsonlex.Key {
			w.lexStop()
			return p
		}
		key := string(w.text(t))
		w.key(&ks, key, t, true)
		vt := w.next()
		if key == "_meta" {
			w.value(vt, nil, false)
		} else {
			if vt.Kind == jsonlex.String {
				p.strs[key] = string(w.text(vt))
			}
			p.kinds[key] = vt
			start := len(p.buf)
			p.buf = w.value(vt, p.buf, true)
			p.members = append(p.members, member{key, start, len(p.buf)})
		}
		if w.stopped {
			return p
		}
	}
	return p
}

// assemble sets the message's Target, Arguments and Rest from its params, now that its method is
// known, and finds what makes them ambiguous.
func (w *walker) assemble(m *Message, p *params) {
	tk := targetKey(m.Method)
	rest := make([]member, 0, len(p.members))
	for _, mb := range p.members {
		switch mb.key {
		case "arguments":
			m.Arguments = p.buf[mb.start:mb.end:mb.end]
			continue
		case tk:
			continue
		}
		rest = append(rest, mb)
	}
	m.Rest = appendObject(nil, rest, p.buf)
	if tk == "" {
		return
	}
	t, ok := p.kinds[tk]
	switch {
	case !ok:
		w.find("%s without params.%s", m.Method, tk)
		return
	case t.Kind != jsonlex.String:
		w.find("params.%s of %s is %s, not a string", tk, m.Method, kindText(t))
		return
	}
	v := p.strs[tk]
	m.Target, m.HasTarget = v, true
	limit := MaxName
	if tk == "uri" {
		limit = MaxURI
	}
	switch {
	case v == "":
		w.find("params.%s of %s is empty", tk, m.Method)
	case len(v) > limit:
		w.find("params.%s of %s is %d bytes, over %d", tk, m.Method, len(v), limit)
	case hasOdd(v):
		w.find("params.%s %s holds a control or invisible character; servers differ in what %s they read", tk, floor.Shown(v, 60), tk)
	case trimmedDiffers(v):
		w.find("params.%s %s begins or ends with white space; servers that trim it read another %s", tk, floor.Shown(v, 60), tk)
	}
	if at, ok := p.kinds["arguments"]; ok && tk == "name" && at.Kind != jsonlex.ObjectStart {
		w.find("params.arguments of %s is %s; MCP arguments are an object", m.Method, kindText(at))
	}
}
