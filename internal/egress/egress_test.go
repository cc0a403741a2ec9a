package egress

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/floor"
	"github.com/lockhttp/lockhttp/internal/policy"
)

// These tests dial only loopback addresses: every address a dial could reach, even through a
// bug, is in 127.0.0.0/8. Resolve-only cases use other addresses; Resolve never dials.

// fakeResolver answers call i with answers[i] (the last one again past the end), or with err.
// A different answer on a later call is the DNS-rebinding shape: a dialer that looks the name up
// again after checking it reaches the second answer.
type fakeResolver struct {
	answers [][]netip.Addr
	err     error

	mu    sync.Mutex
	calls []string // guarded by mu: "network host" of each call
}

func (r *fakeResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(r.calls)
	r.calls = append(r.calls, network+" "+host)
	if r.err != nil {
		return nil, r.err
	}
	if len(r.answers) == 0 {
		return nil, nil
	}
	return slices.Clone(r.answers[min(n, len(r.answers)-1)]), nil
}

func (r *fakeResolver) callCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

func TestResolve(t *testing.T) {
	type want struct {
		addrs []netip.Addr // on success
		check floor.Check  // on a floor refusal
		in    string       // in the refusal's reason or the error
		calls int          // resolver calls
		err   bool         // an error that is not a floor refusal
	}
	tests := []struct {
		name    string
		host    string
		port    int
		floor   policy.Floor
		own     []netip.AddrPort
		answers [][]netip.Addr
		resErr  error
		want    want
	}{
		{
			name:    "public answers",
			host:    "example.com",
			answers: [][]netip.Addr{addrs("93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c")},
			want:    want{addrs: addrs("93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"), calls: 1},
		},
		{
			name:    "mapped public answer is unmapped",
			host:    "example.com",
			answers: [][]netip.Addr{addrs("::ffff:93.184.215.14")},
			want:    want{addrs: addrs("93.184.215.14"), calls: 1},
		},
		{
			name:    "private first among public",
			host:    "mixed.example",
			answers: [][]netip.Addr{addrs("10.0.0.1", "93.184.215.14", "1.1.1.1")},
			want:    want{check: floor.Address, in: `"mixed.example": address 10.0.0.1 is private`, calls: 1},
		},
		{
			name:    "private in the middle of public",
			host:    "mixed.example",
			answers: [][]netip.Addr{addrs("93.184.215.14", "10.0.0.1", "1.1.1.1")},
			want:    want{check: floor.Address, in: "10.0.0.1 is private", calls: 1},
		},
		{
			name:    "loopback last among public",
			host:    "mixed.example",
			answers: [][]netip.Addr{addrs("93.184.215.14", "1.1.1.1", "127.0.0.1")},
			want:    want{check: floor.Address, in: "127.0.0.1 is loopback", calls: 1},
		},
		{
			name:    "metadata among public",
			host:    "mixed.example",
			answers: [][]netip.Addr{addrs("93.184.215.14", "169.254.169.254")},
			want:    want{check: floor.Metadata, in: "169.254.169.254 is a cloud metadata address", calls: 1},
		},
		{
			name:    "mapped private among public",
			host:    "mixed.example",
			answers: [][]netip.Addr{addrs("93.184.215.14", "::ffff:192.168.1.1")},
			want:    want{check: floor.Address, in: "192.168.1.1 is private", calls: 1},
		},
		{
			name:    "unique-local v6 among public v4",
			host:    "mixed.example",
			answers: [][]netip.Addr{addrs("93.184.215.14", "fd12::1")},
			want:    want{check: floor.Address, in: "fd12::1 is unique-local", calls: 1},
		},
		{
			name:    "allow_cidrs opens a private answer",
			host:    "git.example",
			floor:   policy.Floor{AllowCIDRs: prefixes("10.0.0.0/8")},
			answers: [][]netip.Addr{addrs("10.1.2.3", "93.184.215.14")},
			want:    want{addrs: addrs("10.1.2.3", "93.184.215.14"), calls: 1},
		},
		{
			name:    "allow_cidrs opens only its prefix",
			host:    "git.example",
			floor:   policy.Floor{AllowCIDRs: prefixes("10.0.0.0/8")},
			answers: [][]netip.Addr{addrs("10.1.2.3", "192.168.1.1")},
			want:    want{check: floor.Address, in: "192.168.1.1 is private; open it with [floor] allow_cidrs", calls: 1},
		},
		{
			name:    "allow_cidrs never opens metadata",
			host:    "git.example",
			floor:   policy.Floor{AllowCIDRs: prefixes("169.254.0.0/16")},
			answers: [][]netip.Addr{addrs("169.254.1.1", "169.254.169.254")},
			want:    want{check: floor.Metadata, in: "169.254.169.254", calls: 1},
		},
		{
			name:    "own listen address refused even when allowed",
			host:    "self.example",
			port:    8080,
			floor:   policy.Floor{AllowCIDRs: prefixes("127.0.0.0/8")},
			own:     []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:8080")},
			answers: [][]netip.Addr{addrs("127.0.0.1")},
			want:    want{check: floor.OwnAddress, in: "127.0.0.1:8080 is the gate's own listen address", calls: 1},
		},
		{
			name:    "own address on another port is allowed",
			host:    "self.example",
			port:    8081,
			floor:   policy.Floor{AllowCIDRs: prefixes("127.0.0.0/8")},
			own:     []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:8080")},
			answers: [][]netip.Addr{addrs("127.0.0.1")},
			want:    want{addrs: addrs("127.0.0.1"), calls: 1},
		},
		{
			name:    "floor.hosts answers before DNS",
			host:    "git",
			floor:   policy.Floor{AllowCIDRs: prefixes("10.0.0.0/8"), Hosts: map[string]netip.Addr{"git": netip.MustParseAddr("10.0.0.5")}},
			answers: [][]netip.Addr{addrs("93.184.215.14")},
			want:    want{addrs: addrs("10.0.0.5"), calls: 0},
		},
		{
			name:    "floor.hosts public address needs no allow",
			host:    "pinned.example",
			floor:   policy.Floor{Hosts: map[string]netip.Addr{"pinned.example": netip.MustParseAddr("93.184.215.14")}},
			answers: [][]netip.Addr{addrs("10.9.9.9")},
			want:    want{addrs: addrs("93.184.215.14"), calls: 0},
		},
		{
			name:  "floor.hosts mapped address is unmapped",
			host:  "git",
			floor: policy.Floor{AllowCIDRs: prefixes("10.0.0.0/8"), Hosts: map[string]netip.Addr{"git": netip.MustParseAddr("::ffff:10.0.0.5")}},
			want:  want{addrs: addrs("10.0.0.5"), calls: 0},
		},
		{
			// The mapped address is still checked, and a refusal does not fall back to DNS.
			name:    "floor.hosts private address without allow is refused",
			host:    "git",
			floor:   policy.Floor{Hosts: map[string]netip.Addr{"git": netip.MustParseAddr("10.0.0.5")}},
			answers: [][]netip.Addr{addrs("93.184.215.14")},
			want:    want{check: floor.Address, in: `"git": address 10.0.0.5 is private`, calls: 0},
		},
		{
			name:  "floor.hosts metadata address is refused even when allowed",
			host:  "imds",
			floor: policy.Floor{AllowCIDRs: prefixes("169.254.0.0/16"), Hosts: map[string]netip.Addr{"imds": netip.MustParseAddr("169.254.169.254")}},
			want:  want{check: floor.Metadata, in: "169.254.169.254", calls: 0},
		},
		{
			name:    "floor.hosts does not answer for another name",
			host:    "other.example",
			floor:   policy.Floor{AllowCIDRs: prefixes("10.0.0.0/8"), Hosts: map[string]netip.Addr{"git": netip.MustParseAddr("10.0.0.5")}},
			answers: [][]netip.Addr{addrs("93.184.215.14")},
			want:    want{addrs: addrs("93.184.215.14"), calls: 1},
		},
		{
			name:   "resolver error",
			host:   "broken.example",
			resErr: errors.New("server misbehaving"),
			want:   want{err: true, in: `resolve "broken.example": server misbehaving`, calls: 1},
		},
		{
			name:   "no such host",
			host:   "nx.example",
			resErr: &net.DNSError{Err: "no such host", Name: "nx.example", IsNotFound: true},
			want:   want{err: true, in: `"nx.example" does not resolve (no such host)`, calls: 1},
		},
		{
			name:    "empty answer",
			host:    "empty.example",
			answers: [][]netip.Addr{{}},
			want:    want{err: true, in: `"empty.example" has no addresses`, calls: 1},
		},
		{
			name: "nil answer",
			host: "empty.example",
			want: want{err: true, in: `"empty.example" has no addresses`, calls: 1},
		},
		{
			name:    "invalid address in the answer",
			host:    "odd.example",
			answers: [][]netip.Addr{{netip.MustParseAddr("93.184.215.14"), {}}},
			want:    want{check: floor.Address, in: "invalid", calls: 1},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := &fakeResolver{answers: tc.answers, err: tc.resErr}
			d := &Dialer{Resolver: res, Own: tc.own}
			port := tc.port
			if port == 0 {
				port = 443
			}
			got, err := d.Resolve(t.Context(), Target{Host: tc.host, Port: port, Floor: &tc.floor})
			if n := res.callCount(); n != tc.want.calls {
				t.Errorf("%d resolver calls, want %d", n, tc.want.calls)
			}
			var refused *RefusedError
			switch {
			case tc.want.check != "":
				if !errors.As(err, &refused) {
					t.Fatalf("Resolve = %v, %v; want a floor refusal (%s)", got, err, tc.want.check)
				}
				if got != nil {
					t.Errorf("refused, yet addresses %v", got)
				}
				if refused.Refusal.Check != tc.want.check {
					t.Errorf("check %s, want %s (%v)", refused.Refusal.Check, tc.want.check, err)
				}
				if !strings.Contains(refused.Refusal.Reason, tc.want.in) {
					t.Errorf("reason %q, want it to contain %q", refused.Refusal.Reason, tc.want.in)
				}
				if !strings.Contains(refused.Refusal.Reason, strconv.Quote(tc.host)) {
					t.Errorf("reason %q does not name the host", refused.Refusal.Reason)
				}
			case tc.want.err:
				if err == nil {
					t.Fatalf("Resolve = %v, want an error", got)
				}
				if errors.As(err, &refused) {
					t.Errorf("a lookup failure is reported as a floor refusal: %v", err)
				}
				if got != nil {
					t.Errorf("error, yet addresses %v", got)
				}
				if !strings.Contains(err.Error(), tc.want.in) {
					t.Errorf("error %q, want it to contain %q", err, tc.want.in)
				}
			default:
				if err != nil {
					t.Fatalf("Resolve: %v", err)
				}
				if !slices.Equal(got, tc.want.addrs) {
					t.Errorf("Resolve = %v, want %v", got, tc.want.addrs)
				}
			}
		})
	}
}

