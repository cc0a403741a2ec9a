package gate

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/lockhttp/lockhttp/internal/hubclient"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// h2Client is a Go client that speaks HTTP/2 inside the tunnels it opens through tg.
func (tg *tlsGate) h2Client() *http.Client {
	u, _ := url.Parse("http://" + tg.addr)
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u), TLSClientConfig: &tls.Config{RootCAs: tg.caPool},
		ForceAttemptHTTP2: true}, Timeout: 10 * time.Second}
}

func (tg *tlsGate) records(t *testing.T) []map[string]any {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(tg.audit, "*.jsonl"))
	var out []map[string]any
	for _, f := range files {
		data, _ := os.ReadFile(f)
		for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
			if len(line) == 0 {
				continue
			}
			var m map[string]any
			if err := json.Unmarshal(line, &m); err != nil {
				t.Fatal(err)
			}
			out = append(out, m)
		}
	}
	return out
}

// h2Raw is a raw HTTP/2 client connection inside a decrypted tunnel: the test writes frames
// as an attacker would.
type h2Raw struct {
	t    *testing.T
	tc   *tls.Conn
	fr   *http2.Framer
	enc  *hpack.Encoder
	hbuf bytes.Buffer
	auth string
	// done and open are what wait learnt of each stream.
	done map[uint32]bool
	open map[uint32]*outcome
}

// rawH2 opens a CONNECT to origin.test, completes TLS with ALPN h2 only, and sends the client
// preface and an empty SETTINGS frame.
func (tg *tlsGate) rawH2(t *testing.T) *h2Raw {
	t.Helper()
	c, err := net.Dial("tcp", tg.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	o := fmt.Sprintf("origin.test:%d", tg.port)
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", o, o)
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"}); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	tc := tls.Client(c, &tls.Config{ServerName: "origin.test", RootCAs: tg.caPool, NextProtos: []string{"h2"}})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN: %q, want h2", p)
	}
	h := &h2Raw{t: t, tc: tc, fr: http2.NewFramer(tc, tc), auth: o}
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	h.fr.MaxHeaderListSize = 1 << 20
	h.enc = hpack.NewEncoder(&h.hbuf)
	io.WriteString(tc, http2.ClientPreface)
	h.fr.WriteSettings()
	// The gate's SETTINGS come first; acknowledge them here, so that the test's writes need
	// not share the framer with wait's.
	f, err := h.fr.ReadFrame()
	if sf, ok := f.(*http2.SettingsFrame); err != nil || !ok || sf.IsAck() {
		t.Fatalf("the gate's first frame: %v %v", f, err)
	}
	h.fr.WriteSettingsAck()
	return h
}

// block HPACK-encodes fields, in order.
func (h *h2Raw) block(fields ...string) []byte {
	h.hbuf.Reset()
	for i := 0; i+1 < len(fields); i += 2 {
		h.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	return append([]byte(nil), h.hbuf.Bytes()...)
}

// get is the pseudo-headers of a GET of path to the tunnel's host, then extra fields.
func (h *h2Raw) get(method, path string, extra ...string) []string {
	return append([]string{":method", method, ":scheme", "https", ":authority", h.auth, ":path", path}, extra...)
}

func (h *h2Raw) headers(id uint32, end bool, fields ...string) {
	h.t.Helper()
	if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.block(fields...), EndStream: end, EndHeaders: true}); err != nil {
		h.t.Fatal(err)
	}
}

// outcome is what became of one stream: its status (0: none), or its reset code, or the
// connection's end (goaway, or closed).
type outcome struct {
	status  int
	body    string
	reset   http2.ErrCode
	isReset bool
	goaway  bool
	closed  bool
	// lockCode is the X-LockHTTP-Code of the answer.
	lockCode string
}

