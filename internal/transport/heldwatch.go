package transport

import (
	"net"

	"github.com/lockhttp/lockhttp/internal/framing"
)

// The client-gone watch of the requests held for a human on HTTP/1.1 connections (h1Conn.watch).
// A held request costs its connection's goroutine, which waits for the hub; what tells it that
// its client went away is one watch for the whole process (heldwatch_linux.go): each held
// connection's TCP socket is in one epoll set, itself waited on by the runtime's network poller,
// so no goroutine and no buffer is spent per held request on the watch. The client is gone when
// the socket says the peer closed or reset it (EPOLLRDHUP, EPOLLHUP, EPOLLERR); bytes the client
// sends meanwhile (a pipelined request, a TLS alert without a close) stay unread in the socket for
// the server, which reads them after the answer. A connection with no TCP socket under it, or a
// system without the watch, falls back to a goroutine that reads one byte (h1Conn.watchRead).

// tcpUnder is the TCP connection under the gate's wrappers and a tunnel's TLS, or nil.
func tcpUnder(c net.Conn) *net.TCPConn {
	for range 16 {
		switch x := c.(type) {
		case *net.TCPConn:
			return x
		case *framing.Conn:
			c = x.Conn
		case interface{ NetConn() net.Conn }:
			c = x.NetConn()
		default:
			return nil
		}
	}
	return nil
}
