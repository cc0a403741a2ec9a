// Package jsonlex splits JSON text into tokens: strictly, refusing any text that JSON parsers
// may read differently, or leniently, reading on through malformed or truncated text.
package jsonlex

import (
	"fmt"
	"strconv"
)

// Mode says how a Lexer meets text that is not JSON.
type Mode uint8

const (
	// Strict reads one JSON value (RFC 8259) and stops at the first byte that is not, or that
	// parsers read differently: invalid UTF-8, a lone surrogate escape, a number beyond
	// float64, nesting deeper than the limit, a byte-order mark, data after the value. What it
	// reads to End, encoding/json reads the same way.
	Strict Mode = iota
	// Lenient never fails: it reads every string of malformed, truncated or concatenated text
	// (a body cut at a limit, NDJSON), placing each by the brackets, commas and colons it has
	// seen. Misplaced punctuation only moves the path; bytes that are no token are an Invalid
	// token and lexing goes on.
	Lenient
)

func (m Mode) String() string {
	switch m {
	case Strict:
		return "strict"
	case Lenient:
		return "lenient"
	}
	return "mode(" + strconv.Itoa(int(m)) + ")"
}

// Kind is what a token is.
type Kind uint8

const (
	End         Kind = iota // no more tokens
	ObjectStart             // {
	ObjectEnd               // }
	ArrayStart              // [
	ArrayEnd                // ]
	Key                     // a string that names an object member
	String                  // a string value
	Number
	True
	False
	Null
	// Invalid: in Strict mode the lexing has stopped and Err says why; in Lenient mode a run
	// of bytes that is no token, and lexing goes on.
	Invalid
)

