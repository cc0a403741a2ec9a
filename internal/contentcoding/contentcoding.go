// Package contentcoding undoes the content codings of a request body (gzip, deflate, br), each
// stage bounded, so that the gate inspects what the origin will read.
package contentcoding

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/andybalholm/brotli"
)

// MaxCodings bounds how many content codings one body may stack.
const MaxCodings = 4

// ErrTooLarge reports a decoded body over the limit.
var ErrTooLarge = errors.New("decoded body over the limit")

// Codings lists the request's Content-Encoding codings in the order they were applied,
// lower case, without "identity" and empty list elements.
func Codings(h http.Header) []string {
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

// Decode undoes the content codings (applied in the order given, so undone in reverse), each
// stage bounded by limit. It returns ErrTooLarge for a stage over limit, or another error that
// says why the body cannot be read.
func Decode(body []byte, codings []string, limit int64) ([]byte, error) {
	if len(codings) > MaxCodings {
		return nil, fmt.Errorf("%d content codings stacked; at most %d are read", len(codings), MaxCodings)
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
		return nil, ErrTooLarge
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
