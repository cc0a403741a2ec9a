// Package unixsock serves and dials HTTP over unix sockets and tells a handler which user is on
// the other end (SO_PEERCRED).
package unixsock

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"syscall"
	"time"
)

// Peer is the credentials of the process at the other end of a unix socket.
type Peer struct {
	UID, GID, PID int
}

// Listen listens on a unix socket at path with the given file mode. A stale socket file left by
// a process that has gone is replaced; a live one, or a file that is not a socket, is an error.
func Listen(path string, mode fs.FileMode) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&fs.ModeSocket == 0 {
			return nil, fmt.Errorf("listen on %s: the path exists and is not a socket; remove it or choose another path", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("listen on %s: another process is serving this socket; stop it first", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("listen on %s: removing the stale socket: %w", path, err)
		}
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(true)
	if err := os.Chmod(path, mode); err != nil {
		l.Close()
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	return l, nil
}

// PeerOf reads the peer credentials of a unix connection.
func PeerOf(c net.Conn) (Peer, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		if u, ok2 := c.(interface{ NetConn() net.Conn }); ok2 {
			return PeerOf(u.NetConn())
		}
		return Peer{}, errors.New("not a unix socket connection")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return Peer{}, err
	}
	var cred *syscall.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return Peer{}, err
	}
	if serr != nil {
		return Peer{}, fmt.Errorf("SO_PEERCRED: %w", serr)
	}
	return Peer{UID: int(cred.Uid), GID: int(cred.Gid), PID: int(cred.Pid)}, nil
}

type peerKey struct{}

type peerInfo struct {
	peer Peer
	err  error
}

// ConnContext is an http.Server ConnContext that records the peer's credentials.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	p, err := PeerOf(c)
	return context.WithValue(ctx, peerKey{}, peerInfo{p, err})
}

// PeerFrom returns the peer recorded by ConnContext.
func PeerFrom(ctx context.Context) (Peer, error) {
	pi, ok := ctx.Value(peerKey{}).(peerInfo)
	if !ok {
		return Peer{}, errors.New("no peer credentials: the server was not set up with unixsock.ConnContext")
	}
	return pi.peer, pi.err
}

// RequireUID serves h only to peers whose uid is in uids; others get 403, and refused (when not
// nil) is told about them.
func RequireUID(uids []int, h http.Handler, refused func(r *http.Request, p Peer, err error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := PeerFrom(r.Context())
		if err != nil || !slices.Contains(uids, p.UID) {
			if refused != nil {
				refused(r, p, err)
			}
			http.Error(w, "forbidden: this socket serves only the processes it is configured for", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// UIDs is a flag.Value collecting uids from a repeated flag.
type UIDs []int

func (u *UIDs) String() string { return fmt.Sprint([]int(*u)) }

// Set adds one uid.
func (u *UIDs) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return fmt.Errorf("%q is not a uid", s)
	}
	*u = append(*u, n)
	return nil
}

// Client returns an HTTP client whose every request goes to the unix socket at path; use URLs
// such as http://unix/policy.
func Client(path string, timeout time.Duration) *http.Client {
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy: nil,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", path)
			},
			MaxIdleConns:    2,
			IdleConnTimeout: 30 * time.Second,
		},
	}
}
