package mcp

import (
	"strconv"
	"strings"
	"testing"
)

// BenchmarkParse: a call as the SDK sends it, and one with 1 MiB of arguments.
func BenchmarkParse(b *testing.B) {
	small := []byte(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"},"name":"read","arguments":{"n":1.5e-7,"opts":{"a":[true,null,1e+21],"z":1},"path":"/tmp/a"}}}`)
	var sb strings.Builder
	sb.WriteString(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"write","arguments":{"files":[`)
	for i := 0; sb.Len() < 1<<20; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`{"path":"/src/file` + strconv.Itoa(i) + `.go","content":"package main\n\nfunc main() {}\n","mode":420}`)
	}
	sb.WriteString(`]}}}`)
	large := []byte(sb.String())
	for _, c := range []struct {
		name string
		body []byte
	}{{"call", small}, {"1MiB", large}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(c.body)))
			for b.Loop() {
				if Parse(c.body).Ambiguous() {
					b.Fatal("ambiguous")
				}
			}
		})
	}
}

// BenchmarkStreamCut: a tools/list answer of 200 tools as an event stream, fed 4 KiB at a time,
// half of the tools cut.
func BenchmarkStreamCut(b *testing.B) {
	tools := make([]string, 200)
	for i := range tools {
		tools[i] = `{"name":"tool` + strconv.Itoa(i) + `","description":"` + strings.Repeat("Does a thing. ", 20) + `","inputSchema":{"type":"object","properties":{"path":{"type":"string"}}}}`
	}
	stream := []byte("event: message\nid: 1\ndata: " + listAnswer("1", tools...) + "\n\n")
	f := &Filter{Lists: []ID{ID("1")}, Allow: func(name string) bool { return name[len(name)-1]%2 == 0 }}
	b.ReportAllocs()
	b.SetBytes(int64(len(stream)))
	var out []byte
	for b.Loop() {
		s := f.Stream(0)
		out = out[:0]
		for p := stream; len(p) > 0; {
			n := min(4096, len(p))
			var err error
			if out, err = s.Feed(out, p[:n]); err != nil {
				b.Fatal(err)
			}
			p = p[n:]
		}
		if s.Report().Hidden != 100 {
			b.Fatal(s.Report().Hidden)
		}
	}
}

// BenchmarkParseDeep: the worst shape for canonical JSON, objects nested to the depth limit
// around a string that fills the body: each level's canonical form holds all below it, and the
// copy budget stops the walk after a few levels.
func BenchmarkParseDeep(b *testing.B) {
	levels := MaxDepth - 3
	head := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"w","arguments":` + strings.Repeat(`{"a":`, levels)
	tail := strings.Repeat("}", levels) + "}}"
	body := []byte(head + `"` + strings.Repeat("x", MaxBody-len(head)-len(tail)-2) + `"` + tail)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if !Parse(body).Ambiguous() {
			b.Fatal("read to the end")
		}
	}
}
