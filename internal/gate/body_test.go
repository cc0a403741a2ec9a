package gate

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// withSettings gives the test gate its policy with [settings] lines added.
func (tg *testGate) withSettings(t *testing.T, settings string) {
	t.Helper()
	p, err := policy.Load("gate.toml", []byte(fmt.Sprintf(gatePolicy, tg.port)+"[settings]\n"+settings))
	if err != nil {
		t.Fatal(err)
	}
	tg.g.SetPolicy(p)
}

// slowPost opens a connection, sends a POST head declaring length bytes, then the body as
// send says, and returns the gate's answer (or the error reading it).
func (tg *testGate) slowPost(t *testing.T, length int, send func(c net.Conn)) (*http.Response, error) {
	resp, _, err := tg.slowPostConn(t, length, send)
	return resp, err
}

// slowPostConn is slowPost, with the connection and its reader, to see what follows the answer.
func (tg *testGate) slowPostConn(t *testing.T, length int, send func(c net.Conn)) (*http.Response, *bufio.Reader, error) {
	t.Helper()
	c, err := net.Dial("tcp", tg.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: origin.test:%d\r\nContent-Length: %d\r\n\r\n", tg.url("/upload"), tg.port, length)
	go send(c)
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	return resp, br, err
}

func wantRefusal(t *testing.T, resp *http.Response, err error, status int, code policy.Code, rule, reason string) {
	t.Helper()
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status || resp.Header.Get(HeaderCode) != string(code) || resp.Header.Get(HeaderRule) != rule || !strings.Contains(string(body), reason) {
		t.Fatalf("got %d %s %s\n%s\nwant %d %s %s %q", resp.StatusCode, resp.Header.Get(HeaderCode), resp.Header.Get(HeaderRule), body, status, code, rule, reason)
	}
}

// A body that stalls, trickles or takes longer than body_timeout is refused with
// E_BODY_TIMEOUT, audited, and never reaches the origin; the bytes it held are given back.
func TestSlowBodiesRefused(t *testing.T) {
	tg := startGateWith(t, nil, func(c *Config) { c.BodyStall = 300 * time.Millisecond; c.BodyGrace = 200 * time.Millisecond })
	t.Run("stalled", func(t *testing.T) {
		tg.withSettings(t, "body_min_rate = 1\n")
		start := time.Now()
		resp, conn, err := tg.slowPostConn(t, 100, func(c net.Conn) { io.WriteString(c, "0123456789") })
		wantRefusal(t, resp, err, http.StatusRequestTimeout, policy.CodeBodyTimeout, "body:timeout", "the body stalled")
		if !resp.Close {
			t.Error("the answer does not close the connection")
		}
		// The gate closes it at once; it does not wait for the rest of the body.
		if _, err := conn.ReadByte(); err != io.EOF {
			t.Errorf("after the answer: %v, want the gate to close the connection", err)
		}
		if time.Since(start) > 5*time.Second {
			t.Errorf("refused after %s", time.Since(start))
		}
	})
	t.Run("trickling", func(t *testing.T) {
		tg.withSettings(t, "body_min_rate = \"1KiB\"\n")
		resp, err := tg.slowPost(t, 100, func(c net.Conn) {
			for i := 0; i < 100; i++ {
				if _, err := c.Write([]byte{'a'}); err != nil {
					return
				}
				time.Sleep(100 * time.Millisecond) // the attack: one byte at a time, under the stall limit
			}
		})
		wantRefusal(t, resp, err, http.StatusRequestTimeout, policy.CodeBodyTimeout, "body:timeout", "slower than body_min_rate (1024 bytes per second")
	})
	t.Run("over body_timeout", func(t *testing.T) {
		tg.withSettings(t, "body_timeout = \"1s\"\nbody_min_rate = 1\n")
		resp, err := tg.slowPost(t, 1000, func(c net.Conn) {
			for i := 0; i < 100; i++ {
				if _, err := c.Write([]byte("0123456789")); err != nil {
					return
				}
				time.Sleep(100 * time.Millisecond) // steady, over the rate, but 10s in all
			}
		})
		wantRefusal(t, resp, err, http.StatusRequestTimeout, policy.CodeBodyTimeout, "body:timeout", "within body_timeout (1s")
	})
	if tg.origin.count() != 0 {
		t.Fatal("a refused body reached the origin")
	}
	testkit.WaitFor(t, 5*time.Second, "the held bytes given back", func() bool { return tg.g.HeldBytes() == 0 })
	var refused int
	for _, r := range tg.records(t) {
		if r["code"] == "E_BODY_TIMEOUT" && r["container"] == "local" {
			refused++
		}
	}
	if refused != 3 {
		t.Fatalf("%d audit records with E_BODY_TIMEOUT, want 3", refused)
	}
	// A body that arrives in time still goes out.
	tg.withSettings(t, "")
	resp, err := tg.client().Post(tg.url("/upload"), "text/plain", strings.NewReader("fine"))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("a normal POST: %v %v", resp, err)
	}
	resp.Body.Close()
}