// wait reads frames until stream id ends (answered in full, reset) or the connection does; what
// it reads of other streams is kept for their own wait. It writes nothing (the answers the tests
// read fit the initial windows).
func (h *h2Raw) wait(id uint32) outcome {
	h.t.Helper()
	if h.done == nil {
		h.done, h.open = map[uint32]bool{}, map[uint32]*outcome{}
	}
	get := func(sid uint32) *outcome {
		if h.open[sid] == nil {
			h.open[sid] = &outcome{}
		}
		return h.open[sid]
	}
	for !h.done[id] {
		f, err := h.fr.ReadFrame()
		if err != nil {
			if isTimeout(err) {
				h.t.Fatalf("stream %d: no outcome before the deadline", id)
			}
			o := get(id)
			o.closed = true
			return *o
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			o := get(id)
			o.goaway = true
			return *o
		case *http2.RSTStreamFrame:
			o := get(f.StreamID)
			o.isReset, o.reset = true, f.ErrCode
			h.done[f.StreamID] = true
		case *http2.MetaHeadersFrame:
			o := get(f.StreamID)
			if s := f.PseudoValue("status"); s != "" {
				fmt.Sscan(s, &o.status)
			}
			for _, hf := range f.RegularFields() {
				if hf.Name == "x-lockhttp-code" {
					o.lockCode = hf.Value
				}
			}
			if f.StreamEnded() {
				h.done[f.StreamID] = true
			}
		case *http2.DataFrame:
			o := get(f.StreamID)
			o.body += string(f.Data())
			if f.StreamEnded() {
				h.done[f.StreamID] = true
			}
		}
	}
	return *get(id)
}

// TestH2StreamsAreDecidedEachOnOneConnection: a Go client speaks HTTP/2 inside the tunnel; a
// free GET, a refused POST and another GET share one connection; the refusal ends its stream
// only, and every request has its own audit record with its stream id.
func TestH2StreamsAreDecidedEachOnOneConnection(t *testing.T) {
	tg := startTLSGate(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok "+r.Method) }))
	c := tg.h2Client()
	u := fmt.Sprintf("https://origin.test:%d/x", tg.port)
	var ids []string
	for i, step := range []struct {
		method string
		status int
		rule   string
	}{{"GET", 200, ""}, {"POST", 403, "no-posts"}, {"GET", 200, ""}} {
		req, _ := http.NewRequest(step.method, u, strings.NewReader("body"))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Fatalf("step %d: %s, want HTTP/2 inside the tunnel", i, resp.Proto)
		}
		if resp.StatusCode != step.status || resp.Header.Get(HeaderRule) != step.rule {
			t.Fatalf("step %d: %d rule %q (%s), want %d rule %q", i, resp.StatusCode, resp.Header.Get(HeaderRule), b, step.status, step.rule)
		}
		if step.status == 403 && (resp.Header.Get(HeaderCode) != "E_RULE" || !strings.Contains(string(b), "Code:    E_RULE") || resp.Header.Get("Connection") != "") {
			t.Fatalf("the refusal on its stream: %v\n%s", resp.Header, b)
		}
		ids = append(ids, resp.Header.Get(HeaderRequest))
	}
	// One tunnel: the client reused its connection, refusal and all.
	var connects, streams int
	seen := map[float64]bool{}
	testkit.WaitFor(t, 5*time.Second, "the three requests' records", func() bool {
		n := 0
		for _, r := range tg.records(t) {
			for _, id := range ids {
				if r["id"] == id {
					n++
				}
			}
		}
		return n == 3
	})
	for _, r := range tg.records(t) {
		switch r["event"] {
		case "connect":
			connects++
		case "tunnel-request":
			streams++
			s, _ := r["stream"].(float64)
			t.Logf("%v %v %v %v", r["method"], r["stream"], r["status"], r["detail"])
			if s == 0 || seen[s] {
				t.Fatalf("record without its own stream id: %v", r)
			}
			seen[s] = true
		}
	}
	if streams != 3 {
		t.Fatalf("%d tunnel-request records, want 3", streams)
	}
	if connects > 1 {
		t.Fatalf("%d CONNECT records: the client opened a new tunnel", connects)
	}
}

// countingOrigin counts the requests that reach it.
type countingOrigin struct {
	mu sync.Mutex
	n  int
	// paths are the paths it was asked for; the last request's head and body.
	paths []string
	proto int
	head  http.Header
	te    []string
	cl    int64
	body  string
}

func (o *countingOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	o.mu.Lock()
	o.n++
	o.paths = append(o.paths, r.URL.Path)
	o.proto, o.head, o.te, o.cl, o.body = r.ProtoMajor, r.Header, r.TransferEncoding, r.ContentLength, string(b)
	o.mu.Unlock()
	io.WriteString(w, "ok")
}

func (o *countingOrigin) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n
}