func TestResolveAsksForIP(t *testing.T) {
	res := &fakeResolver{answers: [][]netip.Addr{addrs("93.184.215.14")}}
	d := &Dialer{Resolver: res}
	if _, err := d.Resolve(t.Context(), Target{Host: "example.com", Port: 443, Floor: &policy.Floor{}}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"ip example.com"}; !slices.Equal(res.calls, want) {
		t.Errorf("resolver calls %q, want %q", res.calls, want)
	}
}

// sharedResolver answers every call with the same slice, as a caching resolver may.
type sharedResolver struct{ answer []netip.Addr }

func (r sharedResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	return r.answer, nil
}

// TestResolveLeavesAnswer: Resolve returns its own slice and does not write to the resolver's,
// which concurrent dials of one name may share.
func TestResolveLeavesAnswer(t *testing.T) {
	answer := addrs("::ffff:93.184.215.14", "93.184.215.15")
	d := &Dialer{Resolver: sharedResolver{answer: answer}}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			got, err := d.Resolve(t.Context(), Target{Host: "example.com", Port: 443, Floor: &policy.Floor{}})
			if err != nil || !slices.Equal(got, addrs("93.184.215.14", "93.184.215.15")) {
				t.Errorf("Resolve = %v, %v", got, err)
			}
		})
	}
	wg.Wait()
	if !slices.Equal(answer, addrs("::ffff:93.184.215.14", "93.184.215.15")) {
		t.Errorf("the resolver's answer was changed to %v", answer)
	}
}

