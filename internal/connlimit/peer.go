package connlimit

import (
	"encoding/binary"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/lockhttp/lockhttp/internal/unixsock"
)

// PeerKey names the peer of a connection for the per-peer cap:
//
//   - a unix socket peer by its uid (SO_PEERCRED): "uid:1000";
//   - a TCP peer on this host (loopback, or the connection's own address) by the uid that owns
//     its socket, asked of the kernel (sock_diag), so that two users of one machine are two
//     peers although both come from 127.0.0.1: "uid:1000";
//   - any other TCP peer by its address, an IPv6 one cut to its /64: "ip:192.0.2.7",
//     "ip:2001:db8:1:2::/64".
//
// A local peer whose owner cannot be learnt falls back to its address.
func PeerKey(c net.Conn) string {
	if p, err := unixsock.PeerOf(c); err == nil {
		return "uid:" + strconv.Itoa(p.UID)
	}
	remote, ok := addrPort(c.RemoteAddr())
	if !ok {
		return "addr:" + c.RemoteAddr().String()
	}
	local, _ := addrPort(c.LocalAddr())
	a := remote.Addr()
	if a.IsLoopback() || a == local.Addr() {
		if uid, ok := socketOwner(remote, local); ok {
			return "uid:" + strconv.Itoa(uid)
		}
	}
	if a.Is6() {
		p, _ := a.Prefix(64)
		return "ip:" + p.String()
	}
	return "ip:" + a.String()
}

func addrPort(a net.Addr) (netip.AddrPort, bool) {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return netip.AddrPort{}, false
	}
	ap := ta.AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap().WithZone(""), ap.Port()), true
}

// sock_diag (linux/sock_diag.h, linux/inet_diag.h).
const (
	sockDiagByFamily = 20 // SOCK_DIAG_BY_FAMILY
	nlmsgHdrLen      = 16
	diagReqLen       = 56 // struct inet_diag_req_v2
	diagMsgUIDAt     = 64 // offset of idiag_uid in struct inet_diag_msg
	diagNoCookie     = 0xffffffff
	lookupWait       = 100 * time.Millisecond
)

// socketOwner asks the kernel which uid owns the TCP socket whose local end is from and whose
// remote end is to (the peer's socket, seen from the peer): one NETLINK_SOCK_DIAG request for
// that exact socket, answered from the kernel's tables. ok is false when the socket is not on
// this host (in this network namespace) or the kernel does not answer within lookupWait.
func socketOwner(from, to netip.AddrPort) (uid int, ok bool) {
	fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, syscall.NETLINK_INET_DIAG)
	if err != nil {
		return 0, false
	}
	defer syscall.Close(fd)
	tv := syscall.NsecToTimeval(lookupWait.Nanoseconds())
	if syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv) != nil {
		return 0, false
	}
	req := make([]byte, nlmsgHdrLen+diagReqLen)
	binary.LittleEndian.PutUint32(req[0:], uint32(len(req)))
	binary.LittleEndian.PutUint16(req[4:], sockDiagByFamily)
	binary.LittleEndian.PutUint16(req[6:], syscall.NLM_F_REQUEST)
	q := req[nlmsgHdrLen:]
	q[0] = syscall.AF_INET6
	if from.Addr().Is4() {
		q[0] = syscall.AF_INET
	}
	q[1] = syscall.IPPROTO_TCP
	binary.LittleEndian.PutUint32(q[4:], 0xffffffff) // every state
	id := q[8:]                                      // struct inet_diag_sockid
	binary.BigEndian.PutUint16(id[0:], from.Port())
	binary.BigEndian.PutUint16(id[2:], to.Port())
	copy(id[4:20], from.Addr().AsSlice())
	copy(id[20:36], to.Addr().AsSlice())
	binary.LittleEndian.PutUint32(id[40:], diagNoCookie)
	binary.LittleEndian.PutUint32(id[44:], diagNoCookie)
	if err := syscall.Sendto(fd, req, 0, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		return 0, false
	}
	buf := make([]byte, 1024)
	n, _, err := syscall.Recvfrom(fd, buf, 0)
	if err != nil || n < nlmsgHdrLen+diagMsgUIDAt+4 || binary.LittleEndian.Uint16(buf[4:]) != sockDiagByFamily {
		return 0, false // no answer, or NLMSG_ERROR: no such socket here
	}
	return int(binary.LittleEndian.Uint32(buf[nlmsgHdrLen+diagMsgUIDAt:])), true
}

// ForUIDs caps the connections of a unix socket that any local user may open while only uids
// are served: connections from uids are trusted at accept (1,024 at most, each closed by the
// server's idle timeout); any other uid may hold 8 connections, 32 in all, each for 5 s.
func ForUIDs(l net.Listener, uids []int, log *slog.Logger, name string) *Listener {
	return New(l, Config{Max: 1024, MaxProbation: 32, PerPeer: 8, Probation: 5 * time.Second,
		Trusted: func(c net.Conn) bool {
			p, err := unixsock.PeerOf(c)
			return err == nil && slices.Contains(uids, p.UID)
		}, Log: log, Name: name})
}
