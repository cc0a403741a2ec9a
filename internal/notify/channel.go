package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockhttp/lockhttp/internal/display"
	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/metrics"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/secrets"
)

// channel is one [[notify]] channel's queue and workers.
type channel struct {
	n     *Notifier
	name  string
	cfg   atomic.Pointer[policy.Notify] // the policy's latest word on it
	queue chan hub.Ticket
	stop  context.CancelFunc

	mu        sync.Mutex
	delivered int64     // guarded by mu
	failed    int64     // guarded by mu
	dropped   int64     // guarded by mu
	lastOK    time.Time // guarded by mu
	lastFail  time.Time // guarded by mu
	lastErr   string    // guarded by mu
}

func newChannel(ctx context.Context, n *Notifier, name string) *channel {
	ctx, cancel := context.WithCancel(ctx)
	c := &channel{n: n, name: name, queue: make(chan hub.Ticket, queueSize), stop: cancel}
	for i := 0; i < workers; i++ {
		go c.work(ctx)
	}
	return c
}

func (c *channel) set(cfg policy.Notify) { c.cfg.Store(&cfg) }

func (c *channel) close() { c.stop() }

// enqueue queues t, or drops it when the queue is full: the caller never waits.
func (c *channel) enqueue(t hub.Ticket) {
	select {
	case c.queue <- t:
		c.n.cfg.Metrics.Queued(c.name, len(c.queue))
	default:
		c.outcome(metrics.DeliveryDropped, fmt.Errorf("the channel's queue is full (%d notifications): its receiver is slow or down", queueSize))
	}
}

func (c *channel) work(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case t := <-c.queue:
			c.n.cfg.Metrics.Queued(c.name, len(c.queue))
			c.deliver(ctx, t)
		}
	}
}

// deliver POSTs t's notification, retrying with backoff up to Attempts times while the ticket
// is pending.
func (c *channel) deliver(ctx context.Context, t hub.Ticket) {
	wait := c.n.cfg.Backoff
	var err error
	for attempt := 1; attempt <= c.n.cfg.Attempts; attempt++ {
		cfg, ok := c.n.channelConfig(c.name)
		if !ok {
			c.outcome(metrics.DeliveryDropped, fmt.Errorf("the channel left the policy before delivery"))
			return
		}
		if err = c.post(ctx, cfg, t); err == nil {
			c.n.cfg.Metrics.Attempted(c.name, true)
			c.outcome(metrics.DeliveryDelivered, nil)
			return
		}
		c.n.cfg.Metrics.Attempted(c.name, false)
		c.n.log.Warn("notify: delivery failed", "channel", c.name, "ticket", t.ID, "attempt", attempt, "err", err.Error())
		if attempt == c.n.cfg.Attempts {
			break
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		wait *= 2
		if cur, ok := c.n.cfg.Hub.Get(t.ID); !ok || cur.Status != hub.Pending {
			c.outcome(metrics.DeliveryDropped, fmt.Errorf("ticket %s closed before its notification was delivered (last error: %v)", t.ID, err))
			return
		}
	}
	c.outcome(metrics.DeliveryFailed, err)
}

// outcome records one notification's end.
func (c *channel) outcome(outcome string, err error) {
	c.n.cfg.Metrics.Delivered(c.name, outcome)
	now := c.n.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	switch outcome {
	case metrics.DeliveryDelivered:
		c.delivered++
		c.lastOK = now
		return
	case metrics.DeliveryFailed:
		c.failed++
	case metrics.DeliveryDropped:
		c.dropped++
	}
	c.lastFail, c.lastErr = now, display.Line(err.Error(), 300)
}

func (c *channel) status(st *ChannelStatus) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st.Delivered, st.Failed, st.Dropped, st.Queued = c.delivered, c.failed, c.dropped, len(c.queue)
	st.LastOK, st.LastFail, st.LastError = c.lastOK, c.lastFail, c.lastErr
}

// maxAnswer bounds how much of a receiver's answer is read (and thrown away).
const maxAnswer = 64 << 10

// post sends one attempt.
func (c *channel) post(ctx context.Context, cfg policy.Notify, t hub.Ticket) error {
	body, header := c.n.message(cfg, t)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cfg.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("the channel's url: %s", cause(err))
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("User-Agent", "lockhttp-notify/1")
	if cfg.TokenFile != "" {
		tok, err := readToken(cfg.TokenFile)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := c.n.client.Do(req)
	if err != nil {
		return fmt.Errorf("%s", cause(err))
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswer))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("the receiver answered %s", display.Line(resp.Status, 80))
	}
	return nil
}

// Webhook is the JSON object a webhook channel receives for each new ticket. Every text field
// is escaped (display.Escape) and the body preview masked: never the raw request.
type Webhook struct {
	Ticket      string `json:"ticket"`
	Fingerprint string `json:"fingerprint"`
	// DecisionURL decides the ticket: POST it {"decision":"approve"|"deny","fingerprint",
	// "reason"}. Empty on a channel that only notifies.
	DecisionURL string    `json:"decision_url"`
	Expires     time.Time `json:"expires"`
	Created     time.Time `json:"created"`
	// Again is true for a ticket opened before the console last started: the hub reloaded it
	// and it still waits for a human; the channel may have had a notification of it before the
	// restart. The link decides it all the same (its token is the hub key's, kept across
	// restarts).
	Again       bool   `json:"again,omitempty"`
	Channel     string `json:"channel"`
	Human       bool   `json:"human"`
	Kind        string `json:"kind"`
	Method      string `json:"method"`
	URL         string `json:"url"`
	Container   string `json:"container"`
	Agent       string `json:"agent,omitempty"`
	Rule        string `json:"rule"`
	Why         string `json:"why"`
	Warning     string `json:"warning,omitempty"`
	BodyPreview string `json:"body_preview,omitempty"`
	BodySize    int64  `json:"body_size"`
}

