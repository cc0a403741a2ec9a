package jsonlex

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
)

// fuzzDepth is the depth limit of the fuzz test: small, so that it is reached.
const fuzzDepth = 16

// FuzzLexer holds both modes to what their users rely on; NextString reads as Next does. Strict: it never reads to End what
// encoding/json refuses (json.Valid), and what it reads, encoding/json reads as the same tokens
// with the same strings. Lenient: it never panics or loops (each token moves on, and Next
// returns End at the end), keeps at most fuzzDepth frames, and on text Strict reads it returns
// the same tokens and frames.
func FuzzLexer(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi\n\u00e9\ud83d\ude00"}]}],"n":-1.5e3,"t":true,"f":false,"z":null}`,
		`[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]`,
		`{"a":1,}`, `{"a" 1}`, `[1 2]`, `{]`, `"abc`, `"\u12`, `"\ud83d"`, `"\ude00"`, "\"\xff\"",
		"\xef\xbb\xbf{}", `{} {}`, `1e400`, `01`, `-`, `[tru]`, `{"a":["b\u00`, `]}{"a":"b"}`,
		`{:"x"}`, `x"y"z`, `["a\\","b"]`, ` `, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		strict := lexAll(t, text, Strict)
		lenient := lexAll(t, text, Lenient)
		for _, mode := range []Mode{Strict, Lenient} {
			all, only := stringsOf(t, text, mode, fuzzDepth, false), stringsOf(t, text, mode, fuzzDepth, true)
			if all != only {
				t.Fatalf("%v on %q: NextString reads\n%s\nwhere Next reads\n%s", mode, text, only, all)
			}
		}
		if !strict.ok {
			return
		}
		if !json.Valid(text) {
			t.Fatalf("Strict reads %q, which encoding/json refuses", text)
		}
		if strict.trace != lenient.trace {
			t.Fatalf("on %q Strict and Lenient differ:\n%s\n%s", text, strict.trace, lenient.trace)
		}
		dec := json.NewDecoder(bytes.NewReader(text))
		dec.UseNumber()
		for i, tok := range strict.toks {
			jt, err := dec.Token()
			if err != nil {
				t.Fatalf("%q: token %d: encoding/json: %v", text, i, err)
			}
			if !sameToken(text, tok, jt) {
				t.Fatalf("%q: token %d: %v %q; encoding/json reads %#v", text, i, tok.Kind, text[tok.Start:tok.End], jt)
			}
		}
		if jt, err := dec.Token(); !errors.Is(err, io.EOF) {
			t.Fatalf("%q: encoding/json reads on past the lexer's End: %v, %v", text, jt, err)
		}
	})
}

type lexed struct {
	ok    bool // the text was read to End, not Invalid in Strict mode
	toks  []Token
	trace string // the tokens with their paths
}

func lexAll(t *testing.T, text []byte, mode Mode) lexed {
	var l Lexer
	l.Reset(text, mode, fuzzDepth)
	var out lexed
	var trace strings.Builder
	last := -1
	for {
		tok := l.Next()
		if tok.Kind == End {
			if tok.Start != len(text) || l.Next().Kind != End {
				t.Fatalf("%v: End at %d of %d, or not again", mode, tok.Start, len(text))
			}
			out.ok = true
			break
		}
		if tok.Kind == Invalid && mode == Strict {
			if l.Err() == nil {
				t.Fatal("Strict: Invalid without an error")
			}
			break
		}
		if tok.Start <= last || tok.End < tok.Start || tok.End > len(text) {
			t.Fatalf("%v: token %v at %d..%d after one at %d: no progress", mode, tok.Kind, tok.Start, tok.End, last)
		}
		last = tok.Start
		if l.Depth() > fuzzDepth {
			t.Fatalf("%v: %d frames kept, more than %d", mode, l.Depth(), fuzzDepth)
		}
		out.toks = append(out.toks, tok)
		trace.WriteString(render(&l, text, tok))
		trace.WriteByte(' ')
	}
	out.trace = trace.String()
	return out
}

func sameToken(text []byte, tok Token, jt json.Token) bool {
	raw := text[tok.Start:tok.End]
	switch v := jt.(type) {
	case json.Delim:
		return tok.Kind == map[json.Delim]Kind{'{': ObjectStart, '}': ObjectEnd, '[': ArrayStart, ']': ArrayEnd}[v]
	case string:
		return (tok.Kind == String || tok.Kind == Key) && string(AppendUnescaped(nil, raw)) == v && tok.Escaped == bytes.ContainsRune(raw, '\\')
	case json.Number:
		return tok.Kind == Number && string(raw) == string(v)
	case bool:
		return v && tok.Kind == True || !v && tok.Kind == False
	case nil:
		return tok.Kind == Null
	}
	return false
}

// stringsOf renders the Key and String tokens of text with their paths, and how it ends, read
// with Next or with NextString.
func stringsOf(t *testing.T, text []byte, mode Mode, maxDepth int, only bool) string {
	var l Lexer
	l.Reset(text, mode, maxDepth)
	var b strings.Builder
	for n := 0; n <= len(text)+1; n++ {
		tok := l.Next
		if only {
			tok = l.NextString
		}
		switch tk := tok(); tk.Kind {
		case Key, String:
			b.WriteString(render(&l, text, tk) + " ")
		case End:
			return b.String() + "end"
		case Invalid:
			if mode == Strict {
				return b.String() + render(&l, text, tk)
			}
		}
	}
	t.Fatalf("%v: more tokens than bytes in %q", mode, text)
	return ""
}
