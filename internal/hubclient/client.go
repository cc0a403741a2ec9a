// Package hubclient is the gate's side of the hub: it asks about held requests, waits for their
// decisions on one event stream, and verifies every decision's signature.
package hubclient

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockhttp/lockhttp/internal/hubapi"
)

// callTimeout bounds one call to the hub (not the event stream).
const callTimeout = 5 * time.Second

// Client talks to one hub.
type Client struct {
	base  string
	token string
	// gate names this gate to the hub (hubapi.HeaderGate): new at every start.
	gate string
	http *http.Client
	log  *slog.Logger
	// key returns the hub's public key; it is read until it succeeds (the hub writes it on its
	// first start, which may come after the gate's).
	key func() (ed25519.PublicKey, error)
	pub atomic.Pointer[ed25519.PublicKey]

	connected atomic.Bool

	mu      sync.Mutex
	waiters map[string]map[chan hubapi.Ticket]struct{} // guarded by mu: ticket id → waiting requests

	hmu   sync.Mutex
	holds holds // guarded by hmu: the requests held on tickets, for the hub's counts
}

// New returns a client for the hub at base (http://host:port) with the gate's token; pub is the
// hub's public key, which every decision must verify against.
func New(base, token string, pub ed25519.PublicKey, log *slog.Logger) *Client {
	return NewWithKey(base, token, func() (ed25519.PublicKey, error) { return pub, nil }, log)
}

// NewWithKey is New with the key read by key, until it succeeds: until then the client does not
// connect, and every ASK is refused.
func NewWithKey(base, token string, key func() (ed25519.PublicKey, error), log *slog.Logger) *Client {
	return newClient(base, token, nil, key, log)
}

// NewTLS is NewWithKey for a hub reached over mutual TLS (base https://host:port, the console's
// -hub-tls-listen): the gate's certificate (cfg, mtls.Source.ClientConfig) names it, no token.
func NewTLS(base string, cfg *tls.Config, key func() (ed25519.PublicKey, error), log *slog.Logger) (*Client, error) {
	if err := checkTLSBase(base); err != nil {
		return nil, err
	}
	return newClient(base, "", cfg, key, log), nil
}

// checkTLSBase checks a hub's URL for mutual TLS.
func checkTLSBase(base string) error {
	u, err := url.Parse(base)
	if err != nil || u.Scheme != "https" || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return fmt.Errorf("hub URL %q: write https://HOST:PORT (the console's -hub-tls-listen)", base)
	}
	return nil
}

func newClient(base, token string, cfg *tls.Config, key func() (ed25519.PublicKey, error), log *slog.Logger) *Client {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var name [8]byte
	rand.Read(name[:])
	return &Client{
		base: strings.TrimSuffix(base, "/"), token: token, key: key, log: log, gate: "g" + hex.EncodeToString(name[:]),
		http: &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: maxConns, MaxConnsPerHost: maxConns,
			IdleConnTimeout: 90 * time.Second, TLSClientConfig: cfg, TLSHandshakeTimeout: 10 * time.Second}},
		waiters: map[string]map[chan hubapi.Ticket]struct{}{},
		holds:   newHolds(),
	}
}

// authorize sets the token on req, when the client has one (over mutual TLS the certificate
// names the caller).
func (c *Client) authorize(req *http.Request) {
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
}

// maxConns bounds the connections to the hub: half of what the hub holds from one peer before
// a request on them carried a token (hubapi.MaxProbationPerPeer), so that a burst of asks waits
// for a connection rather than opening more than the hub keeps, which closes the oldest.
const maxConns = hubapi.MaxProbationPerPeer / 2

func (c *Client) pubKey() ed25519.PublicKey {
	if p := c.pub.Load(); p != nil {
		return *p
	}
	return nil
}

// Connected reports whether the event stream is up: without it the gate treats the hub as
// absent.
func (c *Client) Connected() bool { return c.connected.Load() }

func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	_, err := c.callHeader(ctx, method, path, in, out)
	return err
}

// callHeader is call, returning the answer's header.
func (c *Client) callHeader(ctx context.Context, method, path string, in, out any) (http.Header, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	c.authorize(req)
	req.Header.Set(hubapi.HeaderGate, c.gate)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("hub %s: %w", c.base, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if resp.StatusCode >= 300 {
		var e hubapi.ErrorResponse
		json.Unmarshal(data, &e)
		return resp.Header, &StatusError{Status: resp.StatusCode, Msg: e.Error}
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.Header, fmt.Errorf("hub %s: bad answer: %w", c.base, err)
		}
	}
	return resp.Header, nil
}

// StatusError is an answer of the hub that is not a success.
type StatusError struct {
	Status int
	Msg    string
}

