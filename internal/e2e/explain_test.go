package e2e

import (
	"bufio"
	"bytes"
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

	"github.com/lockhttp/lockhttp/internal/gate"
)

// TestExplainAgreesWithGate sends the same raw requests to the running gate and to lockhttp
// explain, and checks that they decide alike: FREE goes out, a refusal carries the code and the
// rule explain names.
func TestExplainAgreesWithGate(t *testing.T) {
	e := startCore(t)
	o := fmt.Sprintf("origin.test:%d", e.port)
	requests := []string{
		"GET http://" + o + "/read HTTP/1.1\r\nHost: " + o + "\r\n\r\n",
		"HEAD http://" + o + "/read HTTP/1.1\r\nHost: " + o + "\r\n\r\n",
		"POST http://" + o + "/upload/x HTTP/1.1\r\nHost: " + o + "\r\nContent-Length: 5\r\n\r\nhello",
		"POST http://" + o + "/other HTTP/1.1\r\nHost: " + o + "\r\nContent-Length: 5\r\n\r\nhello",
		"GET http://" + o + "/admin/x HTTP/1.1\r\nHost: " + o + "\r\n\r\n",
		"GET http://" + o + "/ADMIN/%2e%2e/admin/y HTTP/1.1\r\nHost: " + o + "\r\n\r\n",
		"DELETE http://" + o + "/x HTTP/1.1\r\nHost: " + o + "\r\n\r\n",
		fmt.Sprintf("GET http://denied.test:%d/ HTTP/1.1\r\nHost: denied.test:%d\r\n\r\n", e.port, e.port),
		fmt.Sprintf("GET http://127.0.0.1:%d/ HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", e.port, e.port),
		fmt.Sprintf("GET http://0x7f.1:%d/ HTTP/1.1\r\nHost: 0x7f.1:%d\r\n\r\n", e.port, e.port),
		fmt.Sprintf("GET http://private.test:%d/ HTTP/1.1\r\nHost: private.test:%d\r\n\r\n", e.port, e.port),
		"GET http://origin.test:9/ HTTP/1.1\r\nHost: origin.test:9\r\n\r\n",
		"GET http://" + o + "/dns-query?dns=AAAB HTTP/1.1\r\nHost: " + o + "\r\n\r\n",
		"POST http://" + o + "/upload/q HTTP/1.1\r\nHost: " + o + "\r\nContent-Type: application/dns-message\r\nContent-Length: 2\r\n\r\nab",
		"GET http://user:pw@" + o + "/ HTTP/1.1\r\nHost: " + o + "\r\n\r\n",
		"GET http://" + o + "/ HTTP/1.1\r\nHost: other.test\r\n\r\n",
		"POST http://" + o + "/upload/x HTTP/1.1\r\nHost: " + o + "\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"GET http://" + o + "/ HTTP/1.1\r\nHost: " + o + "\r\nUpgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n",
		"GET /local HTTP/1.1\r\nHost: " + o + "\r\n\r\n",
		fmt.Sprintf("CONNECT tunnel.test:%d HTTP/1.1\r\nHost: tunnel.test:%d\r\n\r\n", e.tlsPort, e.tlsPort),
		fmt.Sprintf("CONNECT asktunnel.test:%d HTTP/1.1\r\nHost: asktunnel.test:%d\r\n\r\n", e.tlsPort, e.tlsPort),
		"CONNECT origin.test:22 HTTP/1.1\r\nHost: origin.test:22\r\n\r\n",
		"CONNECT origin.test HTTP/1.1\r\nHost: origin.test\r\n\r\n",
		"CONNECT denied.test:443 HTTP/1.1\r\nHost: denied.test:443\r\n\r\n",
		fmt.Sprintf("CONNECT origin.test:%d HTTP/1.1\r\nHost: origin.test:%d\r\n\r\n", e.tlsPort, e.tlsPort),
	}
	for i, raw := range requests {
		line, _, _ := strings.Cut(raw, "\r\n")
		t.Run(fmt.Sprintf("%02d %s", i, line), func(t *testing.T) {
			ex := explainRaw(t, e.policy, raw)
			conn := raw
			if !strings.HasPrefix(raw, "CONNECT") {
				conn = strings.Replace(raw, "\r\n\r\n", "\r\nConnection: close\r\n\r\n", 1)
			}
			resp := firstResponse(t, e.up.Listen, conn)
			code, rule := resp.Header.Get(gate.HeaderCode), resp.Header.Get(gate.HeaderRule)
			if ex.Verdict == "DENY" && strings.HasPrefix(raw, "CONNECT") && resp.StatusCode == 200 {
				// A refused CONNECT the gate can decrypt is opened, and its refusal answers the
				// first request inside; the CONNECT's record holds the decision.
				rec := e.recordFor(resp.Header.Get(gate.HeaderRequest))
				code, rule = str(rec["code"]), str(rec["rule"])
			}
			agrees(t, ex, resp.StatusCode, code, rule)
		})
	}
}

