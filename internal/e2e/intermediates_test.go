package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/signerapi"
	"github.com/lockhttp/lockhttp/internal/testkit"
	"github.com/lockhttp/lockhttp/internal/unixsock"
)

// nodeUID is the user the test runs the node signers as, when it runs as root.
const nodeUID = 10104

// TestIntermediates: a root signer holds the root key and signs 60-second intermediates for two
// node signers over mutual TLS; each node serves a gate. Agents trusting only the root (curl and
// Go) keep working through the gate across three renewals of the first node's intermediate. The
// second node, cut off from the root, keeps serving until its intermediate expires, then the
// gate refuses with E_NO_SIGNER, and a leaf it issued before is refused by the clients. A node
// identity not on the root's list gets nothing. The node signers' user cannot read the root
// key.
func TestIntermediates(t *testing.T) {
	curl := requireTool(t, "curl")
	pki := newTestPKI(t)
	rec := &originRecorder{}
	_, port := tlsOrigin(t, rec, pki.leaf(t, []string{"origin.test"}, time.Now().Add(24*time.Hour), false))
	r := startTLSFleet(t, fmt.Sprintf(askPolicy, port, "30s"))
	for _, id := range [][2]string{{"signer", "root"}, {"signer", "n1"}, {"signer", "n2"}, {"signer", "n9"}, {"gate", "a"}, {"gate", "b"}} {
		r.issue(id[0], id[1])
	}

	// A directory every user may traverse: the root's public ca.pem is readable there, its key
	// only by the root signer's user; each node's files are its own.
	base, err := os.MkdirTemp("", "lhint")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o755)
	rootDir := filepath.Join(base, "root")
	if out, err := exec.Command(filepath.Join(binDir, "signer"), "init", "--root", "--dir", rootDir).CombinedOutput(); err != nil {
		t.Fatalf("signer init --root: %v\n%s", err, out)
	}
	os.Chmod(rootDir, 0o755)
	rootPEM := filepath.Join(rootDir, "ca.pem")
	rootKey := filepath.Join(rootDir, "ca-key.pem")

	cert, key := r.identity("signer", "root")
	root := startProc(t, "signer", []string{"serve", "--root", "--dev", "--ca", rootDir, "--tls-listen", "127.0.0.1:0",
		"--tls-cert", cert, "--tls-key", key, "--tls-ca", r.ca(), "--intermediate-lifetime", "60s",
		"--tls-node", "spiffe://lockhttp/signer/n1", "--tls-node", "spiffe://lockhttp/signer/n2"}, nil)
	rootAddr := logField(t, root, "root signer serving node signers over mutual TLS", "listen")

	// Node 2 reaches the root through a forwarder the test cuts.
	fwd := newForwarder(t, rootAddr)
	n1 := startNode(t, r, base, "n1", rootAddr, rootPEM)
	n2 := startNode(t, r, base, "n2", fwd.addr(), rootPEM)
	n9 := startNode(t, r, base, "n9", rootAddr, rootPEM)

	// The root key: mode 0600, and the nodes' user cannot read it (nor do the nodes hold it).
	fi, err := os.Stat(rootKey)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the root key: %v, mode %v", err, fi.Mode().Perm())
	}
	if os.Geteuid() == 0 {
		if out, err := catAs(nodeUID, rootPEM); err != nil {
			t.Fatalf("control: the nodes' user cannot read the public ca.pem: %v %s", err, out)
		}
		if out, err := catAs(nodeUID, rootKey); err == nil || bytes.Contains(out, []byte("PRIVATE KEY")) {
			t.Fatalf("the node signers' user (uid %d) reads the root key", nodeUID)
		}
	} else if os.Getenv("CI") == "true" {
		t.Fatal("this test runs the node signers as another user and needs root (CI runs as root)")
	}

	h1 := n1.waitIntermediate(t)
	h2 := n2.waitIntermediate(t)
	for _, n := range []*nodeSigner{n1, n2} {
		n.checkHoldsNoRootKey(t)
	}

	ga := r.gate("a", "-signer", n1.sock, "-roots", pki.rootPEM)
	gb := r.gate("b", "-signer", n2.sock, "-roots", pki.rootPEM)
	for _, g := range []*fleetGate{ga, gb} {
		testkit.WaitFor(t, 20*time.Second, "gate "+g.name+"'s policy and signer", func() bool {
			st := g.mustStatus()
			return st.PolicyVersion != "" && st.Signer == "ok"
		})
	}
	target := fmt.Sprintf("https://origin.test:%d/", port)

	// A leaf node 2 issued for a key the test holds, served by a TLS server of the test: the
	// clients accept it while its intermediate is valid, and refuse it after.
	oldLeaf := n2.leafServer(t, "origin.test")
	if err := oldLeaf.check(curl, rootPEM); err != nil {
		t.Fatalf("control: a leaf of node 2's valid intermediate is refused: %v", err)
	}

	// Node 2 is cut off from the root.
	fwd.cut()
	n2Expiry, _ := time.Parse(time.RFC3339, h2.NotAfter)

	seen1 := map[string]bool{h1.SHA256: true} // node 1's intermediates
	served := map[string]bool{}               // the intermediates gate a served agents
	var n2Refused bool
	var last time.Time
	testkit.WaitFor(t, 170*time.Second, "three renewals of node 1's intermediate, and node 2's expiry", func() bool {
		if time.Since(last) < 250*time.Millisecond { // a few agents' requests a second, not a flood
			return false
		}
		last = time.Now()
		// Agents of gate a: Go and curl, trusting only the root.
		inter, err := agentGet(ga, target, rootPEM)
		if err != nil {
			t.Fatalf("a Go agent through gate a (node 1 renewed %d times): %v\n%s", len(seen1)-1, err, n1.p.out)
		}
		served[inter] = true
		if out, err := curlVia(curl, ga, target, rootPEM); err != nil {
			t.Fatalf("curl through gate a (node 1 renewed %d times): %v\n%s", len(seen1)-1, err, out)
		}
		if h := n1.health(t); h.Intermediate != nil && h.Intermediate.SHA256 != "" {
			seen1[h.Intermediate.SHA256] = true
		}
		// Gate b: served until node 2's intermediate expires, then E_NO_SIGNER.
		now := time.Now()
		switch {
		case now.Before(n2Expiry.Add(-2 * time.Second)):
			if _, err := agentGet(gb, target, rootPEM); err != nil {
				t.Fatalf("gate b refused before node 2's intermediate expired (%s): %v\n%s", n2Expiry, err, n2.p.out)
			}
		case now.After(n2Expiry.Add(time.Second)) && !n2Refused:
			if _, err := agentGet(gb, target, rootPEM); err == nil {
				t.Fatalf("gate b served an agent after node 2's intermediate expired at %s", n2Expiry)
			}
			status, body := rawConnect(t, gb, fmt.Sprintf("origin.test:%d", port))
			if status != 503 || !strings.Contains(body, "E_NO_SIGNER") {
				t.Fatalf("CONNECT through gate b after node 2's intermediate expired: %d\n%s", status, body)
			}
			if out, err := curlVia(curl, gb, target, rootPEM); err == nil {
				t.Fatalf("curl through gate b after node 2's intermediate expired:\n%s", out)
			}
			if err := oldLeaf.check(curl, rootPEM); err == nil || !strings.Contains(err.Error(), "expired") {
				t.Fatalf("a leaf of node 2's expired intermediate: %v, want refused as expired", err)
			}
			n2Refused = true
		}
		return len(seen1) >= 4 && len(served) >= 3 && n2Refused
	})
	t.Logf("node 1 held %d intermediates, gate a served leaves of %d", len(seen1), len(served))

	// Node 2 said why it refuses; node 1 signed throughout.
	if h := n2.health(t); h.Intermediate == nil || h.Intermediate.Error == "" {
		t.Errorf("node 2's health does not say why it refuses: %+v", h.Intermediate)
	}
	if !strings.Contains(n2.p.out.String(), "no valid intermediate") {
		t.Errorf("node 2's log does not say it refuses to sign:\n%s", n2.p.out)
	}

	// lockhttp doctor shows each node's chain, its intermediate's expiry and the last renewal.
	out, code := doctorSigner(t, n1.sock)
	if code != 0 || !strings.Contains(out, "leaf <- intermediate") || !strings.Contains(out, "last renewal") {
		t.Errorf("lockhttp doctor --signer on node 1: exit %d\n%s", code, out)
	}
	out, code = doctorSigner(t, n2.sock)
	if code != 2 || !strings.Contains(out, "holds no valid intermediate (the last expired") || !strings.Contains(out, "E_NO_SIGNER") {
		t.Errorf("lockhttp doctor --signer on node 2: exit %d\n%s", code, out)
	}
	t.Logf("lockhttp doctor --signer on node 2:\n%s", out)

	// Node 9, not on the root's list, got nothing: refused in the handshake, no intermediate.
	h9 := n9.health(t)
	if h9.Intermediate == nil || h9.Intermediate.SHA256 != "" || h9.Intermediate.Error == "" {
		t.Fatalf("node 9, not on the root's list: %+v", h9.Intermediate)
	}
	if code, _ := n9.sign(t, "origin.test"); code != http.StatusServiceUnavailable {
		t.Errorf("node 9 signed: %d", code)
	}
	if strings.Contains(root.out.String(), "signer/n9") && strings.Contains(root.out.String(), `"outcome":"issued","serial"`) {
		for _, l := range strings.Split(root.out.String(), "\n") {
			if strings.Contains(l, "signer/n9") && strings.Contains(l, `"issued"`) {
				t.Fatalf("the root issued to node 9: %s", l)
			}
		}
	}
	pair, err := tls.LoadX509KeyPair(r.identity("signer", "n9"))
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{pair}, InsecureSkipVerify: true}}}
	if resp, err := hc.Post("https://"+rootAddr+"/intermediate", "application/json", strings.NewReader(`{"public_key":""}`)); err == nil {
		resp.Body.Close()
		t.Errorf("the root answered node 9: %s", resp.Status)
	}
}

