package gate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/lockhttp/lockhttp/internal/clienthello"
	"github.com/lockhttp/lockhttp/internal/connlimit"
	"github.com/lockhttp/lockhttp/internal/egress"
	"github.com/lockhttp/lockhttp/internal/framing"
	"github.com/lockhttp/lockhttp/internal/judge"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/signerclient"
	"github.com/lockhttp/lockhttp/internal/transport"
)

// The transparent listeners. A client that ignores the proxy variables resolves its host through
// the gate's DNS (package dnsanswer), which answers the gate's own address, or has its traffic
// sent there by the agent's network (lox run's enclosure), and connects to it as if it were the
// origin. Its original destination is unknown to the gate and never used: a connection is
// decided by what it names, its TLS ClientHello's server name, or each request's Host.
//
// Every port of the policy's allow_ports (and 80 and 443) is served on the transparent address,
// following policy changes; the first byte tells TLS (0x16) from plain HTTP.

// TransparentListen says where the transparent listeners are.
type TransparentListen struct {
	// Addr is the transparent address (for the log).
	Addr netip.Addr
	// Skip are ports of Addr served by something else: the proxy, DNS.
	Skip []int
	// Listen listens on a TCP port of Addr.
	Listen func(port int) (net.Listener, error)
}

// transparentPorts are served whatever the policy's allow_ports.
var transparentPorts = []int{80, 443}

// helloTimeout bounds how long a client on a transparent listener may take to send its first
// byte and then its whole ClientHello.
const helloTimeout = 15 * time.Second

// ServeTransparent serves the transparent listeners until ctx ends: 80 and 443 at once (an
// error when either cannot listen), then every port of each policy's allow_ports as the policy
// changes (one that cannot listen is logged, and tried again at the next policy). Connections
// are bounded as the proxy's are (Config's MaxConns and MaxConnsPerSource, over all the
// transparent ports together).
func (g *Gate) ServeTransparent(ctx context.Context, t TransparentListen) error {
	fan := transport.NewFanIn()
	defer fan.Close()
	open := map[int]net.Listener{}
	sync := func(first bool) error {
		want := slices.Clone(transparentPorts)
		if pol := g.pol.Load(); pol != nil {
			want = append(want, pol.Floor.AllowPorts...)
		}
		for port, l := range open {
			if !slices.Contains(want, port) {
				l.Close()
				delete(open, port)
				g.log.Info("transparent: stopped listening (no longer in allow_ports)", "addr", t.Addr.String(), "port", port)
			}
		}
		for _, port := range want {
			if _, ok := open[port]; ok || slices.Contains(t.Skip, port) {
				continue
			}
			l, err := t.Listen(port)
			if err != nil {
				if first && slices.Contains(transparentPorts, port) {
					return fmt.Errorf("transparent listener on %s: %w", net.JoinHostPort(t.Addr.String(), strconv.Itoa(port)), err)
				}
				g.log.Error("transparent: cannot listen; tried again at the next policy", "addr", t.Addr.String(), "port", port, "err", err)
				continue
			}
			open[port] = l
			fan.Add(l)
		}
		ports := make([]int, 0, len(open))
		for port := range open {
			ports = append(ports, port)
		}
		slices.Sort(ports)
		g.transparentPorts.Store(&ports)
		return nil
	}
	if err := sync(true); err != nil {
		return err
	}
	cl := connlimit.New(fan, connlimit.Config{Max: orInt(g.cfg.MaxConns, defaultMaxConns), PerPeer: orInt(g.cfg.MaxConnsPerSource, defaultMaxConnsPerSource),
		Key: sourceKey, Log: g.log, Name: "gate-transparent"})
	conns := transport.NewH1Conns()
	errc := make(chan error, 1)
	go func() {
		for {
			c, err := cl.Accept()
			if err != nil {
				errc <- err
				return
			}
			go g.serveTransparentConn(c, conns)
		}
	}()
	for {
		select {
		case <-ctx.Done():
			cl.Close()
			<-errc
			conns.Shutdown(5 * time.Second)
			g.closeTunnels()
			return nil
		case err := <-errc:
			return err
		case <-g.policyChanged:
			sync(false)
		}
	}
}

// serveTransparentConn serves one connection to a transparent listener: TLS when its first byte
// is a handshake record's, plain HTTP otherwise.
func (g *Gate) serveTransparentConn(c net.Conn, conns *transport.H1Conns) {
	port := 0
	if ap, err := netip.ParseAddrPort(c.LocalAddr().String()); err == nil {
		port = int(ap.Port())
	}
	ci := &connInfo{transparent: port}
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		ci.source = ap.Addr().Unmap()
	}
	if port == 0 {
		c.Close()
		return
	}
	c.SetReadDeadline(time.Now().Add(helloTimeout))
	var first [1]byte
	if _, err := io.ReadFull(c, first[:]); err != nil {
		c.Close() // nothing sent: no request to record
		return
	}
	rc := transport.NewReplayConn(c, first[:])
	if first[0] == 0x16 {
		g.serveTransparentTLS(rc, ci)
		return
	}
	c.SetReadDeadline(time.Time{}) // the server sets its own
	fc := framing.NewConn(rc, framing.Options{Tunnel: true, Token: transport.NewToken()})
	ci.fc = fc
	g.serveH1(fc, ci, http.HandlerFunc(g.serveTransparent), conns, func() {})
}

