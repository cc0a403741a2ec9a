package doctor

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/lockhttp/lockhttp/internal/enclosure"
	"github.com/lockhttp/lockhttp/internal/stack"
)

// enclosureTimeout bounds each attempt from inside the enclosure: the rules refuse at once, so
// a timeout is itself a finding.
const enclosureTimeout = 2 * time.Second

// enclosureDNSName is the outside name the doctor asks a resolver that is not the gate's for.
const enclosureDNSName = "example.com"

// ProbeEnclosure examines the network enclosure of the agent lox run -- started (process pid,
// up.json's enclosure u, nil when it names none): whether the agent has a network namespace of
// its own, what its /etc/resolv.conf names and which host resolver sockets it can see, and,
// from inside the namespace (setns on a locked thread), whether the gate's proxy answers and a
// TCP connection to another port of a host address, a UDP datagram, an IPv6 connection and a
// DNS query to a resolver that is not the gate each fail or land at the gate. The doctor's own
// listeners outside the namespace tell whether anything got out.
func ProbeEnclosure(pid int, u *stack.UpEnclosure) *EnclosureFacts {
	f := &EnclosureFacts{Agent: true, PID: pid}
	if u != nil {
		f.Link, f.Gate, f.Address = u.Link, u.Gate, u.Agent
		if pu, err := url.Parse(u.Proxy); err == nil {
			f.Proxy = pu.Host
		}
	}
	if os.Geteuid() != 0 {
		f.Err = "entering the agent's network namespace needs root (the state directory is root's too): run sudo lockhttp doctor"
		return f
	}
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		f.Err = fmt.Sprintf("the agent's process %d: %v", pid, errText(err))
		return f
	}
	self, _ := os.Readlink("/proc/self/ns/net")
	f.Namespace, f.SameNamespace = ns, ns == self
	if f.SameNamespace || u == nil {
		return f
	}
	root := fmt.Sprintf("/proc/%d/root", pid)
	f.Resolvers, f.ResolvErr = nameservers(root + "/etc/resolv.conf")
	for _, s := range enclosure.MaskedSockets {
		if _, err := os.Lstat(root + s); err == nil {
			f.Sockets = append(f.Sockets, s)
		}
	}
	gate, _ := netip.ParseAddr(u.Gate)
	host4, host6 := outsideAddrs()
	l := &outsideListeners{}
	defer l.close()
	type plan struct {
		kind, target string
		try          func(string) EnclosureProbe
	}
	var plans []plan
	if f.Proxy != "" {
		plans = append(plans, plan{"gate", f.Proxy, probeTCP})
	}
	for _, a := range []netip.Addr{host4, gate} {
		if a.IsValid() {
			plans = append(plans, plan{"tcp", l.tcp(a), probeTCP})
		}
	}
	if a := firstValid(host4, gate); a.IsValid() {
		plans = append(plans, plan{"udp", l.udp(a, 0), probeUDP})
	}
	if host6.IsValid() {
		plans = append(plans, plan{"ipv6", l.tcp(host6), probeTCP})
	} else {
		plans = append(plans, plan{"ipv6", "[2001:db8::1]:9", probeTCP})
	}
	if resolver := l.resolver(host4); resolver != "" {
		plans = append(plans, plan{"dns", resolver, func(t string) EnclosureProbe { return probeDNS(t, gate) }})
	}
	err = enclosure.InNamespace(pid, func() error {
		for _, p := range plans {
			pr := p.try(p.target)
			pr.Kind, pr.Target = p.kind, p.target
			f.Probes = append(f.Probes, pr)
		}
		return nil
	})
	if err != nil {
		f.Err = err.Error()
		return f
	}
	for i := range f.Probes {
		f.Probes[i].Seen = l.seen(f.Probes[i].Target)
	}
	return f
}

func firstValid(as ...netip.Addr) netip.Addr {
	for _, a := range as {
		if a.IsValid() {
			return a
		}
	}
	return netip.Addr{}
}

// nameservers reads the nameserver lines of a resolv.conf.
func nameservers(path string) ([]string, string) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, errText(err)
	}
	defer fh.Close()
	var out []string
	sc := bufio.NewScanner(io.LimitReader(fh, 64<<10))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 2 && f[0] == "nameserver" {
			out = append(out, f[1])
		}
	}
	return out, ""
}

// outsideAddrs are this machine's first IPv4 and IPv6 addresses outside the loopback, the
// link-local range and the enclosures' links: where an agent would reach the host directly.
func outsideAddrs() (v4, v6 netip.Addr) {
	ifs, _ := net.Interfaces()
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 || strings.HasPrefix(ifc.Name, "lox-") {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			p, err := netip.ParsePrefix(a.String())
			if err != nil || p.Addr().IsLinkLocalUnicast() {
				continue
			}
			switch ip := p.Addr(); {
			case ip.Is4() && !v4.IsValid():
				v4 = ip
			case ip.Is6() && !v6.IsValid():
				v6 = ip
			}
		}
	}
	return v4, v6
}

