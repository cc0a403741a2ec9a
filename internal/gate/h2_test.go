package gate

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/lockhttp/lockhttp/internal/policy"
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
	return testkit.AuditRecords(t, tg.audit)
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
	// connect is the id of the CONNECT the connection is inside.
	connect string
	// done and open are what wait learnt of each stream.
	done map[uint32]bool
	open map[uint32]*outcome
	// graceful is the last stream id of a graceful GOAWAY wait read while it waited for another
	// stream (0: none): the streams above it were never taken, and their clients send them again.
	graceful uint32
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
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	tc := tls.Client(c, &tls.Config{ServerName: "origin.test", RootCAs: tg.caPool, NextProtos: []string{"h2"}})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN: %q, want h2", p)
	}
	h := &h2Raw{t: t, tc: tc, fr: http2.NewFramer(tc, tc), auth: o, connect: resp.Header.Get(HeaderRequest)}
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
	// lockCode is the X-LockHTTP-Code of the answer; retryAfter its Retry-After.
	lockCode   string
	retryAfter string
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
			if h.graceful != 0 && id > h.graceful {
				o.goaway = true // a GOAWAY read before declined this stream
			}
			return *o
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			o := get(id)
			if f.ErrCode == http2.ErrCodeNo {
				h.graceful = f.LastStreamID
			}
			if f.ErrCode == http2.ErrCodeNo && id != 0 && f.LastStreamID >= id {
				// A graceful GOAWAY: the stream is still answered.
				continue
			}
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
				switch hf.Name {
				case "x-lockhttp-code":
					o.lockCode = hf.Value
				case "retry-after":
					o.retryAfter = hf.Value
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
		// HTTP/2 has no reason phrase: the advice HTTP/1.1 clients read there is in a header
		// and in the body.
		if advice := policy.CodeRule.Advice(); step.status == 403 && (resp.Header.Get(HeaderAdvice) != advice || !strings.Contains(string(b), "What to do: "+advice)) {
			t.Fatalf("the refusal's advice: %s: %q\n%s", HeaderAdvice, resp.Header.Get(HeaderAdvice), b)
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
// its stream (or, past a bound, with the connection), nothing of it reaches the origin, and the
// audit shows that the agent tried: a record of the stream (the gate's decision, or the HTTP/2
// server's own refusal, rule framing:h2-stream), or of the connection the HTTP/2 server closed
// (event h2-refused, rule framing:h2-connection). The gate still serves a new connection
// afterwards.
func TestH2AttacksAreRefused(t *testing.T) {
	origin := &countingOrigin{}
	tg := startTLSGate(t, origin)
	long := strings.Repeat("a", 15000)
	// The records the attacks must leave.
	stream := func(status int, detail string) h2Want { return h2Want{kind: "stream", status: status, detail: detail} }
	conn := h2Want{kind: "conn"}
	decided := func(rule string) h2Want { return h2Want{kind: "decided", rule: rule} }
	for _, tc := range []struct {
		name string
		send func(h *h2Raw)
		// ok says whether the outcome is a refusal
		ok func(o outcome) bool
		// rec is the record the attempt leaves: one of them
		rec []h2Want
	}{
		{"pseudo-header after a regular one", func(h *h2Raw) {
			h.headers(1, true, ":method", "GET", ":scheme", "https", "x-a", "b", ":authority", h.auth, ":path", "/")
		}, func(o outcome) bool { return o.isReset && o.reset == http2.ErrCodeProtocol }, []h2Want{stream(0, "reset the stream (PROTOCOL_ERROR)")}},
		{"connection header", func(h *h2Raw) { h.headers(1, true, h.get("GET", "/", "connection", "keep-alive")...) }, refused400,
			[]h2Want{stream(400, `request header "Connection" is not valid in HTTP/2`)}},
		{"transfer-encoding header", func(h *h2Raw) { h.headers(1, true, h.get("GET", "/", "transfer-encoding", "chunked")...) }, refused400,
			[]h2Want{stream(400, `"Transfer-Encoding" is not valid`)}},
		{"keep-alive header", func(h *h2Raw) { h.headers(1, true, h.get("GET", "/", "keep-alive", "timeout=5")...) }, refused400,
			[]h2Want{stream(400, `"Keep-Alive" is not valid`)}},
		{"upgrade header", func(h *h2Raw) { h.headers(1, true, h.get("GET", "/", "upgrade", "websocket")...) }, refused400,
			[]h2Want{stream(400, `"Upgrade" is not valid`)}},
		{"proxy-connection header", func(h *h2Raw) { h.headers(1, true, h.get("GET", "/", "proxy-connection", "close")...) }, refused400,
			[]h2Want{stream(400, `"Proxy-Connection" is not valid`)}},
		{"te other than trailers", func(h *h2Raw) { h.headers(1, true, h.get("GET", "/", "te", "gzip")...) }, refused400,
			[]h2Want{stream(400, `"TE" may only be "trailers"`)}},
		{"content-length under the DATA", func(h *h2Raw) {
			h.headers(1, false, h.get("POST", "/", "content-length", "5")...)
			h.fr.WriteData(1, true, []byte("abcdeGET /smuggled HTTP/1.1\r\nHost: origin.test\r\n\r\n"))
		}, func(o outcome) bool { return o.isReset && o.reset == http2.ErrCodeProtocol || o.status == 400 },
			// The handler may have started before the DATA came: then it reads a body that
			// fails, and the record is its own.
			[]h2Want{stream(0, "reset the stream (PROTOCOL_ERROR)"), {kind: "handled"}}},
		{"content-length over the DATA", func(h *h2Raw) {
			h.headers(1, false, h.get("POST", "/", "content-length", "500")...)
			h.fr.WriteData(1, true, []byte("abcde"))
		}, func(o outcome) bool { return o.isReset || o.status == 400 }, []h2Want{stream(0, "reset the stream"), {kind: "handled"}}},
		{"extended CONNECT", func(h *h2Raw) {
			h.headers(1, true, ":method", "CONNECT", ":protocol", "websocket", ":scheme", "https", ":authority", h.auth, ":path", "/chat")
		}, func(o outcome) bool { return o.isReset && o.reset == http2.ErrCodeProtocol }, []h2Want{stream(0, "reset the stream (PROTOCOL_ERROR)")}},
		{"CONNECT inside the tunnel", func(h *h2Raw) {
			h.headers(1, true, ":method", "CONNECT", ":authority", "other.test:443")
		}, func(o outcome) bool { return o.status == 403 && strings.Contains(o.body, "framing:nested-connect") }, []h2Want{decided("framing:nested-connect")}},
		{":authority of another host", func(h *h2Raw) {
			h.headers(1, true, ":method", "GET", ":scheme", "https", ":authority", "other.test:443", ":path", "/")
		}, func(o outcome) bool { return o.status == 403 && strings.Contains(o.body, "floor:tunnel-binding") }, []h2Want{decided("floor:tunnel-binding")}},
		{"Host header of another host", func(h *h2Raw) { h.headers(1, true, h.get("GET", "/", "host", "other.test")...) },
			func(o outcome) bool {
				return o.isReset && o.reset == http2.ErrCodeProtocol || o.status == 403 && strings.Contains(o.body, "floor:tunnel-binding")
			}, []h2Want{stream(0, "reset the stream"), decided("floor:tunnel-binding")}},
		{"CR LF in a header value", func(h *h2Raw) {
			h.headers(1, true, h.get("GET", "/", "x-a", "b\r\nGET /smuggled HTTP/1.1")...)
		}, func(o outcome) bool { return o.isReset || o.status == 400 || o.goaway }, []h2Want{stream(-1, ""), conn}},
		{"CR LF in the path", func(h *h2Raw) { h.headers(1, true, h.get("GET", "/a HTTP/1.1\r\nX: /smuggled")...) },
			func(o outcome) bool { return o.isReset || o.status == 400 || o.goaway }, []h2Want{stream(-1, ""), conn}},
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
		}, func(o outcome) bool { return o.status == 431 || o.goaway || o.closed || o.isReset }, []h2Want{stream(431, "HTTP Error 431"), stream(0, ""), conn}},
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
		}, func(o outcome) bool { return o.status == 431 || o.goaway || o.closed }, []h2Want{stream(431, "HTTP Error 431"), conn}},
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
		}, func(o outcome) bool { return o.goaway || o.closed }, []h2Want{conn}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := origin.count()
			seen := len(tg.records(t))
			h := tg.rawH2(t)
			tc.send(h)
			o := h.wait(1)
			if !tc.ok(o) {
				t.Fatalf("outcome %+v: not refused", o)
			}
			if n := origin.count(); n != before {
				t.Fatalf("the origin saw %d requests (%v)", n-before, origin.paths)
			}
			var got map[string]any
			defer func() {
				if got == nil {
					for _, r := range tg.records(t)[seen:] {
						t.Logf("a record since: %v", r)
					}
				}
			}()
			testkit.WaitFor(t, 5*time.Second, fmt.Sprintf("a record of the attempt (%v)", tc.rec), func() bool {
				recs := tg.records(t)
				for i, r := range recs {
					for _, w := range tc.rec {
						if w.match(r, h.connect, i >= seen) {
							got = r
							return true
						}
					}
				}
				return false
			})
			t.Logf("outcome %+v; record %v %v %v %v: %v / %v", o, got["event"], got["rule"], got["status"], got["stream"], got["reason"], got["detail"])
		})
	}
	// The gate still serves.
	resp, err := tg.h2Client().Get(fmt.Sprintf("https://origin.test:%d/after", tg.port))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("after the attacks: %v %v", resp, err)
	}
	resp.Body.Close()
}

