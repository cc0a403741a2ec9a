package e2e

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/testkit"
)

// wsFramesPolicy lets GETs to origin.test out, with more sections appended (%[2]s).
const wsFramesPolicy = `version = 1
trusted = ["origin.test"]

[floor]
allow_cidrs = ["127.0.0.1/32"]
allow_ports = [%[1]d]

[floor.hosts]
"origin.test" = "127.0.0.1"

[sources]
local = ["127.0.0.0/8"]
%[2]s`

// wireFrame is one WebSocket frame as it crossed a socket, read by hand (not by the gate's own
// reader): its header's fields as sent and its payload, unmasked.
type wireFrame struct {
	fin     bool
	op      byte
	hdr     int // the header's length: 2 to 14, as the sender encoded the length
	masked  bool
	key     [4]byte
	payload []byte
}

// readWireFrame reads one frame of at most 1 MiB.
func readWireFrame(br *bufio.Reader) (wireFrame, error) {
	var f wireFrame
	var h [2]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return f, err
	}
	f.fin, f.op, f.masked, f.hdr = h[0]&0x80 != 0, h[0]&0x0f, h[1]&0x80 != 0, 2
	n := uint64(h[1] & 0x7f)
	if ext := map[uint64]int{126: 2, 127: 8}[n]; ext > 0 {
		b := make([]byte, ext)
		if _, err := io.ReadFull(br, b); err != nil {
			return f, err
		}
		n = 0
		for _, c := range b {
			n = n<<8 | uint64(c)
		}
		f.hdr += ext
	}
	if f.masked {
		if _, err := io.ReadFull(br, f.key[:]); err != nil {
			return f, err
		}
		f.hdr += 4
	}
	if n > 1<<20 {
		return f, fmt.Errorf("a frame of %d bytes", n)
	}
	f.payload = make([]byte, n)
	if _, err := io.ReadFull(br, f.payload); err != nil {
		return f, err
	}
	if f.masked {
		for i := range f.payload {
			f.payload[i] ^= f.key[i&3]
		}
	}
	return f, nil
}

// minimalHeader is the length of the shortest header for a payload of n bytes, masked.
func minimalHeader(n int) int {
	switch {
	case n > 0xffff:
		return 14
	case n > 125:
		return 8
	}
	return 6
}

// clientFrame is a frame of the agent's: fin, op (a byte), payload masked with key, its length
// in the 8-byte encoding when long8.
func clientFrame(fin bool, op byte, key [4]byte, long8 bool, payload string) []byte {
	f := []byte{op, 0x80}
	if fin {
		f[0] |= 0x80
	}
	switch {
	case long8 || len(payload) > 0xffff:
		f[1] |= 127
		f = binary.BigEndian.AppendUint64(f, uint64(len(payload)))
	case len(payload) > 125:
		f[1] |= 126
		f = binary.BigEndian.AppendUint16(f, uint16(len(payload)))
	default:
		f[1] |= byte(len(payload))
	}
	f = append(f, key[:]...)
	for i := range len(payload) {
		f = append(f, payload[i]^key[i&3])
	}
	return f
}

// frameOrigin is a WebSocket origin that records every frame it receives, as received, and the
// bytes it read, until its connection ends; it answers a close frame with its own.
type frameOrigin struct {
	sessions chan frameSession
}

type frameSession struct {
	frames []wireFrame
	bytes  int64
}

func startFrameOrigin(t *testing.T) (*frameOrigin, int) {
	o := &frameOrigin{sessions: make(chan frameSession, 4)}
	srv := httptest.NewServer(o)
	t.Cleanup(srv.Close)
	return o, srv.Listener.Addr().(*net.TCPAddr).Port
}

func (o *frameOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(90 * time.Second))
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	brw.Flush()
	var s frameSession
	for {
		f, err := readWireFrame(brw.Reader)
		if err != nil {
			break
		}
		s.frames = append(s.frames, f)
		s.bytes += int64(f.hdr + len(f.payload))
		if f.op == 0x8 {
			c.Write(append([]byte{0x88, byte(len(f.payload))}, f.payload...))
		}
	}
	o.sessions <- s
}

func (o *frameOrigin) next(t *testing.T) frameSession {
	t.Helper()
	select {
	case s := <-o.sessions:
		return s
	case <-time.After(30 * time.Second):
		t.Fatal("the origin's session did not end")
	}
	return frameSession{}
}

// wsDial opens a WebSocket to origin.test:port through the gate's plain proxy, by hand.
func wsDial(t *testing.T, e *running, port int) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", e.up.Listen)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	o := fmt.Sprintf("origin.test:%d", port)
	fmt.Fprintf(c, "GET http://%s/ws HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", o, o)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("the upgrade through the gate: %v %v", resp, err)
	}
	return c, br
}

// wsSessionRecord waits for the stack's websocket record.
func wsSessionRecord(t *testing.T, e *running) map[string]any {
	t.Helper()
	var rec map[string]any
	testkit.WaitFor(t, 10*time.Second, "the session's record", func() bool {
		for _, m := range e.auditRecords() {
			if m["event"] == "websocket" {
				rec = m
				return true
			}
		}
		return false
	})
	return rec
}

