package gate

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/testkit"
	"github.com/lockhttp/lockhttp/internal/wsframe"
)

// wsWrite writes one whole frame; a client's (key set) is masked.
func wsWrite(w io.Writer, op wsframe.Opcode, masked bool, payload string) error {
	var key *[4]byte
	if masked {
		key = &[4]byte{1, 2, 3, 4}
	}
	_, err := w.Write(wsframe.AppendFrame(nil, op, key, []byte(payload)))
	return err
}

// wsRead reads one frame and returns its opcode and payload, unmasked.
func wsRead(br *bufio.Reader) (wsframe.Opcode, string, error) {
	f, err := wsReadFrame(br)
	return f.h.Op, f.p, err
}

// wsReadFrame reads one frame of at most 1 MiB.
func wsReadFrame(br *bufio.Reader) (wsSeen, error) {
	b, err := br.Peek(2)
	if err != nil {
		return wsSeen{}, err
	}
	b, err = br.Peek(wsframe.HeaderLen(b[0], b[1]))
	if err != nil {
		return wsSeen{}, err
	}
	h, n, err := wsframe.Parse(b)
	if err != nil || h.Length > 1<<20 {
		return wsSeen{}, fmt.Errorf("a frame header %+v: %v", h, err)
	}
	br.Discard(n)
	p := make([]byte, h.Length)
	if _, err := io.ReadFull(br, p); err != nil {
		return wsSeen{}, err
	}
	if h.Masked {
		wsframe.Unmask(p, h.Key, 0)
	}
	return wsSeen{h, n, string(p)}, nil
}

// wsEchoOrigin answers a WebSocket upgrade by hand and echoes each text message, prefixed.
func wsEchoOrigin(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Upgrade") != "websocket" {
		http.Error(w, "want upgrade", 400)
		return
	}
	c, brw, _ := http.NewResponseController(w).Hijack()
	defer c.Close()
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	brw.Flush()
	for {
		op, p, err := wsRead(brw.Reader)
		if err != nil || op == wsframe.Close {
			return
		}
		wsWrite(c, wsframe.Text, false, "echo:"+p)
	}
}

// gorillaOrigin is a WebSocket origin (gorilla/websocket) that echoes every message and
// records them.
type gorillaOrigin struct {
	got chan string
}

func (o *gorillaOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	up := websocket.Upgrader{EnableCompression: true}
	c, err := up.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer c.Close()
	for {
		mt, p, err := c.ReadMessage()
		if err != nil {
			return
		}
		o.got <- string(p)
		c.WriteMessage(mt, append([]byte("echo:"), p...))
	}
}

const wsToken = "ghp_" + "abcdefghijklmnopqrstuvwxyzABCDEF0123"

// TestWebSocketSecretClosesTheSocket: inside a decrypted tunnel a real WebSocket client
// (gorilla/websocket, offering compression, its messages fragmented by a 32-byte write buffer)
// sends a clean message, which passes both ways, then one that carries a credential: it never
// reaches the origin, the gate closes the socket with 1008 and E_SECRET_EGRESS in the reason,
// and audits the session with its counts.
func TestWebSocketSecretClosesTheSocket(t *testing.T) {
	origin := &gorillaOrigin{got: make(chan string, 16)}
	tg := startTLSGate(t, origin)
	pu, _ := url.Parse("http://" + tg.addr)
	d := websocket.Dialer{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: tg.caPool},
		EnableCompression: true, WriteBufferSize: 32, HandshakeTimeout: 10 * time.Second}
	c, resp, err := d.Dial(fmt.Sprintf("wss://origin.test:%d/ws", tg.port), nil)
	if err != nil {
		t.Fatalf("dial: %v %v", resp, err)
	}
	defer c.Close()
	if ext := resp.Header.Get("Sec-WebSocket-Extensions"); ext != "" {
		t.Fatalf("an extension was negotiated through the gate: %q", ext)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if err := c.WriteMessage(websocket.TextMessage, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if _, p, err := c.ReadMessage(); err != nil || string(p) != "echo:hello" {
		t.Fatalf("a clean message: %q %v", p, err)
	}
	c.WriteMessage(websocket.TextMessage, []byte(`{"note": "`+wsToken+`"}`))
	_, _, err = c.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) {
		t.Fatalf("after a message with a credential: %v", err)
	}
	checkWSRefused(t, ce.Code, ce.Text, origin.got, tg.records)
}

