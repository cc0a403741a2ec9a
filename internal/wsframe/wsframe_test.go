package wsframe

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func frame(fin bool, rsv byte, op Opcode, key *[4]byte, payload string) []byte {
	f := AppendFrame(nil, op, key, []byte(payload))
	if !fin {
		f[0] &^= 0x80
	}
	f[0] |= rsv
	return f
}

var key = &[4]byte{0xde, 0xad, 0xbe, 0xef}

func TestParseAndUnmask(t *testing.T) {
	for _, n := range []int{0, 5, 125, 126, 65535, 65536} {
		p := strings.Repeat("x", n)
		f := frame(true, 0, Binary, key, p)
		h, hn, err := Parse(f)
		if err != nil || hn == 0 || h.Length != int64(n) || !h.Masked || h.Op != Binary || !h.Fin {
			t.Fatalf("%d bytes: %+v %d %v", n, h, hn, err)
		}
		if _, short, _ := Parse(f[:hn-1]); short != 0 {
			t.Fatalf("%d bytes: a partial header parsed", n)
		}
		got := append([]byte(nil), f[hn:]...)
		Unmask(got, h.Key, 0)
		if string(got) != p {
			t.Fatalf("%d bytes: unmasked payload differs", n)
		}
	}
	bad := []byte{0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 1}
	if _, _, err := Parse(bad); err == nil {
		t.Fatal("a length with the top bit set parsed")
	}
}

// TestAssembler: each frame the gate refuses in the agent's direction, and a fragmented
// message reassembled across an interleaved ping.
func TestAssembler(t *testing.T) {
	cases := []struct {
		name   string
		frames [][]byte
		code   uint16 // 0: all accepted
	}{
		{"fragments with a ping between", [][]byte{frame(false, 0, Text, key, "ab"), frame(true, 0, Ping, key, "p"), frame(true, 0, Continuation, key, "cd")}, 0},
		{"reserved bits (a compressed frame)", [][]byte{frame(true, 0x40, Text, key, "x")}, CloseProtocolError},
		{"a reserved opcode", [][]byte{frame(true, 0, 3, key, "x")}, CloseProtocolError},
		{"an unmasked client frame", [][]byte{frame(true, 0, Text, nil, "x")}, CloseProtocolError},
		{"a fragmented control frame", [][]byte{frame(false, 0, Ping, key, "x")}, CloseProtocolError},
		{"a control frame over 125 bytes", [][]byte{frame(true, 0, Ping, key, strings.Repeat("x", 126))}, CloseProtocolError},
		{"a continuation outside a message", [][]byte{frame(true, 0, Continuation, key, "x")}, CloseProtocolError},
		{"a new message inside a fragmented one", [][]byte{frame(false, 0, Text, key, "x"), frame(true, 0, Text, key, "y")}, CloseProtocolError},
		{"a message over the limit, in fragments", [][]byte{frame(false, 0, Binary, key, strings.Repeat("x", 60)), frame(true, 0, Continuation, key, strings.Repeat("x", 60))}, CloseTooBig},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := Assembler{Client: true, Limit: 100}
			var msgs []Opcode
			for _, f := range c.frames {
				h, _, err := Parse(f)
				if err == nil {
					err = a.Begin(h)
				}
				if err != nil {
					var e *Error
					if !errors.As(err, &e) || e.Code != c.code {
						t.Fatalf("refused with %v, want close code %d", err, c.code)
					}
					return
				}
				if done, op := a.End(h); done {
					msgs = append(msgs, op)
				}
			}
			if c.code != 0 {
				t.Fatalf("accepted; want close code %d", c.code)
			}
			if len(msgs) != 2 || msgs[0] != Ping || msgs[1] != Text {
				t.Fatalf("messages %v", msgs)
			}
		})
	}
}

// header is a frame header with the length field n, in the encoding of width bytes (0: in the
// second byte), masked with key.
func header(op Opcode, fin bool, width int, n uint64) []byte {
	b := []byte{byte(op), 0x80}
	if fin {
		b[0] |= 0x80
	}
	switch width {
	case 0:
		b[1] |= byte(n)
	case 2:
		b[1] |= 126
		b = append(b, byte(n>>8), byte(n))
	default:
		b[1] |= 127
		for i := 7; i >= 0; i-- {
			b = append(b, byte(n>>(8*i)))
		}
	}
	return append(b, key[:]...)
}

