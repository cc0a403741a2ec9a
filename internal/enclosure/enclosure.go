// Package enclosure owns the agent's network namespace under `lox run -- COMMAND`: a namespace
// joined to the host by a veth pair whose host side is the gate's address, with nftables rules
// on both sides that send every connection the agent makes to the gate and refuse the rest.
package enclosure

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Config configures Create.
type Config struct {
	// Subnet is where the enclosure's /30 comes from: the first /30 of it that no address of
	// this machine overlaps (CheckSubnet). Zero: DefaultSubnet.
	Subnet netip.Prefix
	// Rules opens the nftables connection of a network namespace (ns: its file descriptor, or
	// -1 for this machine's). nil: the kernel's. A test gives one whose netlink calls fail.
	Rules func(ns int) (*nftables.Conn, error)
}

// Enclosure is one agent's network namespace and its link to the host. Create makes it, SetRules
// fences it, Start runs a command in it, Close removes it.
type Enclosure struct {
	// Link is the host's side of the veth pair; Prefix the pair's /30; Gate the host side's
	// address (where the gate listens for the agent) and Agent the agent's.
	Link   string
	Prefix netip.Prefix
	Gate   netip.Addr
	Agent  netip.Addr

	cfg    Config
	ns     netns.NsHandle
	host   *netlink.Handle
	inside *netlink.Handle
	ports  *Ports // set and checked by SetRules; nil before
	dir    string // the agent's resolv.conf (Start); removed by Close
	closed bool
}

// SetupError is an error of the enclosure itself (a namespace, link, rule or mount that could
// not be set or checked), as opposed to the command's own start failing.
type SetupError struct {
	Step string
	Err  error
}

func (e *SetupError) Error() string {
	return fmt.Sprintf("the agent's network enclosure: %s: %v", e.Step, e.Err)
}

func (e *SetupError) Unwrap() error { return e.Err }

func fail(step string, err error) error { return &SetupError{Step: step, Err: err} }

// Create makes the agent's network namespace (IPv6 off, the loopback up), a veth pair whose
// host side has the gate's address of the first free /30 of the subnet and whose other side,
// in the namespace, has the agent's address and the default route through the gate. Each is
// read back and checked. Host tables that earlier enclosures left (their link gone: a killed
// lox) are removed first. The namespace has no rules yet: SetRules sets them, and Start
// refuses to run a command before it has.
func Create(cfg Config) (*Enclosure, error) {
	if !cfg.Subnet.IsValid() {
		cfg.Subnet = DefaultSubnet
	}
	if err := CheckSubnet(cfg.Subnet); err != nil {
		return nil, err
	}
	if cfg.Rules == nil {
		cfg.Rules = kernelRules
	}
	e := &Enclosure{cfg: cfg, ns: -1}
	ok := false
	defer func() {
		if !ok {
			e.Close()
		}
	}()
	var err error
	if e.host, err = netlink.NewHandle(); err != nil {
		return nil, fail("a netlink socket", err)
	}
	if err := e.removeStale(); err != nil {
		return nil, fail("removing the tables of enclosures that are gone", err)
	}
	if e.ns, err = newNamespace(); err != nil {
		return nil, fail("a network namespace", err)
	}
	if e.inside, err = netlink.NewHandleAt(e.ns); err != nil {
		return nil, fail("a netlink socket in the namespace", err)
	}
	if err := e.pair(); err != nil {
		return nil, err
	}
	if err := e.address(); err != nil {
		return nil, err
	}
	if err := e.checkLinks(); err != nil {
		return nil, fail("reading the links back", err)
	}
	ok = true
	return e, nil
}

// kernelRules is the nftables connection of the namespace ns (-1: this machine's).
func kernelRules(ns int) (*nftables.Conn, error) {
	if ns < 0 {
		return nftables.New()
	}
	return nftables.New(nftables.WithNetNSFd(ns))
}

// removeStale removes the host tables of enclosures whose link is gone.
func (e *Enclosure) removeStale() error {
	c, err := e.cfg.Rules(-1)
	if err != nil {
		return err
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return err
	}
	for _, t := range tables {
		link := staleLink(t.Name)
		if link == "" {
			continue
		}
		if _, err := e.host.LinkByName(link); err == nil || !errors.As(err, new(netlink.LinkNotFoundError)) {
			continue // its enclosure is still there (or cannot be told): leave it
		}
		if err := remove(c, t.Name); err != nil {
			return fmt.Errorf("the table %s: %w", t.Name, err)
		}
	}
	return nil
}

// newNamespace makes a network namespace with IPv6 off and returns a handle on it. The work is
// done on a locked OS thread, which goes back to this machine's namespace after (or, when it
// cannot, is thrown away with its goroutine).
func newNamespace() (netns.NsHandle, error) {
	ns := netns.NsHandle(-1)
	err := onThread(func() error {
		var err error
		if ns, err = netns.New(); err != nil {
			return err
		}
		return disableIPv6([]string{"all", "default"})
	})
	if err != nil && ns.IsOpen() {
		ns.Close()
	}
	return ns, err
}

