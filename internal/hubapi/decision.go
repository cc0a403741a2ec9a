package hubapi

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// SignedDecision is a decision as the gate receives it: bound to the ticket and the
// fingerprint the human was shown, signed by the hub's Ed25519 key.
type SignedDecision struct {
	Ticket      string    `json:"ticket"`
	Fingerprint string    `json:"fingerprint"`
	Verdict     Status    `json:"verdict"`
	By          string    `json:"by"`
	Reason      string    `json:"reason,omitempty"`
	At          time.Time `json:"at"`
	Signature   []byte    `json:"signature"`
}

// Payload is the signed bytes: every field but the signature, in a fixed order.
func (d *SignedDecision) Payload() []byte {
	b, _ := json.Marshal(struct {
		Ticket, Fingerprint string
		Verdict             Status
		By, Reason          string
		At                  int64
	}{d.Ticket, d.Fingerprint, d.Verdict, d.By, d.Reason, d.At.UnixNano()})
	return append([]byte("lockhttp hub decision v1\n"), b...)
}

// Verify checks the signature with the hub's public key and that the decision is about the
// ticket and the fingerprint the gate asked for.
func (d *SignedDecision) Verify(pub ed25519.PublicKey, ticket, fingerprint string) error {
	if len(pub) != ed25519.PublicKeySize || !ed25519.Verify(pub, d.Payload(), d.Signature) {
		return errors.New("hub decision: bad signature (is the gate configured with this hub's public key?)")
	}
	if d.Ticket != ticket || d.Fingerprint != fingerprint {
		return fmt.Errorf("hub decision is for ticket %s with another fingerprint than the request's", d.Ticket)
	}
	return nil
}
