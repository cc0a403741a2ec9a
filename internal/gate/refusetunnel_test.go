package gate

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/signerclient"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// refusalPolicy refuses denied.test (the deny list) and blocked.test (a rule naming the host
// alone) as a whole; spliced-denied.test is on the deny list and never decrypted. %[1]d is the
// origin's port; %[2]s is more TOML.
const refusalPolicy = `version = 1
trusted = ["origin.test"]
deny = ["denied.test", "spliced-denied.test"]
splice = ["spliced-denied.test"]
[[rule]]
name = "no-blocked"
hosts = ["blocked.test"]
verdict = "deny"
[floor]
allow_cidrs = ["127.0.0.1/32"]
allow_ports = [443, %[1]d]
[floor.hosts]
"origin.test" = "127.0.0.1"
[sources]
local = ["127.0.0.0/8"]
%[2]s`

func setPolicy(t *testing.T, g *Gate, text string) {
	t.Helper()
	p, err := policy.Load("refusal.toml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	g.SetPolicy(p)
}

// readRecords reads the audit records in dir.
func readRecords(t *testing.T, dir string) []map[string]any {
	t.Helper()
	return testkit.AuditRecords(t, dir)
}

// waitRecord waits for the audit record in dir that match accepts.
func waitRecord(t *testing.T, dir, what string, match func(map[string]any) bool) map[string]any {
	t.Helper()
	var rec map[string]any
	testkit.WaitFor(t, 5*time.Second, what, func() bool {
		for _, m := range readRecords(t, dir) {
			if match(m) {
				rec = m
			}
		}
		return rec != nil
	})
	return rec
}

// countingHandler answers every request and counts them: a refused host never reaches it.
type countingHandler struct{ n atomic.Int64 }

func (h *countingHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.n.Add(1)
	io.Copy(io.Discard, r.Body)
	fmt.Fprintf(w, "origin: %s %s", r.Method, r.URL.Path)
}

// connectTLS opens a CONNECT to authority through the gate at addr and a TLS connection inside
// it, with sni as the server name.
func connectTLS(t *testing.T, addr, authority, sni string, pool *tls.Config) (*tls.Conn, error) {
	t.Helper()
	c := dialGate(t, addr)
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", authority, authority)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT %s: %v %v", authority, resp, err)
	}
	conf := pool.Clone()
	conf.ServerName = sni
	tc := tls.Client(c, conf)
	return tc, tc.Handshake()
}

