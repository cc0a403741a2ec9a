// Package framing checks the framing of each HTTP/1.x request on a client connection, strictly,
// before net/http's lenient server reads it.
package framing

import (
	"bytes"
	"net/netip"
)

// BodyKind says how the body of a request is framed.
type BodyKind uint8

const (
	NoBody      BodyKind = iota // neither Content-Length nor Transfer-Encoding
	LengthBody                  // Content-Length: Head.Length bytes (possibly 0)
	ChunkedBody                 // Transfer-Encoding: chunked
)

func (k BodyKind) String() string {
	switch k {
	case NoBody:
		return "none"
	case LengthBody:
		return "length"
	case ChunkedBody:
		return "chunked"
	}
	return "BodyKind(?)"
}

// Head is an accepted request head.
type Head struct {
	Method string
	Target string // the request-target exactly as sent
	Proto  string // "HTTP/1.1" or "HTTP/1.0"
	Body   BodyKind
	Length int64 // the Content-Length for LengthBody; 0 otherwise
	// Connect reports a CONNECT request (authority-form target, no body).
	Connect bool
	// Upgrade is the lowercased Upgrade header value, "" when the request has none.
	Upgrade string
}

// ParseHead checks one request head: b holds the request line, the header lines and the empty
// line that ends them (CRLF CRLF), and nothing else. tunnel reports whether the head arrived inside
// a decrypted tunnel. The rules, checked in this order (the first refusal wins):
//
//  1. Line by line: every line ends in CRLF (no bare LF or CR, no NUL); the request line is
//     METHOD SP TARGET SP VERSION with a token method, a target of printable ASCII without '#',
//     and HTTP/1.1 or HTTP/1.0 ("PRI * HTTP/2.0" is H2Preface); each header line is a token
//     name, ':' at once, and a value of VCHAR, obs-text, SP and HTAB; no obs-fold; at most one
//     Content-Length (digits only, fits int64), Transfer-Encoding (exactly "chunked", any case),
//     Host, Upgrade (not empty) and Expect ("100-continue" only) line; a Trailer header names no
//     framing or routing field.
//  2. The target: CONNECT takes host:port; any other method /path?query,
//     http(s)://[userinfo@]host[:port]/path?query, or "*" for OPTIONS inside a tunnel. A host is
//     a name of letters, digits, '.', '-' and '_', or a bracketed IPv6 literal without a zone; a
//     port is 1-65535 without leading zeros; a path's %-escapes are well formed.
//  3. The framing as a whole: not both Content-Length and Transfer-Encoding, no
//     Transfer-Encoding in HTTP/1.0, no body framing on CONNECT; one well-formed Host when
//     HTTP/1.1 (CONNECT excepted) or when an origin-form request arrives inside a tunnel.
//  4. H2C (Upgrade lists h2c, or an HTTP2-Settings field), then NestedConnect (CONNECT inside a
//     tunnel), then HostMismatch: a Host must name the authority of an absolute-form target,
//     ignoring case, with a missing port read as the scheme's default (80 for http, 443 for
//     https). A CONNECT's Host is not compared with its target: the tunnel is the target's,
//     the Host never leaves the gate, and clients send the proxy's address there (Node's
//     http.request does); it must still be one well-formed Host.
//
// ParseHead refuses everything net/http's server would refuse on its own (so that every refusal
// reaches the gate's handler), and more: what net/http reads leniently where a stricter parser
// behind the gate might read it otherwise, and what the floor forbids.
func ParseHead(b []byte, tunnel bool) (*Head, *Error) {
	var h head
	if e := parse(b, tunnel, &h); e != nil {
		return nil, e
	}
	out := &Head{
		Method:  methodString(h.method),
		Target:  string(h.target),
		Proto:   "HTTP/1.0",
		Body:    h.body,
		Length:  h.length,
		Connect: h.connect,
	}
	if h.http11 {
		out.Proto = "HTTP/1.1"
	}
	if h.upgrade != nil {
		out.Upgrade = string(bytes.ToLower(h.upgrade))
	}
	return out, nil
}

// head is what parse learns; its slices point into the parsed bytes, so the Conn checks a head
// without allocating.
type head struct {
	method, target []byte
	http11         bool
	body           BodyKind
	length         int64
	connect        bool
	upgrade        []byte // trimmed Upgrade value; nil when absent
}

// form is the form of a request-target (RFC 9112 section 3.2).
type form uint8

