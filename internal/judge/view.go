package judge

import (
	"encoding/base64"
	"fmt"
	"mime"
	"net/http"
	"net/netip"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"

	"github.com/lockhttp/lockhttp/internal/floor"
	"github.com/lockhttp/lockhttp/internal/framing"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/secrets"
)

// Arrival is what reached a front end, before any normalisation: the gate's plain-HTTP and
// CONNECT handlers, a request decrypted inside a tunnel, and lockhttp explain each fill one and
// hand it to See.
type Arrival struct {
	Kind Kind
	// Source is the address the connection came from; Container, when set (lockhttp explain),
	// names the container instead.
	Source    netip.Addr
	Container string
	// Method is the request method as sent.
	Method string
	// URL is the request target as parsed: absolute-form for a plain proxy request, origin-form
	// (or absolute-form) inside a tunnel; nil for a CONNECT.
	URL *url.URL
	// Host is the Host header (the CONNECT target for a CONNECT).
	Host string
	// Header is the header as received. See edits it in place into the header that goes out.
	Header http.Header
	// Tunnel is the CONNECT a decrypted request arrived in (Kind Tunnel).
	Tunnel *Binding
	// Framing is the framing check's refusal of the head, when it refused one.
	Framing *framing.Error
	// HTTP2 reports a request that came on an HTTP/2 stream inside a decrypted tunnel: its
	// framing was the HTTP/2 server's, not package framing's, and Host is its :authority (a
	// Host header, when one was sent as well, is still in Header).
	HTTP2 bool
	// Body holds the request body, at most buffer_limit+1 bytes; BodySize is how many bytes
	// were read (over buffer_limit: too large to inspect).
	Body     []byte
	BodySize int64
	// Transparent reports a connection that reached one of the gate's transparent listeners (a
	// client that ignores the proxy, sent to the gate by the agent's DNS and network) on Port.
	// Its original destination is unknown and never used: a Plain arrival (origin-form, or
	// absolute-form that agrees with its Host) is decided as http://Host/..., Host naming Port;
	// a Domain arrival is the TLS ClientHello's server name, Host being "SNI:Port". It carries
	// no agent name.
	Transparent bool
	Port        int
}

// Binding is the CONNECT a decrypted tunnel was opened for: every request inside must name
// its host and port.
type Binding struct {
	Host string
	Port int
	// Agent is the agent name the CONNECT carried, for the records of the requests inside.
	Agent string
	// Cleartext: the client speaks plain HTTP inside the tunnel instead of TLS (a client that
	// sends http:// and ws:// URLs through a CONNECT); its requests are http:// URLs.
	Cleartext bool
	// Transparent: the tunnel is a TLS connection to a transparent listener, bound to its
	// ClientHello's server name and the listener's port; its requests carry no agent name.
	Transparent bool
}

// Scheme is the scheme of the requests inside the tunnel: https, or http when it is cleartext.
func (b *Binding) Scheme() string {
	if b.Cleartext {
		return "http"
	}
	return "https"
}

// Root is the URL of the root of the tunnel's origin, for the record of a request that names
// no path the gate could read.
func (b *Binding) Root() string { return b.Scheme() + "://" + b.Authority() + "/" }

// defaultPort is the port a Host or URL inside the tunnel means when it names none.
func (b *Binding) defaultPort() int {
	if b.Cleartext {
		return 80
	}
	return 443
}

// Authority is host:port.
func (b *Binding) Authority() string {
	if strings.Contains(b.Host, ":") {
		return "[" + b.Host + "]:" + strconv.Itoa(b.Port)
	}
	return b.Host + ":" + strconv.Itoa(b.Port)
}

// hopHeaders are the hop-by-hop headers (RFC 9110 7.6.1, plus the de facto ones): they describe
// one connection, never cross the gate and are never decided on.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// overrideHeaders name another method for servers that honour them (Rails, Symfony, Express's
// method-override, Google APIs, ASP.NET): a request is decided as the method they name.
var overrideHeaders = []string{"X-Http-Method-Override", "X-Http-Method", "X-Method-Override"}