// TestRefusedHostAnsweredInsideTheTunnel: a CONNECT to a host the gate decrypts and the policy
// refuses as a whole is opened, and its first request answered with the refusal; nothing goes
// out, and the audit has the CONNECT's record and the request's.
func TestRefusedHostAnsweredInsideTheTunnel(t *testing.T) {
	origin := &countingHandler{}
	tg := startTLSGate(t, origin)
	setPolicy(t, tg.gate, fmt.Sprintf(refusalPolicy, tg.port, ""))
	clientConf := &tls.Config{RootCAs: tg.caPool}

	for _, c := range []struct{ name, host, rule, reason string }{
		{"the deny list", "denied.test", "deny", `the deny list names "denied.test"`},
		{"a deny rule naming the host alone", "blocked.test", "no-blocked", `rule "no-blocked" (deny)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, err := tg.client().Get(fmt.Sprintf("https://%s:%d/x?q=1", c.host, tg.port))
			if err != nil {
				t.Fatalf("a transport error instead of the refusal: %v", err)
			}
			body := readAll(resp)
			if resp.StatusCode != 403 || resp.Header.Get(HeaderCode) != "E_RULE" || resp.Header.Get(HeaderRule) != c.rule || !resp.Close {
				t.Fatalf("got %d %s %s close=%v\n%s", resp.StatusCode, resp.Header.Get(HeaderCode), resp.Header.Get(HeaderRule), resp.Close, body)
			}
			for _, want := range []string{
				fmt.Sprintf("lockhttp refused this request: GET https://%s:%d/x?q=1", c.host, tg.port),
				"Code:    E_RULE", "Rule:    " + c.rule, "Why:     " + c.reason, "Request: " + resp.Header.Get(HeaderRequest),
				"What to do: " + policy.CodeRule.Advice(),
			} {
				if !strings.Contains(body, want) {
					t.Errorf("the body lacks %q:\n%s", want, body)
				}
			}
			// Clients that show only the status line (requests, urllib, pip) show this.
			if want := "403 Forbidden (lockhttp E_RULE, rule " + c.rule + ": " + policy.CodeRule.Advice() + ")"; resp.Status != want {
				t.Errorf("status %q, want %q", resp.Status, want)
			}
			if resp.Header.Get("Retry-After") != "" {
				t.Error("E_RULE carries Retry-After")
			}
			id := resp.Header.Get(HeaderRequest)
			inner := waitRecord(t, tg.audit, "the request's record", func(m map[string]any) bool { return m["id"] == id })
			if inner["event"] != "tunnel-request" || inner["method"] != "GET" || inner["verdict"] != "DENY" || inner["code"] != "E_RULE" ||
				inner["rule"] != c.rule || inner["status"] != float64(403) || inner["url"] != fmt.Sprintf("https://%s:%d/x?q=1", c.host, tg.port) ||
				inner["container"] != "local" || !strings.Contains(fmt.Sprint(inner["reason"]), c.reason) {
				t.Errorf("the request's record: %v", inner)
			}
			conn := waitRecord(t, tg.audit, "the CONNECT's record", func(m map[string]any) bool {
				return m["event"] == "connect" && m["url"] == fmt.Sprintf("%s:%d", c.host, tg.port)
			})
			if conn["verdict"] != "DENY" || conn["code"] != "E_RULE" || conn["rule"] != c.rule || conn["status"] != float64(403) ||
				!strings.Contains(fmt.Sprint(conn["detail"]), "answered request "+id) || !strings.Contains(fmt.Sprint(inner["detail"]), fmt.Sprint(conn["id"])) {
				t.Errorf("the CONNECT's record: %v", conn)
			}
		})
	}

	t.Run("a POST with a body", func(t *testing.T) {
		resp, err := tg.client().Post(fmt.Sprintf("https://denied.test:%d/upload", tg.port), "application/octet-stream", bytes.NewReader(make([]byte, 100<<10)))
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(resp)
		if resp.StatusCode != 403 || resp.Header.Get(HeaderCode) != "E_RULE" || !strings.Contains(body, "POST https://denied.test:") {
			t.Fatalf("got %d %s\n%s", resp.StatusCode, resp.Header.Get(HeaderCode), body)
		}
	})

	t.Run("one answer, then the connection closes", func(t *testing.T) {
		tc, err := connectTLS(t, tg.addr, "denied.test:443", "denied.test", clientConf)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(tc, "GET /one HTTP/1.1\r\nHost: denied.test\r\n\r\nGET /two HTTP/1.1\r\nHost: denied.test\r\n\r\n")
		br := bufio.NewReader(tc)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(resp)
		if resp.StatusCode != 403 || !resp.Close || !strings.Contains(body, "GET https://denied.test:443/one") {
			t.Fatalf("got %d close=%v\n%s", resp.StatusCode, resp.Close, body)
		}
		if rest, _ := io.ReadAll(br); len(rest) > 0 {
			t.Fatalf("the gate answered after the refusal: %q", rest)
		}
	})

	t.Run("plain text where TLS was expected", func(t *testing.T) {
		c, err := net.Dial("tcp", tg.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, "CONNECT blocked.test:443 HTTP/1.1\r\nHost: blocked.test:443\r\n\r\n")
		br := bufio.NewReader(c)
		if resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"}); err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: blocked.test\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(resp)
		if resp.StatusCode != 403 || resp.Header.Get(HeaderCode) != "E_RULE" || resp.Header.Get(HeaderRule) != "no-blocked" || !strings.Contains(body, "What to do:") {
			t.Fatalf("got %d %s %s\n%s", resp.StatusCode, resp.Header.Get(HeaderCode), resp.Header.Get(HeaderRule), body)
		}
	})

	t.Run("an SNI naming another host: the handshake is aborted, the refusal recorded", func(t *testing.T) {
		if _, err := connectTLS(t, tg.addr, "denied.test:443", "origin.test", clientConf); err == nil {
			t.Fatal("the handshake succeeded with another SNI")
		}
		rec := waitRecord(t, tg.audit, "the CONNECT's record", func(m map[string]any) bool {
			return m["event"] == "connect" && m["url"] == "denied.test:443" && strings.Contains(fmt.Sprint(m["detail"]), "is not the CONNECT host")
		})
		if rec["code"] != "E_RULE" || rec["rule"] != "deny" || rec["status"] != float64(403) {
			t.Errorf("the CONNECT's record: %v", rec)
		}
	})

	if n := origin.n.Load(); n != 0 {
		t.Fatalf("%d requests to refused hosts reached the origin", n)
	}
}

// fakeCerts is a signer that answers err, counting the calls.
type fakeCerts struct {
	err   error
	calls atomic.Int64
}

func (f *fakeCerts) Certificate(context.Context, string) (*tls.Certificate, error) {
	f.calls.Add(1)
	return nil, f.err
}

func (f *fakeCerts) Health(context.Context) error { return f.err }

// TestRefusedOnTheConnect: where the gate cannot sign for the host, or never decrypts it, the
// CONNECT itself is refused, and its body carries the whole refusal.
func TestRefusedOnTheConnect(t *testing.T) {
	cases := []struct {
		name      string
		certs     *fakeCerts // nil: no signer
		target    string
		code      string
		rule      string
		signerAsk bool // the signer is asked for a certificate
	}{
		{"no signer", nil, "denied.test:443", "E_RULE", "deny", false},
		{"the signer refuses the name", &fakeCerts{err: &signerclient.RefusedError{Reason: "not a name it signs"}}, "denied.test:443", "E_RULE", "deny", true},
		{"the signer is down", &fakeCerts{err: signerclient.ErrUnavailable}, "blocked.test:443", "E_RULE", "no-blocked", true},
		{"a spliced host", &fakeCerts{err: signerclient.ErrUnavailable}, "spliced-denied.test:443", "E_RULE", "deny", false},
		{"an IP literal", &fakeCerts{err: signerclient.ErrUnavailable}, "127.0.0.1:443", "E_FLOOR", "floor:ip-literal", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tg := startGateWith(t, nil, func(cfg *Config) {
				if c.certs != nil {
					cfg.Certs = c.certs
				}
			})
			setPolicy(t, tg.g, fmt.Sprintf(refusalPolicy, tg.port, ""))
			out := tg.raw(t, "CONNECT "+c.target+" HTTP/1.1\r\nHost: "+c.target+"\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(out)), &http.Request{Method: "CONNECT"})
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			body := readAll(resp)
			if resp.StatusCode != 403 || resp.Header.Get(HeaderCode) != c.code || resp.Header.Get(HeaderRule) != c.rule {
				t.Fatalf("got %d %s %s\n%s", resp.StatusCode, resp.Header.Get(HeaderCode), resp.Header.Get(HeaderRule), out)
			}
			for _, want := range []string{"lockhttp refused this request: CONNECT " + c.target, "Code:    " + c.code, "Rule:    " + c.rule, "Why:     ", "What to do: "} {
				if !strings.Contains(body, want) {
					t.Errorf("the CONNECT's body lacks %q:\n%s", want, body)
				}
			}
			if strings.Contains(body, "signer") {
				t.Errorf("the body names the signer's failure, an internal cause:\n%s", body)
			}
			if asked := c.certs != nil && c.certs.calls.Load() > 0; asked != c.signerAsk {
				t.Errorf("the signer asked: %v, want %v", asked, c.signerAsk)
			}
			if c.signerAsk {
				rec := waitRecord(t, tg.auditDir, "the CONNECT's record", func(m map[string]any) bool { return m["event"] == "connect" })
				if rec["code"] != c.code || rec["status"] != float64(403) || !strings.Contains(fmt.Sprint(rec["detail"]), "without a certificate") {
					t.Errorf("the CONNECT's record: %v", rec)
				}
			}
		})
	}
}

// TestRetryAfter: the refusals a retry can pass say when to retry.
func TestRetryAfter(t *testing.T) {
	t.Run("E_PENDING", func(t *testing.T) {
		tg, _, _, _, _, stop := askGate(t, "100ms")
		defer stop()
		req, _ := http.NewRequest("DELETE", tg.url("/thing"), nil)
		resp, err := tg.client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(resp)
		if resp.StatusCode != 403 || resp.Header.Get(HeaderCode) != "E_PENDING" || resp.Header.Get("Retry-After") != "5" {
			t.Fatalf("got %d %s Retry-After %q", resp.StatusCode, resp.Header.Get(HeaderCode), resp.Header.Get("Retry-After"))
		}
		if !strings.Contains(body, "Retry the same request in a few seconds") {
			t.Errorf("the body does not say when to retry:\n%s", body)
		}
	})
	t.Run("E_NO_AUDIT", func(t *testing.T) {
		tg := startGate(t, nil)
		tg.g.audit = failingAuditor{tg.aw}
		resp, err := tg.client().Get(tg.url("/x"))
		if err != nil {
			t.Fatal(err)
		}
		readAll(resp)
		if resp.StatusCode != 503 || resp.Header.Get(HeaderCode) != "E_NO_AUDIT" || resp.Header.Get("Retry-After") != "10" {
			t.Fatalf("got %d %s Retry-After %q", resp.StatusCode, resp.Header.Get(HeaderCode), resp.Header.Get("Retry-After"))
		}
	})
	t.Run("E_NO_SIGNER", func(t *testing.T) {
		tg := startGateWith(t, nil, func(c *Config) { c.Certs = &fakeCerts{err: signerclient.ErrUnavailable} })
		o := fmt.Sprintf("origin.test:%d", tg.port)
		out := tg.raw(t, "CONNECT "+o+" HTTP/1.1\r\nHost: "+o+"\r\n\r\n")
		if !strings.HasPrefix(out, "HTTP/1.1 503") || !strings.Contains(out, "X-Lockhttp-Code: E_NO_SIGNER") || !strings.Contains(out, "Retry-After: 10") {
			t.Fatalf("CONNECT with the signer down:\n%s", out)
		}
	})
	t.Run("E_NO_CONSOLE says when to retry, E_RULE has no Retry-After", func(t *testing.T) {
		tg := startGate(t, nil)
		req, _ := http.NewRequest("DELETE", tg.url("/thing"), nil)
		resp, err := tg.client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(resp)
		if resp.Header.Get(HeaderCode) != "E_NO_CONSOLE" || resp.Header.Get("Retry-After") != "" || !strings.Contains(body, "retry only once it runs") {
			t.Fatalf("got %d %s Retry-After %q\n%s", resp.StatusCode, resp.Header.Get(HeaderCode), resp.Header.Get("Retry-After"), body)
		}
		resp, err = tg.client().Get(tg.url("/secret/x"))
		if err != nil {
			t.Fatal(err)
		}
		readAll(resp)
		if resp.Header.Get(HeaderCode) != "E_RULE" || resp.Header.Get("Retry-After") != "" {
			t.Fatalf("got %d %s Retry-After %q", resp.StatusCode, resp.Header.Get(HeaderCode), resp.Header.Get("Retry-After"))
		}
	})
}

// TestConnectHostNamingTheProxy: a CONNECT whose Host names the proxy (Node's http.request
// example) is not refused, and its tunnel goes to the CONNECT target, decrypted or spliced.
func TestConnectHostNamingTheProxy(t *testing.T) {
	t.Run("decrypted", func(t *testing.T) {
		tg := startTLSGate(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "origin %s", r.URL.Path) }))
		c, err := net.Dial("tcp", tg.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		o := fmt.Sprintf("origin.test:%d", tg.port)
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nConnection: keep-alive\r\n\r\n", o, tg.addr)
		br := bufio.NewReader(c)
		if resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"}); err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		tc := tls.Client(c, &tls.Config{ServerName: "origin.test", RootCAs: tg.caPool})
		fmt.Fprintf(tc, "GET /in HTTP/1.1\r\nHost: %s\r\n\r\n", o)
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil {
			t.Fatal(err)
		}
		if body := readAll(resp); resp.StatusCode != 200 || body != "origin /in" {
			t.Fatalf("inside: %d %q", resp.StatusCode, body)
		}
	})
	t.Run("at the domain", func(t *testing.T) {
		tg := startGate(t, nil)
		setPolicy(t, tg.g, fmt.Sprintf(refusalPolicy, tg.port, "[[rule]]\nname = \"tunnel\"\nhosts = [\"origin.test\"]\nmethods = [\"CONNECT\"]\nverdict = \"free\"\n"))
		o := fmt.Sprintf("origin.test:%d", tg.port)
		out := tg.raw(t, "CONNECT "+o+" HTTP/1.1\r\nHost: "+tg.addr+"\r\n\r\nGET /spliced HTTP/1.1\r\nHost: "+o+"\r\nConnection: close\r\n\r\n")
		if !strings.HasPrefix(out, "HTTP/1.1 200 Connection established") || !strings.Contains(out, "ok GET /spliced") || tg.origin.count() != 1 {
			t.Fatalf("spliced tunnel with Host naming the proxy:\n%s", out)
		}
	})
	t.Run("two Host headers are refused", func(t *testing.T) {
		tg := startGate(t, nil)
		o := fmt.Sprintf("origin.test:%d", tg.port)
		out := tg.raw(t, "CONNECT "+o+" HTTP/1.1\r\nHost: "+o+"\r\nHost: "+tg.addr+"\r\n\r\n")
		if !strings.HasPrefix(out, "HTTP/1.1 400") || !strings.Contains(out, "X-Lockhttp-Rule: framing:bad-request") {
			t.Fatalf("two Host headers:\n%s", out)
		}
	})
}
