package policy

import (
	"fmt"
	"net/netip"
	"net/url"
	pathpkg "path"
	"regexp"
	"strings"

	"github.com/lockhttp/lockhttp/internal/floor"
)

// FileNotify is one [[notify]]: a channel the console tells of every new ticket. The gate reads
// it and ignores it.
type FileNotify struct {
	// Name is required and unique; it names the channel in its decision links, the metrics and
	// the doctor, and it is the approver the audit names for a decision through the channel.
	Name string `toml:"name"`
	// URL is where each notification is POSTed. Required. A human channel's is https:// to a
	// named host (no IP literal, no local or single-label name); a channel that only notifies
	// may also use http:// to a loopback address. Credentials belong in its path (a webhook's
	// secret) or in TokenFile, never in a user:password part.
	URL string `toml:"url"`
	// Kind is "webhook" (a JSON object) or "ntfy" (a short message for an ntfy topic). Required.
	Kind string `toml:"kind"`
	// Human marks a channel whose replies are a human's decisions: its notifications carry a
	// decision link that approves or denies the ticket. False: the channel only notifies. A
	// human ntfy channel needs TokenFile.
	Human bool `toml:"human"`
	// TokenFile is the absolute path of a file holding an access token, sent with every
	// notification as "Authorization: Bearer TOKEN" (the console reads it at each delivery;
	// the token is never in the policy's text). Empty: none.
	TokenFile string `toml:"token_file"`
	// InsecureLoopback lets a human channel POST to a loopback address (http:// or https://),
	// for tests: any local process that binds the port receives the decision links. The console
	// refuses it when an agent runs on the machine as a uid of its own (lox run -- COMMAND).
	// False: a human channel reaches a named host over https only.
	InsecureLoopback bool `toml:"insecure_loopback"`
}

// Notify is a [[notify]] channel compiled.
type Notify struct {
	Name, URL, Kind  string
	Human            bool
	TokenFile        string
	InsecureLoopback bool
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

// RefusedWithAgent is what the policy holds that the console refuses while an agent runs on the
// machine as a uid of its own (lox run -- COMMAND): every channel with insecure_loopback, each
// at its line with the fix. Nil: nothing.
func (p *Policy) RefusedWithAgent() error {
	if len(p.withAgent) == 0 {
		return nil
	}
	return p.withAgent
}

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
		if msg := checkNotifyURL(fn); msg != "" {
			c.errorf(at("url"), label, "%s", msg)
		}
		switch fn.Kind {
		case NotifyWebhook, NotifyNtfy:
		case "":
			c.errorf(path, label, "kind is missing; write kind = \"webhook\" (a JSON object) or kind = \"ntfy\" (a short message)")
		default:
			c.errorf(at("kind"), label, "kind %q is not known; write \"webhook\" or \"ntfy\"", fn.Kind)
		}
		if fn.TokenFile != "" && (!pathpkg.IsAbs(fn.TokenFile) || pathpkg.Clean(fn.TokenFile) != fn.TokenFile) {
			c.errorf(at("token_file"), label, "token_file %q is not a clean absolute path; write the full path of the file holding the access token, such as \"/etc/lockhttp/ntfy.token\"", fn.TokenFile)
		}
		if fn.Human && fn.Kind == NotifyNtfy && fn.TokenFile == "" {
			c.errorf(at("human"), label, "an ntfy topic is read and written by anyone who knows its name, so a human ntfy channel needs the topic protected by an access token: write token_file = \"/path/to/token\" (a file holding the token, mode 0600; docs/ask.md), or human = false to notify only")
		}
		if fn.InsecureLoopback {
			if !fn.Human {
				c.errorf(at("insecure_loopback"), label, "insecure_loopback is for a human channel on a loopback address (tests); a channel that only notifies may use http:// to loopback without it: remove it")
			}
			p.withAgent = append(p.withAgent, &Error{File: c.d.Name, Line: c.d.loc.line(at("insecure_loopback")...), Key: label,
				Msg: "insecure_loopback = true: an agent runs on this machine as a uid of its own (lox run -- COMMAND) and could bind the channel's loopback port, receive the decision links and approve its own requests; remove insecure_loopback and give the channel an https:// URL of a named host, or run without -- COMMAND"})
		}
		p.notify = append(p.notify, Notify{Name: fn.Name, URL: fn.URL, Kind: fn.Kind, Human: fn.Human, TokenFile: fn.TokenFile, InsecureLoopback: fn.InsecureLoopback})
	}
}

