package tracing

import (
	"encoding/binary"
	"math/bits"
)

// Protobuf's wire format, the little of it the exporter writes (otlp.go): tags, varints,
// fixed-width integers and length-delimited bytes, as protowire writes them, without linking the
// protobuf module (the tests decode the bytes with the generated types).
type (
	fieldNumber int32
	wireType    int8
)

const (
	varintType  wireType = 0
	fixed64Type wireType = 1
	bytesType   wireType = 2
	fixed32Type wireType = 5
)

func appendTag(b []byte, num fieldNumber, typ wireType) []byte {
	return appendVarint(b, uint64(num)<<3|uint64(typ&7))
}

func appendVarint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }

func appendFixed32(b []byte, v uint32) []byte { return binary.LittleEndian.AppendUint32(b, v) }

func appendFixed64(b []byte, v uint64) []byte { return binary.LittleEndian.AppendUint64(b, v) }

func appendWireBytes(b, v []byte) []byte { return append(appendVarint(b, uint64(len(v))), v...) }

func appendWireString(b []byte, v string) []byte {
	return append(appendVarint(b, uint64(len(v))), v...)
}

// sizeVarint is the length of v as a varint.
func sizeVarint(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }

func sizeTag(num fieldNumber) int { return sizeVarint(uint64(num) << 3) }

// sizeBytes is the length of a length-delimited field's length and its n bytes.
func sizeBytes(n int) int { return sizeVarint(uint64(n)) + n }