// h2Want is an audit record an HTTP/2 attempt must leave.
type h2Want struct {
	// kind: "stream", the HTTP/2 server's refusal of stream 1 (status -1: any); "conn", the
	// record of the connection the HTTP/2 server closed, naming stream 1; "decided", the gate's
	// decision on stream 1 with rule; "handled", any record of the gate's handler for stream 1.
	kind   string
	status int
	detail string
	rule   string
}

func (w h2Want) String() string { return w.kind + " " + w.rule + w.detail }

// match reports whether r is the record w wants, on the connection inside CONNECT connect; a
// record of the gate's handler must be new (it names no CONNECT).
func (w h2Want) match(r map[string]any, connect string, fresh bool) bool {
	s := func(k string) string { return fmt.Sprint(r[k]) }
	switch w.kind {
	case "stream":
		return r["event"] == "tunnel-request" && r["stream"] == float64(1) && r["verdict"] == "DENY" && r["code"] == "E_FLOOR" &&
			r["rule"] == "framing:h2-stream" && strings.Contains(s("detail"), connect) && r["container"] == "local" &&
			(w.status < 0 || r["status"] == float64(w.status)) && strings.Contains(s("reason")+s("detail"), w.detail)
	case "conn":
		return r["event"] == "h2-refused" && r["verdict"] == "DENY" && r["code"] == "E_FLOOR" && r["rule"] == "framing:h2-connection" &&
			strings.Contains(s("detail"), connect) && strings.Contains(s("reason"), "stream 1") && r["container"] == "local"
	case "decided":
		return fresh && r["event"] == "tunnel-request" && r["stream"] == float64(1) && r["rule"] == w.rule
	case "handled":
		return fresh && r["event"] == "tunnel-request" && r["stream"] == float64(1) && r["rule"] != "framing:h2-stream"
	}
	return false
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
	// The audit shows the attempt: the connection's record, naming its CONNECT.
	rec := waitRecord(t, tg.audit, "the connection's record", func(m map[string]any) bool {
		return m["event"] == "h2-refused" && strings.Contains(fmt.Sprint(m["detail"]), h.connect)
	})
	if rec["rule"] != "framing:h2-connection" || rec["verdict"] != "DENY" || !strings.Contains(fmt.Sprint(rec["reason"]), "closed the connection") {
		t.Fatalf("the connection's record: %v", rec)
	}
	t.Logf("%v / %v", rec["reason"], rec["detail"])
}