// TestWebSocketSecretOnThePlainProxy: the same through the plain proxy (an absolute-form
// upgrade), the credential split across three fragments by hand.
func TestWebSocketSecretOnThePlainProxy(t *testing.T) {
	origin := &gorillaOrigin{got: make(chan string, 16)}
	tg := startGate(t, origin)
	c, br, resp := rawUpgrade(t, tg.addr, fmt.Sprintf("origin.test:%d", tg.port), "/ws", "Sec-WebSocket-Extensions: permessage-deflate\r\n", nil)
	if resp.StatusCode != 101 || resp.Header.Get("Sec-WebSocket-Extensions") != "" {
		t.Fatalf("upgrade: %v", resp)
	}
	wsWrite(c, wsframe.Text, true, "hello")
	if _, p, err := wsRead(br); err != nil || p != "echo:hello" {
		t.Fatalf("a clean message: %q %v", p, err)
	}
	msg := `{"note": "` + wsToken + `"}`
	key := [4]byte{9, 8, 7, 6}
	for i, part := range []struct {
		op  wsframe.Opcode
		fin bool
		p   string
	}{{wsframe.Text, false, msg[:14]}, {wsframe.Continuation, false, msg[14:30]}, {wsframe.Continuation, true, msg[30:]}} {
		f := wsframe.AppendFrame(nil, part.op, &key, []byte(part.p))
		if !part.fin {
			f[0] &^= 0x80
		}
		if _, err := c.Write(f); err != nil {
			t.Fatalf("fragment %d: %v", i, err)
		}
	}
	op, p, err := wsRead(br)
	if err != nil || op != wsframe.Close || len(p) < 2 {
		t.Fatalf("after a message with a credential: %v %q %v", op, p, err)
	}
	checkWSRefused(t, int(p[0])<<8|int(p[1]), p[2:], origin.got, tg.records)
}

