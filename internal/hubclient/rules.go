package hubclient

import (
	"context"
	"net/url"

	"github.com/lockhttp/lockhttp/internal/hubapi"
)

// AskRule sends an agent's request for a rule (POST /v1/gate/rule) and returns its ticket. A
// refusal (a rule the console's checks refuse, a bound) is a *StatusError whose Msg says why.
func (c *Client) AskRule(ctx context.Context, req hubapi.RuleRequest) (hubapi.Ticket, error) {
	var t hubapi.Ticket
	err := c.call(ctx, "POST", "/v1/gate/rule", req, &t)
	return t, err
}

// Asks lists the tickets of container (GET /v1/gate/asks), newest first.
func (c *Client) Asks(ctx context.Context, container string) ([]hubapi.Ticket, error) {
	var ts []hubapi.Ticket
	err := c.call(ctx, "GET", "/v1/gate/asks?container="+url.QueryEscape(container), nil, &ts)
	return ts, err
}
