package e2e

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/testkit"
)

// TestUpstreamPasswordNeverOnACommandLine: the gate reaches an upstream proxy that needs a
// password (squid with Basic authentication) with the credential from a file
// (--upstream-credentials-file) or the environment (LOCKHTTP_UPSTREAM_PROXY_AUTH); the planted
// password is in no stack process's /proc/PID/cmdline, no log, no audit and nothing else the
// stack writes, nor lox's output, in clear or as the Basic header's base64. A URL with a
// password on the command line is refused by lox and by the gate, without repeating it.
func TestUpstreamPasswordNeverOnACommandLine(t *testing.T) {
	requireTool(t, "squid")
	openssl := requireTool(t, "openssl")
	if _, err := os.Stat("/usr/lib/squid/basic_ncsa_auth"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("squid's basic_ncsa_auth is not installed")
		}
		t.Skip("squid's basic_ncsa_auth is not installed")
	}
	b := make([]byte, 8)
	rand.Read(b)
	const user = "gate-user"
	password := "lox-planted-pw-" + hex.EncodeToString(b)
	hashOut, err := exec.Command(openssl, "passwd", "-apr1", password).Output()
	if err != nil {
		t.Fatal(err)
	}
	planted := []string{password, base64.StdEncoding.EncodeToString([]byte(user + ":" + password))}

	rec := &originRecorder{}
	origin := httptest.NewServer(rec)
	defer origin.Close()
	port := origin.Listener.Addr().(*net.TCPAddr).Port
	squid, accessLog := startSquidAuth(t, port, user, strings.TrimSpace(string(hashOut)))

	// The upstream needs the password: a tunnel without it, or with another, is refused.
	for _, auth := range []string{"", user + ":wrong"} {
		c, err := net.Dial("tcp", squid)
		if err != nil {
			t.Fatal(err)
		}
		head := fmt.Sprintf("CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n", port, port)
		if auth != "" {
			head += "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(auth)) + "\r\n"
		}
		io.WriteString(c, head+"\r\n")
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, _ := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if !strings.HasPrefix(line, "HTTP/1.1 407") {
			t.Fatalf("squid answered a tunnel with credential %q: %q, want 407", auth, line)
		}
	}

	pol := fmt.Sprintf("version = 1\ntrusted = [\"origin.test\"]\n[floor]\nallow_cidrs = [\"127.0.0.1/32\"]\nallow_ports = [%d]\n[floor.hosts]\n\"origin.test\" = \"127.0.0.1\"\n[sources]\nlocal = [\"127.0.0.0/8\"]\n", port)
	credFile := filepath.Join(t.TempDir(), "upstream.credentials")
	if err := os.WriteFile(credFile, []byte(user+":"+password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name       string
		flags, env []string
		from       string
	}{
		{"from a file", []string{"--upstream", "http://" + squid, "--upstream-credentials-file", credFile}, nil, "file"},
		{"from the environment", []string{"--upstream", "http://" + squid}, []string{"LOCKHTTP_UPSTREAM_PROXY_AUTH=" + user + ":" + password}, "environment"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := rec.count()
			r := startStackWith(t, pol, c.flags, c.env)
			e := &coreEnv{running: r, origin: rec, port: port}
			path := "/via-squid-" + c.from
			resp, err := e.client().Get(e.url(path))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(body) != "origin saw GET "+path+" (0 bytes)" || rec.count() != before+1 {
				gateLog, _ := os.ReadFile(filepath.Join(r.up.Logs, "gate.log"))
				t.Fatalf("through the upstream: %d %q\ngate log:\n%s", resp.StatusCode, body, gateLog)
			}
			// Every process of the stack, while it runs: its command line.
			for name, pid := range r.up.PIDs {
				cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
				if err != nil {
					t.Fatalf("%s (pid %d): %v", name, pid, err)
				}
				if len(cmdline) == 0 {
					t.Fatalf("%s (pid %d): an empty command line", name, pid)
				}
				for _, p := range planted {
					if strings.Contains(string(cmdline), p) {
						t.Errorf("the password is in the command line of %s (pid %d): %q", name, pid, cmdline)
					}
				}
			}
			gateLog, _ := os.ReadFile(filepath.Join(r.up.Logs, "gate.log"))
			if !strings.Contains(string(gateLog), `"upstream_credential":"`+c.from+`"`) {
				t.Errorf("the gate's log does not say where the credential came from:\n%s", gateLog)
			}
			r.stop()
			// Everything the stack wrote (logs, the audits, up.json, the state), and lox's own
			// output, once it stopped.
			files := 0
			filepath.WalkDir(r.state, func(p string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() || d.Type()&fs.ModeType != 0 {
					return nil
				}
				data, err := os.ReadFile(p)
				if err != nil {
					t.Errorf("%s: %v", p, err)
					return nil
				}
				files++
				for _, pw := range planted {
					if strings.Contains(string(data), pw) {
						t.Errorf("the password is in %s", p)
					}
				}
				return nil
			})
			if files < 5 {
				t.Fatalf("only %d files under %s", files, r.state)
			}
			for _, pw := range planted {
				if strings.Contains(r.out.String(), pw) {
					t.Errorf("the password is in lox's output:\n%s", r.out)
				}
			}
		})
	}
	// squid saw the gate's tunnels as the user, once each stack closed them.
	testkit.WaitFor(t, 10*time.Second, "two tunnels as the user in squid's access log", func() bool {
		data, _ := os.ReadFile(accessLog)
		return strings.Count(string(data), fmt.Sprintf("CONNECT 127.0.0.1:%d %s ", port, user)) >= 2
	})

	// A password on the command line is refused before anything starts, and never repeated.
	// (Bounded: a binary that took the URL would run on.)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	withPassword := "http://" + user + ":" + password + "@" + squid
	for _, c := range []struct {
		name string
		cmd  *exec.Cmd
		want string
	}{
		{"lox", exec.CommandContext(ctx, filepath.Join(binDir, "lox"), "run", "--headless", "--state", t.TempDir(), "--listen", "127.0.0.1:0", "--hub-listen", "127.0.0.1:0", "--upstream", withPassword), "lox run: --upstream has a user:password part"},
		{"gate", exec.CommandContext(ctx, filepath.Join(binDir, "gate"), "-listen", "127.0.0.1:0", "-console", "/nonexistent.sock", "-audit", t.TempDir(), "-upstream", withPassword, "-allow-root"), "gate: -upstream has a user:password part"},
	} {
		out, _ := c.cmd.CombinedOutput()
		if c.cmd.ProcessState.ExitCode() != 2 || !strings.Contains(string(out), c.want) || !strings.Contains(string(out), "--upstream-credentials-file FILE") ||
			strings.Contains(string(out), password) {
			t.Errorf("%s with a password in --upstream: exit %d:\n%s", c.name, c.cmd.ProcessState.ExitCode(), out)
		}
	}
}
