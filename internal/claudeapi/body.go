package claudeapi

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/lockhttp/lockhttp/internal/floor"
	"github.com/lockhttp/lockhttp/internal/jsonlex"
)

// MaxDepth is the deepest nesting of objects and arrays JudgeBody reads; a body nested deeper
// asks.
const MaxDepth = 512

// maxFindings bounds how many findings one body reports; the walk goes on to the end regardless.
const maxFindings = 16

// JudgeBody walks the JSON of a Messages API request body (already decoded from any
// Content-Encoding) and reports whether it is free: one unambiguous JSON object with no
// mcp_servers, no container, no tool that runs on Anthropic's side other than web search, no
// tool that Anthropic's code may call, and no document or image that Anthropic fetches from a
// URL. findings holds every reason it is not free (at most 16), in the order found; it is empty
// when free is true.
func JudgeBody(body []byte) (free bool, findings []string) {
	w := walker{b: body}
	w.lx.Reset(body, jsonlex.Strict, MaxDepth)
	w.walk()
	return len(w.findings) == 0, w.findings
}

// context is what the walker knows about the value it is reading.
type context uint8

const (
	ctxAny     context = iota
	ctxTop             // the top-level object
	ctxTools           // the value of the top-level "tools"
	ctxTool            // one element of the top-level "tools"
	ctxCallers         // the value of "allowed_callers" in a tool
)

type kind uint8

const (
	kindNone kind = iota
	kindObject
	kindArray
	kindString
	kindNumber
	kindBool
	kindNull
)

func (k kind) String() string {
	switch k {
	case kindObject:
		return "an object"
	case kindArray:
		return "an array"
	case kindString:
		return "a string"
	case kindNumber:
		return "a number"
	case kindBool:
		return "a boolean"
	case kindNull:
		return "null"
	}
	return "missing"
}

// value is what the walker keeps of one JSON value: its kind, where a string's text is, and for
// an object the few facts its parent judges.
type value struct {
	kind       kind
	text       span // a string's text, between the quotes
	obj        objFacts
	onlyDirect bool // an array that holds nothing but the string "direct"
}

// objFacts are the facts about one object that its parent needs.
type objFacts struct {
	typ      kind // the kind of the value of "type"; kindNone when absent
	typStr   span // the value of "type", when it is a string
	urlTyped bool // a key that folds to "type" has a string value that folds to "url"
}

// span is where the text of a string is in the body.
type span struct {
	start, end int
	escaped    bool
}

// walker judges the tokens of a body as the strict lexer reads them. The lexer's frames are the
// path from the top-level object to the value being read.
type walker struct {
	b        []byte
	lx       jsonlex.Lexer
	findings []string
	stopped  bool // the body cannot be read on: a syntax error, bad text or too deep
	// The keys of the objects being read, outermost first, to find duplicates: nkeys of them,
	// the first in keys and the rest in more.
	nkeys int
	keys  [16]keyRef
	more  []keyRef
}

// key is the i-th key of the objects being read.
func (w *walker) key(i int) keyRef {
	if i < len(w.keys) {
		return w.keys[i]
	}
	return w.more[i-len(w.keys)]
}

func (w *walker) pushKey(k keyRef) {
	if w.nkeys < len(w.keys) {
		w.keys[w.nkeys] = k
	} else {
		w.more = append(w.more[:w.nkeys-len(w.keys)], k)
	}
	w.nkeys++
}

func (w *walker) walk() {
	t := w.lx.Next()
	if t.Kind == jsonlex.Invalid && t.Start >= len(w.b) {
		w.stop("the body is empty; a Messages API request is one JSON object")
		return
	}
	if t.Kind != jsonlex.ObjectStart {
		w.stop("the body is not one JSON object (it starts with %s)", w.shownByte(t.Offset()))
		return
	}
	w.object(ctxTop)
	if w.stopped {
		return
	}
	if t := w.lx.Next(); t.Kind != jsonlex.End {
		w.lexStop()
	}
}

// finding records one reason the body is not free.
func (w *walker) finding(format string, args ...any) {
	if len(w.findings) >= maxFindings {
		return
	}
	w.findings = append(w.findings, fmt.Sprintf(format, args...))
}

