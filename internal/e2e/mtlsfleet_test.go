package e2e

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/hubapi"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// gatePoll is the gate's default -poll: how often it fetches the policy.
const gatePoll = 2 * time.Second

// TestFleetPolicyFanOut: three gates, each with its own certificate, fetch the policy from the
// console over mutual TLS; a change of the policy file reaches every one within the poll
// interval (the console's own record of each gate's fetch says when), each decides with it at
// once, and lockhttp doctor, run with a facade's identity, names each gate's version as the
// console sees it.
func TestFleetPolicyFanOut(t *testing.T) {
	rec := &originRecorder{}
	o := httptest.NewServer(rec)
	t.Cleanup(o.Close)
	port := o.Listener.Addr().(*net.TCPAddr).Port
	policy := fmt.Sprintf(askPolicy, port, "30s")
	r := startTLSFleet(t, policy)
	var gates []*fleetGate
	for _, n := range []string{"a", "b", "c"} {
		r.issue("gate", n)
		gates = append(gates, r.gate(n))
	}
	target := fmt.Sprintf("http://origin.test:%d/read", port)
	testkit.WaitFor(t, 30*time.Second, "every gate to hold the console's policy", func() bool {
		st := r.mustStatus()
		if len(st.Gates) != 3 {
			return false
		}
		for _, g := range st.Gates {
			if g.Version != st.Version {
				return false
			}
		}
		return true
	})
	for _, g := range gates {
		if code, lcode, body, err := g.do("GET", target, 10*time.Second); err != nil || code != 200 {
			t.Fatalf("gate %s: GET before the change: %d %s %s %v", g.name, code, lcode, body, err)
		}
	}
	before := r.mustStatus()
	for i, g := range before.Gates {
		if want := "spiffe://lockhttp/gate/" + []string{"a", "b", "c"}[i]; g.ID != want {
			t.Errorf("the console's gate %d is %s, want %s", i, g.ID, want)
		}
	}

	// A tightening: applied at once, without review.
	tight := strings.Replace(policy, "version = 1\n", "version = 1\ndeny = [\"origin.test\"]\n", 1)
	if err := os.WriteFile(r.policy, []byte(tight), 0o600); err != nil {
		t.Fatal(err)
	}
	var after = before
	testkit.WaitFor(t, 10*time.Second, "the console to serve the new policy", func() bool {
		after = r.mustStatus()
		return after.Version != before.Version
	})
	testkit.WaitFor(t, 4*gatePoll, "every gate to hold the new policy", func() bool {
		for _, g := range gates {
			if g.mustStatus().PolicyVersion != after.Version {
				return false
			}
		}
		return true
	})
	st := r.mustStatus()
	for _, g := range st.Gates {
		fan := g.Since.Sub(st.LoadedAt)
		t.Logf("%s holds %s %v after the console served it", g.ID, g.Version[:19], fan)
		if g.Version != st.Version {
			t.Errorf("%s: the console saw it fetch %s, not %s", g.ID, g.Version, st.Version)
		}
		// Within the poll interval of the gate, plus a second for a loaded machine.
		if fan < 0 || fan > gatePoll+time.Second {
			t.Errorf("%s fetched the new policy %v after the console served it; the gate polls every %v", g.ID, fan, gatePoll)
		}
	}
	for _, g := range gates {
		code, lcode, _, err := g.do("GET", target, 10*time.Second)
		if err != nil || code != 403 || lcode != "E_RULE" {
			t.Errorf("gate %s after the change: %d %s %v, want 403 E_RULE", g.name, code, lcode, err)
		}
	}

	// The doctor, with a facade's identity, reads the console's status over mutual TLS.
	r.issue("facade", "ops")
	cert, key := r.identity("facade", "ops")
	cmd := exec.Command(filepath.Join(binDir, "lockhttp"), "doctor", "--console", "https://"+r.status.TLS,
		"--tls-cert", cert, "--tls-key", key, "--tls-ca", r.ca())
	out, _ := cmd.CombinedOutput()
	for _, n := range []string{"a", "b", "c"} {
		want := regexp.MustCompile(fmt.Sprintf(`(?m)^OK +fleet +gate/%s@gate-%s decides with the console's policy %s \(since `, n, n, strings.TrimPrefix(st.Version, "sha256:")[:12]))
		if !want.Match(out) {
			t.Errorf("the doctor does not say %s:\n%s", want, out)
		}
	}
}

