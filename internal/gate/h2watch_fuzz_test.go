package gate

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/egress"
	"github.com/lockhttp/lockhttp/internal/judge"
	"github.com/lockhttp/lockhttp/internal/transport"
)

// The fuzz targets of the watch on HTTP/2 frames (h2watch.go): the client's bytes through
// h2Conn.Read, the server's through h2Conn.Write. Each input is one connection.

// fakeWire stands in for the tunnel's TLS connection: it hands out in, chunk bytes at a time
// (0: as much as the reader asks), and keeps what is written.
type fakeWire struct {
	net.Conn // nil: the watch uses Read and Write only
	in       []byte
	chunk    int
	eofLast  bool // the last bytes come with io.EOF, as io.Reader allows
	idle     int  // reads in a row that returned nothing and no error
	out      bytes.Buffer
}

func (w *fakeWire) Read(p []byte) (int, error) {
	if len(p) == 0 {
		// As a *tls.Conn does once its handshake is done.
		if w.idle++; w.idle > 1000 {
			panic("the watch reads nothing from its connection, over and over")
		}
		return 0, nil
	}
	w.idle = 0
	if len(w.in) == 0 {
		return 0, io.EOF
	}
	n := len(p)
	if w.chunk > 0 {
		n = min(n, w.chunk)
	}
	n = copy(p, w.in[:min(n, len(w.in))])
	w.in = w.in[n:]
	if w.eofLast && len(w.in) == 0 {
		return n, io.EOF
	}
	return n, nil
}

func (w *fakeWire) Write(p []byte) (int, error) { return w.out.Write(p) }

func (w *fakeWire) ConnectionState() tls.ConnectionState { return tls.ConnectionState{} }

// h2Frame is one frame of a byte sequence: its 9-byte header and payload, or the partial
// frame it ends with (whole false).
type h2Frame struct {
	typ     http2.FrameType
	flags   http2.Flags
	id      uint32
	rawID   [4]byte
	length  int
	payload []byte
	whole   bool
}

// splitFrames cuts b into frames; a partial header at its end is rest.
func splitFrames(b []byte) (frames []h2Frame, rest []byte) {
	for len(b) >= 9 {
		f := h2Frame{length: int(b[0])<<16 | int(b[1])<<8 | int(b[2]), typ: http2.FrameType(b[3]), flags: http2.Flags(b[4])}
		copy(f.rawID[:], b[5:9])
		f.id = binary.BigEndian.Uint32(b[5:9]) & (1<<31 - 1)
		b = b[9:]
		k := min(f.length, len(b))
		f.payload, f.whole = b[:k], k == f.length
		b = b[k:]
		frames = append(frames, f)
	}
	return frames, b
}

// fragment is the header block fragment of a HEADERS or CONTINUATION frame; ok is false when
// its padding or priority does not fit.
func (f h2Frame) fragment() (frag []byte, ok bool) {
	p := f.payload
	if f.typ != http2.FrameHeaders {
		return p, true
	}
	pad := 0
	if f.flags.Has(http2.FlagHeadersPadded) {
		if len(p) == 0 {
			return nil, false
		}
		pad, p = int(p[0]), p[1:]
	}
	if f.flags.Has(http2.FlagHeadersPriority) {
		if len(p) < 5 {
			return nil, false
		}
		p = p[5:]
	}
	if pad > len(p) {
		return nil, false
	}
	return p[:len(p)-pad], true
}

// h2Block is one header block of the client's: the indexes of its frames, first to last.
type h2Block struct {
	id     uint32
	opens  bool
	frames []int
}

