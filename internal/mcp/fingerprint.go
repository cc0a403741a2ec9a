package mcp

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/lockhttp/lockhttp/internal/fingerprint"
)

// CallPrefix starts every call fingerprint; it names the encoding, so that a change of encoding
// can never match an old approval.
const CallPrefix = "mcp1:"

// Call is what a call's fingerprint covers: who calls, which server, and what the server is
// asked to do. The JSON-RPC id and params._meta (progress tokens, trace fields, the client's
// protocol version) are left out: a client gives every retry a new id and new trace fields,
// and neither changes what the server does.
type Call struct {
	Container string // the container that sends the call
	Endpoint  string // the name of the [[mcp]] endpoint it is sent to
	Method    string
	Target    string // the tool (tools/call), prompt (prompts/get) or URI (resources/read)
	HasTarget bool
	Arguments []byte // canonical JSON of params.arguments; nil when absent
	Rest      []byte // canonical JSON of the rest of params (Message.Rest); nil without params
}

// Call is the message as a call from container to endpoint.
func (m *Message) Call(container, endpoint string) Call {
	return Call{Container: container, Endpoint: endpoint, Method: m.Method, Target: m.Target,
		HasTarget: m.HasTarget, Arguments: m.Arguments, Rest: m.Rest}
}

// Fingerprint is "mcp1:" and the hex SHA-256 of a length-prefixed encoding of the call's parts:
// the same call, whatever its id, white space, member order, escapes or number spelling, has
// the same fingerprint; a call with one value changed has another. An absent part and an
// empty one differ (canonical JSON is never empty).
func (c Call) Fingerprint() string {
	h := sha256.New()
	fingerprint.Field(h, "container", c.Container)
	fingerprint.Field(h, "endpoint", c.Endpoint)
	fingerprint.Field(h, "method", c.Method)
	if c.HasTarget {
		fingerprint.Field(h, "target", c.Target)
	} else {
		fingerprint.Field(h, "no-target", "")
	}
	fingerprint.Field(h, "arguments", string(c.Arguments))
	fingerprint.Field(h, "rest", string(c.Rest))
	return CallPrefix + hex.EncodeToString(h.Sum(nil))
}
