package transport

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The gate's watch on the frames of an HTTP/2 connection inside a tunnel. golang.org/x/net's
// server reads the frames and refuses what HTTP/2 forbids, but it tells the gate's handler
// neither the id of its stream nor anything of a stream it refuses itself. So the connection it
// reads and writes is the TLS connection wrapped (H2Conn), and the gate follows the frame
// headers both ways (9 bytes a frame; payloads pass untouched and uncopied):
//
//   - On the way in, a header block that opens a stream (HEADERS with a new odd id, and its
//     CONTINUATIONs) gets one field more at its end, appended to its last frame (or, when that
//     frame is full or padded, in a CONTINUATION frame of the gate's): x-lockhttp-stream, the
//     connection's random token and the stream id. The handler takes it
//     out before anything decides on the header (streamOf): that is the stream id of the record,
//     read from the client's own frames and not from x/net's internals. HPACK blocks are
//     concatenations, and a literal without indexing leaves the dynamic table alone, so the
//     field changes nothing else of the block. A block that swallows it (one that ends inside
//     a representation, which HTTP/2 forbids) leaves no valid mark, and is refused.
//   - A header block that opens a stream waits, before x/net reads it, until every stream
//     opened before it has reached its handler, where its header is charged to the held bytes
//     (h2Streams.awaitHandlers): x/net decodes a block and holds it until the handler runs, and
//     the gate cannot count it sooner.
//   - On the way out, a stream that x/net resets or answers itself (a 400 or 431 of its own)
//     before any handler claimed it was refused by x/net: its audit record is written before
//     the frame that ends it leaves the gate (h2Streams). A GOAWAY with an error code ends the
//     connection's record.

// H2MarkHeader is the field the gate appends to each header block that opens a stream, as
// net/http canonicalises it.
const (
	H2MarkName   = "x-lockhttp-stream"
	H2MarkHeader = "X-Lockhttp-Stream"
)

// H2Conn is the TLS connection of one HTTP/2 connection inside a tunnel, as x/net's server
// reads and writes it.
type H2Conn struct {
	H2Wire
	st    H2Streams
	token string // the connection's mark: token "." stream id

	in h2In // read by x/net's frame reader only (and its preface read before it starts)

	wmu sync.Mutex // guards out
	out h2Out
}

// H2Wire is the connection under an H2Conn: the tunnel's *tls.Conn (a test's fake in the fuzz
// targets). x/net's server takes the TLS state from its ConnectionState.
type H2Wire interface {
	net.Conn
	ConnectionState() tls.ConnectionState
}

// H2MaxFrame is the largest frame the gate reads: HTTP/2's default.
const H2MaxFrame = 16 << 10

// H2Streams is what the gate keeps of one HTTP/2 connection's streams, told what its frames
// show: which streams the client opened or cancelled, what the server answered, reset or ended
// (the gate's h2Streams).
type H2Streams interface {
	// AwaitHandlers waits, before the next frame is read, until the handlers of the streams
	// opened so far have run (or the wait is called off: Unpace).
	AwaitHandlers()
	// Unpace calls the wait off for good.
	Unpace()
	Opened(id uint32)
	Cancelled(id uint32)
	// Answering reports whether x/net is answering stream id itself.
	Answering(id uint32) bool
	AnswerText(id uint32, b []byte)
	AnswerEnded(id uint32)
	Reset(id uint32, code http2.ErrCode)
	GoAway(code http2.ErrCode)
	Answered(id uint32, status int, endStream bool)
}

// NewToken is a random token: an HTTP/2 connection's mark, a framing check's.
func NewToken() string {
	var tok [12]byte
	rand.Read(tok[:])
	return hex.EncodeToString(tok[:])
}

// Token is c's mark: each stream's is Token "." its id.
func (c *H2Conn) Token() string { return c.token }

// NewH2Conn is tc watched for the streams st keeps.
func NewH2Conn(tc H2Wire, st H2Streams) *H2Conn {
	return &H2Conn{H2Wire: tc, st: st, token: NewToken(), in: h2In{preface: len(http2.ClientPreface)}}
}

// StreamOf is the id of the stream r came on, from the gate's mark, which it removes from r's
// header (with any field of that name the client sent: the gate's is the last). ok is false
// when the mark is missing or not this connection's.
func (c *H2Conn) StreamOf(r *http.Request) (id uint32, ok bool) {
	vs := r.Header[H2MarkHeader]
	delete(r.Header, H2MarkHeader)
	if len(vs) == 0 {
		return 0, false
	}
	rest, ok := strings.CutPrefix(vs[len(vs)-1], c.token+".")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(rest, 10, 31)
	if err != nil || n == 0 {
		return 0, false
	}
	return uint32(n), true
}