// checkClientFrames checks what the watch let x/net read (out) of the client's frames (in,
// after the preface): frame by frame the same, but for the mark at the end of each header
// block that opens a stream, exactly once, and HPACK-decodable as the client's fields then the
// mark whenever the client's block decodes. decoded is how many blocks it decoded so.
func checkClientFrames(t *testing.T, c *transport.H2Conn, in, out []byte) (decoded int) {
	t.Helper()
	fin, restIn := splitFrames(in)
	fout, restOut := splitFrames(out)
	if len(restOut) > 0 {
		// A partial frame header is the end of the connection: the reader's EOF.
		t.Fatalf("the output ends in %x, a partial frame header (the input in %x)", restOut, restIn)
	}

	// Frame by frame: each frame of the client's comes out with its type, flags and id, and its
	// payload whole, the mark after it, or the mark in a CONTINUATION of the gate's after it.
	marked := map[uint32]int{}
	markAt := make([]bool, len(fin))
	outFrag := make([][]byte, len(fin)) // the block fragment x/net reads of each frame
	j := 0
	for i, f := range fin {
		if j >= len(fout) {
			t.Fatalf("frame %d of the client's (%v flags %v id %d) is missing from the output", i, f.typ, f.flags, f.id)
		}
		g := fout[j]
		j++
		m := c.Mark(f.id)
		if g.typ != f.typ || g.rawID != f.rawID {
			t.Fatalf("frame %d: type %v id %x out of type %v id %x", i, g.typ, g.rawID, f.typ, f.rawID)
		}
		if !f.whole {
			// The connection ends inside this frame: its bytes pass, and nothing after them.
			if j != len(fout) || !bytes.Equal(g.payload, f.payload) || g.length != f.length && g.length != f.length+len(m) ||
				g.flags != f.flags && g.flags != f.flags&^http2.FlagHeadersEndHeaders {
				t.Fatalf("the client's last, partial frame %d (%d of %d bytes) comes out as %d of %d bytes, flags %v",
					i, len(f.payload), f.length, len(g.payload), g.length, g.flags)
			}
			return 0
		}
		outFrag[i], _ = g.fragment()
		switch {
		case g.flags == f.flags && g.length == f.length && bytes.Equal(g.payload, f.payload):
		case g.flags == f.flags && g.length == f.length+len(m) && bytes.Equal(g.payload, append(slices.Clip(f.payload), m...)):
			markAt[i] = true
		case g.flags == f.flags&^http2.FlagHeadersEndHeaders && f.flags.Has(http2.FlagHeadersEndHeaders) && g.length == f.length && bytes.Equal(g.payload, f.payload):
			if j >= len(fout) {
				t.Fatalf("frame %d: END_HEADERS taken off, and no CONTINUATION after it", i)
			}
			k := fout[j]
			j++
			if k.typ != http2.FrameContinuation || k.flags != http2.FlagContinuationEndHeaders || k.id != f.id || k.rawID[0]&0x80 != 0 || !bytes.Equal(k.payload, m) {
				t.Fatalf("frame %d: END_HEADERS taken off, then %v flags %v id %x payload %q", i, k.typ, k.flags, k.rawID, k.payload)
			}
			markAt[i] = true
			outFrag[i] = append(slices.Clip(outFrag[i]), k.payload...)
		default:
			t.Fatalf("frame %d (%v flags %v id %d, %d bytes) comes out as flags %v, %d bytes", i, f.typ, f.flags, f.id, f.length, g.flags, g.length)
		}
		if markAt[i] {
			if f.typ != http2.FrameHeaders && f.typ != http2.FrameContinuation || f.id%2 == 0 || !f.flags.Has(http2.FlagHeadersEndHeaders) {
				t.Fatalf("frame %d: a mark on %v flags %v id %d", i, f.typ, f.flags, f.id)
			}
			if marked[f.id]++; marked[f.id] > 1 {
				t.Fatalf("stream %d marked %d times", f.id, marked[f.id])
			}
		}
	}
	if j != len(fout) {
		t.Fatalf("%d frames more in the output than in the input", len(fout)-j)
	}

	// The header blocks, where the input is well formed: whole frames within the gate's maximum
	// size, a block's frames in a row, its padding and priority in its first frame.
	var blocks []*h2Block
	var open *h2Block
	var maxID uint32
	for i, f := range fin {
		if !f.whole || f.length > transport.H2MaxFrame || f.typ == http2.FrameContinuation && open == nil ||
			open != nil && (f.typ != http2.FrameContinuation || f.id != open.id) || f.typ == http2.FrameHeaders && f.id == 0 {
			return 0
		}
		if f.typ != http2.FrameHeaders && f.typ != http2.FrameContinuation {
			continue
		}
		if _, ok := f.fragment(); !ok {
			return 0
		}
		if f.typ == http2.FrameHeaders {
			// A client's stream has an odd id, higher than any it opened before.
			open = &h2Block{id: f.id, opens: f.id%2 == 1 && f.id > maxID}
			if open.opens {
				maxID = f.id
			}
			blocks = append(blocks, open)
		}
		open.frames = append(open.frames, i)
		if f.flags.Has(http2.FlagHeadersEndHeaders) {
			open = nil
		}
	}
	if open != nil {
		return 0
	}
	din, dout := hpack.NewDecoder(4096, nil), hpack.NewDecoder(4096, nil)
	decoding := true
	for _, b := range blocks {
		var block, got []byte
		for k, i := range b.frames {
			if last := k == len(b.frames)-1; markAt[i] != (last && b.opens) {
				t.Fatalf("stream %d: frame %d of its block (opening a stream: %v) marked: %v", b.id, i, b.opens, markAt[i])
			}
			frag, _ := fin[i].fragment()
			block = append(block, frag...)
		}
		for _, i := range b.frames {
			got = append(got, outFrag[i]...)
		}
		want := bytes.Clone(block)
		if b.opens {
			want = append(want, c.Mark(b.id)...)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("stream %d: the block x/net reads is %x, want %x", b.id, got, want)
		}
		if !decoding {
			continue
		}
		fields, err := din.DecodeFull(block)
		if err != nil {
			decoding = false // x/net ends the connection here
			continue
		}
		if b.opens {
			fields = append(fields, hpack.HeaderField{Name: transport.H2MarkName, Value: fmt.Sprintf("%s.%d", c.Token(), b.id)})
		}
		gotFields, err := dout.DecodeFull(got)
		if err != nil {
			t.Fatalf("stream %d: the client's block decodes, the gate's does not: %v", b.id, err)
		}
		if !slices.Equal(gotFields, fields) {
			t.Fatalf("stream %d: fields %q, want %q", b.id, gotFields, fields)
		}
		decoded++
	}
	return decoded
}

