package enclosure

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	netlink0 "github.com/mdlayher/netlink"
	"github.com/mdlayher/netlink/nltest"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// requireRoot skips a test that makes namespaces and links unless it runs as root, except
// under CI=true, where .ci/run runs the tests as root.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("this test makes a network namespace and must run as root; .ci/run runs it so")
		}
		t.Skip("needs root: it makes a network namespace, a veth pair and nftables rules")
	}
}

// testSubnet keeps the tests' enclosures apart from those of a lox running on the machine.
var testSubnet = netip.MustParsePrefix("198.18.200.0/24")

func open(t *testing.T, cfg Config) *Enclosure {
	t.Helper()
	if !cfg.Subnet.IsValid() {
		cfg.Subnet = testSubnet
	}
	e, err := Create(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Error(err)
		}
	})
	return e
}

// hostAddr is an IPv4 address of this machine that is not the loopback: what an agent would
// dial to reach the host's services directly.
func hostAddr(t *testing.T) netip.Addr {
	t.Helper()
	addrs, err := netlink.AddrList(nil, unix.AF_INET)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		ip, _ := netip.AddrFromSlice(a.IP.To4())
		if !ip.IsLoopback() && !testSubnet.Contains(ip) && !DefaultSubnet.Contains(ip) && a.Flags&unix.IFA_F_TENTATIVE == 0 {
			if l, err := netlink.LinkByIndex(a.LinkIndex); err == nil && l.Attrs().Flags&net.FlagUp != 0 && l.Attrs().OperState == netlink.OperUp {
				return ip
			}
		}
	}
	t.Skip("this machine has no IPv4 address outside the loopback")
	return netip.Addr{}
}

// listener counts what reaches it: TCP connections accepted, UDP datagrams read.
type listener struct {
	addr string
	mu   sync.Mutex
	hits []string
}

func (l *listener) hit(what string) {
	l.mu.Lock()
	l.hits = append(l.hits, what)
	l.mu.Unlock()
}

func (l *listener) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.hits)
}

func listenTCP(t *testing.T, addr string) *listener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	l := &listener{addr: ln.Addr().String()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l.hit(c.RemoteAddr().String())
			c.Write([]byte("hello\n"))
			c.Close()
		}
	}()
	return l
}

func listenUDP(t *testing.T, addr string) *listener {
	t.Helper()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	l := &listener{addr: pc.LocalAddr().String()}
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			l.hit(from.String())
			pc.WriteTo(buf[:n], from)
		}
	}()
	return l
}

func port(t *testing.T, addr string) uint16 {
	t.Helper()
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return ap.Port()
}