// dialGate connects to addr for the rest of the test, with a 10 s deadline on the whole
// exchange.
func dialGate(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

// rawUpgrade dials the gate at addr and writes, in one write, a WebSocket upgrade of path on
// origin o through the plain proxy (extra: more header lines, each ending in CRLF) and the bytes
// after; it returns the connection, its reader and the gate's answer.
func rawUpgrade(t *testing.T, addr, o, path, extra string, after []byte) (net.Conn, *bufio.Reader, *http.Response) {
	t.Helper()
	c := dialGate(t, addr)
	head := "GET http://" + o + path + " HTTP/1.1\r\nHost: " + o + "\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n" + extra + "\r\n"
	if _, err := c.Write(append([]byte(head), after...)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("the answer to the upgrade: %v", err)
	}
	return c, br, resp
}

// checkWSRefused checks the close of a session refused for a credential: its code and reason,
// what reached the origin, and the session's record.
func checkWSRefused(t *testing.T, code int, reason string, got chan string, records func(*testing.T) []map[string]any) {
	t.Helper()
	if code != websocket.ClosePolicyViolation || !strings.Contains(reason, "E_SECRET_EGRESS") || !strings.Contains(reason, "secret:github") {
		t.Fatalf("close %d %q, want 1008 with E_SECRET_EGRESS", code, reason)
	}
	if strings.Contains(reason, wsToken[4:]) {
		t.Fatalf("the close reason repeats the credential: %q", reason)
	}
	select {
	case g := <-got:
		if g != "hello" {
			t.Fatalf("the origin got %q", g)
		}
	default:
		t.Fatal("the origin did not get the clean message")
	}
	var rec map[string]any
	testkit.WaitFor(t, 5*time.Second, "the session's record", func() bool {
		for _, r := range records(t) {
			if r["event"] == "websocket" {
				rec = r
				return true
			}
		}
		return false
	})
	if rec["code"] != "E_SECRET_EGRESS" || rec["rule"] != "secret:github" || !strings.Contains(fmt.Sprint(rec["detail"]), "1 messages up (11 bytes)") {
		t.Fatalf("the session's record: %v", rec)
	}
	for _, r := range records(t) {
		if strings.Contains(fmt.Sprint(r), wsToken[4:]) {
			t.Fatalf("a record holds the credential: %v", r)
		}
	}
	select {
	case g := <-got:
		t.Fatalf("the origin got the refused message: %q", g)
	default:
	}
}

// TestWebSocketFramesTheGateCannotReadCloseTheSocket: a frame the gate cannot read (unmasked,
// compressed without a negotiation, a message past buffer_limit) closes the socket with the
// close code RFC 6455 names, before anything of it reaches the origin; an origin that turns on
// an extension the upgrade did not offer is refused at the upgrade.
func TestWebSocketFramesTheGateCannotReadCloseTheSocket(t *testing.T) {
	origin := &gorillaOrigin{got: make(chan string, 16)}
	tg := startGate(t, origin)
	p, err := policy.Load("ws.toml", []byte(fmt.Sprintf(gatePolicy+"[settings]\nbuffer_limit = \"1KiB\"\n", tg.port)))
	if err != nil {
		t.Fatal(err)
	}
	tg.g.SetPolicy(p)
	o := fmt.Sprintf("origin.test:%d", tg.port)
	key := &[4]byte{1, 2, 3, 4}
	for _, tc := range []struct {
		name  string
		frame []byte
		code  int
	}{
		{"an unmasked frame", wsframe.AppendFrame(nil, wsframe.Text, nil, []byte("hi")), 1002},
		{"a compressed frame (RSV1)", func() []byte { f := wsframe.AppendFrame(nil, wsframe.Text, key, []byte("hi")); f[0] |= 0x40; return f }(), 1002},
		{"a message past buffer_limit", wsframe.AppendFrame(nil, wsframe.Binary, key, []byte(strings.Repeat("x", 2000))), 1009},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, br, resp := rawUpgrade(t, tg.addr, o, "/ws", "", nil)
			if resp.StatusCode != 101 {
				t.Fatalf("upgrade: %v", resp)
			}
			c.Write(tc.frame)
			op, p, err := wsRead(br)
			if err != nil || op != wsframe.Close || len(p) < 2 || int(p[0])<<8|int(p[1]) != tc.code {
				t.Fatalf("%v %q %v, want close %d", op, p, err, tc.code)
			}
			select {
			case g := <-origin.got:
				t.Fatalf("the origin got %q", g)
			case <-time.After(50 * time.Millisecond):
			}
		})
	}
	t.Run("an origin that turns on compression unasked", func(t *testing.T) {
		tg.origin.mu.Lock()
		tg.origin.h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c, brw, _ := http.NewResponseController(w).Hijack()
			defer c.Close()
			brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Extensions: permessage-deflate\r\n\r\n")
			brw.Flush()
			io.Copy(io.Discard, brw)
		})
		tg.origin.mu.Unlock()
		_, _, resp := rawUpgrade(t, tg.addr, o, "/deflate", "", nil)
		if resp.StatusCode != 403 || resp.Header.Get(HeaderRule) != "websocket:extension" {
			t.Fatalf("upgrade with an extension: %v", resp)
		}
	})
}