// TestFleetGateCertificatesRefused: the console refuses a gate whose certificate is expired,
// revoked or of another CA: such a gate gets no policy and refuses every request
// (E_NO_CONSOLE), and the console's audit names each refused identity of the fleet. A client
// that keeps TLS sessions is given none to resume; once its certificate is revoked its next
// connection is refused, cache and all, and a gate revoked while connected is cut off.
func TestFleetGateCertificatesRefused(t *testing.T) {
	base := t.TempDir()
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(o.Close)
	port := o.Listener.Addr().(*net.TCPAddr).Port
	policy := fmt.Sprintf(askPolicy, port, "30s")

	// The fleet's revocation list exists before the console starts: an empty one.
	fleetDir := filepath.Join(base, "fleet")
	lockhttpCmd(t, "fleet", "init", "--dir", fleetDir)
	lockhttpCmd(t, "fleet", "issue", "--dir", fleetDir, "gate", "good")
	lockhttpCmd(t, "fleet", "issue", "--dir", fleetDir, "gate", "revoked")
	lockhttpCmd(t, "fleet", "revoke", "--dir", fleetDir, "gate", "revoked")
	rig := startTLSFleetIn(t, fleetDir, policy, "-tls-crl", filepath.Join(fleetDir, "crl.pem"))
	rig.issueAt("gate", "expired", time.Now().Add(-48*time.Hour), time.Now().Add(-time.Second))
	other := filepath.Join(base, "other")
	lockhttpCmd(t, "fleet", "init", "--dir", other)
	lockhttpCmd(t, "fleet", "issue", "--dir", other, "gate", "foreign")
	for _, f := range []string{"gate-foreign.pem", "gate-foreign-key.pem"} {
		data, _ := os.ReadFile(filepath.Join(other, f))
		os.WriteFile(filepath.Join(fleetDir, f), data, 0o600)
	}
	// The stranger trusts the fleet's public CA (to reach the console) and its own.
	ours, _ := os.ReadFile(filepath.Join(fleetDir, "ca.pem"))
	theirs, _ := os.ReadFile(filepath.Join(other, "ca.pem"))
	both := filepath.Join(other, "both.pem")
	os.WriteFile(both, append(ours, theirs...), 0o644)

	good := rig.gate("good")
	bad := map[string]*fleetGate{}
	for _, n := range []string{"revoked", "expired"} {
		bad[n] = rig.gate(n)
	}
	bad["foreign"] = rig.gate("foreign", "-tls-ca", both)
	testkit.WaitFor(t, 20*time.Second, "the good gate's policy", func() bool { return good.mustStatus().PolicyVersion != "" })
	target := fmt.Sprintf("http://origin.test:%d/", port)
	if code, lcode, _, err := good.do("GET", target, 10*time.Second); err != nil || code != 200 {
		t.Fatalf("the good gate: %d %s %v", code, lcode, err)
	}
	for n, g := range bad {
		testkit.WaitFor(t, 20*time.Second, "gate "+n+" to report the refusal", func() bool {
			if g.p.exited() {
				t.Fatalf("gate %s exited:\n%s", n, g.p.out)
			}
			return g.mustStatus().ConsoleError != ""
		})
		st := g.mustStatus()
		if st.PolicyVersion != "" {
			t.Errorf("gate %s holds a policy: %s", n, st.PolicyVersion)
		}
		if n == "expired" && !strings.Contains(st.ConsoleError, "gate-expired.pem expired at") {
			t.Errorf("the expired gate's status does not say its certificate expired: %s", st.ConsoleError)
		}
		if code, lcode, _, _ := g.do("GET", target, 10*time.Second); lcode != "E_NO_CONSOLE" {
			t.Errorf("gate %s answered %d %s, want E_NO_CONSOLE", n, code, lcode)
		}
		t.Logf("gate %s: %s", n, st.ConsoleError)
	}
	seen := rig.mustStatus().Gates
	if len(seen) != 1 || seen[0].ID != "spiffe://lockhttp/gate/good" {
		t.Errorf("the console saw %+v fetch the policy, want gate/good alone", seen)
	}
	audit := consoleAudit(t, rig)
	for _, want := range []string{"spiffe://lockhttp/gate/revoked from 127.0.0.1", "is revoked", "spiffe://lockhttp/gate/expired from 127.0.0.1", "certificate has expired"} {
		if !strings.Contains(audit, want) {
			t.Errorf("the console's audit has no %q", want)
		}
	}
	if strings.Contains(audit, "gate/foreign") {
		t.Errorf("a stranger's certificate reached the console's audit (a flood of them would):\n%s", audit)
	}

	// A client that keeps sessions: no ticket, no resumption.
	cert, key := rig.identity("gate", "good")
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	cache := &countingCache{ClientSessionCache: tls.NewLRUClientSessionCache(4)}
	cfg := &tls.Config{Certificates: []tls.Certificate{pair}, InsecureSkipVerify: true, ClientSessionCache: cache}
	fetch := func() (resumed bool, err error) {
		c, err := tls.Dial("tcp", rig.status.TLS, cfg)
		if err != nil {
			return false, err
		}
		defer c.Close()
		io.WriteString(c, "GET /policy HTTP/1.1\r\nHost: console\r\nConnection: close\r\n\r\n")
		b, err := io.ReadAll(c)
		if err == nil && !bytes.HasPrefix(b, []byte("HTTP/1.1 200")) {
			err = fmt.Errorf("answered %q", b[:min(len(b), 40)])
		}
		return c.ConnectionState().DidResume, err
	}
	for i := range 3 {
		resumed, err := fetch()
		if err != nil || resumed {
			t.Fatalf("fetch %d: resumed %v, %v", i, resumed, err)
		}
	}
	if n := cache.count(); n != 0 {
		t.Fatalf("the console issued %d session tickets, want none", n)
	}

	// Revoked while connected: cut off within the watch, refused from then on.
	lockhttpCmd(t, "fleet", "revoke", "--dir", fleetDir, "gate", "good")
	testkit.WaitFor(t, 20*time.Second, "the revoked gate to be refused", func() bool {
		return strings.Contains(good.mustStatus().ConsoleError, "bad certificate")
	})
	if _, err := fetch(); err == nil {
		t.Fatal("a revoked certificate with a session cache was admitted")
	}
	at := rig.mustStatus().Gates[0].At
	time.Sleep(2 * gatePoll) // the gate polls on, refused: the console records no fetch
	if now := rig.mustStatus().Gates[0].At; !now.Equal(at) {
		t.Errorf("the revoked gate fetched the policy at %v", now)
	}
}

