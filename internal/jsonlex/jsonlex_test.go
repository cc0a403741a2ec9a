package jsonlex

import (
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// tokens lexes text in mode and renders each token with the path to it: `{`, `k:a@`,
// `s:b@a`, `n:1@a[0]`; an Invalid token in Strict mode renders its error.
func tokens(t *testing.T, text string, mode Mode, maxDepth int) string {
	t.Helper()
	var l Lexer
	l.Reset([]byte(text), mode, maxDepth)
	var out []string
	for n := 0; ; n++ {
		if n > len(text)+1 {
			t.Fatalf("%q: more tokens than bytes", text)
		}
		tok := l.Next()
		if tok.Kind == End {
			break
		}
		out = append(out, render(&l, []byte(text), tok))
		if tok.Kind == Invalid && mode == Strict {
			break
		}
	}
	return strings.Join(out, " ")
}

func render(l *Lexer, text []byte, tok Token) string {
	switch tok.Kind {
	case ObjectStart:
		return "{"
	case ObjectEnd:
		return "}"
	case ArrayStart:
		return "["
	case ArrayEnd:
		return "]"
	case Invalid:
		if err := l.Err(); err != nil {
			e := err.(*Error)
			s := "error:" + e.Code.String() + "@" + strconv.Itoa(e.Offset)
			if e.Code == ErrSyntax || e.Code == ErrEnd {
				s += "/" + wantNames[e.Want]
			}
			return s
		}
		return "x:" + string(text[tok.Start:tok.End])
	}
	s := tok.Kind.String()[:1] + ":" + string(text[tok.Start:tok.End])
	if tok.Escaped {
		s += "(esc)"
	}
	return s + "@" + path(l, text, tok.Kind == Key)
}

// path renders the frames: the path of a value; for a key, of its object.
func path(l *Lexer, text []byte, isKey bool) string {
	var b strings.Builder
	n := l.Depth()
	if isKey {
		n--
	}
	for i := range n {
		f := l.Frame(i)
		if f.Object() {
			b.WriteString("." + string(AppendUnescaped(nil, text[f.Key.Start:f.Key.End])))
		} else {
			b.WriteString("[" + strconv.Itoa(f.Index) + "]")
		}
	}
	if l.Beyond() > 0 {
		b.WriteString("…")
	}
	return b.String()
}

// checkNextString: NextString reads the keys and strings Next reads, with the same paths.
func checkNextString(t *testing.T, in string, mode Mode, depth int) {
	t.Helper()
	if all, only := stringsOf(t, []byte(in), mode, depth, false), stringsOf(t, []byte(in), mode, depth, true); all != only {
		t.Fatalf("%v %q: NextString reads\n%s\nwhere Next reads\n%s", mode, in, only, all)
	}
}

func TestStrict(t *testing.T) {
	cases := []struct {
		name, in string
		depth    int // 0: 512
		want     string
	}{
		{"object", `{"a": "b", "c": [1, true, false, null, {}]}`, 0,
			`{ k:a@ s:b@.a k:c@ [ n:1@.c[0] t:true@.c[1] f:false@.c[2] n:null@.c[3] { } ] }`},
		{"top string", ` "x\n" `, 0, `s:x\n(esc)@`},
		{"top number", `-0.5e+3`, 0, `n:-0.5e+3@`},
		{"nested arrays", `[[1],[2,[3]]]`, 0, `[ [ n:1@[0][0] ] [ n:2@[1][0] [ n:3@[1][1][0] ] ] ]`},
		{"surrogate pair", `"\ud83d\ude00"`, 0, `s:\ud83d\ude00(esc)@`},
		{"escaped key", `{"a\u0062":1}`, 0, `{ k:a\u0062(esc)@ n:1@.ab }`},
		{"utf-8", `"héllo ✓"`, 0, `s:héllo ✓@`},
		{"at the depth limit", `[[1]]`, 2, `[ [ n:1@[0][0] ] ]`},
		// What it refuses: the error's code, offset and what the grammar wanted there.
		{"empty", ``, 0, `error:end@0/a value`},
		{"only space", " \n\t", 0, `error:end@3/a value`},
		{"trailing object", `{} {}`, 0, `{ } error:syntax@3/the end of the text`},
		{"trailing garbage", `1 x`, 0, `n:1@ error:syntax@2/the end of the text`},
		{"bom", "\xef\xbb\xbf{}", 0, `error:syntax@0/a value`},
		{"trailing comma in an object", `{"a":1,}`, 0, `{ k:a@ n:1@.a error:syntax@7/a key`},
		{"trailing comma in an array", `[1,]`, 0, `[ n:1@[0] error:syntax@3/a value`},
		{"leading comma", `[,1]`, 0, `[ error:syntax@1/a value`},
		{"missing colon", `{"a" 1}`, 0, `{ k:a@ error:syntax@5/':'`},
		{"missing comma", `[1 2]`, 0, `[ n:1@[0] error:syntax@3/',' or ']'`},
		{"mismatched close", `{]`, 0, `{ error:syntax@1/a key`},
		{"close for an array", `[}`, 0, `[ error:syntax@1/a value`},
		{"key not a string", `{1:2}`, 0, `{ error:syntax@1/a key`},
		{"single quotes", `{'a':1}`, 0, `{ error:syntax@1/a key`},
		{"ends in an object", `{"a":1`, 0, `{ k:a@ n:1@.a error:end@6/',' or '}'`},
		{"ends after a colon", `{"a":`, 0, `{ k:a@ error:end@5/a value`},
		{"ends in an array", `[1`, 0, `[ n:1@[0] error:end@2/',' or ']'`},
		{"ends in a string", `"abc`, 0, `error:end@4/the closing quote`},
		{"ends in an escape", `"abc\`, 0, `error:end@5/the rest of an escape`},
		{"control character", "\"a\x01\"", 0, `error:control@2`},
		{"invalid utf-8", "\"a\xff\"", 0, `error:utf8@2`},
		{"utf-8 of a surrogate", "\"\xed\xa0\x80\"", 0, `error:utf8@1`},
		{"invalid utf-8 in a key", "{\"\xc3\":1}", 0, `{ error:utf8@2`},
		{"bad escape", `"\x"`, 0, `error:escape@1`},
		{"bad unicode escape", `"\u12g4"`, 0, `error:escape@1`},
		{"short unicode escape", `"\u12`, 0, `error:escape@1`},
		{"lone high surrogate", `"\ud83d"`, 0, `error:high surrogate@1`},
		{"high surrogate then a letter", `"\ud83dx"`, 0, `error:high surrogate@1`},
		{"two high surrogates", `"\ud83d\ud83d"`, 0, `error:high surrogate@1`},
		{"lone low surrogate", `"\ude00"`, 0, `error:low surrogate@1`},
		{"leading zero", `01`, 0, `n:0@ error:syntax@1/the end of the text`},
		{"bare minus", `-`, 0, `error:number@0`},
		{"bare fraction", `1.`, 0, `error:number@0`},
		{"bare exponent", `1e+`, 0, `error:number@0`},
		{"plus sign", `+1`, 0, `error:syntax@0/a value`},
		{"out of range", `[1e400]`, 0, `[ error:range@1`},
		{"long integer", "[" + strings.Repeat("9", 400) + "]", 0, `[ error:range@1`},
		{"bad literal", `[tru]`, 0, `[ error:syntax@1/a value`},
		{"literal run on", `[truex]`, 0, `[ t:true@[0] error:syntax@5/',' or ']'`},
		{"too deep", `[[[1]]]`, 2, `[ [ error:depth@2`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			depth := c.depth
			if depth == 0 {
				depth = 512
			}
			if got := tokens(t, c.in, Strict, depth); got != c.want {
				t.Fatalf("Strict %q:\n got %s\nwant %s", c.in, got, c.want)
			}
			checkNextString(t, c.in, Strict, depth)
		})
	}
}

// TestStrictSticky: after Invalid, Next returns it again and Err stays.
func TestStrictSticky(t *testing.T) {
	var l Lexer
	l.Reset([]byte(`[1,}`), Strict, 8)
	for l.Next().Kind != Invalid {
	}
	first := l.Err()
	if tok := l.Next(); tok.Kind != Invalid || l.Err() == nil || l.Err().Error() != first.Error() {
		t.Fatalf("after Invalid: %v, %v; want Invalid, %v", tok.Kind, l.Err(), first)
	}
}

func TestLenient(t *testing.T) {
	cases := []struct {
		name, in string
		depth    int // 0: 64
		want     string
	}{
		{"valid", `{"a":["b",{"c":1}]}`, 0, `{ k:a@ [ s:b@.a[0] { k:c@.a[1] n:1@.a[1].c } ] }`},
		{"truncated in a string", `{"a":["b\u00`, 0, `{ k:a@ [ s:b\u00(esc)@.a[0]`},
		{"truncated after a key", `{"a"`, 0, `{ k:a@`},
		{"concatenated", `{"a":1}` + "\n" + `{"b":"x"}`, 0, `{ k:a@ n:1@.a } { k:b@ s:x@.b }`},
		{"missing colon", `{"a" "b"}`, 0, `{ k:a@ s:b@.a }`},
		{"missing comma", `{"a":"b" "c":"d"}`, 0, `{ k:a@ s:b@.a s:c@.a s:d@.a }`},
		{"extra closers", `]}{"a":"b"}`, 0, `] } { k:a@ s:b@.a }`},
		{"mismatched closer", `{"a":["b"}`, 0, `{ k:a@ [ s:b@.a[0] }`},
		{"value without a key", `{:"x"}`, 0, `{ s:x@. }`},
		{"garbage", `{"a":nope,"b":'x'}`, 0, `{ k:a@ x:nope k:b@ x:'x' }`},
		{"quote inside garbage", `x"y"z`, 0, `x:x s:y@ x:z`},
		{"numbers and literals", `[1,-2.5e3,true,false,null,01,1.]`, 0,
			`[ n:1@[0] n:-2.5e3@[1] t:true@[2] f:false@[3] n:null@[4] x:01 x:1. ]`},
		{"invalid utf-8 and control bytes", "[\"\xff\x01\"]", 0, "[ s:\xff\x01@[0] ]"},
		{"escaped quote", `["a\"b"]`, 0, `[ s:a\"b(esc)@[0] ]`},
		{"escaped backslash before the quote", `["a\\","b"]`, 0, `[ s:a\\(esc)@[0] s:b@[1] ]`},
		{"beyond the depth", `[[{"a":"b"}],"c"]`, 2, `[ [ { s:a@[0][0]… s:b@[0][0]… } ] s:c@[1] ]`},
		{"key beyond the depth", `{"a":{"b":"c"}}`, 1, `{ k:a@ { s:b@.a… s:c@.a… } }`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			depth := c.depth
			if depth == 0 {
				depth = 64
			}
			if got := tokens(t, c.in, Lenient, depth); got != c.want {
				t.Fatalf("Lenient %q:\n got %s\nwant %s", c.in, got, c.want)
			}
			checkNextString(t, c.in, Lenient, depth)
		})
	}
}

func TestAppendUnescaped(t *testing.T) {
	cases := []struct{ in, want string }{
		{`plain`, "plain"},
		{`a\nb\tc\r\b\f\/\\\"`, "a\nb\tc\r\b\f/\\\""},
		{`\u0041\u00e9\u2713`, "Aé✓"},
		{`\ud83d\ude00`, "😀"},
		{`\uD83D\uDE00`, "😀"},
		// Malformed, as Lenient mode lets it through: kept as written, lone surrogates U+FFFD.
		{`\x`, `\x`},
		{`\u12`, `\u12`},
		{`\u12g4`, `\u12g4`},
		{`end\`, `end\`},
		{`\ud83d`, "\uFFFD"},
		{`\ude00`, "\uFFFD"},
		{`\ud83dx`, "\uFFFDx"},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			got := string(AppendUnescaped([]byte(">"), []byte(c.in)))
			if got != ">"+c.want {
				t.Fatalf("AppendUnescaped(%q) = %q, want %q", c.in, got[1:], c.want)
			}
		})
	}
}

// TestDeepFrames: frames past those held inline are kept, and a reset lexer reuses them.
func TestDeepFrames(t *testing.T) {
	text := []byte(strings.Repeat(`{"k":[`, 40) + `"v"` + strings.Repeat(`]}`, 40))
	var l Lexer
	for range 2 {
		l.Reset(text, Strict, 100)
		var last string
		for {
			tok := l.Next()
			if tok.Kind == Invalid {
				t.Fatal(l.Err())
			}
			if tok.Kind == End {
				break
			}
			if tok.Kind == String {
				last = path(&l, text, false)
			}
		}
		if want := strings.Repeat(".k[0]", 40); last != want {
			t.Fatalf("path %s, want %s", last, want)
		}
	}
}

// TestSpecial holds the eight-byte check of string text to the byte-by-byte one: its lowest
// mark is the first byte that is not plain, and it marks none when all eight are.
func TestSpecial(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pick := []byte{0, 0x1f, 0x20, 0x21, '"', '\\', 'a', 0x7f, 0x80, 0xff, 0x5b, 0x5d}
	for n := 0; n < 200000; n++ {
		var b [8]byte
		for i := range b {
			if n%2 == 0 {
				b[i] = byte(rng.Uint32())
			} else {
				b[i] = pick[rng.IntN(len(pick))]
			}
		}
		want := 8
		for i, c := range b {
			if !plain[c] {
				want = i
				break
			}
		}
		got := 8
		if m := special(binary.LittleEndian.Uint64(b[:])); m != 0 {
			got = bits.TrailingZeros64(m) >> 3
		}
		if got != want {
			t.Fatalf("% x: first special byte %d, want %d", b, got, want)
		}
	}
}
