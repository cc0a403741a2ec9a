package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/lockhttp/lockhttp/internal/enclosure"
	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/stack"
	"github.com/lockhttp/lockhttp/internal/testkit"
	shipped "github.com/lockhttp/lockhttp/policy"
	mdnetlink "github.com/mdlayher/netlink"
	"github.com/mdlayher/netlink/nltest"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// agentPATH is the agent's PATH in these tests: the system's directories, which its uid can
// search (a PATH under /root would not be).
const agentPATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// originAddr is where the tests' origin behind the gate listens, on ports 80 and 443: an address
// of the loopback no other test uses, which [floor.hosts] names.
const originAddr = "127.0.0.27"

// hostAddrs are this machine's addresses outside the loopback (and outside the enclosures'
// range) that are up: where an agent would go to reach the host's services directly.
func hostAddrs(t *testing.T) (v4, v6 netip.Addr) {
	t.Helper()
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	encl := netip.MustParsePrefix("198.18.0.0/15")
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 || strings.HasPrefix(ifc.Name, "lox-") {
			continue
		}
		if l, err := netlink.LinkByIndex(ifc.Index); err != nil || l.Attrs().OperState != netlink.OperUp {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			p, err := netip.ParsePrefix(a.String())
			if err != nil {
				continue
			}
			ip := p.Addr()
			switch {
			case ip.Is4() && !v4.IsValid() && !encl.Contains(ip):
				v4 = ip
			case ip.Is6() && !v6.IsValid() && !ip.IsLinkLocalUnicast():
				v6 = ip
			}
		}
	}
	if !v4.IsValid() {
		if os.Getenv("CI") == "true" {
			t.Fatal("this machine has no IPv4 address outside the loopback: the canary needs one")
		}
		t.Skip("this machine has no IPv4 address outside the loopback")
	}
	return v4, v6
}

// canary logs every connection and datagram that reaches it: a listener an enclosed agent
// must never reach directly.
type canary struct {
	mu   sync.Mutex
	hits []string
}

func (c *canary) hit(format string, a ...any) {
	c.mu.Lock()
	c.hits = append(c.hits, fmt.Sprintf(format, a...))
	c.mu.Unlock()
}

func (c *canary) all() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.hits...)
}

// tcp listens on addr and logs each connection; it returns the address it listens on.
func (c *canary) tcp(t *testing.T, addr string) string {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the canary on %s: %v", addr, err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			c.hit("tcp %s from %s", ln.Addr(), conn.RemoteAddr())
			conn.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\ncanary"))
			conn.Close()
		}
	}()
	return ln.Addr().String()
}

// udp listens on addr and logs each datagram; it returns the address it listens on.
func (c *canary) udp(t *testing.T, addr string) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatalf("the canary on udp %s: %v", addr, err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			c.hit("udp %s from %s (%d bytes)", pc.LocalAddr(), from, n)
		}
	}()
	return pc.LocalAddr().String()
}

// goClientSrc is a Go program that ignores the proxy variables (Proxy: nil) and trusts the
// bundle SSL_CERT_FILE names, as Go does on Linux.
const goClientSrc = `package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func main() {
	c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{Proxy: nil, ForceAttemptHTTP2: true}}
	resp, err := c.Get(os.Args[1])
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, resp.Header.Get("X-LockHTTP-Code"), string(b))
}
`

// probePy tries one thing from inside and prints what became of it and how long it took (ms):
// udp HOST PORT, tcp6 HOST PORT, dns HOST PORT NAME (an A query).
const probePy = `import errno, socket, struct, sys, time
kind, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
t0 = time.monotonic()
try:
    if kind == "udp":
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5); s.connect((host, port))
        s.send(b"ping"); s.recv(64); r = "ANSWERED"
    elif kind == "tcp6":
        s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM); s.settimeout(5); s.connect((host, port)); r = "CONNECTED"
    else:
        q = struct.pack(">HHHHHH", 0x2727, 0x0100, 1, 0, 0, 0)
        q += b"".join(bytes([len(l)]) + l.encode() for l in sys.argv[4].split(".")) + b"\0" + struct.pack(">HH", 1, 1)
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5); s.connect((host, port)); s.send(q)
        a = s.recv(512); n = struct.unpack(">H", a[6:8])[0]
        r = "ANSWER %d %s" % (n, socket.inet_ntoa(a[-4:]) if n else "-")
except socket.timeout:
    r = "TIMEOUT"
except OSError as e:
    r = errno.errorcode.get(e.errno, str(e.errno))
print("%s %d" % (r, (time.monotonic() - t0) * 1000))
`

