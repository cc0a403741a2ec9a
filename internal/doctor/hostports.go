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

// listenSock is one TCP socket in the LISTEN state on this machine.
type listenSock struct {
	Addr netip.Addr
	Port uint16
}

// listening reads the LISTEN sockets of /proc/net/tcp and tcp6 under procNet.
func listening(procNet string) ([]listenSock, error) {
	var out []listenSock
	for _, name := range []string{"tcp", "tcp6"} {
		f, err := os.Open(procNet + "/" + name)
		if err != nil {
			if name == "tcp6" && os.IsNotExist(err) {
				continue // no IPv6 in this kernel
			}
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // the header
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 4 || fs[3] != "0A" { // 0A: TCP_LISTEN
				continue
			}
			s, err := parseProcAddr(fs[1])
			if err != nil {
				f.Close()
				return nil, fmt.Errorf("%s/%s: %w", procNet, name, err)
			}
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
