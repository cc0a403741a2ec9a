package console

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/claudeapi"
)

// Binding is a Claude credential bound to a container by a human's approval of the ASK about it,
// or a Claude login the gate saw issued to the container (BindIssued): the gate lets the
// container send it without asking. The credential itself is never kept.
type Binding struct {
	Container string    `json:"container"`
	Hash      string    `json:"hash"` // the SHA-256 of the credential, lower-case hex
	By        string    `json:"by"`   // who approved, as the hub names them ("cli:root"); "gate" for an issued login
	Ticket    string    `json:"ticket"`
	At        time.Time `json:"at"`
	// Issued is the host whose OAuth token endpoint issued the login to the container, for a
	// binding the gate made (BindIssued); "" for a human's.
	Issued string `json:"issued,omitempty"`
	// Request is the id of the gate's request whose answer issued the login, with Issued.
	Request string `json:"request,omitempty"`
}

// maxBindings bounds the bindings the console keeps (all containers).
const maxBindings = 1024

// maxIssued bounds the issued logins kept bound to one container: binding one more drops the
// container's oldest issued login (a login is refreshed every few hours, and the one it replaces
// ends), so that a container that asks for logins in a loop fills nothing but its own share.
const maxIssued = 8

// IssuedBy is Binding.By of the logins the gate saw issued.
const IssuedBy = "gate"

// BindingStore keeps the bindings where every console replica sharing a hub's store reads them
// (hubdb); without one they are in the console's state file.
type BindingStore interface {
	// UpdateBindings runs f on the bindings as they are, oldest first, and keeps what it
	// returns, as one step no other replica interleaves; an error of f keeps them as they
	// were. It returns them as kept.
	UpdateBindings(ctx context.Context, f func([]Binding) ([]Binding, error)) ([]Binding, error)
	// ListBindings lists them, oldest first.
	ListBindings(ctx context.Context) ([]Binding, error)
	// WatchBindings calls f each time another replica changed them (or may have: after the
	// store's notifications were lost).
	WatchBindings(f func())
}

// errUnchanged ends an update of the bindings that has nothing to change.
var errUnchanged = errors.New("unchanged")

// keepBindings runs f on the bindings and keeps what it returns: in Config.Bindings, or in the
// state file. errUnchanged from f keeps them and is no error.
func (c *Console) keepBindings(f func([]Binding) ([]Binding, error)) error {
	if st := c.cfg.Bindings; st != nil {
		// One change or reread at a time: each sets the bindings served to what the store held
		// then, so none may finish after a later one.
		c.bindMu.Lock()
		defer c.bindMu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var ferr error
		bs, err := st.UpdateBindings(ctx, func(cur []Binding) ([]Binding, error) {
			next, err := f(cur)
			ferr = err
			return next, err
		})
		if ferr != nil {
			return ferr // the change's own refusal, or errUnchanged
		}
		if err != nil {
			return fmt.Errorf("keeping the binding in the hub's database: %w", err)
		}
		c.mu.Lock()
		c.state.Bound = bs
		c.mu.Unlock()
		return nil
	}
	c.mu.Lock()
	prev := c.state.Bound
	next, err := f(append([]Binding(nil), prev...))
	if err != nil {
		c.mu.Unlock()
		return err
	}
	c.state.Bound = next
	c.mu.Unlock()
	if err := c.saveState(); err != nil {
		c.mu.Lock()
		c.state.Bound = prev
		c.mu.Unlock()
		return fmt.Errorf("writing the console's state file: %w", err)
	}
	return nil
}

// bindingsFromStore takes the bindings from Config.Bindings at the console's start, and follows
// the other replicas' changes. The bindings of a state file written without the store go to the
// store when it holds none yet.
func (c *Console) bindingsFromStore() error {
	file := c.state.Bound
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bs, err := c.cfg.Bindings.UpdateBindings(ctx, func(cur []Binding) ([]Binding, error) {
		if len(cur) > 0 || len(file) == 0 {
			return nil, errUnchanged
		}
		return file, nil
	})
	if errors.Is(err, errUnchanged) {
		bs, err = c.cfg.Bindings.ListBindings(ctx)
	}
	if err != nil {
		return fmt.Errorf("console: reading the bindings from the hub's database: %w", err)
	}
	if err := checkBindings(bs); err != nil {
		return fmt.Errorf("console: the hub's database: %w", err)
	}
	c.mu.Lock()
	c.state.Bound = bs
	c.mu.Unlock()
	if s := c.cur.Load(); s != nil {
		c.publish(*s)
	}
	c.cfg.Bindings.WatchBindings(c.RefreshBindings)
	return nil
}

