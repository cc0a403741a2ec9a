// Package egress dials the targets the gate lets out: it resolves a name once, checks every
// address with the floor, and dials exactly a checked address, directly or through an upstream
// proxy.
package egress

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/lockhttp/lockhttp/internal/floor"
	"github.com/lockhttp/lockhttp/internal/policy"
)

// Resolver looks names up; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Target is where a request goes, with the floor exceptions of the policy that let it out.
type Target struct {
	Host  string // normalised name
	Port  int
	Floor *policy.Floor
}

// Addr is "host:port".
func (t Target) Addr() string { return net.JoinHostPort(t.Host, strconv.Itoa(t.Port)) }

type targetKey struct{}

// WithTarget returns ctx carrying t, for DialContext.
func WithTarget(ctx context.Context, t Target) context.Context {
	return context.WithValue(ctx, targetKey{}, t)
}

// RefusedError is a dial the floor refused after resolution.
type RefusedError struct {
	Refusal *floor.Refusal
}

func (e *RefusedError) Error() string { return e.Refusal.Error() }

// Dialer resolves, checks and dials. The zero value is not usable: set Resolver (or leave it nil
// for net.DefaultResolver) and the rest as needed.
type Dialer struct {
	Resolver Resolver
	// Upstream is an optional upstream proxy (http://host:port). The gate still resolves and
	// checks the target itself and asks the upstream for a tunnel to the checked address. A URL
	// with user info is refused at each dial: the credential is UpstreamAuth.
	Upstream *url.URL
	// UpstreamAuth is the upstream proxy's credential, sent on each CONNECT. Nil: none.
	UpstreamAuth *ProxyAuth
	// Own holds the gate's own listen addresses, never dialled.
	Own []netip.AddrPort
	// Timeout bounds resolution plus connection. Zero: 10s.
	Timeout time.Duration
	// IdleTimeout closes a connection on which no byte arrived for this long. Zero: 10m.
	IdleTimeout time.Duration
}

func (d *Dialer) resolver() Resolver {
	if d.Resolver != nil {
		return d.Resolver
	}
	return net.DefaultResolver
}

// Resolve returns the addresses of t, every one checked by the floor: [floor.hosts] first, then
// DNS. A name with one refused address among its answers is refused.
func (d *Dialer) Resolve(ctx context.Context, t Target) ([]netip.Addr, error) {
	var answer []netip.Addr
	if a, ok := t.Floor.Hosts[t.Host]; ok {
		answer = []netip.Addr{a}
	} else {
		got, err := d.resolver().LookupNetIP(ctx, "ip", t.Host)
		if err != nil {
			var dnsErr *net.DNSError
			if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
				return nil, fmt.Errorf("%q does not resolve (no such host)", t.Host)
			}
			return nil, fmt.Errorf("resolve %q: %w", t.Host, err)
		}
		if len(got) == 0 {
			return nil, fmt.Errorf("%q has no addresses", t.Host)
		}
		answer = got
	}
	// A new slice: the resolver's answer may be shared (a cache), and is not written to.
	addrs := make([]netip.Addr, len(answer))
	for i, a := range answer {
		a = a.Unmap()
		addrs[i] = a
		if r := floor.CheckAddr(a, t.Port, t.Floor.AllowCIDRs, d.Own); r != nil {
			r.Reason = fmt.Sprintf("%q: %s", t.Host, r.Reason)
			return nil, &RefusedError{Refusal: r}
		}
	}
	return addrs, nil
}

func (d *Dialer) timeout() time.Duration {
	if d.Timeout > 0 {
		return d.Timeout
	}
	return 10 * time.Second
}

// Dial resolves and checks t and connects to the first checked address that answers.
func (d *Dialer) Dial(ctx context.Context, t Target) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, d.timeout())
	defer cancel()
	addrs, err := d.Resolve(ctx, t)
	if err != nil {
		return nil, err
	}
	var last error
	for _, a := range addrs {
		ap := netip.AddrPortFrom(a, uint16(t.Port))
		var c net.Conn
		if d.Upstream != nil {
			c, err = d.dialUpstream(ctx, ap)
		} else {
			var nd net.Dialer
			c, err = nd.DialContext(ctx, "tcp", ap.String())
		}
		if err == nil {
			return &idleConn{Conn: c, idle: d.idle()}, nil
		}
		last = err
	}
	return nil, fmt.Errorf("connect to %q: %w", t.Host, last)
}

func (d *Dialer) idle() time.Duration {
	if d.IdleTimeout > 0 {
		return d.IdleTimeout
	}
	return 10 * time.Minute
}

// DialContext is for http.Transport: the target comes from the context (WithTarget) and must be
// the address the transport asks for.
func (d *Dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	t, ok := ctx.Value(targetKey{}).(Target)
	if !ok {
		return nil, errors.New("egress: dial without a checked target")
	}
	if addr != t.Addr() {
		return nil, fmt.Errorf("egress: dial of %q does not match the checked target %q", addr, t.Addr())
	}
	return d.Dial(ctx, t)
}

