// Package notify tells the policy's [[notify]] channels of every new ticket, and takes a human
// channel's decisions through the link each notification carries.
package notify

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/lockhttp/lockhttp/internal/consoleapi"
	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/metrics"
	"github.com/lockhttp/lockhttp/internal/policy"
)

// Defaults of Config's zero values.
const (
	DefaultTimeout  = 5 * time.Second
	DefaultBackoff  = time.Second
	DefaultAttempts = 5
	// queueSize bounds the notifications waiting for one channel; past it they are dropped
	// (counted): a dead receiver holds a bounded amount of memory.
	queueSize = 64
	// workers is how many notifications one channel sends at once.
	workers = 2
)

// Config is what a Notifier needs.
type Config struct {
	Hub *hub.Hub
	// Channels returns the approved policy's channels; it is read for every ticket and every
	// decision, so that an approved edit applies at once.
	Channels func() []policy.Notify
	// PublicURL is the hub's URL as receivers reach it (http(s)://host[:port]): decision links
	// start with it.
	PublicURL string
	// Key signs the links (hub.NotifyKey).
	Key []byte
	// Client sends the notifications. Nil: a client of its own, DefaultTimeout per attempt,
	// no redirects followed, no proxy from the environment.
	Client *http.Client
	Log    *slog.Logger
	// Metrics counts deliveries and decisions. Nil: nothing counted.
	Metrics *metrics.Notify
	Now     func() time.Time
	// Backoff is the wait before the first retry; each retry waits twice as long. Zero:
	// DefaultBackoff. Attempts bounds the POSTs of one notification. Zero: DefaultAttempts.
	Backoff  time.Duration
	Attempts int
}

// Notifier delivers notifications and serves decision links.
type Notifier struct {
	cfg    Config
	log    *slog.Logger
	now    func() time.Time
	client *http.Client

	// started is when this Notifier was made: a pending ticket created before it is one the hub
	// reloaded from its state file after a restart (Webhook.Again).
	started time.Time

	mu       sync.Mutex
	channels map[string]*channel  // guarded by mu: every channel seen, by name
	seen     map[string]time.Time // guarded by mu: tickets notified → their expiry
}

// New returns a Notifier; Run delivers.
func New(cfg Config) *Notifier {
	n := &Notifier{cfg: cfg, log: cfg.Log, now: cfg.Now, client: cfg.Client, channels: map[string]*channel{}, seen: map[string]time.Time{}}
	if n.log == nil {
		n.log = slog.New(slog.DiscardHandler)
	}
	if n.now == nil {
		n.now = time.Now
	}
	n.started = n.now()
	if n.client == nil {
		n.client = &http.Client{
			Timeout:   DefaultTimeout,
			Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: workers, IdleConnTimeout: 90 * time.Second, TLSHandshakeTimeout: DefaultTimeout},
			// A redirect would send the ticket somewhere the operator did not name.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	if n.cfg.Backoff <= 0 {
		n.cfg.Backoff = DefaultBackoff
	}
	if n.cfg.Attempts <= 0 {
		n.cfg.Attempts = DefaultAttempts
	}
	n.cfg.PublicURL = strings.TrimSuffix(n.cfg.PublicURL, "/")
	return n
}

// Token is the token of the decision link of ticket on channel: an HMAC under the hub's key, so
// a leaked link decides that ticket on that channel and nothing else.
func Token(key []byte, channel, ticket string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("lockhttp notify v1\x00" + channel + "\x00" + ticket))
	return hex.EncodeToString(m.Sum(nil))
}

// LinkPrefix is the path decision links start with: LinkPrefix + channel/ticket/token.
const LinkPrefix = "/v1/notify/"

// DecisionURL is the decision link of ticket on channel.
func (n *Notifier) DecisionURL(channel, ticket string) string {
	return n.cfg.PublicURL + LinkPrefix + url.PathEscape(channel) + "/" + url.PathEscape(ticket) + "/" + Token(n.cfg.Key, channel, ticket)
}

