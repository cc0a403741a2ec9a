package connlimit

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/testkit"
)

// pipeListener hands out the server ends of net.Pipe pairs, each named for its peer.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
}

type namedConn struct {
	net.Conn
	peer string
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn, 16), done: make(chan struct{})}
}

func (p *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-p.conns:
		return c, nil
	case <-p.done:
		return nil, net.ErrClosed
	}
}

func (p *pipeListener) Close() error   { close(p.done); return nil }
func (p *pipeListener) Addr() net.Addr { return &net.TCPAddr{} }

// lim is a Listener over a pipeListener whose peers are named by the test.
type lim struct {
	t   *testing.T
	in  *pipeListener
	l   *Listener
	cli map[string]net.Conn // peer's connection name → client end
	srv map[string]*Conn    // → server end, as accepted
}

func newLim(t *testing.T, cfg Config) *lim {
	in := newPipeListener()
	cfg.Key = func(c net.Conn) string { return c.(namedConn).peer }
	if cfg.Trusted == nil {
		cfg.Trusted = func(c net.Conn) bool { return strings.HasPrefix(c.(namedConn).peer, "trusted") }
	}
	x := &lim{t: t, in: in, l: New(in, cfg), cli: map[string]net.Conn{}, srv: map[string]*Conn{}}
	t.Cleanup(func() {
		in.Close()
		for _, c := range x.cli {
			c.Close()
		}
	})
	return x
}

// offer makes a connection named name (peer: name up to its '#') and queues it.
func (x *lim) offer(name string) {
	peer, _, _ := strings.Cut(name, "#")
	c, s := net.Pipe()
	x.cli[name] = c
	x.in.conns <- namedConn{s, peer}
}

// accept offers name and returns what Accept returned.
func (x *lim) accept(name string) *Conn {
	x.t.Helper()
	x.offer(name)
	c, err := x.l.Accept()
	if err != nil {
		x.t.Fatal(err)
	}
	lc := c.(*Conn)
	x.srv[name] = lc
	return lc
}

// open reports whether the server end of name is still open: a closed pipe reads io.EOF at
// the client at once; an open one blocks until the deadline.
func (x *lim) open(name string) bool {
	c := x.cli[name]
	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func (x *lim) wantOpen(open ...string) {
	x.t.Helper()
	for name := range x.cli {
		want := false
		for _, o := range open {
			want = want || o == name
		}
		if got := x.open(name); got != want {
			x.t.Errorf("%s open = %v, want %v", name, got, want)
		}
	}
}

func TestAdmission(t *testing.T) {
	cases := []struct {
		name  string
		cfg   Config
		steps []string // connections accepted in order; "trust NAME" trusts one
		open  []string // open at the end
	}{
		{"per peer: the peer's oldest goes", Config{PerPeer: 2},
			[]string{"a#1", "a#2", "b#1", "a#3"}, []string{"a#2", "a#3", "b#1"}},
		{"per peer: a trusted connection is not counted", Config{PerPeer: 1},
			[]string{"a#1", "trust a#1", "a#2", "a#3"}, []string{"a#1", "a#3"}},
		{"on probation in all: the oldest of any peer goes", Config{MaxProbation: 2},
			[]string{"a#1", "b#1", "c#1"}, []string{"b#1", "c#1"}},
		{"at Max a new connection takes the place of one on probation", Config{Max: 2},
			[]string{"a#1", "trusted#1", "trusted#2"}, []string{"trusted#1", "trusted#2"}},
		{"at Max the one on probation goes, not the trusted", Config{Max: 2},
			[]string{"trusted#1", "a#1", "b#1"}, []string{"trusted#1", "b#1"}},
		{"a trusted peer has no per-peer cap", Config{PerPeer: 1},
			[]string{"trusted#1", "trusted#2", "trusted#3"}, []string{"trusted#1", "trusted#2", "trusted#3"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			x := newLim(t, tc.cfg)
			for _, s := range tc.steps {
				if name, ok := strings.CutPrefix(s, "trust "); ok {
					Trust(ConnContext(context.Background(), x.srv[name]))
					continue
				}
				x.accept(s)
			}
			x.wantOpen(tc.open...)
			if got, want := x.l.Counts().Held, len(tc.open); got != want {
				t.Errorf("held %d, want %d", got, want)
			}
		})
	}
}

// TestMaxRefuses: at Max with nothing on probation a new connection is closed at once and
// Accept goes on to the next; a place freed by a close is taken again.
func TestMaxRefuses(t *testing.T) {
	x := newLim(t, Config{Max: 2})
	x.accept("trusted#1")
	x.accept("trusted#2")
	got := make(chan net.Conn)
	go func() {
		c, _ := x.l.Accept()
		got <- c
	}()
	x.offer("a#1")
	x.offer("trusted#3")
	testkit.WaitFor(t, 5*time.Second, "both refused", func() bool { return !x.open("a#1") && !x.open("trusted#3") })
	x.srv["trusted#1"].Close()
	x.offer("b#1")
	select {
	case c := <-got:
		if p := c.(*Conn).Peer(); p != "b" {
			t.Fatalf("Accept returned %q, want b", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Accept did not return")
	}
	x.wantOpen("trusted#2", "b#1")
}

// TestProbation: a connection on probation past its time is closed when idle (at once if it
// is), never while a request is served on it; a trusted one stays.
func TestProbation(t *testing.T) {
	x := newLim(t, Config{Probation: 50 * time.Millisecond})
	x.accept("a#idle")
	busy := x.accept("a#busy")
	x.l.ConnState(busy, http.StateActive)
	x.accept("a#trusted")
	Trust(ConnContext(context.Background(), x.srv["a#trusted"]))
	testkit.WaitFor(t, 5*time.Second, "the idle connection closed", func() bool { return !x.open("a#idle") })
	if !x.open("a#busy") {
		t.Fatal("a connection closed while a request was served on it")
	}
	x.l.ConnState(busy, http.StateIdle)
	testkit.WaitFor(t, 5*time.Second, "the busy connection closed once idle", func() bool { return !x.open("a#busy") })
	if !x.open("a#trusted") {
		t.Error("a trusted connection was closed")
	}
	if c := x.l.Counts(); c.Held != 1 || c.Probation != 0 {
		t.Errorf("counts %+v, want 1 held, none on probation", c)
	}
}

// TestServer drives a real http.Server: a keep-alive connection whose request was not
// authenticated is closed after the probation; one whose request called Trust is kept, and
// the limit counts both right.
func TestServer(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := New(inner, Config{Probation: 100 * time.Millisecond, PerPeer: 4})
	srv := l.Server(&http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer good" {
			Trust(r.Context())
		}
		io.WriteString(w, "ok")
	})})
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })

	get := func(auth string) net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nAuthorization: "+auth+"\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return c
	}
	closed := func(c net.Conn) bool {
		c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
	}
	anon := get("Bearer bad")
	authed := get("Bearer good")
	testkit.WaitFor(t, 5*time.Second, "the unauthenticated connection closed", func() bool { return closed(anon) })
	if closed(authed) {
		t.Error("the authenticated connection was closed")
	}
	if c := l.Counts(); c.Held != 1 || c.Probation != 0 {
		t.Errorf("counts %+v, want the authenticated connection alone", c)
	}
}