// h2In follows the client's frames as x/net reads them.
type h2In struct {
	preface int // bytes of the client preface still to pass
	hdr     [9]byte
	hn      int    // bytes of hdr gathered
	pend    []byte // bytes ready for the reader: a frame header, or the gate's CONTINUATION
	left    int    // payload bytes of the current frame still to pass
	after   []byte // the gate's CONTINUATION, to pass once the payload has
	maxID   uint32 // the highest stream id the client opened
	marking uint32 // the stream whose opening header block is still open
}

func (c *H2Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		// Nothing to give: asking the connection for nothing (a *tls.Conn answers 0, nil)
		// would go on without end.
		return 0, nil
	}
	in := &c.in
	for {
		if len(in.pend) > 0 {
			n := copy(p, in.pend)
			in.pend = in.pend[n:]
			return n, nil
		}
		if lim := in.preface + in.left; lim > 0 {
			n, err := c.H2Wire.Read(p[:min(len(p), lim)])
			if in.preface > 0 {
				in.preface -= n
			} else if in.left -= n; in.left == 0 && in.after != nil {
				// The gate's bytes come before the connection's error, which its next read
				// gives again.
				in.pend, in.after, err = in.after, nil, nil
			}
			if n > 0 || err != nil {
				return n, err
			}
			continue
		}
		n, err := c.H2Wire.Read(in.hdr[in.hn:])
		if in.hn += n; in.hn < len(in.hdr) {
			if err != nil {
				return 0, err
			}
			continue
		}
		in.hn = 0
		in.left = int(in.hdr[0])<<16 | int(in.hdr[1])<<8 | int(in.hdr[2])
		c.frameIn()
		in.pend = in.hdr[:]
		if in.left == 0 && in.after != nil {
			in.pend = append(in.hdr[:len(in.hdr):len(in.hdr)], in.after...)
			in.after = nil
		}
	}
}

// frameIn looks at the header of the client's next frame, in c.in.hdr, before x/net reads it:
// it marks a header block that opens a stream, and notes the client's resets.
func (c *H2Conn) frameIn() {
	in := &c.in
	typ, flags := http2.FrameType(in.hdr[3]), http2.Flags(in.hdr[4])
	id := binary.BigEndian.Uint32(in.hdr[5:]) & (1<<31 - 1)
	marking := in.marking
	in.marking = 0
	switch {
	case typ == http2.FrameHeaders && id%2 == 1 && id > in.maxID:
		in.maxID = id
		if marking == 0 {
			// (Inside another stream's header block, this frame is a connection error x/net
			// must see at once: nothing to wait for.)
			c.st.AwaitHandlers()
		}
		c.st.Opened(id)
		marking = id
	case typ == http2.FrameContinuation && id == marking && id != 0:
	case typ == http2.FrameRSTStream:
		c.st.Cancelled(id)
		return
	default:
		return
	}
	if !flags.Has(http2.FlagHeadersEndHeaders) {
		in.marking = marking
		return
	}
	m := c.Mark(id)
	if n := in.left + len(m); !flags.Has(http2.FlagHeadersPadded) && n <= H2MaxFrame {
		// The mark goes at the end of the block's last frame, which grows by its length.
		in.hdr[0], in.hdr[1], in.hdr[2] = byte(n>>16), byte(n>>8), byte(n)
		in.after = m
		return
	}
	// No room in the frame (or padding after the block): the mark comes in a CONTINUATION
	// of its own, which ends the block instead. (x/net closes the connection, rather than reset
	// the stream, when a block it refuses goes on in a CONTINUATION: only a padded or full
	// frame with a malformed block is refused so.)
	in.hdr[4] &^= byte(http2.FlagHeadersEndHeaders)
	f := make([]byte, 9, 9+len(m))
	f[0], f[1], f[2] = byte(len(m)>>16), byte(len(m)>>8), byte(len(m))
	f[3], f[4] = byte(http2.FrameContinuation), byte(http2.FlagContinuationEndHeaders)
	binary.BigEndian.PutUint32(f[5:], id)
	in.after = append(f, m...)
}

// Close closes the connection and ends the pacing (awaitHandlers), whose wait would otherwise
// hold x/net's reader.
func (c *H2Conn) Close() error {
	c.st.Unpace()
	return c.H2Wire.Close()
}

// Mark is the gate's field that ends the header block of stream id: one literal field without
// indexing, x-lockhttp-stream: token.id.
func (c *H2Conn) Mark(id uint32) []byte {
	v := c.token + "." + strconv.FormatUint(uint64(id), 10)
	b := make([]byte, 0, 1+1+len(H2MarkName)+1+len(v)) // both lengths fit a 7-bit prefix
	b = append(b, 0x00, byte(len(H2MarkName)))
	b = append(b, H2MarkName...)
	b = append(b, byte(len(v)))
	return append(b, v...)
}

// h2Out follows the frames x/net writes to the client.
type h2Out struct {
	hdr   [9]byte
	hn    int
	left  int // payload bytes of the current frame still to come
	typ   http2.FrameType
	flags http2.Flags
	id    uint32
	head  [16]byte // the first payload bytes of a frame the watch reads (RST_STREAM, GOAWAY, HEADERS)
	hl    int      // bytes of head gathered
	want  int      // bytes of head wanted; 0 once the frame has been seen
	data  bool     // the current DATA frame is an answer x/net makes itself: its text is kept
}

