package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/lockhttp/lockhttp/internal/explain"
	"github.com/lockhttp/lockhttp/internal/explain/explaintest"
	"github.com/lockhttp/lockhttp/internal/floor"
	"github.com/lockhttp/lockhttp/internal/gate"
	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// decideCorpus is the decide corpus (internal/explain/testdata/decide/README.md).
const decideCorpus = "../explain/testdata/decide"

// probeSource is the source address of the replay's own readiness probes: the replay's
// policies name it as a container of their own, so that a gate answers the probe whatever
// containers the case's policy names.
const probeSource = "127.0.0.1"

// replayCase is one case of the corpus made ready for the gate.
type replayCase struct {
	c   *explaintest.Case
	p   *explaintest.Prepared
	res *explain.Result // explain's decision, for the target's host and port
}

// replayGroup is the cases that share a policy, its files and its bindings: one stack.
type replayGroup struct {
	key   string
	work  string
	cases []*replayCase
}

// TestDecideCorpusAtTheGate replays the decide corpus through the real gate of a real stack:
// one lox run per policy (with its files and bindings), origins on a loopback address the
// policy names through [floor.hosts], each case's bytes sent as a client sends them (a plain
// proxy request, a CONNECT and the request inside its TLS or cleartext tunnel, a CONNECT alone)
// from the source address of the case's container. The gate's verdict, code and rule, read
// from its audit record of the answer's X-LockHTTP-Request, must be the file's (an ASK is
// E_NO_CONSOLE at a gate with no hub). Cases marked no-replay are skipped with their reason.
func TestDecideCorpusAtTheGate(t *testing.T) {
	cases, err := explaintest.Load(decideCorpus)
	if err != nil {
		t.Fatal(err)
	}
	if pat := os.Getenv("LOCKHTTP_DECIDE_CASES"); pat != "" {
		// Some cases only, by a pattern of their names (the README's way to replay a new one).
		re, err := regexp.Compile(pat)
		if err != nil {
			t.Fatalf("LOCKHTTP_DECIDE_CASES: %v", err)
		}
		cases = slices.DeleteFunc(cases, func(c *explaintest.Case) bool { return !re.MatchString(c.Name) })
	}
	pki := newTestPKI(t)
	o := startReplayOrigins(t, pki, cases)

	groups := map[string]*replayGroup{}
	var order []string
	skipped := 0
	for _, c := range cases {
		if c.Env.NoReplay != "" {
			t.Logf("%s: not replayed: %s", c.File, c.Env.NoReplay)
			skipped++
			continue
		}
		key := groupKey(c)
		g := groups[key]
		if g == nil {
			g = &replayGroup{key: key, work: t.TempDir()}
			groups[key] = g
			order = append(order, key)
		}
		p, err := c.Prepare(g.work)
		if err != nil {
			t.Fatal(err)
		}
		res, err := explain.Request(context.Background(), p.Raw, p.Options)
		if err != nil {
			t.Fatalf("%s: %v", c.File, err)
		}
		if why := unreplayable(p); why != "" {
			t.Logf("%s: not replayed: %s", c.File, why)
			skipped++
			continue
		}
		g.cases = append(g.cases, &replayCase{c: c, p: p, res: res})
	}
	replayed, mismatches := 0, 0
	for _, key := range order {
		g := groups[key]
		if len(g.cases) == 0 {
			continue
		}
		n, bad := g.replay(t, pki, o)
		replayed += n
		mismatches += bad
	}
	if mismatches > 0 {
		t.Errorf("%d of %d replayed cases disagree with their files", mismatches, replayed)
	}
	t.Logf("%d cases, %d replayed through the gate in %d stacks, %d not replayed", len(cases), replayed, len(order), skipped)
}

// groupKey is what one stack serves: the policy as written, its files, the bindings and the
// answers of --resolve.
func groupKey(c *explaintest.Case) string {
	var b strings.Builder
	b.WriteString(c.Policy)
	names := make([]string, 0, len(c.Files))
	for n := range c.Files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "\x00%s\x00%s", n, c.Files[n])
	}
	for _, bd := range c.Env.Bind {
		b.WriteString("\x00bind " + bd)
	}
	for _, r := range c.Env.Resolve {
		// The gate resolves through [floor.hosts]: an answer of --resolve is its policy's.
		b.WriteString("\x00resolve " + r)
	}
	return b.String()
}