// TestAssemblerCountsFrames: a message's frames count against Limit with their headers as sent
// (an empty frame costs 6 bytes, a 5-byte payload in the 8-byte length encoding 19), a message
// takes at most MaxFragments frames, a length field near 2^63 is too big rather than an
// overflow, one message's size is not carried into the next, and nothing may follow a close
// frame.
func TestAssemblerCountsFrames(t *testing.T) {
	run := func(a *Assembler, frames [][]byte) (n int, err error) {
		for _, f := range frames {
			h, hn, err := Parse(f)
			if err == nil {
				err = a.Begin(h)
			}
			if err != nil {
				return n, err
			}
			if int64(len(f)-hn) >= h.Length { // a header alone stands for its frame
				a.End(h)
			}
			n++
		}
		return n, nil
	}
	empties := func(first []byte, k int) [][]byte {
		fs := [][]byte{first}
		for range k {
			fs = append(fs, frame(false, 0, Continuation, key, ""))
		}
		return fs
	}
	t.Run("empty continuations pass the limit", func(t *testing.T) {
		a := Assembler{Client: true, Limit: 100}
		n, err := run(&a, empties(frame(false, 0, Text, key, "a"), 100))
		// 7 bytes, then 6 a frame: the 16th empty frame would make 103.
		if err != ErrTooBig || n != 16 || a.Pending() != 7+15*6 {
			t.Fatalf("%d frames taken, pending %d, then %v", n, a.Pending(), err)
		}
	})
	t.Run("the fragment cap", func(t *testing.T) {
		a := Assembler{Client: true, Limit: 1 << 30}
		n, err := run(&a, empties(frame(false, 0, Binary, key, "a"), MaxFragments+5))
		if err != ErrFragments || n != MaxFragments {
			t.Fatalf("%d frames taken, then %v", n, err)
		}
		var e *Error
		if !errors.As(err, &e) || e.Code != CloseTooBig {
			t.Fatalf("%v", err)
		}
		a = Assembler{Client: true, Limit: 1 << 30}
		fs := empties(frame(false, 0, Binary, key, "a"), MaxFragments-2)
		fs = append(fs, frame(true, 0, Continuation, key, ""))
		if n, err := run(&a, fs); err != nil || n != MaxFragments {
			t.Fatalf("a message of exactly MaxFragments frames: %d, %v", n, err)
		}
	})
	t.Run("the header as sent", func(t *testing.T) {
		f := append(header(Text, true, 8, 5), "hello"...)
		h, _, _ := Parse(f)
		if h.Size != 14 || h.FrameLen() != 19 {
			t.Fatalf("size %d, frame %d", h.Size, h.FrameLen())
		}
		a := Assembler{Client: true, Limit: 18}
		if _, err := run(&a, [][]byte{f}); err != ErrTooBig {
			t.Fatalf("19 bytes under a limit of 18: %v", err)
		}
		a = Assembler{Client: true, Limit: 19}
		if _, err := run(&a, [][]byte{f}); err != nil || a.Size() != 19 {
			t.Fatalf("19 bytes under a limit of 19: %v, size %d", err, a.Size())
		}
	})
	for _, n := range []uint64{1 << 62, 1<<63 - 1, 1<<63 - 14} {
		a := Assembler{Client: true, Limit: 1 << 20}
		if _, err := run(&a, [][]byte{header(Binary, true, 8, n)}); err != ErrTooBig {
			t.Fatalf("a length field of %d: %v", n, err)
		}
		a = Assembler{Client: true, Limit: 1 << 20}
		if _, err := run(&a, [][]byte{frame(false, 0, Binary, key, "x"), header(Continuation, true, 8, n)}); err != ErrTooBig {
			t.Fatalf("a continuation's length field of %d: %v", n, err)
		}
	}
	t.Run("one message after another", func(t *testing.T) {
		a := Assembler{Client: true, Limit: 100}
		m := strings.Repeat("x", 60)
		if n, err := run(&a, [][]byte{frame(true, 0, Text, key, m), frame(true, 0, Text, key, m), frame(false, 0, Text, key, m), frame(true, 0, Continuation, key, "")}); err != nil || n != 4 {
			t.Fatalf("three messages of 66 bytes under a limit of 100: %d, %v", n, err)
		}
	})
	t.Run("a frame after the close", func(t *testing.T) {
		a := Assembler{Client: true, Limit: 100}
		n, err := run(&a, [][]byte{frame(true, 0, Close, key, "\x03\xe8"), frame(true, 0, Text, key, "late")})
		var e *Error
		if n != 1 || !errors.As(err, &e) || e.Code != CloseProtocolError {
			t.Fatalf("%d, %v", n, err)
		}
	})
}