// readShape is how the fuzz targets read and write: the wire's chunk size, the reader's
// buffer size, and whether empty reads come between.
type readShape struct {
	chunk, buf int
	empty, eof bool
}

func shapeOf(rd, wr uint8) readShape {
	s := readShape{chunk: int(wr & 0x1f), buf: int(rd & 0x1f), empty: rd&0x20 != 0, eof: wr&0x20 != 0}
	if wr&0x40 != 0 {
		s.chunk *= 257
	}
	switch {
	case rd&0x40 != 0:
		s.buf = s.buf*331 + 1
	case s.buf == 0:
		s.buf = 64 << 10
	}
	return s
}

// FuzzH2ClientFrames sends arbitrary frames of a client through the watch, as x/net's server
// reads them: see checkClientFrames.
func FuzzH2ClientFrames(f *testing.F) {
	for _, seed := range h2ClientSeeds(f) {
		f.Add(seed, uint8(0), uint8(0))
		f.Add(seed, uint8(9), uint8(7))
		f.Add(seed, uint8(0x4b), uint8(0x4f))
	}
	f.Fuzz(func(t *testing.T, frames []byte, rd, wr uint8) {
		sh := shapeOf(rd, wr)
		w := &fakeWire{in: append([]byte(http2.ClientPreface), frames...), chunk: sh.chunk, eofLast: sh.eof}
		st := &h2Streams{open: map[uint32]bool{}}
		c := transport.NewH2Conn(w, st)
		var out []byte
		// Each frame of the client's grows by at most the gate's CONTINUATION.
		limit := len(http2.ClientPreface) + len(frames) + (len(frames)/9+1)*(9+len(c.Mark(1<<31-1)))
		buf := make([]byte, sh.buf)
		for calls := 0; ; calls++ {
			if calls > 4*limit+16 {
				t.Fatalf("%d reads and no end (%d bytes out)", calls, len(out))
			}
			if sh.empty {
				if n, err := c.Read(nil); n != 0 || err != nil {
					t.Fatalf("an empty read: %d, %v", n, err)
				}
			}
			n, err := c.Read(buf)
			out = append(out, buf[:n]...)
			if len(out) > limit {
				t.Fatalf("%d bytes out of %d in", len(out), len(frames))
			}
			if err != nil {
				if err != io.EOF {
					t.Fatal(err)
				}
				break
			}
		}
		// After io.EOF, nothing more.
		for range 2 {
			if n, err := c.Read(buf); n != 0 || err != io.EOF {
				t.Fatalf("a read after io.EOF: %d bytes, %v", n, err)
			}
		}
		pre, rest := out[:min(len(out), len(http2.ClientPreface))], out[min(len(out), len(http2.ClientPreface)):]
		if string(pre) != http2.ClientPreface {
			t.Fatalf("the preface comes out as %q", pre)
		}
		checkClientFrames(t, c, frames, rest)
	})
}

