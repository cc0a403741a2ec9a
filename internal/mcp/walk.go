package mcp

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/lockhttp/lockhttp/internal/floor"
	"github.com/lockhttp/lockhttp/internal/jsonlex"
)

// walker reads one JSON text with the project's strict lexer: it checks the keys of every
// object, writes the canonical JSON of the values it is asked to, and records findings. The
// lexer's frames are the path to the value being read, for the findings' text.
type walker struct {
	b        []byte
	lx       jsonlex.Lexer
	findings []Finding
	dropped  int  // findings past MaxFindings
	msg      int  // the message the next finding names (-1: the body)
	stopped  bool // the text cannot be read on: not JSON, bad text, too deep
	stopText string
	end      int // where the last token read ends
	// inexact: a number that canonical JSON writes as another value (more digits than a
	// float64 holds) was read; inexactText is the finding that says where.
	inexact     bool
	inexactText string
	// onString, when set, is called with every string value read, unescaped.
	onString func(s []byte)
	// copied counts the bytes of canonical JSON copied from an object's members into the object,
	// at every level; past budget the walk stops. Nesting many objects around much data would
	// otherwise copy it once a level.
	copied, budget int
}

// copyBudget is how many bytes of canonical JSON a walk may copy for a text of n bytes: a call
// whose arguments nest big values a few objects deep stays well under it.
func copyBudget(n int) int { return 8*n + 1<<20 }

func (w *walker) reset(b []byte) {
	w.b = b
	w.budget = copyBudget(len(b))
	w.lx.Reset(b, jsonlex.Strict, MaxDepth)
	w.msg = -1
}

// next reads the next token and notes where it ends.
func (w *walker) next() jsonlex.Token {
	t := w.lx.Next()
	switch t.Kind {
	case jsonlex.Key, jsonlex.String:
		w.end = t.End + 1
	case jsonlex.Invalid:
	default:
		w.end = t.End
	}
	return t
}

// find records a finding about the current message.
func (w *walker) find(format string, args ...any) {
	w.findAt(w.msg, format, args...)
}

func (w *walker) findAt(msg int, format string, args ...any) {
	if len(w.findings) >= MaxFindings {
		w.dropped++
		return
	}
	w.findings = append(w.findings, Finding{Message: msg, Text: fmt.Sprintf(format, args...)})
}

// stop records why the text cannot be read on, as a finding about the body, and ends the walk.
func (w *walker) stop(format string, args ...any) {
	if w.stopped {
		return
	}
	w.stopped = true
	w.stopText = fmt.Sprintf(format, args...)
	w.findAt(-1, "%s", w.stopText)
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
		switch {
		case e.Want == jsonlex.WantEnd:
			w.stop("ambiguous JSON: data after the JSON text at byte %d; parsers disagree about what such a body means", at)
		case e.Code == jsonlex.ErrEnd:
			w.stop("invalid JSON: the text ends before its value does")
		default:
			w.stop("invalid JSON at byte %d: expected %s", at, wantText(e.Want))
		}
	case jsonlex.ErrControl:
		w.stop("invalid JSON: a control character in a string at byte %d", at)
	case jsonlex.ErrUTF8:
		w.stop("the text is not valid UTF-8 (byte %d); parsers disagree about what such text means", at)
	case jsonlex.ErrEscape:
		w.stop("invalid JSON: a bad escape at byte %d", at)
	case jsonlex.ErrLowSurrogate, jsonlex.ErrHighSurrogate:
		w.stop("a lone surrogate escape at byte %d; parsers disagree about what it means", at)
	case jsonlex.ErrNumber:
		w.stop("invalid JSON: a bad number at byte %d", at)
	case jsonlex.ErrRange:
		w.stop("the number at byte %d is out of range; parsers disagree about what it means", at)
	case jsonlex.ErrDepth:
		w.stop("the text nests deeper than %d levels; it is not read further", MaxDepth)
	default:
		w.stop("invalid JSON: %v", e)
	}
}

