package enclosure

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"
)

// Ports are what the agent may reach on the gate's address.
type Ports struct {
	// Proxy is the gate's proxy port.
	Proxy uint16
	// Redirected are the TCP ports a connection to any address is sent to the gate on (80, 443
	// and the policy's other allow_ports); DNS (53, UDP and TCP) always is.
	Redirected []uint16
}

// tcp is every TCP port the agent may reach on the gate: the proxy, DNS and the redirected
// ports, sorted, each once.
func (p Ports) tcp() []uint16 {
	out := append([]uint16{p.Proxy, 53}, p.Redirected...)
	slices.Sort(out)
	return slices.Compact(out)
}

// redirected are the redirected TCP ports, sorted, each once, without DNS (redirected on its
// own).
func (p Ports) redirected() []uint16 {
	out := slices.Clone(p.Redirected)
	slices.Sort(out)
	out = slices.Compact(out)
	return slices.DeleteFunc(out, func(x uint16) bool { return x == 53 })
}

// table is a rule set: a table of the inet family, its chains and their rules, set in one
// flush and read back.
type table struct {
	name   string
	chains []chain
}

type chain struct {
	name     string
	kind     nftables.ChainType
	hook     *nftables.ChainHook
	priority *nftables.ChainPriority
	policy   nftables.ChainPolicy
	rules    []rule
}

type rule struct {
	comment string
	exprs   []expr.Any
}

// agentRules are the rules inside the agent's namespace. nat output: what goes to the loopback
// stays; TCP to any address on a redirected port and DNS (UDP and TCP 53) go to the gate on the
// same port. filter output (policy drop): the loopback, and the gate's ports on its address;
// every other TCP connection is reset and everything else (UDP, ICMP, IPv6) refused with
// port-unreachable, so that clients fail at once.
func agentRules(gate netip.Addr, ports Ports) table {
	nat := chain{name: "redirect", kind: nftables.ChainTypeNAT, hook: nftables.ChainHookOutput,
		priority: nftables.ChainPriorityNATDest, policy: nftables.ChainPolicyAccept}
	nat.rules = append(nat.rules, rule{"the agent's own addresses stay its own", cat(oifname("lo"), verdict(expr.VerdictAccept))})
	for _, p := range ports.redirected() {
		nat.rules = append(nat.rules, rule{fmt.Sprintf("tcp port %d to the gate", p), cat(ipv4(), l4(unix.IPPROTO_TCP), dport(p), dnat(gate))})
	}
	nat.rules = append(nat.rules,
		rule{"dns over udp to the gate", cat(ipv4(), l4(unix.IPPROTO_UDP), dport(53), dnat(gate))},
		rule{"dns over tcp to the gate", cat(ipv4(), l4(unix.IPPROTO_TCP), dport(53), dnat(gate))})
	filter := chain{name: "egress", kind: nftables.ChainTypeFilter, hook: nftables.ChainHookOutput,
		priority: nftables.ChainPriorityFilter, policy: nftables.ChainPolicyDrop}
	filter.rules = append(filter.rules, rule{"the loopback", cat(oifname("lo"), verdict(expr.VerdictAccept))})
	filter.rules = append(filter.rules, gateOnly(nil, gate, ports)...)
	filter.rules = append(filter.rules, refuse(nil)...)
	return table{name: agentTable, chains: []chain{nat, filter}}
}

