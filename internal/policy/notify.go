package policy

import (
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
)

// FileNotify is one [[notify]]: a channel the console tells of every new ticket. The gate reads
// it and ignores it.
type FileNotify struct {
	// Name is required and unique; it names the channel in its decision links, the metrics and
	// the doctor.
	Name string `toml:"name"`
	// URL is where each notification is POSTed: https://, or http:// to a loopback address
	// (tests). Required. Credentials belong in its path (a webhook's or an ntfy topic's secret),
	// never in a user:password part.
	URL string `toml:"url"`
	// Kind is "webhook" (a JSON object) or "ntfy" (a short message for an ntfy topic). Required.
	Kind string `toml:"kind"`
	// Human marks a channel whose replies are a human's decisions: its notifications carry a
	// decision link that approves or denies the ticket. False: the channel only notifies.
	Human bool `toml:"human"`
}

// Notify is a [[notify]] channel compiled.
type Notify struct {
	Name, URL, Kind string
	Human           bool
}

// Kinds of notification channels.
const (
	NotifyWebhook = "webhook"
	NotifyNtfy    = "ntfy"
)

// maxNotify bounds the channels of one policy.
const maxNotify = 16

// channelName is a channel's name: it goes into the decision link's path and a metric's label.
var channelName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)

// Notify is the policy's [[notify]] channels, in file order.
func (p *Policy) Notify() []Notify { return p.notify }

// notifySections is how [[notify]] sections are counted and named.
var notifySections = sectionKind{
	key: "notify", noun: "channel", max: maxNotify,
	tooMany: "more than %d channels; one webhook can fan out to more receivers",
	name:    channelName,
	badName: "the name uses a-z, 0-9, '.', '_' and '-' only, starting with a letter or digit, at most 64: it goes into the channel's decision links",
}

// notify compiles the [[notify]] sections.
func (c *compiler) notify(p *Policy, fns []FileNotify) {
	seen := make(map[string]int)
	for i, fn := range fns {
		path, label := c.sectionName(&notifySections, seen, i, fn.Name)
		at := func(k string) []string { return append(append([]string{}, path...), k) }
		if msg := checkNotifyURL(fn.URL); msg != "" {
			c.errorf(at("url"), label, "%s", msg)
		}
		switch fn.Kind {
		case NotifyWebhook, NotifyNtfy:
		case "":
			c.errorf(path, label, "kind is missing; write kind = \"webhook\" (a JSON object) or kind = \"ntfy\" (a short message)")
		default:
			c.errorf(at("kind"), label, "kind %q is not known; write \"webhook\" or \"ntfy\"", fn.Kind)
		}
		p.notify = append(p.notify, Notify{Name: fn.Name, URL: fn.URL, Kind: fn.Kind, Human: fn.Human})
	}
}

// checkNotifyURL says what is wrong with a channel's URL, or "".
func checkNotifyURL(s string) string {
	if s == "" {
		return "url is missing; write the receiver's https:// URL"
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || u.Opaque != "" {
		return "url is not an absolute URL; write it like \"https://hooks.example.com/lockhttp\""
	}
	if u.User != nil {
		return "url has a user:password part; put the receiver's secret in its path (as a webhook's or an ntfy topic's), so that it is never sent in clear"
	}
	if u.Fragment != "" {
		return "url has a #fragment, which is never sent; remove it"
	}
	switch u.Scheme {
	case "https":
		return ""
	case "http":
		if loopbackHost(u.Hostname()) {
			return ""
		}
		return "url is http:// to another machine; notifications carry a decision link, so they go over https:// (http:// only to a loopback address, for tests)"
	}
	return fmt.Sprintf("url scheme %q is not https; write an https:// URL", u.Scheme)
}

// loopbackHost reports whether host is localhost or a loopback address.
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}

// notify compares the channels by name. A reply through a human channel's link decides tickets,
// so a human channel added, a channel made human, or a human channel sent elsewhere loosens; a
// channel that only notifies decides nothing.
func (c *Comparison) notify(old, new []Notify) {
	om := make(map[string]Notify, len(old))
	for _, o := range old {
		om[o.Name] = o
	}
	nm := make(map[string]bool, len(new))
	for _, n := range new {
		nm[n.Name] = true
		o, ok := om[n.Name]
		switch {
		case !ok && n.Human:
			c.loose("notify %q: + a human channel (%s): a reply through its link approves or denies tickets", n.Name, n.Kind)
		case !ok:
			c.tight("notify %q: + a channel that only notifies (%s)", n.Name, n.Kind)
		case !o.Human && n.Human:
			c.loose("notify %q: human: false → true: a reply through its link approves or denies tickets", n.Name)
		case o.Human && n.Human && o.URL != n.URL:
			c.loose("notify %q: url changed: another receiver's replies decide tickets", n.Name)
		case o.Human && !n.Human:
			c.tight("notify %q: human: true → false (it only notifies)", n.Name)
		case o != n:
			c.tight("notify %q: changed (url or kind)", n.Name)
		}
	}
	for _, o := range old {
		if !nm[o.Name] {
			c.tight("notify %q: - (removed)", o.Name)
		}
	}
}
