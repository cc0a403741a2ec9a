package hub

import (
	"crypto/sha256"
)

// NotifyKey is the key of the notification channels' decision links (notify.Token): derived
// from the hub's signing key, so that only the hub has it and links outlive a restart.
func (h *Hub) NotifyKey() []byte {
	sum := sha256.Sum256(append([]byte("lockhttp notify link key v1\n"), h.cfg.Key.Seed()...))
	return sum[:]
}