// outsideListeners are the doctor's listeners outside the enclosure; each logs what reaches it.
type outsideListeners struct {
	mu      sync.Mutex
	hits    map[string]bool
	closers []io.Closer
}

func (l *outsideListeners) hit(addr string) {
	l.mu.Lock()
	if l.hits == nil {
		l.hits = map[string]bool{}
	}
	l.hits[addr] = true
	l.mu.Unlock()
}

func (l *outsideListeners) seen(addr string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.hits[addr]
}

func (l *outsideListeners) close() {
	for _, c := range l.closers {
		c.Close()
	}
}

// tcp listens on a free port of a; "" when it cannot.
func (l *outsideListeners) tcp(a netip.Addr) string {
	ln, err := net.Listen("tcp", netip.AddrPortFrom(a, 0).String())
	if err != nil {
		return netip.AddrPortFrom(a, 9).String() // nothing listens: still a target
	}
	l.closers = append(l.closers, ln)
	addr := ln.Addr().String()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l.hit(addr)
			c.Close()
		}
	}()
	return addr
}

// udp listens on port of a (0: a free one); "" when it cannot.
func (l *outsideListeners) udp(a netip.Addr, port uint16) string {
	pc, err := net.ListenPacket("udp", netip.AddrPortFrom(a, port).String())
	if err != nil {
		return ""
	}
	l.closers = append(l.closers, pc)
	addr := pc.LocalAddr().String()
	go func() {
		buf := make([]byte, 512)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
			l.hit(addr)
		}
	}()
	return addr
}

// resolver is a resolver that is not the gate's for the DNS probe: port 53 of the host address,
// where the doctor listens as a stand-in when it can (so that a query that got out is seen; when
// another server of this machine has the port, its answer tells), else, on a machine with no
// such address, this machine's own resolver when it is outside the loopback; "" when there is
// none.
func (l *outsideListeners) resolver(host4 netip.Addr) string {
	if host4.IsValid() {
		if a := l.udp(host4, 53); a != "" {
			return a
		}
		return netip.AddrPortFrom(host4, 53).String()
	}
	ns, _ := nameservers("/etc/resolv.conf")
	for _, n := range ns {
		if a, err := netip.ParseAddr(n); err == nil && a.Is4() && !a.IsLoopback() {
			return netip.AddrPortFrom(a, 53).String()
		}
	}
	return ""
}

// outcomeOf names how an attempt ended.
func outcomeOf(err error) string {
	switch {
	case err == nil:
		return "connected"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES):
		return "not permitted"
	case errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.EADDRNOTAVAIL):
		return "unreachable"
	}
	return errText(err)
}

// The probes run on the thread that joined the agent's namespace: each opens its socket itself,
// on the calling goroutine.

func probeTCP(target string) EnclosureProbe {
	start := time.Now()
	c, err := net.DialTimeout("tcp", target, enclosureTimeout)
	p := EnclosureProbe{Outcome: outcomeOf(err), Took: time.Since(start)}
	if c != nil {
		c.Close()
	}
	return p
}

func probeUDP(target string) EnclosureProbe {
	start := time.Now()
	c, err := net.Dial("udp", target)
	if err == nil {
		defer c.Close()
		if _, err = c.Write([]byte("lockhttp doctor")); err == nil {
			c.SetReadDeadline(time.Now().Add(enclosureTimeout))
			_, err = c.Read(make([]byte, 64))
		}
	}
	p := EnclosureProbe{Outcome: outcomeOf(err), Took: time.Since(start)}
	if err == nil {
		p.Outcome = "answered"
	}
	return p
}

func probeDNS(target string, gate netip.Addr) EnclosureProbe {
	start := time.Now()
	p := EnclosureProbe{}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 0x2727, RecursionDesired: true})
	b.StartQuestions()
	b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(enclosureDNSName + "."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
	q, _ := b.Finish()
	c, err := net.Dial("udp", target)
	var answer []byte
	if err == nil {
		defer c.Close()
		if _, err = c.Write(q); err == nil {
			c.SetReadDeadline(time.Now().Add(enclosureTimeout))
			buf := make([]byte, 1500)
			var n int
			n, err = c.Read(buf)
			answer = buf[:n]
		}
	}
	p.Took = time.Since(start)
	if err != nil {
		p.Outcome = outcomeOf(err)
		return p
	}
	p.Outcome = "answered"
	var m dnsmessage.Message
	if m.Unpack(answer) != nil {
		p.Outcome = "answered with a message that is not DNS"
		return p
	}
	at := len(m.Answers) > 0
	for _, rr := range m.Answers {
		if a, ok := rr.Body.(*dnsmessage.AResource); ok {
			ip := netip.AddrFrom4(a.A)
			p.Answer = append(p.Answer, ip.String())
			at = at && ip == gate
		} else {
			at = false
		}
	}
	p.AtGate = at && bytes.Equal(q[:2], answer[:2])
	return p
}