// TestExplainAgreesInCleartextTunnels: plain HTTP sent through a CONNECT, to the running gate
// and to lockhttp explain --cleartext given the same bytes: the same decisions.
func TestExplainAgreesInCleartextTunnels(t *testing.T) {
	e := startCore(t)
	o := fmt.Sprintf("origin.test:%d", e.port)
	connect := "CONNECT " + o + " HTTP/1.1\r\nHost: " + o + "\r\n\r\n"
	inside := []string{
		"GET /read HTTP/1.1\r\nHost: " + o + "\r\n\r\n",
		"GET http://" + o + "/read HTTP/1.1\r\nHost: " + o + "\r\n\r\n",
		"POST /upload/x HTTP/1.1\r\nHost: " + o + "\r\nContent-Length: 5\r\n\r\nhello",
		"GET /admin/x HTTP/1.1\r\nHost: " + o + "\r\n\r\n",
		"DELETE /x HTTP/1.1\r\nHost: " + o + "\r\n\r\n",
		fmt.Sprintf("GET / HTTP/1.1\r\nHost: other.test:%d\r\n\r\n", e.port),
		"GET / HTTP/1.1\r\nHost: origin.test\r\n\r\n",
		"GET https://" + o + "/ HTTP/1.1\r\nHost: " + o + "\r\n\r\n",
		"GET /x HTTP/1.1\r\nHost: " + o + "\r\nUpgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n",
	}
	for i, in := range inside {
		line, _, _ := strings.Cut(in, "\r\n")
		t.Run(fmt.Sprintf("%02d %s", i, line), func(t *testing.T) {
			ex := explainRaw(t, e.policy, connect+in, "--cleartext")
			c, err := net.Dial("tcp", e.up.Listen)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(20 * time.Second))
			io.WriteString(c, connect)
			br := bufio.NewReader(c)
			if resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"}); err != nil || resp.StatusCode != 200 {
				t.Fatalf("CONNECT: %v %v", resp, err)
			}
			io.WriteString(c, strings.Replace(in, "\r\n\r\n", "\r\nConnection: close\r\n\r\n", 1))
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("the answer inside the tunnel: %v", err)
			}
			resp.Body.Close()
			agrees(t, ex, resp.StatusCode, resp.Header.Get(gate.HeaderCode), resp.Header.Get(gate.HeaderRule))
		})
	}
}

// agrees checks the gate's answer (its status, code and rule) against explain's decision.
func agrees(t *testing.T, ex explained, status int, code, rule string) {
	t.Helper()
	switch ex.Verdict {
	case "FREE":
		if code != "" || status >= 400 {
			t.Fatalf("explain says FREE (%s), the gate answered %d %s %s", ex.Reason, status, code, rule)
		}
	case "ASK":
		// The stack's hub holds it for the policy's hold, then answers E_PENDING.
		if code != "E_PENDING" || rule != ex.Rule {
			t.Fatalf("explain says ASK by %q, the gate answered %d %q by %q", ex.Rule, status, code, rule)
		}
	case "DENY":
		if code != ex.Code || rule != ex.Rule {
			t.Fatalf("explain says DENY %s by %q (%s), the gate answered %d %q by %q", ex.Code, ex.Rule, ex.Reason, status, code, rule)
		}
	default:
		t.Fatalf("explain verdict %q", ex.Verdict)
	}
	t.Logf("%s %s %s", ex.Verdict, ex.Code, ex.Rule)
}

