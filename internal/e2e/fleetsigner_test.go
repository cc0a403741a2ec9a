package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/testkit"
)

// TestFleetSignerOverTLS: a signer on another machine serves a fleet's gates over mutual TLS
// (the Kubernetes shape, where it has a pod and no egress of its own): a gate reaching it with an
// https:// -signer decrypts a tunnel with its leaf, the certificate the agent checks against the
// ca.pem that signer ca-cert prints; a facade's identity is refused at the signer.
func TestFleetSignerOverTLS(t *testing.T) {
	pki := newTestPKI(t)
	rec := &originRecorder{}
	_, port := tlsOrigin(t, rec, pki.leaf(t, []string{"origin.test"}, time.Now().Add(24*time.Hour), false))
	r := startTLSFleet(t, fmt.Sprintf(askPolicy, port, "30s"))
	r.issue("signer", "main")
	r.issue("gate", "a")
	r.issue("facade", "alice")
	caDir := filepath.Join(t.TempDir(), "ca")
	cert, key := r.identity("signer", "main")
	sg := startProc(t, "signer", []string{"serve", "--init", "--ca", caDir, "--dev", "--socket", filepath.Join(t.TempDir(), "signer.sock"),
		"--tls-listen", "127.0.0.1:0", "--tls-cert", cert, "--tls-key", key, "--tls-ca", r.ca()}, nil)
	var signerAddr string
	testkit.WaitFor(t, 20*time.Second, "the signer to serve over mutual TLS", func() bool {
		for _, l := range strings.Split(sg.out.String(), "\n") {
			var line struct {
				Msg    string `json:"msg"`
				Listen string `json:"listen"`
			}
			if json.Unmarshal([]byte(l), &line) == nil && line.Msg == "signer serving gates over mutual TLS" {
				signerAddr = line.Listen
				return true
			}
		}
		if sg.exited() {
			t.Fatalf("the signer exited:\n%s", sg.out)
		}
		return false
	})
	caPEM, err := exec.Command(filepath.Join(binDir, "signer"), "ca-cert", "--ca", caDir).Output()
	if err != nil {
		t.Fatalf("signer ca-cert: %v", err)
	}
	if onDisk, _ := os.ReadFile(filepath.Join(caDir, "ca.pem")); string(onDisk) != string(caPEM) {
		t.Fatalf("signer ca-cert printed another certificate than ca.pem")
	}
	g := r.gate("a", "-signer", "https://"+signerAddr, "-roots", pki.rootPEM)
	testkit.WaitFor(t, 20*time.Second, "the gate's policy", func() bool { return g.mustStatus().PolicyVersion != "" })
	testkit.WaitFor(t, 20*time.Second, "the gate to reach the signer", func() bool { return g.mustStatus().Signer == "ok" })

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	u, _ := url.Parse(g.proxy)
	c := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(u), TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := c.Get(fmt.Sprintf("https://origin.test:%d/over-tls", port))
	if err != nil {
		t.Fatalf("a decrypted request with the signer over mutual TLS: %v\n%s", err, g.p.out)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || rec.count() != 1 {
		t.Fatalf("answer %d, the origin saw %d requests", resp.StatusCode, rec.count())
	}
	if !strings.Contains(sg.out.String(), `"peer":"spiffe://lockhttp/gate/a"`) {
		t.Errorf("the signer's log does not name the gate it signed for:\n%s", sg.out)
	}

	// A facade's certificate is no gate's: refused in the handshake.
	fc, fk := r.identity("facade", "alice")
	pair, _ := tls.LoadX509KeyPair(fc, fk)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{pair}, InsecureSkipVerify: true}}}
	if resp, err := hc.Post("https://"+signerAddr+"/sign", "application/json", strings.NewReader("{}")); err == nil {
		resp.Body.Close()
		t.Errorf("the signer answered a facade: %s", resp.Status)
	}
}
