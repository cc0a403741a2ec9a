package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/gate"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// startSquid runs squid on loopback, allowing CONNECT from loopback to port; it returns its
// address and the path of its access log.
func startSquid(t *testing.T, port int) (string, string) {
	t.Helper()
	return startSquidAuth(t, port, "", "")
}

// startSquidAuth is startSquid that, with a user, asks for a password too (Basic
// Proxy-Authorization): hash is the password's htpasswd hash.
func startSquidAuth(t *testing.T, port int, user, hash string) (string, string) {
	t.Helper()
	bin := requireTool(t, "squid")
	// squid drops to its own user: its directory must be reachable by it (t.TempDir's is not).
	dir, err := os.MkdirTemp("", "lockhttp-squid-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o777)
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	conf := filepath.Join(dir, "squid.conf")
	auth, authed := "", ""
	if user != "" {
		os.WriteFile(filepath.Join(dir, "passwd"), []byte(user+":"+hash+"\n"), 0o644)
		auth = fmt.Sprintf("auth_param basic program /usr/lib/squid/basic_ncsa_auth %s/passwd\nauth_param basic realm lockhttp-test\nacl authed proxy_auth REQUIRED\n", dir)
		authed = " authed"
	}
	os.WriteFile(conf, []byte(fmt.Sprintf(`http_port %s
`+auth+`acl localnet src 127.0.0.0/8
acl target port %d
http_access allow localnet target`+authed+`
http_access deny all
cache deny all
cache_mem 0
access_log stdio:%s/access.log
cache_log %s/cache.log
pid_filename %s/squid.pid
coredump_dir %s
`, addr, port, dir, dir, dir, dir)), 0o644)
	cmd := exec.Command(bin, "-N", "-f", conf)
	var out testkit.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "cache.log"))
			t.Fatalf("squid does not listen on %s:\n%s\n%s", addr, out.String(), log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return addr, filepath.Join(dir, "access.log")
}

// TestUpstreamProxy sends the gate's traffic through squid; the gate's own HTTP_PROXY (pointing
// nowhere) is ignored.
func TestUpstreamProxy(t *testing.T) {
	rec := &originRecorder{}
	origin := httptest.NewServer(rec)
	defer origin.Close()
	port := origin.Listener.Addr().(*net.TCPAddr).Port
	squid, accessLog := startSquid(t, port)
	pol := fmt.Sprintf("version = 1\ntrusted = [\"origin.test\"]\n[floor]\nallow_cidrs = [\"127.0.0.1/32\"]\nallow_ports = [%d]\n[floor.hosts]\n\"origin.test\" = \"127.0.0.1\"\n[sources]\nlocal = [\"127.0.0.0/8\"]\n", port)
	r := startStackWith(t, pol, []string{"--upstream", "http://" + squid},
		[]string{"HTTP_PROXY=http://127.0.0.1:1", "HTTPS_PROXY=http://127.0.0.1:1", "http_proxy=http://127.0.0.1:1"})
	e := &coreEnv{running: r, origin: rec, port: port}
	// A refused request never reaches squid.
	resp, err := e.client().Get(fmt.Sprintf("http://127.0.0.1:%d/", port))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Fatalf("IP literal through upstream: %d", resp.StatusCode)
	}
	resp, err = e.client().Get(e.url("/via-squid"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "origin saw GET /via-squid (0 bytes)" || resp.Header.Get(gate.HeaderRequest) == "" {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	// squid logs a tunnel when it closes: stop the stack, which closes the gate's connections.
	r.stop()
	deadline := time.Now().Add(10 * time.Second)
	want := fmt.Sprintf("CONNECT 127.0.0.1:%d", port)
	for {
		data, _ := os.ReadFile(accessLog)
		if n := strings.Count(string(data), "CONNECT "); n > 0 {
			if n != 1 || !strings.Contains(string(data), want) {
				t.Fatalf("squid's access log, want one %q:\n%s", want, data)
			}
			break
		}
		if time.Now().After(deadline) {
			gateLog, _ := os.ReadFile(filepath.Join(r.up.Logs, "gate.log"))
			t.Fatalf("squid's access log has no tunnel to the origin:\n%s\ngate log:\n%s", data, gateLog)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