// unreplayable says why the gate cannot be put in a case's environment, or "".
func unreplayable(p *explaintest.Prepared) string {
	for host := range p.Resolve {
		if ref := floor.Name(host); ref != nil {
			return fmt.Sprintf("--resolve %s: the gate resolves through [floor.hosts], which opens a name the floor refuses (%s)", host, ref.Check)
		}
	}
	return ""
}

// replayOrigins are the origins of every case: one loopback address, a listener on each port a
// case that goes out needs, answering plain HTTP and TLS (with a certificate for any name).
type replayOrigins struct {
	ip  netip.Addr
	rec *originRecorder
	// dials counts the connections the origins accepted (a tunnel decided at the domain
	// reaches an origin so; a request, which may reuse a pooled connection, reaches rec).
	dials atomic.Int64
}

func startReplayOrigins(t *testing.T, pki *testPKI, cases []*explaintest.Case) *replayOrigins {
	t.Helper()
	ports := map[int]bool{80: true, 443: true}
	for _, c := range cases {
		p, err := c.Prepare(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if res, err := explain.Request(context.Background(), p.Raw, p.Options); err == nil && res.Port > 0 && c.Want.Verdict == "FREE" {
			ports[res.Port] = true
		}
	}
	o := &replayOrigins{rec: &originRecorder{}}
	var certs sync.Map // SNI -> *tls.Certificate
	cfg := &tls.Config{GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
		name := strings.ToLower(h.ServerName)
		if name == "" {
			name = "origin.invalid"
		}
		if c, ok := certs.Load(name); ok {
			return c.(*tls.Certificate), nil
		}
		c := pki.leaf(t, []string{name}, time.Now().Add(24*time.Hour), false)
		certs.Store(name, &c)
		return &c, nil
	}}
	// A loopback address of the test's own, so that its ports 80 and 443 are free.
	for try := 0; ; try++ {
		ip := netip.AddrFrom4([4]byte{127, byte(100 + rand.IntN(100)), byte(rand.IntN(250) + 1), byte(rand.IntN(250) + 1)})
		var ls []net.Listener
		ok := true
		for port := range ports {
			l, err := net.Listen("tcp", netip.AddrPortFrom(ip, uint16(port)).String())
			if err != nil {
				ok = false
				if try == 5 {
					t.Fatalf("listening on %s:%d for the replay's origins: %v", ip, port, err)
				}
				break
			}
			ls = append(ls, l)
		}
		if !ok {
			for _, l := range ls {
				l.Close()
			}
			continue
		}
		for _, l := range ls {
			srv := &http.Server{Handler: o.rec, ReadHeaderTimeout: 10 * time.Second}
			go srv.Serve(&sniffListener{Listener: l, tls: cfg, accepted: &o.dials})
			t.Cleanup(func() { srv.Close() })
		}
		o.ip = ip
		return o
	}
}

// sniffListener answers TLS on a connection whose first byte is a handshake record, plain HTTP
// otherwise.
type sniffListener struct {
	net.Listener
	tls      *tls.Config
	accepted *atomic.Int64
}

func (l *sniffListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.accepted.Add(1)
		br := bufio.NewReader(c)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, err := br.Peek(1)
		c.SetReadDeadline(time.Time{})
		if err != nil {
			c.Close()
			continue
		}
		bc := &bufferedConn{Conn: c, r: br}
		if b[0] == 0x16 {
			return tls.Server(bc, l.tls), nil
		}
		return bc, nil
	}
}

// containerAddrs gives each container of a policy a loopback source address of its own; a
// container the policy does not name sends from one no container holds.
func containerAddrs(names []string) map[string]string {
	sort.Strings(names)
	out := map[string]string{}
	for i, n := range names {
		out[n] = fmt.Sprintf("127.1.0.%d", i+1)
	}
	return out
}

const strangerSource = "127.1.0.254"