// previewBytes bounds a notification's body preview.
const previewBytes = 1 << 10

// show is t as a notification shows it.
func (n *Notifier) show(cfg policy.Notify, t hub.Ticket) Webhook {
	id, fp := t.ID, t.Fingerprint
	e := t.Escaped()
	w := Webhook{Ticket: e.ID, Fingerprint: e.Fingerprint, Expires: t.Expires.UTC(), Created: t.Created.UTC(), Channel: cfg.Name, Human: cfg.Human,
		Kind: e.Kind, Method: e.Method, URL: e.URL, Container: e.Container, Agent: e.Agent, Rule: e.Rule, Why: e.Reason, Warning: e.Warning,
		BodySize: t.BodySize, Again: t.Created.Before(n.started)}
	// The gate masked the preview with the policy's detector; the built-in shapes are masked
	// again here, and it is cut short: a notification leaves the machine.
	w.BodyPreview = display.Escape(display.Truncate(secrets.MaskText(t.BodyPreview), previewBytes), true)
	w.URL = display.Escape(maskURL(t.URL), false)
	if cfg.Human && t.Kind != hub.KindRule { // a rule an agent asks for is answered at the console's terminal alone
		w.DecisionURL = n.DecisionURL(cfg.Name, id)
	}
	w.Fingerprint = display.Escape(fp, false)
	return w
}

// message is the body and headers of t's notification on cfg.
func (n *Notifier) message(cfg policy.Notify, t hub.Ticket) ([]byte, http.Header) {
	w := n.show(cfg, t)
	h := http.Header{}
	if cfg.Kind == policy.NotifyWebhook {
		b, _ := json.Marshal(w)
		h.Set("Content-Type", "application/json")
		return b, h
	}
	// ntfy: a short message, a title, and for a human channel the two buttons that POST the
	// decision. Header values are the gate's and the hub's own words (ids, the link, the
	// fingerprint), never the request's.
	var b strings.Builder
	if w.Again {
		b.WriteString("Still waiting after a console restart:\n")
	}
	fmt.Fprintf(&b, "%s %s from %s (rule %s)\n", w.Method, w.URL, w.Container, w.Rule)
	if w.Why != "" {
		fmt.Fprintf(&b, "Why: %s\n", w.Why)
	}
	if w.Warning != "" {
		fmt.Fprintf(&b, "Warning: %s\n", w.Warning)
	}
	fmt.Fprintf(&b, "Ticket %s, expires %s\n", w.Ticket, w.Expires.Format(time.DateTime+" UTC"))
	if w.DecisionURL != "" {
		fmt.Fprintf(&b, "Decide: POST %s with {\"decision\":\"approve\" or \"deny\",\"fingerprint\":%q}\n", w.DecisionURL, w.Fingerprint)
		action := func(label, decision string) string {
			return fmt.Sprintf("http, %s, %s, method=POST, headers.Content-Type=application/json, body='{\"decision\":\"%s\",\"fingerprint\":\"%s\"}', clear=true",
				label, w.DecisionURL, decision, headerSafe(w.Fingerprint))
		}
		h.Set("Actions", action("Approve", "approve")+"; "+action("Deny", "deny"))
	} else {
		b.WriteString("Decide on the terminal, with lox approve/deny, or on the phone page.\n")
	}
	h.Set("Title", "lockhttp: a request waits for a human ("+headerSafe(w.Ticket)+")")
	h.Set("Tags", "lock")
	h.Set("Content-Type", "text/plain; charset=utf-8")
	return []byte(b.String()), h
}

// headerSafe keeps the characters of an id or a fingerprint that may stand in a header and in
// ntfy's action syntax.
func headerSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == ':' || r == '-' || r == '_' || r == '.' {
			return r
		}
		return -1
	}, s)
}

// maskURL masks the credentials of a ticket's URL (as the gate did already) with the built-in
// shapes: in its query, its path and its host.
func maskURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.Host != "" {
		return secrets.MaskURL(u)
	}
	return secrets.MaskText(s)
}

// maxToken bounds the read of a channel's token file.
const maxToken = 4 << 10

// readToken reads a channel's access token from path: one line of printable ASCII without
// spaces. Errors name the file and what is wrong, never the file's content.
func readToken(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("token_file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxToken+1))
	if err != nil {
		return "", fmt.Errorf("token_file %s: %w", path, err)
	}
	if len(data) > maxToken {
		return "", fmt.Errorf("token_file %s holds more than %d bytes: give a file with the access token alone", path, maxToken)
	}
	tok := strings.TrimSpace(string(data))
	if tok == "" {
		return "", fmt.Errorf("token_file %s is empty: put the receiver's access token in it", path)
	}
	for i := 0; i < len(tok); i++ {
		if tok[i] <= ' ' || tok[i] >= 0x7f {
			return "", fmt.Errorf("token_file %s holds something other than one token (white space, a control or a non-ASCII character at byte %d): give the token alone, on one line", path, i)
		}
	}
	return tok, nil
}
