// Package wsframe reads WebSocket frames (RFC 6455) as the gate relays them: frame headers,
// masking, and the messages of one direction reassembled from their fragments up to a limit. It
// does no I/O.
package wsframe

import (
	"encoding/binary"
	"errors"
	"unicode/utf8"
)

// Opcode is a frame's opcode.
type Opcode uint8

// The opcodes RFC 6455 defines; the others are reserved, and refused.
const (
	Continuation Opcode = 0x0
	Text         Opcode = 0x1
	Binary       Opcode = 0x2
	Close        Opcode = 0x8
	Ping         Opcode = 0x9
	Pong         Opcode = 0xa
)

// Control reports a control frame (close, ping, pong).
func (o Opcode) Control() bool { return o&0x8 != 0 }

func (o Opcode) String() string {
	switch o {
	case Continuation:
		return "continuation"
	case Text:
		return "text"
	case Binary:
		return "binary"
	case Close:
		return "close"
	case Ping:
		return "ping"
	case Pong:
		return "pong"
	}
	return "reserved"
}

// Close codes the gate sends (RFC 6455 7.4.1).
const (
	CloseNormal        uint16 = 1000
	CloseProtocolError uint16 = 1002
	CloseInvalidData   uint16 = 1007 // a text message or close reason that is not UTF-8
	ClosePolicy        uint16 = 1008 // a message the gate refuses
	CloseTooBig        uint16 = 1009
	CloseInternalError uint16 = 1011
	maxControlPayload         = 125
	maxCloseReason            = maxControlPayload - 2
)

// MaxHeader is the longest frame header: 2 bytes, an 8-byte length and a 4-byte mask key.
const MaxHeader = 14

// MaxFragments bounds the frames of one data message. Browsers send each message as one frame,
// and the common libraries fragment only when asked to or when a message outgrows their write
// buffer (gorilla/websocket: 4 KiB by default, so 4,096 frames carry 16 MiB, twice the default
// buffer_limit); a message in more frames than that is refused (1009).
const MaxFragments = 4096

// Header is one frame's header.
type Header struct {
	Fin    bool
	RSV    byte // the three reserved bits, as bits 6..4 of the first byte
	Op     Opcode
	Masked bool
	Key    [4]byte
	Length int64 // of the payload
	// Size is the header's own length as it was sent (set by Parse): 2 to 14 bytes, whatever
	// length encoding the sender chose.
	Size int
}

// FrameLen is the whole frame's length as it was sent: its header and its payload.
func (h Header) FrameLen() int64 { return h.headerLen() + h.Length }

// headerLen is the header's length as it was sent; a header not from Parse counts as its
// shortest encoding.
func (h Header) headerLen() int64 {
	n := 2
	switch {
	case h.Length > 0xffff:
		n += 8
	case h.Length > 125:
		n += 2
	}
	if h.Masked {
		n += 4
	}
	return int64(max(h.Size, n))
}

// Error is a frame the gate refuses, and the close code that answers it. Reason is fixed
// public text.
type Error struct {
	Code   uint16
	Reason string
}

func (e *Error) Error() string { return "websocket: " + e.Reason }

func protocolError(reason string) *Error { return &Error{Code: CloseProtocolError, Reason: reason} }

// HeaderLen is the length of the frame header that starts with the two bytes b0 b1.
func HeaderLen(b0, b1 byte) int {
	n := 2
	switch b1 & 0x7f {
	case 126:
		n += 2
	case 127:
		n += 8
	}
	if b1&0x80 != 0 {
		n += 4
	}
	return n
}

// Parse reads the frame header at the start of b. n is its length, or 0 when b holds only part
// of it (read more and call again).
func Parse(b []byte) (h Header, n int, err error) {
	if len(b) < 2 {
		return h, 0, nil
	}
	n = HeaderLen(b[0], b[1])
	if len(b) < n {
		return h, 0, nil
	}
	h.Size = n
	h.Fin = b[0]&0x80 != 0
	h.RSV = b[0] & 0x70
	h.Op = Opcode(b[0] & 0x0f)
	h.Masked = b[1]&0x80 != 0
	i := 2
	switch l := b[1] & 0x7f; l {
	case 126:
		h.Length = int64(binary.BigEndian.Uint16(b[2:]))
		i += 2
	case 127:
		u := binary.BigEndian.Uint64(b[2:])
		if u>>63 != 0 {
			return h, n, protocolError("a frame length with its most significant bit set")
		}
		h.Length = int64(u)
		i += 8
	default:
		h.Length = int64(l)
	}
	if h.Masked {
		copy(h.Key[:], b[i:i+4])
	}
	return h, n, nil
}