// origin is a loopback TCP listener that hands over every connection it accepts, in order.
type origin struct {
	l     net.Listener
	conns chan net.Conn
}

func newOrigin(t *testing.T) *origin {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &origin{l: l, conns: make(chan net.Conn, 16)}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(o.conns)
				return
			}
			o.conns <- c
		}
	}()
	t.Cleanup(func() {
		l.Close()
		for c := range o.conns {
			c.Close()
		}
	})
	return o
}

func (o *origin) port() int { return o.l.Addr().(*net.TCPAddr).Port }

// next returns the next accepted connection, or fails after 5 s.
func (o *origin) next(t *testing.T) net.Conn {
	t.Helper()
	select {
	case c := <-o.conns:
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("no connection arrived")
		return nil
	}
}

// assertNoneBefore fails if the origin accepted a connection before this call. Connections are
// accepted in the order they were made, so the sentinel it makes must be the next one.
func (o *origin) assertNoneBefore(t *testing.T) {
	t.Helper()
	s, err := net.Dial("tcp", o.l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := o.next(t)
	defer c.Close()
	if c.RemoteAddr().String() != s.LocalAddr().String() {
		t.Fatalf("the origin was reached from %s before the sentinel %s", c.RemoteAddr(), s.LocalAddr())
	}
}

func TestDialRefusal(t *testing.T) {
	// 127.0.0.1 (the origin) is opened; 127.0.0.3 is loopback but not opened, so refused.
	fl := policy.Floor{AllowCIDRs: prefixes("127.0.0.1/32")}
	tests := []struct {
		name    string
		answers []netip.Addr
		resErr  error
		check   floor.Check // "": an error that is not a floor refusal
	}{
		{name: "refused first", answers: addrs("127.0.0.3", "127.0.0.1"), check: floor.Address},
		{name: "refused last", answers: addrs("127.0.0.1", "127.0.0.3"), check: floor.Address},
		{name: "refused between", answers: addrs("127.0.0.1", "127.0.0.3", "127.0.0.1"), check: floor.Address},
		{name: "refused mapped", answers: addrs("127.0.0.1", "::ffff:127.0.0.3"), check: floor.Address},
		{name: "resolver error", resErr: errors.New("timeout"), check: ""},
		{name: "empty answer", answers: []netip.Addr{}, check: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := newOrigin(t)
			res := &fakeResolver{answers: [][]netip.Addr{tc.answers}, err: tc.resErr}
			d := &Dialer{Resolver: res}
			c, err := d.Dial(t.Context(), Target{Host: "mixed.test", Port: o.port(), Floor: &fl})
			if err == nil {
				c.Close()
				t.Fatal("Dial connected")
			}
			var refused *RefusedError
			if isRefusal := errors.As(err, &refused); isRefusal != (tc.check != "") {
				t.Fatalf("Dial: %v; want a floor refusal: %v", err, tc.check != "")
			}
			if tc.check != "" && refused.Refusal.Check != tc.check {
				t.Errorf("check %s, want %s", refused.Refusal.Check, tc.check)
			}
			o.assertNoneBefore(t)
		})
	}
}