// dialTCP connects from the calling thread (in the enclosure) and says how it ended.
func dialTCP(target string) (string, error) {
	c, err := net.DialTimeout("tcp", target, 3*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	return string(buf[:n]), err
}

// exchangeUDP sends one datagram and waits for the answer or the refusal.
func exchangeUDP(target string) (string, error) {
	c, err := net.Dial("udp", target)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if _, err := c.Write([]byte("ping")); err != nil {
		return "", err
	}
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	return string(buf[:n]), err
}

func refused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// failsAtOnce says whether err is a refusal the kernel gives at once: a reset or
// port-unreachable (refused), a packet the rules dropped as it was sent (not permitted), no
// IPv6 address or route (cannot assign, unreachable). A timeout is none of them.
func failsAtOnce(err error) bool {
	for _, e := range []error{syscall.ECONNREFUSED, syscall.EPERM, syscall.EADDRNOTAVAIL, syscall.ENETUNREACH} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// TestEnclosureRules: from inside the namespace, a connection to any address on a redirected
// port lands at the gate's address, as do DNS queries to any resolver; the gate's proxy port is
// open; another port of a host address, UDP and IPv6 fail at once, never reaching the host's
// listeners; and the host's own rules hold by themselves: with the agent's rules gone, the
// link still reaches only the gate's ports.
func TestEnclosureRules(t *testing.T) {
	requireRoot(t)
	host := hostAddr(t)
	e := open(t, Config{})
	// Flows an earlier enclosure at this address left in this machine's tracking (they expire
	// in minutes) are not this one's.
	stale := &netlink.ConntrackFilter{}
	stale.AddIP(netlink.ConntrackOrigSrcIP, e.Agent.AsSlice())
	netlink.ConntrackDeleteFilters(netlink.ConntrackTable, unix.AF_INET, stale)
	if !e.Prefix.Contains(e.Gate) || !e.Prefix.Contains(e.Agent) || e.Prefix.Bits() != 30 {
		t.Fatalf("addresses %s %s in %s", e.Gate, e.Agent, e.Prefix)
	}
	// The gate's stand-ins on its address (the proxy, port 80, DNS), the host's other
	// listeners on its own address and on the gate's, which the agent must not reach.
	proxy := listenTCP(t, net.JoinHostPort(e.Gate.String(), "0"))
	web := listenTCP(t, net.JoinHostPort(e.Gate.String(), "80"))
	dns := listenUDP(t, net.JoinHostPort(e.Gate.String(), "53"))
	sshd := listenTCP(t, net.JoinHostPort(host.String(), "0"))
	hostUDP := listenUDP(t, net.JoinHostPort(host.String(), "0"))
	gateOther := listenTCP(t, net.JoinHostPort(e.Gate.String(), "0"))
	if err := e.SetRules(Ports{Proxy: port(t, proxy.addr), Redirected: []uint16{80, 443}}); err != nil {
		t.Fatal(err)
	}
	type probe struct {
		name string
		try  func() (string, error)
		ok   func(string, error) bool
	}
	fastFail := func(s string, err error) bool { return failsAtOnce(err) }
	probes := []probe{
		{"the gate's proxy port", func() (string, error) { return dialTCP(proxy.addr) }, func(s string, err error) bool { return err == nil && s == "hello\n" }},
		{"port 80 of a host address, redirected to the gate", func() (string, error) { return dialTCP(net.JoinHostPort(host.String(), "80")) }, func(s string, err error) bool { return err == nil && s == "hello\n" }},
		{"port 80 of an outside address, redirected to the gate", func() (string, error) { return dialTCP("203.0.113.27:80") }, func(s string, err error) bool { return err == nil && s == "hello\n" }},
		{"DNS to a host address, redirected to the gate", func() (string, error) { return exchangeUDP(net.JoinHostPort(host.String(), "53")) }, func(s string, err error) bool { return err == nil && s == "ping" }},
		{"another TCP port of a host address", func() (string, error) { return dialTCP(sshd.addr) }, fastFail},
		{"another TCP port of the gate's address", func() (string, error) { return dialTCP(gateOther.addr) }, fastFail},
		{"UDP to a host address", func() (string, error) { return exchangeUDP(hostUDP.addr) }, fastFail},
		{"UDP to the gate's address on another port", func() (string, error) { return exchangeUDP(net.JoinHostPort(e.Gate.String(), "5353")) }, fastFail},
		{"IPv6", func() (string, error) { return dialTCP("[2001:db8::1]:80") }, fastFail},
		{"the host's loopback is not the agent's", func() (string, error) { return dialTCP(net.JoinHostPort("127.0.0.1", fmt.Sprint(port(t, proxy.addr)))) }, fastFail},
	}
	for _, p := range probes {
		t.Run(p.name, func(t *testing.T) {
			var s string
			var perr error
			start := time.Now()
			if err := e.Inside(func() error { s, perr = p.try(); return nil }); err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			if !p.ok(s, perr) {
				t.Errorf("got %q, %v (after %s)", s, perr, took)
			}
		})
	}
	if sshd.count()+hostUDP.count()+gateOther.count() != 0 {
		t.Errorf("the host's other listeners were reached: %v %v %v", sshd.hits, hostUDP.hits, gateOther.hits)
	}
	if web.count() != 2 || dns.count() != 1 {
		t.Errorf("the gate's stand-ins saw %v (port 80) and %v (DNS)", web.hits, dns.hits)
	}
	for _, h := range append(web.hits, proxy.hits...) {
		if !strings.HasPrefix(h, e.Agent.String()+":") {
			t.Errorf("a connection to the gate came from %s, want the agent's address %s", h, e.Agent)
		}
	}

	t.Run("the host tracks none of the agent's flows", func(t *testing.T) {
		from := func(h *netlink.Handle) int {
			flows, err := h.ConntrackTableList(netlink.ConntrackTable, unix.AF_INET)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, f := range flows {
				if f.Forward.SrcIP.Equal(e.Agent.AsSlice()) {
					n++
				}
			}
			return n
		}
		host, _ := netlink.NewHandle()
		defer host.Close()
		if n := from(host); n != 0 {
			t.Errorf("this machine's connection tracking holds %d flows of the agent", n)
		}
		if n := from(e.inside); n == 0 {
			t.Error("the agent's namespace tracks none of its flows: the probe above made none?")
		}
	})

	t.Run("the host's rules alone", func(t *testing.T) {
		c, err := nftables.New(nftables.WithNetNSFd(int(e.ns)))
		if err != nil {
			t.Fatal(err)
		}
		if err := remove(c, agentTable); err != nil {
			t.Fatal(err)
		}
		for _, target := range []string{sshd.addr, gateOther.addr} {
			var perr error
			e.Inside(func() error { _, perr = dialTCP(target); return nil })
			if !refused(perr) {
				t.Errorf("%s without the agent's rules: %v, want refused by the host's", target, perr)
			}
		}
		var perr error
		e.Inside(func() error { _, perr = exchangeUDP(hostUDP.addr); return nil })
		if !refused(perr) {
			t.Errorf("UDP to %s without the agent's rules: %v, want refused by the host's", hostUDP.addr, perr)
		}
		if sshd.count()+hostUDP.count()+gateOther.count() != 0 {
			t.Errorf("the host's other listeners were reached: %v %v %v", sshd.hits, hostUDP.hits, gateOther.hits)
		}
		if _, err := e.Start(exec.Command("true")); err == nil || !strings.Contains(err.Error(), "checking the agent's rules") {
			t.Errorf("Start with the agent's rules gone: %v, want a refusal", err)
		}
	})
}

// fakeResolvers puts stand-ins for this machine's resolver sockets where glibc looks for them
// (systemd-resolved's varlink socket, nscd's), unless the machine has them, and says which.
func fakeResolvers(t *testing.T) []string {
	t.Helper()
	var made []string
	for _, s := range MaskedSockets[:2] {
		dir := s[:strings.LastIndex(s, "/")]
		if _, err := os.Stat(dir); err == nil {
			if _, err := os.Stat(s); err == nil {
				made = append(made, s) // the machine's own
			}
			continue
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		ln, err := net.Listen("unix", s)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		made = append(made, s)
	}
	return made
}

// TestEnclosureStart: a command started in the enclosure is in its network namespace, as the
// uid it was given, with a resolv.conf that names the gate alone and without the host
// resolvers' sockets; the host's own view is unchanged.
func TestEnclosureStart(t *testing.T) {
	requireRoot(t)
	sockets := fakeResolvers(t)
	hostResolv, _ := os.ReadFile("/etc/resolv.conf")
	e := open(t, Config{})
	if _, err := e.Start(exec.Command("true")); err == nil || !strings.Contains(err.Error(), "the rules have not been set and checked") {
		t.Fatalf("Start before SetRules: %v, want a refusal", err)
	}
	if err := e.SetRules(Ports{Proxy: 3130, Redirected: []uint16{80, 443}}); err != nil {
		t.Fatal(err)
	}
	script := `id -u; readlink /proc/self/ns/net; cat /etc/resolv.conf; ls -A /run/systemd/resolve; cat /run/systemd/resolve/stub-resolv.conf
for s in ` + strings.Join(sockets, " ") + `; do [ -e "$s" ] && echo "SOCKET $s"; done; echo end`
	cmd := exec.Command("sh", "-c", script)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 10098, Gid: 10098, Groups: []uint32{}}}
	done, err := e.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(e.ns), &st); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	resolv := string(e.ResolvConf())
	if want := fmt.Sprintf("net:[%d]", st.Ino); len(lines) < 3 || lines[0] != "10098" || lines[1] != want {
		t.Errorf("uid and namespace: %q, want 10098 in %s", lines, want)
	}
	if !strings.Contains(out.String(), resolv+"resolv.conf\nstub-resolv.conf\n"+resolv+"end") {
		t.Errorf("the command saw:\n%s\nwant resolv.conf naming %s alone, and the resolvers' directory masked", out.String(), e.Gate)
	}
	if strings.Contains(out.String(), "SOCKET") {
		t.Errorf("a host resolver's socket is there for the agent:\n%s", out.String())
	}
	if now, _ := os.ReadFile("/etc/resolv.conf"); string(now) != string(hostResolv) {
		t.Errorf("the host's /etc/resolv.conf changed: %q", now)
	}
	for _, s := range sockets {
		if _, err := os.Stat(s); err != nil {
			t.Errorf("the host lost %s: %v", s, err)
		}
	}
	t.Run("a command not found", func(t *testing.T) {
		_, err := e.Start(exec.Command("/nonexistent/lockhttp-command"))
		var se *SetupError
		if err == nil || errors.As(err, &se) || !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Start: %v, want the command's own not-found error", err)
		}
	})
}