const (
	originForm    form = iota // /path?query
	absoluteForm              // http://host:port/path?query
	authorityForm             // host:port, CONNECT only
	asteriskForm              // *, OPTIONS inside a tunnel only
)

// parse is ParseHead without allocating: h's slices point into b.
func parse(b []byte, tunnel bool, h *head) *Error {
	n := len(b)
	if n < 4 || string(b[n-4:]) != "\r\n\r\n" {
		return bad("the request head does not end in an empty line (CRLF CRLF)")
	}
	// The request line.
	eol := bytes.IndexByte(b, '\n')
	line, e := crlfLine(b, 0, eol)
	if e != nil {
		return e
	}
	method, target, proto, e := requestLine(line)
	if e != nil {
		return e
	}
	h.http11 = string(proto) == "HTTP/1.1"
	for _, c := range target {
		if classes[c]&cTarget == 0 {
			return badByte(c, "the request target")
		}
		if c == '#' {
			return bad("the request target has a fragment ('#')")
		}
	}
	h.method, h.target = method, target
	h.connect = string(method) == "CONNECT"

	// The form of the target, and its authority when it has one.
	var (
		f       form
		tHost   []byte
		tPort   = -1
		defPort int // the scheme's default port, for an absolute-form target
	)
	switch {
	case h.connect:
		f = authorityForm
		if bytes.IndexByte(target, '/') >= 0 || bytes.IndexByte(target, '?') >= 0 || bytes.IndexByte(target, '@') >= 0 {
			return bad("the CONNECT target must be host:port, without '/', '?' or '@'")
		}
		var why string
		if tHost, tPort, why = hostPort(target); why != "" {
			return bad("the CONNECT target: %s", why)
		}
		if tPort < 0 {
			return bad("the CONNECT target lacks a port")
		}
	case target[0] == '/':
		f = originForm
		if !goodEscapes(pathOf(target)) {
			return bad("malformed %%-escape in the path of the request target")
		}
	case len(target) == 1 && target[0] == '*':
		f = asteriskForm
		if string(method) != "OPTIONS" || !tunnel {
			return bad("the target \"*\" is for OPTIONS to an origin server only")
		}
	default:
		f = absoluteForm
		var e *Error
		if tHost, tPort, defPort, e = absolute(target); e != nil {
			return e
		}
	}

	// The header lines.
	var (
		cl, te, hosts, ups, expects int
		hostVal                     []byte
		h2c                         bool
	)
	pos := eol + 1
	for ln := 2; ; ln++ { // ln numbers the lines of the head for a Reason: the request line is 1
		lf := pos + bytes.IndexByte(b[pos:], '\n')
		line, e := crlfLine(b, pos, lf)
		if e != nil {
			return e
		}
		pos = lf + 1
		if len(line) == 0 {
			if pos != n {
				return bad("bytes after the end of the request head")
			}
			break
		}
		if line[0] == ' ' || line[0] == '\t' {
			return bad("line %d of the request head starts with whitespace (obs-fold is not allowed)", ln)
		}
		colon := bytes.IndexByte(line, ':')
		if colon < 0 {
			return bad("line %d of the request head has no colon", ln)
		}
		name := line[:colon]
		if colon == 0 {
			return bad("line %d of the request head has an empty header name", ln)
		}
		if i := notToken(name); i >= 0 {
			if c := name[len(name)-1]; c == ' ' || c == '\t' {
				return bad("whitespace between header name %s and its colon", quoteName(bytes.TrimRight(name, " \t")))
			}
			return badByte(name[i], "the header name "+quoteName(name))
		}
		v := trimOWS(line[colon+1:])
		for _, c := range v {
			if classes[c]&cValue == 0 {
				return badByte(c, "the value of header "+quoteName(name))
			}
		}
		switch len(name) {
		case 4:
			if foldEq(name, "host") {
				if hosts++; hosts > 1 {
					return bad("more than one Host header")
				}
				hostVal = v
			}
		case 6:
			if foldEq(name, "expect") {
				if expects++; expects > 1 {
					return bad("more than one Expect header")
				}
				if !foldEq(v, "100-continue") {
					return bad("an Expect other than 100-continue is not supported")
				}
			}
		case 7:
			if foldEq(name, "upgrade") {
				if ups++; ups > 1 {
					return bad("more than one Upgrade header")
				}
				if len(v) == 0 {
					return bad("empty Upgrade header")
				}
				if listHas(v, "h2c") {
					h2c = true
				}
				h.upgrade = v
			} else if foldEq(name, "trailer") {
				if e := checkTrailerDecl(v); e != nil {
					return e
				}
			}
		case 14:
			if foldEq(name, "content-length") {
				if cl++; cl > 1 {
					return bad("more than one Content-Length header")
				}
				var ok bool
				if h.length, ok = parseLength(v); !ok {
					return bad("invalid Content-Length; want decimal digits only")
				}
			} else if foldEq(name, "http2-settings") {
				h2c = true
			}
		case 17:
			if foldEq(name, "transfer-encoding") {
				if te++; te > 1 {
					return bad("more than one Transfer-Encoding header")
				}
				if !foldEq(v, "chunked") {
					return bad("a Transfer-Encoding other than \"chunked\" is not supported")
				}
			}
		}
	}

	// The framing as a whole.
	switch {
	case te > 0 && cl > 0:
		return bad("both Content-Length and Transfer-Encoding; a request has one framing")
	case te > 0 && !h.http11:
		return bad("an HTTP/1.0 request with Transfer-Encoding")
	case h.connect && (te > 0 || cl > 0):
		return bad("a CONNECT with Content-Length or Transfer-Encoding; CONNECT has no body")
	}
	needHost := h.http11 && !h.connect || tunnel && (f == originForm || f == asteriskForm)
	if hosts == 0 && needHost {
		return bad("missing Host header")
	}
	var hHost []byte
	hPort := -1
	if hosts == 1 {
		var why string
		if hHost, hPort, why = hostPort(hostVal); why != "" {
			return bad("malformed Host header: %s", why)
		}
	}
	if h2c {
		return refuse(H2C, "an h2c upgrade (Upgrade: h2c or HTTP2-Settings) is not allowed")
	}
	if h.connect && tunnel {
		return refuse(NestedConnect, "a CONNECT inside a tunnel is not allowed")
	}
	if hosts == 1 && f == absoluteForm && !sameAuthority(hHost, hPort, tHost, tPort, defPort) {
		return refuse(HostMismatch, "the Host header does not match the target authority")
	}

	switch {
	case te > 0:
		h.body = ChunkedBody
	case cl > 0:
		h.body = LengthBody
	default:
		h.body = NoBody
	}
	return nil
}