func TestDialChecksOnce(t *testing.T) {
	o := newOrigin(t)
	p := o.port()
	// The first answer is the origin; a second lookup would answer 127.0.0.2, where nothing
	// listens. Both pass the floor, so only "dial what was checked" keeps the dial at the first.
	fl := policy.Floor{AllowCIDRs: prefixes("127.0.0.0/8")}
	tests := []struct {
		name    string
		answers [][]netip.Addr
		hosts   map[string]netip.Addr
		calls   int
	}{
		{name: "rebinding answer", answers: [][]netip.Addr{addrs("127.0.0.1"), addrs("127.0.0.2")}, calls: 1},
		{name: "first checked address refuses, next answers", answers: [][]netip.Addr{addrs("127.0.0.2", "127.0.0.1"), addrs("127.0.0.2")}, calls: 1},
		{name: "floor.hosts", hosts: map[string]netip.Addr{"rebind.test": netip.MustParseAddr("127.0.0.1")}, answers: [][]netip.Addr{addrs("127.0.0.2")}, calls: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := &fakeResolver{answers: tc.answers}
			fl := fl
			fl.Hosts = tc.hosts
			d := &Dialer{Resolver: res}
			c, err := d.Dial(t.Context(), Target{Host: "rebind.test", Port: p, Floor: &fl})
			if err != nil {
				t.Fatalf("Dial: %v", err)
			}
			defer c.Close()
			want := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(p)).String()
			if got := c.RemoteAddr().String(); got != want {
				t.Errorf("dialled %s, want the checked %s", got, want)
			}
			if n := res.callCount(); n != tc.calls {
				t.Errorf("%d lookups, want %d", n, tc.calls)
			}
			sc := o.next(t)
			defer sc.Close()
			if sc.RemoteAddr().String() != c.LocalAddr().String() {
				t.Errorf("the origin's peer %s is not the dialled connection %s", sc.RemoteAddr(), c.LocalAddr())
			}
			// The connection carries bytes both ways.
			go sc.Write([]byte("hello"))
			buf := make([]byte, 5)
			if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "hello" {
				t.Errorf("read %q, %v", buf, err)
			}
		})
	}
}

