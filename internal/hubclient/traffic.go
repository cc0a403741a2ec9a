package hubclient

import (
	"context"
	"errors"
	"fmt"

	"github.com/lockhttp/lockhttp/internal/traffic"
)

// SendTraffic gives the hub's host a batch of the gate's decisions, for the terminal. An answer
// 4xx (a host without the route, a batch it will not take) wraps traffic.ErrRefused: sending it
// again would not help.
func (c *Client) SendTraffic(ctx context.Context, b traffic.Batch) error {
	err := c.call(ctx, "POST", "/v1/gate/traffic", b, nil)
	var se *StatusError
	if errors.As(err, &se) && se.Status >= 400 && se.Status < 500 {
		return fmt.Errorf("%w: %v", traffic.ErrRefused, err)
	}
	return err
}
