package hubclient

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/lockhttp/lockhttp/internal/hubapi"
)

// Facade is a facade's client of the hub (lox tickets, approve, deny).
type Facade struct {
	c *Client
}

// NewFacade returns a facade client for the hub at base with a facade token.
func NewFacade(base, token string) *Facade {
	return &Facade{c: &Client{base: strings.TrimSuffix(base, "/"), token: token,
		http: &http.Client{Timeout: 10 * time.Second}}}
}

// NewFacadeTLS returns a facade client for the hub at base (https://host:port, the console's
// -hub-tls-listen) over mutual TLS with cfg: the facade's certificate names it, no token.
func NewFacadeTLS(base string, cfg *tls.Config) (*Facade, error) {
	if err := checkTLSBase(base); err != nil {
		return nil, err
	}
	return &Facade{c: &Client{base: strings.TrimSuffix(base, "/"),
		http: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil, TLSClientConfig: cfg,
			TLSHandshakeTimeout: 10 * time.Second, MaxIdleConns: 2, IdleConnTimeout: 30 * time.Second}}}}, nil
}

// Pending lists the pending tickets, newest first.
func (f *Facade) Pending(ctx context.Context) ([]hubapi.Ticket, error) {
	out := []hubapi.Ticket{} // none is an empty list, as the hub answers it
	cursor := ""
	for {
		var page []hubapi.Ticket
		path := "/v1/tickets?limit=" + strconv.Itoa(hubapi.MaxPage)
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		h, err := f.c.callHeader(ctx, "GET", path, nil, &page)
		if err != nil {
			return out, err
		}
		out = append(out, page...)
		next := h.Get(hubapi.HeaderNext)
		if next == "" || next == cursor || len(out) >= maxPending {
			return out, nil
		}
		cursor = next
	}
}

// maxPending bounds the tickets Pending reads, page by page (the hub keeps at most 5,000).
const maxPending = 10000

// Get reads one ticket.
func (f *Facade) Get(ctx context.Context, id string) (hubapi.Ticket, error) {
	var t hubapi.Ticket
	err := f.c.call(ctx, "GET", "/v1/tickets/"+id, nil, &t)
	return t, err
}

// Decide approves or denies ticket id as shown with fingerprint; by names the person.
func (f *Facade) Decide(ctx context.Context, id, fingerprint string, approve bool, by, reason string) (hubapi.Ticket, error) {
	verb := "deny"
	if approve {
		verb = "approve"
	}
	var t hubapi.Ticket
	err := f.c.call(ctx, "POST", "/v1/tickets/"+id+"/"+verb, hubapi.DecideRequest{Fingerprint: fingerprint, By: by, Reason: reason}, &t)
	return t, err
}

// PhonePairing asks the hub's host for a phone pairing link (single use, 10 minutes).
func (f *Facade) PhonePairing(ctx context.Context) (string, error) {
	var out struct {
		URL string `json:"url"`
	}
	err := f.c.call(ctx, "POST", "/v1/phone-pairing", nil, &out)
	if err != nil {
		var se *StatusError
		if errors.As(err, &se) && se.Status == 404 {
			return "", errors.New("the phone page is not enabled on this hub (console -phone-url)")
		}
	}
	return out.URL, err
}
