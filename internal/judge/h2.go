package judge

import "github.com/lockhttp/lockhttp/internal/framing"

// What the HTTP/2 server inside a decrypted tunnel refuses by itself, before the gate's handler
// sees a request: the gate learns of it from the connection's frames, and records it as a
// framing refusal of the stream, or of the connection when the server closed it. The agent has
// had the server's answer already (a reset, a 400 or 431, a GOAWAY); the decision is for the
// audit, through the one Decide like every other (it names the container, or refuses the source).
const (
	// H2Stream is a stream the HTTP/2 server reset or answered itself (rule framing:h2-stream);
	// also a stream whose header block did not end where the gate marked it.
	H2Stream framing.Kind = "h2-stream"
	// H2Connection is a connection the HTTP/2 server closed with an error, or on which it
	// refused more streams than have records of their own (rule framing:h2-connection).
	H2Connection framing.Kind = "h2-connection"
)

// H2Refused is the framing refusal of kind (H2Stream or H2Connection) for Arrival.Framing; why
// says what the server did, in words.
func H2Refused(kind framing.Kind, why string) *framing.Error {
	return &framing.Error{Kind: kind, Reason: why}
}