// replayPolicy is the group's policy as the replay serves it: each container at its own
// loopback address, a container of the probe's, and [floor.hosts] naming the origins.
func (g *replayGroup) replayPolicy(t *testing.T, o *replayOrigins) (text string, addrs map[string]string, hasState bool) {
	t.Helper()
	var m map[string]any
	if _, err := toml.Decode(g.cases[0].p.Policy, &m); err != nil {
		t.Fatalf("%s: %v", g.cases[0].c.File, err)
	}
	sources, _ := m["sources"].(map[string]any)
	var names []string
	for n := range sources {
		names = append(names, n)
	}
	addrs = containerAddrs(names)
	src := map[string]any{"replay-probe": []any{probeSource + "/32"}}
	for n, a := range addrs {
		src[n] = []any{a + "/32"}
	}
	m["sources"] = src
	fl, _ := m["floor"].(map[string]any)
	if fl == nil {
		fl = map[string]any{}
	}
	hosts, _ := fl["hosts"].(map[string]any)
	policyHosts := map[string]bool{}
	for h := range hosts {
		n, _ := floor.Host(h)
		policyHosts[n] = true
	}
	if hosts == nil {
		hosts = map[string]any{}
	}
	origin := o.ip.String()
	setBy := map[string]string{} // what the cases need, over the policy's own entries
	set := func(file, host, addr string) {
		if prev, ok := setBy[host]; ok && prev != addr {
			t.Fatalf("%s: the replay needs %s at %s, and another case of its policy at %s; give one of them a policy of its own", file, host, addr, prev)
		}
		setBy[host] = addr
		hosts[host] = addr
	}
	for _, rc := range g.cases {
		host := rc.res.Host
		if host == "" || host == floor.SelfName || rc.c.Want.Rule == "secret:host" {
			continue
		}
		ip, resolved := rc.p.Resolve[host]
		switch {
		case goesOut(rc):
			set(rc.c.File, host, origin)
		case resolved:
			set(rc.c.File, host, ip.String())
		case policyHosts[host]:
		case floor.Name(host) == nil:
			// Never a DNS query: a host the floor does not refuse by name is an origin's.
			set(rc.c.File, host, origin)
		}
	}
	if len(g.cases[0].p.Bound) > 0 {
		set("bindings", "api.anthropic.com", origin)
	}
	fl["hosts"] = hosts
	cidrs, _ := fl["allow_cidrs"].([]any)
	fl["allow_cidrs"] = append(cidrs, origin+"/32")
	m["floor"] = fl
	var b bytes.Buffer
	if err := toml.NewEncoder(&b).Encode(m); err != nil {
		t.Fatal(err)
	}
	st, _ := m["settings"].(map[string]any)
	_, budgets := m["budget"]
	return b.String(), addrs, budgets || st["heuristics"] == "enforce"
}

