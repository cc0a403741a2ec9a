package framing

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

const testToken = "tok-0123456789abcdef"

// testServer is an http.Server on loopback whose connections are Conns, with a handler that
// echoes each request (method, target, body) and logs what it saw.
type testServer struct {
	addr    string
	entered chan string // the handler sends the target of /wait/ requests here before reading the body

	mu  sync.Mutex
	log []string
}

type connKey struct{}

type framedListener struct {
	net.Listener
	o Options
}

func (l framedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return NewConn(c, l.o), nil
}

func newTestServer(t *testing.T, o Options) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &testServer{addr: ln.Addr().String(), entered: make(chan string, 1)}
	srv := &http.Server{
		Handler: http.HandlerFunc(s.serve),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c.(*Conn))
		},
		ReadHeaderTimeout:            10 * time.Second,
		DisableGeneralOptionsHandler: true,
	}
	go srv.Serve(framedListener{ln, o})
	t.Cleanup(func() { srv.Close() })
	return s
}

func (s *testServer) add(e string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = append(s.log, e)
}

func (s *testServer) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.log...)
}

func (s *testServer) serve(w http.ResponseWriter, r *http.Request) {
	fc := r.Context().Value(connKey{}).(*Conn)
	if e := fc.Refusal(r); e != nil {
		s.add("refused " + string(e.Kind))
		w.Header().Set("X-Kind", string(e.Kind))
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, e.Reason)
		return
	}
	if r.Method == http.MethodConnect || r.Header.Get("Upgrade") != "" {
		s.add(r.Method + " " + r.RequestURI + " raw")
		c, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			s.add("hijack: " + err.Error())
			return
		}
		defer c.Close()
		if r.Method == http.MethodConnect {
			io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
		} else {
			io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
		}
		io.Copy(c, rw.Reader) // echo the raw stream
		return
	}
	if strings.HasPrefix(r.URL.Path, "/wait/") {
		s.entered <- r.RequestURI
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var fe *Error
		if errors.As(err, &fe) {
			s.add("body error " + string(fe.Kind))
		} else {
			s.add("body error: " + err.Error())
		}
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	e := fmt.Sprintf("%s %s %q", r.Method, r.RequestURI, body)
	for k, v := range r.Trailer {
		e += fmt.Sprintf(" trailer %s=%q", k, v)
	}
	s.add(e)
	io.WriteString(w, e)
}

type response struct {
	status int
	kind   string
	body   string
}

// readResponses reads responses from br until the server closes the connection.
func readResponses(t *testing.T, br *bufio.Reader) []response {
	t.Helper()
	var out []response
	for {
		if _, err := br.Peek(1); err == io.EOF {
			return out
		}
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("after %d responses: %v", len(out), err)
		}
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatalf("response body: %v", err)
		}
		out = append(out, response{res.StatusCode, res.Header.Get("X-Kind"), string(b)})
	}
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	t.Cleanup(func() { c.Close() })
	return c
}

// writeSplit writes b in pieces of at most step bytes (0: one write).
func writeSplit(t *testing.T, c net.Conn, b []byte, step int) {
	t.Helper()
	for len(b) > 0 {
		q := b
		if step > 0 && len(q) > step {
			q = q[:step]
		}
		if _, err := c.Write(q); err != nil {
			t.Fatal(err)
		}
		b = b[len(q):]
	}
}

// echoOf is what the handler logs and answers for a request net/http reads from raw.
func echoOf(t *testing.T, raw string) string {
	t.Helper()
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
	if err != nil {
		t.Fatalf("reference read of %q: %v", raw, err)
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatalf("reference body of %q: %v", raw, err)
	}
	e := fmt.Sprintf("%s %s %q", r.Method, r.RequestURI, body)
	for k, v := range r.Trailer {
		e += fmt.Sprintf(" trailer %s=%q", k, v)
	}
	return e
}

