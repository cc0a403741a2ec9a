package framing

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/textproto"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"
)

func addHeadSeeds(f *testing.F) {
	for _, dir := range []string{"heads", "clients"} {
		for _, fx := range loadFixtures(f, dir) {
			head, _ := splitHead(fx.data)
			f.Add(head, fx.tunnel)
		}
	}
	f.Add([]byte("GET http://[::1]:80/ HTTP/1.1\r\nHost: [::1]\r\n\r\n"), false)
	f.Add([]byte("OPTIONS * HTTP/1.1\r\nHost: a.com\r\n\r\n"), true)
	f.Add([]byte("POST /p HTTP/1.1\r\nHost: a.com\r\nTrailer: X-A\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n"), false)
}

// FuzzParseHead: ParseHead never panics; what it accepts, net/http reads the same way (method,
// target, body framing, host) and net/http's server would not refuse on its own.
func FuzzParseHead(f *testing.F) {
	addHeadSeeds(f)
	f.Fuzz(checkParseHead)
}

// FuzzParseHeadFields builds heads from fuzzed parts, so that many of them are accepted and
// compared with net/http.
func FuzzParseHeadFields(f *testing.F) {
	f.Add("GET", "http://a.com/x", "HTTP/1.1", "a.com", "Content-Length", "5", "X-A", "b", false)
	f.Add("POST", "/x?y", "HTTP/1.1", "a.com:443", "Transfer-Encoding", "chunked", "Trailer", "X-Sum", true)
	f.Add("CONNECT", "a.com:443", "HTTP/1.1", "a.com", "Upgrade", "websocket", "Expect", "100-continue", false)
	f.Add("OPTIONS", "*", "HTTP/1.0", "[::1]:80", "Upgrade", "h2c", "HTTP2-Settings", "", true)
	f.Add("GET", "https://u:p@a.com:443/%41", "HTTP/1.1", "A.COM", "Content-Length", "0", "Content-Length", "0", false)
	f.Fuzz(func(t *testing.T, method, target, proto, host, n1, v1, n2, v2 string, tunnel bool) {
		b := method + " " + target + " " + proto + "\r\nHost: " + host + "\r\n" +
			n1 + ": " + v1 + "\r\n" + n2 + ":" + v2 + "\r\n\r\n"
		checkParseHead(t, []byte(b), tunnel)
	})
}

func checkParseHead(t *testing.T, b []byte, tunnel bool) {
	h, e := ParseHead(b, tunnel)
	if e != nil {
		if e.Reason == "" || strings.ContainsAny(e.Reason, "\r\n") {
			t.Fatalf("reason %q", e.Reason)
		}
		return
	}
	r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(b)))
	if err != nil {
		t.Fatalf("accepted %q, which http.ReadRequest refuses: %v", b, err)
	}
	if r.Method != h.Method || r.RequestURI != h.Target || r.Proto != h.Proto {
		t.Fatalf("net/http reads %q %q %q; ParseHead %+v", r.Method, r.RequestURI, r.Proto, h)
	}
	want := map[BodyKind]int64{NoBody: 0, LengthBody: h.Length, ChunkedBody: -1}[h.Body]
	if r.ContentLength != want || (h.Body == ChunkedBody) != (len(r.TransferEncoding) == 1) {
		t.Fatalf("net/http reads ContentLength %d TE %q; ParseHead %+v", r.ContentLength, r.TransferEncoding, h)
	}
	if h.Connect != (r.Method == http.MethodConnect) || h.Upgrade != strings.ToLower(r.Header.Get("Upgrade")) {
		t.Fatalf("CONNECT or Upgrade disagree: %+v", h)
	}
	// What net/http's server checks after ReadRequest, answering by itself when they fail.
	// (ReadRequest drops the Host header; the server sees it.)
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(b)))
	tp.ReadLine()
	mh, err := tp.ReadMIMEHeader()
	if err != nil {
		t.Fatal(err)
	}
	hosts := mh["Host"]
	if r.ProtoAtLeast(1, 1) && len(hosts) == 0 && r.Method != http.MethodConnect {
		t.Fatal("accepted HTTP/1.1 without Host")
	}
	if len(hosts) == 1 && !httpguts.ValidHostHeader(hosts[0]) {
		t.Fatalf("accepted Host %q", hosts[0])
	}
	for k, vv := range r.Header {
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldName(k) || !httpguts.ValidHeaderFieldValue(v) {
				t.Fatalf("accepted header %q: %q", k, v)
			}
		}
	}
	if ex := r.Header.Get("Expect"); ex != "" && !httpguts.HeaderValuesContainsToken([]string{ex}, "100-continue") {
		t.Fatalf("accepted Expect %q (net/http answers 417 itself)", ex)
	}
	if r.Method == "OPTIONS" && r.RequestURI == "*" && !tunnel {
		t.Fatal("accepted OPTIONS * outside a tunnel (net/http may answer it itself)")
	}
	// The Host header names the authority of an absolute-form target. A CONNECT's Host is not
	// compared (clients name the proxy there): the tunnel is bound to its target, r.Host.
	if r.Method == http.MethodConnect {
		if r.Host != h.Target {
			t.Fatalf("net/http reads the CONNECT's host as %q, not its target %q", r.Host, h.Target)
		}
	} else if len(hosts) == 1 && r.URL.Host != "" {
		if !strings.EqualFold(hostOnly(hosts[0]), r.URL.Hostname()) {
			t.Fatalf("Host %q with target host %q", hosts[0], r.URL.Hostname())
		}
	}
}

