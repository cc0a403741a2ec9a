package gate

import (
	"bytes"
	"io"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/lockhttp/lockhttp/internal/transport"
)

// h2Opening is a client's preface then a HEADERS frame that opens stream 1 and ends its block.
func h2Opening(t *testing.T) []byte {
	t.Helper()
	var buf, hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, hf := range []hpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "https"},
		{Name: ":authority", Value: "origin.test"}, {Name: ":path", Value: "/"}} {
		enc.WriteField(hf)
	}
	buf.WriteString(http2.ClientPreface)
	if err := http2.NewFramer(&buf, nil).WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestH2EmptyReadReturns: a read into an empty buffer returns at once, in the preface as in a
// frame's payload (it asked the connection for nothing, over and over: testdata/fuzz/
// FuzzH2ClientFrames/empty-read-spins).
func TestH2EmptyReadReturns(t *testing.T) {
	c := transport.NewH2Conn(&fakeWire{in: h2Opening(t)}, &h2Streams{open: map[uint32]bool{}})
	read := 0
	for _, at := range []int{0, 10, len(http2.ClientPreface) + 9, len(http2.ClientPreface) + 12} {
		if _, err := io.ReadFull(c, make([]byte, at-read)); err != nil {
			t.Fatal(err)
		}
		read = at
		if n, err := c.Read(nil); n != 0 || err != nil {
			t.Fatalf("at byte %d: an empty read gives %d, %v", at, n, err)
		}
	}
}

// TestH2MarkComesBeforeTheConnectionsEnd: when the connection's last bytes come with its end
// (a *tls.Conn gives io.EOF with the data of a record a close_notify follows), x/net's framer
// still reads the whole of the marked frame, the mark included (the watch gave the io.EOF
// before the mark, and the frame came out short: testdata/fuzz/FuzzH2ClientFrames/
// eof-before-the-mark).
func TestH2MarkComesBeforeTheConnectionsEnd(t *testing.T) {
	for _, chunk := range []int{0, 1, 7} {
		c := transport.NewH2Conn(&fakeWire{in: h2Opening(t), chunk: chunk, eofLast: true}, &h2Streams{open: map[uint32]bool{}})
		if _, err := io.ReadFull(c, make([]byte, len(http2.ClientPreface))); err != nil {
			t.Fatal(err)
		}
		fr := http2.NewFramer(nil, c)
		fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("chunks of %d: %v", chunk, err)
		}
		mh := f.(*http2.MetaHeadersFrame)
		if got := mh.Fields[len(mh.Fields)-1]; got.Name != transport.H2MarkName || got.Value != c.Token()+".1" {
			t.Fatalf("chunks of %d: the block ends in %v", chunk, got)
		}
		if _, err := fr.ReadFrame(); err != io.EOF {
			t.Fatalf("chunks of %d: after the frame, %v", chunk, err)
		}
	}
}

// TestH2ReadAllocatesNothingPerFrame: the watch reads a frame that opens no stream without an
// allocation.
func TestH2ReadAllocatesNothingPerFrame(t *testing.T) {
	var buf bytes.Buffer
	fr := http2.NewFramer(&buf, nil)
	fr.WriteData(1, false, bytes.Repeat([]byte("d"), 100))
	fr.WriteWindowUpdate(0, 100)
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0x88}, EndStream: true, EndHeaders: true}) // trailers
	frames := buf.Bytes()
	w := &fakeWire{in: h2Opening(t)}
	c := transport.NewH2Conn(w, &h2Streams{open: map[uint32]bool{}})
	p := make([]byte, 16<<10)
	if _, err := io.ReadFull(c, p[:len(w.in)+len(c.Mark(1))]); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		w.in = frames
		if _, err := io.ReadFull(c, p[:len(frames)]); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations a run", allocs)
	}
}
