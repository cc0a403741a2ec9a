package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"golang.org/x/net/dns/dnsmessage"

	"github.com/lockhttp/lockhttp/internal/gate"
	"github.com/lockhttp/lockhttp/internal/stack"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// transparentPolicy decides the transparent listeners' requests: reads of origin.test are free,
// POSTs under /api refused, DELETEs asked; denied.test is refused as a whole; self.test names the
// gate's own transparent address.
const transparentPolicy = `version = 1
trusted = ["origin.test", "other.test", "self.test"]
deny = ["denied.test"]

[[rule]]
name = "no-api-posts"
hosts = ["origin.test"]
methods = ["POST"]
paths = ["/api/**"]
verdict = "deny"

[[rule]]
name = "ask-delete"
hosts = ["origin.test"]
methods = ["DELETE"]
verdict = "ask"

[floor]
allow_cidrs = ["127.77.0.0/16", "%[1]s/32"]
allow_ports = [80, 443, 18443]

[floor.hosts]
"origin.test" = "127.77.0.1"
"other.test" = "127.77.0.1"
"denied.test" = "127.77.0.1"
"self.test" = "%[1]s"

[sources]
local = ["127.0.0.0/8", "%[2]s"]

[settings]
hold = "30s"
`

// agentNS is a network namespace the test makes, joined to this one by a veth pair: the gate's
// transparent address on this side, the agent's on the other, its resolver the gate's address.
type agentNS struct {
	name, gateIP, agentIP, subnet string
}

