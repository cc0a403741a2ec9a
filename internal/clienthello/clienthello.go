// Package clienthello reads a TLS ClientHello off a connection that has not been answered yet,
// however the client split it over records and writes, and tells the server name and ALPN
// protocols it offers; the bytes read are kept to be replayed into a TLS server or an origin.
package clienthello

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Bounds of what Read takes from the client.
const (
	// MaxHello is the largest ClientHello message Read accepts (its 4-byte header included):
	// browsers and TLS libraries send 0.5 to 2 KiB, with post-quantum key shares and a session
	// ticket under 8 KiB.
	MaxHello = 16 << 10
	// maxRecord is the largest TLS plaintext record (RFC 8446 5.1).
	maxRecord = 16 << 10
)

// Hello is what a ClientHello offers that the gate decides on.
type Hello struct {
	// ServerName is the server_name extension's host name as sent ("" when there is none).
	ServerName string
	// ALPN lists the application protocols offered, in the client's order.
	ALPN []string
}

// Error is a ClientHello Read refuses; Reason says why, in words an audit record can carry.
type Error struct {
	Reason string
}

func (e *Error) Error() string { return "clienthello: " + e.Reason }

// ErrNotTLS is a connection whose first record is not a TLS handshake record.
var ErrNotTLS = &Error{Reason: "the client did not start a TLS handshake"}

func malformed(format string, args ...any) error {
	return &Error{Reason: "malformed ClientHello: " + fmt.Sprintf(format, args...)}
}

// Read reads records from r until it holds one whole ClientHello message, which may be split
// over any number of handshake records, each of which may arrive in any number of reads. It
// returns every byte it read (the records, to replay) and what the hello offers. It reads
// nothing past the record that ends the message, refuses a record of another type, a
// zero-length or oversized record, a handshake message other than ClientHello or over
// MaxHello, and a hello that does not parse. The caller bounds the time (a read deadline).
func Read(r io.Reader) (raw []byte, h *Hello, err error) {
	var msg []byte // the handshake message's bytes so far
	need := -1     // its whole length, once its header is in
	for need < 0 || len(msg) < need {
		var hdr [5]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return raw, nil, eof(err, len(raw) == 0)
		}
		raw = append(raw, hdr[:]...)
		if hdr[0] != 0x16 {
			if len(raw) == 5 {
				return raw, nil, ErrNotTLS
			}
			return raw, nil, malformed("a record of type %d arrived before the ClientHello was whole", hdr[0])
		}
		if hdr[1] != 3 {
			return raw, nil, malformed("record version %d.%d", hdr[1], hdr[2])
		}
		n := int(binary.BigEndian.Uint16(hdr[3:]))
		switch {
		case n == 0:
			return raw, nil, malformed("a zero-length handshake record")
		case n > maxRecord:
			return raw, nil, malformed("a record of %d bytes (at most %d)", n, maxRecord)
		}
		if need >= 0 && len(msg)+n > need {
			return raw, nil, malformed("the record that ends the ClientHello carries more")
		}
		start := len(raw)
		raw = append(raw, make([]byte, n)...)
		if _, err := io.ReadFull(r, raw[start:]); err != nil {
			return raw[:start], nil, eof(err, false)
		}
		msg = append(msg, raw[start:]...)
		if need < 0 && len(msg) >= 4 {
			if msg[0] != 1 {
				return raw, nil, malformed("the first handshake message is of type %d, not ClientHello", msg[0])
			}
			need = 4 + (int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3]))
			if need > MaxHello {
				return raw, nil, &Error{Reason: fmt.Sprintf("the ClientHello is %d bytes, over the %d the gate reads", need, MaxHello)}
			}
			if len(msg) > need {
				return raw, nil, malformed("the record that ends the ClientHello carries more")
			}
		}
	}
	h, err = Parse(msg[4:])
	return raw, h, err
}

func eof(err error, first bool) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		if first {
			return io.EOF
		}
		return &Error{Reason: "the client closed the connection before its ClientHello was whole"}
	}
	return err
}