// TestH2RefusedStreamsAreBounded: a client that makes the HTTP/2 server refuse stream after
// stream on one connection gets a record for each of the first h2StreamRecords, the connection's
// record counts the rest, and past h2MaxResets the gate closes the connection: the audit grows
// by a bounded number of records whatever the client sends.
func TestH2RefusedStreamsAreBounded(t *testing.T) {
	origin := &countingOrigin{}
	tg := startTLSGate(t, origin)
	h := tg.rawH2(t)
	go func() {
		for id := uint32(1); id < 2*(h2MaxResets+100); id += 2 {
			if h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.block(h.get("GET", "/", "connection", "close")...), EndStream: true, EndHeaders: true}) != nil {
				return
			}
		}
	}()
	if o := h.wait(0); !o.goaway && !o.closed {
		t.Fatalf("outcome %+v", o)
	}
	rec := waitRecord(t, tg.audit, "the connection's record", func(m map[string]any) bool {
		return m["event"] == "h2-refused" && strings.Contains(fmt.Sprint(m["detail"]), h.connect) &&
			strings.Contains(fmt.Sprint(m["reason"]), "with a record of their own")
	})
	t.Logf("%v / %v", rec["reason"], rec["detail"])
	if !strings.Contains(fmt.Sprint(rec["reason"]), fmt.Sprintf("%d of them with a record of their own", h2StreamRecords)) {
		t.Fatalf("the connection's record: %v", rec)
	}
	n, conns := 0, 0
	for _, r := range tg.records(t) {
		if strings.Contains(fmt.Sprint(r["detail"]), h.connect) {
			switch r["event"] {
			case "tunnel-request":
				n++
			case "h2-refused":
				conns++
			}
		}
	}
	if n != h2StreamRecords || conns > 2 {
		t.Fatalf("%d records of refused streams and %d of the connection; want %d and at most 2", n, conns, h2StreamRecords)
	}
	if origin.count() != 0 {
		t.Fatalf("the origin saw %d requests", origin.count())
	}
}