// logField waits for the log line msg of p and returns its field.
func logField(t *testing.T, p *proc, msg, field string) string {
	t.Helper()
	var v string
	testkit.WaitFor(t, 20*time.Second, msg, func() bool {
		for _, l := range strings.Split(p.out.String(), "\n") {
			var line map[string]any
			if json.Unmarshal([]byte(l), &line) == nil && line["msg"] == msg {
				v, _ = line[field].(string)
				return true
			}
		}
		if p.exited() {
			t.Fatalf("exited:\n%s", p.out)
		}
		return false
	})
	return v
}

// doctorSigner runs lockhttp doctor --signer sock and returns its output and exit code.
func doctorSigner(t *testing.T, sock string) (string, int) {
	t.Helper()
	out, err := exec.Command(filepath.Join(binDir, "lockhttp"), "doctor", "--signer", sock).CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

// catAs reads path as uid.
func catAs(uid int, path string) ([]byte, error) {
	cmd := exec.Command("cat", path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	return cmd.CombinedOutput()
}

// nodeSigner is a node signer process.
type nodeSigner struct {
	name string
	dir  string
	sock string
	p    *proc
	hc   *http.Client
}

// startNode starts the node signer NAME reaching the root at rootAddr, with its identity's
// files copied into a directory of its own; as root, it runs as nodeUID.
func startNode(t *testing.T, r *fleetRig, base, name, rootAddr, rootPEM string) *nodeSigner {
	t.Helper()
	n := &nodeSigner{name: name, dir: filepath.Join(base, name)}
	os.Mkdir(n.dir, 0o700)
	cert, key := r.identity("signer", name)
	for src, dst := range map[string]string{cert: "id.pem", key: "id-key.pem", r.ca(): "fleet-ca.pem", rootPEM: "root.pem"} {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(n.dir, dst), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	n.sock = filepath.Join(n.dir, "signer.sock")
	args := []string{"serve", "--root-url", "https://" + rootAddr, "--root-ca", filepath.Join(n.dir, "root.pem"),
		"--tls-cert", filepath.Join(n.dir, "id.pem"), "--tls-key", filepath.Join(n.dir, "id-key.pem"), "--tls-ca", filepath.Join(n.dir, "fleet-ca.pem"),
		"--tls-root", "spiffe://lockhttp/signer/root", "--socket", n.sock, "--allow-uid", fmt.Sprint(os.Geteuid())}
	// The node's user runs its own copy of the binary: the test's build directory is root's.
	bin := filepath.Join(base, "signer")
	if _, err := os.Stat(bin); err != nil {
		data, err := os.ReadFile(filepath.Join(binDir, "signer"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	n.p = &proc{cmd: exec.Command(bin, args...), out: &testkit.Buffer{}, done: make(chan struct{})}
	if os.Geteuid() == 0 {
		filepath.Walk(n.dir, func(p string, _ os.FileInfo, _ error) error { return os.Chown(p, nodeUID, nodeUID) })
		n.p.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nodeUID, Gid: nodeUID}}
	}
	n.p.cmd.Stdout, n.p.cmd.Stderr = n.p.out, n.p.out
	if err := n.p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { n.p.cmd.Wait(); close(n.p.done) }()
	t.Cleanup(n.p.stop)
	testkit.WaitFor(t, 20*time.Second, "node "+name+" to listen", func() bool {
		if n.p.exited() {
			t.Fatalf("node %s exited:\n%s", name, n.p.out)
		}
		_, err := os.Stat(n.sock)
		return err == nil
	})
	n.hc = unixsock.Client(n.sock, 5*time.Second)
	return n
}

// health is the node's GET /health, whatever its status.
func (n *nodeSigner) health(t *testing.T) signerapi.Health {
	t.Helper()
	var h signerapi.Health
	resp, err := n.hc.Get("http://signer/health")
	if err != nil {
		t.Fatalf("node %s: %v\n%s", n.name, err, n.p.out)
	}
	defer resp.Body.Close()
	json.NewDecoder(resp.Body).Decode(&h)
	return h
}

// waitIntermediate waits for the node's first intermediate and returns it.
func (n *nodeSigner) waitIntermediate(t *testing.T) signerapi.IntermediateHealth {
	t.Helper()
	var h signerapi.Health
	testkit.WaitFor(t, 20*time.Second, "node "+n.name+"'s intermediate", func() bool {
		h = n.health(t)
		return h.Intermediate != nil && h.Intermediate.SHA256 != ""
	})
	if h.Role != "node" {
		t.Errorf("node %s's role %q", n.name, h.Role)
	}
	return *h.Intermediate
}

// checkHoldsNoRootKey: the node has no file of the root's directory open.
func (n *nodeSigner) checkHoldsNoRootKey(t *testing.T) {
	t.Helper()
	pid := n.p.cmd.Process.Pid
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatalf("node %s's files: %v", n.name, err)
	}
	for _, fd := range fds {
		if target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); strings.Contains(target, "ca-key") {
			t.Fatalf("node %s has %s open", n.name, target)
		}
	}
}

// sign asks the node for a leaf for a key of the test's and returns the status, the answer and
// the key.
func (n *nodeSigner) sign(t *testing.T, host string) (int, signerapi.SignResponse) {
	code, sr, _ := n.signKey(t, host)
	return code, sr
}

func (n *nodeSigner) signKey(t *testing.T, host string) (int, signerapi.SignResponse, *ecdsa.PrivateKey) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalPKIXPublicKey(key.Public())
	body, _ := json.Marshal(signerapi.SignRequest{Host: host, PublicKey: base64.StdEncoding.EncodeToString(der)})
	resp, err := n.hc.Post("http://signer/sign", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("node %s: %v", n.name, err)
	}
	defer resp.Body.Close()
	var sr signerapi.SignResponse
	json.NewDecoder(resp.Body).Decode(&sr)
	return resp.StatusCode, sr, key
}

// leafTLS is a TLS server of the test serving a leaf a node issued, with its chain.
type leafTLS struct {
	host string
	addr string
}

func (n *nodeSigner) leafServer(t *testing.T, host string) *leafTLS {
	t.Helper()
	code, sr, key := n.signKey(t, host)
	if code != http.StatusOK || sr.Chain == "" {
		t.Fatalf("node %s signed %s: %d, chain %q", n.name, host, code, sr.Chain)
	}
	var chain [][]byte
	rest := []byte(sr.Certificate + sr.Chain)
	for {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		chain = append(chain, b.Bytes)
	}
	leaf, _ := x509.ParseCertificate(chain[0])
	inter, _ := x509.ParseCertificate(chain[1])
	if leaf.NotAfter.After(inter.NotAfter) {
		t.Fatalf("node %s's leaf expires at %s, after its intermediate (%s)", n.name, leaf.NotAfter, inter.NotAfter)
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{{Certificate: chain, PrivateKey: key}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "leaf of a node") }))
	return &leafTLS{host: host, addr: l.Addr().String()}
}