// Run delivers a notification to every channel for each new ticket until ctx ends, and, when
// it starts, for each ticket still pending that the hub reloaded after a restart: a request
// waiting for a human reaches the channels again, once per start of the console, with a link
// that works (the link's token is the hub key's, which the restart kept). A receiver that is
// slow or dead holds its own channel's workers only: the hub, the gate and the other channels
// never wait on it.
func (n *Notifier) Run(ctx context.Context) {
	for ctx.Err() == nil {
		ch, cancel := n.cfg.Hub.Subscribe()
		// Tickets opened while no subscription was listening (the ones reloaded from the state
		// file, or opened while one fell behind) are read from the pending list.
		for _, t := range n.cfg.Hub.Pending() {
			n.ticket(ctx, t)
		}
		n.listen(ctx, ch)
		cancel()
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, c := range n.channels {
		c.close()
	}
}

func (n *Notifier) listen(ctx context.Context, ch <-chan hub.Event) {
	prune := time.NewTicker(time.Minute)
	defer prune.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-prune.C:
			n.prune()
		case ev, ok := <-ch:
			if !ok {
				return // fell behind: subscribe again
			}
			if ev.Type == "ticket" && ev.Ticket != nil && ev.Ticket.Status == hub.Pending {
				n.ticket(ctx, *ev.Ticket)
			}
		}
	}
}

// ticket queues t's notification on every channel, once per ticket and Notifier (so once per
// start of the console).
func (n *Notifier) ticket(ctx context.Context, t hub.Ticket) {
	if !n.now().Before(t.Expires) {
		return
	}
	chans := n.cfg.Channels()
	n.mu.Lock()
	if _, done := n.seen[t.ID]; done {
		n.mu.Unlock()
		return
	}
	n.seen[t.ID] = t.Expires
	n.mu.Unlock()
	// Of the hubs sharing a database, one sends each ticket's notifications.
	if !n.cfg.Hub.Notify(t.ID) {
		return
	}
	n.mu.Lock()
	var targets []*channel
	for _, cfg := range chans {
		c := n.channels[cfg.Name]
		if c == nil {
			c = newChannel(ctx, n, cfg.Name)
			n.channels[cfg.Name] = c
		}
		targets = append(targets, c)
		c.set(cfg)
	}
	n.mu.Unlock()
	for _, c := range targets {
		c.enqueue(t)
	}
}

// prune forgets the notified tickets that expired.
func (n *Notifier) prune() {
	now := n.now()
	n.mu.Lock()
	defer n.mu.Unlock()
	for id, exp := range n.seen {
		if now.After(exp) {
			delete(n.seen, id)
		}
	}
}

// channelConfig is the current policy's channel named name, if any.
func (n *Notifier) channelConfig(name string) (policy.Notify, bool) {
	for _, c := range n.cfg.Channels() {
		if c.Name == name {
			return c, true
		}
	}
	return policy.Notify{}, false
}

// Status is every channel of the approved policy with its deliveries, for the doctor.
func (n *Notifier) Status() []ChannelStatus {
	var out []ChannelStatus
	for _, cfg := range n.cfg.Channels() {
		n.mu.Lock()
		c := n.channels[cfg.Name]
		n.mu.Unlock()
		st := ChannelStatus{Name: cfg.Name, Kind: cfg.Kind, Human: cfg.Human, Host: hostOf(cfg.URL)}
		if c != nil {
			c.status(&st)
		}
		out = append(out, st)
	}
	return out
}

// ChannelStatus is one channel as the console's /status reports it (consoleapi.ChannelStatus).
type ChannelStatus = consoleapi.ChannelStatus

func hostOf(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return ""
	}
	return u.Host
}

// cause is err without the URL net/http wraps it in (the URL's path may be a secret).
func cause(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return err.Error()
}
