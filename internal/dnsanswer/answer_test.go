package dnsanswer

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/lockhttp/lockhttp/internal/testkit"
)

var gateAddr = netip.MustParseAddr("10.213.10.2")

func query(t testing.TB, name string, typ dnsmessage.Type, class dnsmessage.Class, edit func(*dnsmessage.Header)) []byte {
	t.Helper()
	h := dnsmessage.Header{ID: 0x4242, RecursionDesired: true}
	if edit != nil {
		edit(&h)
	}
	b := dnsmessage.NewBuilder(nil, h)
	b.StartQuestions()
	if name != "" {
		b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: typ, Class: class})
	}
	out, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func parse(t *testing.T, reply []byte) (dnsmessage.Header, []dnsmessage.Question, []dnsmessage.Resource) {
	t.Helper()
	var m dnsmessage.Message
	if err := m.Unpack(reply); err != nil {
		t.Fatalf("the reply does not parse: %v", err)
	}
	return m.Header, m.Questions, m.Answers
}

func TestAnswer(t *testing.T) {
	in := dnsmessage.ClassINET
	for _, tc := range []struct {
		name   string
		q      []byte
		st     Status
		rcode  dnsmessage.RCode
		a      bool // answered with the gate's address
		record string
	}{
		{name: "A", q: query(t, "Example.ORG.", dnsmessage.TypeA, in, nil), rcode: dnsmessage.RCodeSuccess, a: true, record: "Example.ORG A NOERROR"},
		{name: "AAAA", q: query(t, "example.org.", dnsmessage.TypeAAAA, in, nil), rcode: dnsmessage.RCodeSuccess, record: "example.org AAAA NOERROR"},
		{name: "HTTPS", q: query(t, "example.org.", 65, in, nil), rcode: dnsmessage.RCodeSuccess, record: "example.org HTTPS NOERROR"},
		{name: "SVCB", q: query(t, "_dns.example.org.", 64, in, nil), rcode: dnsmessage.RCodeSuccess, record: "_dns.example.org SVCB NOERROR"},
		{name: "TXT", q: query(t, "secret-data.exfil.example.", dnsmessage.TypeTXT, in, nil), rcode: dnsmessage.RCodeSuccess, record: "secret-data.exfil.example TXT NOERROR"},
		{name: "ANY", q: query(t, "example.org.", dnsmessage.TypeALL, in, nil), rcode: dnsmessage.RCodeNotImplemented, record: "example.org ANY NOTIMP"},
		{name: "chaos class", q: query(t, "version.bind.", dnsmessage.TypeTXT, dnsmessage.ClassCHAOS, nil), rcode: dnsmessage.RCodeNotImplemented, record: "version.bind TXT NOTIMP"},
		{name: "an update", q: query(t, "example.org.", dnsmessage.TypeA, in, func(h *dnsmessage.Header) { h.OpCode = 5 }), rcode: dnsmessage.RCodeNotImplemented, record: "example.org A NOTIMP"},
		{name: "no question", q: query(t, "", 0, 0, nil), rcode: dnsmessage.RCodeFormatError, record: "  FORMERR"},
		{name: "unknown source", q: query(t, "example.org.", dnsmessage.TypeA, in, nil), st: Unknown, rcode: dnsmessage.RCodeRefused, record: "example.org A REFUSED"},
		{name: "failing", q: query(t, "example.org.", dnsmessage.TypeA, in, nil), st: Failing, rcode: dnsmessage.RCodeServerFailure, record: "example.org A SERVFAIL"},
		{name: "a byte outside ASCII", q: query(t, "a\xffb.example.", dnsmessage.TypeA, in, nil), rcode: dnsmessage.RCodeSuccess, a: true, record: `a\255b.example A NOERROR`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reply, o := Answer(tc.q, gateAddr, tc.st)
			if reply == nil {
				t.Fatal("no reply")
			}
			h, qs, as := parse(t, reply)
			if h.ID != 0x4242 || !h.Response || h.RCode != tc.rcode {
				t.Errorf("header %+v, want id 0x4242, a response, %v", h, tc.rcode)
			}
			if got := o.Name + " " + o.Type + " " + o.RCode; got != tc.record {
				t.Errorf("outcome %q, want %q", got, tc.record)
			}
			if len(qs) > 1 {
				t.Errorf("%d questions", len(qs))
			}
			if !tc.a {
				if len(as) != 0 || o.Addr.IsValid() {
					t.Errorf("answers %v, addr %v: want none", as, o.Addr)
				}
				return
			}
			if len(as) != 1 || o.Addr != gateAddr {
				t.Fatalf("answers %v, addr %v", as, o.Addr)
			}
			a, ok := as[0].Body.(*dnsmessage.AResource)
			if !ok || netip.AddrFrom4(a.A) != gateAddr || as[0].Header.TTL != TTL || as[0].Header.Name != qs[0].Name {
				t.Errorf("answer %+v", as[0])
			}
		})
	}
	for name, msg := range map[string][]byte{
		"a response": func() []byte { b := query(t, "example.org.", dnsmessage.TypeA, in, nil); b[2] |= 0x80; return b }(),
		"too short":  {1, 2, 3},
	} {
		if reply, _ := Answer(msg, gateAddr, Known); reply != nil {
			t.Errorf("%s: answered", name)
		}
	}
}

