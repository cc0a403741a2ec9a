package doctor

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
)

// maxHostTargets bounds the host ports the agent probe tries.
const maxHostTargets = 128

// listenSock is one socket on this machine that waits for peers: TCP in the LISTEN state, or
// UDP bound and not connected.
type listenSock struct {
	Addr netip.Addr
	Port uint16
	UDP  bool
}

// listening reads the waiting sockets of /proc/net/tcp, tcp6, udp and udp6 under procNet.
func listening(procNet string) ([]listenSock, error) {
	var out []listenSock
	for _, name := range []string{"tcp", "tcp6", "udp", "udp6"} {
		udp := strings.HasPrefix(name, "udp")
		f, err := os.Open(procNet + "/" + name)
		if err != nil {
			if name != "tcp" && os.IsNotExist(err) {
				continue // no IPv6 in this kernel, or a copy without UDP
			}
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // the header
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			// TCP: 0A, TCP_LISTEN. UDP: 07 (TCP_CLOSE's number), bound and not connected to a
			// peer (a connected socket takes only its peer's datagrams).
			if len(fs) < 4 || !udp && fs[3] != "0A" || udp && (fs[3] != "07" || strings.Trim(fs[2], "0:") != "") {
				continue
			}
			s, err := parseProcAddr(fs[1])
			if err != nil {
				f.Close()
				return nil, fmt.Errorf("%s/%s: %w", procNet, name, err)
			}
			s.UDP = udp
			out = append(out, s)
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// tcpSocks are the TCP sockets of socks.
func tcpSocks(socks []listenSock) []listenSock {
	var out []listenSock
	for _, s := range socks {
		if !s.UDP {
			out = append(out, s)
		}
	}
	return out
}

// udpListeners are the UDP sockets of socks an agent could send to, as ADDR:PORT: bound to every
// address, or to one of addrs; not the doctor's own (port own). Sorted, each once.
func udpListeners(socks []listenSock, addrs []hostAddr, own int) []string {
	var out []string
	for _, s := range socks {
		if !s.UDP || int(s.Port) == own && s.Addr.IsUnspecified() {
			continue
		}
		mine := s.Addr.IsUnspecified()
		for _, a := range addrs {
			mine = mine || s.Addr == a.Addr
		}
		if t := netip.AddrPortFrom(s.Addr, s.Port).String(); mine && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out
}

// parseProcAddr parses /proc/net/tcp's "0100007F:0BB8": the address in 32-bit words of host
// (little-endian) byte order, then the port.
func parseProcAddr(s string) (listenSock, error) {
	a, p, ok := strings.Cut(s, ":")
	raw, err := hex.DecodeString(a)
	if !ok || err != nil || (len(raw) != 4 && len(raw) != 16) {
		return listenSock{}, fmt.Errorf("address %q", s)
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return listenSock{}, fmt.Errorf("port in %q", s)
	}
	for i := 0; i < len(raw); i += 4 {
		raw[i], raw[i+1], raw[i+2], raw[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	addr, _ := netip.AddrFromSlice(raw)
	return listenSock{Addr: addr.Unmap(), Port: uint16(port)}, nil
}

// hostAddr is one of this machine's IPv4 addresses and its interface.
type hostAddr struct {
	Addr netip.Addr
	If   string
}

// hostAddrs lists this machine's IPv4 addresses but loopback: each docker network's gateway,
// the LAN's. An agent container reaches all of them through its network's gateway.
func hostAddrs() ([]hostAddr, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	var out []hostAddr
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			pfx, err := netip.ParsePrefix(a.String())
			if err != nil || !pfx.Addr().Is4() || pfx.Addr().IsLoopback() {
				continue
			}
			out = append(out, hostAddr{pfx.Addr(), ifc.Name})
		}
	}
	return out, nil
}

// hostTargets are the host:port pairs an agent could connect to: each port listening on every
// address at each of this machine's addresses, and each port listening on one such address at
// it. Loopback listeners are out of an agent's reach. At most max, sorted.
func hostTargets(socks []listenSock, addrs []hostAddr, max int) (targets []Direct, left int) {
	seen := map[string]bool{}
	add := func(a hostAddr, port uint16) {
		t := netip.AddrPortFrom(a.Addr, port).String()
		if !seen[t] {
			seen[t] = true
			targets = append(targets, Direct{Target: t, What: "port " + strconv.Itoa(int(port)) + " of this machine, at " + a.If})
		}
	}
	for _, s := range socks {
		for _, a := range addrs {
			if s.Addr.IsUnspecified() || s.Addr == a.Addr {
				add(a, s.Port)
			}
		}
	}
	slices.SortFunc(targets, func(x, y Direct) int { return strings.Compare(x.Target, y.Target) })
	if len(targets) > max {
		return targets[:max], len(targets) - max
	}
	return targets, 0
}