// reader reads the fields of a handshake message, failing once on the first short read.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) take(n int) []byte {
	if r.bad || n > len(r.b) {
		r.bad = true
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) u8() int {
	b := r.take(1)
	if b == nil {
		return 0
	}
	return int(b[0])
}

func (r *reader) u16() int {
	b := r.take(2)
	if b == nil {
		return 0
	}
	return int(binary.BigEndian.Uint16(b))
}

// vec8 and vec16 take a vector with a 1- or 2-byte length.
func (r *reader) vec8() []byte  { return r.take(r.u8()) }
func (r *reader) vec16() []byte { return r.take(r.u16()) }

// Extension types read.
const (
	extServerName = 0
	extALPN       = 16
)

// Parse parses the body of a ClientHello handshake message (after its 4-byte header), as strictly
// as TLS libraries do: the fixed fields, each extension once, the server_name extension holding
// exactly one host name (without a trailing dot), each ALPN protocol non-empty, nothing after
// the extensions.
func Parse(body []byte) (*Hello, error) {
	r := &reader{b: body}
	if v := r.u16(); !r.bad && v>>8 != 3 {
		return nil, malformed("client version %#04x", v)
	}
	r.take(32) // random
	if sid := r.vec8(); len(sid) > 32 {
		return nil, malformed("a session id of %d bytes", len(sid))
	}
	if cs := r.vec16(); !r.bad && (len(cs) == 0 || len(cs)%2 != 0) {
		return nil, malformed("cipher suites of %d bytes", len(cs))
	}
	if cm := r.vec8(); !r.bad && len(cm) == 0 {
		return nil, malformed("no compression methods")
	}
	if r.bad {
		return nil, malformed("it ends before its fixed fields")
	}
	h := &Hello{}
	if len(r.b) == 0 {
		return h, nil // no extensions: no server name
	}
	exts := &reader{b: r.vec16()}
	if r.bad || len(r.b) != 0 {
		return nil, malformed("the extensions' length does not match the message")
	}
	seen := map[int]bool{}
	for len(exts.b) > 0 {
		typ := exts.u16()
		data := exts.vec16()
		if exts.bad {
			return nil, malformed("an extension runs past the message")
		}
		if seen[typ] {
			return nil, malformed("extension %d appears twice", typ)
		}
		seen[typ] = true
		var err error
		switch typ {
		case extServerName:
			h.ServerName, err = serverName(data)
		case extALPN:
			h.ALPN, err = alpn(data)
		}
		if err != nil {
			return nil, err
		}
	}
	return h, nil
}

// serverName reads the server_name extension (RFC 6066 3): one host_name.
func serverName(data []byte) (string, error) {
	r := &reader{b: data}
	list := &reader{b: r.vec16()}
	if r.bad || len(r.b) != 0 {
		return "", malformed("the server_name extension's length does not match")
	}
	name := ""
	for len(list.b) > 0 {
		typ := list.u8()
		v := list.vec16()
		if list.bad {
			return "", malformed("a server name runs past its list")
		}
		if typ != 0 {
			continue // not a host_name: ignored, as TLS libraries do
		}
		if name != "" {
			return "", malformed("more than one host name in server_name")
		}
		if len(v) == 0 {
			return "", malformed("an empty host name in server_name")
		}
		for _, c := range v {
			if c <= ' ' || c >= 0x7f {
				return "", malformed("a host name in server_name with a byte that is not printable ASCII")
			}
		}
		if strings.HasSuffix(string(v), ".") {
			return "", malformed("a host name in server_name ends with a dot")
		}
		name = string(v)
	}
	if name == "" {
		return "", malformed("a server_name extension with no host name")
	}
	return name, nil
}

// alpn reads the application_layer_protocol_negotiation extension (RFC 7301 3.1).
func alpn(data []byte) ([]string, error) {
	r := &reader{b: data}
	list := &reader{b: r.vec16()}
	if r.bad || len(r.b) != 0 || len(list.b) == 0 {
		return nil, malformed("the ALPN extension's length does not match")
	}
	var out []string
	for len(list.b) > 0 {
		p := list.vec8()
		if list.bad || len(p) == 0 {
			return nil, malformed("an empty or cut ALPN protocol")
		}
		out = append(out, string(p))
	}
	return out, nil
}