// check fetches from the leaf's server with curl and Go, both trusting only root; nil when both
// accept it, else the first refusal.
func (s *leafTLS) check(curl, root string) error {
	_, port, _ := net.SplitHostPort(s.addr)
	u := fmt.Sprintf("https://%s:%s/", s.host, port)
	if out, err := exec.Command(curl, "-sS", "--max-time", "10", "--cacert", root, "--resolve", s.host+":"+port+":127.0.0.1", u).CombinedOutput(); err != nil {
		return fmt.Errorf("curl: %v: %s", err, out)
	}
	pool := x509.NewCertPool()
	data, _ := os.ReadFile(root)
	pool.AppendCertsFromPEM(data)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil, TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: s.host},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, s.addr)
		}}}
	resp, err := c.Get(u)
	if err != nil {
		return fmt.Errorf("go: %w", err)
	}
	resp.Body.Close()
	return nil
}

// agentGet fetches target through gate g as a Go agent trusting only the root, and returns
// the SHA-256 of the intermediate the gate served.
func agentGet(g *fleetGate, target, root string) (string, error) {
	pool := x509.NewCertPool()
	data, _ := os.ReadFile(root)
	pool.AppendCertsFromPEM(data)
	var inter string
	u, _ := url.Parse(g.proxy)
	c := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(u), DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{RootCAs: pool, VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) != 3 {
				return fmt.Errorf("the gate's chain is not leaf, intermediate, root")
			}
			leaf, im := cs.VerifiedChains[0][0], cs.VerifiedChains[0][1]
			if leaf.NotAfter.After(im.NotAfter) {
				return fmt.Errorf("the gate served a leaf that outlives its intermediate")
			}
			inter = fmt.Sprintf("%x", im.Signature[:8])
			return nil
		}}}}
	resp, err := c.Get(target)
	if err != nil {
		return "", err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return "", fmt.Errorf("answer %d %s", resp.StatusCode, resp.Header.Get("X-LockHTTP-Code"))
	}
	return inter, nil
}

