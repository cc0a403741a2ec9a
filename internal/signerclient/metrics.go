package signerclient

import (
	"errors"

	"github.com/lockhttp/lockhttp/internal/metrics"
)

// callResult names the outcome of a signer call for lockhttp_gate_signer_calls_total.
func callResult(err error) string {
	var refused *RefusedError
	switch {
	case err == nil:
		return metrics.CallIssued
	case errors.As(err, &refused):
		return metrics.CallRefused
	case errors.Is(err, ErrUnavailable):
		return metrics.CallUnavailable
	}
	return metrics.CallInvalid
}

// Len is how many certificates the cache holds.
func (c *Client) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}