func TestExplainUsage(t *testing.T) {
	bin := filepath.Join(binDir, "lockhttp")
	dir := t.TempDir()
	good := filepath.Join(dir, "p.toml")
	os.WriteFile(good, []byte("version = 1\n[sources]\nlocal = [\"127.0.0.1\"]\n"), 0o600)
	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(bad, []byte("version = 1\n[settings]\nhold = 5\n"), 0o600)
	cases := []struct {
		name   string
		args   []string
		stdin  string
		code   int
		output string
	}{
		{"no policy", []string{"explain", "-"}, "", 2, "usage"},
		{"bad policy", []string{"explain", "--policy", bad, "-"}, "GET http://a.example/ HTTP/1.1\n", 2, `bad.toml:3: settings.hold: "5" is not a duration`},
		{"garbage request", []string{"explain", "--policy", good, "-"}, "hello\n", 0, `"rule":"framing:bad-request"`},
		{"unknown container", []string{"explain", "--policy", good, "--container", "nobody", "-"}, "GET http://a.example.com/ HTTP/1.1\nHost: a.example.com\n", 0, `"code":"E_SOURCE_UNKNOWN"`},
		{"LF line ends", []string{"explain", "--policy", good, "-"}, "GET http://a.example.com/ HTTP/1.1\nHost: a.example.com\n", 0, `"verdict":"ASK"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(bin, c.args...)
			cmd.Stdin = strings.NewReader(c.stdin)
			out, _ := cmd.CombinedOutput()
			if cmd.ProcessState.ExitCode() != c.code || !strings.Contains(string(out), c.output) {
				t.Fatalf("exit %d output %q; want exit %d containing %q", cmd.ProcessState.ExitCode(), out, c.code, c.output)
			}
		})
	}
}

func TestCAInitRefusesToOverwrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	bin := filepath.Join(binDir, "lockhttp")
	out, err := exec.Command(bin, "ca", "init", "--dir", dir).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ca.pem") {
		t.Fatalf("ca init: %v\n%s", err, out)
	}
	fi, err := os.Stat(filepath.Join(dir, "ca-key.pem"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi, err)
	}
	key1, _ := os.ReadFile(filepath.Join(dir, "ca-key.pem"))
	cmd := exec.Command(bin, "ca", "init", "--dir", dir)
	out, _ = cmd.CombinedOutput()
	key2, _ := os.ReadFile(filepath.Join(dir, "ca-key.pem"))
	if cmd.ProcessState.ExitCode() == 0 || !bytes.Equal(key1, key2) {
		t.Fatalf("a second init replaced the CA (exit %d):\n%s", cmd.ProcessState.ExitCode(), out)
	}
}

// explainRaw decides one raw request with lockhttp explain under the policy file.
// explained is what explainRaw reads of lockhttp explain's answer.
type explained struct{ Verdict, Code, Rule, Reason string }

// explainRaw runs lockhttp explain on raw with the policy at policyPath and flags.
func explainRaw(t *testing.T, policyPath, raw string, flags ...string) (ex explained) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "lockhttp"), append(append([]string{"explain", "--policy", policyPath}, flags...), "-")...)
	cmd.Stdin = strings.NewReader(raw)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("explain: %v\n%s", err, stderr.String())
	}
	if err := json.Unmarshal(out, &ex); err != nil {
		t.Fatalf("explain output %q: %v", out, err)
	}
	return ex
}

// firstResponse sends raw to the gate and reads its first answer (a CONNECT's 200 included).
func firstResponse(t *testing.T, addr, raw string) *http.Response {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	io.WriteString(c, raw)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	method := ""
	if strings.HasPrefix(raw, "CONNECT ") {
		method = "CONNECT"
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("gate answer: %v", err)
	}
	if method == "" || resp.StatusCode != 200 {
		io.Copy(io.Discard, resp.Body)
	} else {
		c.Close() // the tunnel ends: the gate writes the CONNECT's record
	}
	resp.Body.Close()
	return resp
}