// TestTransportChecksOnce drives DialContext through net/http: the transport asks for the name,
// the dialer dials the address it checked, with one lookup.
func TestTransportChecksOnce(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Host+" "+r.RemoteAddr)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	p := l.Addr().(*net.TCPAddr).Port

	res := &fakeResolver{answers: [][]netip.Addr{addrs("127.0.0.1"), addrs("127.0.0.2")}}
	d := &Dialer{Resolver: res}
	tr := &http.Transport{DialContext: d.DialContext}
	defer tr.CloseIdleConnections()
	target := Target{Host: "rebind.test", Port: p, Floor: &policy.Floor{AllowCIDRs: prefixes("127.0.0.0/8")}}
	req, _ := http.NewRequestWithContext(WithTarget(t.Context(), target), "GET", "http://"+target.Addr()+"/", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.HasPrefix(string(body), target.Addr()+" 127.0.0.1:") {
		t.Errorf("the origin saw %q, want Host %s from 127.0.0.1", body, target.Addr())
	}
	if n := res.callCount(); n != 1 {
		t.Errorf("%d lookups, want 1", n)
	}
}

func TestDialContextTarget(t *testing.T) {
	d := &Dialer{Resolver: &fakeResolver{answers: [][]netip.Addr{addrs("127.0.0.1")}}}
	target := Target{Host: "a.test", Port: 80, Floor: &policy.Floor{AllowCIDRs: prefixes("127.0.0.0/8")}}
	tests := []struct {
		name string
		ctx  context.Context
		addr string
		in   string
	}{
		{"no target", t.Context(), "a.test:80", "without a checked target"},
		{"another host", WithTarget(t.Context(), target), "b.test:80", `dial of "b.test:80" does not match the checked target "a.test:80"`},
		{"another port", WithTarget(t.Context(), target), "a.test:81", "does not match"},
		{"an address for the name", WithTarget(t.Context(), target), "127.0.0.1:80", "does not match"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := d.DialContext(tc.ctx, "tcp", tc.addr)
			if err == nil {
				c.Close()
				t.Fatal("DialContext connected")
			}
			if !strings.Contains(err.Error(), tc.in) {
				t.Errorf("error %q, want it to contain %q", err, tc.in)
			}
		})
	}
}

// upstream is a loopback CONNECT proxy that records what it is asked and answers status; with
// 200 it tunnels to the origin at tunnelTo.
type upstream struct {
	l        net.Listener
	status   int
	tunnelTo string

	mu   sync.Mutex
	reqs []*http.Request // guarded by mu
}

func newUpstream(t *testing.T, status int, tunnelTo string) *upstream {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{l: l, status: status, tunnelTo: tunnelTo}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go u.serve(c)
		}
	}()
	t.Cleanup(func() { l.Close() })
	return u
}

func (u *upstream) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	u.mu.Lock()
	u.reqs = append(u.reqs, req)
	u.mu.Unlock()
	if u.status != http.StatusOK {
		io.WriteString(c, "HTTP/1.1 "+strconv.Itoa(u.status)+" "+http.StatusText(u.status)+"\r\nContent-Length: 0\r\n\r\n")
		return
	}
	o, err := net.Dial("tcp", u.tunnelTo)
	if err != nil {
		io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
		return
	}
	defer o.Close()
	// The first tunnelled bytes go with the answer, to exercise the buffered reader.
	io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
	go io.Copy(o, br)
	io.Copy(c, o)
}

func (u *upstream) requests() []*http.Request {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.reqs)
}

