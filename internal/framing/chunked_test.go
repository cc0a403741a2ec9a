package framing

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
)

// scanResult is what feeding a body to a fresh Chunked gives.
type scanResult struct {
	n    int
	done bool
	kind Kind
}

// scanSplit feeds p to a fresh Chunked in pieces of at most step bytes (0: all at once), stopping
// at the end of the body or at an error.
func scanSplit(p []byte, step int) scanResult {
	var c Chunked
	total := 0
	for len(p) > 0 {
		q := p
		if step > 0 && len(q) > step {
			q = q[:step]
		}
		n, done, e := c.Scan(q)
		total += n
		if e != nil {
			return scanResult{total, false, e.Kind}
		}
		if done {
			return scanResult{total, true, ""}
		}
		if n != len(q) {
			return scanResult{total, false, "short scan without an error"}
		}
		p = p[n:]
	}
	return scanResult{total, false, ""}
}

// checkSplits asserts that every way of feeding p gives the same result, and returns it.
func checkSplits(t *testing.T, p []byte) scanResult {
	t.Helper()
	whole := scanSplit(p, 0)
	for _, step := range []int{1, 2, 3, 7, 64} {
		if got := scanSplit(p, step); got != whole {
			t.Errorf("fed %d bytes at a time: %+v; whole: %+v", step, got, whole)
		}
	}
	// Every single split point.
	for i := 1; i < len(p) && i < 300; i++ {
		var c Chunked
		n1, done, e := c.Scan(p[:i])
		got := scanResult{n: n1, done: done}
		if e != nil {
			got.kind = e.Kind
		} else if !done {
			n2, done2, e2 := c.Scan(p[i:])
			got.n, got.done = n1+n2, done2
			if e2 != nil {
				got.kind = e2.Kind
			}
		}
		if got != whole {
			t.Errorf("split at %d: %+v; whole: %+v", i, got, whole)
			break
		}
	}
	return whole
}

func TestChunkedAccepts(t *testing.T) {
	tests := []struct {
		name string
		body string
		data string // what net/http decodes
	}{
		{"empty body", "0\r\n\r\n", ""},
		{"one chunk", "5\r\nhello\r\n0\r\n\r\n", "hello"},
		{"several chunks, hex case", "5\r\nhello\r\n1\r\n \r\nA\r\n0123456789\r\nb\r\nabcdefghijk\r\n0\r\n\r\n", "hello 0123456789abcdefghijk"},
		{"data holding CRLF and a fake last chunk", "9\r\n\r\n0\r\n\r\nab\r\n0\r\n\r\n", "\r\n0\r\n\r\nab"},
		{"extensions", "5;name=value;flag\r\nhello\r\n0;last=\"x y\"\t;z\r\n\r\n", "hello"},
		{"extension with obs-text", "5;n=caf\xc3\xa9\r\nhello\r\n0\r\n\r\n", "hello"},
		{"leading zeros up to 15 digits", "000000000000005\r\nhello\r\n000000000000000\r\n\r\n", "hello"},
		{"trailers", "5\r\nhello\r\n0\r\nX-Checksum: abc\r\nX-Empty:\r\nx-obs: caf\xc3\xa9\t \r\n\r\n", "hello"},
		{"trailer names near the forbidden ones", "0\r\nContent-Lengths: 1\r\nTransfer-Encoding-Extra-Long-Name: 2\r\nHos: 3\r\n\r\n", ""},
		{"longest chunk-size line", "5;" + strings.Repeat("e", MaxChunkLine-4) + "\r\nhello\r\n0\r\n\r\n", "hello"},
		{"captured curl body", "13\r\nhello chunked world\r\n0\r\n\r\n", "hello chunked world"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next := "GET / HTTP/1.1\r\nHost: a.com\r\n\r\n"
			in := []byte(tt.body + next)
			got := checkSplits(t, in)
			if want := (scanResult{len(tt.body), true, ""}); got != want {
				t.Fatalf("got %+v, want %+v", got, want)
			}
			// net/http decodes the same body and stops at the same byte.
			data, consumed, err := netHTTPChunked(in)
			if err != nil {
				t.Fatalf("net/http: %v", err)
			}
			if string(data) != tt.data || consumed != len(tt.body) {
				t.Errorf("net/http read %q and %d bytes; want %q and %d", data, consumed, tt.data, len(tt.body))
			}
		})
	}
}

// netHTTPChunked reads body as the chunked body of a request through net/http and returns the data
// and how many bytes of body it consumed.
func netHTTPChunked(body []byte) ([]byte, int, error) {
	head := "POST / HTTP/1.1\r\nHost: a.com\r\nTransfer-Encoding: chunked\r\n\r\n"
	src := bytes.NewReader(append([]byte(head), body...))
	br := bufio.NewReader(src)
	r, err := http.ReadRequest(br)
	if err != nil {
		return nil, 0, err
	}
	data, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, 0, err
	}
	consumed := len(head) + len(body) - br.Buffered() - src.Len()
	return data, consumed - len(head), nil
}

func TestChunkedRefuses(t *testing.T) {
	for _, f := range loadFixtures(t, "chunked") {
		t.Run(f.name, func(t *testing.T) {
			got := checkSplits(t, f.data)
			if got.kind != f.kind {
				t.Errorf("got %+v, want kind %s", got, f.kind)
			}
		})
	}
}

func TestChunkedBounds(t *testing.T) {
	bigTrailer := "0\r\n" + strings.Repeat("X-Pad: "+strings.Repeat("p", 1000)+"\r\n", 66) + "\r\n"
	tests := []struct {
		name string
		body string
		want Kind
	}{
		{"chunk-size line one byte too long", "5;" + strings.Repeat("e", MaxChunkLine-3) + "\r\nhello\r\n0\r\n\r\n", BadRequest},
		{"16 hex digits", "0000000000000000\r\n\r\n", BadRequest},
		{"trailer section over the limit", bigTrailer, TooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := scanSplit([]byte(tt.body), 0)
			if got.kind != tt.want {
				t.Errorf("got %+v, want kind %s", got, tt.want)
			}
			if one := scanSplit([]byte(tt.body), 1); one != got {
				t.Errorf("byte at a time: %+v; whole: %+v", one, got)
			}
		})
	}
}

func TestChunkedAfterTheEnd(t *testing.T) {
	var c Chunked
	if n, done, e := c.Scan([]byte("0\r\n\r\nGET")); n != 5 || !done || e != nil {
		t.Fatalf("Scan = %d, %v, %v; want 5, true, nil", n, done, e)
	}
	if n, done, e := c.Scan([]byte("GET")); n != 0 || !done || e != nil {
		t.Errorf("Scan after the end = %d, %v, %v; want 0, true, nil", n, done, e)
	}
	var d Chunked
	_, _, e1 := d.Scan([]byte("5\nhello"))
	n, done, e2 := d.Scan([]byte("0\r\n\r\n"))
	if e1 == nil || e2 != e1 || n != 0 || done {
		t.Errorf("after an error: %d, %v, %v; want 0, false, %v", n, done, e2, e1)
	}
	if n, done, e := new(Chunked).Scan(nil); n != 0 || done || e != nil {
		t.Errorf("Scan(nil) = %d, %v, %v", n, done, e)
	}
}