// Write follows the frames of p; what they end (a stream refused by x/net, the connection) is
// recorded before p is written.
func (c *H2Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	c.follow(p)
	c.wmu.Unlock()
	return c.H2Wire.Write(p)
}

func (c *H2Conn) follow(p []byte) {
	o := &c.out
	for len(p) > 0 {
		if o.hn < len(o.hdr) {
			k := copy(o.hdr[o.hn:], p)
			o.hn += k
			p = p[k:]
			if o.hn < len(o.hdr) {
				return
			}
			o.left = int(o.hdr[0])<<16 | int(o.hdr[1])<<8 | int(o.hdr[2])
			o.typ, o.flags = http2.FrameType(o.hdr[3]), http2.Flags(o.hdr[4])
			o.id = binary.BigEndian.Uint32(o.hdr[5:]) & (1<<31 - 1)
			o.hl, o.want, o.data = 0, 0, false
			switch o.typ {
			case http2.FrameRSTStream:
				o.want = 4
			case http2.FrameGoAway:
				o.want = 8
			case http2.FrameHeaders:
				o.want = len(o.head)
			case http2.FrameData:
				o.data = c.st.Answering(o.id)
			}
			o.want = min(o.want, o.left)
			c.seen()
		}
		k := min(len(p), o.left)
		if o.want > o.hl {
			o.hl += copy(o.head[o.hl:o.want], p[:k])
			c.seen()
		}
		if o.data {
			c.st.AnswerText(o.id, p[:k])
		}
		o.left -= k
		p = p[k:]
		if o.left == 0 {
			if o.data && o.flags.Has(http2.FlagDataEndStream) {
				c.st.AnswerEnded(o.id)
			}
			o.hn = 0
		}
	}
}

// seen acts on the frame being written once its header and the payload bytes the watch wants
// have been followed.
func (c *H2Conn) seen() {
	o := &c.out
	if o.want < 0 || o.hl < o.want {
		return
	}
	o.want = -1 // once a frame
	switch o.typ {
	case http2.FrameRSTStream:
		if o.hl == 4 {
			c.st.Reset(o.id, http2.ErrCode(binary.BigEndian.Uint32(o.head[:4])))
		}
	case http2.FrameGoAway:
		if o.hl == 8 {
			c.st.GoAway(http2.ErrCode(binary.BigEndian.Uint32(o.head[4:8])))
		}
	case http2.FrameHeaders:
		c.st.Answered(o.id, answerStatus(o.flags, o.head[:o.hl]), o.flags.Has(http2.FlagHeadersEndStream))
	}
}

// answerStatus is the :status of a response header block that starts with b, when it can be
// read without the encoder's dynamic table (x/net writes :status first): from the static table,
// or a literal; 0 otherwise.
func answerStatus(flags http2.Flags, b []byte) int {
	if flags.Has(http2.FlagHeadersPadded) {
		if len(b) == 0 {
			return 0
		}
		b = b[1:]
	}
	if flags.Has(http2.FlagHeadersPriority) {
		if len(b) < 5 {
			return 0
		}
		b = b[5:]
	}
	// Dynamic table size updates (001xxxxx) may come first.
	for len(b) > 0 && b[0]&0xe0 == 0x20 {
		b = skipInt(b, 5)
	}
	if len(b) == 0 {
		return 0
	}
	switch c := b[0]; {
	case c >= 0x88 && c <= 0x8e: // indexed, static :status 200 204 206 304 400 404 500
		return []int{200, 204, 206, 304, 400, 404, 500}[c-0x88]
	case c&0xc0 == 0x40 && c&0x3f >= 8 && c&0x3f <= 14, c&0xf0 <= 0x10 && c&0x0f >= 8 && c&0x0f <= 14:
		// A literal whose name is :status (static indexes 8 to 14), and its value.
		b = b[1:]
		if len(b) == 0 || b[0]&0x7f > 3 || len(b) < 1+int(b[0]&0x7f) {
			return 0
		}
		v := string(b[1 : 1+int(b[0]&0x7f)])
		if b[0]&0x80 != 0 {
			s, err := hpackHuffman(v)
			if err != nil {
				return 0
			}
			v = s
		}
		if n, err := strconv.Atoi(v); err == nil && n >= 100 && n <= 999 {
			return n
		}
	}
	return 0
}

// skipInt skips an HPACK integer with an n-bit prefix at the start of b.
func skipInt(b []byte, n int) []byte {
	if b[0]&(1<<n-1) != 1<<n-1 {
		return b[1:]
	}
	for i := 1; i < len(b) && i < 6; i++ {
		if b[i]&0x80 == 0 {
			return b[i+1:]
		}
	}
	return nil
}

func hpackHuffman(s string) (string, error) { return hpack.HuffmanDecodeToString([]byte(s)) }
