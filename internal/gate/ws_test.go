package gate

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
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
	b, err := br.Peek(2)
	if err != nil {
		return 0, "", err
	}
	b, err = br.Peek(wsframe.HeaderLen(b[0], b[1]))
	if err != nil {
		return 0, "", err
	}
	h, n, err := wsframe.Parse(b)
	if err != nil {
		return 0, "", err
	}
	br.Discard(n)
	p := make([]byte, h.Length)
	if _, err := io.ReadFull(br, p); err != nil {
		return 0, "", err
	}
	if h.Masked {
		wsframe.Unmask(p, h.Key, 0)
	}
	return h.Op, string(p), nil
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
	if rec["code"] != "E_SECRET_EGRESS" || rec["rule"] != "secret:github" || !strings.Contains(fmt.Sprint(rec["detail"]), "1 messages up (5 bytes)") {
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
