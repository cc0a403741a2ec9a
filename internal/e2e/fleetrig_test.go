package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/consoleapi"
	"github.com/lockhttp/lockhttp/internal/gateapi"
	"github.com/lockhttp/lockhttp/internal/mtls"
	"github.com/lockhttp/lockhttp/internal/testkit"
	"github.com/lockhttp/lockhttp/internal/unixsock"
)

// fleetRig is a fleet on one machine as an operator sets it up on many: the identities made
// with lockhttp fleet, a console (with its hub) serving over mutual TLS, and gate processes each
// with its own certificate, reaching the console and the hub by https:// URLs.
type fleetRig struct {
	t        testing.TB
	fleetDir string // lockhttp fleet --dir
	dir      string // the console's files
	policy   string // the policy file
	sock     string // the console's unix socket (for the test's reading of its status)
	console  *proc
	status   consoleapi.Status // as the console first served it: its addresses
	gates    []*fleetGate
	hc       *http.Client // of the console's socket
}

// proc is a process the test started; Cleanup stops it.
type proc struct {
	cmd  *exec.Cmd
	out  *testkit.Buffer
	done chan struct{}
}

func startProc(t testing.TB, name string, args []string, env []string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(filepath.Join(binDir, name), args...), out: &testkit.Buffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.Env = append(os.Environ(), env...)
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.stop() })
	return p
}