// checkNotifyURL says what is wrong with a channel's URL, or "". A human channel's receiver is
// a named host reached over TLS: its certificate, not a port any local process may bind,
// says who gets the decision links.
func checkNotifyURL(fn FileNotify) string {
	s := fn.URL
	if s == "" {
		return "url is missing; write the receiver's https:// URL"
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || u.Opaque != "" {
		return "url is not an absolute URL; write it like \"https://hooks.example.com/lockhttp\""
	}
	if u.User != nil {
		return "url has a user:password part; put the receiver's secret in its path (as a webhook's), or the access token in token_file, so that it is never in the policy's text"
	}
	if u.Fragment != "" {
		return "url has a #fragment, which is never sent; remove it"
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return fmt.Sprintf("url scheme %q is not https; write an https:// URL", u.Scheme)
	}
	loopback := loopbackHost(u.Hostname())
	if fn.InsecureLoopback {
		if !loopback {
			return "insecure_loopback = true, but the url is not a loopback address; insecure_loopback is for a test receiver on 127.0.0.1, ::1 or localhost: remove it"
		}
		return ""
	}
	if !fn.Human {
		if u.Scheme == "http" && !loopback {
			return "url is http:// to another machine; notifications go over https:// (http:// only to a loopback address, for tests)"
		}
		return ""
	}
	// A human channel: whoever receives its notifications decides tickets.
	if u.Scheme != "https" {
		return "a human channel's url is https:// to a named host: its replies approve requests, and over http:// any process that binds the port, or anyone on the path, gets the decision links; write an https:// URL (for a test receiver on loopback, add insecure_loopback = true)"
	}
	name, r := floor.Host(u.Hostname())
	if r == nil {
		r = floor.Name(name)
	}
	if r != nil {
		msg := "a human channel's receiver is known by its TLS certificate for a public host name: " + r.Reason
		if loopback {
			msg += "; a loopback port can be bound by any local process, the agent's included (for a test receiver, add insecure_loopback = true)"
		}
		return msg
	}
	return ""
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
// so whatever changes who receives a human channel's links loosens: a human channel added, a
// channel made human, a human channel sent to another url or another kind of receiver, its
// access token taken away or swapped, or insecure_loopback turned on. A channel that only
// notifies decides nothing.
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
		case o.Human && n.Human:
			c.humanChannel(o, n)
		case o.Human && !n.Human:
			c.tight("notify %q: human: true → false (it only notifies)", n.Name)
		case o != n:
			c.tight("notify %q: changed (url, kind or token_file)", n.Name)
		}
	}
	for _, o := range old {
		if !nm[o.Name] {
			c.tight("notify %q: - (removed)", o.Name)
		}
	}
}

// humanChannel compares a channel that decides tickets in both policies.
func (c *Comparison) humanChannel(o, n Notify) {
	if o.URL != n.URL {
		c.loose("notify %q: url changed: another receiver's replies decide tickets", n.Name)
	}
	if o.Kind != n.Kind {
		c.loose("notify %q: kind: %s → %s: another kind of receiver gets the decision links", n.Name, o.Kind, n.Kind)
	}
	switch {
	case o.TokenFile == n.TokenFile:
	case o.TokenFile == "":
		c.tight("notify %q: token_file added: the receiver's topic is protected by an access token", n.Name)
	case n.TokenFile == "":
		c.loose("notify %q: token_file removed: the receiver no longer needs an access token", n.Name)
	default:
		c.loose("notify %q: token_file changed: another access token reaches the receiver", n.Name)
	}
	switch {
	case !o.InsecureLoopback && n.InsecureLoopback:
		c.loose("notify %q: insecure_loopback: false → true: a local process that binds the port gets the decision links", n.Name)
	case o.InsecureLoopback && !n.InsecureLoopback:
		c.tight("notify %q: insecure_loopback: true → false", n.Name)
	}
}