// hostOnly strips the port from a Host header value.
func hostOnly(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		return host
	}
	return strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
}

// FuzzChunked: Scan never panics and does not depend on how the body is split; what it accepts,
// net/http decodes to the same end (unless net/http is the stricter one).
func FuzzChunked(f *testing.F) {
	for _, fx := range loadFixtures(f, "chunked") {
		f.Add(fx.data, uint64(1))
	}
	f.Add([]byte("5;a=b\r\nhello\r\n0\r\nX-A: 1\r\n\r\nGET / HTTP/1.1\r\n"), uint64(2))
	f.Add([]byte("13\r\nhello chunked world\r\n0\r\n\r\n"), uint64(3))
	f.Fuzz(func(t *testing.T, body []byte, seed uint64) {
		whole := scanSplit(body, 0)
		if got := scanSplit(body, 1); got != whole {
			t.Fatalf("byte at a time %+v, whole %+v", got, whole)
		}
		// Random splits.
		rng := rand.New(rand.NewPCG(seed, seed>>32))
		var c Chunked
		got := scanResult{}
		for p := body; len(p) > 0; {
			k := 1 + rng.IntN(len(p))
			n, done, e := c.Scan(p[:k])
			got.n += n
			if e != nil {
				got.kind = e.Kind
				break
			}
			if done {
				got.done = true
				break
			}
			p = p[k:]
		}
		if got != whole {
			t.Fatalf("random split %+v, whole %+v", got, whole)
		}
		if !whole.done {
			return
		}
		_, consumed, err := netHTTPChunked(body)
		if err != nil {
			if netHTTPStricter(err) {
				return
			}
			t.Fatalf("accepted %q, which net/http refuses: %v", body[:whole.n], err)
		}
		if consumed != whole.n {
			t.Fatalf("body ends at %d; net/http reads %d bytes", whole.n, consumed)
		}
	})
}

// netHTTPStricter recognises the chunked bodies net/http refuses though they are well formed.
func netHTTPStricter(err error) bool {
	s := err.Error()
	return strings.Contains(s, "too much non-data") || strings.Contains(s, "suspiciously long trailer")
}