func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// lockhttp runs the lockhttp command and returns its output; a failure fails the test.
func lockhttpCmd(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(binDir, "lockhttp"), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("lockhttp %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// startTLSFleet makes the fleet's CA and the console's identity, and starts the console with
// policyText, serving the policy (-tls-listen) and the hub (-hub-tls-listen) over mutual TLS.
func startTLSFleet(t testing.TB, policyText string, consoleFlags ...string) *fleetRig {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "fleet")
	lockhttpCmd(t, "fleet", "init", "--dir", dir)
	return startTLSFleetIn(t, dir, policyText, consoleFlags...)
}

// startTLSFleetIn is startTLSFleet with the fleet's CA made before, in fleetDir.
func startTLSFleetIn(t testing.TB, fleetDir, policyText string, consoleFlags ...string) *fleetRig {
	t.Helper()
	r := &fleetRig{t: t, fleetDir: fleetDir, dir: filepath.Join(t.TempDir(), "console")}
	os.MkdirAll(r.dir, 0o700)
	if cert, _ := r.identity("console", "main"); !exists(cert) {
		lockhttpCmd(t, "fleet", "issue", "--dir", r.fleetDir, "console", "main")
	}
	r.policy = filepath.Join(r.dir, "policy.toml")
	if err := os.WriteFile(r.policy, []byte(policyText), 0o600); err != nil {
		t.Fatal(err)
	}
	r.sock = filepath.Join(r.dir, "console.sock")
	cert, key := r.identity("console", "main")
	args := append([]string{"-policy", r.policy, "-state", filepath.Join(r.dir, "state.json"), "-socket", r.sock,
		"-audit", filepath.Join(r.dir, "audit"), "-watch", "200ms",
		"-hub-listen", "127.0.0.1:0", "-hub-state", filepath.Join(r.dir, "hub.json"), "-hub-key", filepath.Join(r.dir, "hub-key.pem"),
		"-hub-gate-token", filepath.Join(r.dir, "gate.token"), "-hub-cli-token", filepath.Join(r.dir, "cli.token"),
		"-tls-listen", "127.0.0.1:0", "-hub-tls-listen", "127.0.0.1:0",
		"-tls-cert", cert, "-tls-key", key, "-tls-ca", r.ca()}, consoleFlags...)
	r.console = startProc(t, "console", args, nil)
	testkit.WaitFor(t, 30*time.Second, "the console to serve over mutual TLS", func() bool {
		if r.console.exited() {
			t.Fatalf("the console exited:\n%s", r.console.out)
		}
		st, err := r.consoleStatus()
		if err != nil || st.TLS == "" || st.HubTLS == "" || st.Version == "" {
			return false
		}
		r.status = st
		return true
	})
	return r
}

// identity is the certificate and key files lockhttp fleet issue wrote for KIND NAME.
func (r *fleetRig) identity(kind, name string) (cert, key string) {
	base := filepath.Join(r.fleetDir, kind+"-"+name)
	return base + ".pem", base + "-key.pem"
}

func (r *fleetRig) ca() string { return filepath.Join(r.fleetDir, "ca.pem") }

// issue makes the identity KIND NAME with lockhttp fleet issue.
func (r *fleetRig) issue(kind, name string) {
	r.t.Helper()
	lockhttpCmd(r.t, "fleet", "issue", "--dir", r.fleetDir, kind, name)
}

// issueAt makes KIND NAME's certificate valid from notBefore to notAfter, with the fleet's CA
// (lockhttp fleet issues only certificates valid from now: an expired one is made here).
func (r *fleetRig) issueAt(kind, name string, notBefore, notAfter time.Time) {
	r.t.Helper()
	certPEM, _ := os.ReadFile(r.ca())
	keyPEM, _ := os.ReadFile(filepath.Join(r.fleetDir, "ca-key.pem"))
	ca, err := mtls.ParseCA(certPEM, keyPEM)
	if err != nil {
		r.t.Fatal(err)
	}
	if notBefore.Before(ca.Cert.NotBefore) { // within the CA's own validity, as a real one is
		notBefore = ca.Cert.NotBefore
	}
	id, _ := mtls.NewID(kind, name)
	// Issue's certificate starts a minute before its now and lasts validity after it.
	is, err := ca.Issue(id, mtls.UsageOf(kind), nil, notBefore.Add(time.Minute), notAfter.Sub(notBefore)-time.Minute, rand.Reader)
	if err != nil {
		r.t.Fatal(err)
	}
	cert, key := r.identity(kind, name)
	kp, _ := mtls.KeyPEM(is.Key)
	os.WriteFile(key, kp, 0o600)
	os.WriteFile(cert, mtls.CertPEM(is.Cert), 0o644)
}

func (r *fleetRig) consoleStatus() (consoleapi.Status, error) {
	var st consoleapi.Status
	if r.hc == nil {
		r.hc = unixsock.Client(r.sock, 2*time.Second)
	}
	resp, err := r.hc.Get("http://console/status")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

func (r *fleetRig) mustStatus() consoleapi.Status {
	r.t.Helper()
	st, err := r.consoleStatus()
	if err != nil {
		r.t.Fatal(err)
	}
	return st
}

// fleetGate is a gate process of the fleet.
type fleetGate struct {
	r     *fleetRig
	name  string
	dir   string
	admin string
	p     *proc
	proxy string       // http://127.0.0.1:PORT, once it listens
	hc    *http.Client // of the admin socket
}

// gate starts a gate with the identity gate NAME (issued before) reaching the console and the
// hub over mutual TLS; more are more gate flags.
func (r *fleetRig) gate(name string, more ...string) *fleetGate {
	r.t.Helper()
	return r.gateAs(name, "gate-"+name, more...)
}

// gateAs starts a gate with the identity gate NAME as the instance instance: the replicas of a
// Deployment share one identity.
func (r *fleetRig) gateAs(name, instance string, more ...string) *fleetGate {
	r.t.Helper()
	g := &fleetGate{r: r, name: name, dir: filepath.Join(filepath.Dir(r.dir), instance)}
	r.gates = append(r.gates, g)
	os.MkdirAll(g.dir, 0o700)
	g.admin = filepath.Join(g.dir, "gate.sock")
	cert, key := r.identity("gate", name)
	args := append([]string{"-listen", "127.0.0.1:0", "-allow-root", "-instance", instance, "-audit", filepath.Join(g.dir, "audit"), "-admin", g.admin,
		"-console", "https://" + r.status.TLS, "-hub", "https://" + r.status.HubTLS, "-hub-key", filepath.Join(r.dir, "hub-key.pem.pub"),
		"-tls-cert", cert, "-tls-key", key, "-tls-ca", r.ca()}, more...)
	g.p = startProc(r.t, "gate", args, nil)
	testkit.WaitFor(r.t, 30*time.Second, "gate "+name+" to listen", func() bool {
		if g.p.exited() {
			r.t.Fatalf("gate %s exited:\n%s", name, g.p.out)
		}
		st, err := g.status()
		if err != nil || st.Listen == "" {
			return false
		}
		g.proxy = "http://" + st.Listen
		return true
	})
	return g
}

func (g *fleetGate) status() (gateapi.Status, error) {
	var st gateapi.Status
	if g.hc == nil {
		g.hc = unixsock.Client(g.admin, 2*time.Second)
	}
	resp, err := g.hc.Get("http://gate/status")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

func (g *fleetGate) mustStatus() gateapi.Status {
	g.r.t.Helper()
	st, err := g.status()
	if err != nil {
		g.r.t.Fatalf("gate %s: %v\n%s", g.name, err, g.p.out)
	}
	return st
}

// client is an HTTP client whose proxy is the gate.
func (g *fleetGate) client(timeout time.Duration) *http.Client {
	u, _ := url.Parse(g.proxy)
	return &http.Client{Timeout: timeout, Transport: &http.Transport{Proxy: http.ProxyURL(u), DisableKeepAlives: true}}
}

// do sends method url through the gate and returns the status, the lockhttp code and the body.
func (g *fleetGate) do(method, target string, timeout time.Duration) (int, string, string, error) {
	req, _ := http.NewRequestWithContext(context.Background(), method, target, strings.NewReader("x"))
	resp, err := g.client(timeout).Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("X-LockHTTP-Code"), string(b), nil
}

// loxFleet runs lox with args and returns its stdout, stderr and error.
func loxFleet(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	cmd := execLox(t, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

// facadeArgs are lox's flags for the fleet's hub with the identity facade NAME.
func (r *fleetRig) facadeArgs(kind, name string) []string {
	cert, key := r.identity(kind, name)
	return []string{"--hub", "https://" + r.status.HubTLS, "--tls-cert", cert, "--tls-key", key, "--tls-ca", r.ca()}
}

var _ = fmt.Sprint

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
