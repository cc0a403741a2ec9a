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
		if tr.Messages != 2 || tr.Bytes != 311 || !tr.AtBoundary() {
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