// TestWebSocketFramesSentWithTheUpgrade: frames written in the same write as the upgrade request
// are read ahead by the gate's server before the origin switches; they are checked all the
// same: the clean one reaches the origin, the one with a credential closes the socket.
func TestWebSocketFramesSentWithTheUpgrade(t *testing.T) {
	origin := &gorillaOrigin{got: make(chan string, 16)}
	tg := startGate(t, origin)
	key := [4]byte{1, 2, 3, 4}
	frames := wsframe.AppendFrame(nil, wsframe.Text, &key, []byte("hello"))
	frames = wsframe.AppendFrame(frames, wsframe.Text, &key, []byte(`{"note": "`+wsToken+`"}`))
	_, br, resp := rawUpgrade(t, tg.addr, fmt.Sprintf("origin.test:%d", tg.port), "/ws", "", frames)
	if resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v", resp)
	}
	// The refusal may come before the origin's echo of the clean message: the gate decides both
	// messages as soon as it has read them.
	op, p, err := wsRead(br)
	if err == nil && op == wsframe.Text && p == "echo:hello" {
		op, p, err = wsRead(br)
	}
	if err != nil || op != wsframe.Close || len(p) < 2 {
		t.Fatalf("after the message with a credential sent with the upgrade: %v %q %v", op, p, err)
	}
	select {
	case g := <-origin.got:
		origin.got <- g // checkWSRefused reads it
	case <-time.After(5 * time.Second):
		t.Fatal("the origin did not get the clean message sent with the upgrade")
	}
	checkWSRefused(t, int(p[0])<<8|int(p[1]), p[2:], origin.got, tg.records)
	select {
	case g := <-origin.got:
		t.Fatalf("the origin got %q too", g)
	default:
	}
}

// wsSeen is a frame as it was received: its header as sent (mask key, FIN), the header's
// length (the length encoding chosen) and its payload, unmasked.
type wsSeen struct {
	h   wsframe.Header
	hdr int
	p   string
}

// rawWSOrigin answers a WebSocket upgrade by hand and records every frame it receives until
// the connection ends, and how many bytes; it answers a close frame with its own and reads on.
// Each session's frames go to sessions when its connection ends.
type rawWSOrigin struct {
	sessions chan wsOriginSession
}

type wsOriginSession struct {
	frames []wsSeen
	bytes  int64 // everything read after the upgrade
}

func newRawWSOrigin() *rawWSOrigin { return &rawWSOrigin{sessions: make(chan wsOriginSession, 8)} }

func (o *rawWSOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	brw.Flush()
	cr := &countingReader{r: brw.Reader}
	br := bufio.NewReader(cr)
	var sess wsOriginSession
	for {
		f, err := wsReadFrame(br)
		if err != nil {
			break
		}
		sess.frames = append(sess.frames, f)
		if f.h.Op == wsframe.Close {
			c.Write(wsframe.AppendFrame(nil, wsframe.Close, nil, []byte(f.p)))
		}
	}
	sess.bytes = cr.n - int64(br.Buffered())
	o.sessions <- sess
}

// next is the next session's frames, once its connection has ended.
func (o *rawWSOrigin) next(t *testing.T) wsOriginSession {
	t.Helper()
	select {
	case s := <-o.sessions:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("the origin's session did not end")
	}
	return wsOriginSession{}
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// keyStream is an injected randomness that counts: 0x80, 0x81, …
type keyStream struct {
	mu   sync.Mutex
	next byte
}

func (k *keyStream) Read(p []byte) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for i := range p {
		p[i] = 0x80 | k.next
		k.next = (k.next + 1) & 0x7f
	}
	return len(p), nil
}

// agentKey is the mask key the agent's frames carry in these tests: it must never reach the
// origin.
var agentKey = [4]byte{0x13, 0x37, 0xbe, 0xef}

// agentFrame is a frame of the agent's, masked with agentKey: fin, op, payload, with its length
// in the encoding of width bytes (0: the shortest).
func agentFrame(fin bool, op wsframe.Opcode, width int, payload string) []byte {
	f := []byte{byte(op), 0x80}
	if fin {
		f[0] |= 0x80
	}
	n := len(payload)
	switch {
	case width == 8 || width == 0 && n > 0xffff:
		f[1] |= 127
		f = binary.BigEndian.AppendUint64(f, uint64(n))
	case width == 2 || width == 0 && n > 125:
		f[1] |= 126
		f = binary.BigEndian.AppendUint16(f, uint16(n))
	default:
		f[1] |= byte(n)
	}
	f = append(f, agentKey[:]...)
	start := len(f)
	f = append(f, payload...)
	wsframe.Unmask(f[start:], agentKey, 0)
	return f
}