func TestDialUpstream(t *testing.T) {
	o := newOrigin(t)
	p := o.port()
	checked := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(p)).String()
	tests := []struct {
		name    string
		status  int
		auth    string        // the credential, user:password; "": none
		user    *url.Userinfo // user info in the upstream's URL, which is refused
		answers [][]netip.Addr
		allow   []netip.Prefix
		connect string // the CONNECT target the upstream must see; "": it must see none
		errIn   string // "": the dial succeeds
	}{
		{
			name:    "tunnel to the checked address, not the name or a second answer",
			status:  200,
			answers: [][]netip.Addr{addrs("127.0.0.1"), addrs("127.0.0.2")},
			allow:   prefixes("127.0.0.0/8"),
			connect: checked,
		},
		{
			name:    "credentials",
			status:  200,
			auth:    "u:p:w",
			answers: [][]netip.Addr{addrs("127.0.0.1")},
			allow:   prefixes("127.0.0.0/8"),
			connect: checked,
		},
		{
			name:    "user info in the upstream's URL is never sent",
			status:  200,
			user:    url.UserPassword("u", "planted-pw-4471"),
			answers: [][]netip.Addr{addrs("127.0.0.1")},
			allow:   prefixes("127.0.0.0/8"),
			errIn:   "its URL has a user:password part, which is never sent",
		},
		{
			name:    "upstream refuses the tunnel",
			status:  403,
			answers: [][]netip.Addr{addrs("127.0.0.1")},
			allow:   prefixes("127.0.0.0/8"),
			connect: checked,
			errIn:   "refused the tunnel to " + checked + ": 403 Forbidden",
		},
		{
			name:    "the floor refuses before the upstream is asked",
			status:  200,
			answers: [][]netip.Addr{addrs("127.0.0.1", "127.0.0.3")},
			allow:   prefixes("127.0.0.1/32"),
			errIn:   "127.0.0.3 is loopback",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			up := newUpstream(t, tc.status, o.l.Addr().String())
			res := &fakeResolver{answers: tc.answers}
			d := &Dialer{Resolver: res, Upstream: &url.URL{Scheme: "http", Host: up.l.Addr().String(), User: tc.user}}
			if tc.auth != "" {
				a, err := ParseProxyAuth(tc.auth)
				if err != nil {
					t.Fatal(err)
				}
				d.UpstreamAuth = a
			}
			c, err := d.Dial(t.Context(), Target{Host: "tunnel.test", Port: p, Floor: &policy.Floor{AllowCIDRs: tc.allow}})
			if tc.errIn == "" {
				if err != nil {
					t.Fatalf("Dial: %v", err)
				}
				defer c.Close()
				sc := o.next(t)
				defer sc.Close()
				go sc.Write([]byte("hello"))
				buf := make([]byte, 5)
				if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "hello" {
					t.Errorf("read through the tunnel %q, %v", buf, err)
				}
			} else {
				if err == nil {
					c.Close()
					t.Fatal("Dial connected")
				}
				if !strings.Contains(err.Error(), tc.errIn) || strings.Contains(err.Error(), "planted-pw") {
					t.Errorf("error %q, want it to contain %q (and no password)", err, tc.errIn)
				}
			}
			if n := res.callCount(); n != 1 {
				t.Errorf("%d lookups, want 1", n)
			}
			reqs := up.requests()
			if tc.connect == "" {
				if len(reqs) != 0 {
					t.Fatalf("the upstream was asked for %d tunnels after a floor refusal", len(reqs))
				}
				o.assertNoneBefore(t)
				return
			}
			if len(reqs) != 1 {
				t.Fatalf("the upstream was asked %d times, want once", len(reqs))
			}
			r := reqs[0]
			if r.Method != http.MethodConnect || r.Host != tc.connect || r.RequestURI != tc.connect {
				t.Errorf("upstream asked %s %s (Host %s), want CONNECT %s", r.Method, r.RequestURI, r.Host, tc.connect)
			}
			wantAuth := ""
			if tc.auth != "" {
				wantAuth = "Basic " + base64.StdEncoding.EncodeToString([]byte(tc.auth))
			}
			if got := r.Header.Get("Proxy-Authorization"); got != wantAuth {
				t.Errorf("Proxy-Authorization %q, want %q", got, wantAuth)
			}
		})
	}
}

// TestProxyAuth: a credential is user:password, the password may hold ':'; what is not one is
// refused without repeating it; printed, logged or formatted it shows no password.
func TestProxyAuth(t *testing.T) {
	for _, c := range []struct{ in, err string }{
		{"alice:s3cret:x", ""},
		{"alice:", ""},
		{"planted-pw-only", "is not user:password"},
		{":planted-pw", "is not user:password"},
		{"alice:planted-pw\n", "control character"},
		{"alice:" + strings.Repeat("p", maxProxyAuth), "longer than"},
	} {
		_, err := ParseProxyAuth(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) || strings.Contains(err.Error(), "planted-pw") {
				t.Errorf("%q: error %v, want one with %q and no password", c.in, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
		}
	}
	a, _ := ParseProxyAuth("alice:planted-pw-9")
	var b strings.Builder
	fmt.Fprintf(&b, "%v %+v %#v %s", a, a, a, a)
	slog.New(slog.NewJSONHandler(&b, nil)).Info("x", "auth", a)
	if strings.Contains(b.String(), "planted-pw") || !strings.Contains(b.String(), "alice:***") {
		t.Fatalf("printed: %s", b.String())
	}
}