// hostRules are the host's rules for the enclosure's link: what arrives from it may reach the
// gate's ports on the gate's address and nothing else of the host (its other listeners on every
// address: sshd, the hub, a UDP service), and nothing to or from it is forwarded. Nothing on the
// link is tracked by the host's connection tracking (the rules are stateless), so that the flows
// an agent opens fill no table of the host's, only its namespace's.
func hostRules(link string, gate netip.Addr, ports Ports) table {
	in := []expr.Any{&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(link)}}
	input := chain{name: "input", kind: nftables.ChainTypeFilter, hook: nftables.ChainHookInput,
		priority: nftables.ChainPriorityFilter, policy: nftables.ChainPolicyAccept}
	input.rules = append(gateOnly(in, gate, ports), refuse(in)...)
	forward := chain{name: "forward", kind: nftables.ChainTypeFilter, hook: nftables.ChainHookForward,
		priority: nftables.ChainPriorityFilter, policy: nftables.ChainPolicyAccept, rules: []rule{
			{"nothing from the agent is forwarded", cat(in, verdict(expr.VerdictDrop))},
			{"nothing to the agent is forwarded", cat(oifname(link), verdict(expr.VerdictDrop))},
		}}
	untrackIn := chain{name: "untrack-in", kind: nftables.ChainTypeFilter, hook: nftables.ChainHookPrerouting,
		priority: nftables.ChainPriorityRaw, policy: nftables.ChainPolicyAccept, rules: []rule{
			{"the host tracks nothing from the agent", cat(in, &expr.Notrack{})},
		}}
	untrackOut := chain{name: "untrack-out", kind: nftables.ChainTypeFilter, hook: nftables.ChainHookOutput,
		priority: nftables.ChainPriorityRaw, policy: nftables.ChainPolicyAccept, rules: []rule{
			{"the host tracks nothing to the agent", cat(oifname(link), &expr.Notrack{})},
		}}
	return table{name: tableName(link), chains: []chain{untrackIn, untrackOut, input, forward}}
}

// gateOnly accepts, after the match pre, TCP to the gate's ports and UDP to its DNS.
func gateOnly(pre []expr.Any, gate netip.Addr, ports Ports) []rule {
	var out []rule
	for _, p := range ports.tcp() {
		out = append(out, rule{fmt.Sprintf("tcp port %d of the gate", p), cat(pre, ipv4(), daddr(gate), l4(unix.IPPROTO_TCP), dport(p), verdict(expr.VerdictAccept))})
	}
	return append(out, rule{"udp port 53 of the gate", cat(pre, ipv4(), daddr(gate), l4(unix.IPPROTO_UDP), dport(53), verdict(expr.VerdictAccept))})
}

// refuse refuses, after the match pre, TCP with a reset and everything else with
// port-unreachable (ICMP or ICMPv6).
func refuse(pre []expr.Any) []rule {
	return []rule{
		{"any other tcp: reset", cat(pre, l4(unix.IPPROTO_TCP), &expr.Reject{Type: unix.NFT_REJECT_TCP_RST})},
		{"anything else: port unreachable", cat(pre, &expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_PORT_UNREACH})},
	}
}

func cat(parts ...any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		switch v := p.(type) {
		case []expr.Any:
			out = append(out, v...)
		case expr.Any:
			out = append(out, v)
		}
	}
	return out
}

func ifname(n string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, n)
	return b
}

func oifname(n string) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(n)}}
}

func ipv4() []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}}}
}

func l4(proto byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}}}
}

func dport(p uint16) []expr.Any {
	return []expr.Any{
		&expr.Payload{OperationType: expr.PayloadLoad, DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(p)},
	}
}

func daddr(a netip.Addr) []expr.Any {
	return []expr.Any{
		&expr.Payload{OperationType: expr.PayloadLoad, DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: a.AsSlice()},
	}
}

func dnat(to netip.Addr) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: to.AsSlice()},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegAddrMax: 1},
	}
}

func verdict(k expr.VerdictKind) *expr.Verdict { return &expr.Verdict{Kind: k} }

// set replaces the table t in the connection's namespace with want, in one batch: the old
// table (a stale one of the same name) deleted, the new one with its chains and rules added.
// The kernel applies a batch whole or not at all.
func set(c *nftables.Conn, want table) error {
	t := &nftables.Table{Name: want.name, Family: nftables.TableFamilyINet}
	// Adding then deleting an empty table of the name makes the delete valid whether or not the
	// table exists; both are in the batch, so nothing is ever without rules that had them.
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)
	for _, ch := range want.chains {
		policy := ch.policy
		nc := c.AddChain(&nftables.Chain{Name: ch.name, Table: t, Type: ch.kind, Hooknum: ch.hook, Priority: ch.priority, Policy: &policy})
		for _, r := range ch.rules {
			c.AddRule(&nftables.Rule{Table: t, Chain: nc, Exprs: r.exprs, UserData: userdata.AppendString(nil, userdata.TypeComment, r.comment)})
		}
	}
	return c.Flush()
}