// serveTransparent hands a plain request of a transparent listener to the proxy, where it is
// decided like any other: its target as sent is kept for the decision (judge.See reads it with
// the Host, which must name the listener's port), and its URL made absolute, http://Host/...,
// for the proxy. A head the framing check refused (two Hosts, none, a request line that
// contradicts the Host, a CONNECT) is refused.
func (g *Gate) serveTransparent(w http.ResponseWriter, r *http.Request) {
	ci := infoFrom(r.Context())
	if ci.fc != nil && ci.fc.Refusal(r) != nil || r.Method == http.MethodConnect {
		g.serveNonProxy(w, r)
		return
	}
	sent := *r.URL
	r = r.WithContext(context.WithValue(r.Context(), sentTargetKey{}, &sent))
	if !r.URL.IsAbs() {
		r.URL.Scheme, r.URL.Host = "http", r.Host
	}
	g.serveProxy(w, r)
}

// serveTransparentTLS reads the ClientHello of a TLS connection to a transparent listener and
// decides it as a CONNECT to its server name and the listener's port, by the same judge.See and
// judge.Decide: decrypted (the hello replayed into the gate's TLS server, whose SNI check then
// holds by construction), refused inside the TLS connection when the policy refuses the whole
// host, spliced to the name the gate resolves itself when the policy says so, or refused with a
// TLS alert. A hello with no server name the gate can read is refused (floor:sni).
func (g *Gate) serveTransparentTLS(c *transport.ReplayConn, ci *connInfo) {
	raw, hello, herr := clienthello.Read(c)
	if errors.Is(herr, io.EOF) {
		c.Close()
		return
	}
	authority := ""
	if herr == nil && hello.ServerName != "" {
		authority = net.JoinHostPort(hello.ServerName, strconv.Itoa(ci.transparent))
	}
	ctx := context.WithValue(context.Background(), connInfoKey{}, ci)
	r := (&http.Request{Method: http.MethodConnect, Host: authority, URL: &url.URL{Host: authority},
		Header: http.Header{}, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}).WithContext(ctx)
	ex := g.newExchange(r, "connect")
	if authority == "" {
		ex.rec.URL = ":" + strconv.Itoa(ci.transparent)
	}
	if herr != nil {
		ex.rec.Detail = herr.Error()
	}
	pol := g.pol.Load()
	a := g.arrival(r)
	a.Kind, a.URL = judge.Domain, nil
	v := judge.See(a)
	res := g.decide(g.env(pol), v, ex.rec.Event)
	g.decided(ex, v, res, pol)
	c.Replay(raw) // replayed to whoever reads the connection next
	refuse := func(d policy.Decision, alert byte, detail string) {
		if d != res.Decision {
			ex.refused(d, pol)
		}
		ex.finishSync(ctx, 0, detail)
		c.Write([]byte{0x15, 3, 3, 0, 2, 2, alert}) // a fatal TLS alert
		c.Close()
	}
	if res.Verdict == policy.Deny && !res.Intercept {
		alert := byte(49) // access_denied
		if res.Rule == "floor:sni" {
			alert = 112 // unrecognized_name
		}
		refuse(res.Decision, alert, orText(ex.rec.Detail, "refused with a TLS alert: a connection to a transparent listener has no HTTP status to carry it"))
		return
	}
	if res.Intercept {
		if g.certs == nil {
			refuse(judge.DecisionNoSigner, 80, "no signer") // internal_error
			return
		}
		cert, err := g.certs.Certificate(ctx, res.Host)
		if err != nil {
			d := res.Decision
			if res.Verdict != policy.Deny {
				d = judge.DecisionNoSigner
				var refused *signerclient.RefusedError
				if errors.As(err, &refused) {
					d = judge.Unsignable(res.Host, refused.Reason)
				}
			}
			g.log.Warn("signer: no certificate", logID, ex.rec.ID, "host", res.Host, "err", err)
			alert := byte(80) // internal_error: the gate cannot serve the host now
			if res.Verdict == policy.Deny {
				alert = 49 // access_denied: the policy's refusal, without a certificate to say it inside
			}
			refuse(d, alert, "refused with a TLS alert, without a certificate: "+err.Error())
			return
		}
		g.trackTunnel(c, true)
		t := &tunnelConn{g: g, client: c, cc: transport.NewCountConn(c, c.Reader())}
		c.SetReadDeadline(time.Now().Add(handshakeTimeout))
		fail := g.handshake(ctx, t, res.Host, "the name the gate decided", cert, pol.Settings.HTTP2)
		if fail != nil && fail.kind == openGone {
			fail.status = 0
		}
		if res.Verdict == policy.Deny {
			g.answerInTunnel(ex, res, pol, t, fail)
			return
		}
		g.serveOpened(ex, res, pol, t, fail)
		return
	}
	// Decided at the domain (a splice host): the gate dials the name it resolves itself, sends
	// the ClientHello on, and copies both ways.
	ex.target = egress.Target{Host: res.Host, Port: res.Port, Floor: &pol.Floor}
	c.SetReadDeadline(time.Time{})
	if res.Verdict == policy.Ask {
		if d := g.askConnect(r, ex, res, pol); d != nil {
			refuse(*d, 49, "")
			return
		}
	}
	if d, ok := g.intend(ctx, ex); !ok {
		refuse(d, 80, "") // internal_error
		return
	}
	up, err := g.dialer.Dial(ctx, ex.target)
	if err != nil {
		var refused *egress.RefusedError
		if errors.As(err, &refused) {
			refuse(judge.Address(refused.Refusal), 49, "")
			return
		}
		ex.finish(http.StatusBadGateway, 0, err.Error())
		c.Write([]byte{0x15, 3, 3, 0, 2, 2, 80})
		c.Close()
		return
	}
	in, out := g.splice(c, nil, up)
	ex.bytesIn.Store(in)
	g.budgetSent(pol, res, in)
	ex.finish(http.StatusOK, out, "")
}

func orText(s, def string) string {
	if s != "" {
		return s
	}
	return def
}