type addrConn struct {
	net.Conn
	local, remote net.Addr
}

func (c addrConn) LocalAddr() net.Addr  { return c.local }
func (c addrConn) RemoteAddr() net.Addr { return c.remote }

func TestPeerKeyByAddress(t *testing.T) {
	tcp := func(s string) net.Addr { return net.TCPAddrFromAddrPort(netip.MustParseAddrPort(s)) }
	cases := []struct {
		name          string
		local, remote string
		want          string
	}{
		{"IPv4", "192.0.2.1:3131", "198.51.100.7:5000", "ip:198.51.100.7"},
		{"IPv6 by its /64", "[2001:db8::1]:3131", "[2001:db8:1:2:3:4:5:6]:5000", "ip:2001:db8:1:2::/64"},
		{"IPv4-mapped", "[::ffff:192.0.2.1]:3131", "[::ffff:198.51.100.7]:5000", "ip:198.51.100.7"},
		{"local without a socket falls back to the address", "127.0.0.1:1", "127.0.0.1:2", "ip:127.0.0.1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := PeerKey(addrConn{local: tcp(tc.local), remote: tcp(tc.remote)}); got != tc.want {
				t.Errorf("PeerKey = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestPeerKeyByUID: a unix peer and a TCP peer on loopback are named by their uid; as root, a
// socket another uid owns is that uid's, although it comes from 127.0.0.1 too.
func TestPeerKeyByUID(t *testing.T) {
	me := "uid:" + strconv.Itoa(os.Geteuid())
	t.Run("unix", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "s")
		l, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		s, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if got := PeerKey(s); got != me {
			t.Errorf("PeerKey = %q, want %q", got, me)
		}
	})
	tcpKey := func(t *testing.T, network, addr string, dial func(string, string) (net.Conn, error)) string {
		l, err := net.Listen(network, addr)
		if err != nil {
			t.Skipf("no %s loopback: %v", network, err)
		}
		defer l.Close()
		c, err := dial(network, l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		s, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		return PeerKey(s)
	}
	for _, n := range []struct{ network, addr string }{{"tcp4", "127.0.0.1:0"}, {"tcp6", "[::1]:0"}} {
		t.Run(n.network, func(t *testing.T) {
			if got := tcpKey(t, n.network, n.addr, net.Dial); got != me {
				t.Errorf("PeerKey = %q, want %q", got, me)
			}
		})
	}
	t.Run("another uid on loopback", func(t *testing.T) {
		if os.Geteuid() != 0 {
			if os.Getenv("CI") == "true" {
				t.Fatal("this test must run as root in CI: it makes a socket owned by another uid")
			}
			t.Skip("not root: cannot make a socket owned by another uid")
		}
		// A socket is owned by the fsuid of the thread that makes it (setfsuid is per thread).
		asNobody := func(network, addr string) (net.Conn, error) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			syscall.RawSyscall(syscall.SYS_SETFSUID, 65534, 0, 0)
			defer syscall.RawSyscall(syscall.SYS_SETFSUID, 0, 0, 0)
			return net.Dial(network, addr)
		}
		if got := tcpKey(t, "tcp4", "127.0.0.1:0", asNobody); got != "uid:65534" {
			t.Errorf("PeerKey = %q, want uid:65534", got)
		}
	})
}

// An accepted TCP connection can still be half-closed through the Listener's Conn: a tunnel's
// end passes to the other side, and a server's last answer is not lost to a reset.
func TestConnHalfCloses(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := New(raw, Config{})
	defer l.Close()
	c, err := net.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sc, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	cw, ok := sc.(interface{ CloseWrite() error })
	if !ok {
		t.Fatal("the accepted Conn has no CloseWrite")
	}
	if err := cw.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("after CloseWrite the peer reads %v, want EOF", err)
	}
}