func newAgentNS(t *testing.T) *agentNS {
	t.Helper()
	requireRoot(t)
	ipCmd := requireTool(t, "ip")
	pid := os.Getpid() % 100000
	n := &agentNS{name: fmt.Sprintf("lhtr%d", pid), gateIP: "10.213.77.1", agentIP: "10.213.77.2", subnet: "10.213.77.0/24"}
	host, peer := fmt.Sprintf("lht%dh", pid), fmt.Sprintf("lht%dn", pid)
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(ipCmd, args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	exec.Command(ipCmd, "netns", "del", n.name).Run()
	exec.Command(ipCmd, "link", "del", host).Run()
	t.Cleanup(func() {
		exec.Command(ipCmd, "netns", "del", n.name).Run()
		exec.Command(ipCmd, "link", "del", host).Run()
		os.RemoveAll(filepath.Join("/etc/netns", n.name))
	})
	run("netns", "add", n.name)
	run("link", "add", host, "type", "veth", "peer", "name", peer)
	run("link", "set", peer, "netns", n.name)
	run("addr", "add", n.gateIP+"/24", "dev", host)
	run("link", "set", host, "up")
	run("-n", n.name, "addr", "add", n.agentIP+"/24", "dev", peer)
	run("-n", n.name, "link", "set", peer, "up")
	run("-n", n.name, "link", "set", "lo", "up")
	// ip netns exec mounts this over /etc/resolv.conf: the agent's resolver is the gate.
	dir := filepath.Join("/etc/netns", n.name)
	os.MkdirAll(dir, 0o755)
	if err := os.WriteFile(filepath.Join(dir, "resolv.conf"), []byte("nameserver "+n.gateIP+"\noptions timeout:2 attempts:1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return n
}

// exec runs a command inside the namespace with no proxy variables.
func (n *agentNS) exec(name string, args ...string) (string, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", n.name, name}, args...)...)
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !strings.Contains(strings.ToLower(k), "proxy") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// curlAnswer is what curl printed: the status line's code, the headers the gate sets, the body.
type curlAnswer struct {
	status  int
	version string
	rule    string
	code    string
	id      string
	agent   string
	body    string
	out     string
}

// curl runs curl --noproxy '*' in the namespace: a client that ignores the proxy and resolves the
// URL's name with the namespace's resolver.
func (n *agentNS) curl(t *testing.T, args ...string) curlAnswer {
	t.Helper()
	out, _ := n.exec("curl", append([]string{"-sS", "--noproxy", "*", "--max-time", "40", "-D", "-", "-w", "\n%{http_version}"}, args...)...)
	a := curlAnswer{out: out}
	br := bufio.NewReader(strings.NewReader(out))
	for {
		line, err := br.ReadString('\n')
		line = strings.TrimRight(line, "\r\n")
		if err != nil {
			break
		}
		if strings.HasPrefix(line, "HTTP/") {
			fmt.Sscanf(strings.SplitN(line, " ", 2)[1], "%d", &a.status)
		}
		if k, v, ok := strings.Cut(line, ": "); ok {
			switch {
			case strings.EqualFold(k, gate.HeaderRule):
				a.rule = v
			case strings.EqualFold(k, gate.HeaderCode):
				a.code = v
			case strings.EqualFold(k, gate.HeaderRequest):
				a.id = v
			}
		}
		if line == "" && a.status != 100 {
			break
		}
	}
	rest, _ := io.ReadAll(br)
	body := strings.TrimRight(string(rest), "\n")
	if i := strings.LastIndexByte(body, '\n'); i >= 0 {
		a.body, a.version = body[:i], body[i+1:]
	} else {
		a.version = body
	}
	return a
}

// startStackBin is startStackWith with lox (and the binaries next to it) from dir.
func startStackBin(t *testing.T, dir, policyText string, flags ...string) *running {
	t.Helper()
	state := t.TempDir()
	polPath := filepath.Join(state, "test-policy.toml")
	if err := os.WriteFile(polPath, []byte(policyText), 0o600); err != nil {
		t.Fatal(err)
	}
	r := &running{t: t, state: state, policy: polPath, out: &testkit.Buffer{}, done: make(chan struct{})}
	args := append([]string{"run", "--headless", "--state", state, "--policy", polPath, "--listen", "127.0.0.1:0", "--hub-listen", "127.0.0.1:0"}, flags...)
	r.cmd = exec.Command(filepath.Join(dir, "lox"), args...)
	r.cmd.Stdout, r.cmd.Stderr = r.out, r.out
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.cmd.Wait(); close(r.done) }()
	t.Cleanup(r.stop)
	testkit.WaitFor(t, 30*time.Second, "up.json", func() bool {
		select {
		case <-r.done:
			t.Fatalf("lox exited before up.json was written:\n%s", r.out)
		default:
		}
		data, err := os.ReadFile(filepath.Join(state, stack.UpFile))
		return err == nil && json.Unmarshal(data, &r.up) == nil
	})
	return r
}

// transparentBin is a directory with lox, the signer and the console, and a gate that runs the
// real gate with -transparent addr.
func transparentBin(t *testing.T, addr string) string {
	t.Helper()
	dir := t.TempDir()
	for _, n := range []string{"lox", "signer", "console"} {
		data, err := os.ReadFile(filepath.Join(binDir, n))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, n), data, 0o755)
	}
	script := fmt.Sprintf("#!/bin/sh\nexec %s -transparent %s \"$@\"\n", filepath.Join(binDir, "gate"), addr)
	os.WriteFile(filepath.Join(dir, "gate"), []byte(script), 0o755)
	return dir
}

// TestTransparent starts the real gate with -transparent on the host side of a veth pair whose
// other side is a network namespace the test makes, its resolver the gate, and drives clients
// that ignore the proxy at it: curl --noproxy '*' by name (the namespace's resolver is the gate,
// which answers its own address), and raw connections from this side. Plain HTTP is decided by
// Host (free answered, ASK held and released by lox approve, DENY refused); TLS by its
// ClientHello's server name, decrypted, over HTTP/1.1 and HTTP/2; what contradicts itself is
// refused: a request line against its Host, a ClientHello without SNI, SNI against Host; a
// ClientHello split over records and writes is read whole; every query and request is audited.
func TestTransparent(t *testing.T) {
	requireTool(t, "curl")
	ns := newAgentNS(t)
	origin := &originRecorder{}
	pki := newTestPKI(t)
	cert := pki.leaf(t, []string{"origin.test", "other.test", "denied.test"}, time.Now().Add(time.Hour), false)
	for _, port := range []string{"80", "443"} {
		l, err := net.Listen("tcp", net.JoinHostPort("127.77.0.1", port))
		if err != nil {
			t.Fatalf("the test origin: %v", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/", origin)
		mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
			c, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
			if err != nil {
				return
			}
			defer c.Close()
			for {
				typ, msg, err := c.ReadMessage()
				if err != nil {
					return
				}
				c.WriteMessage(typ, append([]byte("echo: "), msg...))
			}
		})
		srv := &http.Server{Handler: mux}
		if port == "443" {
			srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}}
			go srv.ServeTLS(l, "", "")
		} else {
			go srv.Serve(l)
		}
		t.Cleanup(func() { srv.Close() })
	}
	dir := transparentBin(t, ns.gateIP)
	r := startStackBin(t, dir, fmt.Sprintf(transparentPolicy, ns.gateIP, ns.subnet), "--roots", pki.rootPEM)
	ask := &askEnv{running: r, origin: origin}
	ca := r.up.CACert
	record := func(t *testing.T, a curlAnswer) map[string]any {
		t.Helper()
		if a.id == "" {
			t.Fatalf("no X-LockHTTP-Request: %+v", a)
		}
		return (&running{t: t, up: r.up}).recordFor(a.id)
	}
	wantRecord := func(t *testing.T, rec map[string]any, event, url, verdict, rule string) {
		t.Helper()
		if rec["event"] != event || rec["url"] != url || rec["verdict"] != verdict || rec["rule"] != rule || rec["agent"] != nil {
			t.Errorf("record %v, want %s %s %s rule %s, no agent", rec, event, url, verdict, rule)
		}
	}

	t.Run("DNS answers the gate's address, and each query is recorded", func(t *testing.T) {
		out, err := ns.exec("getent", "ahostsv4", "registry.example.org")
		if err != nil || !strings.HasPrefix(out, ns.gateIP+" ") || strings.Contains(strings.ReplaceAll(out, ns.gateIP, ""), ".") && !strings.Contains(out, "registry.example.org") {
			t.Fatalf("getent in the namespace: %v\n%s", err, out)
		}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if !strings.HasPrefix(l, ns.gateIP+" ") {
				t.Errorf("an address that is not the gate's: %q", l)
			}
		}
		testkit.WaitFor(t, 5*time.Second, "the DNS records", func() bool {
			for _, m := range r.auditRecords() {
				if m["event"] == "dns" && m["url"] == "registry.example.org" && m["method"] == "A" && m["verdict"] == "FREE" && m["rule"] == "dns" &&
					m["container"] == "local" && m["detail"] == "answered A "+ns.gateIP {
					return true
				}
			}
			return false
		})
		// AAAA and HTTPS: no address; over TCP too.
		for _, tc := range []struct {
			typ dnsmessage.Type
			tcp bool
		}{{dnsmessage.TypeAAAA, false}, {65, false}, {dnsmessage.TypeA, true}} {
			h, answers := dnsQuery(t, ns.gateIP, "x.example.", tc.typ, tc.tcp)
			if h.RCode != dnsmessage.RCodeSuccess || (tc.typ == dnsmessage.TypeA) != (len(answers) == 1) {
				t.Errorf("%v (tcp %v): %v %v", tc.typ, tc.tcp, h.RCode, answers)
			}
		}
	})

	t.Run("plain HTTP on :80 decided by Host", func(t *testing.T) {
		a := ns.curl(t, "http://origin.test/free?x=1")
		if a.status != 200 || a.body != "origin saw GET /free?x=1 (0 bytes)" {
			t.Fatalf("a free GET: %+v", a)
		}
		wantRecord(t, record(t, a), "transparent-request", "http://origin.test/free?x=1", "FREE", "trusted")
		before := origin.count()
		a = ns.curl(t, "-X", "POST", "-d", "x=1", "http://origin.test/api/items")
		if a.status != 403 || a.rule != "no-api-posts" || a.code != "E_RULE" || origin.count() != before {
			t.Fatalf("a refused POST: %+v (origin saw %d more)", a, origin.count()-before)
		}
		wantRecord(t, record(t, a), "transparent-request", "http://origin.test/api/items", "DENY", "no-api-posts")
		held := make(chan curlAnswer, 1)
		go func() { held <- ns.curl(t, "-X", "DELETE", "http://origin.test/held") }()
		tk := ask.waitTicket(t, "http://origin.test/held")
		if out, err := ask.lox(t, "approve", tk.ID); err != nil {
			t.Fatalf("lox approve: %v\n%s", err, out)
		}
		select {
		case a = <-held:
		case <-time.After(30 * time.Second):
			t.Fatal("the approved DELETE did not come back")
		}
		if a.status != 200 || a.body != "origin saw DELETE /held (0 bytes)" {
			t.Fatalf("the approved DELETE: %+v", a)
		}
		rec := record(t, a)
		wantRecord(t, rec, "transparent-request", "http://origin.test/held", "ASK", "ask-delete")
		if rec["ticket"] != tk.ID {
			t.Errorf("the DELETE's record names ticket %v, want %s", rec["ticket"], tk.ID)
		}
		// The gate never dials its own transparent address, whatever a name maps to.
		a = ns.curl(t, "http://self.test/")
		if a.status != 403 || a.code != "E_FLOOR" || !strings.Contains(a.out, "own listen address") {
			t.Errorf("a name mapped to the gate's transparent address: %+v", a)
		}
	})

	t.Run("a WebSocket on :80, as on the proxy", func(t *testing.T) {
		d := websocket.Dialer{Proxy: nil, HandshakeTimeout: 10 * time.Second,
			NetDial: func(string, string) (net.Conn, error) { return net.Dial("tcp", ns.gateIP+":80") }}
		c, resp, err := d.Dial("ws://origin.test/ws", nil)
		if err != nil {
			t.Fatalf("the WebSocket upgrade: %v (%v)", err, resp)
		}
		if err := c.WriteMessage(websocket.TextMessage, []byte("hello")); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, msg, err := c.ReadMessage()
		if err != nil || string(msg) != "echo: hello" {
			t.Fatalf("the echo: %q %v", msg, err)
		}
		c.Close()
		rec := record(t, curlAnswer{id: resp.Header.Get(gate.HeaderRequest)})
		wantRecord(t, rec, "transparent-request", "http://origin.test/ws", "FREE", "trusted")
		if rec["status"] != float64(101) {
			t.Errorf("the upgrade's record: %v", rec)
		}
	})

	t.Run("a Host the request line or another Host contradicts is refused", func(t *testing.T) {
		before := origin.count()
		out := rawExchange(t, ns.gateIP+":80", "GET http://other.test/x HTTP/1.1\r\nHost: origin.test\r\n\r\n")
		if !strings.HasPrefix(out, "HTTP/1.1 403") || !strings.Contains(out, "X-Lockhttp-Rule: framing:host-mismatch") {
			t.Errorf("the request line against its Host:\n%s", out)
		}
		out = rawExchange(t, ns.gateIP+":80", "GET /x HTTP/1.1\r\nHost: origin.test\r\nHost: other.test\r\n\r\n")
		if !strings.HasPrefix(out, "HTTP/1.1 400") || !strings.Contains(out, "framing:") {
			t.Errorf("two Hosts:\n%s", out)
		}
		out = rawExchange(t, ns.gateIP+":80", "GET /x HTTP/1.0\r\n\r\n")
		if !strings.Contains(out, " 400 ") || !strings.Contains(out, "framing:") {
			t.Errorf("no Host:\n%s", out)
		}
		out = rawExchange(t, ns.gateIP+":80", "GET /x HTTP/1.1\r\nHost: origin.test:443\r\n\r\n")
		if !strings.HasPrefix(out, "HTTP/1.1 403") || !strings.Contains(out, "X-Lockhttp-Rule: floor:tunnel-binding") {
			t.Errorf("a Host naming another port:\n%s", out)
		}
		if origin.count() != before {
			t.Errorf("the origin saw %d of them", origin.count()-before)
		}
	})

	t.Run("TLS on :443 decided by SNI, decrypted, HTTP/1.1 and HTTP/2", func(t *testing.T) {
		a := ns.curl(t, "--cacert", ca, "--http1.1", "https://origin.test/tls")
		if a.status != 200 || a.body != "origin saw GET /tls (0 bytes)" || a.version != "1.1" {
			t.Fatalf("HTTPS over HTTP/1.1: %+v", a)
		}
		wantRecord(t, record(t, a), "transparent-tunnel-request", "https://origin.test:443/tls", "FREE", "trusted")
		a = ns.curl(t, "--cacert", ca, "--http2", "https://origin.test/h2")
		if a.status != 200 || a.body != "origin saw GET /h2 (0 bytes)" || a.version != "2" {
			t.Fatalf("HTTPS over HTTP/2: %+v", a)
		}
		rec := record(t, a)
		wantRecord(t, rec, "transparent-tunnel-request", "https://origin.test:443/h2", "FREE", "trusted")
		if rec["stream"] == nil {
			t.Errorf("the HTTP/2 request's record has no stream: %v", rec)
		}
		a = ns.curl(t, "--cacert", ca, "-X", "POST", "-d", "x", "https://origin.test/api/x")
		if a.status != 403 || a.rule != "no-api-posts" {
			t.Errorf("a refused POST inside: %+v", a)
		}
		// A host refused as a whole: the refusal inside the TLS connection, where curl shows it.
		a = ns.curl(t, "--cacert", ca, "https://denied.test/")
		if a.status != 403 || a.code != "E_RULE" || a.rule != "deny" {
			t.Errorf("a denied host: %+v", a)
		}
		testkit.WaitFor(t, 10*time.Second, "the TLS connections' records", func() bool {
			n := 0
			for _, m := range r.auditRecords() {
				if m["event"] == "transparent-connect" && (m["url"] == "origin.test:443" && m["verdict"] == "FREE" || m["url"] == "denied.test:443" && m["verdict"] == "DENY") {
					n++
				}
			}
			return n >= 4
		})
	})

	t.Run("a ClientHello without SNI is refused", func(t *testing.T) {
		a := ns.curl(t, "--cacert", ca, "https://"+ns.gateIP+"/")
		if a.status != 0 || !strings.Contains(a.out, "unrecognized name") {
			t.Errorf("curl to the IP literal: %+v", a)
		}
		c, err := tls.Dial("tcp", ns.gateIP+":443", &tls.Config{InsecureSkipVerify: true})
		if err == nil {
			c.Close()
			t.Fatal("a handshake without SNI completed")
		}
		testkit.WaitFor(t, 5*time.Second, "the refusal's record", func() bool {
			for _, m := range r.auditRecords() {
				if m["event"] == "transparent-connect" && m["url"] == ":443" && m["verdict"] == "DENY" && m["rule"] == "floor:sni" {
					return true
				}
			}
			return false
		})
	})

	pool := x509.NewCertPool()
	pemData, _ := os.ReadFile(ca)
	pool.AppendCertsFromPEM(pemData)

	t.Run("SNI against Host inside is refused", func(t *testing.T) {
		before := origin.count()
		c, err := tls.Dial("tcp", ns.gateIP+":443", &tls.Config{ServerName: "origin.test", RootCAs: pool, NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "GET /x HTTP/1.1\r\nHost: other.test\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 403 || resp.Header.Get(gate.HeaderRule) != "floor:tunnel-binding" || origin.count() != before {
			t.Errorf("Host other.test inside origin.test's TLS: %d %v", resp.StatusCode, resp.Header)
		}
	})

	t.Run("a ClientHello split over records and writes is read", func(t *testing.T) {
		raw, err := net.Dial("tcp", ns.gateIP+":443")
		if err != nil {
			t.Fatal(err)
		}
		sc := &splitHello{Conn: raw}
		c := tls.Client(sc, &tls.Config{ServerName: "origin.test", RootCAs: pool, NextProtos: []string{"http/1.1"}})
		defer c.Close()
		c.SetDeadline(time.Now().Add(20 * time.Second))
		io.WriteString(c, "GET /split HTTP/1.1\r\nHost: origin.test\r\nConnection: close\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("after a split ClientHello: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(body) != "origin saw GET /split (0 bytes)" || sc.writes < 2 {
			t.Errorf("%d %q (%d writes)", resp.StatusCode, body, sc.writes)
		}
	})

	t.Run("the transparent ports follow the policy's allow_ports", func(t *testing.T) { transparentPortsFollow(t, r, ns.gateIP) })
}

// transparentPortsFollow: the gate's status names its transparent address and the ports it
// serves there, 80, 443 and the policy's allow_ports; a port the policy drops stops listening.
func transparentPortsFollow(t *testing.T, r *running, gateIP string) {
	ports := func() []int {
		st := gateStatus(t, r.up)
		if st.Transparent != gateIP {
			t.Fatalf("the status names the transparent address %q, want %s", st.Transparent, gateIP)
		}
		return st.TransparentPorts
	}
	if got := fmt.Sprint(ports()); got != "[80 443 18443]" {
		t.Fatalf("transparent ports %s, want [80 443 18443]", got)
	}
	c, err := net.DialTimeout("tcp", gateIP+":18443", 5*time.Second)
	if err != nil {
		t.Fatalf("port 18443 of allow_ports: %v", err)
	}
	c.Close()
	data, _ := os.ReadFile(r.policy)
	writeAtomic(t, r.policy, bytes.Replace(data, []byte("allow_ports = [80, 443, 18443]"), []byte("allow_ports = [80, 443]"), 1))
	testkit.WaitFor(t, 20*time.Second, "the transparent listener on 18443 closed", func() bool {
		return fmt.Sprint(ports()) == "[80 443]"
	})
	if c, err := net.DialTimeout("tcp", gateIP+":18443", 5*time.Second); err == nil {
		c.Close()
		t.Error("port 18443 still listens after the policy dropped it")
	}
}

// splitHello sends its first write (the ClientHello's record) as two records, in two writes.
type splitHello struct {
	net.Conn
	writes int
}

func (s *splitHello) Write(p []byte) (int, error) {
	if s.writes > 0 || len(p) < 5 || p[0] != 0x16 {
		s.writes++
		return s.Conn.Write(p)
	}
	n := int(binary.BigEndian.Uint16(p[3:]))
	msg := p[5 : 5+n]
	half := len(msg) / 2
	for _, part := range [][]byte{msg[:half], msg[half:]} {
		rec := append([]byte{0x16, p[1], p[2], byte(len(part) >> 8), byte(len(part))}, part...)
		if _, err := s.Conn.Write(rec); err != nil {
			return 0, err
		}
		s.writes++
		time.Sleep(50 * time.Millisecond) // two segments on the wire, not one
	}
	if rest := p[5+n:]; len(rest) > 0 {
		if _, err := s.Conn.Write(rest); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// dnsQuery asks server one question over UDP or TCP and returns the reply's header and answers.
func dnsQuery(t *testing.T, server, name string, typ dnsmessage.Type, tcp bool) (dnsmessage.Header, []dnsmessage.Resource) {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 7, RecursionDesired: true})
	b.StartQuestions()
	b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET})
	q, _ := b.Finish()
	network := "udp"
	if tcp {
		network = "tcp"
		q = append(binary.BigEndian.AppendUint16(nil, uint16(len(q))), q...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, network, net.JoinHostPort(server, "53"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write(q)
	buf := make([]byte, 2048)
	var reply []byte
	if tcp {
		var l [2]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			t.Fatal(err)
		}
		reply = buf[:binary.BigEndian.Uint16(l[:])]
		if _, err := io.ReadFull(c, reply); err != nil {
			t.Fatal(err)
		}
	} else {
		n, err := c.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		reply = buf[:n]
	}
	var m dnsmessage.Message
	if err := m.Unpack(reply); err != nil {
		t.Fatal(err)
	}
	return m.Header, m.Answers
}