// keepAliveRequests is a sequence of valid requests for one connection; the last one closes it.
func keepAliveRequests(t *testing.T) []string {
	reqs := []string{
		"GET http://a.com/one HTTP/1.1\r\nHost: a.com\r\n\r\n",
		"POST http://a.com/two HTTP/1.1\r\nHost: a.com\r\nContent-Length: 11\r\n\r\nhello world",
		"POST /three HTTP/1.1\r\nHost: a.com\r\nTrailer: X-Sum\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n6\r\n world\r\n0\r\nX-Sum: 1\r\n\r\n",
		"PUT /four HTTP/1.1\r\nHost: a.com\r\nContent-Length: 0\r\n\r\n",
		"GET /five HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
	}
	for _, f := range loadFixtures(t, "clients") {
		if !bytes.HasPrefix(f.data, []byte("CONNECT")) && !bytes.Contains(f.data, []byte("Connection: close")) {
			reqs = append(reqs, string(f.data))
		}
	}
	return append(reqs, "GET /last HTTP/1.1\r\nHost: a.com\r\nConnection: close\r\n\r\n")
}

func TestConnKeepAlive(t *testing.T) {
	reqs := keepAliveRequests(t)
	var want []string
	for _, r := range reqs {
		want = append(want, echoOf(t, r))
	}
	// Empty lines before a request line are tolerated, up to two.
	stream := strings.Join(reqs[:2], "") + "\r\n\r\n" + strings.Join(reqs[2:], "")
	for _, step := range []int{0, 1, 5, 100} {
		t.Run(fmt.Sprintf("write %d bytes at a time", step), func(t *testing.T) {
			s := newTestServer(t, Options{Token: testToken})
			c := dial(t, s.addr)
			writeSplit(t, c, []byte(stream), step)
			res := readResponses(t, bufio.NewReader(c))
			if len(res) != len(want) {
				t.Fatalf("%d responses, want %d: %+v", len(res), len(want), res)
			}
			for i, r := range res {
				if r.status != 200 || r.body != want[i] {
					t.Errorf("response %d: %d %q, want 200 %q", i, r.status, r.body, want[i])
				}
			}
			if got := s.seen(); !equal(got, want) {
				t.Errorf("handler saw\n%q\nwant\n%q", got, want)
			}
		})
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestConnRefusesAfterValid sends a valid request, then each bad input: the valid one is answered,
// the handler then sees only the substituted request, and the connection closes.
func TestConnRefusesAfterValid(t *testing.T) {
	type bad struct {
		name   string
		tunnel bool
		data   string
		kind   Kind
	}
	var cases []bad
	for _, f := range loadFixtures(t, "heads") {
		cases = append(cases, bad{"heads/" + f.name, f.tunnel, string(f.data), f.kind})
	}
	for _, f := range loadFixtures(t, "chunked") {
		head := "POST /SMUGGLED HTTP/1.1\r\nHost: a.com\r\nTransfer-Encoding: chunked\r\n\r\n"
		cases = append(cases, bad{"chunked/" + f.name, false, head + string(f.data), f.kind})
	}
	cases = append(cases,
		bad{"tls-client-hello", false, "\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03", TLSOnPlain},
		bad{"three-empty-lines", false, "\r\n\r\n\r\nGET /SMUGGLED HTTP/1.1\r\nHost: a.com\r\n\r\n", BadRequest},
		bad{"bare-lf-before-request-line", false, "\nGET /SMUGGLED HTTP/1.1\r\nHost: a.com\r\n\r\n", BadRequest},
		bad{"binary", false, "\x00\x01\x02\x03", BadRequest},
		bad{"bare-cr-before-request-line", false, "\rGET /SMUGGLED HTTP/1.1\r\nHost: a.com\r\n\r\n", BadRequest},
		bad{"too-large", false, "GET /SMUGGLED HTTP/1.1\r\nHost: a.com\r\nX-Pad: " + strings.Repeat("p", 2000), TooLarge},
	)
	valid := "GET /first HTTP/1.1\r\nHost: a.com\r\n\r\n"
	first := echoOf(t, valid)
	for _, tc := range cases {
		for _, pipelined := range []bool{true, false} {
			name := tc.name + "/after-response"
			if pipelined {
				name = tc.name + "/pipelined"
			}
			t.Run(name, func(t *testing.T) {
				s := newTestServer(t, Options{Token: testToken, Tunnel: tc.tunnel, MaxHead: 1024})
				c := dial(t, s.addr)
				br := bufio.NewReader(c)
				var res []response
				if pipelined {
					writeSplit(t, c, []byte(valid+tc.data), 0)
				} else {
					writeSplit(t, c, []byte(valid), 0)
					r, err := http.ReadResponse(br, nil)
					if err != nil {
						t.Fatal(err)
					}
					b, _ := io.ReadAll(r.Body)
					res = append(res, response{r.StatusCode, "", string(b)})
					writeSplit(t, c, []byte(tc.data), 0)
				}
				// The client does not close its side: refusals must not wait for more bytes.
				res = append(res, readResponses(t, br)...)
				if len(res) != 2 || res[0].status != 200 || res[0].body != first ||
					res[1].status != 400 || res[1].kind != string(tc.kind) {
					t.Errorf("responses %+v; want 200 %q, then 400 %s", res, first, tc.kind)
				}
				if got, want := s.seen(), []string{first, "refused " + string(tc.kind)}; !equal(got, want) {
					t.Errorf("handler saw %q, want %q", got, want)
				}
			})
		}
	}
}

// TestConnChunkedGoesBadLater: a chunked body that goes bad after its head reached the handler
// fails the handler's body read with the *Error, and the connection closes.
func TestConnChunkedGoesBadLater(t *testing.T) {
	s := newTestServer(t, Options{Token: testToken})
	c := dial(t, s.addr)
	writeSplit(t, c, []byte("POST /wait/up HTTP/1.1\r\nHost: a.com\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"), 0)
	if got := <-s.entered; got != "/wait/up" {
		t.Fatalf("handler entered %q", got)
	}
	writeSplit(t, c, []byte("5\nworld\r\n0\r\n\r\nGET /SMUGGLED HTTP/1.1\r\nHost: a.com\r\n\r\n"), 0)
	res := readResponses(t, bufio.NewReader(c))
	if len(res) != 1 || res[0].status != 400 {
		t.Errorf("responses %+v, want one 400", res)
	}
	if got, want := s.seen(), []string{"body error bad-request"}; !equal(got, want) {
		t.Errorf("handler saw %q, want %q", got, want)
	}
}

// TestConnRaw: after a CONNECT, or a request with an Upgrade, the stream passes unchecked.
func TestConnRaw(t *testing.T) {
	raw := "\x16\x03\x01\x00\x05hello GET / HTTP/1.1\nHost: x\n\n\r\n\r\nPRI * HTTP/2.0\r\n\r\n" + strings.Repeat("\x00\xff", 5000)
	tests := []struct {
		name, head, seen string
		status           int
	}{
		{"CONNECT", "CONNECT a.com:443 HTTP/1.1\r\nHost: a.com:443\r\n\r\n", "CONNECT a.com:443 raw", 200},
		{"websocket", "GET http://a.com/ws HTTP/1.1\r\nHost: a.com\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", "GET http://a.com/ws raw", 101},
	}
	for _, tt := range tests {
		for _, pipelined := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/pipelined=%v", tt.name, pipelined), func(t *testing.T) {
				s := newTestServer(t, Options{Token: testToken})
				c := dial(t, s.addr)
				br := bufio.NewReader(c)
				if pipelined {
					writeSplit(t, c, []byte(tt.head+raw), 0)
				} else {
					writeSplit(t, c, []byte(tt.head), 0)
				}
				res, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
				if err != nil {
					t.Fatal(err)
				}
				if res.StatusCode != tt.status {
					t.Fatalf("status %d, want %d", res.StatusCode, tt.status)
				}
				if !pipelined {
					writeSplit(t, c, []byte(raw), 7)
				}
				c.(*net.TCPConn).CloseWrite()
				echo, err := io.ReadAll(br)
				if err != nil {
					t.Fatal(err)
				}
				if string(echo) != raw {
					t.Errorf("echo of %d bytes differs from the %d sent", len(echo), len(raw))
				}
				if got := s.seen(); !equal(got, []string{tt.seen}) {
					t.Errorf("handler saw %q", got)
				}
			})
		}
	}
}

