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
	HostMismatch  Kind = "host-mismatch"  // Host disagrees with the absolute-form target: 403 E_FLOOR
	NestedConnect Kind = "nested-connect" // CONNECT inside a decrypted tunnel: 403 E_FLOOR
	TLSOnPlain    Kind = "tls-on-plain"   // a TLS handshake record where a request was expected: 400
)

// Error is a framing refusal. Reason is public text: one line, printable ASCII, and it never
// repeats bytes of the request that could hold a credential: a value, a request target or a line
// is named by its place (and length), a name only as quoteName allows, and at most one offending
// byte is shown.
type Error struct {
	Kind   Kind
	Reason string
}

func (e *Error) Error() string { return "framing: " + string(e.Kind) + ": " + e.Reason }

func refuse(k Kind, format string, args ...any) *Error {
	return &Error{Kind: k, Reason: fmt.Sprintf(format, args...)}
}

func bad(format string, args ...any) *Error { return refuse(BadRequest, format, args...) }

// Limits of what quoteName repeats. No credential shape the gate knows (docs/secrets.md) fits
// them: each has a longer run of letters and digits, or is longer.
const (
	maxQuote     = 40 // bytes of a name
	maxWord      = 15 // letters in a word of a name (a run of letters, digits and '_')
	maxDigitWord = 7  // bytes in a word that holds a digit
)

// quoteName renders a name of the request (a method, a header or trailer name, a scheme, a
// protocol version) for a Reason: whole, as a Go string literal in printable ASCII, when it is
// short and made of short words ("X-Forwarded-For", "HTTP/2.0"); otherwise only its length, as
// "(57 bytes)". It never cuts a name: a credential is repeated whole or not at all, so that a
// masking of the Reason downstream still recognises it.
func quoteName(b []byte) string {
	if len(b) <= maxQuote && shortWords(b) {
		if q := strconv.QuoteToASCII(string(b)); len(q) <= maxQuote+8 {
			return q
		}
	}
	return sized(b)
}

// sized names bytes of the request by their length only: "(57 bytes)".
func sized(b []byte) string { return "(" + strconv.Itoa(len(b)) + " bytes)" }

// shortWords reports whether every word of b (a run of ASCII letters, digits and '_') is at most
// maxWord bytes, or maxDigitWord when it holds a digit.
func shortWords(b []byte) bool {
	n, digit := 0, false
	for i := 0; i <= len(b); i++ {
		if i < len(b) {
			c := b[i]
			switch {
			case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', c == '_':
				n++
				continue
			case '0' <= c && c <= '9':
				n, digit = n+1, true
				continue
			}
		}
		if n > maxWord || digit && n > maxDigitWord {
			return false
		}
		n, digit = 0, false
	}
	return true
}

// quoteByte renders one byte for a Reason.
func quoteByte(c byte) string {
	if c >= 0x20 && c < 0x7f && c != '\'' && c != '\\' {
		return "'" + string(rune(c)) + "'"
	}
	return fmt.Sprintf("0x%02x", c)
}