// dialUpstream asks the upstream proxy for a tunnel to the checked address.
func (d *Dialer) dialUpstream(ctx context.Context, ap netip.AddrPort) (net.Conn, error) {
	u := d.Upstream
	if u.User != nil {
		return nil, fmt.Errorf("upstream proxy %s: its URL has a user:password part, which is never sent; give the credential as the dialer's UpstreamAuth", u.Host)
	}
	var nd net.Dialer
	c, err := nd.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return nil, fmt.Errorf("upstream proxy %s: %w", u.Host, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	req := "CONNECT " + ap.String() + " HTTP/1.1\r\nHost: " + ap.String() + "\r\n"
	if d.UpstreamAuth != nil {
		req += "Proxy-Authorization: " + d.UpstreamAuth.header() + "\r\n"
	}
	req += "\r\n"
	if _, err := c.Write([]byte(req)); err != nil {
		c.Close()
		return nil, fmt.Errorf("upstream proxy %s: %w", u.Host, err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("upstream proxy %s: reading its answer: %w", u.Host, err)
	}
	if resp.StatusCode != http.StatusOK {
		c.Close()
		return nil, fmt.Errorf("upstream proxy %s refused the tunnel to %s: %s", u.Host, ap, resp.Status)
	}
	c.SetDeadline(time.Time{})
	if br.Buffered() > 0 {
		return &bufferedConn{Conn: c, r: br}, nil
	}
	return c, nil
}

// ProxyAuthEnv is the environment variable that gives the upstream proxy's credential,
// user:password, when no credentials file does.
const ProxyAuthEnv = "LOCKHTTP_UPSTREAM_PROXY_AUTH"

// ParseUpstream reads an upstream proxy's URL, http://host:port. A URL with a user:password
// part is refused, with the fix: a command line is readable by every user of the machine
// (/proc/PID/cmdline), the agent's uid included. Its errors never repeat a password.
func ParseUpstream(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err == nil && u.User != nil || strings.Contains(raw, "@") {
		return nil, errors.New("has a user:password part, which every user of this machine can read on a command line (/proc/PID/cmdline), the agent's included; give the proxy as http://HOST:PORT and its credential in a file, --upstream-credentials-file FILE holding user:password (mode 0600), or in the environment, " + ProxyAuthEnv + "=user:password")
	}
	if err != nil || u.Scheme != "http" || u.Host == "" || u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("%q: write it as http://host:port", raw)
	}
	return &url.URL{Scheme: u.Scheme, Host: u.Host}, nil
}

// ProxyAuth is an upstream proxy's credential, sent as Basic Proxy-Authorization on each
// CONNECT. It prints as "user:***" (fmt, slog): never the password.
type ProxyAuth struct {
	user, password string
}

// maxProxyAuth bounds a credential's length.
const maxProxyAuth = 1024

// ParseProxyAuth reads a credential written "user:password" (the password may hold ':'), as the
// gate's -upstream-credentials-file and LOCKHTTP_UPSTREAM_PROXY_AUTH give it. Its errors never
// repeat the value.
func ParseProxyAuth(s string) (*ProxyAuth, error) {
	if len(s) > maxProxyAuth {
		return nil, fmt.Errorf("the upstream credential is longer than %d bytes; write user:password alone", maxProxyAuth)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] == 0x7f {
			return nil, fmt.Errorf("the upstream credential has a control character (a line end?) at byte %d; write user:password on one line", i)
		}
	}
	user, pass, ok := strings.Cut(s, ":")
	if !ok || user == "" {
		return nil, errors.New("the upstream credential is not user:password; write the proxy's user name, a colon and its password")
	}
	return &ProxyAuth{user: user, password: pass}, nil
}

// User is the credential's user name.
func (a *ProxyAuth) User() string { return a.user }

// String is the user name and *** for the password.
func (a *ProxyAuth) String() string { return a.user + ":***" }

// GoString is String, so that %#v hides the password too.
func (a *ProxyAuth) GoString() string { return a.String() }

// LogValue is String, for slog.
func (a *ProxyAuth) LogValue() slog.Value { return slog.StringValue(a.String()) }

func (a *ProxyAuth) header() string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(a.user+":"+a.password))
}

type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// idleConn closes a connection on which nothing arrived for idle: a moving stream (SSE, a large
// download) keeps going however long it lasts. A read deadline its user sets holds instead, until
// the user clears it.
type idleConn struct {
	net.Conn
	idle time.Duration
	// until is when the read deadline set last runs out; it is pushed forward only when less
	// than half of idle is left, so that a busy connection does not reset a timer on every read.
	until time.Time
	// set: the user's own read deadline is in force.
	set bool
}

func (c *idleConn) Read(p []byte) (int, error) {
	if now := time.Now(); !c.set && c.until.Sub(now) < c.idle/2 {
		c.until = now.Add(c.idle)
		c.Conn.SetReadDeadline(c.until)
	}
	return c.Conn.Read(p)
}

// SetReadDeadline sets the user's read deadline; the zero time gives the idle bound back.
func (c *idleConn) SetReadDeadline(t time.Time) error {
	c.set, c.until = !t.IsZero(), t
	return c.Conn.SetReadDeadline(t)
}

// NetConn is the connection dialled (the gate checks a pooled one through it before reuse).
func (c *idleConn) NetConn() net.Conn { return c.Conn }

// CloseWrite half-closes when the underlying connection can.
func (c *idleConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