// See builds the normalised request that Decide decides and the gate forwards, from what
// arrived: the method in upper case, the hop-by-hop headers and every header Connection names
// removed (a WebSocket upgrade keeps "Connection: Upgrade" and its Upgrade header), the agent
// name taken out of Proxy-Authorization, the scheme, host, path and query of the target, the
// method an override header or a _method parameter names, and what about the shape of the
// request the floor refuses (a scheme other than http and https, origin-form, https:// in a
// plain proxy request, a protocol upgrade other than WebSocket, a request that does not belong
// to its tunnel, override methods that disagree). a.Header is edited in place.
func See(a *Arrival) *Request {
	r := &Request{Kind: a.Kind, Source: a.Source, Container: a.Container, Body: a.Body, BodySize: a.BodySize,
		Transparent: a.Transparent || a.Tunnel != nil && a.Tunnel.Transparent}
	r.Sent = a.Method
	r.Method = canonicalMethod(a.Method)
	h := a.Header
	if h == nil {
		h = http.Header{}
	}
	if !r.Transparent {
		// A transparent connection names no agent: its client did not use the proxy.
		r.Agent = agentName(h)
		if r.Agent == "" && a.Tunnel != nil {
			r.Agent = a.Tunnel.Agent
		}
	}
	if a.HTTP2 {
		// HTTP/2 forbids connection-specific headers (RFC 9113 8.2.2): a request that carries
		// one is malformed, whatever an HTTP/1.1 origin would make of it after a downgrade.
		// (The HTTP/2 server refuses them first; this holds the view to it.)
		if name := h2ConnectionHeader(h); name != "" {
			r.refuse(floorDecision("h2-header", fmt.Sprintf("an HTTP/2 request carries the connection-specific header %s, which HTTP/2 forbids", name)))
		}
	}
	hostHeaders := h.Values("Host")
	delete(h, "Host") // the Host that goes out is the one decided: the tunnel's
	r.Upgrade = stripHop(h)
	r.Header = h
	r.MediaType = mediaType(h)
	if a.Framing != nil {
		d := Framing(a.Framing)
		r.Refusal = &d
		return r
	}
	if a.Kind == Domain {
		r.Authority = a.Host
		if a.Transparent && a.Host == "" {
			r.refuse(decisionNoSNI)
		}
		return r
	}
	u := a.URL
	if u == nil {
		u = &url.URL{Path: "/"}
	}
	r.Path, r.Query, r.UserInfo = u.EscapedPath(), u.RawQuery, u.User != nil
	if r.Upgrade != "" && !IsWebSocket(r.Upgrade) {
		r.refuse(floorDecision("upgrade", fmt.Sprintf("the protocol upgrade to %s is not allowed; only WebSocket upgrades are decided and passed", floor.Shown(r.Upgrade, 40))))
	}
	switch a.Kind {
	case Tunnel:
		r.Scheme = "https"
		if a.Tunnel == nil {
			r.refuse(floorDecision("tunnel-binding", "a decrypted request arrived without its tunnel"))
			return r
		}
		r.Scheme, r.Authority = a.Tunnel.Scheme(), a.Tunnel.Authority()
		if r.Method == "CONNECT" {
			// A CONNECT inside a decrypted tunnel would open a tunnel the gate does not see
			// into: refused on HTTP/2 as package framing refuses it on HTTP/1.1 (an extended
			// CONNECT, RFC 8441, never gets here: the HTTP/2 server does not offer it).
			r.refuse(Framing(&framing.Error{Kind: framing.NestedConnect,
				Reason: "a CONNECT inside the decrypted tunnel to " + a.Tunnel.Authority() + "; tunnels do not nest"}))
		}
		if why := bindingError(u, a.Host, a.Tunnel); why != "" {
			r.refuse(floorDecision("tunnel-binding", why))
		}
		for _, hh := range hostHeaders {
			// HTTP/2: a Host header beside :authority must name the tunnel's host too.
			if why := bindingError(&url.URL{}, hh, a.Tunnel); why != "" {
				r.refuse(floorDecision("tunnel-binding", why))
			}
		}
	case Plain:
		if a.Transparent {
			r.transparent(a, u)
			break
		}
		fallthrough
	default:
		r.Scheme, r.Authority = u.Scheme, u.Host
		switch {
		case !u.IsAbs():
			r.refuse(decisionOriginForm)
		case u.Scheme == "https":
			// https:// in a plain proxy request asks the gate to speak TLS for the client.
			// Clients use CONNECT for that; refusing keeps one path for HTTPS.
			r.refuse(floorDecision("scheme", "a plain proxy request for an https:// URL; send HTTPS through CONNECT"))
		case u.Scheme != "http":
			r.refuse(floorDecision("scheme", fmt.Sprintf("the URL scheme %s is not http or https", floor.Shown(u.Scheme, 16))))
		}
	}
	r.overrides()
	return r
}