// TestServer drives the server with Go's resolver over UDP and TCP, as a container's libc
// would, and checks the records, the rate bound and the TCP bounds.
func TestServer(t *testing.T) {
	var mu sync.Mutex
	var recs []Query
	now := time.Unix(1000, 0)
	var clock sync.Mutex
	s := New(Config{Addr: gateAddr, Rate: 5,
		Status: func(a netip.Addr) Status {
			if a.IsLoopback() {
				return Known
			}
			return Unknown
		},
		Record: func(q Query) { mu.Lock(); recs = append(recs, q); mu.Unlock() },
		Now:    func() time.Time { clock.Lock(); defer clock.Unlock(); return now }})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp4", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, 2)
	go func() { s.ServeUDP(ctx, pc); done <- struct{}{} }()
	go func() { s.ServeTCP(ctx, l); done <- struct{}{} }()
	for _, network := range []string{"udp", "tcp"} {
		r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, pc.LocalAddr().String())
		}}
		lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
		addrs, err := r.LookupNetIP(lctx, "ip", "registry.npmjs.org")
		lcancel()
		if err != nil || len(addrs) != 1 || addrs[0] != gateAddr {
			t.Fatalf("%s: %v %v, want the gate's address alone", network, addrs, err)
		}
	}
	// A query is recorded as its answer goes out: the last may come just after the resolver has
	// its answers.
	testkit.WaitFor(t, 5*time.Second, "the four queries' records", func() bool { mu.Lock(); defer mu.Unlock(); return len(recs) >= 4 })
	mu.Lock()
	var got []string
	for _, q := range recs {
		got = append(got, q.Name+" "+q.Type+" "+q.RCode+" "+map[bool]string{true: "tcp", false: "udp"}[q.TCP])
	}
	mu.Unlock()
	want := "registry.npmjs.org A NOERROR udp,registry.npmjs.org AAAA NOERROR udp,registry.npmjs.org A NOERROR tcp,registry.npmjs.org AAAA NOERROR tcp"
	if strings.Join(sorted(got), ",") != strings.Join(sorted(strings.Split(want, ",")), ",") {
		t.Errorf("records %v, want %s", got, want)
	}

	// The rate: 5 a second per source (4 taken above, in this second of the clock).
	c, err := net.Dial("udp4", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	answered := 0
	for i := 0; i < 3; i++ {
		c.Write(query(t, "x.example.", dnsmessage.TypeA, dnsmessage.ClassINET, nil))
		c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		buf := make([]byte, 600)
		if _, err := c.Read(buf); err == nil {
			answered++
		}
	}
	if answered != 1 {
		t.Errorf("%d of 3 queries answered past 4 in the second, want 1 (rate 5)", answered)
	}
	clock.Lock()
	now = now.Add(time.Second)
	clock.Unlock()
	c.Write(query(t, "x.example.", dnsmessage.TypeA, dnsmessage.ClassINET, nil))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 600)); err != nil {
		t.Errorf("the next second: %v", err)
	}

	// TCP: a length over MaxMessage closes the connection; a query that never ends is cut.
	tc, err := net.Dial("tcp4", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	tc.Write(binary.BigEndian.AppendUint16(nil, MaxMessage+1))
	tc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := tc.Read(make([]byte, 10)); err == nil {
		t.Errorf("an oversized TCP query: read %d bytes, want the connection closed", n)
	}
	// Connections per source: past 16 at once, closed at accept.
	var open []net.Conn
	for i := 0; i < maxTCPConnsPerSource+1; i++ {
		oc, err := net.Dial("tcp4", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, oc)
	}
	last := open[len(open)-1]
	last.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := last.Read(make([]byte, 1)); err == nil {
		t.Error("the 17th TCP connection of one source was not closed")
	}
	for _, oc := range open {
		oc.Close()
	}
	cancel()
	<-done
	<-done
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// FuzzAnswer feeds Answer what an agent can send: it never panics, a reply always parses, keeps
// the query's id, is small, and carries the gate's address only in an answer to an A query.
func FuzzAnswer(f *testing.F) {
	f.Add(query(f, "example.org.", dnsmessage.TypeA, dnsmessage.ClassINET, nil))
	f.Add(query(f, "example.org.", dnsmessage.TypeAAAA, dnsmessage.ClassINET, nil))
	f.Add(query(f, "", 0, 0, nil))
	f.Add([]byte{0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 12, 0, 1, 0, 1}) // a pointer to itself
	f.Fuzz(func(t *testing.T, msg []byte) {
		reply, o := Answer(msg, gateAddr, Known)
		if reply == nil {
			return
		}
		var m dnsmessage.Message
		if err := m.Unpack(reply); err != nil {
			t.Fatalf("the reply does not parse: %v", err)
		}
		if m.Header.ID != binary.BigEndian.Uint16(msg) || !m.Header.Response {
			t.Fatalf("reply header %+v", m.Header)
		}
		if len(reply) > 512 {
			t.Fatalf("a reply of %d bytes", len(reply))
		}
		if len(m.Answers) > 0 && (o.Type != "A" || len(m.Answers) != 1) {
			t.Fatalf("answers %v to a %q query", m.Answers, o.Type)
		}
	})
}

// TestFloodIsBounded: one source sending 20,000 queries within one second of the clock gets
// DefaultRate of them answered (and recorded); the rest are dropped unanswered.
func TestFloodIsBounded(t *testing.T) {
	var mu sync.Mutex
	var names []string
	s := New(Config{Addr: gateAddr, Now: func() time.Time { return time.Unix(2000, 0) },
		Record: func(q Query) { mu.Lock(); names = append(names, q.Name); mu.Unlock() }})
	ctx, cancel := context.WithCancel(context.Background())
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { s.ServeUDP(ctx, pc); close(done) }()
	c, err := net.Dial("udp4", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	q := query(t, "flood.example.", dnsmessage.TypeA, dnsmessage.ClassINET, nil)
	for i := 0; i < 20000; i++ {
		c.Write(q)
	}
	testkit.WaitFor(t, 10*time.Second, "the first second's answers", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(names) >= DefaultRate
	})
	// A marker from another source, queued after every query of the flood the kernel kept.
	mc, err := net.DialUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2)}, pc.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	testkit.WaitFor(t, 10*time.Second, "the marker's record", func() bool {
		// Sent again until one is answered: while the flood fills the socket's buffer, the
		// kernel drops it.
		mc.Write(query(t, "marker.example.", dnsmessage.TypeA, dnsmessage.ClassINET, nil))
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(names, "marker.example")
	})
	mu.Lock()
	flood := 0
	for _, n := range names {
		if n == "flood.example" {
			flood++
		}
	}
	mu.Unlock()
	if flood != DefaultRate {
		t.Errorf("%d queries of the flood answered, want %d", flood, DefaultRate)
	}
	cancel()
	<-done
}

// BenchmarkServeUDP is the answerer's throughput over loopback: a query and its answer per op.
func BenchmarkServeUDP(b *testing.B) {
	s := New(Config{Addr: gateAddr, Rate: 1 << 30})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pc, _ := net.ListenPacket("udp4", "127.0.0.1:0")
	go s.ServeUDP(ctx, pc)
	c, _ := net.Dial("udp4", pc.LocalAddr().String())
	q := query(b, "bench.example.", dnsmessage.TypeA, dnsmessage.ClassINET, nil)
	buf := make([]byte, 600)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.Write(q)
		c.SetReadDeadline(time.Now().Add(time.Second))
		if _, err := c.Read(buf); err != nil {
			b.Fatal(err)
		}
	}
}
