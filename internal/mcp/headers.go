package mcp

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/lockhttp/lockhttp/internal/floor"
)

// The request headers of the 2026-07-28 revision that mirror the body: Mcp-Method the
// message's method, Mcp-Name what it acts on (Message.Target). A router or gateway in front of
// a server may act on them without reading the body, so they must say what the body says.
const (
	HeaderMethod = "Mcp-Method"
	HeaderName   = "Mcp-Name"
)

// The sentinel around a header value written in base64 (the UTF-8 of the value, standard
// alphabet, padded): how a client sends a value that is not plain ASCII, that begins or ends
// with white space, or that looks like the sentinel itself.
const (
	sentinelPrefix = "=?base64?"
	sentinelSuffix = "?="
)

// DecodeHeader reads a mirror header's value: a value wrapped in the sentinel is decoded (it
// must be canonical base64 of valid UTF-8); any other value is taken as written, and must be
// valid UTF-8 without control characters. The prefix is matched as written: =?BASE64?…?= is a
// plain value.
func DecodeHeader(v string) (string, error) {
	if len(v) >= len(sentinelPrefix)+len(sentinelSuffix) && strings.HasPrefix(v, sentinelPrefix) && strings.HasSuffix(v, sentinelSuffix) {
		enc := v[len(sentinelPrefix) : len(v)-len(sentinelSuffix)]
		d, err := base64.StdEncoding.Strict().DecodeString(enc)
		if err != nil || base64.StdEncoding.EncodeToString(d) != enc {
			return "", errors.New("not canonical base64 inside =?base64?…?=")
		}
		if !utf8.Valid(d) {
			return "", errors.New("base64 of text that is not UTF-8")
		}
		return string(d), nil
	}
	if !utf8.ValidString(v) {
		return "", errors.New("not UTF-8 (a client sends such a value in base64)")
	}
	for _, r := range v {
		if r < 0x20 && r != '\t' || r == 0x7f {
			return "", errors.New("a control character")
		}
	}
	return v, nil
}

// headerValues is every value of the header named name, whatever the case of the name in h.
func headerValues(h http.Header, name string) []string {
	var vs []string
	for k, v := range h {
		if strings.EqualFold(k, name) {
			vs = append(vs, v...)
		}
	}
	return vs
}

// CheckHeaders holds the Mcp-Method and Mcp-Name headers of a request to its body, as Parse read
// it: each may appear once, must decode (DecodeHeader), and must say what every message of the
// body that carries a method says: Mcp-Method its method, Mcp-Name its Target. Absent headers
// are no finding (revisions before 2026-07-28 send none); the body decides, never the headers.
// Every finding has Refuse set: a header that contradicts the body is refused, not asked.
func CheckHeaders(h http.Header, b *Body) []Finding {
	var out []Finding
	refuse := func(msg int, format string, args ...any) {
		if len(out) < MaxFindings {
			out = append(out, Finding{Message: msg, Refuse: true, Text: fmt.Sprintf(format, args...)})
		}
	}
	read := func(name string) (string, bool) {
		vs := headerValues(h, name)
		switch {
		case len(vs) == 0:
			return "", false
		case len(vs) > 1:
			refuse(-1, "%s appears %d times; routers read one, the server another", name, len(vs))
			return "", false
		}
		v, err := DecodeHeader(vs[0])
		if err != nil {
			refuse(-1, "%s %s: %v", name, floor.Shown(vs[0], 60), err)
			return "", false
		}
		return v, true
	}
	method, hasMethod := read(HeaderMethod)
	name, hasName := read(HeaderName)
	if !hasMethod && !hasName {
		return out
	}
	carried := false
	for i, m := range b.Messages {
		if m.Kind != Request && m.Kind != Notification {
			continue
		}
		carried = true
		if hasMethod && method != m.Method {
			refuse(i, "%s says %s and the body's method is %s: a router would act on one, the server on the other", HeaderMethod, floor.Shown(method, 60), floor.Shown(m.Method, 60))
		}
		switch {
		case !hasName:
		case !m.HasTarget:
			refuse(i, "%s says %s and the body's %s names nothing", HeaderName, floor.Shown(name, 60), floor.Shown(m.Method, 60))
		case name != m.Target:
			refuse(i, "%s says %s and the body's %s names %s: a router would act on one, the server on the other", HeaderName, floor.Shown(name, 60), m.Method, floor.Shown(m.Target, 60))
		}
	}
	if !carried && len(b.Messages) > 0 {
		refuse(-1, "%s or %s on a body that carries no method", HeaderMethod, HeaderName)
	}
	return out
}