// TestH2HeldAskHoldsOnlyItsStream: a DELETE asks a human and is held on its stream; a GET on
// the same connection completes meanwhile; the approval releases the DELETE, which goes out.
// With a short hold, the held stream's answer is E_PENDING and the connection goes on.
func TestH2HeldAskHoldsOnlyItsStream(t *testing.T) {
	origin := &countingOrigin{}
	tg, h := askTLSGate(t, origin)
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

// TestH2StreamIDsComeFromTheFrames: the stream id of each record is the one the client's frames
// named (streams 1, 3, 9 and 11: one header block split over a CONTINUATION, one padded), also
// for a stream that sends an x-lockhttp-stream header of its own; that header never reaches the
// origin, nor does the gate's.
func TestH2StreamIDsComeFromTheFrames(t *testing.T) {
	origin := &countingOrigin{}
	tg := startTLSGate(t, origin)
	h := tg.rawH2(t)
	h.headers(1, true, h.get("GET", "/one")...)
	b := h.block(h.get("GET", "/three", "x-pad", "p")...)
	h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: b[:5], EndStream: true})
	h.fr.WriteContinuation(3, true, b[5:])
	h.headers(9, true, h.get("GET", "/nine", "x-lockhttp-stream", "forged.3")...)
	// A padded block: the mark comes in a CONTINUATION of the gate's.
	h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 11, BlockFragment: h.block(h.get("GET", "/eleven")...), EndStream: true, EndHeaders: true, PadLength: 10})
	paths := map[uint32]string{1: "/one", 3: "/three", 9: "/nine", 11: "/eleven"}
	for id := range paths {
		if o := h.wait(id); o.status != 200 {
			t.Fatalf("stream %d: %+v", id, o)
		}
	}
	testkit.WaitFor(t, 5*time.Second, "the four records", func() bool {
		n := 0
		for _, r := range tg.records(t) {
			for id, path := range paths {
				if r["event"] == "tunnel-request" && strings.HasSuffix(fmt.Sprint(r["url"]), path) {
					if r["stream"] != float64(id) {
						t.Fatalf("the record of %s names stream %v, want %d", path, r["stream"], id)
					}
					n++
				}
			}
		}
		return n == 4
	})
	origin.mu.Lock()
	defer origin.mu.Unlock()
	if v := origin.head.Values("X-Lockhttp-Stream"); len(v) > 0 {
		t.Fatalf("the origin saw x-lockhttp-stream: %q", v)
	}
}