// Bodies held for decisions are bounded per container and in all: past either bound a request
// is refused at once with E_BUSY (503, Retry-After), before its body is read, and once the held
// bodies are done the bytes are free again.
func TestHeldBytesBounded(t *testing.T) {
	for _, c := range []struct {
		name, settings, rule string
	}{
		{"per container", "buffer_limit = \"64KiB\"\nheld_per_container = \"128KiB\"\nheld_limit = \"1MiB\"\n", "held_per_container"},
		{"in all", "buffer_limit = \"64KiB\"\nheld_per_container = \"128KiB\"\nheld_limit = \"128KiB\"\n", "held_limit"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tg := startGateWith(t, nil, func(c *Config) { c.BodyStall = 2 * time.Second })
			tg.withSettings(t, c.settings)
			// Two bodies of 64 KiB that stall hold 128 KiB between them.
			var wg sync.WaitGroup
			for i := 0; i < 2; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					resp, err := tg.slowPost(t, 64<<10, func(c net.Conn) { io.WriteString(c, "x") })
					if err == nil {
						resp.Body.Close()
					}
				}()
			}
			testkit.WaitFor(t, 5*time.Second, "two bodies held", func() bool { return tg.g.HeldBytes() == 128<<10 })
			resp, err := tg.slowPost(t, 1000, func(c net.Conn) { io.WriteString(c, strings.Repeat("y", 1000)) })
			wantRefusal(t, resp, err, http.StatusServiceUnavailable, policy.CodeBusy, c.rule, c.rule+" allows")
			if resp.Header.Get("Retry-After") == "" {
				t.Error("E_BUSY without Retry-After")
			}
			wg.Wait()
			testkit.WaitFor(t, 5*time.Second, "the held bytes given back", func() bool { return tg.g.HeldBytes() == 0 })
			r, err := tg.client().Post(tg.url("/upload"), "text/plain", strings.NewReader(strings.Repeat("z", 1000)))
			if err != nil || r.StatusCode != 200 {
				t.Fatalf("after the held bodies: %v %v", r, err)
			}
			r.Body.Close()
		})
	}
}

