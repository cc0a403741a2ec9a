package jsonlex

import (
	"bytes"
	"fmt"
	"testing"
)

// conversation is a tool-using conversation of about 300 KB, as an agent sends it late in a
// session.
func conversation() []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"claude-sonnet-4-5","max_tokens":8192,"tools":[`)
	for i := 0; i < 20; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":"tool_%d","description":"Does thing %d.","input_schema":{"type":"object","properties":{"path":{"type":"string"}}}}`, i, i)
	}
	b.WriteString(`],"messages":[`)
	for i := 0; i < 200; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"role":"assistant","content":[{"type":"tool_use","id":"toolu_%d","input":{"path":"src/file_%d.go","n":%d}}]},`, i, i, i)
		fmt.Fprintf(&b, `{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_%d","content":[{"type":"text","text":%q}]}]}`, i, bytes.Repeat([]byte("package main\n\tfunc f() { return \"é\" }\n"), 20))
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

func benchLex(b *testing.B, mode Mode) {
	text := conversation()
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	var l Lexer
	for b.Loop() {
		l.Reset(text, mode, 512)
		for {
			if k := l.Next().Kind; k == End || k == Invalid {
				break
			}
		}
	}
	if l.Err() != nil {
		b.Fatal(l.Err())
	}
}

func BenchmarkStrict(b *testing.B)  { benchLex(b, Strict) }
func BenchmarkLenient(b *testing.B) { benchLex(b, Lenient) }
