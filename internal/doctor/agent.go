package doctor

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lockhttp/lockhttp/internal/floor"
	"github.com/lockhttp/lockhttp/internal/gate"
)

// Outside addresses for the route checks: documentation prefixes (RFC 5737, RFC 3849). A UDP
// "connect" only asks the kernel for a route; no packet is sent to them.
const (
	routeProbe4 = "192.0.2.1:9"
	routeProbe6 = "[2001:db8::1]:9"
	// tcpProbe6 is an outside IPv6 address an agent must not connect to.
	tcpProbe6 = "[2001:db8::1]:443"
)

// udpProbe starts each datagram the probe sends to this machine, followed by the doctor's
// nonce and the target: the doctor reads them on its socket.
const udpProbe = "lockhttp-doctor "

// AgentProbe says what to try from inside the agent network.
type AgentProbe struct {
	// Direct are host:port targets outside the agent network to connect to directly (the gate's
	// address on its egress network, an origin); What names each for the report.
	Direct []Direct
	// Host are host:port targets on this machine (the agent network's gateway).
	Host []Direct
	// Peers are host:port targets at the other agents' addresses on the agent network.
	Peers []Direct
	// UDP are host:port targets on this machine to send one datagram each (udpProbe, Nonce, the
	// target); the doctor listening there tells which arrived.
	UDP   []Direct
	Nonce string
	// Transparent asks http://lockhttp.internal/ ignoring the proxy, its name resolved by the
	// container's resolver: the gate's transparent listener answers it.
	Transparent bool
	// DNSName is an outside name to look up ("" skips the check).
	DNSName string
	// ProcNet is /proc/net, or a test's copy.
	ProcNet string
	Timeout time.Duration
}

// ProbeAgent runs the agent network's checks from where it runs: it must run on that network.
func ProbeAgent(ctx context.Context, p AgentProbe) *AgentFacts {
	if p.ProcNet == "" {
		p.ProcNet = "/proc/net"
	}
	if p.Timeout == 0 {
		p.Timeout = 3 * time.Second
	}
	a := &AgentFacts{DNSName: p.DNSName}
	var err4, err6 error
	a.DefaultRoute4, err4 = defaultRoute4(p.ProcNet + "/route")
	a.DefaultRoute6, err6 = defaultRoute6(p.ProcNet + "/ipv6_route")
	if err := errors.Join(err4, err6); err != nil && !errors.Is(err6, os.ErrNotExist) {
		a.RoutesErr = err.Error()
	}
	a.Route4, a.Route4Err = udpRoute("udp4", routeProbe4)
	a.Route6, a.Route6Err = udpRoute("udp6", routeProbe6)
	// The connections and the lookup at once: each that is dropped waits for the timeout.
	a.Direct, a.Host, a.Peers = make([]Direct, len(p.Direct)), make([]Direct, len(p.Host)), make([]Direct, len(p.Peers))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	try := func(into []Direct, i int, d Direct) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			d.Reached, d.Err = tcpReach(ctx, d.Target, p.Timeout)
			into[i] = d
		}()
	}
	for i, d := range p.Direct {
		try(a.Direct, i, d)
	}
	for i, d := range p.Host {
		try(a.Host, i, d)
	}
	for i, d := range p.Peers {
		try(a.Peers, i, d)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.TCP6 = Direct{Target: tcpProbe6, What: "an outside IPv6 address"}
		a.TCP6.Reached, a.TCP6.Err = tcpReach(ctx, tcpProbe6, p.Timeout)
	}()
	for _, d := range p.UDP {
		d.Err = sendUDP(d.Target, udpProbe+p.Nonce+" "+d.Target)
		a.UDP = append(a.UDP, d)
	}
	if p.Transparent {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.Transparent, a.TransparentErr = transparentSelf(ctx, p.Timeout)
		}()
	}
	if p.DNSName != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lctx, cancel := context.WithTimeout(ctx, p.Timeout)
			addrs, err := net.DefaultResolver.LookupHost(lctx, p.DNSName)
			cancel()
			if err != nil {
				a.DNSErr = err.Error()
			}
			a.DNSAddrs = addrs
		}()
	}
	wg.Wait()
	return a
}

// sendUDP sends one datagram to target; the error's text, or "".
func sendUDP(target, payload string) string {
	c, err := net.Dial("udp4", target)
	if err != nil {
		return errText(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(payload)); err != nil {
		return errText(err)
	}
	return ""
}

// transparentSelf asks for the gate's own name as a client that ignores the proxy: the name
// resolved by the container's resolver (the gate's DNS answers its transparent address), the
// request sent there.
func transparentSelf(ctx context.Context, timeout time.Duration) (*gate.SelfAnswer, string) {
	c := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}, Timeout: 2 * timeout}
	ans, err := selfGet(ctx, c, "http://"+floor.SelfName+"/")
	if err != nil {
		return nil, errText(err)
	}
	return ans, ""
}

// udpRoute reports whether the kernel has a route to addr.
func udpRoute(network, addr string) (bool, string) {
	c, err := net.Dial(network, addr)
	if err != nil {
		return false, errText(err)
	}
	c.Close()
	return true, ""
}

// tcpReach connects to target: reached when it connects or a host there refuses it.
func tcpReach(ctx context.Context, target string, timeout time.Duration) (bool, string) {
	d := net.Dialer{Timeout: timeout}
	c, err := d.DialContext(ctx, "tcp", target)
	if err == nil {
		c.Close()
		return true, "connected"
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return true, "refused by a host that was reached"
	}
	return false, errText(err)
}

// errText is the innermost error's text: "network is unreachable" rather than the dial chain.
func errText(err error) string {
	var se *os.SyscallError
	if errors.As(err, &se) {
		return se.Err.Error()
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timed out"
	}
	return err.Error()
}

// defaultRoute4 reads /proc/net/route for a default route.
func defaultRoute4(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 8 {
			continue
		}
		if fs[1] == "00000000" && fs[7] == "00000000" {
			return true, nil
		}
	}
	return false, sc.Err()
}

// rtfReject marks a route that refuses (an "unreachable" default route).
const rtfReject = 0x0200

// defaultRoute6 reads /proc/net/ipv6_route for a default route that is not a reject route.
func defaultRoute6(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 10 {
			continue
		}
		if fs[0] != strings.Repeat("0", 32) || fs[1] != "00" || fs[9] == "lo" {
			continue
		}
		flags, _ := strconv.ParseUint(fs[8], 16, 32)
		if flags&rtfReject == 0 {
			return true, nil
		}
	}
	return false, sc.Err()
}