// wsClosedBy reads the agent's side until the gate's close frame and returns its code and reason.
func wsClosedBy(t *testing.T, br *bufio.Reader) (int, string) {
	t.Helper()
	for {
		f, err := readWireFrame(br)
		if err != nil {
			t.Fatalf("no close frame from the gate: %v", err)
		}
		if f.op == 0x8 && len(f.payload) >= 2 {
			return int(binary.BigEndian.Uint16(f.payload)), string(f.payload[2:])
		}
	}
}

// TestWebSocketOriginNeverSeesTheAgentsFrames: under lox run, an agent masks its frames with
// keys that spell a GitHub token four bytes at a time (ten empty messages), then sends a text
// message in three fragments, the first with its length in the 8-byte encoding, a ping between
// two of them. The origin, which reads every frame by hand, sees the gate's frames only: each
// message one frame with FIN, the shortest length encoding, keys of the gate's (none of the
// agent's, all different), the ping before the message; the token is nowhere in its keys. The
// websocket record counts the bytes the origin read.
func TestWebSocketOriginNeverSeesTheAgentsFrames(t *testing.T) {
	origin, port := startFrameOrigin(t)
	e := startStack(t, fmt.Sprintf(wsFramesPolicy, port, ""))
	c, br := wsDial(t, e, port)
	token := "ghp_" + strings.Repeat("Wq7e", 9)
	var keys [][4]byte
	var out []byte
	for i := 0; i < len(token); i += 4 {
		k := [4]byte([]byte(token[i : i+4]))
		keys = append(keys, k)
		out = append(out, clientFrame(true, 0x1, k, false, "")...)
	}
	fixed := [4]byte{0x13, 0x37, 0xbe, 0xef}
	keys = append(keys, fixed)
	out = append(out, clientFrame(false, 0x1, fixed, true, "hello")...)
	out = append(out, clientFrame(false, 0x0, fixed, false, ", ")...)
	out = append(out, clientFrame(true, 0x9, fixed, false, "ping")...)
	out = append(out, clientFrame(true, 0x0, fixed, false, "world")...)
	out = append(out, clientFrame(true, 0x8, fixed, false, "\x03\xe8")...)
	if _, err := c.Write(out); err != nil {
		t.Fatal(err)
	}
	if code, _ := wsClosedBy(t, br); code != 1000 {
		t.Fatalf("the origin's close: %d", code)
	}
	c.Close()
	got := origin.next(t)
	var seenKeys []byte
	var messages []string
	seen := map[[4]byte]bool{}
	for i, f := range got.frames {
		if !f.fin || f.op == 0x0 || !f.masked || f.hdr != minimalHeader(len(f.payload)) {
			t.Fatalf("frame %d at the origin: FIN %v, opcode %d, masked %v, a %d-byte header for %d bytes", i, f.fin, f.op, f.masked, f.hdr, len(f.payload))
		}
		for _, k := range keys {
			if f.key == k {
				t.Fatalf("frame %d at the origin carries the agent's mask key %q", i, k[:])
			}
		}
		if seen[f.key] {
			t.Fatalf("frame %d at the origin repeats a mask key", i)
		}
		seen[f.key] = true
		seenKeys = append(seenKeys, f.key[:]...)
		messages = append(messages, fmt.Sprintf("%d:%s", f.op, f.payload))
	}
	want := strings.Repeat("1:,", 10) + "9:ping,1:hello, world,8:\x03\xe8"
	if strings.Join(messages, ",") != want {
		t.Fatalf("the origin got %q, want %q", strings.Join(messages, ","), want)
	}
	if bytes.Contains(seenKeys, []byte(token[:8])) {
		t.Fatal("the token reached the origin in the mask keys")
	}
	rec := wsSessionRecord(t, e)
	if rec["verdict"] != "FREE" || fmt.Sprint(rec["bytes_in"]) != fmt.Sprint(got.bytes) ||
		!strings.Contains(fmt.Sprint(rec["detail"]), fmt.Sprintf("13 messages up (%d bytes)", got.bytes)) {
		t.Fatalf("the session's record: %v; the origin read %d bytes in %d frames", rec, got.bytes, len(got.frames))
	}
}