// TestH2AttacksAreRefused: what HTTP/2 lets a client send that HTTP/1.1 did not is refused on
// its stream (or, past a bound, with the connection), and nothing of it reaches the origin; the
// gate still serves a new connection afterwards.
func TestH2AttacksAreRefused(t *testing.T) {
	origin := &countingOrigin{}
	tg := startTLSGate(t, origin)
	long := strings.Repeat("a", 15000)
	for _, tc := range []struct {
		name string
		send func(h *h2Raw)
		// ok says whether the outcome is a refusal
		ok func(o outcome) bool
	}{
		{"pseudo-header after a regular one", func(h *h2Raw) {
			h.headers(1, true, ":method", "GET", ":scheme", "https", "x-a", "b", ":authority", h.auth, ":path", "/")
		}, func(o outcome) bool { return o.isReset && o.reset == http2.ErrCodeProtocol }},
		{"connection header", func(h *h2Raw) { h.headers(1, true, h.get("GET", "/", "connection", "keep-alive")...) }, refused400},
		{"transfer-encoding header", func(h *h2Raw) { h.headers(1, true, h.get("GET", "/", "transfer-encoding", "chunked")...) }, refused400},
		{"keep-alive header", func(h *h2Raw) { h.headers(1, true, h.get("GET", "/", "keep-alive", "timeout=5")...) }, refused400},
		{"upgrade header", func(h *h2Raw) { h.headers(1, true, h.get("GET", "/", "upgrade", "websocket")...) }, refused400},
		{"proxy-connection header", func(h *h2Raw) { h.headers(1, true, h.get("GET", "/", "proxy-connection", "close")...) }, refused400},
		{"te other than trailers", func(h *h2Raw) { h.headers(1, true, h.get("GET", "/", "te", "gzip")...) }, refused400},
		{"content-length under the DATA", func(h *h2Raw) {
			h.headers(1, false, h.get("POST", "/", "content-length", "5")...)
			h.fr.WriteData(1, true, []byte("abcdeGET /smuggled HTTP/1.1\r\nHost: origin.test\r\n\r\n"))
		}, func(o outcome) bool { return o.isReset && o.reset == http2.ErrCodeProtocol || o.status == 400 }},
		{"content-length over the DATA", func(h *h2Raw) {
			h.headers(1, false, h.get("POST", "/", "content-length", "500")...)
			h.fr.WriteData(1, true, []byte("abcde"))
		}, func(o outcome) bool { return o.isReset || o.status == 400 }},
		{"extended CONNECT", func(h *h2Raw) {
			h.headers(1, true, ":method", "CONNECT", ":protocol", "websocket", ":scheme", "https", ":authority", h.auth, ":path", "/chat")
		}, func(o outcome) bool { return o.isReset && o.reset == http2.ErrCodeProtocol }},
		{"CONNECT inside the tunnel", func(h *h2Raw) {
			h.headers(1, true, ":method", "CONNECT", ":authority", "other.test:443")
		}, func(o outcome) bool { return o.status == 403 && strings.Contains(o.body, "framing:nested-connect") }},
		{":authority of another host", func(h *h2Raw) {
			h.headers(1, true, ":method", "GET", ":scheme", "https", ":authority", "other.test:443", ":path", "/")
		}, func(o outcome) bool { return o.status == 403 && strings.Contains(o.body, "floor:tunnel-binding") }},
		{"Host header of another host", func(h *h2Raw) { h.headers(1, true, h.get("GET", "/", "host", "other.test")...) },
			func(o outcome) bool {
				return o.isReset && o.reset == http2.ErrCodeProtocol || o.status == 403 && strings.Contains(o.body, "floor:tunnel-binding")
			}},
		{"CR LF in a header value", func(h *h2Raw) {
			h.headers(1, true, h.get("GET", "/", "x-a", "b\r\nGET /smuggled HTTP/1.1")...)
		}, func(o outcome) bool { return o.isReset || o.status == 400 || o.goaway }},
		{"CR LF in the path", func(h *h2Raw) { h.headers(1, true, h.get("GET", "/a HTTP/1.1\r\nX: /smuggled")...) },
			func(o outcome) bool { return o.isReset || o.status == 400 || o.goaway }},
		{"HPACK bomb", func(h *h2Raw) {
			// One 4 KB field in the dynamic table, then a thousand one-byte references to it:
			// a 6 KB block that decodes to 4 MB.
			h.hbuf.Reset()
			for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", h.auth}, {":path", "/"}} {
				h.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1], Sensitive: true})
			}
			h.enc.SetMaxDynamicTableSizeLimit(4096)
			h.enc.WriteField(hpack.HeaderField{Name: "x-bomb", Value: strings.Repeat("b", 4000)})
			block := append([]byte(nil), h.hbuf.Bytes()...)
			for i := 0; i < 1000; i++ {
				block = append(block, 0x80|62) // indexed: the newest dynamic entry
			}
			h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndStream: true, EndHeaders: true})
		}, func(o outcome) bool { return o.status == 431 || o.goaway || o.closed || o.isReset }},
		{"oversized header list", func(h *h2Raw) {
			fields := h.get("GET", "/")
			for i := 0; i < 6; i++ {
				fields = append(fields, fmt.Sprintf("x-big-%d", i), long)
			}
			b := h.block(fields...)
			h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b[:16000], EndStream: true})
			for b = b[16000:]; len(b) > 0; {
				n := min(len(b), 16000)
				h.fr.WriteContinuation(1, n == len(b), b[:n])
				b = b[n:]
			}
		}, func(o outcome) bool { return o.status == 431 || o.goaway || o.closed }},
		{"CONTINUATION flood", func(h *h2Raw) {
			frag := h.block("x-pad", long)
			h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: h.block(h.get("GET", "/")...), EndStream: true})
			go func() {
				// Without END_HEADERS, for ever (16 MB): the gate must stop reading long before.
				for i := 0; i < 1000; i++ {
					if h.fr.WriteContinuation(1, false, frag) != nil {
						return
					}
				}
			}()
		}, func(o outcome) bool { return o.goaway || o.closed }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := origin.count()
			h := tg.rawH2(t)
			tc.send(h)
			o := h.wait(1)
			if !tc.ok(o) {
				t.Fatalf("outcome %+v: not refused", o)
			}
			if n := origin.count(); n != before {
				t.Fatalf("the origin saw %d requests (%v)", n-before, origin.paths)
			}
		})
	}
	// The gate still serves.
	resp, err := tg.h2Client().Get(fmt.Sprintf("https://origin.test:%d/after", tg.port))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("after the attacks: %v %v", resp, err)
	}
	resp.Body.Close()
}

