package floor

import (
	"net/http"
	"path"
	"strings"

	"github.com/lockhttp/lockhttp/internal/percent"
)

// dohPath is the path RFC 8484 suggests, and every public resolver uses.
const dohPath = "/dns-query"

// dohMediaTypes are the media types of DNS over HTTPS: RFC 8484's, the JSON
// API's (Cloudflare, Google), and the draft's that early clients still send.
var dohMediaTypes = []string{
	"application/dns-message",
	"application/dns-json",
	"application/dns-udpwireformat",
}

// Request refuses DNS-over-HTTPS by request shape (DoH): a path of
// /dns-query or under it (compared case-insensitively after percent-decoding,
// with '\' read as '/' and dot segments resolved), or a Content-Type or
// Accept media type of application/dns-message or application/dns-json
// (parameters ignored, case-insensitive, any of several comma-separated
// values or header lines). path is the request's path; a query or fragment
// is ignored.
func Request(method, path string, header http.Header) *Refusal {
	if isDoHPath(path) {
		return refuse(DoH, "%s request to the /dns-query path is DNS over HTTPS; the gate refuses it, use the system resolver", methodName(method))
	}
	for _, v := range header.Values("Content-Type") {
		if isDoHMediaType(v) {
			return refuse(DoH, "%s request with Content-Type %s is DNS over HTTPS; the gate refuses it, use the system resolver", methodName(method), Shown(strings.TrimSpace(v), MaxShown))
		}
	}
	for _, line := range header.Values("Accept") {
		for line != "" {
			v, rest, _ := strings.Cut(line, ",")
			if isDoHMediaType(v) {
				return refuse(DoH, "%s request that accepts %s is DNS over HTTPS; the gate refuses it, use the system resolver", methodName(method), Shown(strings.TrimSpace(v), MaxShown))
			}
			line = rest
		}
	}
	return nil
}

// methodName is method for a reason, or "a" when it is not a plain token.
func methodName(method string) string {
	if method == "" || len(method) > 16 {
		return "a"
	}
	for i := 0; i < len(method); i++ {
		if c := method[i]; !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || c == '-' || c == '_') {
			return "a"
		}
	}
	return method
}

// isDoHPath reports whether p is /dns-query or a path under it.
func isDoHPath(p string) bool {
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		p = p[:i]
	}
	// Decode until stable (bounded), so that double encoding does not hide
	// the path from a server that decodes twice.
	for range 4 {
		if strings.IndexByte(p, '%') < 0 {
			break
		}
		d := percent.Decode(p, false)
		if d == p {
			break
		}
		p = d
	}
	if strings.IndexByte(p, '\\') >= 0 {
		p = strings.ReplaceAll(p, "\\", "/")
	}
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	p = path.Clean(p)
	if len(p) < len(dohPath) || !strings.EqualFold(p[:len(dohPath)], dohPath) {
		return false
	}
	rest := p[len(dohPath):]
	return rest == "" || rest[0] == '/' || rest[0] == ';'
}

// isDoHMediaType reports whether v, one media type with optional parameters,
// is a DNS-over-HTTPS media type.
func isDoHMediaType(v string) bool {
	v, _, _ = strings.Cut(v, ";")
	v = strings.TrimSpace(v)
	for _, t := range dohMediaTypes {
		if strings.EqualFold(v, t) {
			return true
		}
	}
	return false
}