func wantText(w jsonlex.Want) string {
	switch w {
	case jsonlex.WantKey:
		return "a key"
	case jsonlex.WantColon:
		return "':'"
	case jsonlex.WantObjectNext:
		return "',' or '}'"
	case jsonlex.WantArrayNext:
		return "',' or ']'"
	}
	return "a value"
}

// where renders the path to the value being read, such as [1].params.arguments.path.
func (w *walker) where() string { return w.whereIn(w.lx.Depth()) }

// whereIn renders the path through the n outermost open frames.
func (w *walker) whereIn(n int) string {
	if n == 0 {
		return "the top-level object"
	}
	var b strings.Builder
	for i := range n {
		f := w.lx.Frame(i)
		if !f.Object() {
			fmt.Fprintf(&b, "[%d]", f.Index)
			continue
		}
		if f.Key.Kind != jsonlex.Key {
			continue
		}
		k := string(w.text(f.Key))
		if plainKey(k) && floor.HideTokens(k) == k {
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(k)
		} else {
			b.WriteString("[" + floor.Shown(k, 40) + "]")
		}
		if b.Len() > 200 {
			b.WriteString("…")
			break
		}
	}
	if b.Len() == 0 {
		return "the top-level object"
	}
	return b.String()
}

// objectWhere is the path to the object whose key was just read.
func (w *walker) objectWhere() string { return w.whereIn(w.lx.Depth() - 1) }

func plainKey(k string) bool {
	if k == "" || len(k) > 40 {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '/') {
			return false
		}
	}
	return true
}

// text is the text of a Key or String token, unescaped; a slice of the body unless it holds
// escapes.
func (w *walker) text(t jsonlex.Token) []byte {
	if t.Escaped {
		return jsonlex.AppendUnescaped(nil, w.b[t.Start:t.End])
	}
	return w.b[t.Start:t.End]
}

// raw is a token as written: a string with its quotes.
func (w *walker) raw(t jsonlex.Token) []byte {
	if t.Kind == jsonlex.String || t.Kind == jsonlex.Key {
		return w.b[t.Start-1 : t.End+1]
	}
	return w.b[t.Start:t.End]
}

// keys holds the keys of one object read so far, to find duplicates and keys that differ only
// by case.
type keys struct {
	list  []string
	folds map[string]string // past maxKeyScan keys: the fold of each key to the key
}

// envelopeKeys are the keys a message and its params are read by.
var envelopeKeys = []string{"jsonrpc", "id", "method", "params", "result", "error", "name", "arguments", "uri", "_meta", "tools"}

var envelopeFolds = func() map[string]string {
	m := make(map[string]string, len(envelopeKeys))
	for _, k := range envelopeKeys {
		m[foldKey(k)] = k
	}
	return m
}()

// maxKeyScan is how many keys of one object are compared one by one; past it they go in a map.
const maxKeyScan = 16

// add checks key against the keys before it in its object and records it. envelope: the key is
// one of a message's or its params', which no client writes with escapes.
func (w *walker) key(ks *keys, key string, t jsonlex.Token, envelope bool) {
	if hasOdd(key) {
		w.find("the key %s in %s holds a control or invisible character; servers differ in what key they read", floor.Shown(key, 40), w.objectWhere())
	} else if envelope && t.Escaped {
		w.find("the key %s in %s is written with escapes (%s); a server that compares keys as written reads another key", floor.Shown(key, 40), w.objectWhere(), floor.Shown(string(w.b[t.Start:t.End]), 40))
	}
	if envelope {
		if k, ok := envelopeFolds[foldKey(key)]; ok && k != key {
			w.find("the key %s in %s differs from %q only by case; a server that matches keys without case reads it as %s", floor.Shown(key, 40), w.objectWhere(), k, k)
		}
	}
	var other string
	found := false
	if ks.folds == nil && len(ks.list) < maxKeyScan {
		for _, k := range ks.list {
			if k == key || strings.EqualFold(k, key) {
				other, found = k, true
				break
			}
		}
		ks.list = append(ks.list, key)
	} else {
		if ks.folds == nil {
			ks.folds = make(map[string]string, 2*maxKeyScan)
			for _, k := range ks.list {
				if _, ok := ks.folds[foldKey(k)]; !ok {
					ks.folds[foldKey(k)] = k
				}
			}
		}
		f := foldKey(key)
		other, found = ks.folds[f]
		if !found {
			ks.folds[f] = key
		}
	}
	switch {
	case !found:
	case other == key:
		w.find("ambiguous JSON: the key %s appears twice in %s; parsers disagree about which is read", floor.Shown(key, 40), w.objectWhere())
	default:
		w.find("ambiguous JSON: the keys %s and %s in %s differ only by case; servers that match keys without case read either", floor.Shown(other, 40), floor.Shown(key, 40), w.objectWhere())
	}
}