// sessionRecord waits for the websocket record of a session.
func sessionRecord(t *testing.T, records func(*testing.T) []map[string]any) map[string]any {
	t.Helper()
	var rec map[string]any
	testkit.WaitFor(t, 5*time.Second, "the session's record", func() bool {
		for _, r := range records(t) {
			if r["event"] == "websocket" {
				rec = r
				return true
			}
		}
		return false
	})
	return rec
}

// TestWebSocketOriginSeesOnlyTheGatesFrames: the agent sends a text message in three fragments
// (the first with its 5-byte length in the 8-byte encoding), a ping between the second and the
// third, an empty binary message and a close, every frame masked with one recognisable key.
// The origin receives each message as one frame of the gate's: FIN set, the shortest length
// encoding, masked with the next key of the gate's injected randomness, never the agent's key,
// no continuation; the ping before the message it interrupted. The session's record counts the
// bytes the origin read, headers included.
func TestWebSocketOriginSeesOnlyTheGatesFrames(t *testing.T) {
	origin := newRawWSOrigin()
	keys := &keyStream{}
	tg := startGateWith(t, origin, func(c *Config) { c.Rand = keys })
	c, br, resp := rawUpgrade(t, tg.addr, fmt.Sprintf("origin.test:%d", tg.port), "/ws", "", nil)
	if resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v", resp)
	}
	var frames []byte
	for _, f := range [][]byte{
		agentFrame(false, wsframe.Text, 8, "hello"),
		agentFrame(false, wsframe.Continuation, 2, ", "),
		agentFrame(true, wsframe.Ping, 0, "are you there"),
		agentFrame(true, wsframe.Continuation, 0, "world"),
		agentFrame(true, wsframe.Binary, 0, ""),
		agentFrame(true, wsframe.Close, 0, "\x03\xe8bye"),
	} {
		frames = append(frames, f...)
	}
	if _, err := c.Write(frames); err != nil {
		t.Fatal(err)
	}
	if op, p, err := wsRead(br); err != nil || op != wsframe.Close || p != "\x03\xe8bye" {
		t.Fatalf("the origin's close: %v %q %v", op, p, err)
	}
	c.Close()
	got := origin.next(t)
	want := []struct {
		op  wsframe.Opcode
		p   string
		hdr int
	}{{wsframe.Ping, "are you there", 6}, {wsframe.Text, "hello, world", 6}, {wsframe.Binary, "", 6}, {wsframe.Close, "\x03\xe8bye", 6}}
	if len(got.frames) != len(want) {
		t.Fatalf("the origin got %d frames: %+v", len(got.frames), got.frames)
	}
	var total int64
	for i, f := range got.frames {
		w := want[i]
		k := byte(4 * i)
		key := [4]byte{0x80 | k, 0x80 | (k + 1), 0x80 | (k + 2), 0x80 | (k + 3)}
		if f.h.Op != w.op || f.p != w.p || !f.h.Fin || f.hdr != w.hdr || !f.h.Masked || f.h.Key != key {
			t.Fatalf("frame %d at the origin: %+v %q; want %v %q, FIN, a %d-byte header, key %x", i, f.h, f.p, w.op, w.p, w.hdr, key)
		}
		if f.h.Key == agentKey {
			t.Fatalf("frame %d carries the agent's mask key", i)
		}
		total += int64(f.hdr) + f.h.Length
	}
	if total != got.bytes {
		t.Fatalf("the origin read %d bytes, its frames make %d", got.bytes, total)
	}
	rec := sessionRecord(t, tg.records)
	if rec["verdict"] != "FREE" || fmt.Sprint(rec["bytes_in"]) != fmt.Sprint(total) ||
		!strings.Contains(fmt.Sprint(rec["detail"]), fmt.Sprintf("4 messages up (%d bytes), 1 down (7 bytes)", total)) {
		t.Fatalf("the session's record: %v; the origin read %d bytes", rec, total)
	}
}