// requestLine splits a request line (without its CRLF) into METHOD SP TARGET SP VERSION, and
// refuses one that is not of that shape, whose method is not a token or whose version is not
// HTTP/1.1 or HTTP/1.0 (the HTTP/2 preface with its own kind). Conn checks the request line as
// soon as it arrives, so that a text protocol other than HTTP is refused at its first line.
func requestLine(line []byte) (method, target, proto []byte, e *Error) {
	if len(line) == 0 {
		return nil, nil, nil, bad("empty request line")
	}
	if string(line) == "PRI * HTTP/2.0" {
		return nil, nil, nil, refuse(H2Preface, "an HTTP/2 connection preface; this proxy speaks HTTP/1.1 only")
	}
	sp := bytes.IndexByte(line, ' ')
	if sp < 0 {
		return nil, nil, nil, bad("the request line %s is not METHOD SP TARGET SP VERSION", sized(line))
	}
	method = line[:sp]
	if sp == 0 {
		return nil, nil, nil, bad("the request line starts with a space")
	}
	if i := notToken(method); i >= 0 {
		return nil, nil, nil, badByte(method[i], "the method "+quoteName(method))
	}
	rest := line[sp+1:]
	sp = bytes.IndexByte(rest, ' ')
	if sp < 0 {
		return nil, nil, nil, bad("the request line %s is not METHOD SP TARGET SP VERSION", sized(line))
	}
	target, proto = rest[:sp], rest[sp+1:]
	if len(target) == 0 || bytes.IndexByte(proto, ' ') >= 0 {
		return nil, nil, nil, bad("the request line has an extra space")
	}
	switch string(proto) {
	case "HTTP/1.1", "HTTP/1.0":
	default:
		return nil, nil, nil, bad("unsupported protocol version %s; use HTTP/1.1", quoteName(proto))
	}
	return method, target, proto, nil
}

// crlfLine returns the line b[start:lf] without its CRLF, refusing a bare LF. (A CR inside the
// line, like a NUL, fails the byte checks of whatever part of the line it is in: see badByte.)
func crlfLine(b []byte, start, lf int) ([]byte, *Error) {
	if lf == start || b[lf-1] != '\r' {
		return nil, bad("bare LF in the request head; every line must end in CRLF")
	}
	return b[start : lf-1], nil
}