// h2ClientSeeds are connections of a client's frames, made with x/net's Framer.
func h2ClientSeeds(tb testing.TB) [][]byte {
	var seeds [][]byte
	var buf, hb bytes.Buffer
	fr := http2.NewFramer(&buf, nil)
	enc := hpack.NewEncoder(&hb)
	block := func(fields ...string) []byte {
		hb.Reset()
		for i := 0; i+1 < len(fields); i += 2 {
			enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
		}
		return bytes.Clone(hb.Bytes())
	}
	get := func(path string, extra ...string) []byte {
		return block(append([]string{":method", "GET", ":scheme", "https", ":authority", "origin.test", ":path", path}, extra...)...)
	}
	must := func(err error) {
		if err != nil {
			tb.Fatal(err)
		}
	}
	seed := func(write func()) {
		buf.Reset()
		enc = hpack.NewEncoder(&hb)
		write()
		seeds = append(seeds, bytes.Clone(buf.Bytes()))
	}
	// A GET, then a POST with a body and trailers, on one connection; a dynamic table shared.
	seed(func() {
		must(fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20}))
		must(fr.WriteSettingsAck())
		must(fr.WriteWindowUpdate(0, 1<<20))
		must(fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: get("/a"), EndStream: true, EndHeaders: true}))
		must(fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: block(":method", "POST", ":scheme", "https", ":authority", "origin.test", ":path", "/b", "content-type", "text/plain"), EndHeaders: true}))
		must(fr.WriteData(3, false, []byte("hello")))
		must(fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: block("x-trailer", "1"), EndStream: true, EndHeaders: true}))
		must(fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 5, BlockFragment: get("/a"), EndStream: true, EndHeaders: true}))
	})
	// Padding, priority, both.
	seed(func() {
		must(fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: get("/p"), EndStream: true, EndHeaders: true, PadLength: 7}))
		must(fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: get("/q"), EndStream: true, EndHeaders: true,
			Priority: http2.PriorityParam{StreamDep: 1, Exclusive: true, Weight: 200}}))
		must(fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 5, BlockFragment: get("/r"), EndStream: true, EndHeaders: true, PadLength: 255,
			Priority: http2.PriorityParam{StreamDep: 3, Weight: 1}}))
		must(fr.WritePriority(7, http2.PriorityParam{StreamDep: 5, Weight: 16}))
	})
	// A block in a HEADERS and two CONTINUATIONs; a padded one in two.
	seed(func() {
		b := get("/split", "user-agent", "fuzz", "accept", "*/*")
		must(fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b[:5], EndStream: true}))
		must(fr.WriteContinuation(1, false, b[5:20]))
		must(fr.WriteContinuation(1, true, b[20:]))
		b = get("/split2")
		must(fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: b[:3], EndStream: true, PadLength: 4}))
		must(fr.WriteContinuation(3, true, b[3:]))
	})
	// Blocks of the largest frame, and of a frame the mark just does or does not fit.
	for _, size := range []int{transport.H2MaxFrame, transport.H2MaxFrame - 10, transport.H2MaxFrame - len("x-lockhttp-stream") - 40} {
		seed(func() {
			must(fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: filledBlock(tb, size), EndStream: true, EndHeaders: true}))
			must(fr.WriteData(1, true, nil))
		})
	}
	// The frames of no header block: DATA, RST_STREAM, SETTINGS, PING, GOAWAY.
	seed(func() {
		must(fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block(":method", "PUT", ":scheme", "https", ":authority", "origin.test", ":path", "/u"), EndHeaders: true}))
		must(fr.WriteData(1, false, bytes.Repeat([]byte("d"), 300)))
		must(fr.WriteDataPadded(1, true, []byte("e"), make([]byte, 9)))
		must(fr.WriteRSTStream(1, http2.ErrCodeCancel))
		must(fr.WriteSettings(http2.Setting{ID: http2.SettingHeaderTableSize, Val: 0}))
		must(fr.WritePing(false, [8]byte{1, 2, 3}))
		must(fr.WriteGoAway(1, http2.ErrCodeNo, []byte("bye")))
	})
	// What the watch must not mark: an even stream, a stream that goes down, a CONTINUATION
	// after another frame.
	seed(func() {
		must(fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 2, BlockFragment: get("/even"), EndHeaders: true}))
		must(fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 5, BlockFragment: get("/five"), EndHeaders: true}))
		must(fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: get("/three"), EndHeaders: true}))
		must(fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 7, BlockFragment: get("/seven")}))
		must(fr.WritePing(false, [8]byte{}))
		must(fr.WriteContinuation(7, true, nil))
	})
	return seeds
}