func refused400(o outcome) bool {
	return o.status == 400 || o.isReset && o.reset == http2.ErrCodeProtocol
}

// TestH2RapidResetIsBounded: a client opens streams and cancels each at once (CVE-2023-44487);
// the gate closes the connection after a bounded number of them, and only a bounded number of
// requests reach the origin.
func TestH2RapidResetIsBounded(t *testing.T) {
	origin := &countingOrigin{}
	tg := startTLSGate(t, origin)
	h := tg.rawH2(t)
	const streams = 5000
	done := make(chan int, 1)
	go func() {
		var id uint32 = 1
		for i := 0; i < streams; i++ {
			if h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.block(h.get("GET", fmt.Sprintf("/r%d", i))...), EndStream: true, EndHeaders: true}) != nil ||
				h.fr.WriteRSTStream(id, http2.ErrCodeCancel) != nil {
				done <- i
				return
			}
			id += 2
		}
		done <- streams
	}()
	o := h.wait(0) // stream 0: only the connection's end returns
	if !o.goaway && !o.closed {
		t.Fatalf("outcome %+v", o)
	}
	h.tc.Close()
	sent := <-done
	if n := origin.count(); n > h2MaxResets+2*h2MaxStreams {
		t.Fatalf("%d of %d cancelled streams reached the origin", n, sent)
	}
	t.Logf("%d streams written before the gate closed; %d reached the origin", sent, origin.count())
}

