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
	"github.com/lockhttp/lockhttp/internal/floor"
)

// MaxCodings bounds how many content codings one body may stack.
const MaxCodings = 4

// ErrTooLarge reports a decoded body over the limit, or a br stream whose window is over 4 MiB.
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
// stage bounded by limit. It returns ErrTooLarge for a stage over limit or a br stage whose window
// is over 4 MiB (whatever limit is), or another error that says why the body cannot be read.
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
		if err := checkBrWindow(body); err != nil {
			return nil, err
		}
		r = brotli.NewReader(src)
	default:
		return nil, fmt.Errorf("the content coding %s is not one the gate reads (gzip, deflate, br)", floor.Shown(coding, 32))
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

// brMaxWindowBits bounds the window a br stream may name: 4 MiB, the default of Node's zlib and
// Python's brotli. The brotli decoder sizes its ring buffer from the metablock lengths the
// stream declares, up to the window its header names (16 MiB, or 1 GiB with the large-window
// extension), so a body of a few bytes could make it allocate twice the window whatever the
// limit; at 4 MiB that is at most about 8 MiB a stage. A smaller window is not required even
// under a small limit: every common encoder writes 4 MiB by default.
const brMaxWindowBits = 22

// checkBrWindow refuses a br stream whose header names a window over 4 MiB, or the large-window
// extension. An empty body is left to the decoder, which says the stream is cut.
func checkBrWindow(body []byte) error {
	if len(body) == 0 {
		return nil
	}
	wbits, ok := brWindowBits(body[0])
	if !ok {
		return errors.New("the br body cannot be read: its header names the large-window extension (RFC 9841), which HTTP's br (RFC 7932) does not use")
	}
	if wbits > brMaxWindowBits {
		return fmt.Errorf("%w: the br stream's window is %s (WBITS %d), over the %s the gate decodes; compress it with a window of at most %s (lgwin %d)",
			ErrTooLarge, windowSize(wbits), wbits, windowSize(brMaxWindowBits), windowSize(brMaxWindowBits), brMaxWindowBits)
	}
	return nil
}

// brWindowBits reads WBITS, the base-2 log of the window size, from the first byte of a br
// stream (RFC 7932 9.1: 1 to 7 bits, the lowest first). ok is false for the pattern the RFC
// says must not be used, which the large-window extension (RFC 9841) uses.
func brWindowBits(b byte) (wbits int, ok bool) {
	switch {
	case b&1 == 0:
		return 16, true
	case b>>1&7 != 0:
		return 17 + int(b>>1&7), true
	case b>>4&7 == 1:
		return 0, false
	case b>>4&7 != 0:
		return 8 + int(b>>4&7), true
	default:
		return 17, true
	}
}

// windowSize says 1<<wbits bytes in KiB or MiB.
func windowSize(wbits int) string {
	if wbits >= 20 {
		return fmt.Sprintf("%d MiB", 1<<(wbits-20))
	}
	return fmt.Sprintf("%d KiB", 1<<(wbits-10))
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
