package e2e

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/testkit"
)

// requireDocker skips without a docker daemon and docker-compose, except under CI=true.
func requireDocker(t *testing.T) {
	t.Helper()
	_, errC := exec.LookPath("docker-compose")
	errD := exec.Command("docker", "info").Run()
	if errC != nil || errD != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("docker (%v) and docker-compose (%v) are needed: .ci/run installs them and the machine runs the daemon", errD, errC)
		}
		t.Skip("no docker daemon or docker-compose")
	}
}

// composeStack is the compose setup with the test origin and the test agent.
type composeStack struct {
	t       *testing.T
	project string
	env     []string
	dir     string // compose/
}

func (c *composeStack) run(args ...string) (string, error) {
	return c.runStdin(nil, args...)
}

// runStdin is run with stdin (nil: none).
func (c *composeStack) runStdin(stdin io.Reader, args ...string) (string, error) {
	full := append([]string{"-p", c.project, "-f", "compose.yaml", "-f", "test/compose.test.yaml"}, args...)
	cmd := exec.Command("docker-compose", full...)
	cmd.Dir, cmd.Stdin = c.dir, stdin
	cmd.Env = append(os.Environ(), c.env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (c *composeStack) must(args ...string) string {
	c.t.Helper()
	out, err := c.run(args...)
	if err != nil {
		c.t.Fatalf("docker-compose %v: %v\n%s", args, err, out)
	}
	return out
}

// agent runs the test agent's command inside the agent container.
func (c *composeStack) agent(args ...string) string {
	c.t.Helper()
	out, _ := c.run(append([]string{"exec", "-T", "agent", "/agent"}, args...)...)
	return strings.TrimSpace(out)
}

func (c *composeStack) lox(args ...string) (string, error) {
	full := append([]string{"exec", "-T", "console", "/lox"}, args...)
	full = append(full, "--hub", "http://127.0.0.1:3131", "--hub-token", "/vol/console/cli.token")
	return c.run(full...)
}

// buildTestImages builds the lockhttp images and the test origin and agent, tagged e2e.
func buildTestImages(t *testing.T, root string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(root, "compose", "build.sh"), "e2e")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("compose/build.sh: %v\n%s", err, out)
	}
	pki := newTestPKI(t)
	cert := pki.leaf(t, []string{"origin.test", "api.origin.test"}, time.Now().Add(24*time.Hour), false)
	for _, img := range []struct{ name, pkg, dockerfile string }{
		{"testorigin", "./compose/test/origin", "Dockerfile.origin"},
		{"testagent", "./compose/test/agent", "Dockerfile.agent"},
	} {
		ctx := t.TempDir()
		b := exec.Command("go", "build", "-o", ctx+"/", img.pkg)
		b.Dir, b.Env = root, append(os.Environ(), "CGO_ENABLED=0")
		if out, err := b.CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", img.pkg, err, out)
		}
		data, _ := os.ReadFile(filepath.Join(root, "compose", "test", img.dockerfile))
		os.WriteFile(filepath.Join(ctx, "Dockerfile"), data, 0o644)
		if img.name == "testorigin" {
			keyDER, _ := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
			os.WriteFile(filepath.Join(ctx, "cert.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o644)
			os.WriteFile(filepath.Join(ctx, "key.pem"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o644)
		}
		if out, err := exec.Command("docker", "build", "-q", "-t", "lockhttp-"+img.name+":e2e", ctx).CombinedOutput(); err != nil {
			t.Fatalf("docker build %s: %v\n%s", img.name, err, out)
		}
	}
	rootPEM := filepath.Join(os.TempDir(), fmt.Sprintf("lockhttp-e2e-root-%d.pem", os.Getpid()))
	os.WriteFile(rootPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: pki.root.Raw}), 0o644)
	t.Cleanup(func() { os.Remove(rootPEM) })
	t.Setenv("LOCKHTTP_TEST_ROOT", rootPEM)
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestComposeSidecar builds the images, brings the compose setup up with a test origin playing the
// internet, and checks from inside the agent container that the gate is its only way out.
func TestComposeSidecar(t *testing.T) {
	requireDocker(t)
	root, _ := filepath.Abs("../..")
	buildTestImages(t, root)
	c := &composeStack{t: t, project: fmt.Sprintf("lockhttp-e2e-%d", os.Getpid()), dir: filepath.Join(root, "compose"),
		env: []string{"LOCKHTTP_TAG=e2e", "LOCKHTTP_POLICY=" + filepath.Join(root, "compose", "test", "policy.toml"),
			"LOCKHTTP_TEST_ROOT=" + os.Getenv("LOCKHTTP_TEST_ROOT"), fmt.Sprintf("LOCKHTTP_HUB_PORT=%d", freePort(t))}}
	c.run("down", "-v")
	// Networks an interrupted run left behind hold the fixed subnets this one needs.
	if out, err := exec.Command("docker", "network", "ls", "-q", "--filter", "name=lockhttp-e2e-").Output(); err == nil {
		for _, id := range strings.Fields(string(out)) {
			exec.Command("docker", "network", "rm", id).Run() // refused while in use: left alone
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := c.run("logs", "--tail=30")
			t.Logf("logs:\n%s", out)
		}
		c.run("down", "-v", "--rmi", "all")
	})
	c.must("up", "-d")
	testkit.WaitFor(t, 90*time.Second, "the agent to reach the origin through the gate", func() bool {
		return strings.HasPrefix(c.agent("get", "http://origin.test/ready"), "status=200")
	})

	t.Run("a free request reaches the origin", func(t *testing.T) {
		for _, u := range []string{"http://origin.test/free", "https://origin.test/free"} {
			if out := c.agent("get", u); out != "status=200 code= ticket= body=origin saw GET /free (0 bytes)" {
				t.Errorf("%s: %s", u, out)
			}
		}
	})
	t.Run("the gate injects the key from its secrets volume, the agent holds a placeholder", func(t *testing.T) {
		// The volumes service created an empty secrets file: the gate loads it (the requests
		// above went through) and refuses only the host whose [[inject]] lacks its secret.
		if out := c.agent("key", "https://api.origin.test/key"); !strings.HasPrefix(out, "status=403 code=E_INJECT") {
			t.Fatalf("before the key is added: %s", out)
		}
		saw := func(v string) string {
			return fmt.Sprintf("status=200 code= ticket= body=origin saw x-api-key sha256:%x", sha256.Sum256([]byte(v)))
		}
		// docs/deploy.md, "Claude key": lockhttp secrets add in the volumes service, as the
		// gate's uid, the key on stdin.
		key := "sk-ant-api03-" + strings.Repeat("e2e", 20) + "-" + fmt.Sprint(os.Getpid())
		if out, err := c.runStdin(strings.NewReader(key+"\n"), "run", "--rm", "-T", "--user", "10003:10003", "volumes",
			"secrets", "add", "anthropic", "--secrets", "/vol/secrets/secrets.toml"); err != nil {
			t.Fatalf("lockhttp secrets add: %v\n%s", err, out)
		}
		testkit.WaitFor(t, 20*time.Second, "the gate to read the new secrets file (no restart)", func() bool {
			return c.agent("key", "https://api.origin.test/key") == saw(key)
		})
		// The documented alternative, a new key: the file copied into the volumes service's
		// container, then that service run again for the gate's owner and mode 0600.
		key2 := strings.Replace(key, "e2e", "two", 1)
		local := filepath.Join(t.TempDir(), "secrets.toml")
		os.WriteFile(local, []byte("version = 1\n\n[secrets]\nanthropic = \""+key2+"\"\n"), 0o600)
		vid := strings.TrimSpace(c.must("ps", "-q", "volumes"))
		if out, err := exec.Command("docker", "cp", local, vid+":/vol/secrets/secrets.toml").CombinedOutput(); err != nil {
			t.Fatalf("docker cp: %v\n%s", err, out)
		}
		c.must("run", "--rm", "volumes")
		testkit.WaitFor(t, 20*time.Second, "the gate to read the copied secrets file", func() bool {
			return c.agent("key", "https://api.origin.test/key") == saw(key2)
		})
		// What the agent sent: its placeholder, which goes unchanged to a host with no [[inject]].
		if out := c.agent("key", "https://origin.test/key"); out != saw("sk-ant-"+strings.Repeat("x", 64)) {
			t.Errorf("origin.test, which has no [[inject]]: %s", out)
		}
	})
	t.Run("a decrypted POST refused by a rule", func(t *testing.T) {
		if out := c.agent("post", "https://origin.test/api/items", "secret=1"); !strings.HasPrefix(out, "status=403 code=E_RULE") {
			t.Errorf("%s", out)
		}
	})
	t.Run("an ASK approved with lox approve in the console container", func(t *testing.T) {
		done := make(chan string, 1)
		go func() { done <- c.agent("delete", "https://origin.test/thing") }()
		var id string
		testkit.WaitFor(t, 20*time.Second, "the ticket", func() bool {
			out, err := c.lox("tickets")
			for _, line := range strings.Split(out, "\n") {
				if f := strings.Fields(line); err == nil && len(f) > 4 && f[3] == "DELETE" {
					id = f[0]
				}
			}
			return id != ""
		})
		if out, err := c.lox("approve", id); err != nil {
			t.Fatalf("lox approve: %v\n%s", err, out)
		}
		select {
		case out := <-done:
			if out != "status=200 code= ticket= body=origin saw DELETE /thing (0 bytes)" {
				t.Fatalf("after approval: %s", out)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the approved request did not reach the origin")
		}
	})
	t.Run("the agent has no route out", func(t *testing.T) {
		for _, probe := range [][]string{
			{"tcp", "172.30.20.10:80"}, // the origin, directly
			{"tcp", "172.30.20.10:443"},
			{"noproxy", "http://172.30.20.10/"}, // ignoring the proxy variables
			{"dns", "example.com"},              // an outside name
			{"tcp", "1.1.1.1:443"},
		} {
			if out := c.agent(probe...); !strings.HasPrefix(out, "failed:") {
				t.Errorf("%v: %s", probe, out)
			}
		}
	})
	t.Run("the gate container cannot read the CA key", func(t *testing.T) {
		ids := strings.TrimSpace(c.must("ps", "-q", "gate"))
		for _, p := range []string{"/vol/ca/ca-key.pem", "/vol/ca", "/run/lockhttp/ca-key.pem"} {
			out, err := exec.Command("docker", "cp", ids+":"+p, t.TempDir()).CombinedOutput()
			if err == nil {
				t.Errorf("%s is in the gate's filesystem", p)
			} else if !strings.Contains(string(out), "Could not find") {
				t.Errorf("docker cp %s: %s", p, out)
			}
		}
		// The signer's container has it: the check above can tell.
		sid := strings.TrimSpace(c.must("ps", "-q", "signer"))
		if out, err := exec.Command("docker", "cp", sid+":/vol/ca/ca-key.pem", t.TempDir()).CombinedOutput(); err != nil {
			t.Errorf("the signer's CA key is not where the check looks: %s", out)
		}
	})
	t.Run("lockhttp doctor --compose", func(t *testing.T) {
		out, code := runDoctor(t, "--compose", c.project, "--direct", "172.30.20.10:443")
		if code != 0 || strings.Contains(out, "ERROR ") {
			t.Fatalf("healthy setup: exit %d\n%s", code, out)
		}
		for _, l := range []struct{ level, check, want string }{
			{"OK", "ca-key", "owned by uid 10004 (the signer's)"},
			{"OK", "signer", "the gate reaches it"},
			{"OK", "signer", "a caller with uid 65534 is refused (the signer closed the connection)"},
			{"OK", "console", "serves /etc/lockhttp/policy.toml"},
			{"OK", "hub", "no ticket pending"},
			{"OK", "gate", "decides with the console's policy"},
			{"OK", "gate", `source "agent"`},
			{"OK", "ca", "a decrypted request through the gate succeeded"},
			{"OK", "audit", "being written"},
			{"OK", "agent-net", "direct egress fails"},
			{"OK", "agent-net", "direct IPv6 egress fails"},
			{"OK", "agent-net", "outside DNS fails"},
			{"OK", "compose", "agent network only, proxy set, trusts the CA through SSL_CERT_FILE"},
			// The test policy's floor exceptions, which map origin.test on the egress network.
			{"WARN", "policy", "allow_cidrs opens 172.30.20.0/24"},
			{"WARN", "policy", "maps origin.test to 172.30.20.10"},
		} {
			if !hasLine(out, l.level, l.check, l.want) {
				t.Errorf("no %s %s line with %q", l.level, l.check, l.want)
			}
		}
		if t.Failed() {
			t.Fatalf("doctor:\n%s", out)
		}
		t.Logf("doctor:\n%s", out)
		c.must("stop", "signer")
		out, code = runDoctor(t, "--compose", c.project)
		c.must("start", "signer")
		if code != 2 || !hasLine(out, "ERROR", "compose", "signer") || !hasLine(out, "ERROR", "signer", "") {
			t.Fatalf("a stopped signer: exit %d\n%s", code, out)
		}
		testkit.WaitFor(t, 30*time.Second, "decrypted requests again", func() bool {
			return strings.HasPrefix(c.agent("get", "https://origin.test/after-signer"), "status=200")
		})
	})
	t.Run("the console away: the gate keeps its policy, ASKs get E_NO_CONSOLE", func(t *testing.T) {
		c.must("stop", "console")
		testkit.WaitFor(t, 30*time.Second, "ASKs refused at once", func() bool {
			return strings.HasPrefix(c.agent("delete", "https://origin.test/while-away"), "status=403 code=E_NO_CONSOLE")
		})
		if out := c.agent("get", "https://origin.test/while-away"); !strings.HasPrefix(out, "status=200") {
			t.Errorf("a free request while the console is away: %s", out)
		}
		if out := c.agent("post", "https://origin.test/api/x", "y"); !strings.HasPrefix(out, "status=403 code=E_RULE") {
			t.Errorf("a deny rule while the console is away: %s", out)
		}
		c.must("start", "console")
		testkit.WaitFor(t, 60*time.Second, "the hub back", func() bool {
			out, err := c.lox("tickets", "--json")
			return err == nil && strings.HasPrefix(strings.TrimSpace(out), "[")
		})
		// The approved policy survived the restart.
		if out := c.agent("post", "https://origin.test/api/x", "y"); !strings.HasPrefix(out, "status=403 code=E_RULE") {
			t.Errorf("after the restart: %s", out)
		}
	})
}
