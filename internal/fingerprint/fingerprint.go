// Package fingerprint names a request by what a human approving it sees: the same fingerprint
// means the same container, method, URL, media type, end-to-end headers and body bytes.
package fingerprint

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"net/http"
	"sort"
	"strings"
)

// Request is what a fingerprint covers. Header holds the end-to-end headers only: the gate
// strips hop-by-hop headers and Proxy-Authorization before it fingerprints.
type Request struct {
	Container string
	Method    string
	URL       string // absolute, as the gate forwards it (scheme, host, port, path and query)
	MediaType string // the Content-Type's media type, lower case ("" when none)
	Header    http.Header
	Body      []byte
}

// Prefix starts every fingerprint; it names the encoding, so that a change of encoding can
// never match an old approval.
const Prefix = "fp2:"

// Of returns the fingerprint: "fp2:" and the hex SHA-256 of a length-prefixed encoding of the
// request's parts. Header names are compared case-insensitively and sorted; the values of one
// name keep their order. The body is taken byte for byte: an approval applies to exactly the
// bytes the ticket showed and the gate forwards, so two bodies that a reader might call equal
// (JSON with other white space) are two requests.
func Of(r *Request) string {
	h := sha256.New()
	Field(h, "container", r.Container)
	Field(h, "method", r.Method)
	Field(h, "url", r.URL)
	Field(h, "media-type", strings.ToLower(r.MediaType))
	keys := make([]string, 0, len(r.Header))
	for k := range r.Header {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		li, lj := strings.ToLower(keys[i]), strings.ToLower(keys[j])
		if li != lj {
			return li < lj
		}
		return keys[i] < keys[j]
	})
	for _, k := range keys {
		n := strings.ToLower(k)
		for _, v := range r.Header[k] {
			Field(h, "header", n+": "+v)
		}
	}
	Field(h, "body", string(r.Body))
	return Prefix + hex.EncodeToString(h.Sum(nil))
}

// Field writes one named part into h, each of name and value preceded by its length as 8 bytes
// big-endian, so that no two sequences of parts write the same bytes. Every fingerprint of the
// project (a request's, an MCP call's, a tool pin's) frames its parts with it.
func Field(h hash.Hash, name, value string) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(name)))
	h.Write(n[:])
	h.Write([]byte(name))
	binary.BigEndian.PutUint64(n[:], uint64(len(value)))
	h.Write(n[:])
	h.Write([]byte(value))
}

// Short is the first 12 characters after the prefix, for screens.
func Short(fp string) string {
	s := strings.TrimPrefix(fp, Prefix)
	if len(s) > 12 {
		s = s[:12]
	}
	return s
}