func (e *StatusError) Error() string { return fmt.Sprintf("hub answered %d: %s", e.Status, e.Msg) }

// Ask sends a request the policy asks about. An answer carrying a decision is verified. An
// answer pending holds the request on the ticket until Claim or Leave, or until Wait returns the
// ticket expired.
func (c *Client) Ask(ctx context.Context, req hubapi.AskRequest) (hubapi.AskAnswer, error) {
	var ans hubapi.AskAnswer
	c.askStart(req.Fingerprint)
	err := c.call(ctx, "POST", "/v1/gate/ask", req, &ans)
	heldOn := ""
	if err == nil && ans.Outcome == hubapi.OutcomePending {
		heldOn = ans.Ticket.ID
	}
	c.askDone(req.Fingerprint, heldOn)
	if err != nil {
		return ans, err
	}
	if ans.Signed != nil {
		if err := ans.Signed.Verify(c.pubKey(), ans.Ticket.ID, req.Fingerprint); err != nil {
			return ans, err
		}
	} else if ans.Outcome == hubapi.OutcomeApproved || ans.Outcome == hubapi.OutcomeDenied {
		return ans, errors.New("hub answered a decision without its signature")
	}
	return ans, nil
}

// claimPatience bounds how long a claim is tried again while the hub does not answer (a hub
// restarting, or a replica killed as it answered).
const claimPatience = 30 * time.Second

// Claim takes the decision of a ticket a request was held on; it is verified. The claim has a
// key of its own (hubapi.ClaimRequest.Key): while the hub does not answer it is sent again,
// for claimPatience at most, and a hub that took it already answers without spending another
// use.
func (c *Client) Claim(ctx context.Context, id, fingerprint string) (*hubapi.SignedDecision, error) {
	var d hubapi.SignedDecision
	var k [12]byte
	rand.Read(k[:])
	req := hubapi.ClaimRequest{ID: id, Fingerprint: fingerprint, Key: hex.EncodeToString(k[:])}
	c.releaseStart(id)
	deadline := time.Now().Add(claimPatience)
	backoff := 100 * time.Millisecond
	var err error
	for {
		err = c.call(ctx, "POST", "/v1/gate/claim", req, &d)
		var se *StatusError
		if err == nil || errors.As(err, &se) || ctx.Err() != nil || time.Now().Add(backoff).After(deadline) {
			break
		}
		c.log.Warn("hub: claim not answered; sending it again", "ticket", id, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
	c.releaseDone(id)
	if err != nil {
		return nil, err
	}
	if err := d.Verify(c.pubKey(), id, fingerprint); err != nil {
		return nil, err
	}
	return &d, nil
}

// Leave tells the hub a held request stopped waiting.
func (c *Client) Leave(id string) { c.leave(id, false) }

// LeaveCut tells the hub a held request stopped waiting because the gate stops: the ticket
// counts it as cut by a restart.
func (c *Client) LeaveCut(id string) { c.leave(id, true) }

func (c *Client) leave(id string, cut bool) {
	c.releaseStart(id)
	err := c.call(context.Background(), "POST", "/v1/gate/leave", hubapi.LeaveRequest{ID: id, Cut: cut}, nil)
	c.releaseDone(id)
	if err != nil {
		c.log.Warn("hub: leave failed; the next report of the held requests corrects the count", "ticket", id, "cut", cut, "err", err)
	}
}

// BindIssued has the hub bind a Claude login the gate saw issued to a container (hubapi.Issued).
func (c *Client) BindIssued(ctx context.Context, i hubapi.Issued) error {
	return c.call(ctx, "POST", "/v1/gate/issued", i, nil)
}

// ReportState tells the hub the gate's state.
func (c *Client) ReportState(ctx context.Context, s hubapi.GateState) error {
	return c.call(ctx, "POST", "/v1/gate/state", s, nil)
}

// Wait waits until ticket id is no longer pending and returns it, or until ctx ends.
func (c *Client) Wait(ctx context.Context, id string) (hubapi.Ticket, error) {
	ch := make(chan hubapi.Ticket, 1)
	c.mu.Lock()
	if c.waiters[id] == nil {
		c.waiters[id] = map[chan hubapi.Ticket]struct{}{}
	}
	c.waiters[id][ch] = struct{}{}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.waiters[id], ch)
		if len(c.waiters[id]) == 0 {
			delete(c.waiters, id)
		}
		c.mu.Unlock()
	}()
	// A decision may have come between the ask and this wait: look once.
	var t hubapi.Ticket
	if err := c.call(ctx, "GET", "/v1/gate/tickets/"+id, nil, &t); err == nil && t.Status != hubapi.Pending {
		return c.waited(t), nil
	}
	select {
	case t := <-ch:
		return c.waited(t), nil
	case <-ctx.Done():
		return hubapi.Ticket{}, ctx.Err()
	}
}