// transparent reads a plain request that reached a transparent listener on a.Port: its target is
// http://Host/path. The request line's target is origin-form, or absolute-form naming the Host's
// authority (the framing check refuses one that does not, and two Hosts); the Host must name
// the port the connection came to (80 when it names none): the gate dials what Host names, and
// nothing else.
func (r *Request) transparent(a *Arrival, u *url.URL) {
	r.Scheme, r.Authority = "http", a.Host
	switch {
	case a.Host == "":
		r.refuse(floorDecision("origin-form", "a request to the gate's transparent listener names no host: it needs a Host header"))
		return
	case u.IsAbs() && u.Scheme != "http":
		r.refuse(floorDecision("scheme", fmt.Sprintf("a plain request to the gate's transparent listener names the scheme %s; only http belongs on it", floor.Shown(u.Scheme, 16))))
		return
	case u.IsAbs() && !strings.EqualFold(u.Host, a.Host):
		r.refuse(floorDecision("tunnel-binding", "the request line names another host than the Host header"))
		return
	}
	if _, port, ref := floor.Authority(a.Host, 80); ref == nil && port != a.Port {
		r.refuse(floorDecision("tunnel-binding", fmt.Sprintf("the Host header names port %d; the connection came to port %d", port, a.Port)))
	}
}

// refuse keeps the first refusal.
func (r *Request) refuse(d policy.Decision) {
	if r.Refusal == nil {
		r.Refusal = &d
	}
}

var decisionNoSNI = floorDecision("sni",
	"the TLS ClientHello names no server (SNI) the gate could read: a connection to its transparent listener is decided by the name its ClientHello names")

var decisionOriginForm = floorDecision("origin-form",
	"the request names no host (origin-form); send requests through the gate as an HTTP proxy, with absolute URLs")

func floorDecision(check, reason string) policy.Decision {
	return policy.Decision{Verdict: policy.Deny, Code: policy.CodeFloor, Rule: "floor:" + check, Reason: reason}
}

// canonicalMethod is the method in upper case: an origin may fold "delete" to DELETE, so a rule
// naming DELETE decides every spelling, and what goes out is the spelling that was decided.
func canonicalMethod(m string) string {
	for i := 0; i < len(m); i++ {
		if 'a' <= m[i] && m[i] <= 'z' {
			return strings.ToUpper(m)
		}
	}
	return m
}

// overrides records the method that X-HTTP-Method-Override, its cousins or a _method parameter
// (query, or a form body) name, when it is not the request's own: Decide then decides by both
// methods and the more restrictive decision wins. Names that disagree, or that are not a method
// token, are refused: the gate cannot tell which one the origin honours.
func (r *Request) overrides() {
	var named []string
	for _, k := range overrideHeaders {
		for _, v := range r.Header[k] {
			named = append(named, strings.TrimSpace(v))
		}
	}
	if mayNameMethod(r.Query) {
		named = append(named, formValues(r.Query, "_method")...)
	}
	if r.MediaType == "application/x-www-form-urlencoded" && len(r.Body) > 0 && mayNameMethod(string(r.Body)) {
		named = append(named, formValues(string(r.Body), "_method")...)
	}
	if len(named) == 0 {
		return
	}
	m := ""
	for _, n := range named {
		c := canonicalMethod(n)
		if !isToken(c) {
			r.refuse(floorDecision("method-override", fmt.Sprintf("a method override names %s, which is not a method", floor.Shown(n, 16))))
			return
		}
		if m != "" && c != m {
			r.refuse(floorDecision("method-override", fmt.Sprintf("method overrides name both %s and %s; the gate cannot tell which the origin honours", floor.Shown(m, 16), floor.Shown(c, 16))))
			return
		}
		m = c
	}
	if m != r.Method {
		r.Override = m
	}
}

// mayNameMethod reports whether a form-encoded string may hold a _method parameter: written
// plainly, or with %-escapes the origin decodes (%5Fmethod), so every escaped string is read.
func mayNameMethod(s string) bool {
	return strings.Contains(s, "_method") || strings.Contains(s, "%")
}

// formValues returns the values of name in a form-encoded string.
func formValues(s, name string) []string {
	var out []string
	for s != "" {
		var kv string
		kv, s, _ = strings.Cut(s, "&")
		k, v, _ := strings.Cut(kv, "=")
		if dk, err := url.QueryUnescape(k); err != nil || dk != name {
			continue
		}
		dv, err := url.QueryUnescape(v)
		if err != nil {
			dv = v
		}
		out = append(out, dv)
	}
	return out
}