// Unmask XORs b, the payload bytes from offset pos, with key; masking again undoes it.
func Unmask(b []byte, key [4]byte, pos int64) {
	for i := range b {
		b[i] ^= key[(pos+int64(i))&3]
	}
}

// AppendHeader appends the header of one whole frame (FIN set, no reserved bits) with op and a
// payload of n bytes, in the shortest length encoding, with key as its mask key when key is not
// nil (a client's frame).
func AppendHeader(dst []byte, op Opcode, key *[4]byte, n int64) []byte {
	dst = append(dst, 0x80|byte(op))
	m := byte(0)
	if key != nil {
		m = 0x80
	}
	switch {
	case n < 126:
		dst = append(dst, m|byte(n))
	case n <= 0xffff:
		dst = append(dst, m|126)
		dst = binary.BigEndian.AppendUint16(dst, uint16(n))
	default:
		dst = append(dst, m|127)
		dst = binary.BigEndian.AppendUint64(dst, uint64(n))
	}
	if key != nil {
		dst = append(dst, key[:]...)
	}
	return dst
}

// AppendFrame appends one whole frame (FIN set) with op and payload, masked with key when key
// is not nil (a client's frame).
func AppendFrame(dst []byte, op Opcode, key *[4]byte, payload []byte) []byte {
	dst = AppendHeader(dst, op, key, int64(len(payload)))
	start := len(dst)
	dst = append(dst, payload...)
	if key != nil {
		Unmask(dst[start:], *key, 0)
	}
	return dst
}

// ClosePayload is a close frame's payload: code, then reason cut to what fits (123 bytes, at a
// character boundary).
func ClosePayload(code uint16, reason string) []byte {
	if len(reason) > maxCloseReason {
		reason = reason[:maxCloseReason]
		for !utf8.ValidString(reason) {
			reason = reason[:len(reason)-1]
		}
	}
	return append(binary.BigEndian.AppendUint16(nil, code), reason...)
}

// CheckPayload checks the payload of a whole message as RFC 6455 has its receiver check it: a
// text message is UTF-8 (1007); a close frame's payload is empty, or a close code a peer may
// send (1000 to 1003, 1007 to 1014, 3000 to 4999) followed by a UTF-8 reason (1002, 1007).
func CheckPayload(op Opcode, p []byte) error {
	switch op {
	case Text:
		if !utf8.Valid(p) {
			return &Error{Code: CloseInvalidData, Reason: "a text message that is not UTF-8"}
		}
	case Close:
		if len(p) == 0 {
			return nil
		}
		if len(p) < 2 {
			return protocolError("a close frame with a one-byte payload")
		}
		switch c := binary.BigEndian.Uint16(p); {
		case c >= 1000 && c <= 1003, c >= 1007 && c <= 1014, c >= 3000 && c <= 4999:
		default:
			return protocolError("a close frame with a close code a peer may not send")
		}
		if !utf8.Valid(p[2:]) {
			return &Error{Code: CloseInvalidData, Reason: "a close frame whose reason is not UTF-8"}
		}
	}
	return nil
}

// Assembler checks the frames of one direction in order and follows its messages as they are
// reassembled. The zero value is not usable: set Client and Limit.
type Assembler struct {
	// Client reports the client's direction: its frames must be masked, the server's must not.
	Client bool
	// Limit bounds a data message in bytes: its frames as they were sent, headers included, so
	// that an empty frame costs its header.
	Limit int64

	open   bool   // a fragmented message has begun
	op     Opcode // its opcode
	size   int64  // its frames' bytes so far (of the message just ended, once it has)
	frames int    // its frames so far
	closed bool   // a close frame has been read: nothing may follow it
}

// ErrTooBig is the Error of a message over the Assembler's Limit.
var ErrTooBig = &Error{Code: CloseTooBig, Reason: "a message larger than the gate inspects"}

// ErrFragments is the Error of a message in more than MaxFragments frames.
var ErrFragments = &Error{Code: CloseTooBig, Reason: "a message in more fragments than the gate reassembles"}