// enclosedPolicy is the shipped policy with what the test's origins need: origin.test trusted
// (free reads), ask.test not (a read asks), deny.test on the deny list, both names in
// [floor.hosts] at originAddr.
func enclosedPolicy(t *testing.T) string {
	t.Helper()
	p := string(shipped.Default)
	for _, r := range [][2]string{
		{"trusted = [\n", "trusted = [\n  \"origin.test\",\n"},
		{"deny = [\n", "deny = [\n  \"deny.test\",\n"},
		{"allow_cidrs = []", "allow_cidrs = [\"" + originAddr + "/32\"]"},
		{"[floor.hosts]\n", "[floor.hosts]\n\"origin.test\" = \"" + originAddr + "\"\n\"ask.test\" = \"" + originAddr + "\"\n"},
	} {
		if !strings.Contains(p, r[0]) {
			t.Fatalf("the shipped policy has no %q", r[0])
		}
		p = strings.Replace(p, r[0], r[1], 1)
	}
	if !strings.Contains(p, enclosure.DefaultSubnet.String()) {
		t.Fatalf("the shipped policy's [sources] lack the enclosure subnet %s", enclosure.DefaultSubnet)
	}
	return p
}

// agentBase makes the test's directories, searchable by others as a home directory may be,
// with tmp/ for the agent's files, and checks that the agent's uid is free (and frees it after).
func agentBase(t *testing.T) (base, tmp string) {
	t.Helper()
	const uid = stack.DefaultAgentUID
	if pids := processesOf(uid); len(pids) > 0 {
		t.Fatalf("uid %d already runs %v: the test needs it free", uid, pids)
	}
	t.Cleanup(func() {
		for _, pid := range processesOf(uid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		// Killed, they are gone once reaped: the next test needs the uid free.
		testkit.WaitFor(t, 10*time.Second, "no process left as the agent's uid", func() bool { return len(processesOf(uid)) == 0 })
	})
	base = t.TempDir()
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	tmp = filepath.Join(base, "tmp")
	if err := os.Mkdir(tmp, 0o711); err != nil {
		t.Fatal(err)
	}
	os.Chmod(tmp, 0o711)
	return base, tmp
}

// clientOutcome is one client's line of the agent's script: R|NAME|EXIT|MS|OUTPUT.
type clientOutcome struct {
	name string
	exit int
	ms   int
	out  string
}

func outcomes(stdout string) map[string]clientOutcome {
	m := map[string]clientOutcome{}
	for _, line := range strings.Split(stdout, "\n") {
		f := strings.SplitN(line, "|", 5)
		if len(f) != 5 || f[0] != "R" {
			continue
		}
		code, _ := strconv.Atoi(f[2])
		ms, _ := strconv.Atoi(f[3])
		m[f[1]] = clientOutcome{f[1], code, ms, f[4]}
	}
	return m
}

// TestEnclosedAgent is issue 27's acceptance for lox run -- COMMAND, with the real shipped-style
// policy and real clients. A canary on this machine (on a host address, ports 80, 443 and
// another, over UDP and IPv6 too, and on the loopback) logs every direct hit, and a resolver
// stand-in on a host address, the host's resolver for lox, logs every query: under lox run --,
// curl with --noproxy '*', curl to an IP literal, curl with only HTTP_PROXY, Node's fetch, a Go
// client with Proxy: nil, an HTTP/2 client, Python requests without the proxy variables, git
// and pip hit neither. Other ports, UDP and IPv6 fail at once (refused, unreachable or not
// permitted; never a timeout). With the gate's transparent listeners, each request is decided
// and audited: a free one answered, an ASK held until approved, a DENY refused.
func TestEnclosedAgent(t *testing.T) {
	requireRoot(t)
	for _, tool := range []string{"curl", "node", "python3", "git", "pip", "mount", "go"} {
		requireTool(t, tool)
	}
	host, host6 := hostAddrs(t)
	base, tmp := agentBase(t)
	state := filepath.Join(base, "state")

	// The canary: the host's ports 80 and 443 and another, UDP, IPv6, the host's loopback.
	cn := &canary{}
	hostHTTP := cn.tcp(t, net.JoinHostPort(host.String(), "80"))
	cn.tcp(t, net.JoinHostPort(host.String(), "443"))
	hostOther := cn.tcp(t, net.JoinHostPort(host.String(), "0"))
	hostUDP := cn.udp(t, net.JoinHostPort(host.String(), "0"))
	loopback := cn.tcp(t, "127.0.0.1:0")
	var host6Other string
	if host6.IsValid() {
		host6Other = cn.tcp(t, net.JoinHostPort(host6.String(), "0"))
	}
	// The resolver stand-in, the host's resolver for lox and what it starts.
	resolver := &canary{}
	resolver.udp(t, net.JoinHostPort(host.String(), "53"))
	resolver.tcp(t, net.JoinHostPort(host.String(), "53"))
	resolvConf := filepath.Join(base, "host-resolv.conf")
	os.WriteFile(resolvConf, []byte("nameserver "+host.String()+"\n"), 0o644)

	// The origin behind the gate: origin.test and ask.test on originAddr, 443 and 80.
	pki := newTestPKI(t)
	rec := &originRecorder{}
	tlsLn, err := tls.Listen("tcp", originAddr+":443", &tls.Config{Certificates: []tls.Certificate{pki.leaf(t, []string{"origin.test", "ask.test"}, time.Now().Add(24*time.Hour), false)}, NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	plainLn, err := net.Listen("tcp", originAddr+":80")
	if err != nil {
		t.Fatal(err)
	}
	for _, ln := range []net.Listener{tlsLn, plainLn} {
		srv := &http.Server{Handler: rec}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
	}

	bin := filepath.Join(base, "bin")
	os.Mkdir(bin, 0o755)
	os.WriteFile(filepath.Join(bin, "goclient.go"), []byte(goClientSrc), 0o644)
	if out, err := exec.Command("go", "build", "-o", filepath.Join(bin, "goclient"), filepath.Join(bin, "goclient.go")).CombinedOutput(); err != nil {
		t.Fatalf("building the Go client: %v\n%s", err, out)
	}
	os.WriteFile(filepath.Join(bin, "probe.py"), []byte(probePy), 0o644)
	polPath := filepath.Join(base, "policy.toml")
	os.WriteFile(polPath, []byte(enclosedPolicy(t)), 0o600)

	hostUDPPort := hostUDP[strings.LastIndex(hostUDP, ":")+1:]
	noProxy := "env -u http_proxy -u https_proxy -u all_proxy -u HTTP_PROXY -u HTTPS_PROXY -u ALL_PROXY"
	ipv6Target := "[2001:db8::27]:80"
	ipv6Probe := "2001:db8::27 80"
	if host6Other != "" {
		ipv6Target = host6Other
		i := strings.LastIndex(host6Other, ":")
		ipv6Probe = strings.Trim(host6Other[:i], "[]") + " " + host6Other[i+1:]
	}
	script := `r() { name=$1; shift; s=$(date +%s%N); out=$("$@" 2>&1); rc=$?; e=$(date +%s%N)
  printf 'R|%s|%d|%d|%s\n' "$name" "$rc" $(( (e - s) / 1000000 )) "$(printf %s "$out" | tr '\n' ' ' | cut -c1-400)"; }
B=` + bin + `
r curl-other-port curl -sS --noproxy '*' --max-time 10 http://` + hostOther + `/
r curl-host-loopback curl -sS --noproxy '*' --max-time 10 http://` + loopback + `/
r curl-ipv6 curl -sS -g --noproxy '*' --max-time 10 http://` + ipv6Target + `/
r node-other-port node -e 'fetch("http://` + hostOther + `/").then(r => console.log(r.status), e => { console.log("ERR", e.cause && e.cause.code); process.exit(1) })'
r go-other-port $B/goclient http://` + hostOther + `/
r udp python3 $B/probe.py udp ` + host.String() + ` ` + hostUDPPort + `
r tcp6 python3 $B/probe.py tcp6 ` + ipv6Probe + `
r dns-hardcoded python3 $B/probe.py dns ` + host.String() + ` 53 outside.example
r dns-glibc getent hosts outside.example
r curl-noproxy curl -sS --noproxy '*' --max-time 20 https://origin.test/noproxy
r curl-ip-literal curl -sS --noproxy '*' --max-time 20 -o /dev/null -w '%{http_code} %header{x-lockhttp-code}' http://` + hostHTTP + `/literal
r curl-only-http-proxy ` + noProxy + ` HTTP_PROXY="$HTTP_PROXY" curl -sS --max-time 20 http://origin.test/only-http-proxy
r curl-h2 curl -sS --http2 --noproxy '*' --max-time 20 -w ' %{http_version}' https://origin.test/h2
r node-fetch node -e 'fetch("https://origin.test/node").then(r => r.text()).then(t => console.log(t), e => { console.log("ERR", e.cause && e.cause.code); process.exit(1) })'
r go-proxy-nil $B/goclient https://origin.test/go
r python-requests ` + noProxy + ` python3 -c 'import requests; r = requests.get("https://origin.test/python", timeout=20); print(r.status_code, r.text)'
r git env GIT_TERMINAL_PROMPT=0 git ls-remote https://origin.test/repo.git
r pip pip download --no-deps --no-cache-dir --retries 0 --timeout 20 -d ./pip --index-url https://origin.test/simple/ lockhttp-canary
r curl-deny curl -sS --noproxy '*' --max-time 20 -o /dev/null -w '%{http_code} %header{x-lockhttp-code}' http://deny.test/x
echo ASKING
r curl-ask curl -sS --noproxy '*' --max-time 90 https://ask.test/held
`
	cmd := exec.Command("sh", "-c", `mount --bind "$0" /etc/resolv.conf && exec "$@"`, resolvConf,
		filepath.Join(binDir, "lox"), "run", "--headless", "--state", state, "--policy", polPath, "--listen", "127.0.0.1:0",
		"--hub-listen", "127.0.0.1:0", "--roots", pki.rootPEM, "--agent-name", "enclosed", "--", "sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	cmd.Env = []string{"PATH=" + agentPATH, "TMPDIR=" + tmp, "HOME=/root", "LANG=C.UTF-8"}
	l := &agentLox{cmd: cmd, stdout: &testkit.Buffer{}, stderr: &testkit.Buffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = l.stdout, l.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { cmd.Wait(); close(l.done) }()
	t.Cleanup(func() {
		select {
		case <-l.done:
		default:
			cmd.Process.Kill()
			<-l.done
		}
	})

	// The held ASK: once the command asks, a human approves it.
	askEnv := &askEnv{running: &running{t: t, state: state}}
	approved := false
	select {
	case <-l.done:
	case <-waitFor(func() bool { return strings.Contains(l.stdout.String(), "ASKING") }, 180*time.Second):
		deadline := time.Now().Add(15 * time.Second)
		for !approved && time.Now().Before(deadline) {
			var pending []hub.Ticket
			if out, err := askEnv.lox(t, "tickets", "--json"); err == nil {
				json.Unmarshal([]byte(out), &pending)
			}
			for _, tk := range pending {
				if defaultPort(tk.URL) == "https://ask.test/held" {
					if out, err := askEnv.lox(t, "approve", tk.ID); err != nil {
						t.Errorf("lox approve: %v\n%s", err, out)
					}
					approved = true
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	code := l.wait(t, 240*time.Second)
	out := l.stdout.String()
	t.Logf("lox exited %d\nstdout:\n%s\nstderr:\n%s", code, out, l.stderr)
	res := outcomes(out)
	if len(res) == 0 {
		t.Fatalf("the command ran no client (lox exited %d)", code)
	}

	t.Run("no direct hit", func(t *testing.T) {
		if len(res) < 19 {
			t.Errorf("the command ran %d clients, want 20", len(res))
		}
		if hits := cn.all(); len(hits) > 0 {
			t.Errorf("the canary was reached directly:\n%s", strings.Join(hits, "\n"))
		}
		if q := resolver.all(); len(q) > 0 {
			t.Errorf("DNS left the machine: the host's resolver saw\n%s", strings.Join(q, "\n"))
		}
	})
	t.Run("other ports, UDP and IPv6 fail at once", func(t *testing.T) {
		for name, want := range map[string]string{
			// curl's exit 7 is "could not connect"; 28 would be a timeout.
			"curl-other-port":    "exit 7",
			"curl-host-loopback": "exit 7",
			"curl-ipv6":          "exit 7",
			"node-other-port":    "ERR ECONNREFUSED",
			"go-other-port":      "connection refused",
			"udp":                "EPERM|ECONNREFUSED",
			"tcp6":               "EADDRNOTAVAIL|ENETUNREACH|ECONNREFUSED",
		} {
			o, ok := res[name]
			if !ok {
				t.Errorf("%s: no clientOutcome", name)
				continue
			}
			got := o.out
			if strings.HasPrefix(want, "exit ") {
				got = fmt.Sprintf("exit %d", o.exit)
			}
			matched := false
			for _, w := range strings.Split(want, "|") {
				matched = matched || strings.Contains(got, w)
			}
			if !matched || o.ms > 5000 {
				t.Errorf("%s: %q (exit %d) after %d ms, want %s at once", name, o.out, o.exit, o.ms, want)
			}
			t.Logf("%s failed in %d ms: %s", name, o.ms, o.out)
		}
	})
	t.Run("decided by the gate", func(t *testing.T) {
		gateAddr := ""
		for _, line := range strings.Split(l.stderr.String(), "\n") {
			if _, rest, ok := strings.Cut(line, "one way out is the gate at "); ok {
				gateAddr, _, _ = strings.Cut(rest, " ")
			}
		}
		for name, want := range map[string]string{
			"curl-noproxy":         "origin saw GET /noproxy",
			"curl-ip-literal":      "403 E_FLOOR",
			"curl-only-http-proxy": "origin saw GET /only-http-proxy",
			"curl-h2":              "origin saw GET /h2 (0 bytes) 2",
			"node-fetch":           "origin saw GET /node",
			"go-proxy-nil":         "200  origin saw GET /go",
			"python-requests":      "200 origin saw GET /python",
			"curl-deny":            "403 E_RULE",
			"curl-ask":             "origin saw GET /held",
			"dns-hardcoded":        "ANSWER 1 " + gateAddr,
			"dns-glibc":            gateAddr + " ",
		} {
			if o := res[name]; !strings.Contains(o.out, want) || gateAddr == "" {
				t.Errorf("%s: %q (exit %d), want %q", name, o.out, o.exit, want)
			}
		}
		// git and pip go through the proxy (their variables): git asks for no password for the
		// user the proxy URL names.
		if o := res["git"]; o.exit != 0 || strings.Contains(o.out, "assword") {
			t.Errorf("git: %q (exit %d), want the origin's answer through the gate, asking for no password", o.out, o.exit)
		}
		if !approved {
			t.Error("no ticket for https://ask.test/held was pending to approve")
		}
		r := &running{t: t, up: stack.Up{AuditDir: filepath.Join(state, "audit")}}
		records := r.auditRecords()
		for _, want := range []struct{ url, verdict, rule string }{
			{"https://origin.test/noproxy", "FREE", "trusted"},
			{"http://origin.test/only-http-proxy", "FREE", "trusted"},
			{"https://origin.test/h2", "FREE", "trusted"},
			{"https://origin.test/node", "FREE", "trusted"},
			{"https://origin.test/go", "FREE", "trusted"},
			{"https://origin.test/python", "FREE", "trusted"},
			{"https://origin.test/repo.git/info/refs?service=git-upload-pack", "FREE", "trusted"},
			{"https://origin.test/simple/lockhttp-canary/", "FREE", "trusted"},
			{"http://deny.test/x", "DENY", "deny"},
			{"https://ask.test/held", "ASK", ""},
		} {
			found := false
			for _, m := range records {
				if defaultPort(fmt.Sprint(m["url"])) == want.url && m["container"] == "local" && (m["verdict"] == want.verdict || want.verdict == "ASK" && m["verdict"] == "APPROVED") && (want.rule == "" || m["rule"] == want.rule) {
					found = true
				}
			}
			if !found {
				t.Errorf("no audit record of %s %s (rule %q) from the container local", want.verdict, want.url, want.rule)
			}
		}
		if t.Failed() {
			for _, m := range records {
				t.Logf("audit: %v %v %v %v %v %v", m["event"], m["container"], m["url"], m["verdict"], m["code"], m["rule"])
			}
		}
		for _, path := range []string{"/noproxy", "/only-http-proxy", "/h2", "/node", "/go", "/python", "/held", "/repo.git/info/refs?service=git-upload-pack", "/simple/lockhttp-canary/"} {
			seen := false
			for _, q := range rec.all() {
				seen = seen || q.Path == path
			}
			if !seen {
				t.Errorf("the origin never saw %s through the gate", path)
			}
		}
	})
	t.Run("gone with the command", func(t *testing.T) {
		_, rest, ok := strings.Cut(l.stderr.String(), "(link ")
		link, _, _ := strings.Cut(rest, ",")
		if !ok || !strings.HasPrefix(link, "lox-") {
			t.Fatalf("lox named no link:\n%s", l.stderr)
		}
		if _, err := netlink.LinkByName(link); err == nil {
			t.Errorf("the link %s is still there after lox exited", link)
		}
		if tables := nftTables(t); strings.Contains(tables, "lockhttp-"+link) {
			t.Errorf("the table lockhttp-%s is still there after lox exited", link)
		}
	})
}

// loxLinks are this machine's enclosure links.
func loxLinks() map[string]bool {
	m := map[string]bool{}
	links, _ := netlink.LinkList()
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, "lox-") {
			m[l.Attrs().Name] = true
		}
	}
	return m
}

// nftTables names this machine's nftables tables, one a line.
func nftTables(t *testing.T) string {
	t.Helper()
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	tables, err := c.ListTables()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tb := range tables {
		names = append(names, tb.Name)
	}
	return strings.Join(names, "\n")
}

// defaultPort drops a URL's port when it is its scheme's default.
func defaultPort(u string) string {
	for scheme, port := range map[string]string{"https://": ":443", "http://": ":80"} {
		if rest, ok := strings.CutPrefix(u, scheme); ok {
			host, path, _ := strings.Cut(rest, "/")
			return scheme + strings.TrimSuffix(host, port) + "/" + path
		}
	}
	return u
}

// waitFor closes its channel once cond holds, polling until within passes.
func waitFor(cond func() bool, within time.Duration) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		deadline := time.Now().Add(within)
		for time.Now().Before(deadline) {
			if cond() {
				close(ch)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	return ch
}

// TestEnclosureRulesFailCommandNeverStarts runs lox's own flow (stack.Run, the real signer,
// console and gate) with a seam in the netlink calls that set the agent's rules: refused by the
// kernel, or taken and not kept. Run returns the cause, the command never ran (its marker file
// is not there, no process ran as the agent's uid), and neither the link nor the host's table
// is left behind.
func TestEnclosureRulesFailCommandNeverStarts(t *testing.T) {
	requireRoot(t)
	base, tmp := agentBase(t)
	t.Setenv("TMPDIR", tmp)
	pol := filepath.Join(base, "policy.toml")
	os.WriteFile(pol, []byte(minimalPolicy), 0o600)
	batch := mdnetlink.HeaderType(unix.NFNL_MSG_BATCH_BEGIN)
	for i, tc := range []struct {
		name  string
		reply func(req []mdnetlink.Message) ([]mdnetlink.Message, error)
		want  string
	}{
		{"refused", func(req []mdnetlink.Message) ([]mdnetlink.Message, error) {
			if len(req) > 0 && req[0].Header.Type == batch {
				return nltest.Error(int(unix.EPERM), req)
			}
			return nil, nil
		}, "setting the agent's rules: netlink receive: operation not permitted"},
		{"not kept", func(req []mdnetlink.Message) ([]mdnetlink.Message, error) { return nil, nil },
			`checking the agent's rules: the table "lockhttp" is not there`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			marker := filepath.Join(tmp, "ran")
			rules := func(ns int) (*nftables.Conn, error) {
				if ns < 0 {
					return nftables.New()
				}
				return nftables.New(nftables.WithTestDial(tc.reply))
			}
			before, beforeTables := loxLinks(), nftTables(t)
			var out testkit.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			err := stack.Run(ctx, stack.Options{StateDir: filepath.Join(base, fmt.Sprintf("state-%d", i)), PolicyPath: pol,
				Listen: "127.0.0.1:0", HubListen: "127.0.0.1:0", BinDir: binDir, Headless: true, Stdout: &out, Stderr: &out,
				Agent:     &stack.Agent{Argv: []string{"sh", "-c", "touch " + marker}, UID: stack.DefaultAgentUID},
				Enclosure: enclosure.Config{Rules: rules}})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Run: %v, want the cause %q\n%s", err, tc.want, out.String())
			}
			if _, err := os.Stat(marker); !os.IsNotExist(err) {
				t.Errorf("the command ran: %v", err)
			}
			if strings.Contains(out.String(), "lox: starting ") {
				t.Errorf("lox said it started the command:\n%s", out.String())
			}
			if pids := processesOf(stack.DefaultAgentUID); len(pids) > 0 {
				t.Errorf("processes as the agent's uid: %v", pids)
			}
			for l := range loxLinks() {
				if !before[l] {
					t.Errorf("the link %s is left", l)
				}
			}
			for _, tb := range strings.Split(nftTables(t), "\n") {
				if strings.HasPrefix(tb, "lockhttp-lox-") && !strings.Contains(beforeTables, tb) {
					t.Errorf("the host table %s is left", tb)
				}
			}
		})
	}
}

// TestEnclosureLoxKilled: when lox is killed (no cleanup runs), the command dies with it and the
// namespace with its last process, which takes the link; the host table it leaves is removed by
// the next lox run --, and a command runs there in an enclosure of its own.
func TestEnclosureLoxKilled(t *testing.T) {
	requireRoot(t)
	base, tmp := agentBase(t)
	pol := filepath.Join(base, "policy.toml")
	os.WriteFile(pol, []byte(minimalPolicy), 0o600)
	args := func(state string, cmd ...string) []string {
		return append([]string{"run", "--headless", "--state", filepath.Join(base, state), "--policy", pol, "--listen", "127.0.0.1:0", "--hub-listen", "127.0.0.1:0", "--"}, cmd...)
	}
	l := startAgentLox(t, tmp, args("state-1", "sh", "-c", "echo ready; exec sleep 300")...)
	testkit.WaitFor(t, 60*time.Second, "the command to start", func() bool { return strings.Contains(l.stdout.String(), "ready") })
	_, rest, _ := strings.Cut(l.stderr.String(), "(link ")
	link, _, _ := strings.Cut(rest, ",")
	if !loxLinks()[link] || !strings.Contains(nftTables(t), "lockhttp-"+link) {
		t.Fatalf("no link %q or no table for it while the command runs:\n%s", link, l.stderr)
	}
	l.cmd.Process.Kill()
	l.wait(t, 10*time.Second)
	testkit.WaitFor(t, 10*time.Second, "the command gone with lox", func() bool { return len(processesOf(stack.DefaultAgentUID)) == 0 })
	testkit.WaitFor(t, 10*time.Second, "the link gone with the namespace", func() bool { return !loxLinks()[link] })
	if !strings.Contains(nftTables(t), "lockhttp-"+link) {
		t.Fatalf("the killed lox's table for %s is not there to be removed", link)
	}
	l2 := startAgentLox(t, tmp, args("state-2", "true")...)
	if code := l2.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("the next lox run -- exited %d:\n%s", code, l2.stderr)
	}
	if tables := nftTables(t); strings.Contains(tables, "lockhttp-"+link) {
		t.Errorf("the table lockhttp-%s is left after the next lox run --:\n%s", link, tables)
	}
}

// TestDoctorEnclosure: lockhttp doctor proves an enclosed agent's enclosure from inside its
// namespace, line by line; with the rules gone from both sides (as if nothing enclosed it), the
// same probes get out, and it says so with ERROR lines.
func TestDoctorEnclosure(t *testing.T) {
	requireRoot(t)
	host, _ := hostAddrs(t)
	base, tmp := agentBase(t)
	state := filepath.Join(base, "state")
	pol := filepath.Join(base, "policy.toml")
	os.WriteFile(pol, []byte(minimalPolicy), 0o600)
	l := startAgentLox(t, tmp, "run", "--headless", "--state", state, "--policy", pol, "--listen", "127.0.0.1:0", "--hub-listen", "127.0.0.1:0",
		"--", "sh", "-c", "echo ready; exec sleep 300")
	testkit.WaitFor(t, 60*time.Second, "the command to start", func() bool { return strings.Contains(l.stdout.String(), "ready") })
	var up stack.Up
	testkit.WaitFor(t, 10*time.Second, "the agent's pid in up.json", func() bool {
		data, _ := os.ReadFile(filepath.Join(state, stack.UpFile))
		return json.Unmarshal(data, &up) == nil && up.PIDs["agent"] != 0 && up.Enclosure != nil
	})
	gate := up.Enclosure.Gate

	out, code := runDoctor(t, "--state", state)
	t.Logf("doctor:\n%s", out)
	for _, want := range []string{
		"runs in a network namespace of its own",
		"the agent's /etc/resolv.conf names the gate (" + gate + ") alone",
		"the agent reaches the gate's proxy at " + gate + ":",
		"a TCP connection to " + host.String() + ":",
		"a TCP connection to " + gate + ":",
		"a UDP datagram to " + host.String() + ":",
		"an IPv6 connection to ",
		"a DNS query to " + host.String() + ":53 lands at the gate",
	} {
		if !hasLine(out, "OK", "enclosure", want) {
			t.Errorf("no OK enclosure line with %q", want)
		}
	}
	if code != 0 {
		t.Errorf("exit %d", code)
	}

	// Take the rules away on both sides: what the doctor tries now gets out, and it says so.
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	c.DelTable(&nftables.Table{Name: up.Enclosure.Table, Family: nftables.TableFamilyINet})
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	err = enclosure.InNamespace(up.PIDs["agent"], func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		c.DelTable(&nftables.Table{Name: "lockhttp", Family: nftables.TableFamilyINet})
		return c.Flush()
	})
	if err != nil {
		t.Fatal(err)
	}
	out, code = runDoctor(t, "--state", state)
	t.Logf("doctor without the rules:\n%s", out)
	for _, want := range []string{
		"a TCP connection to " + host.String() + ":",
		"a UDP datagram to " + host.String() + ":",
		"a DNS query for example.com to " + host.String() + ":53 got out",
	} {
		if !hasLine(out, "ERROR", "enclosure", want) {
			t.Errorf("no ERROR enclosure line with %q", want)
		}
	}
	if code != 2 {
		t.Errorf("exit %d, want 2", code)
	}
}