func isToken(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// h2ConnectionHeaders are the headers RFC 9113 8.2.2 forbids in an HTTP/2 request; TE is
// allowed only as "trailers".
var h2ConnectionHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Transfer-Encoding", "Upgrade"}

// h2ConnectionHeader names the first connection-specific header of h, or "".
func h2ConnectionHeader(h http.Header) string {
	for _, k := range h2ConnectionHeaders {
		if _, ok := h[k]; ok {
			return k
		}
	}
	for _, v := range h["Te"] {
		if !strings.EqualFold(strings.TrimSpace(v), "trailers") {
			return "TE"
		}
	}
	return ""
}

// stripHop removes the hop-by-hop headers and every header Connection names. It returns the
// Upgrade value; a WebSocket upgrade keeps "Connection: Upgrade" and its Upgrade header, and
// loses its offer of extensions.
func stripHop(h http.Header) (upgrade string) {
	upgrade = h.Get("Upgrade")
	RemoveHop(h)
	if upgrade != "" && IsWebSocket(upgrade) {
		h.Set("Connection", "Upgrade")
		h.Set("Upgrade", upgrade)
		// The gate reads every message of the session (DecideMessage): no extension
		// (permessage-deflate) is offered to the origin, so none can hide them.
		delete(h, "Sec-Websocket-Extensions")
	}
	return upgrade
}

// RemoveHop removes the hop-by-hop headers and every header Connection names, from a request
// (See) or an origin's answer (the gate).
func RemoveHop(h http.Header) {
	for _, v := range h["Connection"] {
		for _, tok := range strings.Split(v, ",") {
			if tok = textproto.TrimString(tok); tok != "" {
				h.Del(tok)
			}
		}
	}
	for _, k := range hopHeaders {
		delete(h, k)
	}
}

// IsWebSocket reports whether an Upgrade value asks for WebSocket.
func IsWebSocket(upgrade string) bool {
	return strings.EqualFold(strings.TrimSpace(upgrade), "websocket")
}

// bindingError says why a request inside a tunnel does not belong to it, or "".
func bindingError(u *url.URL, hostHeader string, tun *Binding) string {
	if u.IsAbs() {
		if u.Scheme != tun.Scheme() {
			return fmt.Sprintf("a request inside the tunnel to %s names the scheme %s; only %s belongs in it", floor.Shown(tun.Authority(), floor.MaxShown), floor.Shown(u.Scheme, 16), tun.Scheme())
		}
		host, port, ref := floor.Authority(u.Host, tun.defaultPort())
		if ref != nil || host != tun.Host || port != tun.Port {
			return fmt.Sprintf("a request inside the tunnel to %s names another host or port; every request in a tunnel must go to its host and port", floor.Shown(tun.Authority(), floor.MaxShown))
		}
	}
	host, port, ref := floor.Authority(hostHeader, tun.defaultPort())
	if ref != nil || host != tun.Host || port != tun.Port {
		return fmt.Sprintf("the Host header inside the tunnel to %s names another host or port", floor.Shown(tun.Authority(), floor.MaxShown))
	}
	return ""
}

// agentName reads the agent's name from Proxy-Authorization (Basic, the user name), for the
// audit only: the source address, not this header, says which container sent a request.
func agentName(h http.Header) string {
	v := h.Get("Proxy-Authorization")
	if v == "" {
		return ""
	}
	scheme, cred, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return ""
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	if err != nil {
		return ""
	}
	user, _, _ := strings.Cut(string(raw), ":")
	return sanitizeName(user)
}

// sanitizeName keeps a printable ASCII name of at most 64 bytes, with what looks like a
// credential hidden (an agent's proxy user name may be a token).
func sanitizeName(s string) string {
	if len(s) > 64 {
		s = s[:64]
	}
	s = floor.HideTokens(secrets.MaskText(s))
	return strings.Map(func(r rune) rune {
		if r <= ' ' || r >= 0x7f {
			return '_'
		}
		return r
	}, s)
}

// mediaType is the Content-Type's media type, lower case.
func mediaType(h http.Header) string {
	ct := h.Get("Content-Type")
	if ct == "" {
		return ""
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return strings.ToLower(strings.TrimSpace(ct))
	}
	return mt
}