// TestH2HeldAskHoldsOnlyItsStream: a DELETE asks a human and is held on its stream; a GET on
// the same connection completes meanwhile; the approval releases the DELETE, which goes out.
// With a short hold, the held stream's answer is E_PENDING and the connection goes on.
func TestH2HeldAskHoldsOnlyItsStream(t *testing.T) {
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	h, hubURL, stop := hubServer(t, "127.0.0.1:0", filepath.Join(t.TempDir(), "hub.json"), key)
	defer stop()
	hc := hubclient.New(hubURL, "gate-token-0123456789", key.Public().(ed25519.PublicKey), nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go hc.Run(ctx)
	origin := &countingOrigin{}
	tg := startTLSGateWith(t, origin, func(c *Config) { c.Hub = hc })
	testkit.WaitFor(t, 5*time.Second, "the hub", hc.Connected)
	c := tg.h2Client()
	u := fmt.Sprintf("https://origin.test:%d", tg.port)
	// Open the connection first, so that both requests share it.
	if resp, err := c.Get(u + "/warm"); err != nil || resp.ProtoMajor != 2 {
		t.Fatalf("first GET: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	held := make(chan *http.Response, 1)
	go func() {
		req, _ := http.NewRequest("DELETE", u+"/held", nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Error(err)
			close(held)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		held <- resp
	}()
	testkit.WaitFor(t, 10*time.Second, "the DELETE's ticket", func() bool { return len(h.Pending()) == 1 })
	resp, err := c.Get(u + "/meanwhile")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("a GET while the DELETE is held: %v %v", resp, err)
	}
	resp.Body.Close()
	select {
	case r := <-held:
		t.Fatalf("the held DELETE answered before the approval: %v", r)
	default:
	}
	if n := origin.count(); n != 2 {
		t.Fatalf("the origin saw %d requests before the approval, want 2 (the GETs)", n)
	}
	p := h.Pending()
	if _, err := h.Decide(p[0].ID, p[0].Fingerprint, true, "terminal:t", ""); err != nil {
		t.Fatal(err)
	}
	r := <-held
	if r == nil || r.StatusCode != 200 || r.ProtoMajor != 2 {
		t.Fatalf("the approved DELETE: %v", r)
	}
	if origin.count() != 3 {
		t.Fatalf("the origin saw %d requests, want 3", origin.count())
	}
	// E_PENDING is the held stream's answer alone.
	p2 := *tg.gate.Policy()
	p2.Settings.Hold = 200 * time.Millisecond
	tg.gate.SetPolicy(&p2)
	req, _ := http.NewRequest("DELETE", u+"/pending", nil)
	resp, err = c.Do(req)
	if err != nil || resp.StatusCode != 403 || resp.Header.Get(HeaderCode) != "E_PENDING" {
		t.Fatalf("a DELETE held past the hold: %v %v", resp, err)
	}
	resp.Body.Close()
	if resp, err = c.Get(u + "/still"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("a GET after E_PENDING: %v %v", resp, err)
	}
	resp.Body.Close()
}

// TestH2StalledBodyTimesOutItsStreamOnly: a stream's body stalls and is refused with
// E_BODY_TIMEOUT on that stream; a stream opened after it on the same connection is answered
// meanwhile, and the connection goes on.
func TestH2StalledBodyTimesOutItsStreamOnly(t *testing.T) {
	origin := &countingOrigin{}
	tg := startTLSGateWith(t, origin, func(c *Config) { c.BodyStall = 300 * time.Millisecond })
	h := tg.rawH2(t)
	h.headers(1, false, h.get("PUT", "/slow", "content-length", "100")...)
	h.fr.WriteData(1, false, []byte("12345"))
	h.headers(3, true, h.get("GET", "/fast")...)
	if o := h.wait(3); o.status != 200 {
		t.Fatalf("the GET beside a stalled body: %+v", o)
	}
	if o := h.wait(1); o.status != 408 || o.lockCode != "E_BODY_TIMEOUT" {
		t.Fatalf("the stalled stream: %+v", o)
	}
	h.headers(5, true, h.get("GET", "/after")...)
	if o := h.wait(5); o.status != 200 {
		t.Fatalf("a GET after the refusal: %+v", o)
	}
	if origin.count() != 2 {
		t.Fatalf("the origin saw %d requests, want the 2 GETs", origin.count())
	}
}

// TestH2DowngradeToHTTP1KeepsTheFraming: HTTP/2 requests forwarded to an HTTP/1.1 origin go
// out with one Content-Length that is the body the gate read, no Transfer-Encoding, and
// nothing in a body or a header becomes a second request (the h2-to-h1 desync cases).
func TestH2DowngradeToHTTP1KeepsTheFraming(t *testing.T) {
	origin := &countingOrigin{}
	tg := startTLSGate(t, origin)
	smuggled := "0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: origin.test\r\n\r\n"
	for _, tc := range []struct {
		name   string
		send   func(h *h2Raw)
		status int
		body   string
	}{
		{"a body delimited by END_STREAM, no content-length", func(h *h2Raw) {
			h.headers(1, false, h.get("PUT", "/a")...)
			h.fr.WriteData(1, false, []byte("first part;"))
			h.fr.WriteData(1, true, []byte(smuggled))
		}, 200, "first part;" + smuggled},
		{"a content-length that agrees", func(h *h2Raw) {
			h.headers(1, false, h.get("PUT", "/b", "content-length", fmt.Sprint(len(smuggled)))...)
			h.fr.WriteData(1, true, []byte(smuggled))
		}, 200, smuggled},
		{"a chunked-looking body is data", func(h *h2Raw) {
			h.headers(1, false, h.get("PUT", "/c", "content-type", "text/plain")...)
			h.fr.WriteData(1, true, []byte("5\r\nhello\r\n"+smuggled))
		}, 200, "5\r\nhello\r\n" + smuggled},
		{"an absolute :path to another host", func(h *h2Raw) {
			h.headers(1, true, ":method", "GET", ":scheme", "https", ":authority", h.auth, ":path", "https://other.test/smuggled")
		}, -1, ""},
		{"a header name with upper case", func(h *h2Raw) { h.headers(1, true, h.get("GET", "/d", "Transfer-Encoding", "chunked")...) }, -1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := origin.count()
			h := tg.rawH2(t)
			tc.send(h)
			o := h.wait(1)
			if tc.status == -1 {
				if !o.isReset && o.status != 400 && o.status != 403 {
					t.Fatalf("outcome %+v: not refused", o)
				}
			} else if o.status != tc.status {
				t.Fatalf("outcome %+v, want %d", o, tc.status)
			}
			origin.mu.Lock()
			defer origin.mu.Unlock()
			for _, p := range origin.paths {
				if p == "/smuggled" {
					t.Fatalf("a smuggled request reached the origin: %v", origin.paths)
				}
			}
			if tc.status != 200 {
				if origin.n != before {
					t.Fatalf("the origin saw %v", origin.paths[before:])
				}
				return
			}
			if origin.n != before+1 || origin.proto != 1 {
				t.Fatalf("the origin saw %v over HTTP/%d, want one HTTP/1.1 request", origin.paths[before:], origin.proto)
			}
			if origin.body != tc.body || origin.cl != int64(len(tc.body)) || len(origin.te) != 0 || len(origin.head.Values("Content-Length")) > 1 {
				t.Fatalf("forwarded as content-length %d %v, transfer-encoding %v, body %q", origin.cl, origin.head.Values("Content-Length"), origin.te, origin.body)
			}
		})
	}
}

// TestUpstreamSpeaksHTTP2ToOriginsThatOfferIt: the gate speaks HTTP/2 to an origin that offers
// it by ALPN, whatever the client spoke to the gate, with the origin's certificate checked as
// for HTTP/1.1.
func TestUpstreamSpeaksHTTP2ToOriginsThatOfferIt(t *testing.T) {
	origin := &countingOrigin{}
	tg := startTLSGateWith(t, origin, nil)
	// Restart the origin with h2 on, at the same address.
	tg.origin.Close()
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", tg.port))
	if err != nil {
		t.Skipf("the origin's port was taken: %v", err)
	}
	h2o := &http.Server{Handler: origin, TLSConfig: tg.origin.TLS.Clone()}
	h2o.TLSConfig.NextProtos = []string{"h2", "http/1.1"}
	go h2o.ServeTLS(l, "", "")
	t.Cleanup(func() { h2o.Close() })
	for name, c := range map[string]*http.Client{"HTTP/1.1 client": tg.client(), "HTTP/2 client": tg.h2Client()} {
		resp, err := c.Get(fmt.Sprintf("https://origin.test:%d/up", tg.port))
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %v %v", name, resp, err)
		}
		resp.Body.Close()
		origin.mu.Lock()
		proto := origin.proto
		origin.mu.Unlock()
		if proto != 2 {
			t.Fatalf("%s: the origin was asked over HTTP/%d, want HTTP/2", name, proto)
		}
	}
}