// FuzzConn: whatever the client sends, however the wire splits it, the bytes out of Conn are the
// bytes in (less dropped empty lines, and cut at a refusal), and net/http reads them without a
// framing error of its own: each request is whole, its body reads to the end (or fails with an
// *Error from Conn), and a refusal comes as the substituted request, then the end.
func FuzzConn(f *testing.F) {
	valid := "GET http://a.com/ HTTP/1.1\r\nHost: a.com\r\n\r\n"
	for _, dir := range []string{"heads", "clients"} {
		for _, fx := range loadFixtures(f, dir) {
			f.Add(append([]byte(valid), fx.data...), uint64(len(fx.data)), fx.tunnel)
		}
	}
	for _, fx := range loadFixtures(f, "chunked") {
		f.Add([]byte(valid+"POST / HTTP/1.1\r\nHost: a.com\r\nTransfer-Encoding: chunked\r\n\r\n"+string(fx.data)), uint64(7), false)
	}
	f.Fuzz(func(t *testing.T, in []byte, seed uint64, tunnel bool) {
		rng := rand.New(rand.NewPCG(seed, 7))
		var reads []scripted
		for b := in; len(b) > 0; {
			k := 1 + rng.IntN(len(b))
			reads = append(reads, scripted{data: b[:k]})
			b = b[k:]
		}
		lreads := append([]scripted(nil), reads...)
		c := NewConn(&scriptConn{reads: reads}, Options{Token: testToken, Tunnel: tunnel, MaxHead: 4096})
		step := 1 + rng.IntN(5000)
		out, err := readAll(c, step)
		// A Lean conn (its buffer given back between requests) passes the same bytes.
		lc := NewConn(&scriptConn{reads: lreads}, Options{Token: testToken, Tunnel: tunnel, MaxHead: 4096, Lean: true})
		lout, lerr := readAll(lc, step)
		if !bytes.Equal(lout, out) || fmt.Sprint(lerr) != fmt.Sprint(err) || (lc.refused.Load() == nil) != (c.refused.Load() == nil) {
			t.Fatalf("Lean differs: %q %v, not %q %v", lout, lerr, out, err)
		}
		var fe *Error
		if err != io.EOF && !errors.As(err, &fe) {
			t.Fatalf("Read error %v", err)
		}
		sub := []byte("GET " + c.RefusalPath() + " HTTP/1.1\r\nHost: lockhttp.invalid\r\nConnection: close\r\n\r\n")
		refused := c.refused.Load() != nil
		passed := out
		if refused {
			if !bytes.HasSuffix(out, sub) {
				t.Fatalf("refused, but the output does not end in the substituted request: %q", out)
			}
			passed = out[:len(out)-len(sub)]
		}
		if !fromInput(passed, in) {
			t.Fatalf("output %q is not the input %q less empty lines", passed, in)
		}

		// net/http reads the output. Only the last request's body may end early: when the input
		// ended inside it, or when Conn failed it.
		cut := !refused
		br := bufio.NewReader(bytes.NewReader(out))
		for {
			if _, err := br.Peek(1); err == io.EOF {
				return
			}
			r, err := http.ReadRequest(br)
			if err != nil {
				t.Fatalf("net/http cannot read a request out of Conn: %v\n%q", err, out)
			}
			if e := c.Refusal(r); e != nil {
				if rest, _ := io.ReadAll(br); len(rest) > 0 {
					t.Fatalf("bytes after the substituted request: %q", rest)
				}
				return
			}
			_, err = io.ReadAll(r.Body)
			switch {
			case err == nil:
			case netHTTPStricter(err):
				return
			case cut && (errors.Is(err, io.ErrUnexpectedEOF) || strings.Contains(err.Error(), "unexpected EOF reading trailer")):
				return
			default:
				t.Fatalf("net/http cannot read a body out of Conn: %v", err)
			}
			if r.Method == http.MethodConnect || r.Header.Get("Upgrade") != "" {
				return // raw from here
			}
		}
	})
}

// fromInput reports whether out is in with some CRLF pairs dropped, cut short anywhere.
func fromInput(out, in []byte) bool {
	i := 0
	for j := 0; j < len(out); {
		switch {
		case i < len(in) && in[i] == out[j]:
			i++
			j++
		case i+1 < len(in) && in[i] == '\r' && in[i+1] == '\n':
			i += 2
		default:
			return false
		}
	}
	return true
}