// filledBlock is a GET's header block of exactly size bytes.
func filledBlock(tb testing.TB, size int) []byte {
	for n := size; n > 0; n-- {
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		for _, hf := range []hpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "https"},
			{Name: ":authority", Value: "origin.test"}, {Name: ":path", Value: "/full"}, {Name: "x-fill", Value: strings.Repeat("~", n)}} {
			enc.WriteField(hf)
		}
		if hb.Len() == size {
			return hb.Bytes()
		}
	}
	tb.Fatalf("no block of %d bytes", size)
	return nil
}

// memAuditor keeps the records of one connection.
type memAuditor struct {
	mu   sync.Mutex
	recs []audit.Record
}

func (a *memAuditor) Write(_ context.Context, r *audit.Record) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.recs = append(a.recs, *r)
	return nil
}

func (a *memAuditor) Append(ctx context.Context, r *audit.Record) error { return a.Write(ctx, r) }
func (a *memAuditor) Submit(r *audit.Record)                            { a.Write(context.Background(), r) }
func (a *memAuditor) Healthy() error                                    { return nil }

// FuzzH2ServerFrames sends arbitrary frames of the server through the watch, as x/net writes
// them, on a connection whose client opened streams 1 to 41: see serverFrames.
func FuzzH2ServerFrames(f *testing.F) {
	for _, seed := range h2ServerSeeds(f) {
		f.Add(seed, uint8(0))
		f.Add(seed, uint8(5))
	}
	aud := &memAuditor{}
	g := New(Config{Audit: aud, Dialer: &egress.Dialer{}})
	f.Fuzz(func(t *testing.T, frames []byte, wr uint8) {
		serverFrames(t, g, aud, frames, int(wr))
	})
}

// serverFrames writes frames through the watch of a connection of g's whose client opened
// streams 1 to 41, chunk bytes at a time (0: at once), and checks that every byte is written
// as it came, each stream has one record at most, and the records stay within the bound of a
// connection. It returns the records.
func serverFrames(t *testing.T, g *Gate, aud *memAuditor, frames []byte, chunk int) []audit.Record {
	t.Helper()
	aud.mu.Lock()
	aud.recs = nil
	aud.mu.Unlock()
	st := &h2Streams{g: g, source: netip.MustParseAddr("127.0.0.1"), tun: &judge.Binding{Host: "origin.test", Port: 443},
		connect: "c1", open: map[uint32]bool{}, close: func() {}}
	w := &fakeWire{}
	c := transport.NewH2Conn(w, st)
	for id := uint32(1); id <= 41; id += 2 {
		st.Opened(id)
	}
	for p := frames; len(p) > 0; {
		k := len(p)
		if chunk > 0 {
			k = min(k, chunk)
		}
		if n, err := c.Write(p[:k]); n != k || err != nil {
			t.Fatal(n, err)
		}
		p = p[k:]
	}
	st.finish()
	if !bytes.Equal(w.out.Bytes(), frames) {
		t.Fatal("the server's bytes were changed on their way")
	}
	aud.mu.Lock()
	recs := aud.recs
	aud.mu.Unlock()
	streams := map[uint32]bool{}
	for _, r := range recs {
		if r.Stream == 0 {
			continue
		}
		if streams[r.Stream] || r.Stream > 41 || r.Stream%2 == 0 {
			t.Fatalf("a record of stream %d: %+v", r.Stream, r)
		}
		streams[r.Stream] = true
	}
	if len(streams) > h2StreamRecords || len(recs) > h2StreamRecords+2 {
		t.Fatalf("%d records, %d of them of streams", len(recs), len(streams))
	}
	return recs
}

