package tracing

import (
	"bytes"
	"math"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// TestWireAsProtowire: wire.go writes the bytes protowire writes, at every varint length's
// edges.
func TestWireAsProtowire(t *testing.T) {
	var vs []uint64
	for shift := 0; shift < 64; shift += 7 {
		v := uint64(1) << shift
		vs = append(vs, v-1, v, v+1)
	}
	vs = append(vs, math.MaxUint64)
	for _, v := range vs {
		if got, want := appendVarint(nil, v), protowire.AppendVarint(nil, v); !bytes.Equal(got, want) || sizeVarint(v) != protowire.SizeVarint(v) {
			t.Errorf("varint %d: % x (%d), want % x (%d)", v, got, sizeVarint(v), want, protowire.SizeVarint(v))
		}
		if got, want := appendFixed64(nil, v), protowire.AppendFixed64(nil, v); !bytes.Equal(got, want) {
			t.Errorf("fixed64 %d: % x, want % x", v, got, want)
		}
		if got, want := appendFixed32(nil, uint32(v)), protowire.AppendFixed32(nil, uint32(v)); !bytes.Equal(got, want) {
			t.Errorf("fixed32 %d: % x, want % x", uint32(v), got, want)
		}
	}
	for _, num := range []fieldNumber{1, 15, 16, 2047, 2048, 1<<29 - 1} {
		for _, typ := range []wireType{varintType, fixed64Type, bytesType, fixed32Type} {
			got, want := appendTag(nil, num, typ), protowire.AppendTag(nil, protowire.Number(num), protowire.Type(typ))
			if !bytes.Equal(got, want) || sizeTag(num) != protowire.SizeTag(protowire.Number(num)) {
				t.Errorf("tag %d/%d: % x, want % x", num, typ, got, want)
			}
		}
	}
	for _, n := range []int{0, 1, 127, 128, 300, 1 << 16} {
		v := bytes.Repeat([]byte{'x'}, n)
		if got, want := appendWireBytes(nil, v), protowire.AppendBytes(nil, v); !bytes.Equal(got, want) || sizeBytes(n) != protowire.SizeBytes(n) {
			t.Errorf("bytes of %d: %d bytes, want %d", n, len(got), len(want))
		}
		if got, want := appendWireString(nil, string(v)), protowire.AppendString(nil, string(v)); !bytes.Equal(got, want) {
			t.Errorf("string of %d: %d bytes, want %d", n, len(got), len(want))
		}
	}
}
