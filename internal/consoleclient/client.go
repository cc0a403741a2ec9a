// Package consoleclient fetches the approved policy from the console for the gate: on the
// console's unix socket, or over mutual TLS from another machine.
package consoleclient

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	neturl "net/url"
	"time"

	"github.com/lockhttp/lockhttp/internal/claudeapi"
	"github.com/lockhttp/lockhttp/internal/consoleapi"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/unixsock"
)

// maxResponse bounds a policy response.
const maxResponse = 8 << 20

// Client talks to the console: on its unix socket, or over mutual TLS.
type Client struct {
	socket   string // the socket's path or the console's URL, for errors
	base     string // the URL the routes are under
	http     *http.Client
	instance string // this gate's name over mutual TLS (consoleapi.HeaderGate), or ""
}

// New returns a client for the console socket at path.
func New(path string) *Client {
	return &Client{socket: path, base: "http://console", http: unixsock.Client(path, 5*time.Second)}
}

// NewTLS returns a client for the console at url (https://host:port, its -tls-listen) over
// mutual TLS with cfg (mtls.Source.ClientConfig: the gate's identity, the consoles it admits);
// instance names this gate among those of its identity (consoleapi.HeaderGate: its host name).
func NewTLS(url string, cfg *tls.Config, instance string) (*Client, error) {
	u, err := neturl.Parse(url)
	if err != nil || u.Scheme != "https" || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return nil, fmt.Errorf("console URL %q: write https://HOST:PORT (the console's -tls-listen)", url)
	}
	return &Client{socket: url, base: "https://" + u.Host, instance: instance, http: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		Proxy: nil, TLSClientConfig: cfg, TLSHandshakeTimeout: 5 * time.Second,
		MaxIdleConns: 2, IdleConnTimeout: 30 * time.Second,
	}}}, nil
}

// ErrNotModified is returned by Fetch when the console still serves the version the caller has.
var ErrNotModified = errors.New("policy not modified")

// Fetch gets the served policy; have is the Tag the caller already has ("" for none).
func (c *Client) Fetch(ctx context.Context, have string) (*consoleapi.Served, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/policy", nil)
	if err != nil {
		return nil, err
	}
	if have != "" {
		req.Header.Set("If-None-Match", `"`+have+`"`)
	}
	if c.instance != "" {
		req.Header.Set(consoleapi.HeaderGate, c.instance)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("console at %s: %w", c.socket, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNotModified:
		return nil, ErrNotModified
	case http.StatusOK:
	default:
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("console at %s answered %s: %s", c.socket, resp.Status, msg)
	}
	var s consoleapi.Served
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxResponse)).Decode(&s); err != nil {
		return nil, fmt.Errorf("console at %s: bad policy response: %w", c.socket, err)
	}
	if s.Tag == "" {
		s.Tag = s.Version
	}
	return &s, nil
}

// Poll fetches the policy every interval until ctx ends and hands each new valid version to
// apply. While the console cannot be reached the last good policy stays; a served policy that
// does not compile or whose hash is wrong is refused and logged. report (when not nil) is told
// after every attempt: nil when the console answered well, else the error. A channel received
// from now makes Poll fetch at once; it is closed after that fetch (and apply).
func Poll(ctx context.Context, c *Client, interval time.Duration, log *slog.Logger, apply func(*policy.Policy), report func(error), now <-chan chan struct{}) {
	have := ""
	lastErr := ""
	var waiting []chan struct{}
	for {
		s, err := c.Fetch(ctx, have)
		switch {
		case errors.Is(err, ErrNotModified):
			err = nil
		case err == nil:
			var p *policy.Policy
			p, err = compile(s)
			if err == nil {
				apply(p)
				have = s.Tag
				log.Info("policy applied", "version", s.Version, "tag", s.Tag, "rules", p.RuleCount())
			}
		}
		for _, w := range waiting {
			close(w)
		}
		waiting = waiting[:0]
		if err != nil && err.Error() != lastErr {
			log.Warn("policy fetch failed; keeping the last policy", "err", err, "have", have)
		}
		if err == nil && lastErr != "" {
			log.Info("console reachable again", "version", have)
		}
		if report != nil {
			report(err)
		}
		lastErr = ""
		if err != nil {
			lastErr = err.Error()
		}
		select {
		case <-ctx.Done():
			return
		case w := <-now:
			waiting = append(waiting, w)
		case <-time.After(interval):
		}
	}
}

// Refresher returns a channel for Poll's now and a function that makes Poll fetch at once and
// waits for that fetch, or for ctx.
func Refresher() (chan chan struct{}, func(ctx context.Context)) {
	now := make(chan chan struct{})
	return now, func(ctx context.Context) {
		done := make(chan struct{})
		select {
		case now <- done:
		case <-ctx.Done():
			return
		}
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
}

func compile(s *consoleapi.Served) (*policy.Policy, error) {
	data := []byte(s.TOML)
	if v := policy.Hash(data); v != s.Version {
		return nil, fmt.Errorf("served policy's hash %s does not match its version %s", v, s.Version)
	}
	p, err := policy.Load(s.Name, data)
	if err != nil {
		return nil, err
	}
	for container, hashes := range s.Bound {
		for _, h := range hashes {
			if !claudeapi.IsHash(h) {
				return nil, fmt.Errorf("served policy: a credential bound to %q is not a SHA-256 in lower-case hex", container)
			}
		}
	}
	p.ClaudeBound = s.Bound
	return p, nil
}