var kindNames = [...]string{"end", "object start", "object end", "array start", "array end", "key", "string", "number", "true", "false", "null", "invalid"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Token is one token of the text.
type Token struct {
	// Start and End delimit the token in the text. For a Key or String they delimit its text
	// between the quotes: End is the closing quote, or in Lenient mode the end of the text when
	// the string is not closed. For Invalid they run from where the token began to where it
	// failed. For End both are the length of the text.
	Start, End int
	Kind       Kind
	// Escaped: the text of a Key or String holds backslash escapes (see AppendUnescaped).
	Escaped bool
}

// Offset is where the token begins in the text: a Key's or String's opening quote.
func (t Token) Offset() int {
	if t.Kind == Key || t.Kind == String {
		return t.Start - 1
	}
	return t.Start
}

// Frame is one open object or array, from the outside in: the step from it to the value being
// read.
type Frame struct {
	// Key is, in an object, the key last read (Kind Key), whose value is being read; the zero
	// Token before the first key.
	Key Token
	// Index is, in an array, the element being read, from 0; -1 in an object.
	Index int
	after state // the state of the enclosing frame once this one closes
}

// Object reports whether the frame is an object; else it is an array.
func (f Frame) Object() bool { return f.Index < 0 }

// Code says why Strict lexing stopped.
type Code uint8

const (
	ErrSyntax        Code = iota + 1 // a byte the grammar does not allow at Offset; Want says what it does
	ErrEnd                           // the text ends before the value does; Want says what was to come
	ErrControl                       // a control character in a string
	ErrUTF8                          // a byte of a string that is not UTF-8
	ErrEscape                        // a bad escape (its backslash at Offset)
	ErrHighSurrogate                 // a \u escape of a high surrogate not followed by one of a low surrogate
	ErrLowSurrogate                  // a \u escape of a low surrogate not preceded by one of a high surrogate
	ErrNumber                        // a number that the grammar does not allow (its first byte at Offset)
	ErrRange                         // a number too large for a float64 (its first byte at Offset)
	ErrDepth                         // an object or array nested deeper than the limit (its bracket at Offset)
)

var codeNames = [...]string{"", "syntax", "end", "control", "utf8", "escape", "high surrogate", "low surrogate", "number", "range", "depth"}

func (c Code) String() string {
	if int(c) < len(codeNames) && c != 0 {
		return codeNames[c]
	}
	return "code(" + strconv.Itoa(int(c)) + ")"
}

// Want is what the grammar allowed where Strict lexing stopped.
type Want uint8

const (
	WantValue      Want = iota // a value
	WantKey                    // a key (or, first in an object, '}')
	WantColon                  // ':'
	WantObjectNext             // ',' or '}'
	WantArrayNext              // ',' or ']'
	WantEnd                    // the end of the text, after the value
	WantQuote                  // the rest of a string and its closing quote
	WantEscape                 // the rest of an escape
)

var wantNames = [...]string{"a value", "a key", "':'", "',' or '}'", "',' or ']'", "the end of the text", "the closing quote", "the rest of an escape"}

// Error is why Strict lexing stopped.
type Error struct {
	Code   Code
	Offset int  // the byte at fault; the length of the text for ErrEnd
	Want   Want // for ErrSyntax and ErrEnd
}

func (e *Error) Error() string {
	switch e.Code {
	case ErrSyntax:
		return fmt.Sprintf("invalid JSON at byte %d: expected %s", e.Offset, wantNames[e.Want])
	case ErrEnd:
		return fmt.Sprintf("invalid JSON: the text ends where %s should be", wantNames[e.Want])
	case ErrControl:
		return fmt.Sprintf("invalid JSON at byte %d: a control character in a string", e.Offset)
	case ErrUTF8:
		return fmt.Sprintf("invalid UTF-8 at byte %d", e.Offset)
	case ErrEscape:
		return fmt.Sprintf("invalid JSON at byte %d: a bad escape", e.Offset)
	case ErrHighSurrogate:
		return fmt.Sprintf("a lone high surrogate escape at byte %d", e.Offset)
	case ErrLowSurrogate:
		return fmt.Sprintf("a lone low surrogate escape at byte %d", e.Offset)
	case ErrNumber:
		return fmt.Sprintf("invalid JSON at byte %d: a bad number", e.Offset)
	case ErrRange:
		return fmt.Sprintf("the number at byte %d is out of range", e.Offset)
	case ErrDepth:
		return fmt.Sprintf("nesting deeper than the limit at byte %d", e.Offset)
	}
	return fmt.Sprintf("invalid JSON at byte %d", e.Offset)
}

// state is where the lexer is in the grammar of the innermost open frame, or of the top level.
type state uint8

const (
	stTop      state = iota // the top-level value is to come
	stDone                  // the top-level value has been read
	stObjFirst              // after '{': a key or '}'
	stKey                   // after ',' in an object: a key
	stColon                 // after a key: ':'
	stMember                // after ':': a value
	stObjNext               // after a member: ',' or '}'
	stArrFirst              // after '[': a value or ']'
	stElem                  // after ',' in an array: a value
	stArrNext               // after an element: ',' or ']'
)

// afterValue is the state once a value read in a state is done (zero, and never read, for the
// states that allow no value).
var afterValue = [stArrNext + 1]state{stTop: stDone, stMember: stObjNext, stArrFirst: stArrNext, stElem: stArrNext}

var wants = [...]Want{
	stTop: WantValue, stDone: WantEnd, stObjFirst: WantKey, stKey: WantKey, stColon: WantColon,
	stMember: WantValue, stObjNext: WantObjectNext, stArrFirst: WantValue, stElem: WantValue,
	stArrNext: WantArrayNext,
}

func allowsValue(s state) bool { return s == stTop || s == stMember || s == stArrFirst || s == stElem }

// inline is how many frames a Lexer holds without allocating.
const inline = 16

// Lexer reads the tokens of one JSON text. The zero Lexer is a Strict one on an empty text;
// Reset starts it on a text, which it does not copy and which must not change while it reads.
// It does no I/O and keeps up to 16 frames without allocating.
type Lexer struct {
	b      []byte
	i      int
	mode   Mode
	max    int
	st     state
	n      int // frames open and kept
	beyond int // Lenient: containers open beyond max, not kept
	failed bool
	err    Error
	errTok Token
	frames [inline]Frame
	more   []Frame // frames past inline
}

// Reset starts l on text in mode. At most maxDepth objects and arrays are open at once: a
// deeper one is ErrDepth in Strict mode; in Lenient mode it is read without a frame, and
// Beyond counts it.
func (l *Lexer) Reset(text []byte, mode Mode, maxDepth int) {
	more := l.more[:0]
	*l = Lexer{b: text, mode: mode, max: maxDepth, more: more}
}

// Depth is the number of open frames Frame can return.
func (l *Lexer) Depth() int { return l.n }

// Frame returns the i-th open frame, 0 the outermost.
func (l *Lexer) Frame(i int) Frame { return *l.frame(i) }

// Beyond is the number of open containers nested beyond the depth limit (Lenient mode).
func (l *Lexer) Beyond() int { return l.beyond }

// Err is nil, or the *Error that stopped Strict lexing.
func (l *Lexer) Err() error {
	if !l.failed {
		return nil
	}
	e := l.err
	return &e
}

func (l *Lexer) frame(i int) *Frame {
	if i < inline {
		return &l.frames[i]
	}
	return &l.more[i-inline]
}

func (l *Lexer) fail(code Code, start, at int) Token {
	return l.failWant(code, wants[l.st], start, at)
}

func (l *Lexer) failWant(code Code, want Want, start, at int) Token {
	l.failed = true
	l.err = Error{Code: code, Offset: at, Want: want}
	l.errTok = Token{Kind: Invalid, Start: start, End: at}
	l.i = len(l.b)
	return l.errTok
}

// Next returns the next token. Commas and colons are no tokens: they move the frames. After
// End, or in Strict mode after Invalid, Next returns the same token again.
func (l *Lexer) Next() Token {
	if l.mode == Strict {
		return l.strict(false)
	}
	return l.lenient(false)
}

// NextString returns the next Key or String token, or End, or in Strict mode Invalid: it reads
// the tokens between as Next does, without returning them.
func (l *Lexer) NextString() Token {
	if l.mode == Strict {
		return l.strict(true)
	}
	return l.lenient(true)
}

// strict reads the next token by the grammar. The two modes share the frames, the states and
// the reading of strings and scalars; each has its own loop, which keeps the hot loop of each
// free of the other's branches.
func (l *Lexer) strict(stringsOnly bool) Token {
	if l.failed {
		return l.errTok
	}
	b, i := l.b, l.i
	for i < len(b) {
		switch c := b[i]; c {
		case ' ', '\t', '\n', '\r':
			i++
		case '{', '[':
			switch {
			case !allowsValue(l.st):
				return l.fail(ErrSyntax, i, i)
			case l.n >= l.max:
				return l.fail(ErrDepth, i, i)
			}
			l.open(c == '{', afterValue[l.st])
			i++
			if !stringsOnly {
				l.i = i
				return bracket(c, i-1)
			}
		case '}', ']':
			ok := l.st == stObjFirst || l.st == stObjNext
			if c == ']' {
				ok = l.st == stArrFirst || l.st == stArrNext
			}
			if !ok {
				return l.fail(ErrSyntax, i, i)
			}
			l.close()
			i++
			if !stringsOnly {
				l.i = i
				return bracket(c, i-1)
			}
		case ',':
			if l.st != stObjNext && l.st != stArrNext {
				return l.fail(ErrSyntax, i, i)
			}
			l.comma()
			i++
		case ':':
			if l.st != stColon {
				return l.fail(ErrSyntax, i, i)
			}
			l.st = stMember
			i++
		case '"':
			isKey := l.st == stObjFirst || l.st == stKey
			if !isKey && !allowsValue(l.st) {
				return l.fail(ErrSyntax, i, i)
			}
			end, esc, code, at, want := strictString(b, i+1)
			if code != 0 {
				return l.failWant(code, want, i, at)
			}
			l.i = end + 1
			t := Token{Kind: String, Start: i + 1, End: end, Escaped: esc}
			if isKey {
				t.Kind = Key
				l.key(t)
			} else {
				l.st = afterValue[l.st]
			}
			return t
		default:
			l.i = i
			t := l.strictScalar(i)
			if !stringsOnly || l.failed {
				return t
			}
			i = l.i
		}
	}
	l.i = i
	if l.st != stDone {
		return l.fail(ErrEnd, i, i)
	}
	return Token{Kind: End, Start: i, End: i}
}

// lenient reads the next token whatever the grammar says: brackets open and close frames, a
// comma moves to the next key or element, a colon to a value, a string is a key where its
// object wants one, and a run of other bytes is a scalar or Invalid.
func (l *Lexer) lenient(stringsOnly bool) Token {
	b, i := l.b, l.i
	for i < len(b) {
		switch c := b[i]; c {
		case ' ', '\t', '\n', '\r':
			i++
		case '{', '[':
			// The enclosing frame keeps its state: what follows the container is read as
			// what was wanted before it.
			l.open(c == '{', l.st)
			i++
			if !stringsOnly {
				l.i = i
				return bracket(c, i-1)
			}
		case '}', ']':
			l.close()
			i++
			if !stringsOnly {
				l.i = i
				return bracket(c, i-1)
			}
		case ',':
			l.comma()
			i++
		case ':':
			if l.beyond == 0 && inObject(l.st) {
				l.st = stMember
			}
			i++
		case '"':
			end, esc := lenientString(b, i+1)
			l.i = min(end+1, len(b))
			t := Token{Kind: String, Start: i + 1, End: end, Escaped: esc}
			// Beyond the depth limit the state is that of the innermost frame kept, and no
			// string is a key.
			if (l.st == stObjFirst || l.st == stKey) && l.beyond == 0 {
				t.Kind = Key
				l.key(t)
			}
			return t
		default:
			if !stringsOnly {
				l.i = i
				return l.lenientScalar(i)
			}
			for i++; i < len(b) && !delim[b[i]]; i++ {
			}
		}
	}
	l.i = i
	return Token{Kind: End, Start: i, End: i}
}

func bracket(c byte, i int) Token {
	k := ObjectStart
	switch c {
	case '}':
		k = ObjectEnd
	case '[':
		k = ArrayStart
	case ']':
		k = ArrayEnd
	}
	return Token{Kind: k, Start: i, End: i + 1}
}

// inObject and inArray report whether a state is one of an object's or of an array's: the
// state says which the innermost frame kept is.
func inObject(s state) bool { return stObjFirst <= s && s <= stObjNext }
func inArray(s state) bool  { return stArrFirst <= s && s <= stArrNext }

// open opens a frame for an object or an array, to restore after once it closes; beyond the
// depth limit it only counts it.
func (l *Lexer) open(object bool, after state) {
	if l.n >= l.max || l.beyond > 0 {
		l.beyond++
		return
	}
	index, st := 0, stArrFirst
	if object {
		index, st = -1, stObjFirst
	}
	l.push(Frame{Index: index, after: after})
	l.st = st
}

// close closes the innermost container.
func (l *Lexer) close() {
	switch {
	case l.beyond > 0:
		l.beyond--
	case l.n > 0:
		l.n--
		l.st = l.frame(l.n).after
	}
}

// comma moves the innermost frame kept to its next key or element.
func (l *Lexer) comma() {
	switch {
	case l.beyond > 0:
	case inObject(l.st):
		l.st = stKey
	case inArray(l.st):
		l.frame(l.n-1).Index++
		l.st = stElem
	}
}

// key records the key just read in its object.
func (l *Lexer) key(t Token) {
	l.frame(l.n - 1).Key = t
	l.st = stColon
}

func (l *Lexer) push(f Frame) {
	if l.n < inline {
		l.frames[l.n] = f
	} else {
		l.pushMore(f)
	}
	l.n++
}

// pushMore keeps a frame past those held inline.
//
//go:noinline
func (l *Lexer) pushMore(f Frame) {
	if k := l.n - inline; k < len(l.more) {
		l.more[k] = f
	} else {
		l.more = append(l.more, f)
	}
}

// strictScalar reads a number or a literal at i, by the grammar.
func (l *Lexer) strictScalar(i int) Token {
	if !allowsValue(l.st) {
		return l.fail(ErrSyntax, i, i)
	}
	b := l.b
	var kind Kind
	end := i
	switch c := b[i]; {
	case c == '-' || '0' <= c && c <= '9':
		var code Code
		end, code = number(b, i, true)
		if code != 0 {
			return l.fail(code, i, i)
		}
		kind = Number
	case c == 't' && hasPrefix(b[i:], "true"):
		kind, end = True, i+4
	case c == 'f' && hasPrefix(b[i:], "false"):
		kind, end = False, i+5
	case c == 'n' && hasPrefix(b[i:], "null"):
		kind, end = Null, i+4
	default:
		return l.fail(ErrSyntax, i, i)
	}
	l.i = end
	l.st = afterValue[l.st]
	return Token{Kind: kind, Start: i, End: end}
}

// lenientScalar reads the run of bytes at i up to the next delimiter: a number, a literal, or
// Invalid.
func (l *Lexer) lenientScalar(i int) Token {
	b := l.b
	end := i + 1
	for end < len(b) && !delim[b[end]] {
		end++
	}
	l.i = end
	kind := Invalid
	switch run := b[i:end]; string(run) {
	case "true":
		kind = True
	case "false":
		kind = False
	case "null":
		kind = Null
	default:
		if c := run[0]; c == '-' || '0' <= c && c <= '9' {
			if e, code := number(b[:end], i, false); code == 0 && e == end {
				kind = Number
			}
		}
	}
	return Token{Kind: kind, Start: i, End: end}
}

func hasPrefix(b []byte, p string) bool {
	return len(b) >= len(p) && string(b[:len(p)]) == p
}