// failingRules is a seam that makes the nftables connection of the agent's namespace (or the
// host's) refuse every batch of changes with errno.
func failingRules(inside bool, errno syscall.Errno) func(int) (*nftables.Conn, error) {
	return func(ns int) (*nftables.Conn, error) {
		if (ns >= 0) == inside {
			return nftables.New(nftables.WithTestDial(func(req []nlmsg) ([]nlmsg, error) {
				if len(req) > 0 && req[0].Header.Type == netlink0.HeaderType(unix.NFNL_MSG_BATCH_BEGIN) {
					return nltest.Error(int(errno), req)
				}
				return nil, nil // a read finds nothing
			}))
		}
		return kernelRules(ns)
	}
}

// TestEnclosureRulesFail: rules that cannot be set, or that the kernel takes but does not keep,
// are an error of SetRules naming the side and the cause, and Start refuses after it; Close
// leaves no link or table behind.
func TestEnclosureRulesFail(t *testing.T) {
	requireRoot(t)
	silent := func(ns int) (*nftables.Conn, error) {
		if ns < 0 {
			return kernelRules(ns)
		}
		// A kernel that acknowledges every request and keeps nothing.
		return nftables.New(nftables.WithTestDial(func(req []nlmsg) ([]nlmsg, error) { return nil, nil }))
	}
	for _, tc := range []struct {
		name  string
		rules func(int) (*nftables.Conn, error)
		want  string
	}{
		{"the agent's rules refused", failingRules(true, syscall.EPERM), "setting the agent's rules: netlink receive: operation not permitted"},
		{"the host's rules refused", failingRules(false, syscall.ENOMEM), "setting the host's rules for lox-c612c8"},
		{"the agent's rules not kept", silent, `checking the agent's rules: the table "lockhttp" is not there`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := Create(Config{Subnet: testSubnet, Rules: tc.rules})
			if err != nil {
				if !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("Create: %v", err)
				}
				return
			}
			link := e.Link
			err = e.SetRules(Ports{Proxy: 3130, Redirected: []uint16{80, 443}})
			var se *SetupError
			if err == nil || !errors.As(err, &se) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("SetRules: %v, want a *SetupError with %q", err, tc.want)
			}
			marker := t.TempDir() + "/ran"
			if _, err := e.Start(exec.Command("touch", marker)); err == nil || !strings.Contains(err.Error(), "the rules have not been set and checked") {
				t.Errorf("Start after the failure: %v, want a refusal", err)
			}
			if _, err := os.Stat(marker); !os.IsNotExist(err) {
				t.Errorf("the command ran: %v", err)
			}
			e.Close()
			if _, err := netlink.LinkByName(link); err == nil {
				t.Errorf("%s left behind", link)
			}
			c, _ := nftables.New()
			if tab, _ := c.ListTableOfFamily(tableName(link), nftables.TableFamilyINet); tab != nil {
				t.Errorf("the table %s left behind", tableName(link))
			}
		})
	}
}