// TestWebSocketEmptyFragmentsAreHeldAndCapped: a message begun with a one-byte fragment and
// continued with empty continuation frames costs its frames' headers in the held bytes (the
// gauge shows them while it is open), and is refused at wsframe.MaxFragments frames (1009)
// before anything of it reaches the origin; the held bytes are given back.
func TestWebSocketEmptyFragmentsAreHeldAndCapped(t *testing.T) {
	origin := newRawWSOrigin()
	tg := startGate(t, origin)
	c, br, resp := rawUpgrade(t, tg.addr, fmt.Sprintf("origin.test:%d", tg.port), "/ws", "", nil)
	if resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v", resp)
	}
	empty := agentFrame(false, wsframe.Continuation, 0, "")
	burst := append(agentFrame(false, wsframe.Text, 0, "a"), bytes.Repeat(empty, 999)...)
	if _, err := c.Write(burst); err != nil {
		t.Fatal(err)
	}
	// 7 + 999 × 6 bytes of frames, and the message's buffer: its 1 byte and the room for the
	// gate's header.
	const open = 7 + 999*6 + 1 + wsframe.MaxHeader - 1
	testkit.WaitFor(t, 5*time.Second, "the open message in the held bytes", func() bool { return tg.g.HeldBytes() >= 999*6 })
	if h := tg.g.HeldBytes(); h < 999*6 || h > open+64 {
		t.Fatalf("held %d bytes for a message of 1,000 frames, want about %d", h, open)
	}
	if _, err := c.Write(bytes.Repeat(empty, wsframe.MaxFragments)); err != nil {
		t.Fatal(err)
	}
	op, p, err := wsRead(br)
	if err != nil || op != wsframe.Close || len(p) < 2 || int(p[0])<<8|int(p[1]) != 1009 {
		t.Fatalf("after %d empty fragments: %v %q %v, want close 1009", wsframe.MaxFragments, op, p, err)
	}
	testkit.WaitFor(t, 5*time.Second, "the held bytes given back", func() bool { return tg.g.HeldBytes() == 0 })
	got := origin.next(t)
	if len(got.frames) != 1 || got.frames[0].h.Op != wsframe.Close || !strings.HasSuffix(got.frames[0].p, "lockhttp") {
		t.Fatalf("the origin got %+v", got.frames)
	}
	rec := sessionRecord(t, tg.records)
	if rec["rule"] != "websocket:frame" || !strings.Contains(fmt.Sprint(rec["reason"]), "more fragments") || !strings.Contains(fmt.Sprint(rec["detail"]), "0 messages up (0 bytes)") {
		t.Fatalf("the session's record: %v", rec)
	}
}

// TestWebSocketEmptyMessagesCountAgainstTheBudget: 500 empty text messages against a budget of
// 1 KiB an hour: each costs its 6 bytes of header, so the socket is closed with E_BUDGET before
// they are all through, and the record counts what reached the origin.
func TestWebSocketEmptyMessagesCountAgainstTheBudget(t *testing.T) {
	origin := newRawWSOrigin()
	tg := startGate(t, origin)
	p, err := policy.Load("ws.toml", []byte(fmt.Sprintf(gatePolicy+"[[budget]]\nname = \"ws\"\nhosts = [\"origin.test\"]\nbytes_up_per_hour = \"1KiB\"\n", tg.port)))
	if err != nil {
		t.Fatal(err)
	}
	tg.g.SetPolicy(p)
	c, br, resp := rawUpgrade(t, tg.addr, fmt.Sprintf("origin.test:%d", tg.port), "/ws", "", nil)
	if resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v", resp)
	}
	c.Write(bytes.Repeat(agentFrame(true, wsframe.Text, 0, ""), 500))
	op, pl, err := wsRead(br)
	if err != nil || op != wsframe.Close || !strings.Contains(pl, "E_BUDGET") {
		t.Fatalf("after 500 empty messages: %v %q %v, want a close with E_BUDGET", op, pl, err)
	}
	got := origin.next(t)
	n := len(got.frames) - 1 // and the gate's close
	if n < 1 || n >= 500 || 6*n > 1024 || got.frames[n].h.Op != wsframe.Close {
		t.Fatalf("the origin got %d empty messages past a budget of 1 KiB", n)
	}
	rec := sessionRecord(t, tg.records)
	if rec["code"] != "E_BUDGET" || fmt.Sprint(rec["bytes_in"]) != fmt.Sprint(6*n) || !strings.Contains(fmt.Sprint(rec["detail"]), fmt.Sprintf("%d messages up (%d bytes)", n, 6*n)) {
		t.Fatalf("the session's record: %v; the origin got %d messages", rec, n)
	}
}