// A chunked body is held 32 KiB at a time, each step taken before it is allocated: one that
// would take its container past held_per_container, when it starts or as it grows, is refused
// at once with E_BUSY; nothing of it reaches the origin, and once the bodies are done the
// container holds nothing.
func TestChunkedBodyAtHeldPerContainer(t *testing.T) {
	for _, c := range []struct {
		name     string
		settings string
		// first is sent before the gate is seen to hold atCeiling bytes, then more.
		first, more int
		atCeiling   int64
	}{
		// Another body holds the whole ceiling: the first step is refused.
		{"when it starts", "buffer_limit = \"64KiB\"\nheld_per_container = \"64KiB\"\n", 0, 1000, 64 << 10},
		// The first step fills the ceiling exactly; the next one passes it.
		{"as it grows", "buffer_limit = \"64KiB\"\nheld_per_container = \"96KiB\"\n", 16 << 10, 32 << 10, 96 << 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			tg := startGateWith(t, nil, func(c *Config) { c.BodyStall = 2 * time.Second })
			tg.withSettings(t, c.settings+"held_limit = \"1MiB\"\n")
			// A body of 64 KiB that stalls holds 64 KiB of the container's share.
			held := make(chan struct{})
			go func() {
				defer close(held)
				resp, err := tg.slowPost(t, 64<<10, func(c net.Conn) { io.WriteString(c, "x") })
				if err == nil {
					resp.Body.Close()
				}
			}()
			testkit.WaitFor(t, 5*time.Second, "a body held", func() bool { return tg.g.HeldBytes() == 64<<10 })

			conn, err := net.Dial("tcp", tg.addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			chunk := func(n int) {
				if n > 0 {
					fmt.Fprintf(conn, "%x\r\n%s\r\n", n, strings.Repeat("c", n))
				}
			}
			fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: origin.test:%d\r\nTransfer-Encoding: chunked\r\n\r\n", tg.url("/upload"), tg.port)
			chunk(c.first)
			testkit.WaitFor(t, 5*time.Second, "the container at its ceiling", func() bool { return tg.g.HeldBytes() == c.atCeiling })
			go func() {
				chunk(c.more)
				io.WriteString(conn, "0\r\n\r\n")
			}()
			conn.SetReadDeadline(time.Now().Add(20 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			wantRefusal(t, resp, err, http.StatusServiceUnavailable, policy.CodeBusy, "held_per_container", "held_per_container allows")
			if !resp.Close {
				t.Error("the answer does not close the connection")
			}
			<-held
			testkit.WaitFor(t, 5*time.Second, "the held bytes given back", func() bool { return tg.g.HeldBytes() == 0 })
			if n := tg.origin.count(); n != 0 {
				t.Fatalf("the origin got %d requests; want none", n)
			}
			busy := 0
			for _, r := range tg.records(t) {
				if r["code"] == "E_BUSY" && r["rule"] == "held_per_container" && r["container"] == "local" {
					busy++
				}
			}
			if busy != 1 {
				t.Fatalf("%d audit records of the refusal, want 1", busy)
			}
			// With the share free again, the same body, chunked, goes out whole (the reader
			// hides its length).
			body := strings.Repeat("c", c.first+c.more)
			r, err := tg.client().Post(tg.url("/upload"), "text/plain", io.MultiReader(strings.NewReader(body)))
			if err != nil || r.StatusCode != 200 {
				t.Fatalf("after the held body: %v %v", r, err)
			}
			r.Body.Close()
			tg.origin.mu.Lock()
			got := tg.origin.body
			tg.origin.mu.Unlock()
			if len(got) != 1 || string(got[0]) != body {
				t.Fatalf("the origin got %d requests; want the body whole", len(got))
			}
			testkit.WaitFor(t, 5*time.Second, "the held bytes given back", func() bool { return tg.g.HeldBytes() == 0 })
		})
	}
}

// Idle connections are bounded per source: past MaxConnsPerSource the source's oldest is
// closed, and another source's connections are not touched.
func TestConnectionsBoundedPerSource(t *testing.T) {
	tg := startGateWith(t, nil, func(c *Config) { c.MaxConnsPerSource = 3 })
	dial := func(from string) net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		c, err := d.Dial("tcp", tg.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	other := dial("127.0.0.2")
	var conns []net.Conn
	for i := 0; i < 4; i++ {
		conns = append(conns, dial("127.0.0.1"))
	}
	closed := func(c net.Conn) bool {
		c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		return err == io.EOF
	}
	testkit.WaitFor(t, 5*time.Second, "the oldest connection closed", func() bool { return closed(conns[0]) })
	for i, c := range append(conns[1:], other) {
		if closed(c) {
			t.Fatalf("connection %d was closed", i+1)
		}
	}
	// The survivors still carry requests.
	fmt.Fprintf(other, "GET %s HTTP/1.1\r\nHost: origin.test:%d\r\n\r\n", tg.url("/ok"), tg.port)
	other.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(other), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the other source's request: %v %v", resp, err)
	}
}
