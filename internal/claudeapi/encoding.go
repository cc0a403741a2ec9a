package claudeapi

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/andybalholm/brotli"
)

// maxEncodings bounds how many content codings one body may stack.
const maxEncodings = 4

// errTooLarge reports a decoded body over the limit.
var errTooLarge = errors.New("decoded body over the limit")

// isJSON reports whether the request's Content-Type is application/json (parameters ignored,
// case-insensitive); a missing, repeated or unreadable Content-Type is not.
func isJSON(h http.Header) (bool, string) {
	vs := headerValues(h, "Content-Type")
	switch len(vs) {
	case 0:
		return false, "the body has no Content-Type; a Messages API request is application/json"
	case 1:
	default:
		return false, "the request has more than one Content-Type header; parsers disagree about which is read"
	}
	mt, _, err := mime.ParseMediaType(vs[0])
	if err != nil {
		return false, fmt.Sprintf("the Content-Type %q cannot be read; a Messages API request is application/json", shorten(vs[0], 64))
	}
	if mt != "application/json" {
		return false, fmt.Sprintf("the body is %s, not application/json, so its tools cannot be checked", shown(mt, 64))
	}
	return true, ""
}

// contentCodings lists the request's Content-Encoding codings in the order they were applied,
// lower case, without "identity" and empty list elements.
func contentCodings(h http.Header) []string {
	var out []string
	for _, line := range headerValues(h, "Content-Encoding") {
		for _, c := range strings.Split(line, ",") {
			c = strings.ToLower(strings.TrimSpace(c))
			if c != "" && c != "identity" {
				out = append(out, c)
			}
		}
	}
	return out
}

// decode undoes the content codings (applied in the order given, so undone in reverse), each
// stage bounded by limit. It returns errTooLarge for a stage over limit, or another error that
// says why the body cannot be read.
func decode(body []byte, codings []string, limit int64) ([]byte, error) {
	if len(codings) > maxEncodings {
		return nil, fmt.Errorf("%d content codings stacked; at most %d are read", len(codings), maxEncodings)
	}
	for i := len(codings) - 1; i >= 0; i-- {
		var err error
		body, err = decodeOne(body, codings[i], limit)
		if err != nil {
			return nil, err
		}
	}
	return body, nil
}

func decodeOne(body []byte, coding string, limit int64) ([]byte, error) {
	src := bytes.NewReader(body)
	var r io.Reader
	switch coding {
	case "gzip", "x-gzip":
		// Several gzip members are read as one body, as RFC 1952 and the common servers do; data
		// after the last member that is not a member is an error.
		zr, err := gzip.NewReader(src)
		if err != nil {
			return nil, fmt.Errorf("the gzip body cannot be read: %w", err)
		}
		r = zr
	case "deflate":
		// HTTP's deflate is the zlib format (RFC 9110 8.4.1.2).
		zr, err := zlib.NewReader(src)
		if err != nil {
			return nil, fmt.Errorf("the deflate body cannot be read as zlib: %w", err)
		}
		r = zr
	case "br":
		r = brotli.NewReader(src)
	default:
		return nil, fmt.Errorf("the content coding %q is not one the gate reads (gzip, deflate, br)", shorten(coding, 32))
	}
	out, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("the %s body cannot be read: %w", coding, err)
	}
	if int64(len(out)) > limit {
		return nil, errTooLarge
	}
	// The reader stopped at the end of the compressed stream: bytes after it are read one way by
	// one server and refused by another.
	if src.Len() > 0 {
		return nil, fmt.Errorf("the %s body has %d bytes after the compressed stream", coding, src.Len())
	}
	return out, nil
}

// headerValues is every value of the header named name, however the map's key is spelt.
func headerValues(h http.Header, name string) []string {
	var out []string
	for k, vs := range h {
		if strings.EqualFold(k, name) {
			out = append(out, vs...)
		}
	}
	return out
}

func shorten(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
