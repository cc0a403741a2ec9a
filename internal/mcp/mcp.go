// Package mcp reads Model Context Protocol traffic over Streamable HTTP strictly, names a tool
// call by what it does, and rewrites or refuses answers, as pure transforms over bytes.
package mcp

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The limits of what Parse reads. A body past one of them is a finding, never read further.
const (
	// MaxBody is the largest request body Parse reads, in bytes; the gate's buffer_limit,
	// smaller by default, applies first.
	MaxBody = 8 << 20
	// MaxDepth is the deepest nesting of objects and arrays, the batch array counted.
	MaxDepth = 128
	// MaxBatch is the most messages one batch may hold.
	MaxBatch = 256
	// MaxName is the longest method, tool name or resource URI, in bytes.
	MaxName = 1024
	// MaxURI is the longest resource URI (resources/read), in bytes: the most the 2026-07-28
	// revision lets a client mirror into a header.
	MaxURI = 8192
	// MaxID is the longest id, in bytes as written.
	MaxID = 256
	// MaxFindings is the most findings one body or answer reports; reading goes on past it.
	MaxFindings = 16
)

// Kind is what one JSON-RPC message is.
type Kind uint8

const (
	Invalid      Kind = iota // not a message that can be read one way only: see the findings
	Request                  // a method and an id: an answer is due
	Notification             // a method and no id
	Response                 // a result or an error for an id: the client answers the server
)

var kindNames = [...]string{"invalid", "request", "notification", "response"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// ID is a JSON-RPC id as written in the body: the text of a JSON string (quotes included) or
// number; nil when there is none. A refusal echoes it as written, so the client matches it.
type ID []byte

// Key is the id in canonical JSON: two ids that are the same JSON value have the same key.
func (id ID) Key() string {
	if id == nil {
		return ""
	}
	c, _, err := canonical(id)
	if err != nil {
		return string(id)
	}
	return string(c)
}

// Message is one JSON-RPC message of a request body.
type Message struct {
	Kind Kind
	ID   ID
	// Method is the method, unescaped; empty when absent or not a string.
	Method string
	// Target is what the method acts on, the value the Mcp-Name header mirrors: the tool's name
	// for tools/call, the prompt's for prompts/get, the URI for resources/read. HasTarget is
	// false for other methods, and when the value is absent or not a string.
	Target    string
	HasTarget bool
	// Arguments is the canonical JSON of params.arguments; nil when absent.
	Arguments []byte
	// Rest is the canonical JSON of the other members of params: params without _meta,
	// arguments and the member Target came from. nil when there are no params.
	Rest []byte
	// Ambiguous: a finding names this message (or the body as a whole).
	Ambiguous bool
}

// Body is a request body as Parse read it.
type Body struct {
	Batch    bool      // the body is an array of messages
	Messages []Message // in the body's order; what could be read before a body-wide finding
	// Findings is every reason the body is not one unambiguous MCP message or batch (at most
	// MaxFindings); empty when it is.
	Findings []Finding
}

// Ambiguous reports whether the body has a finding: its calls ask, shown in red, never free.
func (b *Body) Ambiguous() bool { return len(b.Findings) > 0 }

// Finding is one reason a body, a message or a header is not what the gate can decide on.
type Finding struct {
	// Message is the index of the message in the body (0 when not a batch), or -1 for the body
	// as a whole.
	Message int
	// Refuse: a header contradicts the body. The request is refused, not asked: no human
	// reading the ticket can tell which of the two a server acts on.
	Refuse bool
	// Text says what was found and where, with anything from the request quoted by floor.Shown.
	Text string
}

// oddRune reports whether r is a character no method, tool name or envelope key holds: a
// control, a format character (zero-width, bidi, tag characters, the byte-order mark) or a
// line or paragraph separator.
func oddRune(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029' || r == utf8.RuneError
}

// hasOdd reports whether s holds an odd character (oddRune).
func hasOdd(s string) bool {
	for _, r := range s {
		if oddRune(r) {
			return true
		}
	}
	return false
}

// trimmedDiffers reports whether s begins or ends with white space.
func trimmedDiffers(s string) bool { return strings.TrimSpace(s) != s }