// curlVia fetches target with curl through gate g, trusting only the root.
func curlVia(curl string, g *fleetGate, target, root string) (string, error) {
	out, err := exec.Command(curl, "-sS", "--fail", "--max-time", "15", "--proxy", g.proxy, "--cacert", root, target).CombinedOutput()
	return string(out), err
}

// rawConnect sends a CONNECT to gate g and returns the status and all the gate answered.
func rawConnect(t *testing.T, g *fleetGate, hostport string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(g.proxy, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", hostport, hostport)
	c.SetReadDeadline(time.Now().Add(15 * time.Second))
	var b bytes.Buffer
	io.Copy(&b, c)
	var status int
	fmt.Sscanf(b.String(), "HTTP/1.1 %d", &status)
	return status, b.String()
}

// forwarder passes TCP connections to a target until cut.
type forwarder struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn // guarded by mu
	closed bool       // guarded by mu
}

func newForwarder(t *testing.T, target string) *forwarder {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &forwarder{l: l, target: target}
	t.Cleanup(f.cut)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			f.mu.Lock()
			if f.closed {
				f.mu.Unlock()
				c.Close()
				u.Close()
				return
			}
			f.conns = append(f.conns, c, u)
			f.mu.Unlock()
			go func() { io.Copy(u, c); u.Close() }()
			go func() { io.Copy(c, u); c.Close() }()
		}
	}()
	return f
}