// stop records a reason the body cannot be read on and ends the walk.
func (w *walker) stop(format string, args ...any) {
	if w.stopped {
		return
	}
	w.stopped = true
	w.finding(format, args...)
}

// lexStop stops the walk with the reason the lexer stopped.
func (w *walker) lexStop() {
	e, ok := w.lx.Err().(*jsonlex.Error)
	if !ok {
		w.stop("invalid JSON")
		return
	}
	at := e.Offset
	switch e.Code {
	case jsonlex.ErrSyntax, jsonlex.ErrEnd:
		switch e.Want {
		case jsonlex.WantKey:
			w.stop("invalid JSON: expected a key at byte %d, found %s", at, w.shownByte(at))
		case jsonlex.WantColon:
			w.stop("invalid JSON: expected ':' at byte %d, found %s", at, w.shownByte(at))
		case jsonlex.WantObjectNext:
			if e.Code == jsonlex.ErrEnd {
				w.stop("invalid JSON: the body ends inside an object")
			} else {
				w.stop("invalid JSON: expected ',' or '}' at byte %d, found %s", at, w.shownByte(at))
			}
		case jsonlex.WantArrayNext:
			if e.Code == jsonlex.ErrEnd {
				w.stop("invalid JSON: the body ends inside an array")
			} else {
				w.stop("invalid JSON: expected ',' or ']' at byte %d, found %s", at, w.shownByte(at))
			}
		case jsonlex.WantEnd:
			w.stop("ambiguous JSON: data after the object at byte %d; parsers disagree about what such a body means", at)
		case jsonlex.WantQuote:
			w.stop("invalid JSON: the body ends inside a string")
		case jsonlex.WantEscape:
			w.stop("invalid JSON: the body ends inside an escape")
		default:
			if e.Code == jsonlex.ErrEnd {
				w.stop("invalid JSON: the body ends where a value should be")
			} else {
				w.stop("invalid JSON: unexpected %s at byte %d", w.shownByte(at), at)
			}
		}
	case jsonlex.ErrControl:
		w.stop("invalid JSON: a control character in a string at byte %d", at)
	case jsonlex.ErrUTF8:
		w.stop("the body is not valid UTF-8 (byte %d); parsers disagree about what such text means", at)
	case jsonlex.ErrEscape:
		if at+1 < len(w.b) && w.b[at+1] == 'u' {
			w.stop("invalid JSON: bad \\u escape at byte %d", at)
		} else {
			w.stop("invalid JSON: bad escape at byte %d", at)
		}
	case jsonlex.ErrLowSurrogate:
		w.stop("a lone low surrogate escape at byte %d; parsers disagree about what it means", at)
	case jsonlex.ErrHighSurrogate:
		w.stop("a lone high surrogate escape at byte %d; parsers disagree about what it means", at)
	case jsonlex.ErrNumber:
		w.stop("invalid JSON: bad number at byte %d", at)
	case jsonlex.ErrRange:
		w.stop("the number at byte %d is out of range; parsers disagree about what it means", at)
	case jsonlex.ErrDepth:
		w.stop("the body nests deeper than %d levels; it is not read further", MaxDepth)
	default:
		w.stop("invalid JSON: %v", e)
	}
}

func (w *walker) shownByte(at int) string {
	if at >= len(w.b) {
		return "the end of the body"
	}
	if c := w.b[at]; c >= 0x20 && c < 0x7f {
		return strconv.QuoteRune(rune(c))
	}
	return fmt.Sprintf("byte 0x%02X", w.b[at])
}

// where renders the path to the value being read, such as messages[0].content[2].
func (w *walker) where() string { return w.whereIn(w.lx.Depth()) }