// badByte refuses the byte c found in where.
func badByte(c byte, where string) *Error {
	switch c {
	case '\r':
		return bad("bare CR in the request head")
	case 0:
		return bad("a NUL byte in the request head")
	}
	return bad("invalid byte %s in %s", quoteByte(c), where)
}

// absolute checks an absolute-form target: http or https, "//", an optional userinfo (the gate
// refuses it; here it only has to be well formed), host[:port], then a path and a query.
func absolute(t []byte) (host []byte, port, defPort int, e *Error) {
	i := bytes.IndexByte(t, ':')
	if i <= 0 {
		return nil, 0, 0, bad("the request target is neither /path nor http://host/path")
	}
	switch scheme := t[:i]; {
	case foldEq(scheme, "http"):
		defPort = 80
	case foldEq(scheme, "https"):
		defPort = 443
	default:
		return nil, 0, 0, bad("the scheme %s of the request target is not http or https", quoteName(t[:i]))
	}
	rest := t[i+1:]
	if len(rest) < 2 || rest[0] != '/' || rest[1] != '/' {
		return nil, 0, 0, bad("the request target lacks the // before its authority")
	}
	rest = rest[2:]
	end := 0
	for end < len(rest) && rest[end] != '/' && rest[end] != '?' {
		end++
	}
	auth := rest[:end]
	if at := bytes.LastIndexByte(auth, '@'); at >= 0 {
		user := auth[:at]
		for _, c := range user {
			if classes[c]&cUser == 0 {
				return nil, 0, 0, bad("invalid byte %s in the userinfo of the request target", quoteByte(c))
			}
		}
		if !goodEscapes(user) {
			return nil, 0, 0, bad("malformed %%-escape in the userinfo of the request target")
		}
		auth = auth[at+1:]
	}
	var why string
	if host, port, why = hostPort(auth); why != "" {
		return nil, 0, 0, bad("the authority of the request target: %s", why)
	}
	if !goodEscapes(pathOf(rest[end:])) {
		return nil, 0, 0, bad("malformed %%-escape in the path of the request target")
	}
	return host, port, defPort, nil
}

// hostPort splits host[:port] and checks both strictly: a host is a name of letters, digits, '.',
// '-' and '_', or a bracketed IPv6 literal without a zone; a port is 1-65535 in decimal without
// leading zeros. port is -1 when absent. why is empty when a is well formed.
func hostPort(a []byte) (host []byte, port int, why string) {
	var rest []byte
	if len(a) > 0 && a[0] == '[' {
		j := bytes.IndexByte(a, ']')
		if j < 0 {
			return nil, 0, "missing ']' after the IPv6 literal"
		}
		host, rest = a[:j+1], a[j+1:]
		inner := a[1:j]
		for _, c := range inner {
			if classes[c]&cHex == 0 && c != ':' && c != '.' {
				return nil, 0, "invalid IPv6 literal"
			}
		}
		if ip, err := netip.ParseAddr(string(inner)); err != nil || !ip.Is6() {
			return nil, 0, "invalid IPv6 literal"
		}
		if len(rest) > 0 && rest[0] != ':' {
			return nil, 0, "junk after the IPv6 literal"
		}
	} else {
		host = a
		if j := bytes.IndexByte(a, ':'); j >= 0 {
			host, rest = a[:j], a[j:]
		}
		if len(host) == 0 {
			return nil, 0, "empty host"
		}
		for _, c := range host {
			if classes[c]&cHost == 0 {
				return nil, 0, "invalid byte " + quoteByte(c) + " in the host"
			}
		}
	}
	if len(rest) == 0 {
		return host, -1, ""
	}
	p := rest[1:]
	if len(p) == 0 || len(p) > 5 || p[0] == '0' {
		return nil, 0, "invalid port"
	}
	for _, c := range p {
		if c < '0' || c > '9' {
			return nil, 0, "invalid port"
		}
		port = port*10 + int(c-'0')
	}
	if port > 65535 {
		return nil, 0, "invalid port"
	}
	return host, port, ""
}

// sameAuthority compares the Host header with an absolute-form target's authority: hosts
// case-insensitively, ports after filling in the scheme's default (defPort).
func sameAuthority(hHost []byte, hPort int, tHost []byte, tPort, defPort int) bool {
	if !bytes.EqualFold(hHost, tHost) {
		return false
	}
	if hPort < 0 {
		hPort = defPort
	}
	if tPort < 0 {
		tPort = defPort
	}
	return hPort == tPort
}