// TestH2RefusedHostAnsweredOnEachStream: a tunnel to a host the policy refuses as a whole, opened
// by a client that chooses HTTP/2, answers its streams with the refusal (code, rule, advice in
// the headers and the body, a record each with its stream id), then ends the connection
// (GOAWAY); nothing goes out.
func TestH2RefusedHostAnsweredOnEachStream(t *testing.T) {
	origin := &countingHandler{}
	tg := startTLSGate(t, origin)
	setPolicy(t, tg.gate, fmt.Sprintf(refusalPolicy, tg.port, ""))
	c := tg.h2Client()
	u := fmt.Sprintf("https://denied.test:%d/x?q=1", tg.port)
	resp, err := c.Get(u)
	if err != nil {
		t.Fatalf("a transport error instead of the refusal: %v", err)
	}
	body := readAll(resp)
	if resp.ProtoMajor != 2 {
		t.Fatalf("%s inside the tunnel, want HTTP/2", resp.Proto)
	}
	advice := policy.CodeRule.Advice()
	if resp.StatusCode != 403 || resp.Header.Get(HeaderCode) != "E_RULE" || resp.Header.Get(HeaderRule) != "deny" || resp.Header.Get(HeaderAdvice) != advice {
		t.Fatalf("got %d %v\n%s", resp.StatusCode, resp.Header, body)
	}
	for _, want := range []string{"lockhttp refused this request: GET " + u, "Code:    E_RULE", "Rule:    deny",
		`Why:     the deny list names "denied.test"`, "What to do: " + advice, "Request: " + resp.Header.Get(HeaderRequest)} {
		if !strings.Contains(body, want) {
			t.Errorf("the body lacks %q:\n%s", want, body)
		}
	}
	id := resp.Header.Get(HeaderRequest)
	inner := waitRecord(t, tg.audit, "the stream's record", func(m map[string]any) bool { return m["id"] == id })
	if inner["event"] != "tunnel-request" || inner["verdict"] != "DENY" || inner["code"] != "E_RULE" || inner["rule"] != "deny" ||
		inner["status"] != float64(403) || inner["stream"] != float64(1) || inner["url"] != u {
		t.Errorf("the stream's record: %v", inner)
	}
	conn := waitRecord(t, tg.audit, "the CONNECT's record", func(m map[string]any) bool {
		return m["event"] == "connect" && m["url"] == fmt.Sprintf("denied.test:%d", tg.port)
	})
	if conn["code"] != "E_RULE" || conn["status"] != float64(403) || !strings.Contains(fmt.Sprint(conn["detail"]), "answered request "+id) {
		t.Errorf("the CONNECT's record: %v", conn)
	}

	// Two streams at once on a raw connection: each answered, then GOAWAY.
	tc, err := connectTLS(t, tg.addr, "denied.test:443", "denied.test", &tls.Config{RootCAs: tg.caPool, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	h := &h2Raw{t: t, tc: tc, fr: http2.NewFramer(tc, tc), auth: "denied.test"}
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	h.enc = hpack.NewEncoder(&h.hbuf)
	io.WriteString(tc, http2.ClientPreface)
	h.fr.WriteSettings()
	h.headers(1, true, h.get("GET", "/one")...)
	h.headers(3, true, h.get("GET", "/two")...)
	for _, id := range []uint32{1, 3} {
		o := h.wait(id)
		if id == 3 && o.goaway && o.status == 0 {
			// The first answer's GOAWAY came before the server took stream 3: declined, never
			// run, and sent again by its client on a new connection (which is refused the same).
			continue
		}
		if o.status != 403 || o.lockCode != "E_RULE" || !strings.Contains(o.body, "What to do: "+advice) {
			t.Fatalf("stream %d: %+v", id, o)
		}
	}
	if o := h.wait(0); !o.goaway && !o.closed {
		t.Fatalf("after the refusals: %+v, want the connection to end", o)
	}
	if n := origin.n.Load(); n != 0 {
		t.Fatalf("%d requests to a refused host reached the origin", n)
	}
}
