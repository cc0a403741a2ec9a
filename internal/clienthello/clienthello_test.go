package clienthello

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// captureConn records what a TLS client writes and answers nothing: its first write is the
// ClientHello.
type captureConn struct {
	net.Conn
	buf  bytes.Buffer
	done chan struct{}
}

func (c *captureConn) Write(p []byte) (int, error) {
	c.buf.Write(p)
	select {
	case <-c.done:
	default:
		close(c.done)
	}
	return len(p), nil
}
func (c *captureConn) Read([]byte) (int, error)         { <-time.After(time.Hour); return 0, io.EOF }
func (c *captureConn) Close() error                     { return nil }
func (c *captureConn) SetDeadline(time.Time) error      { return nil }
func (c *captureConn) SetReadDeadline(time.Time) error  { return nil }
func (c *captureConn) SetWriteDeadline(time.Time) error { return nil }
func (c *captureConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *captureConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }

// goHello is the ClientHello Go's TLS client sends for conf: one record, as clients send it.
func goHello(t testing.TB, conf *tls.Config) []byte {
	t.Helper()
	c := &captureConn{done: make(chan struct{})}
	go tls.Client(c, conf).Handshake()
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		t.Fatal("no ClientHello")
	}
	return append([]byte(nil), c.buf.Bytes()...)
}

// reframe splits the handshake message of a one-record hello into records of the given sizes
// (the last one takes the rest).
func reframe(t *testing.T, rec []byte, sizes ...int) []byte {
	t.Helper()
	msg := rec[5:]
	var out []byte
	for i := 0; len(msg) > 0; i++ {
		n := len(msg)
		if i < len(sizes) && sizes[i] < n {
			n = sizes[i]
		}
		out = append(out, 0x16, 3, 1, byte(n>>8), byte(n))
		out = append(out, msg[:n]...)
		msg = msg[n:]
	}
	return out
}

