package mcp

import (
	"bytes"
	"strconv"
	"testing"
)

// BenchmarkStreamHeld: the memory a Stream that cuts holds for one event in flight, fed 16 KiB
// at a time as the gate reads it: an event of 64 KiB, 1 MiB (the gate's bound) and just under MaxEvent, reported
// as held-bytes (the capacity of the stream's buffers once the event's last byte but its blank
// line is in) beside the allocations of the whole event.
func BenchmarkStreamHeld(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20, MaxEvent - 1024} {
		head := []byte(`data: {"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"read"}],"pad":"`)
		pad := bytes.Repeat([]byte("x"), size-len(head)-4)
		event := append(append(head, pad...), `"}}`+"\n"...)
		b.Run(byteSize(size), func(b *testing.B) {
			var held int
			b.ReportAllocs()
			for b.Loop() {
				f := &Filter{Lists: []ID{ID("1")}}
				s := f.Stream(0)
				var out []byte
				for p := event; len(p) > 0; {
					n := min(16<<10, len(p))
					out, _ = s.Feed(out[:0], p[:n])
					p = p[n:]
				}
				held = cap(s.r.raw) + cap(s.r.line) + s.r.data.Cap()
				if out, _ = s.Feed(out[:0], []byte("\n")); len(out) != len(event)+1 {
					b.Fatalf("passed %d bytes of %d", len(out), len(event)+1)
				}
			}
			b.ReportMetric(float64(held), "held-bytes")
		})
	}
}

func byteSize(n int) string { return strconv.Itoa(n>>10) + "KiB" }