// Begin checks h, the next frame's header, against the direction's state before its payload
// is read: nothing after a close frame, no reserved bits (the gate negotiates no extension), a
// known opcode, whole control frames of at most 125 bytes, the masking of the direction,
// continuations only inside a fragmented message and a new message only outside one, at most
// MaxFragments frames to a message, and the message within Limit.
func (a *Assembler) Begin(h Header) error {
	switch {
	case a.closed:
		return protocolError("a frame after the close frame")
	case h.RSV != 0:
		return protocolError("a frame with reserved bits set (no extension was negotiated)")
	case h.Op > Binary && h.Op < Close || h.Op > Pong:
		return protocolError("a frame with a reserved opcode")
	case h.Masked != a.Client:
		if a.Client {
			return protocolError("a client frame that is not masked")
		}
		return protocolError("a server frame that is masked")
	}
	if h.Op.Control() {
		if !h.Fin || h.Length > maxControlPayload {
			return protocolError("a control frame fragmented or over 125 bytes")
		}
		return nil
	}
	switch {
	case h.Op == Continuation && !a.open:
		return protocolError("a continuation frame outside a fragmented message")
	case h.Op != Continuation && a.open:
		return protocolError("a new message inside a fragmented one")
	case a.open && a.frames >= MaxFragments:
		return ErrFragments
	}
	// (Compared so, a length field near 2^63 cannot overflow the sum.)
	if h.Length > a.Limit-a.Pending()-h.headerLen() {
		return ErrTooBig
	}
	return nil
}

// End records that the frame h, begun with Begin, has been read. It reports whether the frame
// ends a message (a control frame is a message of its own), and the message's opcode.
func (a *Assembler) End(h Header) (done bool, op Opcode) {
	if h.Op.Control() {
		a.closed = a.closed || h.Op == Close
		return true, h.Op
	}
	if h.Op != Continuation {
		a.open, a.op, a.size, a.frames = true, h.Op, 0, 0
	}
	a.size += h.FrameLen()
	a.frames++
	if !h.Fin {
		return false, a.op
	}
	a.open = false
	return true, a.op
}

// Pending is the size of the fragmented message begun and not ended (its frames' bytes,
// headers included), or 0.
func (a *Assembler) Pending() int64 {
	if !a.open {
		return 0
	}
	return a.size
}

// Size is the size of the data message being reassembled or, once its last frame has ended,
// of that message: its frames' bytes as they were sent, headers included.
func (a *Assembler) Size() int64 { return a.size }

// Tracker follows the frames of a direction as the gate writes them (the origin's to the agent,
// the agent's as the gate sends them on), chunk by chunk, to count its messages and bytes and to
// know where one frame ends and the next begins.
type Tracker struct {
	hdr      [MaxHeader]byte
	have     int   // header bytes gathered
	left     int64 // payload bytes of the current frame still to come
	Messages int64 // whole messages (data messages' last frames, and control frames)
	Bytes    int64 // the bytes fed: frames, headers included
	Err      error // a header that does not parse: the tracker stops following
}

// Feed follows the bytes p.
func (t *Tracker) Feed(p []byte) {
	t.Bytes += int64(len(p))
	for len(p) > 0 && t.Err == nil {
		if t.left > 0 {
			k := int64(len(p))
			if k > t.left {
				k = t.left
			}
			t.left -= k
			p = p[k:]
			continue
		}
		need := 2
		if t.have >= 2 {
			need = HeaderLen(t.hdr[0], t.hdr[1])
		}
		k := copy(t.hdr[t.have:need], p)
		t.have += k
		p = p[k:]
		if t.have < need {
			continue
		}
		if t.have == 2 && HeaderLen(t.hdr[0], t.hdr[1]) > 2 {
			continue
		}
		h, n, err := Parse(t.hdr[:t.have])
		if err != nil || n == 0 {
			t.Err = errors.New("websocket: a frame header that does not parse")
			return
		}
		t.have, t.left = 0, h.Length
		if h.Fin || h.Op.Control() {
			t.Messages++
		}
	}
}

// AtBoundary reports that the bytes fed so far end a frame: a frame of the gate's own may be
// sent next.
func (t *Tracker) AtBoundary() bool { return t.Err == nil && t.have == 0 && t.left == 0 }