func TestRead(t *testing.T) {
	hello := goHello(t, &tls.Config{ServerName: "Example.ORG", NextProtos: []string{"h2", "http/1.1"}})
	noSNI := goHello(t, &tls.Config{InsecureSkipVerify: true})
	if binary.BigEndian.Uint16(hello[3:]) != uint16(len(hello)-5) {
		t.Fatalf("Go's ClientHello is not one record: %x", hello[:5])
	}
	split := reframe(t, hello, 2, 1, 100) // the message header itself split
	tail := []byte("early data that belongs to the TLS server")
	for _, tc := range []struct {
		name  string
		in    io.Reader
		want  []byte // raw
		sni   string
		alpn  string
		error string
	}{
		{name: "one record", in: bytes.NewReader(hello), want: hello, sni: "Example.ORG", alpn: "h2,http/1.1"},
		{name: "one byte a read", in: iotest.OneByteReader(bytes.NewReader(hello)), want: hello, sni: "Example.ORG", alpn: "h2,http/1.1"},
		{name: "split over records", in: bytes.NewReader(split), want: split, sni: "Example.ORG", alpn: "h2,http/1.1"},
		{name: "split over records and reads", in: iotest.HalfReader(bytes.NewReader(split)), want: split, sni: "Example.ORG", alpn: "h2,http/1.1"},
		{name: "nothing read past the hello", in: bytes.NewReader(append(append([]byte(nil), hello...), tail...)), want: hello, sni: "Example.ORG", alpn: "h2,http/1.1"},
		{name: "no SNI", in: bytes.NewReader(noSNI), want: noSNI, sni: ""},
		{name: "plain HTTP", in: strings.NewReader("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), error: ErrNotTLS.Reason},
		{name: "an alert in the middle", in: bytes.NewReader(append(reframe(t, hello, 50)[:55], 0x15, 3, 3, 0, 2, 2, 40)), error: "a record of type 21 arrived"},
		{name: "a zero-length record", in: bytes.NewReader([]byte{0x16, 3, 1, 0, 0}), error: "zero-length"},
		{name: "an oversized record", in: bytes.NewReader([]byte{0x16, 3, 1, 0x40, 1}), error: "a record of 16385 bytes"},
		{name: "an oversized hello", in: bytes.NewReader([]byte{0x16, 3, 1, 0, 4, 1, 0, 0x40, 1}), error: "the ClientHello is 16389 bytes"},
		{name: "a server hello", in: bytes.NewReader([]byte{0x16, 3, 3, 0, 4, 2, 0, 0, 0}), error: "of type 2, not ClientHello"},
		{name: "cut short", in: bytes.NewReader(hello[:len(hello)-10]), error: "closed the connection before"},
		{name: "record version", in: bytes.NewReader([]byte{0x16, 2, 0, 0, 4, 1, 0, 0, 0}), error: "record version 2.0"},
		{name: "more after the hello in its record", in: bytes.NewReader(withTrailing(hello)), error: "carries more"},
		{name: "empty", in: bytes.NewReader(nil), error: "EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, h, err := Read(tc.in)
			if tc.error != "" {
				if err == nil || !strings.Contains(err.Error(), tc.error) {
					t.Fatalf("err = %v, want %q", err, tc.error)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(raw, tc.want) {
				t.Errorf("raw: %d bytes, want the %d the client sent", len(raw), len(tc.want))
			}
			if h.ServerName != tc.sni || strings.Join(h.ALPN, ",") != tc.alpn {
				t.Errorf("hello = %+v, want SNI %q ALPN %q", h, tc.sni, tc.alpn)
			}
		})
	}
}

// withTrailing is hello with a byte more in its record than its message holds.
func withTrailing(hello []byte) []byte {
	out := append([]byte(nil), hello...)
	out = append(out, 0)
	binary.BigEndian.PutUint16(out[3:], uint16(len(out)-5))
	return out
}

// TestParse holds the server_name and ALPN extensions to one reading: what a TLS library reads.
func TestParse(t *testing.T) {
	body := func(exts ...[]byte) []byte {
		b := []byte{3, 3}
		b = append(b, make([]byte, 32)...)
		b = append(b, 0)             // session id
		b = append(b, 0, 2, 0x13, 1) // one suite
		b = append(b, 1, 0)          // null compression
		var all []byte
		for _, e := range exts {
			all = append(all, e...)
		}
		if exts != nil {
			b = binary.BigEndian.AppendUint16(b, uint16(len(all)))
			b = append(b, all...)
		}
		return b
	}
	ext := func(typ int, data []byte) []byte {
		b := binary.BigEndian.AppendUint16(nil, uint16(typ))
		b = binary.BigEndian.AppendUint16(b, uint16(len(data)))
		return append(b, data...)
	}
	sni := func(names ...string) []byte {
		var list []byte
		for _, n := range names {
			list = append(list, 0)
			list = binary.BigEndian.AppendUint16(list, uint16(len(n)))
			list = append(list, n...)
		}
		return ext(extServerName, append(binary.BigEndian.AppendUint16(nil, uint16(len(list))), list...))
	}
	for _, tc := range []struct {
		name  string
		body  []byte
		sni   string
		error string
	}{
		{name: "no extensions", body: body(), sni: ""},
		{name: "one name", body: body(sni("a.example")), sni: "a.example"},
		{name: "two names", body: body(sni("a.example", "b.example")), error: "more than one host name"},
		{name: "twice", body: body(sni("a.example"), sni("b.example")), error: "appears twice"},
		{name: "trailing dot", body: body(sni("a.example.")), error: "ends with a dot"},
		{name: "a NUL", body: body(sni("a.example\x00.b")), error: "not printable"},
		{name: "empty name", body: body(sni("")), error: "empty host name"},
		{name: "empty ALPN protocol", body: body(ext(extALPN, []byte{0, 1, 0})), error: "ALPN"},
		{name: "cut extensions", body: body(sni("a.example"))[:60], error: "malformed"},
		{name: "garbage after", body: append(body(sni("a.example")), 1), error: "does not match"},
		{name: "no suites", body: []byte{3, 3}, error: "malformed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := Parse(tc.body)
			if tc.error != "" {
				if err == nil || !strings.Contains(err.Error(), tc.error) {
					t.Fatalf("err = %v, want %q", err, tc.error)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.ServerName != tc.sni {
				t.Errorf("SNI %q, want %q", h.ServerName, tc.sni)
			}
		})
	}
}

// goServerName is the server name Go's TLS server reads from raw, or ok false when it refuses
// the hello before asking for a configuration.
func goServerName(raw []byte) (name string, ok bool) {
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	go func() {
		c2.Write(raw)
		io.Copy(io.Discard, c2)
	}()
	got := make(chan string, 1)
	srv := tls.Server(c1, &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		got <- h.ServerName
		return nil, errors.New("stop")
	}})
	c1.SetDeadline(time.Now().Add(2 * time.Second))
	srv.Handshake()
	select {
	case n := <-got:
		return n, true
	default:
		return "", false
	}
}

// FuzzRead feeds Read what an agent can send: it never panics, never returns more than it was
// given, and the server name it reads is the one Go's TLS server reads from the same bytes
// (which the gate replays into it), whenever both accept them.
func FuzzRead(f *testing.F) {
	f.Add(goHello(f, &tls.Config{ServerName: "example.org", NextProtos: []string{"h2"}}))
	f.Add(goHello(f, &tls.Config{InsecureSkipVerify: true}))
	f.Add(goHello(f, &tls.Config{ServerName: "a.example", MaxVersion: tls.VersionTLS12}))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add([]byte{0x16, 3, 1, 0, 4, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		raw, h, err := Read(bytes.NewReader(data))
		if !bytes.HasPrefix(data, raw) {
			t.Fatalf("raw is not what was read")
		}
		if len(raw) > MaxHello+5*(MaxHello+1) {
			t.Fatalf("read %d bytes", len(raw))
		}
		if err != nil {
			return
		}
		if name, ok := goServerName(raw); ok && name != h.ServerName {
			t.Fatalf("Go's TLS server reads the server name %q, Read %q", name, h.ServerName)
		}
	})
}

// BenchmarkRead is what reading a browser-sized ClientHello costs the gate.
func BenchmarkRead(b *testing.B) {
	hello := goHello(b, &tls.Config{ServerName: "example.org", NextProtos: []string{"h2", "http/1.1"}})
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, _, err := Read(bytes.NewReader(hello)); err != nil {
			b.Fatal(err)
		}
	}
}