type nlmsg = netlink0.Message

// TestEnclosureSeveralAndStale: two enclosures on one machine get /30s of their own; a host
// table left by an enclosure whose link is gone (a killed lox) is removed by the next Create,
// and a live enclosure's table is not; Close removes the link and the table.
func TestEnclosureSeveralAndStale(t *testing.T) {
	requireRoot(t)
	a := open(t, Config{})
	if err := a.SetRules(Ports{Proxy: 3130, Redirected: []uint16{80, 443}}); err != nil {
		t.Fatal(err)
	}
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	stale := tableName(linkName(netip.MustParsePrefix("198.18.200.252/30")))
	c.AddTable(&nftables.Table{Name: stale, Family: nftables.TableFamilyINet})
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { remove(c, stale) })
	b := open(t, Config{})
	if a.Prefix == b.Prefix || a.Link == b.Link || a.Prefix.Overlaps(b.Prefix) {
		t.Errorf("two enclosures share %s / %s", a.Prefix, b.Prefix)
	}
	if tab, _ := c.ListTableOfFamily(stale, nftables.TableFamilyINet); tab != nil {
		t.Errorf("the stale table %s is still there", stale)
	}
	if tab, _ := c.ListTableOfFamily(a.Table(), nftables.TableFamilyINet); tab == nil {
		t.Errorf("the live enclosure's table %s was removed", a.Table())
	}
	link := a.Link
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := netlink.LinkByName(link); err == nil {
		t.Errorf("%s is still there after Close", link)
	}
	if tab, _ := c.ListTableOfFamily(a.Table(), nftables.TableFamilyINet); tab != nil {
		t.Errorf("the table %s is still there after Close", a.Table())
	}
}