// onThread runs fn on a locked OS thread and puts the thread back in this process's network
// namespace after; a thread that cannot be put back is never unlocked, and ends with its
// goroutine instead.
func onThread(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		err = fn()
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// disableIPv6 turns IPv6 off on the named interfaces ("all", "default", a link's name) of the
// calling thread's network namespace and reads it back. A kernel without IPv6 has nothing to
// turn off.
func disableIPv6(ifs []string) error {
	for _, n := range ifs {
		p := "/proc/sys/net/ipv6/conf/" + n + "/disable_ipv6"
		if err := os.WriteFile(p, []byte("1\n"), 0o644); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				if _, serr := os.Stat("/proc/sys/net/ipv6"); errors.Is(serr, os.ErrNotExist) {
					continue
				}
			}
			return fmt.Errorf("turning IPv6 off (%s): %w", p, err)
		}
		got, err := os.ReadFile(p)
		if err != nil || strings.TrimSpace(string(got)) != "1" {
			return fmt.Errorf("turning IPv6 off: %s reads back %q (%v)", p, strings.TrimSpace(string(got)), err)
		}
	}
	return nil
}

// pair creates the veth pair on the first free /30: its host side in this namespace, its
// other side in the agent's.
func (e *Enclosure) pair() error {
	addrs4, err := e.host.AddrList(nil, unix.AF_INET)
	if err != nil {
		return fail("listing this machine's addresses", err)
	}
	var used []netip.Prefix
	for _, a := range addrs4 {
		if p, ok := netip.AddrFromSlice(a.IP.To4()); ok {
			bits, _ := a.Mask.Size()
			used = append(used, netip.PrefixFrom(p, bits).Masked())
		}
	}
	for _, p := range candidates(e.cfg.Subnet, used) {
		name := linkName(p)
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: agentLink, PeerNamespace: netlink.NsFd(e.ns)}
		err := e.host.LinkAdd(veth)
		if errors.Is(err, unix.EEXIST) {
			continue // another enclosure took this /30 meanwhile
		}
		if err != nil {
			return fail("creating the veth pair "+name, err)
		}
		e.Link, e.Prefix = name, p
		e.Gate, e.Agent = addrs(p)
		return nil
	}
	return fail("choosing the link's addresses", fmt.Errorf("every /30 of %s is in use on this machine; give another subnet with --enclosure-subnet CIDR", e.cfg.Subnet))
}

// address gives each side its address and brings the links up: the host side without IPv6,
// the agent's side with the default route through the gate.
func (e *Enclosure) address() error {
	hl, err := e.host.LinkByName(e.Link)
	if err != nil {
		return fail("finding "+e.Link, err)
	}
	if err := disableIPv6([]string{e.Link}); err != nil {
		return fail(e.Link, err)
	}
	if err := e.host.AddrAdd(hl, &netlink.Addr{IPNet: ipnet(e.Gate, 30)}); err != nil {
		return fail("the gate's address "+e.Gate.String()+" on "+e.Link, err)
	}
	if err := e.host.LinkSetUp(hl); err != nil {
		return fail("bringing "+e.Link+" up", err)
	}
	lo, err := e.inside.LinkByName("lo")
	if err != nil {
		return fail("finding the namespace's loopback", err)
	}
	if err := e.inside.LinkSetUp(lo); err != nil {
		return fail("bringing the namespace's loopback up", err)
	}
	al, err := e.inside.LinkByName(agentLink)
	if err != nil {
		return fail("finding "+agentLink+" in the namespace", err)
	}
	if err := e.inside.AddrAdd(al, &netlink.Addr{IPNet: ipnet(e.Agent, 30)}); err != nil {
		return fail("the agent's address "+e.Agent.String(), err)
	}
	if err := e.inside.LinkSetUp(al); err != nil {
		return fail("bringing "+agentLink+" up", err)
	}
	if err := e.inside.RouteAdd(&netlink.Route{LinkIndex: al.Attrs().Index, Gw: e.Gate.AsSlice()}); err != nil {
		return fail("the agent's default route through "+e.Gate.String(), err)
	}
	return nil
}