// h2ServerSeeds are connections of a server's frames, made with x/net's Framer.
func h2ServerSeeds(tb testing.TB) [][]byte {
	var seeds [][]byte
	var buf, hb bytes.Buffer
	fr := http2.NewFramer(&buf, nil)
	enc := hpack.NewEncoder(&hb)
	block := func(fields ...string) []byte {
		hb.Reset()
		for i := 0; i+1 < len(fields); i += 2 {
			enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
		}
		return bytes.Clone(hb.Bytes())
	}
	must := func(err error) {
		if err != nil {
			tb.Fatal(err)
		}
	}
	seed := func(write func()) {
		buf.Reset()
		write()
		seeds = append(seeds, bytes.Clone(buf.Bytes()))
	}
	// x/net's own answers (a 400 with a body, a 431), resets, and its GOAWAY.
	seed(func() {
		must(fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 100}))
		must(fr.WriteSettingsAck())
		must(fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block(":status", "400", "content-type", "text/plain"), EndHeaders: true}))
		must(fr.WriteData(1, true, []byte("400 Bad Request: invalid header")))
		must(fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: block(":status", "431"), EndHeaders: true, EndStream: true, PadLength: 3}))
		must(fr.WriteRSTStream(5, http2.ErrCodeProtocol))
		must(fr.WritePing(true, [8]byte{}))
		must(fr.WriteWindowUpdate(0, 100))
		must(fr.WriteGoAway(5, http2.ErrCodeEnhanceYourCalm, []byte("too many")))
	})
	// Statuses of the static table, a priority, resets past the records' bound.
	seed(func() {
		for i, s := range []string{"200", "204", "404", "500", "999"} {
			must(fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(7 + 2*i), BlockFragment: block(":status", s), EndHeaders: true, EndStream: true,
				Priority: http2.PriorityParam{StreamDep: 1, Weight: 9}}))
		}
		for id := uint32(17); id <= 41; id += 2 {
			must(fr.WriteRSTStream(id, http2.ErrCodeRefusedStream))
		}
		must(fr.WriteGoAway(41, http2.ErrCodeNo, nil))
	})
	return seeds
}

func TestH2FuzzSeedsAreWhatTheyClaim(t *testing.T) {
	// Those of FuzzH2ServerFrames make records: of x/net's answers and resets, and of its GOAWAY.
	aud := &memAuditor{}
	g := New(Config{Audit: aud, Dialer: &egress.Dialer{}})
	for i, want := range []string{"1:400 3:431 5:0 0:0", "7:200 9:204 11:404 13:500 15:999 17:0 19:0 21:0 23:0 25:0 27:0 29:0 31:0 33:0 35:0 37:0 0:0"} {
		var got []string
		for _, r := range serverFrames(t, g, aud, h2ServerSeeds(t)[i], 0) {
			got = append(got, fmt.Sprintf("%d:%d", r.Stream, r.Status))
		}
		if strings.Join(got, " ") != want {
			t.Errorf("server seed %d: records %s, want %s", i, got, want)
		}
	}

	// The seeds of FuzzH2ClientFrames but the last are well-formed connections, and the watch
	// marks each (a check that only ever returns early would test nothing).
	seeds := h2ClientSeeds(t)
	for i, seed := range seeds[:len(seeds)-1] {
		fr := http2.NewFramer(nil, bytes.NewReader(seed))
		fr.SetMaxReadFrameSize(transport.H2MaxFrame)
		for {
			_, err := fr.ReadFrame()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("seed %d: %v", i, err)
			}
		}
		w := &fakeWire{in: append([]byte(http2.ClientPreface), seed...)}
		c := transport.NewH2Conn(w, &h2Streams{open: map[uint32]bool{}})
		out, err := io.ReadAll(c)
		if err != nil {
			t.Fatal(err)
		}
		if n := bytes.Count(out, []byte(c.Token()+".")); n == 0 {
			t.Fatalf("seed %d: no mark", i)
		}
		if n := checkClientFrames(t, c, seed, out[len(http2.ClientPreface):]); n == 0 {
			t.Fatalf("seed %d: no header block decoded", i)
		}
	}
}