// TestWebSocketShapesFromTheAgent: frames an agent can shape to carry something past the
// checks, each refused with its close code before it reaches the origin, which gets the gate's
// close frame and nothing of the agent's (but the frames before).
func TestWebSocketShapesFromTheAgent(t *testing.T) {
	origin := newRawWSOrigin()
	tg := startGate(t, origin)
	o := fmt.Sprintf("origin.test:%d", tg.port)
	huge := func(op wsframe.Opcode, n uint64) []byte {
		f := []byte{0x80 | byte(op), 0x80 | 127}
		return append(binary.BigEndian.AppendUint64(f, n), agentKey[:]...)
	}
	overlong := `{"note": "` + "\xc1\xa7" + wsToken[1:] + `"}` // its "g" in two bytes
	cases := []struct {
		name   string
		frames [][]byte
		code   int
		passed []string // what reached the origin before the refusal
	}{
		{"a ping carrying a secret between fragments", [][]byte{agentFrame(false, wsframe.Text, 0, "hello "), agentFrame(true, wsframe.Ping, 0, wsToken), agentFrame(true, wsframe.Continuation, 0, "world")}, 1008, nil},
		{"a pong carrying a secret", [][]byte{agentFrame(true, wsframe.Pong, 0, wsToken)}, 1008, nil},
		{"a close frame whose reason carries a secret", [][]byte{agentFrame(true, wsframe.Close, 0, "\x03\xe8"+wsToken)}, 1008, nil},
		{"a secret split across fragments", [][]byte{agentFrame(false, wsframe.Binary, 0, wsToken[:10]), agentFrame(false, wsframe.Continuation, 0, wsToken[10:20]), agentFrame(true, wsframe.Continuation, 0, wsToken[20:])}, 1008, nil},
		{"a length field of 2^62", [][]byte{huge(wsframe.Binary, 1<<62)}, 1009, nil},
		{"a length field of 2^63-1", [][]byte{huge(wsframe.Binary, 1<<63-1)}, 1009, nil},
		{"a continuation's length field of 2^63-1", [][]byte{agentFrame(false, wsframe.Binary, 0, "x"), huge(wsframe.Continuation, 1<<63-1)}, 1009, nil},
		{"a clean message after a refused one", [][]byte{agentFrame(true, wsframe.Text, 0, "first"), agentFrame(true, wsframe.Text, 0, wsToken), agentFrame(true, wsframe.Text, 0, "after")}, 1008, []string{"first"}},
		{"a fragment after a refused message", [][]byte{agentFrame(true, wsframe.Text, 0, wsToken), agentFrame(false, wsframe.Text, 0, "after")}, 1008, nil},
		{"a text message that is not UTF-8 (an overlong letter in a credential)", [][]byte{agentFrame(true, wsframe.Text, 0, overlong)}, 1007, nil},
		{"a text message split inside a character", [][]byte{agentFrame(false, wsframe.Text, 0, "caf\xc3"), agentFrame(true, wsframe.Continuation, 0, "\xa9 \xff")}, 1007, nil},
		{"a close frame with a code no peer may send", [][]byte{agentFrame(true, wsframe.Close, 0, "\x03\xed")}, 1002, nil},
		{"a close frame with a one-byte payload", [][]byte{agentFrame(true, wsframe.Close, 0, "\x03")}, 1002, nil},
		{"a close reason that is not UTF-8", [][]byte{agentFrame(true, wsframe.Close, 0, "\x03\xe8\xc1\xa7")}, 1007, nil},
		{"a data frame after the close frame", [][]byte{agentFrame(true, wsframe.Close, 0, "\x03\xe8"), agentFrame(true, wsframe.Text, 0, "late")}, 1002, []string{"\x03\xe8"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, br, resp := rawUpgrade(t, tg.addr, o, "/ws", "", nil)
			if resp.StatusCode != 101 {
				t.Fatalf("upgrade: %v", resp)
			}
			c.Write(bytes.Join(tc.frames, nil))
			code := 0
			for {
				op, p, err := wsRead(br)
				if err != nil {
					break
				}
				if op == wsframe.Close && len(p) >= 2 && strings.Contains(p, "lockhttp") {
					code = int(p[0])<<8 | int(p[1])
					break
				}
			}
			c.Close()
			got := origin.next(t)
			var passed []string
			for _, f := range got.frames {
				if f.h.Op == wsframe.Close && strings.HasSuffix(f.p, "lockhttp") {
					continue // the gate's own
				}
				passed = append(passed, f.p)
			}
			if code != tc.code || fmt.Sprint(passed) != fmt.Sprint(tc.passed) {
				t.Fatalf("closed with %d, want %d; the origin got %q, want %q", code, tc.code, passed, tc.passed)
			}
			for _, f := range got.frames {
				if strings.Contains(f.p, wsToken[5:]) {
					t.Fatalf("the origin got the credential: %q", f.p)
				}
			}
		})
	}
}

