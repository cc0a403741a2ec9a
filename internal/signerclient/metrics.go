package signerclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

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

// maxMetricsPage bounds the signer's metrics page (a few kilobytes in practice).
const maxMetricsPage = 1 << 20

// Metrics returns the signer's GET /metrics page in Prometheus's text format: the families it
// counts, read over its socket for a signer that has no network of its own (the gate serves them
// with its own, metrics.ImportSigner). Failures wrap ErrUnavailable.
func (c *Client) Metrics(ctx context.Context) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+metrics.Path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, c.unreachable(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxMetricsPage+1))
	if err != nil {
		return nil, c.unreachable(err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, c.badStatus(resp, data)
	}
	if len(data) > maxMetricsPage {
		return nil, fmt.Errorf("%w: signer at %s: its metrics page is over %d bytes", ErrUnavailable, c.socket, maxMetricsPage)
	}
	return data, nil
}