func (f *forwarder) addr() string { return f.l.Addr().String() }

// cut closes the listener and every connection: the node behind it no longer reaches the root.
func (f *forwarder) cut() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	f.l.Close()
	for _, c := range f.conns {
		c.Close()
	}
}

// TestIntermediatesDocBlocks runs docs/fleet.md's root and node signer commands as a reader
// would copy them, as a user of their own (not root), with their files in a directory of the
// test's: the root starts, and the node gets an intermediate and signs a leaf that a client
// trusting only the root accepts.
func TestIntermediatesDocBlocks(t *testing.T) {
	repo, _ := filepath.Abs("../..")
	blocks, err := readDocBlocks(filepath.Join(repo, "docs", "fleet.md"))
	if err != nil {
		t.Fatal(err)
	}
	scripts := map[string]string{}
	for _, b := range blocks {
		scripts[b.Name] = b.Script
	}
	dir, err := os.MkdirTemp("", "lhdoc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	for _, d := range []string{"etc", "var", "run", "bin"} {
		must(t, os.MkdirAll(filepath.Join(dir, d), 0o700))
	}
	data, err := os.ReadFile(filepath.Join(binDir, "signer"))
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, "bin", "signer"), data, 0o755))
	fleetDir := filepath.Join(t.TempDir(), "fleet")
	lockhttpCmd(t, "fleet", "init", "--dir", fleetDir)
	copyFile := func(src, dst string) {
		data, err := os.ReadFile(src)
		must(t, err)
		must(t, os.WriteFile(dst, data, 0o600))
	}
	copyFile(filepath.Join(fleetDir, "ca.pem"), filepath.Join(dir, "etc", "fleet-ca.pem"))
	for _, name := range []string{"root", "node-1"} {
		lockhttpCmd(t, "fleet", "issue", "--dir", fleetDir, "signer", name)
		copyFile(filepath.Join(fleetDir, "signer-"+name+".pem"), filepath.Join(dir, "etc", "signer-"+name+".pem"))
		copyFile(filepath.Join(fleetDir, "signer-"+name+"-key.pem"), filepath.Join(dir, "etc", "signer-"+name+"-key.pem"))
	}
	if os.Geteuid() == 0 {
		filepath.Walk(dir, func(p string, _ os.FileInfo, _ error) error { return os.Chown(p, nodeUID, nodeUID) })
	}
	addr := freeAddr(t)
	run := func(name string, repl map[string]string) *proc {
		t.Helper()
		script := scripts[name]
		if script == "" {
			t.Fatalf("docs/fleet.md has no test block %s", name)
		}
		for old, new := range repl {
			if !strings.Contains(script, old) {
				t.Fatalf("docs/fleet.md's %s block no longer has %q:\n%s", name, old, script)
			}
			script = strings.ReplaceAll(script, old, new)
		}
		for old, new := range map[string]string{"/etc/lockhttp": filepath.Join(dir, "etc"), "/var/lib/lockhttp": filepath.Join(dir, "var"),
			"/run/lockhttp": filepath.Join(dir, "run"), "\nsigner ": "\n" + filepath.Join(dir, "bin", "signer") + " "} {
			script = strings.ReplaceAll("\n"+script, old, new)[1:]
		}
		p := &proc{cmd: exec.Command("sh", "-ec", script), out: &testkit.Buffer{}, done: make(chan struct{})}
		p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if os.Geteuid() == 0 {
			p.cmd.SysProcAttr.Credential = &syscall.Credential{Uid: nodeUID, Gid: nodeUID}
		}
		must(t, p.cmd.Start())
		go func() { p.cmd.Wait(); close(p.done) }()
		t.Cleanup(func() {
			syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
				syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			}
		})
		return p
	}
	root := run("fleet-root-signer", map[string]string{"0.0.0.0:3140": addr})
	rootCA := filepath.Join(dir, "var", "root", "ca.pem")
	testkit.WaitFor(t, 20*time.Second, "the root signer of docs/fleet.md", func() bool {
		if root.exited() {
			t.Fatalf("the root block exited:\n%s", root.out)
		}
		return strings.Contains(root.out.String(), "root signer serving node signers")
	})
	if fi, err := os.Stat(filepath.Join(dir, "var", "root", "ca-key.pem")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the root key: %v %v", fi, err)
	}
	copyFile(rootCA, filepath.Join(dir, "etc", "root-ca.pem"))
	if os.Geteuid() == 0 {
		os.Chown(filepath.Join(dir, "etc", "root-ca.pem"), nodeUID, nodeUID)
	}
	node := run("fleet-node-signer", map[string]string{"root-signer.internal:3140": addr, "10003": fmt.Sprint(os.Geteuid())})
	n := &nodeSigner{name: "node-1", sock: filepath.Join(dir, "run", "signer.sock"), p: node}
	testkit.WaitFor(t, 20*time.Second, "the node signer of docs/fleet.md", func() bool {
		if node.exited() {
			t.Fatalf("the node block exited:\n%s", node.out)
		}
		_, err := os.Stat(n.sock)
		return err == nil
	})
	n.hc = unixsock.Client(n.sock, 5*time.Second)
	h := n.waitIntermediate(t)
	if !strings.Contains(h.Subject, "spiffe://lockhttp/signer/node-1") {
		t.Errorf("the intermediate's subject %q", h.Subject)
	}
	s := n.leafServer(t, "api.example.com")
	if err := s.check(requireTool(t, "curl"), rootCA); err != nil {
		t.Fatalf("a leaf of the doc's node signer: %v", err)
	}
}