// value reads the value that begins with t. With canon, it appends the value's canonical JSON
// to dst and returns it.
func (w *walker) value(t jsonlex.Token, dst []byte, canon bool) []byte {
	switch t.Kind {
	case jsonlex.ObjectStart:
		return w.object(dst, canon)
	case jsonlex.ArrayStart:
		return w.array(dst, canon)
	case jsonlex.String:
		if canon || w.onString != nil {
			s := w.text(t)
			if w.onString != nil {
				w.onString(s)
			}
			if canon {
				dst = appendString(dst, s)
			}
		}
	case jsonlex.Number:
		if canon {
			var exact bool
			dst, exact = appendNumber(dst, w.b[t.Start:t.End])
			if !exact && !w.inexact {
				w.inexact = true
				w.inexactText = fmt.Sprintf("the number %s at %s has more digits than a 64-bit float holds; servers that read it exactly and those that round it act on two values", floor.Shown(string(w.b[t.Start:t.End]), 40), w.where())
			}
		}
	case jsonlex.True:
		if canon {
			dst = append(dst, "true"...)
		}
	case jsonlex.False:
		if canon {
			dst = append(dst, "false"...)
		}
	case jsonlex.Null:
		if canon {
			dst = append(dst, "null"...)
		}
	default:
		w.lexStop()
	}
	return dst
}

// member is one member of an object whose canonical JSON is being written: its key and where its
// value's canonical JSON is in a scratch buffer.
type member struct {
	key        string
	start, end int
}

// object reads the object whose '{' was just read.
func (w *walker) object(dst []byte, canon bool) []byte {
	var (
		ks      keys
		members []member
		scratch []byte
	)
	for {
		t := w.next()
		if t.Kind == jsonlex.ObjectEnd {
			break
		}
		if t.Kind != jsonlex.Key {
			w.lexStop()
			return dst
		}
		key := string(w.text(t))
		w.key(&ks, key, t, false)
		vt := w.next()
		if canon {
			start := len(scratch)
			scratch = w.value(vt, scratch, true)
			members = append(members, member{key, start, len(scratch)})
		} else {
			w.value(vt, nil, false)
		}
		if w.stopped {
			return dst
		}
	}
	if canon {
		if w.copied += len(scratch); w.copied > w.budget {
			w.stop("the objects nest so much data that comparing their canonical form would copy over %d bytes; the body is not read further", w.budget)
			return dst
		}
		dst = appendObject(dst, members, scratch)
	}
	return dst
}

// array reads the array whose '[' was just read.
func (w *walker) array(dst []byte, canon bool) []byte {
	if canon {
		dst = append(dst, '[')
	}
	for i := 0; ; i++ {
		t := w.next()
		if t.Kind == jsonlex.ArrayEnd {
			break
		}
		if canon && i > 0 {
			dst = append(dst, ',')
		}
		dst = w.value(t, dst, canon)
		if w.stopped {
			return dst
		}
	}
	if canon {
		dst = append(dst, ']')
	}
	return dst
}

// kindText names the kind of the value that begins with t, for findings.
func kindText(t jsonlex.Token) string {
	switch t.Kind {
	case jsonlex.ObjectStart:
		return "an object"
	case jsonlex.ArrayStart:
		return "an array"
	case jsonlex.String:
		return "a string"
	case jsonlex.Number:
		return "a number"
	case jsonlex.True, jsonlex.False:
		return "a boolean"
	case jsonlex.Null:
		return "null"
	}
	return "token " + strconv.Itoa(int(t.Kind))
}
