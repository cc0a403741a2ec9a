//go:build !linux

package transport

import "net"

// heldWatch is the process's watch of held connections: none on this system, where each held
// request's watch reads (h1Conn.watchRead).
var heldWatch goneWatch

type goneWatch struct{}

func (*goneWatch) add(*net.TCPConn, func()) (func(), bool) { return nil, false }