// countingCache counts the sessions a server gave a client to resume.
type countingCache struct {
	tls.ClientSessionCache
	mu sync.Mutex
	n  int
}

func (c *countingCache) Put(key string, cs *tls.ClientSessionState) {
	if cs != nil {
		c.mu.Lock()
		c.n++
		c.mu.Unlock()
	}
	c.ClientSessionCache.Put(key, cs)
}

func (c *countingCache) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// consoleAudit is the text of the console's audit files.
func consoleAudit(t *testing.T, r *fleetRig) string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(r.dir, "audit", "*.jsonl"))
	var b strings.Builder
	for _, f := range files {
		data, _ := os.ReadFile(f)
		b.Write(data)
	}
	return b.String()
}

// TestFleetFacadeRemoteHub: lox reaches a fleet's hub with a facade identity of its own: lox
// tickets lists the request a gate holds, lox approve releases it, and the decision names the
// facade. A gate's identity cannot decide, and a facade's cannot ask.
func TestFleetFacadeRemoteHub(t *testing.T) {
	rec := &originRecorder{}
	o := httptest.NewServer(rec)
	t.Cleanup(o.Close)
	port := o.Listener.Addr().(*net.TCPAddr).Port
	r := startTLSFleet(t, fmt.Sprintf(askPolicy, port, "60s"))
	r.issue("gate", "a")
	r.issue("facade", "alice")
	g := r.gate("a")
	testkit.WaitFor(t, 20*time.Second, "the gate's policy", func() bool { return g.mustStatus().PolicyVersion != "" })
	target := fmt.Sprintf("http://origin.test:%d/write", port)
	done := make(chan [2]string, 1)
	go func() {
		// Refused at once (E_NO_CONSOLE) until the gate's event stream to the hub is up.
		for deadline := time.Now().Add(20 * time.Second); ; {
			code, lcode, body, err := g.do("POST", target, 60*time.Second)
			if lcode == "E_NO_CONSOLE" && time.Now().Before(deadline) {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			done <- [2]string{fmt.Sprintf("%d %s %v", code, lcode, err), body}
			return
		}
	}()

	alice := r.facadeArgs("facade", "alice")
	var ticket hubapi.Ticket
	testkit.WaitFor(t, 20*time.Second, "lox tickets to list the held request", func() bool {
		out, errOut, err := loxFleet(t, append([]string{"tickets", "--json"}, alice...)...)
		if err != nil {
			t.Fatalf("lox tickets over mutual TLS: %v\n%s", err, errOut)
		}
		var ts []hubapi.Ticket
		json.Unmarshal([]byte(out), &ts)
		for _, tk := range ts {
			if tk.URL == target {
				ticket = tk
				return true
			}
		}
		return false
	})

	// A gate's certificate is no facade's.
	if _, errOut, err := loxFleet(t, append([]string{"approve", ticket.ID}, r.facadeArgs("gate", "a")...)...); err == nil || !strings.Contains(errOut, "this identity may not") {
		t.Errorf("lox approve with a gate's identity: %v\n%s", err, errOut)
	}
	// A facade's certificate is no gate's.
	cert, key := r.identity("facade", "alice")
	pair, _ := tls.LoadX509KeyPair(cert, key)
	fc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{pair}, InsecureSkipVerify: true}}}
	resp, err := fc.Post("https://"+r.status.HubTLS+"/v1/gate/ask", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a facade asking as a gate: %d, want 403", resp.StatusCode)
	}
	// Nor is a token of the plain listener a credential here.
	tok, _ := os.ReadFile(filepath.Join(r.dir, "cli.token"))
	req, _ := http.NewRequest("GET", "https://"+r.status.HubTLS+"/v1/tickets", nil)
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	if _, err := (&http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}).Do(req); err == nil {
		t.Error("the hub's listener of mutual TLS admitted a client without a certificate")
	}

	out, errOut, err := loxFleet(t, append([]string{"approve", ticket.ID}, alice...)...)
	if err != nil {
		t.Fatalf("lox approve over mutual TLS: %v\n%s%s", err, out, errOut)
	}
	select {
	case res := <-done:
		if !strings.HasPrefix(res[0], "200 ") {
			t.Fatalf("the held request after the approval: %s %s", res[0], res[1])
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the approval did not release the held request")
	}
	if rec.count() != 1 {
		t.Errorf("the origin saw %d requests, want 1", rec.count())
	}
	testkit.WaitFor(t, 10*time.Second, "the decision in the console's audit", func() bool {
		return strings.Contains(consoleAudit(t, r), `"approver":"facade/alice:`)
	})
}