// pathOf returns the part of a target before its query.
func pathOf(t []byte) []byte {
	if i := bytes.IndexByte(t, '?'); i >= 0 {
		return t[:i]
	}
	return t
}

// goodEscapes reports whether every '%' in s starts a %XX escape.
func goodEscapes(s []byte) bool {
	for i := bytes.IndexByte(s, '%'); i >= 0; i = bytes.IndexByte(s, '%') {
		if i+2 >= len(s) || classes[s[i+1]]&cHex == 0 || classes[s[i+2]]&cHex == 0 {
			return false
		}
		s = s[i+3:]
	}
	return true
}

// parseLength parses 1*DIGIT into an int64.
func parseLength(v []byte) (int64, bool) {
	if len(v) == 0 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := int64(c - '0')
		if n > (1<<63-1-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

// listHas reports whether the comma-separated list v names the protocol p (ignoring case and any
// "/version").
func listHas(v []byte, p string) bool {
	for len(v) > 0 {
		var el []byte
		if i := bytes.IndexByte(v, ','); i >= 0 {
			el, v = v[:i], v[i+1:]
		} else {
			el, v = v, nil
		}
		el = trimOWS(el)
		if i := bytes.IndexByte(el, '/'); i >= 0 {
			el = trimOWS(el[:i])
		}
		if foldEq(el, p) {
			return true
		}
	}
	return false
}

// checkTrailerDecl checks a Trailer header: a list of field names, none of them a framing or
// routing field (net/http refuses some of these itself, answering without the gate).
func checkTrailerDecl(v []byte) *Error {
	for len(v) > 0 {
		var el []byte
		if i := bytes.IndexByte(v, ','); i >= 0 {
			el, v = v[:i], v[i+1:]
		} else {
			el, v = v, nil
		}
		el = trimOWS(el)
		if len(el) == 0 {
			continue
		}
		if !isToken(el) {
			return bad("invalid field name %s in the Trailer header", quoteName(el))
		}
		if forbiddenTrailer(el) {
			return bad("the Trailer header declares %s, which may not be a trailer", quoteName(el))
		}
	}
	return nil
}

// forbiddenTrailer reports the fields that may not appear in a trailer section.
func forbiddenTrailer(name []byte) bool {
	return foldEq(name, "content-length") || foldEq(name, "transfer-encoding") ||
		foldEq(name, "trailer") || foldEq(name, "host")
}

func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

func isToken(b []byte) bool { return notToken(b) < 0 }

// notToken returns the index of the first byte of b that keeps it from being a token (0 when b is
// empty), or -1 for a token.
func notToken(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	for i, c := range b {
		if classes[c]&cToken == 0 {
			return i
		}
	}
	return -1
}

// foldEq reports whether b equals the lowercase ASCII string s, ignoring ASCII case.
func foldEq(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// methodString returns the common methods without allocating.
func methodString(m []byte) string {
	switch string(m) {
	case "GET":
		return "GET"
	case "HEAD":
		return "HEAD"
	case "POST":
		return "POST"
	case "PUT":
		return "PUT"
	case "PATCH":
		return "PATCH"
	case "DELETE":
		return "DELETE"
	case "OPTIONS":
		return "OPTIONS"
	case "CONNECT":
		return "CONNECT"
	}
	return string(m)
}

// Byte classes.
const (
	cToken  = 1 << iota // RFC 9110 tchar
	cValue              // field-value byte after trimming: VCHAR, obs-text, SP, HTAB
	cTarget             // request-target byte: VCHAR
	cHost               // reg-name byte this package accepts: ALPHA DIGIT . - _
	cUser               // userinfo byte: unreserved, sub-delims, ':' and '%'
	cHex                // HEXDIG
)

var classes = func() (t [256]uint8) {
	for c := 0; c < 256; c++ {
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if alnum || bytes.IndexByte([]byte("!#$%&'*+-.^_`|~"), byte(c)) >= 0 {
			t[c] |= cToken
		}
		if c > 0x20 && c != 0x7f || c == ' ' || c == '\t' {
			t[c] |= cValue
		}
		if c > 0x20 && c < 0x7f {
			t[c] |= cTarget
		}
		if alnum || c == '.' || c == '-' || c == '_' {
			t[c] |= cHost
		}
		if alnum || bytes.IndexByte([]byte("-._~!$&'()*+,;=:%"), byte(c)) >= 0 {
			t[c] |= cUser
		}
		if '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' {
			t[c] |= cHex
		}
	}
	return t
}()