// RefreshBindings reads the bindings of Config.Bindings again and serves them when they
// changed (another replica bound or unbound a credential). Watch calls it at every check of the
// policy file; the store's notifications call it at once.
func (c *Console) RefreshBindings() {
	st := c.cfg.Bindings
	if st == nil {
		return
	}
	c.bindMu.Lock()
	defer c.bindMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bs, err := st.ListBindings(ctx)
	if err != nil {
		c.log.Warn("console: reading the bindings from the hub's database failed; the ones read last are served", "err", err)
		return
	}
	if err := checkBindings(bs); err != nil {
		c.log.Error("console: the hub's database holds bindings the console does not serve", "err", err)
		return
	}
	c.mu.Lock()
	same := len(bs) == len(c.state.Bound)
	for i := 0; same && i < len(bs); i++ {
		same = bs[i].Container == c.state.Bound[i].Container && bs[i].Hash == c.state.Bound[i].Hash
	}
	c.state.Bound = bs
	c.mu.Unlock()
	if s := c.cur.Load(); s != nil && !same {
		c.publish(*s)
	}
}

// Bind binds the Claude credential whose SHA-256 hex is hash to container, for the human by who
// approved ticket: the binding is kept (the state file, or the hub's database) and audited
// before the console serves it, and a binding that cannot be kept is an error (the approval
// then does not stand). Binding a credential already bound changes nothing.
func (c *Console) Bind(container, hash, by, ticket string) error {
	if !claudeapi.IsHash(hash) {
		return errors.New("a binding names the credential by its SHA-256 in lower-case hex")
	}
	if strings.TrimSpace(by) == "" {
		return errors.New("a binding names who approved it")
	}
	c.mu.Lock()
	if c.approved == nil || !c.approved.HasContainer(container) {
		c.mu.Unlock()
		return fmt.Errorf("the approved policy has no container %q in [sources]", container)
	}
	version := c.state.Approved.Version
	c.mu.Unlock()
	err := c.keepBindings(func(bs []Binding) ([]Binding, error) {
		for _, b := range bs {
			if b.Container == container && b.Hash == hash {
				return nil, errUnchanged
			}
		}
		if len(bs) >= maxBindings {
			return nil, fmt.Errorf("the console keeps at most %d bound Claude credentials; list long-lived ones in the policy's [claude] credentials file", maxBindings)
		}
		return append(bs, Binding{Container: container, Hash: hash, By: by, Ticket: ticket, At: c.now()}), nil
	})
	if errors.Is(err, errUnchanged) {
		return nil
	}
	if err != nil {
		return err
	}
	c.record(&audit.Record{Event: "policy", Rule: "credential-bound", Policy: version, Container: container, Approver: by, Ticket: ticket,
		Detail: fmt.Sprintf("Claude credential sha256:%s bound to container %s: its requests with it pass without asking", hash, container)})
	if s := c.cur.Load(); s != nil {
		c.publish(*s)
	}
	c.say("container %s may now send the Claude credential sha256 %s… (approved by %s, ticket %s)", container, hash[:12], by, ticket)
	return nil
}

// BindIssued binds the Claude login whose SHA-256 hex is hash to container without a ticket: the
// gate saw the OAuth token endpoint of host issue it to the container, in the answer of its
// request. Like Bind, the binding is kept and audited (rule "credential-bound", approver
// "gate", the request's id) before the console serves it; the container keeps at most
// maxIssued issued logins, its oldest dropped. Binding a login already bound changes nothing.
func (c *Console) BindIssued(container, hash, host, request string) error {
	if !claudeapi.IsHash(hash) {
		return errors.New("a binding names the credential by its SHA-256 in lower-case hex")
	}
	if host == "" || request == "" {
		return errors.New("an issued login names the host that issued it and the gate's request")
	}
	c.mu.Lock()
	if c.approved == nil || !c.approved.HasContainer(container) {
		c.mu.Unlock()
		return fmt.Errorf("the approved policy has no container %q in [sources]", container)
	}
	version := c.state.Approved.Version
	c.mu.Unlock()
	var dropped *Binding
	err := c.keepBindings(func(bs []Binding) ([]Binding, error) {
		dropped = nil
		oldest, issued := -1, 0
		for i, b := range bs {
			if b.Container != container {
				continue
			}
			if b.Hash == hash {
				return nil, errUnchanged
			}
			if b.Issued != "" {
				issued++
				if oldest < 0 {
					oldest = i
				}
			}
		}
		kept := bs
		if issued >= maxIssued {
			d := bs[oldest]
			dropped = &d
			kept = append(append([]Binding(nil), bs[:oldest]...), bs[oldest+1:]...)
		}
		if len(kept) >= maxBindings {
			return nil, fmt.Errorf("the console keeps at most %d bound Claude credentials; list long-lived ones in the policy's [claude] credentials file", maxBindings)
		}
		return append(kept, Binding{Container: container, Hash: hash, By: IssuedBy, At: c.now(), Issued: host, Request: request}), nil
	})
	if errors.Is(err, errUnchanged) {
		return nil
	}
	if err != nil {
		return err
	}
	detail := fmt.Sprintf("Claude login sha256:%s issued to container %s by %s's token endpoint (the gate's request %s) bound: its requests with it pass without asking", hash, container, host, request)
	if dropped != nil {
		detail += fmt.Sprintf("; the container's oldest issued login sha256:%s is unbound (it keeps %d)", dropped.Hash, maxIssued)
	}
	c.record(&audit.Record{Event: "policy", Rule: "credential-bound", Policy: version, Container: container, ID: request, Approver: IssuedBy, Detail: detail})
	if s := c.cur.Load(); s != nil {
		c.publish(*s)
	}
	c.say("container %s may now send the Claude login sha256 %s… it was issued by %s (request %s)", container, hash[:12], host, request)
	return nil
}