// TestCheckPayload: what RFC 6455 has a receiver refuse in a whole message's payload.
func TestCheckPayload(t *testing.T) {
	for _, c := range []struct {
		name string
		op   Opcode
		p    string
		code uint16
	}{
		{"text", Text, "héllo", 0},
		{"text, invalid", Text, "ab\xffcd", CloseInvalidData},
		{"text, an overlong 'g'", Text, "\xc1\xa7hp_", CloseInvalidData},
		{"text, a surrogate", Text, "\xed\xa0\x80", CloseInvalidData},
		{"binary, anything", Binary, "\xff\xfe", 0},
		{"ping, anything", Ping, "\xff", 0},
		{"close, empty", Close, "", 0},
		{"close, a code", Close, "\x03\xe8", 0},
		{"close, an application's code and reason", Close, "\x0f\xa0bye", 0},
		{"close, one byte", Close, "\x03", CloseProtocolError},
		{"close, 1005", Close, "\x03\xed", CloseProtocolError},
		{"close, 1006", Close, "\x03\xee", CloseProtocolError},
		{"close, 999", Close, "\x03\xe7", CloseProtocolError},
		{"close, 2999", Close, "\x0b\xb7", CloseProtocolError},
		{"close, 5000", Close, "\x13\x88", CloseProtocolError},
		{"close, a reason not UTF-8", Close, "\x03\xe8\xff", CloseInvalidData},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := CheckPayload(c.op, []byte(c.p))
			var e *Error
			if c.code == 0 && err != nil || c.code != 0 && (!errors.As(err, &e) || e.Code != c.code) {
				t.Fatalf("%v, want close code %d", err, c.code)
			}
		})
	}
}

// TestAppendFrameIsMinimal: the gate's frames take the shortest length encoding.
func TestAppendFrameIsMinimal(t *testing.T) {
	for n, want := range map[int]int{0: 6, 125: 6, 126: 8, 65535: 8, 65536: 14} {
		f := AppendFrame(nil, Binary, key, make([]byte, n))
		h, hn, err := Parse(f)
		if err != nil || hn != want || h.Length != int64(n) || !h.Fin || h.Op != Binary || h.Key != *key {
			t.Fatalf("%d bytes: header %d (want %d), %+v %v", n, hn, want, h, err)
		}
	}
}

// TestTracker: fed in every split, the tracker counts the messages and knows the boundaries.
func TestTracker(t *testing.T) {
	var stream []byte
	stream = append(stream, frame(false, 0, Text, nil, "hello ")...)
	stream = append(stream, frame(true, 0, Continuation, nil, "world")...)
	stream = append(stream, frame(true, 0, Binary, nil, strings.Repeat("b", 300))...)
	for split := 1; split < len(stream); split++ {
		var tr Tracker
		tr.Feed(stream[:split])
		tr.Feed(stream[split:])
		if tr.Messages != 2 || tr.Bytes != int64(len(stream)) || !tr.AtBoundary() {
			t.Fatalf("split at %d: %d messages, %d bytes, boundary %v", split, tr.Messages, tr.Bytes, tr.AtBoundary())
		}
	}
	var tr Tracker
	tr.Feed(stream[:3])
	if tr.AtBoundary() {
		t.Fatal("a boundary inside a frame")
	}
}

func TestClosePayloadFits(t *testing.T) {
	p := ClosePayload(ClosePolicy, strings.Repeat("é", 100))
	if len(p) > 125 || !bytes.HasPrefix(p, []byte{0x03, 0xf0}) {
		t.Fatalf("%d bytes: %x", len(p), p[:2])
	}
}

// FuzzFrames feeds agent-controlled bytes to Parse, the Assembler and the Tracker: no panic,
// and the work is linear.
func FuzzFrames(f *testing.F) {
	f.Add(frame(false, 0, Text, key, "ab"))
	f.Add(frame(true, 0, Close, key, "\x03\xe8bye"))
	f.Add([]byte{0x82, 127, 0xff, 0, 0, 0, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		var tr Tracker
		tr.Feed(b)
		a := Assembler{Client: true, Limit: 1 << 20}
		for len(b) > 0 {
			h, n, err := Parse(b)
			if err != nil || n == 0 || a.Begin(h) != nil || h.Length > int64(len(b)-n) {
				return
			}
			a.End(h)
			b = b[n+int(h.Length):]
		}
	})
}