// checkLinks reads the addresses and routes back: the host side has the gate's address; in the
// namespace, the agent's side has the agent's address, no IPv6 address is anywhere, and the
// only routes are the link's own and the default one through the gate.
func (e *Enclosure) checkLinks() error {
	hl, err := e.host.LinkByName(e.Link)
	if err != nil {
		return err
	}
	if err := hasOnly(e.host, hl, unix.AF_INET, netip.PrefixFrom(e.Gate, 30)); err != nil {
		return fmt.Errorf("%s: %w", e.Link, err)
	}
	al, err := e.inside.LinkByName(agentLink)
	if err != nil {
		return err
	}
	if err := hasOnly(e.inside, al, unix.AF_INET, netip.PrefixFrom(e.Agent, 30)); err != nil {
		return fmt.Errorf("%s: %w", agentLink, err)
	}
	if v6, err := e.inside.AddrList(nil, unix.AF_INET6); err != nil || len(v6) > 0 {
		return fmt.Errorf("the namespace has IPv6 addresses %v (%v)", v6, err)
	}
	routes, err := e.inside.RouteList(nil, unix.AF_INET)
	if err != nil {
		return err
	}
	var dflt, link int
	for _, r := range routes {
		switch {
		case r.Dst == nil || r.Dst.String() == "0.0.0.0/0":
			if !r.Gw.Equal(e.Gate.AsSlice()) || r.LinkIndex != al.Attrs().Index {
				return fmt.Errorf("a default route via %v on link %d, want via %s on %s", r.Gw, r.LinkIndex, e.Gate, agentLink)
			}
			dflt++
		case r.Dst.String() == e.Prefix.String() && r.LinkIndex == al.Attrs().Index:
			link++
		default:
			return fmt.Errorf("an unexpected route to %v in the namespace", r.Dst)
		}
	}
	if dflt != 1 || link != 1 {
		return fmt.Errorf("the namespace has %d default routes and %d to %s, want one of each", dflt, link, e.Prefix)
	}
	if r6, err := e.inside.RouteList(nil, unix.AF_INET6); err == nil && len(r6) > 0 {
		return fmt.Errorf("the namespace has IPv6 routes %v", r6)
	}
	return nil
}

func hasOnly(h *netlink.Handle, l netlink.Link, family int, want netip.Prefix) error {
	list, err := h.AddrList(l, family)
	if err != nil {
		return err
	}
	var got []string
	for _, a := range list {
		got = append(got, a.IPNet.String())
	}
	if len(got) != 1 || got[0] != want.String() {
		return fmt.Errorf("addresses %v, want %s", got, want)
	}
	return nil
}

// SetRules sets the rules on both sides, each in one atomic batch, and reads them back (Ports
// says what the agent may reach on the gate). Agent side: a connection to any address on a
// redirected port and every DNS query go to the gate; the gate's ports are open; the rest is
// refused at once. Host side: from the link, the gate's ports on its address and nothing else;
// nothing forwarded. After an error Start refuses.
func (e *Enclosure) SetRules(p Ports) error {
	if e.closed {
		return errors.New("the enclosure is closed")
	}
	if p.Proxy == 0 {
		return fail("the rules", errors.New("no proxy port"))
	}
	e.ports = nil
	inside, err := e.cfg.Rules(int(e.ns))
	if err != nil {
		return fail("an nftables socket in the namespace", err)
	}
	want := agentRules(e.Gate, p)
	if err := set(inside, want); err != nil {
		return fail("setting the agent's rules", err)
	}
	if err := check(inside, want, true); err != nil {
		return fail("checking the agent's rules", err)
	}
	host, err := e.cfg.Rules(-1)
	if err != nil {
		return fail("an nftables socket", err)
	}
	hwant := hostRules(e.Link, e.Gate, p)
	if err := set(host, hwant); err != nil {
		return fail("setting the host's rules for "+e.Link, err)
	}
	if err := check(host, hwant, false); err != nil {
		return fail("checking the host's rules for "+e.Link, err)
	}
	e.ports = &Ports{Proxy: p.Proxy, Redirected: slices.Clone(p.Redirected)}
	return nil
}

// Table is the name of the host's table of the enclosure.
func (e *Enclosure) Table() string { return tableName(e.Link) }

// Close removes the host's side of the link (the agent's side goes with it), the host's table
// and the handle on the namespace, which the kernel then frees once no process is left in it.
func (e *Enclosure) Close() error {
	if e.closed {
		return nil
	}
	e.closed = true
	var errs []error
	if e.Link != "" && e.host != nil {
		if l, err := e.host.LinkByName(e.Link); err == nil {
			if err := e.host.LinkDel(l); err != nil {
				errs = append(errs, fmt.Errorf("removing %s: %w", e.Link, err))
			}
		}
		if c, err := e.cfg.Rules(-1); err == nil {
			if err := remove(c, e.Table()); err != nil {
				errs = append(errs, fmt.Errorf("removing the table %s: %w", e.Table(), err))
			}
		} else {
			errs = append(errs, err)
		}
	}
	if e.inside != nil {
		e.inside.Close()
	}
	if e.host != nil {
		e.host.Close()
	}
	if e.ns.IsOpen() {
		e.ns.Close()
	}
	if e.dir != "" {
		os.RemoveAll(e.dir)
	}
	return errors.Join(errs...)
}