// whereIn renders the path through the n outermost open frames: with n one less than the
// depth, the path to the object whose key was just read.
func (w *walker) whereIn(n int) string {
	if n == 0 {
		return "the top level"
	}
	var b strings.Builder
	for i := range n {
		f := w.lx.Frame(i)
		if !f.Object() {
			fmt.Fprintf(&b, "[%d]", f.Index)
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		k := string(w.bytes(span{f.Key.Start, f.Key.End, f.Key.Escaped}))
		if len(k) <= 40 && isPlainKey(k) && floor.HideTokens(k) == k {
			b.WriteString(k)
		} else {
			b.WriteString(floor.Shown(k, 40))
		}
		if b.Len() > 200 {
			b.WriteString("…")
			break
		}
	}
	return b.String()
}

func isPlainKey(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// value reads the value that begins with t.
func (w *walker) value(t jsonlex.Token, ctx context) value {
	switch t.Kind {
	case jsonlex.ObjectStart:
		return w.object(ctx)
	case jsonlex.ArrayStart:
		return w.array(ctx)
	case jsonlex.String:
		return value{kind: kindString, text: span{t.Start, t.End, t.Escaped}}
	case jsonlex.Number:
		return value{kind: kindNumber}
	case jsonlex.True, jsonlex.False:
		return value{kind: kindBool}
	case jsonlex.Null:
		return value{kind: kindNull}
	}
	w.lexStop()
	return value{}
}

// keyRef is one key of an object, unescaped, kept to find duplicates.
type keyRef []byte

// maxKeyScan is how many keys of one object are compared one by one; past it they go in a set.
const maxKeyScan = 16

// object reads an object; ctx says which object of the request it is.
func (w *walker) object(ctx context) value {
	var (
		facts    objFacts
		base     = w.nkeys // this object's keys are from base on
		keySet   map[string]struct{}
		source   value // the value of "source"
		hasSrc   bool
		urlSrc   bool // a key that folds to "source" holds an object whose type folds to "url"
		srcBadly bool // a key that differs from "source" only by case
	)
	for {
		t := w.lx.Next()
		if t.Kind == jsonlex.ObjectEnd {
			break
		}
		if t.Kind != jsonlex.Key {
			w.lexStop()
			return value{}
		}
		key := w.bytes(span{t.Start, t.End, t.Escaped})
		// Duplicates: encoding/json keeps the last, other parsers the first.
		if keySet == nil && w.nkeys-base < maxKeyScan {
			for i := base; i < w.nkeys; i++ {
				if bytes.Equal(w.key(i), key) {
					w.duplicate(key)
					break
				}
			}
			w.pushKey(key)
		} else {
			if keySet == nil {
				keySet = make(map[string]struct{}, 2*maxKeyScan)
				for i := base; i < w.nkeys; i++ {
					keySet[string(w.key(i))] = struct{}{}
				}
			}
			if _, dup := keySet[string(key)]; dup {
				w.duplicate(key)
			} else {
				keySet[string(key)] = struct{}{}
			}
		}
		child := ctxAny
		switch {
		case ctx == ctxTop && string(key) == "tools":
			child = ctxTools
		case ctx == ctxTool && string(key) == "allowed_callers":
			child = ctxCallers
		}
		v := w.value(w.lx.Next(), child)
		if w.stopped {
			return value{}
		}
		isType := string(key) == "type"
		foldsType := isType || bytes.EqualFold(key, []byte("type"))
		if isType {
			facts.typ = v.kind
			facts.typStr = v.text
		}
		if foldsType && v.kind == kindString && bytes.EqualFold(w.bytes(v.text), []byte("url")) {
			facts.urlTyped = true
		}
		if bytes.EqualFold(key, []byte("source")) {
			if string(key) == "source" {
				source, hasSrc = v, true
			} else {
				srcBadly = true
			}
			if v.kind == kindObject && v.obj.urlTyped {
				urlSrc = true
			}
		}
		switch ctx {
		case ctxTop:
			w.topKey(key, v)
		case ctxTool:
			switch {
			case string(key) == "allowed_callers":
				if v.kind != kindArray || !v.onlyDirect {
					w.finding("%s: a tool that Anthropic's code may call (only [\"direct\"] is free): Anthropic would run code that calls it", w.where())
				}
			case foldsType && !isType:
				w.finding("ambiguous JSON: %s differs from \"type\" only by case; parsers disagree about which is read", w.where())
			case bytes.EqualFold(key, []byte("allowed_callers")):
				w.finding("ambiguous JSON: %s differs from \"allowed_callers\" only by case; parsers disagree about which is read", w.where())
			}
		}
	}
	w.nkeys = base
	if urlSrc {
		w.finding("%s: a source of type \"url\": Anthropic would fetch that address on the caller's behalf", w.where())
	}
	if facts.typ == kindString && (bytes.EqualFold(w.bytes(facts.typStr), []byte("image")) || bytes.EqualFold(w.bytes(facts.typStr), []byte("document"))) {
		switch {
		case srcBadly:
			w.finding("ambiguous JSON: %s: a %s block with a key that differs from \"source\" only by case", w.where(), strings.ToLower(string(w.bytes(facts.typStr))))
		case !hasSrc:
		case source.kind != kindObject:
			w.finding("%s.source: %s where an object is expected", w.where(), source.kind)
		case source.obj.typ != kindString:
			w.finding("%s.source.type: %s where a string is expected", w.where(), source.obj.typ)
		}
	}
	if ctx == ctxTool {
		w.tool(facts)
	}
	return value{kind: kindObject, obj: facts}
}

func (w *walker) duplicate(key []byte) {
	w.finding("ambiguous JSON: the key %s appears twice in %s; parsers disagree about which is read", floor.Shown(string(key), 40), w.whereIn(w.lx.Depth()-1))
}

// topKey judges one key of the top-level object.
func (w *walker) topKey(k []byte, v value) {
	switch string(k) {
	case "mcp_servers":
		w.finding("mcp_servers: Anthropic would connect to the MCP servers listed, on the caller's behalf and out of the gate's sight")
		return
	case "container":
		w.finding("container: Anthropic would run code in a container on the caller's behalf")
		return
	case "tools":
		if v.kind != kindArray {
			w.finding("tools: %s where an array is expected", v.kind)
		}
		return
	}
	for _, name := range []string{"mcp_servers", "tools", "container"} {
		if bytes.EqualFold(k, []byte(name)) {
			w.finding("ambiguous JSON: the top-level key %s differs from %q only by case; parsers disagree about which is read", floor.Shown(string(k), 40), name)
			return
		}
	}
}

// clientToolPrefixes are the type prefixes of Anthropic-defined tools that the client runs.
var clientToolPrefixes = []string{"bash_", "text_editor_", "computer_", "memory_", "computer_toolset_", "browser_toolset_"}

// tool judges one element of "tools" by its type, never by its name.
func (w *walker) tool(f objFacts) {
	switch f.typ {
	case kindNone, kindNull:
		return // a custom tool
	case kindString:
	default:
		w.finding("%s.type: %s where a string is expected", w.where(), f.typ)
		return
	}
	t := w.bytes(f.typStr)
	if string(t) == "custom" || hasPrefix(t, "web_search_") {
		return
	}
	for _, p := range clientToolPrefixes {
		if hasPrefix(t, p) {
			return
		}
	}
	w.finding("%s: a server tool of type %s: Anthropic would run it on the caller's behalf (only web_search_* is free)", w.where(), floor.Shown(string(t), 64))
}

// hasPrefix is strings.HasPrefix for bytes, without a copy.
func hasPrefix(b []byte, p string) bool { return len(b) >= len(p) && string(b[:len(p)]) == p }

// array reads an array; ctx says which array of the request it is.
func (w *walker) array(ctx context) value {
	v := value{kind: kindArray, onlyDirect: true}
	child := ctxAny
	if ctx == ctxTools {
		child = ctxTool
	}
	for {
		t := w.lx.Next()
		if t.Kind == jsonlex.ArrayEnd {
			return v
		}
		e := w.value(t, child)
		if w.stopped {
			return value{}
		}
		switch ctx {
		case ctxTools:
			if e.kind != kindObject {
				w.finding("%s: %s where a tool object is expected", w.where(), e.kind)
			}
		case ctxCallers:
			if e.kind != kindString || string(w.bytes(e.text)) != "direct" {
				v.onlyDirect = false
			}
		}
	}
}

// bytes is the text of a string, unescaped; it is a slice of the body unless it holds escapes.
func (w *walker) bytes(s span) []byte {
	if s.escaped {
		return jsonlex.AppendUnescaped(nil, w.b[s.start:s.end])
	}
	return w.b[s.start:s.end]
}