// check reads the table back and compares it with want: the same chains (type, hook, priority,
// policy) and, in each, the same rules in the same order. Extra tables: names other tables in
// the namespace that must not be there ("" to allow any; the agent's namespace holds ours
// alone).
func check(c *nftables.Conn, want table, alone bool) error {
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyUnspecified)
	if err != nil {
		return fmt.Errorf("listing the tables: %w", err)
	}
	var t *nftables.Table
	for _, x := range tables {
		switch {
		case x.Name == want.name && x.Family == nftables.TableFamilyINet:
			t = x
		case alone:
			return fmt.Errorf("the namespace holds a table %q besides %q", x.Name, want.name)
		}
	}
	if t == nil {
		return fmt.Errorf("the table %q is not there", want.name)
	}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return fmt.Errorf("listing the chains: %w", err)
	}
	var got []*nftables.Chain
	for _, ch := range chains {
		if ch.Table != nil && ch.Table.Name == want.name {
			got = append(got, ch)
		}
	}
	if len(got) != len(want.chains) {
		return fmt.Errorf("the table %q has %d chains, want %d", want.name, len(got), len(want.chains))
	}
	for _, w := range want.chains {
		i := slices.IndexFunc(got, func(ch *nftables.Chain) bool { return ch.Name == w.name })
		if i < 0 {
			return fmt.Errorf("the chain %q is not in the table %q", w.name, want.name)
		}
		g := got[i]
		if g.Type != w.kind || g.Hooknum == nil || *g.Hooknum != *w.hook || g.Priority == nil || *g.Priority != *w.priority || g.Policy == nil || *g.Policy != w.policy {
			return fmt.Errorf("the chain %q reads back as type %s, hook %v, priority %v, policy %v", w.name, g.Type, deref(g.Hooknum), deref(g.Priority), deref(g.Policy))
		}
		rules, err := c.GetRules(t, g)
		if err != nil {
			return fmt.Errorf("reading the chain %q: %w", w.name, err)
		}
		if len(rules) != len(w.rules) {
			return fmt.Errorf("the chain %q holds %d rules, want %d", w.name, len(rules), len(w.rules))
		}
		for j, r := range rules {
			if !sameExprs(r.Exprs, w.rules[j].exprs) {
				return fmt.Errorf("the chain %q's rule %d (%s) reads back otherwise than it was set", w.name, j+1, w.rules[j].comment)
			}
			if c, _ := userdata.GetString(r.UserData, userdata.TypeComment); c != w.rules[j].comment {
				return fmt.Errorf("the chain %q's rule %d reads back as %q, want %q", w.name, j+1, c, w.rules[j].comment)
			}
		}
	}
	return nil
}

// sameExprs compares expressions as the kernel reads them back with those that were set.
func sameExprs(got, want []expr.Any) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		g, w := got[i], want[i]
		if gc, ok := g.(*expr.Cmp); ok {
			wc, ok := w.(*expr.Cmp)
			if !ok || gc.Op != wc.Op || gc.Register != wc.Register || !bytes.Equal(gc.Data, wc.Data) {
				return false
			}
			continue
		}
		if !reflect.DeepEqual(g, w) {
			return false
		}
	}
	return true
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// remove deletes the table name of the inet family; a table that is not there is no error.
func remove(c *nftables.Conn, name string) error {
	t := &nftables.Table{Name: name, Family: nftables.TableFamilyINet}
	c.AddTable(t)
	c.DelTable(t)
	if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	return nil
}
