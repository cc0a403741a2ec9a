package claudeapi

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
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

// pathElem is one step from the top-level object to the value being read.
type pathElem struct {
	key []byte // a key, unescaped; nil for an array index
	idx int
}

type walker struct {
	b        []byte
	i        int
	depth    int
	path     []pathElem
	findings []string
	stopped  bool // the body cannot be read on: a syntax error, bad text or too deep
}

func (w *walker) walk() {
	w.space()
	if w.i >= len(w.b) {
		w.stop("the body is empty; a Messages API request is one JSON object")
		return
	}
	if w.b[w.i] != '{' {
		w.stop("the body is not one JSON object (it starts with %s)", w.shownByte())
		return
	}
	w.value(ctxTop)
	if w.stopped {
		return
	}
	w.space()
	if w.i < len(w.b) {
		w.stop("ambiguous JSON: data after the object at byte %d; parsers disagree about what such a body means", w.i)
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

func (w *walker) shownByte() string {
	if w.i >= len(w.b) {
		return "the end of the body"
	}
	if c := w.b[w.i]; c >= 0x20 && c < 0x7f {
		return strconv.QuoteRune(rune(c))
	}
	return fmt.Sprintf("byte 0x%02X", w.b[w.i])
}

// where renders the path to the value being read, such as messages[0].content[2].
func (w *walker) where() string {
	if len(w.path) == 0 {
		return "the top level"
	}
	var b strings.Builder
	for i, p := range w.path {
		if p.key == nil {
			fmt.Fprintf(&b, "[%d]", p.idx)
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		k := string(p.key)
		if len(k) > 40 {
			k = k[:40] + "…"
		}
		if isPlainKey(k) {
			b.WriteString(k)
		} else {
			b.WriteString(strconv.Quote(k))
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

func (w *walker) space() {
	for w.i < len(w.b) {
		switch w.b[w.i] {
		case ' ', '\t', '\n', '\r':
			w.i++
		default:
			return
		}
	}
}

// value reads one JSON value at w.i.
func (w *walker) value(ctx context) value {
	w.space()
	if w.i >= len(w.b) {
		w.stop("invalid JSON: the body ends where a value should be")
		return value{}
	}
	switch c := w.b[w.i]; {
	case c == '{':
		return w.object(ctx)
	case c == '[':
		return w.array(ctx)
	case c == '"':
		s, e, esc := w.str()
		return value{kind: kindString, text: span{s, e, esc}}
	case c == '-' || '0' <= c && c <= '9':
		w.number()
		return value{kind: kindNumber}
	case c == 't':
		w.literal("true")
		return value{kind: kindBool}
	case c == 'f':
		w.literal("false")
		return value{kind: kindBool}
	case c == 'n':
		w.literal("null")
		return value{kind: kindNull}
	}
	w.stop("invalid JSON: unexpected %s at byte %d", w.shownByte(), w.i)
	return value{}
}

func (w *walker) literal(lit string) {
	if !bytes.HasPrefix(w.b[w.i:], []byte(lit)) {
		w.stop("invalid JSON: unexpected %s at byte %d", w.shownByte(), w.i)
		return
	}
	w.i += len(lit)
}

func (w *walker) enter() bool {
	w.depth++
	if w.depth > MaxDepth {
		w.stop("the body nests deeper than %d levels; it is not read further", MaxDepth)
		return false
	}
	return true
}

// keyRef is one key of an object, unescaped, kept to find duplicates.
type keyRef []byte

// object reads an object; ctx says which object of the request it is.
func (w *walker) object(ctx context) value {
	if !w.enter() {
		return value{}
	}
	defer func() { w.depth-- }()
	w.i++ // '{'
	var (
		facts    objFacts
		small    [16]keyRef
		keys     = small[:0]
		keySet   map[string]struct{}
		source   value // the value of "source"
		hasSrc   bool
		urlSrc   bool // a key that folds to "source" holds an object whose type folds to "url"
		srcBadly bool // a key that differs from "source" only by case
	)
	w.space()
	if w.i < len(w.b) && w.b[w.i] == '}' {
		w.i++
		return value{kind: kindObject}
	}
	for {
		w.space()
		if w.i >= len(w.b) || w.b[w.i] != '"' {
			w.stop("invalid JSON: expected a key at byte %d, found %s", w.i, w.shownByte())
			return value{}
		}
		ks, ke, kesc := w.str()
		if w.stopped {
			return value{}
		}
		key := w.b[ks:ke]
		if kesc {
			key = unescape(key)
		}
		// Duplicates: encoding/json keeps the last, other parsers the first.
		if keySet == nil && len(keys) < len(small) {
			for _, k := range keys {
				if bytes.Equal(k, key) {
					w.duplicate(key)
					break
				}
			}
			keys = append(keys, key)
		} else {
			if keySet == nil {
				keySet = make(map[string]struct{}, 2*len(keys))
				for _, k := range keys {
					keySet[string(k)] = struct{}{}
				}
			}
			if _, dup := keySet[string(key)]; dup {
				w.duplicate(key)
			} else {
				keySet[string(key)] = struct{}{}
			}
		}
		w.space()
		if w.i >= len(w.b) || w.b[w.i] != ':' {
			w.stop("invalid JSON: expected ':' at byte %d, found %s", w.i, w.shownByte())
			return value{}
		}
		w.i++
		child := ctxAny
		switch {
		case ctx == ctxTop && string(key) == "tools":
			child = ctxTools
		case ctx == ctxTool && string(key) == "allowed_callers":
			child = ctxCallers
		}
		w.path = append(w.path, pathElem{key: key})
		v := w.value(child)
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
		w.path = w.path[:len(w.path)-1]
		w.space()
		if w.i >= len(w.b) {
			w.stop("invalid JSON: the body ends inside an object")
			return value{}
		}
		if w.b[w.i] == ',' {
			w.i++
			continue
		}
		if w.b[w.i] == '}' {
			w.i++
			break
		}
		w.stop("invalid JSON: expected ',' or '}' at byte %d, found %s", w.i, w.shownByte())
		return value{}
	}
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
	k := string(key)
	if len(k) > 40 {
		k = k[:40] + "…"
	}
	w.finding("ambiguous JSON: the key %q appears twice in %s; parsers disagree about which is read", k, w.where())
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
			w.finding("ambiguous JSON: the top-level key %q differs from %q only by case; parsers disagree about which is read", k, name)
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
	t := string(w.bytes(f.typStr))
	if t == "custom" || strings.HasPrefix(t, "web_search_") {
		return
	}
	for _, p := range clientToolPrefixes {
		if strings.HasPrefix(t, p) {
			return
		}
	}
	shown := t
	if len(shown) > 64 {
		shown = shown[:64] + "…"
	}
	w.finding("%s: a server tool of type %q: Anthropic would run it on the caller's behalf (only web_search_* is free)", w.where(), shown)
}

// array reads an array; ctx says which array of the request it is.
func (w *walker) array(ctx context) value {
	if !w.enter() {
		return value{}
	}
	defer func() { w.depth-- }()
	w.i++ // '['
	v := value{kind: kindArray, onlyDirect: true}
	child := ctxAny
	if ctx == ctxTools {
		child = ctxTool
	}
	w.space()
	if w.i < len(w.b) && w.b[w.i] == ']' {
		w.i++
		return v
	}
	for n := 0; ; n++ {
		w.path = append(w.path, pathElem{idx: n})
		e := w.value(child)
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
		w.path = w.path[:len(w.path)-1]
		w.space()
		if w.i >= len(w.b) {
			w.stop("invalid JSON: the body ends inside an array")
			return value{}
		}
		if w.b[w.i] == ',' {
			w.i++
			continue
		}
		if w.b[w.i] == ']' {
			w.i++
			return v
		}
		w.stop("invalid JSON: expected ',' or ']' at byte %d, found %s", w.i, w.shownByte())
		return value{}
	}
}

// bytes is the text of a string, unescaped; it is a slice of the body unless it holds escapes.
func (w *walker) bytes(s span) []byte {
	if s.escaped {
		return unescape(w.b[s.start:s.end])
	}
	return w.b[s.start:s.end]
}

// str reads a string at w.i (on its opening quote) and checks it: escapes, control characters,
// UTF-8 and surrogate pairs. It returns where its text is and whether it holds escapes.
func (w *walker) str() (start, end int, escaped bool) {
	w.i++ // '"'
	start = w.i
	for w.i < len(w.b) {
		c := w.b[w.i]
		switch {
		case c == '"':
			end = w.i
			w.i++
			return start, end, escaped
		case c == '\\':
			escaped = true
			if !w.escape() {
				return 0, 0, false
			}
		case c < 0x20:
			w.stop("invalid JSON: a control character in a string at byte %d", w.i)
			return 0, 0, false
		case c < utf8.RuneSelf:
			w.i++
		default:
			r, n := utf8.DecodeRune(w.b[w.i:])
			if r == utf8.RuneError && n == 1 {
				w.stop("the body is not valid UTF-8 (byte %d); parsers disagree about what such text means", w.i)
				return 0, 0, false
			}
			w.i += n
		}
	}
	w.stop("invalid JSON: the body ends inside a string")
	return 0, 0, false
}

// escape checks one escape at w.i (on its backslash).
func (w *walker) escape() bool {
	at := w.i
	if w.i+1 >= len(w.b) {
		w.stop("invalid JSON: the body ends inside an escape")
		return false
	}
	switch w.b[w.i+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		w.i += 2
		return true
	case 'u':
	default:
		w.stop("invalid JSON: bad escape at byte %d", at)
		return false
	}
	r, ok := hex4(w.b[w.i+2:])
	if !ok {
		w.stop("invalid JSON: bad \\u escape at byte %d", at)
		return false
	}
	w.i += 6
	switch {
	case 0xDC00 <= r && r <= 0xDFFF:
		w.stop("a lone low surrogate escape at byte %d; parsers disagree about what it means", at)
		return false
	case 0xD800 <= r && r <= 0xDBFF:
		if w.i+1 < len(w.b) && w.b[w.i] == '\\' && w.b[w.i+1] == 'u' {
			if r2, ok := hex4(w.b[w.i+2:]); ok && 0xDC00 <= r2 && r2 <= 0xDFFF {
				w.i += 6
				return true
			}
		}
		w.stop("a lone high surrogate escape at byte %d; parsers disagree about what it means", at)
		return false
	}
	return true
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(d)
	}
	return r, true
}

// unescape decodes the text of a string that str has checked.
func unescape(s []byte) []byte {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); {
		c := s[i]
		if c != '\\' {
			out = append(out, c)
			i++
			continue
		}
		switch s[i+1] {
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, _ := hex4(s[i+2:])
			i += 6
			if utf16.IsSurrogate(r) {
				r2, _ := hex4(s[i+2:])
				r = utf16.DecodeRune(r, r2)
				i += 6
			}
			out = utf8.AppendRune(out, r)
			continue
		default: // '"', '\\', '/'
			out = append(out, s[i+1])
		}
		i += 2
	}
	return out
}

// number reads a number at w.i by the JSON grammar. A number too large for a float64 asks:
// encoding/json refuses it while other parsers read it as infinity or a big integer.
func (w *walker) number() {
	start := w.i
	exp := false
	if w.b[w.i] == '-' {
		w.i++
	}
	switch {
	case w.i < len(w.b) && w.b[w.i] == '0':
		w.i++
	case w.i < len(w.b) && '1' <= w.b[w.i] && w.b[w.i] <= '9':
		w.digits()
	default:
		w.stop("invalid JSON: bad number at byte %d", start)
		return
	}
	if w.i < len(w.b) && w.b[w.i] == '.' {
		w.i++
		if w.digits() == 0 {
			w.stop("invalid JSON: bad number at byte %d", start)
			return
		}
	}
	if w.i < len(w.b) && (w.b[w.i] == 'e' || w.b[w.i] == 'E') {
		exp = true
		w.i++
		if w.i < len(w.b) && (w.b[w.i] == '+' || w.b[w.i] == '-') {
			w.i++
		}
		if w.digits() == 0 {
			w.stop("invalid JSON: bad number at byte %d", start)
			return
		}
	}
	if exp || w.i-start > 300 {
		if _, err := strconv.ParseFloat(string(w.b[start:w.i]), 64); err != nil {
			w.stop("the number at byte %d is out of range; parsers disagree about what it means", start)
		}
	}
}

func (w *walker) digits() int {
	n := 0
	for w.i < len(w.b) && '0' <= w.b[w.i] && w.b[w.i] <= '9' {
		w.i++
		n++
	}
	return n
}
