package framing

import (
	"fmt"
	"strconv"
)

// Kind says how a request's framing failed; the gate maps it to a response.
type Kind string

const (
	BadRequest    Kind = "bad-request"    // malformed framing: 400
	TooLarge      Kind = "too-large"      // head (or trailer section) over the limit: 431
	H2C           Kind = "h2c"            // Upgrade: h2c or HTTP2-Settings: 403 E_FLOOR
	H2Preface     Kind = "h2-preface"     // "PRI * HTTP/2.0": 403 E_FLOOR
	HostMismatch  Kind = "host-mismatch"  // Host disagrees with the absolute-form or CONNECT target: 403 E_FLOOR
	NestedConnect Kind = "nested-connect" // CONNECT inside a decrypted tunnel: 403 E_FLOOR
	TLSOnPlain    Kind = "tls-on-plain"   // a TLS handshake record where a request was expected: 400
)

// Error is a framing refusal. Reason is public text: one line, printable ASCII, and it quotes at
// most a short prefix of the offending bytes.
type Error struct {
	Kind   Kind
	Reason string
}

func (e *Error) Error() string { return "framing: " + string(e.Kind) + ": " + e.Reason }

func refuse(k Kind, format string, args ...any) *Error {
	return &Error{Kind: k, Reason: fmt.Sprintf(format, args...)}
}

func bad(format string, args ...any) *Error { return refuse(BadRequest, format, args...) }

// maxQuote bounds how many offending bytes a Reason repeats.
const maxQuote = 24

// quote renders a short prefix of b as a Go string literal in printable ASCII, so a Reason stays one
// line whatever the client sent.
func quote(b []byte) string {
	if len(b) > maxQuote {
		return strconv.QuoteToASCII(string(b[:maxQuote])) + "..."
	}
	return strconv.QuoteToASCII(string(b))
}

// quoteByte renders one byte for a Reason.
func quoteByte(c byte) string {
	if c >= 0x20 && c < 0x7f && c != '\'' && c != '\\' {
		return "'" + string(rune(c)) + "'"
	}
	return fmt.Sprintf("0x%02x", c)
}