// TestWebSocketEmptyFramesPastABudget: under lox run with a budget of 1 KiB an hour for
// origin.test, an agent sends 500 empty text messages. Each costs its 6 bytes of header, so the
// gate closes the socket with E_BUDGET before they are all through; the record's bytes_in and
// detail are what reached the origin.
func TestWebSocketEmptyFramesPastABudget(t *testing.T) {
	origin, port := startFrameOrigin(t)
	e := startStack(t, fmt.Sprintf(wsFramesPolicy, port, "\n[[budget]]\nname = \"ws\"\nhosts = [\"origin.test\"]\nbytes_up_per_hour = \"1KiB\"\n"))
	c, br := wsDial(t, e, port)
	c.Write(bytes.Repeat(clientFrame(true, 0x1, [4]byte{1, 2, 3, 4}, false, ""), 500))
	code, reason := wsClosedBy(t, br)
	if code != 1008 || !strings.Contains(reason, "E_BUDGET") || !strings.Contains(reason, "budget:ws") {
		t.Fatalf("after 500 empty messages: close %d %q, want 1008 with E_BUDGET", code, reason)
	}
	c.Close()
	got := origin.next(t)
	n := 0
	var sent int64
	for _, f := range got.frames {
		if f.op == 0x1 {
			n++
			sent += int64(f.hdr + len(f.payload))
		}
	}
	if n == 0 || n >= 500 || sent > 1024 {
		t.Fatalf("%d empty messages (%d bytes) reached the origin past a budget of 1 KiB", n, sent)
	}
	rec := wsSessionRecord(t, e)
	if rec["code"] != "E_BUDGET" || fmt.Sprint(rec["bytes_in"]) != fmt.Sprint(sent) ||
		!strings.Contains(fmt.Sprint(rec["detail"]), fmt.Sprintf("%d messages up (%d bytes)", n, sent)) {
		t.Fatalf("the session's record: %v; %d messages (%d bytes) reached the origin", rec, n, sent)
	}
}

// TestWebSocketFragmentFloodBounded: under lox run, an agent begins a message with a one-byte
// fragment and continues it with empty continuation frames, never finishing it. The open
// message shows in the gate's held bytes (lockhttp_gate_held_body_bytes), the gate closes the
// socket with 1009 at its cap on fragments, gives the bytes back, and its resident memory does
// not grow with the 32 MiB of frames the agent tries to send; nothing reaches the origin.
func TestWebSocketFragmentFloodBounded(t *testing.T) {
	origin, port := startFrameOrigin(t)
	e := startStackWith(t, fmt.Sprintf(wsFramesPolicy, port, ""), []string{"--metrics-listen", "127.0.0.1:0"}, nil)
	gatePID, metrics := e.up.PIDs["gate"], e.up.Metrics["gate"]
	if gatePID == 0 || metrics == "" {
		t.Fatalf("up.json has no gate pid or metrics: %+v %v", e.up.PIDs, e.up.Metrics)
	}
	c, br := wsDial(t, e, port)
	key := [4]byte{0x13, 0x37, 0xbe, 0xef}
	empty := clientFrame(false, 0x0, key, false, "")
	if _, err := c.Write(append(clientFrame(false, 0x1, key, false, "a"), bytes.Repeat(empty, 999)...)); err != nil {
		t.Fatal(err)
	}
	const held = "lockhttp_gate_held_body_bytes"
	testkit.WaitFor(t, 10*time.Second, "the open message in the held bytes", func() bool { return scraped(t, metrics, held) >= 999*6 })
	before := rssMiB(t, gatePID)
	const flood = 32 << 20
	sent := make(chan int64, 1)
	go func() {
		chunk := bytes.Repeat(empty, 64<<10/len(empty))
		var n int64
		for n < flood {
			k, err := c.Write(chunk)
			n += int64(k)
			if err != nil {
				break
			}
		}
		sent <- n
	}()
	closed := make(chan [2]any, 1)
	go func() {
		for {
			f, err := readWireFrame(br)
			if err != nil {
				closed <- [2]any{0, err.Error()}
				return
			}
			if f.op == 0x8 && len(f.payload) >= 2 {
				closed <- [2]any{int(binary.BigEndian.Uint16(f.payload)), string(f.payload[2:])}
				return
			}
		}
	}()
	var got [2]any
	select {
	case got = <-closed:
	case n := <-sent:
		select {
		case got = <-closed:
		case <-time.After(10 * time.Second):
			t.Fatalf("no close after %d MiB of empty fragments; the gate's resident memory went from %.0f to %.0f MiB", n>>20, before, rssMiB(t, gatePID))
		}
	}
	after := rssMiB(t, gatePID)
	if got[0] != 1009 || !strings.Contains(got[1].(string), "lockhttp") {
		t.Fatalf("the gate's answer to the flood: %v, want close 1009", got)
	}
	if after-before > 16 {
		t.Fatalf("the gate's resident memory grew from %.0f to %.0f MiB", before, after)
	}
	testkit.WaitFor(t, 10*time.Second, "the held bytes given back", func() bool { return scraped(t, metrics, held) == 0 })
	c.Close()
	s := origin.next(t)
	if len(s.frames) != 1 || s.frames[0].op != 0x8 {
		t.Fatalf("the origin got %d frames of the never-finished message", len(s.frames))
	}
	rec := wsSessionRecord(t, e)
	if rec["rule"] != "websocket:frame" || !strings.Contains(fmt.Sprint(rec["reason"]), "fragments") {
		t.Fatalf("the session's record: %v", rec)
	}
	t.Logf("the gate's resident memory: %.0f MiB before the flood, %.0f MiB after", before, after)
}