func TestConnEndOfStream(t *testing.T) {
	t.Run("inside a head", func(t *testing.T) {
		s := newTestServer(t, Options{Token: testToken})
		c := dial(t, s.addr)
		writeSplit(t, c, []byte("GET /x HTTP/1.1\r\nHost: a.com\r\n"), 0)
		c.(*net.TCPConn).CloseWrite()
		res := readResponses(t, bufio.NewReader(c))
		if len(res) != 1 || res[0].kind != string(BadRequest) {
			t.Errorf("responses %+v, want one bad-request", res)
		}
	})
	t.Run("between requests", func(t *testing.T) {
		s := newTestServer(t, Options{Token: testToken})
		c := dial(t, s.addr)
		writeSplit(t, c, []byte("GET /x HTTP/1.1\r\nHost: a.com\r\n\r\n\r\n"), 0)
		c.(*net.TCPConn).CloseWrite()
		res := readResponses(t, bufio.NewReader(c))
		if len(res) != 1 || res[0].status != 200 {
			t.Errorf("responses %+v, want one 200", res)
		}
		if got := s.seen(); len(got) != 1 {
			t.Errorf("handler saw %q", got)
		}
	})
}

// TestConnCurl drives the real curl through a proxy whose connections are Conns.
func TestConnCurl(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl")
	}
	s := newTestServer(t, Options{Token: testToken})
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"get", []string{"http://a.com/get?x=1"}, `GET http://a.com/get?x=1 ""`},
		{"post", []string{"-d", "a=b", "http://a.com/post"}, `POST http://a.com/post "a=b"`},
		{"chunked", []string{"-H", "Transfer-Encoding: chunked", "-d", "streamed", "http://a.com/up"}, `POST http://a.com/up "streamed"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"-sS", "--max-time", "10", "-x", "http://" + s.addr}, tt.args...)
			out, err := exec.Command("curl", args...).CombinedOutput()
			if err != nil {
				t.Fatalf("curl: %v: %s", err, out)
			}
			if string(out) != tt.want {
				t.Errorf("curl got %q, want %q", out, tt.want)
			}
		})
	}
}

// scriptConn is a net.Conn whose Reads return the scripted pieces in turn (a piece larger than the
// caller's buffer spans several Reads; its error comes with its last byte), then io.EOF.
type scriptConn struct {
	net.Conn
	reads []scripted
}

type scripted struct {
	data []byte
	err  error
}

func (s *scriptConn) Read(p []byte) (int, error) {
	if len(s.reads) == 0 {
		return 0, io.EOF
	}
	r := &s.reads[0]
	n := copy(p, r.data)
	r.data = r.data[n:]
	if len(r.data) > 0 {
		return n, nil
	}
	err := r.err
	s.reads = s.reads[1:]
	return n, err
}

// readAll reads c to the end with buffers of size step.
func readAll(c io.Reader, step int) ([]byte, error) {
	var out []byte
	p := make([]byte, step)
	for {
		n, err := c.Read(p)
		out = append(out, p[:n]...)
		if err != nil {
			return out, err
		}
	}
}

// TestConnAnySplit: a valid stream comes out of Conn unchanged (but for dropped empty lines)
// however the wire splits it and whatever buffer the reader uses.
func TestConnAnySplit(t *testing.T) {
	reqs := keepAliveRequests(t)
	in := "\r\n" + strings.Join(reqs, "\r\n") + "CONNECT a.com:443 HTTP/1.1\r\n\r\n\x16\x03\x01 raw \n\n bytes"
	want := strings.Join(reqs, "") + "CONNECT a.com:443 HTTP/1.1\r\n\r\n\x16\x03\x01 raw \n\n bytes"
	rng := rand.New(rand.NewPCG(1, 2))
	for _, step := range []int{1, 2, 3, 16, 4096} {
		for round := range 20 {
			var reads []scripted
			for b := []byte(in); len(b) > 0; {
				k := 1 + rng.IntN(min(len(b), 200))
				if round == 0 {
					k = len(b)
				}
				reads = append(reads, scripted{data: b[:k]})
				b = b[k:]
			}
			for _, lean := range []bool{false, true} {
				c := NewConn(&scriptConn{reads: append([]scripted(nil), reads...)}, Options{Token: testToken, Lean: lean})
				out, err := readAll(c, step)
				if err != io.EOF || string(out) != want {
					t.Fatalf("step %d round %d lean %v: err %v, output differs: %d bytes, want %d\n%q", step, round, lean, err, len(out), len(want), out)
				}
				if e := c.refused.Load(); e != nil {
					t.Fatalf("refused: %v", e)
				}
			}
		}
	}
}

// TestConnReadErrors: an error of the wrapped conn comes back as is, after the bytes accepted
// before it, and a Read after a timeout carries on with the head read so far.
func TestConnReadErrors(t *testing.T) {
	errX := errors.New("x")
	head := "GET / HTTP/1.1\r\nHost: a.com\r\n\r\n"
	t.Run("after a whole head", func(t *testing.T) {
		c := NewConn(&scriptConn{reads: []scripted{{[]byte(head), errX}}}, Options{Token: testToken})
		out, err := readAll(c, 7)
		if err != errX || string(out) != head {
			t.Errorf("got %q, %v; want the head, then %v", out, err, errX)
		}
	})
	t.Run("inside a head, then more", func(t *testing.T) {
		c := NewConn(&scriptConn{reads: []scripted{{[]byte(head[:10]), errX}, {[]byte(head[10:]), nil}}}, Options{Token: testToken})
		p := make([]byte, 100)
		if n, err := c.Read(p); n != 0 || err != errX {
			t.Fatalf("first Read = %d, %v; want 0, %v", n, err, errX)
		}
		if n, err := c.Read(p); string(p[:n]) != head || err != nil {
			t.Errorf("second Read = %q, %v; want the head", p[:n], err)
		}
	})
	t.Run("after a body's end, with the next head", func(t *testing.T) {
		in := "POST / HTTP/1.1\r\nHost: a.com\r\nTransfer-Encoding: chunked\r\n\r\n"
		body := "3\r\nabc\r\n0\r\n\r\n"
		c := NewConn(&scriptConn{reads: []scripted{{[]byte(in), nil}, {[]byte(body + head), errX}}}, Options{Token: testToken})
		out, err := readAll(c, 4096)
		if err != errX || string(out) != in+body+head {
			t.Errorf("got %q, %v", out, err)
		}
	})
	t.Run("timeout inside a head over a pipe", func(t *testing.T) {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		c := NewConn(a, Options{Token: testToken})
		go b.Write([]byte(head[:10]))
		c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		p := make([]byte, 100)
		n, err := c.Read(p)
		var ne net.Error
		if n != 0 || !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("Read = %d, %v; want a timeout", n, err)
		}
		c.SetReadDeadline(time.Time{})
		go b.Write([]byte(head[10:]))
		out := make([]byte, 0, len(head))
		for len(out) < len(head) {
			n, err := c.Read(p)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, p[:n]...)
		}
		if string(out) != head {
			t.Errorf("got %q, want %q", out, head)
		}
	})
	t.Run("empty reads", func(t *testing.T) {
		reads := make([]scripted, 200)
		c := NewConn(&scriptConn{reads: reads}, Options{Token: testToken})
		if _, err := c.Read(make([]byte, 10)); err != io.ErrNoProgress {
			t.Errorf("err %v, want io.ErrNoProgress", err)
		}
	})
}

// TestConnLargeHeads: heads larger than the first buffer pass whole; over MaxHead they are
// refused.
func TestConnLargeHeads(t *testing.T) {
	sized := func(total int) string { // a head of exactly total bytes
		prefix := "GET /big HTTP/1.1\r\nHost: a.com\r\nCookie: "
		return prefix + strings.Repeat("c", total-len(prefix)-4) + "\r\n\r\n"
	}
	for _, tc := range []struct {
		name    string
		head    string
		maxHead int
		kind    Kind
	}{
		{"10 KiB", sized(10 << 10), 0, ""},
		{"exactly the default", sized(DefaultMaxHead), 0, ""},
		{"one byte over the default", sized(DefaultMaxHead + 1), 0, TooLarge},
		{"exactly MaxHead", sized(5000), 5000, ""},
		{"one byte over MaxHead", sized(5001), 5000, TooLarge},
		{"MaxHead under the first buffer", sized(1000), 999, TooLarge},
	} {
		for _, piece := range []int{100, 3000, 1 << 20} {
			t.Run(fmt.Sprintf("%s/pieces of %d", tc.name, piece), func(t *testing.T) {
				in := "GET /small HTTP/1.1\r\nHost: a.com\r\n\r\n" + tc.head + "GET /after HTTP/1.1\r\nHost: a.com\r\n\r\n"
				var reads []scripted
				for b := []byte(in); len(b) > 0; {
					k := min(piece, len(b))
					reads = append(reads, scripted{data: b[:k]})
					b = b[k:]
				}
				c := NewConn(&scriptConn{reads: reads}, Options{Token: testToken, MaxHead: tc.maxHead})
				out, err := readAll(c, 4096)
				if err != io.EOF {
					t.Fatal(err)
				}
				e := c.refused.Load()
				switch {
				case tc.kind == "" && (e != nil || string(out) != in):
					t.Errorf("refused %v, or output differs", e)
				case tc.kind != "" && (e == nil || e.Kind != tc.kind):
					t.Errorf("refusal %v, want %s", e, tc.kind)
				}
			})
		}
	}
	if n := len(sized(5000)); n != 5000 {
		t.Fatalf("sized(5000) is %d bytes", n)
	}
}

// TestConnChunkedDirect: a chunked body read straight into the caller's buffer, whatever follows
// it in the same read, and a bad chunk at the start of a read.
func TestConnChunkedDirect(t *testing.T) {
	head := "POST /up HTTP/1.1\r\nHost: a.com\r\nTransfer-Encoding: chunked\r\n\r\n"
	var next strings.Builder
	for i := range 300 {
		fmt.Fprintf(&next, "GET /n/%d HTTP/1.1\r\nHost: a.com\r\n\r\n", i)
	}
	t.Run("leftover larger than the buffer", func(t *testing.T) {
		body := "5\r\nhello\r\n0\r\n\r\n"
		c := NewConn(&scriptConn{reads: []scripted{{data: []byte(head)}, {data: []byte(body + next.String())}}}, Options{Token: testToken})
		out, err := readAll(c, 32<<10)
		if err != io.EOF || string(out) != head+body+next.String() || c.refused.Load() != nil {
			t.Errorf("err %v, refused %v, output of %d bytes", err, c.refused.Load(), len(out))
		}
	})
	t.Run("bad chunk at the start of a read", func(t *testing.T) {
		c := NewConn(&scriptConn{reads: []scripted{{data: []byte(head)}, {data: []byte("5\r\nhello\r\n")}, {data: []byte("X\r\n")}}}, Options{Token: testToken})
		out, err := readAll(c, 4096)
		var fe *Error
		if !errors.As(err, &fe) || fe.Kind != BadRequest || string(out) != head+"5\r\nhello\r\n" {
			t.Fatalf("got %q, %v", out, err)
		}
		if n, err := c.Read(make([]byte, 10)); n != 0 || err != io.EOF {
			t.Errorf("after the body error: %d, %v; want io.EOF", n, err)
		}
		if e := c.refused.Load(); e != nil {
			t.Errorf("a body error is not a refusal: %v", e)
		}
	})
}

func TestConnRefusal(t *testing.T) {
	// A client cannot know the token; if it did, its request would still be told apart while no
	// refusal has happened.
	in := "GET /.lockhttp/refused/" + testToken + " HTTP/1.1\r\nHost: a.com\r\n\r\n"
	c := NewConn(&scriptConn{reads: []scripted{{data: []byte(in)}, {data: []byte("GET / HTTP/1.1\r\n\r\n")}}}, Options{Token: testToken})
	if got, want := c.RefusalPath(), "/.lockhttp/refused/"+testToken; got != want {
		t.Errorf("RefusalPath = %q, want %q", got, want)
	}
	br := bufio.NewReader(c)
	forged, err := http.ReadRequest(br)
	if err != nil {
		t.Fatal(err)
	}
	if e := c.Refusal(forged); e != nil {
		t.Errorf("Refusal of a client's request with the refusal path, before any refusal: %v", e)
	}
	sub, err := http.ReadRequest(br)
	if err != nil {
		t.Fatal(err)
	}
	if e := c.Refusal(sub); e == nil || e.Kind != BadRequest {
		t.Errorf("Refusal of the substituted request = %v, want bad-request", e)
	}
	if sub.Host != "lockhttp.invalid" || !sub.Close || sub.Method != "GET" {
		t.Errorf("substituted request: %s %s Host %s Close %v", sub.Method, sub.URL, sub.Host, sub.Close)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("after the substituted request: %v, want io.EOF", err)
	}
	guessed := *sub.URL
	guessed.Path = refusedPrefix + strings.Repeat("x", len(testToken))
	if e := c.Refusal(&http.Request{URL: &guessed}); e != nil {
		t.Errorf("Refusal of a request with another token = %v", e)
	}
	other := NewConn(nil, Options{Token: strings.Repeat("x", len(testToken))})
	if e := other.Refusal(sub); e != nil {
		t.Errorf("Refusal on another conn = %v", e)
	}
	if e := c.Refusal(&http.Request{}); e != nil {
		t.Errorf("Refusal of a request without URL = %v", e)
	}
}

func TestNewConnToken(t *testing.T) {
	for _, tok := range []string{"", "short", "has/slash-0123456789", "has space 0123456789", strings.Repeat("a", 129)} {
		t.Run(fmt.Sprintf("%q", tok), func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("NewConn accepted token %q", tok)
				}
			}()
			NewConn(nil, Options{Token: tok})
		})
	}
	NewConn(nil, Options{Token: "AZaz09-._~AZaz09"})
}

func TestConnCloseWrite(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	c := NewConn(server, Options{Token: testToken})
	defer c.Close()
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := client.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Errorf("client read after CloseWrite: %d, %v; want io.EOF", n, err)
	}
}

func TestConnPassThrough(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	c := NewConn(a, Options{Token: testToken})
	if c.LocalAddr() != a.LocalAddr() || c.RemoteAddr() != a.RemoteAddr() {
		t.Error("addresses differ from the wrapped conn's")
	}
	go io.Copy(io.Discard, b)
	if _, err := c.Write([]byte("HTTP/1.1 200 OK\r\n\r\n")); err != nil {
		t.Errorf("Write: %v", err)
	}
	if err := c.CloseWrite(); err == nil {
		t.Error("CloseWrite on a pipe: want an error")
	}
	c.SetDeadline(time.Now().Add(-time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, netTimeout{}) && !isTimeout(err) {
		t.Errorf("Read after a past deadline: %v", err)
	}
	c.Close()
	if _, err := b.Write([]byte("x")); err == nil {
		t.Error("the wrapped conn is still open after Close")
	}
}

type netTimeout struct{}

func (netTimeout) Error() string { return "timeout" }

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// loopConn serves the same bytes forever.
type loopConn struct {
	net.Conn
	data []byte
	off  int
}

func (l *loopConn) Read(p []byte) (int, error) {
	n := copy(p, l.data[l.off:])
	l.off = (l.off + n) % len(l.data)
	return n, nil
}

// TestConnNoAllocs: once the buffer exists, carrying keep-alive requests allocates nothing.
func TestConnNoAllocs(t *testing.T) {
	one := "POST http://a.com/x HTTP/1.1\r\nHost: a.com\r\nUser-Agent: t\r\nContent-Length: 5\r\n\r\nhello" +
		"POST /y HTTP/1.1\r\nHost: a.com\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
	c := NewConn(&loopConn{data: []byte(one)}, Options{Token: testToken})
	p := make([]byte, 4096)
	read := func() {
		for total := 0; total < len(one); {
			n, err := c.Read(p)
			if err != nil {
				t.Fatal(err)
			}
			total += n
		}
	}
	read()
	if allocs := testing.AllocsPerRun(100, read); allocs != 0 {
		t.Errorf("%v allocations per pair of requests, want 0", allocs)
	}
}

// TestConnRefusesAnotherProtocolAtItsFirstLine: a first line that is not a request line (a
// text protocol other than HTTP: SSH's banner, SMTP's EHLO) is refused as soon as its CRLF
// arrives, while the client waits for an answer and sends no more.
func TestConnRefusesAnotherProtocolAtItsFirstLine(t *testing.T) {
	for _, c := range []struct {
		line string
		kind Kind
		why  string
	}{
		{"SSH-2.0-OpenSSH_9.2\r\n", BadRequest, "is not METHOD SP TARGET SP VERSION"},
		{"EHLO mail.example\r\n", BadRequest, "is not METHOD SP TARGET SP VERSION"},
		{"GET / SPDY/3\r\n", BadRequest, "unsupported protocol version"},
		{"PRI * HTTP/2.0\r\n", H2Preface, "HTTP/2 connection preface"},
		{"\r\nGET /x HTTP/1.1 extra\r\n", BadRequest, "extra space"},
	} {
		t.Run(strings.TrimSpace(c.line), func(t *testing.T) {
			client, server := net.Pipe()
			defer client.Close()
			fc := NewConn(server, Options{Token: testToken})
			defer fc.Close()
			go client.Write([]byte(c.line))
			got := make(chan *http.Request, 1)
			go func() {
				r, err := http.ReadRequest(bufio.NewReader(fc))
				if err != nil {
					t.Error(err)
				}
				got <- r
			}()
			select {
			case r := <-got:
				e := fc.Refusal(r)
				if e == nil || e.Kind != c.kind || !strings.Contains(e.Reason, c.why) {
					t.Fatalf("refusal %v, want %s with %q", e, c.kind, c.why)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no refusal while the client waits after its first line")
			}
		})
	}
}

// TestConnRelease: between a request's body and the next head the buffer can be given back (a
// request held for a human keeps none), whatever the split of the body's reads; the next request
// then reads as before. A pipelined request already in the buffer keeps it.
func TestConnRelease(t *testing.T) {
	first := "POST /a HTTP/1.1\r\nHost: a.com\r\nContent-Length: 4\r\n\r\nheld"
	second := "GET /b HTTP/1.1\r\nHost: a.com\r\n\r\n"
	for _, lean := range []bool{false, true} {
		for _, step := range []int{1, len(first), 4096} {
			c := NewConn(&scriptConn{reads: []scripted{{[]byte(first), nil}, {[]byte(second), nil}}}, Options{Token: testToken, Lean: lean})
			p := make([]byte, step)
			var got []byte
			for len(got) < len(first) {
				n, err := c.Read(p[:min(step, len(first)-len(got))])
				if err != nil {
					t.Fatalf("lean %v step %d: %v", lean, step, err)
				}
				got = append(got, p[:n]...)
			}
			c.Release()
			if c.buf != nil {
				t.Fatalf("lean %v step %d: the buffer (%d bytes) is kept after the body's end", lean, step, len(c.buf))
			}
			rest, err := readAll(c, 4096)
			if err != io.EOF || string(got)+string(rest) != first+second {
				t.Fatalf("lean %v step %d: read %q then %q, %v", lean, step, got, rest, err)
			}
		}
	}
	t.Run("pipelined", func(t *testing.T) {
		c := NewConn(&scriptConn{reads: []scripted{{[]byte(first + second), nil}}}, Options{Token: testToken, Lean: true})
		p := make([]byte, len(first))
		if n, err := io.ReadFull(c, p); n != len(first) || err != nil {
			t.Fatalf("%d %v", n, err)
		}
		c.Release()
		if c.buf == nil {
			t.Fatal("the buffer with the next request in it was given back")
		}
		if rest, err := readAll(c, 4096); err != io.EOF || string(rest) != second {
			t.Fatalf("then %q, %v", rest, err)
		}
	})
}