// waited ends the hold of a request whose ticket expired: nothing is claimed for it.
func (c *Client) waited(t hubapi.Ticket) hubapi.Ticket {
	if t.Status != hubapi.Approved && t.Status != hubapi.Denied {
		c.release(t.ID)
	}
	return t
}

func (c *Client) notify(t hubapi.Ticket) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for ch := range c.waiters[t.ID] {
		select {
		case ch <- t:
		default:
		}
	}
}

// Run keeps the event stream open until ctx ends, reconnecting with backoff; after a reconnect
// it rereads the tickets requests are waiting on, so that no decision is missed.
func (c *Client) Run(ctx context.Context) {
	backoff := 200 * time.Millisecond
	for ctx.Err() == nil {
		if c.pub.Load() == nil {
			k, err := c.key()
			if err != nil {
				c.log.Warn("hub: no public key yet; ASK requests are refused until there is one", "err", err)
				select {
				case <-ctx.Done():
					return
				case <-time.After(2 * time.Second):
				}
				continue
			}
			c.pub.Store(&k)
		}
		err := c.stream(ctx)
		c.connected.Store(false)
		if ctx.Err() != nil {
			return
		}
		c.log.Warn("hub: event stream lost; ASK requests are refused until it is back", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func (c *Client) stream(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, "GET", c.base+"/v1/gate/events", nil)
	if err != nil {
		return err
	}
	c.authorize(req)
	req.Header.Set(hubapi.HeaderGate, c.gate)
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("hub answered %s to the event stream", resp.Status)
	}
	c.connected.Store(true)
	c.resync(ctx)
	// What the gate holds, now (after a hub restart its counts are zero) and while the stream
	// is up (a leave lost to a stalled hub).
	rctx, stopReports := context.WithCancel(ctx)
	defer stopReports()
	go c.reportHoldings(rctx)
	// A decision whose event this stream never carried (a hub that lost its store's
	// notification, a stream cut between two lines) is found by rereading.
	go c.rereadEvery(rctx)
	// The hub writes a line at least every 15 s: 45 s of silence means it is gone.
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	lines := make(chan []byte)
	errc := make(chan error, 1)
	go func() {
		for {
			line, err := br.ReadBytes('\n')
			if err != nil {
				errc <- err
				return
			}
			select {
			case lines <- line:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-errc:
			return err
		case <-time.After(45 * time.Second):
			return errors.New("hub event stream silent for 45s")
		case line := <-lines:
			line = bytes.TrimSpace(line)
			if len(line) == 0 {
				continue
			}
			var ev hubapi.Event
			if json.Unmarshal(line, &ev) != nil || ev.Ticket == nil {
				continue
			}
			if ev.Type == "decided" || ev.Type == "expired" {
				c.notify(*ev.Ticket)
			}
		}
	}
}

// rereadEvery is how often the gate rereads the tickets its requests wait on while its event
// stream is up.
const rereadEvery = 3 * time.Second

// rereadEvery rereads the tickets requests wait on every rereadEvery until ctx ends.
func (c *Client) rereadEvery(ctx context.Context) {
	t := time.NewTicker(rereadEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.resync(ctx)
		}
	}
}

// resync rereads every ticket a request waits on: hubapi.MaxTicketsAsked of them a call, the hub
// answering the ones no longer pending. A hub that has no such call (an older one) is asked for
// each ticket in turn.
func (c *Client) resync(ctx context.Context) {
	c.mu.Lock()
	ids := make([]string, 0, len(c.waiters))
	for id := range c.waiters {
		ids = append(ids, id)
	}
	c.mu.Unlock()
	for len(ids) > 0 {
		n := min(len(ids), hubapi.MaxTicketsAsked)
		var done []hubapi.Ticket
		err := c.call(ctx, "POST", "/v1/gate/tickets", hubapi.TicketsRequest{IDs: ids[:n]}, &done)
		var se *StatusError
		if errors.As(err, &se) && (se.Status == http.StatusNotFound || se.Status == http.StatusMethodNotAllowed) {
			c.resyncEach(ctx, ids)
			return
		}
		for _, t := range done {
			if t.Status != hubapi.Pending {
				c.notify(t)
			}
		}
		ids = ids[n:]
	}
}

// resyncEach rereads the tickets ids one call each.
func (c *Client) resyncEach(ctx context.Context, ids []string) {
	for _, id := range ids {
		var t hubapi.Ticket
		if err := c.call(ctx, "GET", "/v1/gate/tickets/"+id, nil, &t); err == nil && t.Status != hubapi.Pending {
			c.notify(t)
		}
	}
}