// TestWebSocketUnfinishedMessageIsDue: a data message must arrive whole within body_timeout, as
// a body must: a message begun in fragments and never finished, or one frame whose payload stops
// short, is refused with E_BODY_TIMEOUT; nothing of it reaches the origin, and its held bytes are
// given back.
func TestWebSocketUnfinishedMessageIsDue(t *testing.T) {
	origin := newRawWSOrigin()
	tg := startGate(t, origin)
	p, err := policy.Load("ws.toml", []byte(fmt.Sprintf(gatePolicy+"[settings]\nbody_timeout = \"1s\"\n", tg.port)))
	if err != nil {
		t.Fatal(err)
	}
	tg.g.SetPolicy(p)
	short := agentFrame(true, wsframe.Binary, 0, strings.Repeat("x", 100))
	for _, tc := range []struct {
		name string
		sent []byte
	}{
		{"a message begun in fragments", agentFrame(false, wsframe.Text, 0, "never finished")},
		{"a frame whose payload stops short", short[:len(short)-50]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, br, resp := rawUpgrade(t, tg.addr, fmt.Sprintf("origin.test:%d", tg.port), "/ws", "", nil)
			if resp.StatusCode != 101 {
				t.Fatalf("upgrade: %v", resp)
			}
			c.Write(append(agentFrame(true, wsframe.Text, 0, "whole"), tc.sent...))
			testkit.WaitFor(t, 5*time.Second, "the open message in the held bytes", func() bool { return tg.g.HeldBytes() > 0 })
			op, pl, err := wsRead(br)
			if err != nil || op != wsframe.Close || len(pl) < 2 || int(pl[0])<<8|int(pl[1]) != 1008 || !strings.Contains(pl, "E_BODY_TIMEOUT") {
				t.Fatalf("%v %q %v, want close 1008 with E_BODY_TIMEOUT", op, pl, err)
			}
			testkit.WaitFor(t, 5*time.Second, "the held bytes given back", func() bool { return tg.g.HeldBytes() == 0 })
			got := origin.next(t)
			if len(got.frames) != 2 || got.frames[0].p != "whole" || !strings.HasSuffix(got.frames[1].p, "lockhttp") {
				t.Fatalf("the origin got %+v", got.frames)
			}
		})
	}
}