// reached waits a little for cond: the origin accepts a connection on a goroutine of its own.
func reached(cond func() bool) bool {
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// goesOut reports whether a case's request leaves the gate for its origin: a FREE request, or
// a FREE CONNECT decided at the domain (a decrypted one goes nowhere by itself, the gate's own
// name is answered by the gate).
func goesOut(rc *replayCase) bool {
	return rc.c.Want.Verdict == "FREE" && rc.res.Kind != "connect-decrypted" && rc.res.Host != floor.SelfName
}

// replay runs the group's cases through one stack and returns how many it replayed and how
// many disagreed.
func (g *replayGroup) replay(t *testing.T, pki *testPKI, o *replayOrigins) (n, bad int) {
	t.Helper()
	text, addrs, hasState := g.replayPolicy(t, o)
	r := startStackWith(t, text, []string{"--roots", pki.rootPEM}, nil)
	defer r.stop()
	caPEM, err := os.ReadFile(r.up.CACert)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	for container, hashes := range g.cases[0].p.Bound {
		for _, h := range hashes {
			bindByApproval(t, r, pool, addrs[container], h)
		}
	}
	gates := map[bool]*replayGate{}
	gateFor := func(rc *replayCase) *replayGate {
		noDecrypt := rc.c.Env.NoDecrypt
		if hasState {
			// Budgets and the heuristics remember: a gate of the case's own, as fresh as
			// explain's empty counts and memory.
			if gates[noDecrypt] != nil {
				gates[noDecrypt].stop()
			}
			gates[noDecrypt] = startReplayGate(t, r, pki, rc.p.Secrets, noDecrypt)
			return gates[noDecrypt]
		}
		if gates[noDecrypt] == nil {
			gates[noDecrypt] = startReplayGate(t, r, pki, rc.p.Secrets, noDecrypt)
		}
		return gates[noDecrypt]
	}
	defer func() {
		for _, gw := range gates {
			gw.stop()
		}
	}()
	for _, rc := range g.cases {
		gw := gateFor(rc)
		src := strangerSource
		container := rc.c.Env.Container
		if container == "" && len(addrs) == 1 {
			for name := range addrs {
				container = name
			}
		}
		if a, ok := addrs[container]; ok {
			src = a
		}
		requests, dials := o.rec.count(), o.dials.Load()
		id, err := sendCase(gw.addr, src, pool, rc)
		if err != nil {
			t.Errorf("%s: sending it through the gate: %v", rc.c.File, err)
			bad++
			n++
			continue
		}
		rec := gw.records(t, []string{id})[id]
		n++
		if rec == nil {
			t.Errorf("%s: no audit record %q at the gate", rc.c.File, id)
			bad++
			continue
		}
		v, code, rule := str(rec["verdict"]), str(rec["code"]), str(rec["rule"])
		w := rc.c.Want
		same := v == w.Verdict && rule == w.Rule && (code == w.Code || v == "ASK" && askOutcome(rule) == code)
		if !same {
			t.Errorf("%s: the gate decided %s %s %s (%s); the file wants %s %s %s", rc.c.File, v, code, rule, str(rec["reason"]), w.Verdict, w.Code, w.Rule)
			bad++
		}
		// What the gate let out reached an origin: the replay went through the gate to it.
		if goesOut(rc) && !reached(func() bool { return o.rec.count() > requests || o.dials.Load() > dials }) {
			t.Errorf("%s: FREE at the gate, and the gate opened no connection to the origin", rc.c.File)
			bad++
		}
	}
	return n, bad
}

// askOutcome is the code of an ASK at a gate with no hub: no one to ask (E_NO_CONSOLE), or
// E_EXFIL_SUSPECT for an ASK of the heuristics.
func askOutcome(rule string) string {
	if rule == "heuristics" {
		return "E_EXFIL_SUSPECT"
	}
	return "E_NO_CONSOLE"
}

// replayGate is a gate of the stack's console and signer (none with no-decrypt) without a hub,
// so that every ASK is answered at once (E_NO_CONSOLE), with the case's secrets file. stop ends
// it.
type replayGate struct {
	*bareGate
	stop func()
}

func startReplayGate(t *testing.T, r *running, pki *testPKI, secrets string, noDecrypt bool) *replayGate {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	g := &replayGate{bareGate: &bareGate{addr: addr, audit: t.TempDir()}}
	signer := r.up.SignerSocket
	if noDecrypt {
		signer = ""
	}
	args := []string{"-listen", addr, "-console", r.up.ConsoleSocket, "-audit", g.audit, "-signer", signer,
		"-roots", pki.rootPEM, "-log-level", "warn", "-poll", "200ms", "-audit-summarize-after", "1000000"}
	if secrets != "" {
		args = append(args, "-secrets", secrets)
	}
	if os.Geteuid() == 0 {
		args = append(args, "-allow-root")
	}
	cmd := exec.Command(filepath.Join(binDir, "gate"), args...)
	log := &testkit.Buffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	g.stop = func() {
		cmd.Process.Kill()
		<-done
	}
	t.Cleanup(g.stop)
	// Ready once it answers its own name to the probe's source with a policy.
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(mustURL(t, "http://"+addr))}, Timeout: 2 * time.Second}
	testkit.WaitFor(t, 20*time.Second, "the replay's gate answering with a policy", func() bool {
		select {
		case <-done:
			t.Fatalf("the gate exited:\n%s", log)
		default:
		}
		resp, err := client.Get("http://lockhttp.internal/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return g
}

// bindByApproval binds the credential whose hash is hash to the container at source as a human
// does: a request carrying it asks at the stack's own gate, and lox approve binds it.
func bindByApproval(t *testing.T, r *running, pool *x509.CertPool, source, hash string) {
	t.Helper()
	key, ok := explaintest.ValueOfHash(hash)
	if !ok {
		t.Fatalf("bind %s: no credential of the corpus has this hash", hash)
	}
	raw := []byte("CONNECT api.anthropic.com:443 HTTP/1.1\r\nHost: api.anthropic.com:443\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: api.anthropic.com\r\nX-Api-Key: " + key + "\r\n\r\n")
	done := make(chan error, 1)
	go func() {
		_, err := sendRaw(r.up.Listen, source, pool, raw, false)
		done <- err
	}()
	ask := &askEnv{running: r}
	var tk hub.Ticket
	testkit.WaitFor(t, 20*time.Second, "the ticket that binds "+hash[:12], func() bool {
		for _, x := range ask.tickets(t) {
			if x.Bind != nil && x.Bind.Hash == hash {
				tk = x
				return true
			}
		}
		return false
	})
	if out, err := ask.lox(t, "approve", tk.ID); err != nil {
		t.Fatalf("lox approve: %v\n%s", err, out)
	}
	if err := <-done; err != nil {
		t.Fatalf("the request that binds %s: %v", hash[:12], err)
	}
}

// sendCase sends one case to the gate at addr from source and returns the X-LockHTTP-Request of
// the answer that carries its decision.
func sendCase(addr, source string, pool *x509.CertPool, rc *replayCase) (string, error) {
	return sendRaw(addr, source, pool, tunnelled(rc.p.Raw), rc.c.Env.Cleartext)
}

// tunnelled writes an absolute https:// request as a client sends it, a CONNECT and the request
// inside (as explain reads it); any other request is returned as it is.
func tunnelled(raw []byte) []byte {
	line, rest, _ := bytes.Cut(raw, []byte("\r\n"))
	parts := strings.Split(string(line), " ")
	if len(parts) != 3 || !strings.HasPrefix(strings.ToLower(parts[1]), "https://") {
		return raw
	}
	u, err := url.Parse(parts[1])
	if err != nil || u.User != nil {
		return raw
	}
	if _, _, ref := floor.Authority(u.Host, 443); ref != nil {
		return raw
	}
	authority := u.Host
	if u.Port() == "" {
		authority = net.JoinHostPort(u.Hostname(), "443")
	}
	inner := u.EscapedPath()
	if inner == "" {
		inner = "/"
	}
	if u.RawQuery != "" || u.ForceQuery {
		inner += "?" + u.RawQuery
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n%s %s %s\r\n", authority, authority, parts[0], inner, parts[2])
	b.Write(rest)
	return b.Bytes()
}

// sendRaw sends raw to the gate at addr from source: a CONNECT head first when raw starts with
// one, then (on a 200) the request after it inside TLS or, cleartext, as it is. It returns the
// X-LockHTTP-Request of the last answer read.
func sendRaw(addr, source string, pool *x509.CertPool, raw []byte, cleartext bool) (string, error) {
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(60 * time.Second))
	br := bufio.NewReader(c)
	var conn net.Conn = c
	if bytes.HasPrefix(raw, []byte("CONNECT ")) {
		i := bytes.Index(raw, []byte("\r\n\r\n"))
		head, inner := raw[:i+4], raw[i+4:]
		if _, err := c.Write(head); err != nil {
			return "", err
		}
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil {
			return "", fmt.Errorf("the CONNECT's answer: %w", err)
		}
		id := resp.Header.Get(gate.HeaderRequest)
		if resp.StatusCode != http.StatusOK || len(inner) == 0 {
			// Refused, or a CONNECT alone: its record is its decision (written when the
			// tunnel closes).
			return id, nil
		}
		raw = inner
		if !cleartext {
			authority := strings.Fields(string(head))[1]
			host, _, _ := net.SplitHostPort(authority)
			tc := tls.Client(&bufferedConn{Conn: c, r: br}, &tls.Config{ServerName: host, RootCAs: pool, NextProtos: []string{"http/1.1"}})
			if err := tc.Handshake(); err != nil {
				return "", fmt.Errorf("TLS in the tunnel to %s: %w", authority, err)
			}
			conn, br = tc, bufio.NewReader(tc)
		}
	}
	if _, err := conn.Write(raw); err != nil {
		return "", err
	}
	method, _, _ := strings.Cut(string(raw), " ")
	resp, err := http.ReadResponse(br, &http.Request{Method: strings.ToUpper(method)})
	if err != nil {
		return "", fmt.Errorf("the answer: %w", err)
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return resp.Header.Get(gate.HeaderRequest), nil
}