// Bindings lists the bound credentials, oldest first.
func (c *Console) Bindings() []Binding {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Binding(nil), c.state.Bound...)
}

// publish serves s with the bindings of the state: Bound, and a Tag that changes with them.
func (c *Console) publish(s Served) {
	c.mu.Lock()
	s.Bound, s.Tag = bound(c.state.Bound), s.Version
	if len(c.state.Bound) > 0 {
		h := sha256.New()
		for _, b := range c.state.Bound {
			fmt.Fprintf(h, "%s %s\n", b.Container, b.Hash)
		}
		s.Tag += "+" + hex.EncodeToString(h.Sum(nil))[:16]
	}
	c.mu.Unlock()
	c.cur.Store(&s)
}

// BoundByContainer is the bindings as the gate reads them (Served.Bound, policy.ClaudeBound):
// container → hashes, sorted; nil for none. It checks them as the console does when it reads
// its state file.
func BoundByContainer(bs []Binding) (map[string][]string, error) {
	if err := checkBindings(bs); err != nil {
		return nil, err
	}
	return bound(bs), nil
}

// bound is the bindings as the gate reads them: container → hashes, sorted.
func bound(bs []Binding) map[string][]string {
	if len(bs) == 0 {
		return nil
	}
	m := make(map[string][]string)
	for _, b := range bs {
		m[b.Container] = append(m[b.Container], b.Hash)
	}
	for _, hs := range m {
		sort.Strings(hs)
	}
	return m
}

// checkBindings checks the bindings of a state file as read.
func checkBindings(bs []Binding) error {
	if len(bs) > maxBindings {
		return fmt.Errorf("%d bound credentials, more than the %d the console keeps", len(bs), maxBindings)
	}
	for i, b := range bs {
		if !claudeapi.IsHash(b.Hash) || b.Container == "" {
			return fmt.Errorf("bound[%d]: not a container and a SHA-256 hex hash", i)
		}
	}
	return nil
}

// Unbind removes the binding of container whose hash starts with prefix (at least 12 hex
// digits, as lox credentials shows it), for the human by: kept (the state file, or the hub's
// database) and audited before the console stops serving it. A prefix that names no binding,
// or more than one, is an error that changes nothing.
func (c *Console) Unbind(container, prefix, by string) (Binding, error) {
	prefix = strings.ToLower(strings.TrimPrefix(strings.TrimSpace(prefix), "sha256:"))
	if len(prefix) < 12 || len(prefix) > sha256.Size*2 || !claudeapi.IsHexPrefix(prefix) {
		return Binding{}, errors.New("name the credential by at least the first 12 hex digits of its SHA-256, as lox credentials shows it")
	}
	if strings.TrimSpace(by) == "" {
		return Binding{}, errors.New("an unbinding names who did it")
	}
	c.mu.Lock()
	version := ""
	if c.state.Approved != nil {
		version = c.state.Approved.Version
	}
	c.mu.Unlock()
	var gone Binding
	err := c.keepBindings(func(bs []Binding) ([]Binding, error) {
		at := -1
		for i, b := range bs {
			if b.Container == container && strings.HasPrefix(b.Hash, prefix) {
				if at >= 0 {
					return nil, fmt.Errorf("more than one credential of %s starts with %s; give more digits", container, prefix)
				}
				at = i
			}
		}
		if at < 0 {
			return nil, fmt.Errorf("no credential bound to %s starts with %s; lox credentials lists them", container, prefix)
		}
		gone = bs[at]
		return append(append([]Binding(nil), bs[:at]...), bs[at+1:]...), nil
	})
	if err != nil {
		return Binding{}, err
	}
	c.record(&audit.Record{Event: "policy", Rule: "credential-unbound", Policy: version, Container: container, Approver: by, Ticket: gone.Ticket,
		Detail: fmt.Sprintf("Claude credential sha256:%s unbound from container %s (bound by %s): its requests with it ask again", gone.Hash, container, gone.By)})
	if s := c.cur.Load(); s != nil {
		c.publish(*s)
	}
	c.say("container %s may no longer send the Claude credential sha256 %s… without asking (unbound by %s)", container, gone.Hash[:12], by)
	return gone, nil
}
