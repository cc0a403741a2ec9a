package e2e

import (
	"crypto/sha256"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

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

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// composeProject is the test deployment's COMPOSE_PROJECT_NAME: the test's own, never the
// documented "lockhttp" of a real deployment on this machine.
const composeProject = "lockhttp-e2e"

// The agent network's settings of the test deployment: not new-site.sh's defaults, set in .env
// before the first start as docs/deploy.md's Settings allow (the copied policy's [sources]
// follows them).
const (
	agentSubnet = "10.213.40.0/24"
	gateIP      = "10.213.40.254"
)

// deployment is docs/deploy.md followed from the top: a clean checkout in HOME/lockhttp, the
// deployment directory HOME/lockhttp-site, the doc's test blocks run in order by sh.
type deployment struct {
	t                    *testing.T
	home, checkout, site string
	env                  []string
	blocks               []docBlock
	next                 int
}

// step runs the doc's next test block, which must be name.
func (d *deployment) step(name string) string {
	d.t.Helper()
	if d.next >= len(d.blocks) || d.blocks[d.next].Name != name {
		d.t.Fatalf("the test runs %q next; docs/deploy.md's next test block is %+v", name, d.blocks[min(d.next, len(d.blocks)-1)])
	}
	b := d.blocks[d.next]
	d.next++
	began := time.Now()
	out, err := d.sh(b.Script)
	if err != nil {
		d.t.Fatalf("docs/deploy.md:%d, block %q failed: %v\n%s", b.Line, name, err, out)
	}
	d.t.Logf("docs/deploy.md:%d %q (%s):\n%s", b.Line, name, time.Since(began).Round(100*time.Millisecond), out)
	return out
}

func (d *deployment) sh(script string) (string, error) {
	cmd := exec.Command("sh", "-e", "-x", "-c", script)
	cmd.Dir, cmd.Env = d.home, d.env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// compose runs docker-compose in the deployment directory, as an operator there would.
func (d *deployment) compose(args ...string) (string, error) {
	cmd := exec.Command("docker-compose", args...)
	cmd.Dir, cmd.Env = d.site, d.env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (d *deployment) must(args ...string) string {
	d.t.Helper()
	out, err := d.compose(args...)
	if err != nil {
		d.t.Fatalf("docker-compose %v: %v\n%s", args, err, out)
	}
	return out
}

// agent runs the test agent's command inside the agent container.
func (d *deployment) agent(args ...string) string {
	out, _ := d.compose(append([]string{"exec", "-T", "agent", "/agent"}, args...)...)
	return strings.TrimSpace(out)
}

func (d *deployment) lox(args ...string) (string, error) {
	full := append([]string{"exec", "-T", "console", "/lox"}, args...)
	return d.compose(append(full, "--hub", "http://127.0.0.1:3131", "--hub-token", "/vol/console/cli.token")...) // inside the console's container
}

// doctor runs the doctor the doc built, on the deployment directory.
func (d *deployment) doctor() (string, int) {
	d.t.Helper()
	cmd := exec.Command(filepath.Join(d.checkout, "bin", "lockhttp"), "doctor", "--compose", d.site)
	cmd.Env = d.env
	out, err := cmd.CombinedOutput()
	if err != nil && cmd.ProcessState == nil {
		d.t.Fatal(err)
	}
	return string(out), cmd.ProcessState.ExitCode()
}

// doctorOK runs the doctor and wants no ERROR and each of the lines.
func (d *deployment) doctorOK(when string, lines ...[3]string) string {
	d.t.Helper()
	out, code := d.doctor()
	if code != 0 || strings.Contains(out, "ERROR ") {
		d.t.Fatalf("doctor %s: exit %d\n%s", when, code, out)
	}
	for _, l := range lines {
		if !hasLine(out, l[0], l[1], l[2]) {
			d.t.Errorf("doctor %s: no %s %s line with %q", when, l[0], l[1], l[2])
		}
	}
	if d.t.Failed() {
		d.t.Fatalf("doctor %s:\n%s", when, out)
	}
	return out
}

// setEnv changes one line of the deployment's .env, as an operator edits it.
func (d *deployment) setEnv(key, value string) {
	d.t.Helper()
	p := filepath.Join(d.site, ".env")
	data, err := os.ReadFile(p)
	if err != nil {
		d.t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(key) + `=.*$`)
	if !re.Match(data) {
		d.t.Fatalf(".env has no %s line:\n%s", key, data)
	}
	os.WriteFile(p, re.ReplaceAll(data, []byte(key+"="+value)), 0o644)
}

// writeAtomic writes a new file and renames it over path, as editors and git do.
func writeAtomic(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// copyCheckout copies the repository's files (tracked, and new ones not ignored) to dir: a clean
// checkout, with no .env, bin/ or state of a previous run.
func copyCheckout(t *testing.T, root, dir string) {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		src := filepath.Join(root, f)
		fi, err := os.Lstat(src)
		if err != nil || !fi.Mode().IsRegular() {
			continue // deleted in the work tree, or a link
		}
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, f)
		os.MkdirAll(filepath.Dir(dst), 0o755)
		if err := os.WriteFile(dst, data, fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
}

// testEnv is the environment of the doc's commands: this one with HOME moved, Go's caches kept,
// and no setting of the deployment (the shell's variables would override .env).
func testEnv(t *testing.T, home string) []string {
	t.Helper()
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "HOME" || strings.HasPrefix(k, "LOCKHTTP_") || strings.HasPrefix(k, "COMPOSE_") || strings.HasPrefix(k, "AGENT_") || strings.HasPrefix(k, "DOCKER_") && k != "DOCKER_HOST" {
			continue
		}
		env = append(env, kv)
	}
	for _, k := range []string{"GOPATH", "GOMODCACHE", "GOCACHE"} {
		out, err := exec.Command("go", "env", k).Output()
		if err != nil {
			t.Fatal(err)
		}
		env = append(env, k+"="+strings.TrimSpace(string(out)))
	}
	return append(env, "HOME="+home)
}

// lockhttpImages are the images the doc's builds tag; keepImages puts back the ones this machine
// had before the test and removes the others.
var lockhttpImages = []string{"lockhttp-gate", "lockhttp-signer", "lockhttp-console", "lockhttp-tools"}

func keepImages(t *testing.T, names []string) {
	t.Helper()
	had := map[string]string{}
	for _, n := range names {
		if out, err := exec.Command("docker", "image", "inspect", "-f", "{{.Id}}", n).Output(); err == nil {
			had[n] = strings.TrimSpace(string(out))
		}
	}
	t.Cleanup(func() {
		for _, n := range names {
			if id := had[n]; id != "" {
				exec.Command("docker", "tag", id, n).Run()
			} else {
				exec.Command("docker", "rmi", "-f", n).Run()
			}
		}
	})
}

// removeProject removes what an interrupted run of this test left: the test's project only.
func removeProject(project string) {
	label := "label=com.docker.compose.project=" + project
	for _, kind := range [][]string{{"ps", "-aq"}, {"network", "ls", "-q"}, {"volume", "ls", "-q"}} {
		out, _ := exec.Command("docker", append(kind, "--filter", label)...).Output()
		ids := strings.Fields(string(out))
		if len(ids) == 0 {
			continue
		}
		switch kind[0] {
		case "ps":
			exec.Command("docker", append([]string{"rm", "-f", "-v"}, ids...)...).Run()
		default:
			exec.Command("docker", append([]string{kind[0], "rm"}, ids...)...).Run()
		}
	}
}

// TestComposeDeployment follows docs/deploy.md from the top on a clean checkout: it runs the
// doc's test blocks in order (a block that fails fails the test), adding only what the doc tells
// operators to add for their own: an origin playing the internet (a service in a compose file of
// COMPOSE_FILE, its root in gate/, its hosts in the policy) and an agent (its Dockerfile in
// ~/my-agent). Between the blocks it checks what an operator would: the agent's requests, the
// phone page in a browser through the published port, the review at the console's terminal,
// the doctor at each step, OK, and ERROR when the phone port or a secret is broken.
func TestComposeDeployment(t *testing.T) {
	requireDocker(t)
	tmux := requireTool(t, "tmux")
	browser := chromium(t)
	root, _ := filepath.Abs("../..")
	blocks, err := readDocBlocks(filepath.Join(root, "docs", "deploy.md"))
	if err != nil {
		t.Fatal(err)
	}
	home, err := os.MkdirTemp("", "lockhttp-e2e-home-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	d := &deployment{t: t, home: home, checkout: filepath.Join(home, "lockhttp"), site: filepath.Join(home, "lockhttp-site"),
		env: testEnv(t, home), blocks: blocks}
	copyCheckout(t, root, d.checkout)
	keepImages(t, append(tagged(lockhttpImages, "latest", "v2"), "lockhttp-agent:local", "lockhttp-testorigin:local", "prometheus-local:latest"))
	removeProject(composeProject)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := d.compose("logs", "--tail=40")
			t.Logf("logs:\n%s", out)
		}
		if _, err := os.Stat(filepath.Join(d.site, ".env")); err == nil {
			d.compose("down", "-v")
			// The doc's firewall rules, for the test's subnet, gone with the deployment.
			cmd := exec.Command(filepath.Join(d.checkout, "compose", "firewall.sh"), "--delete")
			cmd.Dir = d.site
			cmd.Run()
		}
		removeProject(composeProject)
	})

	// What the operator has before starting: a private CA's root for origins (the roots block),
	// and an agent's Dockerfile. The internet is the doc's local origin (test-origin).
	pki := newTestPKI(t)
	os.WriteFile(filepath.Join(home, "corp-root.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: pki.root.Raw}), 0o644)
	agentDir := filepath.Join(home, "my-agent")
	os.MkdirAll(agentDir, 0o755)
	cmd := exec.Command("go", "build", "-o", agentDir+"/", "./compose/test/agent")
	cmd.Dir, cmd.Env = root, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the test agent: %v\n%s", err, out)
	}
	data, _ := os.ReadFile(filepath.Join(root, "compose", "test", "Dockerfile.agent"))
	os.WriteFile(filepath.Join(agentDir, "Dockerfile"), data, 0o644)

	start := time.Now()
	d.step("build")
	// Before the first start, as the doc's Settings say: the project's name (the test's own), and
	// the agent network's subnet with the gate's address in it (not the defaults).
	d.setEnv("COMPOSE_PROJECT_NAME", composeProject)
	d.setEnv("LOCKHTTP_AGENT_SUBNET", agentSubnet)
	d.setEnv("LOCKHTTP_GATE_IP", gateIP)
	if os.Geteuid() != 0 {
		t.Fatal("the firewall block needs root (iptables)")
	}
	d.step("firewall")

	d.step("first-start")
	pol := filepath.Join(d.site, "policy", "policy.toml")
	if data, err := os.ReadFile(pol); err != nil || !strings.Contains(string(data), "[sources]") || !strings.Contains(string(data), `agent = ["`+agentSubnet+`"]`) {
		t.Fatalf("the first start did not copy the shipped policy into policy/, its [sources] naming %s: %v\n%s", agentSubnet, err, data)
	}
	d.doctorOK("after the first start",
		[3]string{"OK", "phone", "the phone page answers at http://127.0.0.1:3139/phone/ (published on 127.0.0.1:3139)"},
		[3]string{"OK", "phone", "pairing links name http://127.0.0.1:3139, which answers"},
		[3]string{"OK", "policy-file", pol + " on this machine is the policy the console serves"},
		[3]string{"OK", "gate", "decides with the console's policy"},
		[3]string{"OK", "gate", `answers through http://gate:3130: source "agent"`},
		[3]string{"OK", "isolation", "agents cannot reach each other: inter-container traffic is off on " + composeProject + "_agent"})
	t.Run("every service bounded; every binary names its build", func(t *testing.T) {
		for _, svc := range []string{"volumes", "signer", "console", "gate"} {
			id := strings.TrimSpace(d.must("ps", "-q", svc))
			out, _ := exec.Command("docker", "inspect", "-f", "{{.HostConfig.Memory}} {{.HostConfig.PidsLimit}} {{index .HostConfig.LogConfig.Config \"max-size\"}}", id).Output()
			f := strings.Fields(string(out))
			if len(f) != 3 || f[0] == "0" || f[1] == "0" || f[1] == "<nil>" || f[2] != "10m" {
				t.Errorf("%s: memory, pids and log size %q", svc, out)
			}
		}
		// The checkout is a copy without git: build.sh stamps a hash of its sources.
		for _, img := range []string{"lockhttp-gate:latest", "lockhttp-signer:latest", "lockhttp-tools:latest"} {
			out, err := exec.Command("docker", "run", "--rm", img, "--version").CombinedOutput()
			if err != nil || !strings.Contains(string(out), ", build tree-") {
				t.Errorf("%s --version: %v %s", img, err, out)
			}
		}
	})

	d.step("roots")
	d.step("agent")
	// The agent's service names the gate as its DNS server (dns:): every outside name is
	// answered with the gate's address, and nothing is resolved for the agent.
	testkit.WaitFor(t, 60*time.Second, "the agent container, its names answered by the gate", func() bool {
		return d.agent("dns", "example.com") == "resolved: ["+gateIP+"]"
	})
	d.dockerRun(tmux)
	d.step("test-origin")
	t.Run("the agent has no route out", func(t *testing.T) {
		probes := [][]string{
			{"tcp", "10.213.20.10:80"}, // the origin, directly
			{"tcp", "10.213.20.10:443"},
			{"noproxy", "http://10.213.20.10/canary"}, // ignoring the proxy variables, by address
			{"tcp", "1.1.1.1:443"},
		}
		outs := make(chan [2]string, len(probes))
		for _, probe := range probes { // at once: each waits for its timeout
			go func() { outs <- [2]string{strings.Join(probe, " "), d.agent(probe...)} }()
		}
		for range probes {
			if o := <-outs; !strings.HasPrefix(o[1], "failed:") {
				t.Errorf("%s: %s", o[0], o[1])
			}
		}
	})
	t.Run("metrics on the hub network only", func(t *testing.T) { d.metricsOnHubOnly(t) })
	t.Run("the gate container cannot read the CA key", func(t *testing.T) {
		gid := strings.TrimSpace(d.must("ps", "-q", "gate"))
		for _, p := range []string{"/vol/ca/ca-key.pem", "/vol/ca", "/run/lockhttp/ca-key.pem"} {
			out, err := exec.Command("docker", "cp", gid+":"+p, t.TempDir()).CombinedOutput()
			if err == nil {
				t.Errorf("%s is in the gate's filesystem", p)
			} else if !strings.Contains(string(out), "Could not find") {
				t.Errorf("docker cp %s: %s", p, out)
			}
		}
		sid := strings.TrimSpace(d.must("ps", "-q", "signer"))
		if out, err := exec.Command("docker", "cp", sid+":/vol/ca/ca-key.pem", t.TempDir()).CombinedOutput(); err != nil {
			t.Errorf("the signer's CA key is not where the check looks: %s", out)
		}
	})

	// The operator's policy edit for their origin (sed -i and an editor's write-and-rename: both
	// replace the file), then the doc's inject rule: loosenings, which wait for review. [sources]
	// split as "Agents apart" says: two agents with fixed addresses and rules of their own.
	if out, err := exec.Command("sed", "-i", `s/^trusted = \[/trusted = ["origin.test", "api.anthropic.com",/`, pol).CombinedOutput(); err != nil {
		t.Fatalf("sed -i: %v %s", err, out)
	}
	data, _ = os.ReadFile(pol)
	data = []byte(strings.Replace(string(data), `agent = ["`+agentSubnet+`"]`, `agent = ["10.213.40.0/25"]
a = ["10.213.40.200/32"]
b = ["10.213.40.201/32"]`, 1))
	writeAtomic(t, pol, append(data, []byte(`
# Container b's posts to /scoped are free; a's are asked about (no rule: origin.test is trusted
# for reads only).
[[rule]]
name = "b-scoped-posts"
hosts = ["origin.test"]
methods = ["POST"]
paths = ["/scoped/**"]
verdict = "free"
containers = ["b"]

# The test's origin, playing the internet (api.anthropic.com is mapped to it too).
[[rule]]
name = "no-api-posts"
hosts = ["origin.test"]
methods = ["POST"]
paths = ["/api/**"]
verdict = "deny"

[[rule]]
name = "ask-deletes"
hosts = ["origin.test"]
methods = ["DELETE"]
verdict = "ask"

[floor]
allow_cidrs = ["10.213.20.0/24"]

[floor.hosts]
"origin.test" = "10.213.20.10"
"api.anthropic.com" = "10.213.20.10"
`)...))
	d.step("policy-edit")
	testkit.WaitFor(t, 30*time.Second, "the doctor to see the edit waiting for review", func() bool {
		out, code := d.doctor()
		return code == 0 && hasLine(out, "WARN", "policy-file", "loosens the served policy") && hasLine(out, "WARN", "policy-file", "waits for review")
	})

	key := "sk-ant-api03-" + strings.Repeat("e2e", 20) + "-" + fmt.Sprint(os.Getpid())
	saw := func(v string) string {
		return fmt.Sprintf("status=200 code= ticket= body=origin saw x-api-key sha256:%x", sha256.Sum256([]byte(v)))
	}
	os.WriteFile(filepath.Join(d.site, "anthropic.key"), []byte(key+"\n"), 0o600)
	d.step("secret")
	if _, err := os.Stat(filepath.Join(d.site, "anthropic.key")); err == nil {
		t.Error("the key file is still there after the doc's shred -u")
	}
	// The doc's other way in: a whole secrets file, holding the same key.
	os.WriteFile(filepath.Join(d.site, "secrets.toml"), []byte("version = 1\n\n[secrets]\nanthropic = \""+key+"\"\n"), 0o600)
	d.step("secrets-file")
	if _, err := os.Stat(filepath.Join(d.site, "secrets.toml")); err == nil {
		t.Error("secrets.toml is still there after the doc's shred -u")
	}

	// The review, at the console's terminal: docker attach in a real terminal (tmux).
	d.review(tmux)
	testkit.WaitFor(t, 20*time.Second, "the approved policy to reach the gate", func() bool {
		return d.agent("get", "https://origin.test/free") == "status=200 code= ticket= body=origin saw GET /free (0 bytes)"
	})
	if out := d.agent("key", "https://api.anthropic.com/key"); out != saw(key) {
		t.Fatalf("the injected key: %s", out)
	}
	if out := d.agent("key", "https://origin.test/key"); out != saw("sk-ant-"+strings.Repeat("x", 64)) {
		t.Errorf("origin.test, which has no [[inject]], got the placeholder's: %s", out)
	}
	if out := d.agent("post", "https://origin.test/api/items", "secret=1"); !strings.HasPrefix(out, "status=403 code=E_RULE") {
		t.Errorf("a decrypted POST refused by a rule: %s", out)
	}
	t.Run("clients that ignore the proxy are decided by the gate", func(t *testing.T) {
		// By name, through the container's resolver (docker's, which forwards to the gate's
		// DNS): the gate decides each request by its TLS server name or Host.
		if out := d.agent("noproxy", "https://origin.test/direct-tls"); out != "status=200 code= ticket= body=origin saw GET /direct-tls (0 bytes)" {
			t.Errorf("HTTPS ignoring the proxy: %s", out)
		}
		if out := d.agent("noproxy", "http://origin.test/direct-plain"); out != "status=200 code= ticket= body=origin saw GET /direct-plain (0 bytes)" {
			t.Errorf("HTTP ignoring the proxy: %s", out)
		}
		if out := d.agent("noproxy", "https://origin.test/api/items", "POST", "secret=1"); !strings.HasPrefix(out, "status=403 code=E_RULE") {
			t.Errorf("a POST a rule refuses, ignoring the proxy: %s", out)
		}
		if out := d.agent("noproxy", "http://10.213.20.10/canary"); !strings.HasPrefix(out, "failed:") {
			t.Errorf("the origin by its address, ignoring the proxy: %s", out)
		}
		// The canary: every request the origin saw came from the gate, none from the agent.
		gid := strings.TrimSpace(d.must("ps", "-q", "gate"))
		egress, err := exec.Command("docker", "inspect", "-f", `{{(index .NetworkSettings.Networks "`+composeProject+`_internet").IPAddress}}`, gid).Output()
		if err != nil || strings.TrimSpace(string(egress)) == "" {
			t.Fatalf("the gate's address on the origin's network: %v %s", err, egress)
		}
		hits := 0
		for _, line := range strings.Split(d.must("logs", "--no-color", "origin"), "\n") {
			_, hit, ok := strings.Cut(line, " hit ")
			if !ok {
				continue
			}
			hits++
			f := strings.Fields(hit)
			if len(f) < 3 || f[0] != strings.TrimSpace(string(egress)) || f[2] == "/canary" {
				t.Errorf("a direct hit on the origin: %s", line)
			}
		}
		if hits == 0 {
			t.Error("the origin logged no hit")
		}
		// The records: the TLS connection decided as a CONNECT to its server name, the request
		// inside by its Host, each marked transparent; no agent name.
		dir := t.TempDir()
		if out, err := exec.Command("docker", "cp", gid+":/vol/audit", dir).CombinedOutput(); err != nil {
			t.Fatalf("docker cp the audit: %v %s", err, out)
		}
		var recs []string
		files, _ := filepath.Glob(filepath.Join(dir, "audit", "*.jsonl"))
		for _, f := range files {
			data, _ := os.ReadFile(f)
			recs = append(recs, strings.Split(string(data), "\n")...)
		}
		for _, want := range [][]string{
			{`"event":"transparent-connect"`, `"url":"origin.test:443"`, `"verdict":"FREE"`},
			{`"event":"transparent-tunnel-request"`, `"url":"https://origin.test:443/direct-tls"`, `"verdict":"FREE"`, `"rule":"trusted"`},
			{`"event":"transparent-request"`, `"url":"http://origin.test/direct-plain"`, `"verdict":"FREE"`},
			{`"event":"transparent-tunnel-request"`, `"url":"https://origin.test:443/api/items"`, `"verdict":"DENY"`, `"rule":"no-api-posts"`},
			{`"event":"dns"`, `"method":"A"`, `"url":"origin.test"`, `"detail":"answered A ` + gateIP + `"`},
		} {
			found := false
			for _, r := range recs {
				all := !strings.Contains(r, `"agent":`)
				for _, w := range want {
					all = all && strings.Contains(r, w)
				}
				found = found || all
			}
			if !found {
				t.Errorf("no record with %v", want)
			}
		}
	})
	d.doctorOK("after the review",
		[3]string{"OK", "console", "approved by terminal:" + operator(t)},
		[3]string{"OK", "agent-net", "outside names are answered by the gate with its own address (example.com → " + gateIP + ")"},
		[3]string{"OK", "agent-net", "a client that ignores the proxy is decided by the gate: http://lockhttp.internal/ by name"},
		[3]string{"OK", "agent-net", "direct IPv6 egress fails"},
		[3]string{"OK", "policy-file", "is the policy the console serves"},
		[3]string{"OK", "secrets", `inject "anthropic": its secret "anthropic" loads from /vol/secrets/secrets.toml`},
		[3]string{"WARN", "policy", "allow_cidrs opens 10.213.20.0/24"},
		[3]string{"OK", "compose", "agent network only, proxy set, trusts the CA through"})

	t.Run("a broken secret: the doctor says ERROR and names the fix", func(t *testing.T) {
		// The doc's other way in again, with a file that lacks the key.
		os.WriteFile(filepath.Join(d.site, "secrets.toml"), []byte("version = 1\n\n[secrets]\nother = \"not-the-anthropic-key-0123456789\"\n"), 0o600)
		if out, err := d.sh(d.blockScript("secrets-file")); err != nil {
			t.Fatalf("the secrets-file block again: %v\n%s", err, out)
		}
		testkit.WaitFor(t, 20*time.Second, "the gate to read the file", func() bool {
			return strings.HasPrefix(d.agent("key", "https://api.anthropic.com/key"), "status=403 code=E_INJECT")
		})
		out, code := d.doctor()
		if code != 2 || !hasLine(out, "ERROR", "secrets", `inject "anthropic": its secret "anthropic" is not in /vol/secrets/secrets.toml`) ||
			!strings.Contains(out, "volumes secrets add anthropic") {
			t.Fatalf("a missing secret: exit %d\n%s", code, out)
		}
		if strings.Contains(out, key) {
			t.Fatal("the doctor printed the key")
		}
		// The fix: step 2 of "Claude key" again.
		os.WriteFile(filepath.Join(d.site, "anthropic.key"), []byte(key+"\n"), 0o600)
		if out, err := d.sh(d.blockScript("secret")); err != nil {
			t.Fatalf("the secret block again: %v\n%s", err, out)
		}
		testkit.WaitFor(t, 20*time.Second, "the key back", func() bool { return d.agent("key", "https://api.anthropic.com/key") == saw(key) })
	})

	d.step("lox")
	t.Run("two agents apart: neither reaches nor poses as the other; a rule scoped to one", func(t *testing.T) { d.twoAgents(t) })
	t.Run("agents with what they must not have: the doctor says ERROR for each", func(t *testing.T) { d.badAgents(t) })

	out := d.step("pair")
	d.pairAndApprove(browser, out)

	d.step("prometheus")
	testkit.WaitFor(t, 90*time.Second, "Prometheus built here scraping the gate and the console", func() bool {
		out, err := exec.Command("curl", "-s", "--noproxy", "*", "http://127.0.0.1:9090/api/v1/targets").Output()
		return err == nil && strings.Count(string(out), `"health":"up"`) == 2
	})

	// This machine's ports, TCP and UDP, open to agents once the firewall's INPUT rule is gone;
	// the doc's block puts it back.
	if out, err := exec.Command("iptables", "-D", "INPUT", "-s", agentSubnet, "-j", "DROP").CombinedOutput(); err != nil {
		t.Fatalf("iptables -D: %v %s", err, out)
	}
	l, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ul, err := net.ListenPacket("udp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ul.Close()
	udpPort := fmt.Sprint(ul.LocalAddr().(*net.UDPAddr).Port)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	hostPort := fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
	out = d.doctorOK("with a port open on every address", [3]string{"WARN", "agent-net", "agents reach port " + hostPort + " of this machine at"},
		[3]string{"WARN", "agent-net", "agents reach UDP port " + udpPort + " of this machine at"})
	if !hasLine(out, "WARN", "agent-net", "compose/firewall.sh") || !hasLine(out, "WARN", "agent-net", "iptables -I INPUT -s "+agentSubnet+" -j DROP") {
		t.Errorf("the WARN does not name the doc's rule:\n%s", out)
	}
	if fw, err := d.sh(d.blockScript("firewall")); err != nil || !strings.Contains(fw, "added:   iptables -I INPUT -s "+agentSubnet+" -j DROP") {
		t.Fatalf("the firewall block again: %v\n%s", err, fw)
	}
	out = d.doctorOK("after the firewall rule", [3]string{"OK", "agent-net", "agents reach none of this machine's listening ports"},
		[3]string{"OK", "agent-net", "UDP from the agent network reaches nothing"})
	if strings.Contains(out, "agents reach port "+hostPort) || strings.Contains(out, "UDP port "+udpPort) {
		t.Errorf("the ports are still reached after the rule:\n%s", out)
	}
	if got := d.agent("get", "https://origin.test/after-the-firewall"); !strings.HasPrefix(got, "status=200") {
		t.Errorf("the gate through the firewall rule: %s", got)
	}

	if out := d.step("verify-log"); !strings.Contains(out, "CLEAN: ") || strings.Contains(out, "TAMPERED") {
		t.Errorf("verify-log:\n%s", out)
	}

	t.Run("a dead pairing link: the doctor says ERROR and names the fix", func(t *testing.T) {
		// The hub's port moved and the phone URL not: every pairing link is dead.
		port := freePort(t)
		d.setEnv("LOCKHTTP_HUB_PORT", fmt.Sprint(port))
		d.must("up", "-d")
		out, code := d.doctor()
		if code != 2 || !hasLine(out, "ERROR", "phone", "pairing links name http://127.0.0.1:3139, which does not answer from this machine") ||
			!hasLine(out, "OK", "phone", fmt.Sprintf("the phone page answers at http://127.0.0.1:%d/phone/", port)) {
			t.Fatalf("a moved port: exit %d\n%s", code, out)
		}
		// The fix: the setting back; the doc's restart, next, applies it (and the doctor there
		// says OK).
		d.setEnv("LOCKHTTP_HUB_PORT", "3139")
	})

	// A full restart: the state is kept, and the gate decides as soon as up -d returns.
	caBefore := d.caSHA()
	d.step("restart")
	if out := d.agent("key", "https://api.anthropic.com/key"); out != saw(key) {
		t.Errorf("the first request after the restart: %s", out)
	}
	if got := d.caSHA(); got != caBefore {
		t.Errorf("the CA changed across the restart: %s → %s", caBefore, got)
	}
	d.doctorOK("after the restart", [3]string{"OK", "policy-file", "is the policy the console serves"},
		[3]string{"OK", "phone", "pairing links name http://127.0.0.1:3139, which answers"})

	// The upgrade: a new tag in .env; the settings (the roots, the port, the agent, the origin's
	// file) and the state stay.
	d.step("upgrade")
	for _, svc := range []string{"signer", "console", "gate", "volumes"} {
		id := strings.TrimSpace(d.must("ps", "-q", svc))
		img, _ := exec.Command("docker", "inspect", "-f", "{{.Config.Image}}", id).Output()
		if !strings.HasSuffix(strings.TrimSpace(string(img)), ":v2") {
			t.Errorf("%s runs %s after the upgrade", svc, img)
		}
	}
	if out := d.agent("key", "https://api.anthropic.com/key"); out != saw(key) {
		t.Errorf("after the upgrade (roots, policy, secret): %s", out)
	}
	if got := d.caSHA(); got != caBefore {
		t.Errorf("the CA changed across the upgrade: %s → %s", caBefore, got)
	}
	t.Run("a service killed by hand, one that crashes: the doctor says so", func(t *testing.T) { d.serviceDown(t) })

	t.Run("the console away: the gate keeps its policy, ASKs get E_NO_CONSOLE", func(t *testing.T) {
		d.must("stop", "console")
		testkit.WaitFor(t, 30*time.Second, "ASKs refused at once", func() bool {
			return strings.HasPrefix(d.agent("delete", "https://origin.test/while-away"), "status=403 code=E_NO_CONSOLE")
		})
		if out := d.agent("post", "https://origin.test/api/x", "y"); !strings.HasPrefix(out, "status=403 code=E_RULE") {
			t.Errorf("a deny rule while the console is away: %s", out)
		}
		d.must("up", "-d")
		testkit.WaitFor(t, 60*time.Second, "the hub back", func() bool {
			out, err := d.lox("tickets", "--json")
			return err == nil && strings.HasPrefix(strings.TrimSpace(out), "[")
		})
	})

	// Back up, lose everything (the volumes with the containers), restore from the deployment
	// directory, as the doc says.
	hubKeyBefore := d.fileSHA("gate", "/vol/hub/hub-key.pem.pub")
	d.step("backup")
	d.must("down", "-v")
	if out, err := exec.Command("docker", "volume", "ls", "-q", "--filter", "name="+composeProject+"_ca").Output(); err != nil || strings.Contains(string(out), composeProject+"_ca\n") {
		t.Fatalf("the ca volume is still there after down -v: %s %v", out, err)
	}
	out = d.step("restore")
	if got := d.caSHA(); got != caBefore {
		t.Errorf("the restored CA is not the backed-up one: %s → %s", caBefore, got)
	}
	if got := d.fileSHA("gate", "/vol/hub/hub-key.pem.pub"); got != hubKeyBefore {
		t.Errorf("the hub's key changed across the restore: %s → %s", hubKeyBefore, got)
	}
	if got := d.agent("key", "https://api.anthropic.com/key"); got != saw(key) {
		t.Errorf("after the restore (approved policy, secret, roots): %s", got)
	}
	for _, want := range [][3]string{{"OK", "console", "approved by terminal:" + operator(t)}, {"OK", "ca-key", "mode 0600, owned by uid 10004"},
		{"OK", "audit", "being written"}, {"OK", "secrets", `inject "anthropic": its secret "anthropic" loads`}} {
		if !hasLine(out, want[0], want[1], want[2]) {
			t.Errorf("the restore's doctor has no %s %s %q:\n%s", want[0], want[1], want[2], out)
		}
	}
	if out, err := d.sh(d.blockScript("verify-log")); err != nil || !strings.Contains(out, "CLEAN: ") {
		t.Errorf("the restored audit, written on: %v\n%s", err, out)
	}

	// Replacing the CA on purpose: a new CA, the old one kept aside, agents trusting the new one.
	d.step("replace-ca")
	caAfter := d.caSHA()
	if caAfter == caBefore {
		t.Error("the CA is the same after replace-ca")
	}
	old, err := os.ReadFile(filepath.Join(d.site, "old-ca", "ca.pem"))
	if err != nil || fmt.Sprintf("%x", sha256.Sum256(old)) != caBefore {
		t.Errorf("old-ca/ca.pem is not the old CA: %v", err)
	}
	testkit.WaitFor(t, 30*time.Second, "a decrypted request trusting the new ca.pem", func() bool {
		return d.agent("get", "https://origin.test/new-ca") == "status=200 code= ticket= body=origin saw GET /new-ca (0 bytes)"
	})
	if d.next != len(d.blocks) {
		t.Errorf("docs/deploy.md's test blocks from %q on were not run", d.blocks[d.next].Name)
	}
	t.Logf("the deployment, followed from the doc, in %s", time.Since(start).Round(time.Second))
}

// operator is the name compose/new-site.sh wrote in LOCKHTTP_OPERATOR: id -un of the test.
func operator(t *testing.T) string {
	out, err := exec.Command("id", "-un").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// fileSHA is the sha256 of a file in a service's container.
func (d *deployment) fileSHA(svc, path string) string {
	d.t.Helper()
	id := strings.TrimSpace(d.must("ps", "-q", svc))
	dir := d.t.TempDir()
	if out, err := exec.Command("docker", "cp", id+":"+path, dir).CombinedOutput(); err != nil {
		d.t.Fatalf("docker cp %s: %v %s", path, err, out)
	}
	data, _ := os.ReadFile(filepath.Join(dir, filepath.Base(path)))
	return fmt.Sprintf("%x", sha256.Sum256(data))
}

// dockerRun runs the doc's plain docker run agent in a terminal (tmux), as an operator would:
// it joins the agent network with the hardening the doc gives it, and the doctor finds it, OK,
// apart from the compose agent; Ctrl-C ends it.
func (d *deployment) dockerRun(tmux string) {
	t := d.t
	t.Helper()
	b := d.blocks[d.next]
	if b.Name != "docker-run" {
		t.Fatalf("the test runs \"docker-run\" next; docs/deploy.md's next test block is %q", b.Name)
	}
	d.next++
	session := fmt.Sprintf("lockhttp-e2e-run-%d", os.Getpid())
	script := fmt.Sprintf("cd %s && exec env -i %s sh -e -c %s", shellQuote(d.home), strings.Join(quoteAll(d.env), " "), shellQuote(b.Script))
	newTmuxSession(t, tmux, session, "200x50", script)
	defer exec.Command(tmux, "kill-session", "-t", session).Run()
	running := func() []string {
		out, _ := exec.Command("docker", "ps", "-q", "--filter", "network="+composeProject+"_agent", "--filter", "ancestor=lockhttp-agent:local").Output()
		return strings.Fields(string(out))
	}
	testkit.WaitFor(t, 60*time.Second, "the docker run agent on the agent network", func() bool { return len(running()) == 2 })
	out := d.doctorOK("with a docker run agent", [3]string{"OK", "isolation", "(2 tried from the agent network, none answered)"},
		[3]string{"OK", "isolation", "no agent can send with another's address"})
	if n := strings.Count(out, "agent network only, proxy set, trusts the CA through"); n != 2 {
		t.Errorf("%d agents OK, want 2:\n%s", n, out)
	}
	exec.Command(tmux, "send-keys", "-t", session, "C-c").Run()
	testkit.WaitFor(t, 30*time.Second, "Ctrl-C to end the docker run agent", func() bool { return len(running()) == 1 })
}

// agentService is a service of the test's agent image with agent.example.yaml's settings;
// extra are more lines of the service, volumes more volumes than the CA's.
func agentService(name, extra string, volumes ...string) string {
	return `  ` + name + `:
    image: lockhttp-agent:local
    dns: ["` + gateIP + `"]
    environment:
      HTTP_PROXY: "http://` + name + `:x@gate:3130"
      HTTPS_PROXY: "http://` + name + `:x@gate:3130"
      SSL_CERT_FILE: /etc/lockhttp/ca.pem
    volumes: ["ca-public:/etc/lockhttp:ro"` + strings.Join(quoteYAML(volumes), "") + `]
` + extra
}

func quoteYAML(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = `, "` + s + `"`
	}
	return out
}

// withServices adds a compose file of the operator's to COMPOSE_FILE and starts its services;
// the returned function stops and removes them and the file.
func (d *deployment) withServices(name, yaml string, services ...string) func() {
	d.t.Helper()
	p := filepath.Join(d.site, name)
	os.WriteFile(p, []byte(yaml), 0o644)
	before := d.envValue("COMPOSE_FILE")
	d.setEnv("COMPOSE_FILE", before+":"+p)
	d.must(append([]string{"up", "-d"}, services...)...)
	return func() {
		d.must(append([]string{"rm", "-sf"}, services...)...)
		d.setEnv("COMPOSE_FILE", before)
	}
}

// twoAgents: two agents at fixed addresses, hardened as agent.example.yaml, one of them root:
// neither reaches the other's port (inter-container traffic off), neither sends with the other's
// address (no NET_RAW; the kernel refuses another address), the gate tells them apart ([sources]
// splits the subnet): a rule scoped to b frees b's post and asks about a's, which lox approves
// under the operator's name. The doctor says they are apart.
func (d *deployment) twoAgents(t *testing.T) {
	hardening := `    cap_drop: [ALL]
    security_opt: ["no-new-privileges:true"]
    read_only: true
    mem_limit: 256m
    pids_limit: 64
`
	done := d.withServices("two-agents.yaml", `version: "3.8"
services:
`+agentService("a", `    command: ["listen", "8080"]
    networks: {agent: {ipv4_address: 10.213.40.200}}
`+hardening)+agentService("b", `    user: "0:0"
    command: ["listen", "8080"]
    networks: {agent: {ipv4_address: 10.213.40.201}}
`+hardening), "a", "b")
	defer done()
	in := func(svc string, args ...string) string {
		out, _ := d.compose(append([]string{"exec", "-T", svc, "/agent"}, args...)...)
		return strings.TrimSpace(out)
	}
	testkit.WaitFor(t, 30*time.Second, "a and b through the gate", func() bool {
		return strings.HasPrefix(in("a", "get", "https://origin.test/a"), "status=200") && strings.HasPrefix(in("b", "get", "https://origin.test/b"), "status=200")
	})
	for _, p := range [][3]string{{"a", "10.213.40.201:8080"}, {"b", "10.213.40.200:8080"}} {
		if out := in(p[0], "tcp", p[1]); !strings.HasPrefix(out, "failed:") {
			t.Errorf("%s reaches %s: %s", p[0], p[1], out)
		}
	}
	// b is root in its container: no raw socket, no sending from a's address.
	if out := in("b", "spoof", "10.213.40.200", gateIP+":3130"); !strings.HasPrefix(out, "failed: raw socket: operation not permitted; from 10.213.40.200:") {
		t.Errorf("b as a: %s", out)
	}
	if out := in("b", "post", "https://origin.test/scoped/x", "from-b"); out != "status=200 code= ticket= body=origin saw POST /scoped/x (6 bytes)" {
		t.Errorf("b's post, freed by the rule scoped to b: %s", out)
	}
	held := make(chan string, 1)
	go func() { held <- in("a", "post", "https://origin.test/scoped/x", "from-a") }()
	var id string
	testkit.WaitFor(t, 20*time.Second, "a's post asked about", func() bool {
		out, err := d.lox("tickets")
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); err == nil && len(f) > 4 && f[3] == "POST" && strings.Contains(line, "/scoped/x") {
				id = f[0]
			}
		}
		return id != ""
	})
	// The doc's lox approve, with the ticket's id.
	out, err := d.sh("cd " + shellQuote(d.site) + ` && docker-compose exec -T -e LOCKHTTP_OPERATOR="$(id -un)" console /lox approve ` + id + ` --hub http://127.0.0.1:3131 --hub-token /vol/console/cli.token`)
	if err != nil || !strings.Contains(out, "by cli:"+operator(t)) {
		t.Errorf("lox approve: %v\n%s", err, out)
	}
	select {
	case got := <-held:
		// Approved after the shipped 10 s hold, the post was answered E_PENDING; the approval
		// lets its identical retry through, once.
		if strings.Contains(got, "code=E_PENDING ticket="+id+" ") {
			t.Logf("a's post was answered E_PENDING before the approval; its retry: %s", got)
			got = in("a", "post", "https://origin.test/scoped/x", "from-a")
		}
		if got != "status=200 code= ticket= body=origin saw POST /scoped/x (6 bytes)" {
			t.Errorf("a's post after the approval: %s", got)
		}
	case <-time.After(30 * time.Second):
		t.Error("a's post not released by the approval")
	}
	d.doctorOK("with two agents apart",
		[3]string{"OK", "isolation", "agents cannot reach each other: inter-container traffic is off on " + composeProject + "_agent (3 tried from the agent network, none answered)"},
		[3]string{"OK", "isolation", "no agent can send with another's address"})
}

// badAgents: an agent with the docker socket, one privileged, one with NET_ADMIN: the doctor
// says ERROR for each, naming it.
func (d *deployment) badAgents(t *testing.T) {
	onNet := `    networks: [agent]
`
	done := d.withServices("bad-agents.yaml", `version: "3.8"
services:
`+agentService("with-socket", onNet, "/var/run/docker.sock:/var/run/docker.sock")+agentService("privileged", onNet+`    privileged: true
`)+agentService("netadmin", onNet+`    cap_add: [NET_ADMIN]
`), "with-socket", "privileged", "netadmin")
	defer done()
	out, code := d.doctor()
	for _, want := range []string{
		"agent " + composeProject + "_with-socket_1 mounts /var/run/docker.sock: the container engine, through which it reads every container's files (the signer's CA key among them)",
		"agent " + composeProject + "_privileged_1 is privileged",
		"agent " + composeProject + "_netadmin_1 is given capabilities: NET_ADMIN",
	} {
		if !hasLine(out, "ERROR", "compose", want) {
			t.Errorf("no ERROR compose line with %q", want)
		}
	}
	if code != 2 || t.Failed() {
		t.Fatalf("the doctor with three agents it must refuse: exit %d\n%s", code, out)
	}
}

// serviceDown: the signer killed by hand stays down (docker restarts none stopped by hand) and
// the doctor says ERROR with the fix; the console's process killed from outside docker is
// restarted, and the doctor says WARN with how often and when.
func (d *deployment) serviceDown(t *testing.T) {
	sid := strings.TrimSpace(d.must("ps", "-q", "signer"))
	if out, err := exec.Command("docker", "kill", sid).CombinedOutput(); err != nil {
		t.Fatalf("docker kill: %v %s", err, out)
	}
	out, code := d.doctor()
	if code != 2 || !hasLine(out, "ERROR", "compose", "signer ("+composeProject+"_signer_1) is exited since ") ||
		!hasLine(out, "ERROR", "compose", "docker restarts no container stopped by hand (docker kill, docker stop), whatever its restart policy; fix: docker-compose up -d signer") {
		t.Errorf("the signer killed: exit %d\n%s", code, out)
	}
	d.must("up", "-d")
	cid := strings.TrimSpace(d.must("ps", "-q", "console"))
	pid, err := exec.Command("docker", "inspect", "-f", "{{.State.Pid}}", cid).Output()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("kill", "-9", strings.TrimSpace(string(pid))).CombinedOutput(); err != nil {
		t.Fatalf("kill -9 the console: %v %s", err, out)
	}
	testkit.WaitFor(t, 60*time.Second, "docker to restart the console, and the hub back", func() bool {
		n, _ := exec.Command("docker", "inspect", "-f", "{{.RestartCount}} {{.State.Health.Status}}", cid).Output()
		return strings.TrimSpace(string(n)) == "1 healthy"
	})
	out, code = d.doctor()
	if code != 0 || !hasLine(out, "WARN", "restarts", "the console restarted once since its container was created at ") ||
		!hasLine(out, "WARN", "restarts", "after it exited at ") || !hasLine(out, "WARN", "restarts", "fix: read why in docker-compose logs console") {
		t.Errorf("the console restarted: exit %d\n%s", code, out)
	}
}

func tagged(names []string, tags ...string) []string {
	var out []string
	for _, n := range names {
		for _, tag := range tags {
			out = append(out, n+":"+tag)
		}
	}
	return out
}

// envValue is a setting of the deployment's .env.
func (d *deployment) envValue(key string) string {
	d.t.Helper()
	data, _ := os.ReadFile(filepath.Join(d.site, ".env"))
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(key) + `=(.*)$`).FindSubmatch(data)
	if m == nil {
		d.t.Fatalf(".env has no %s", key)
	}
	return string(m[1])
}

func (d *deployment) blockScript(name string) string {
	for _, b := range d.blocks {
		if b.Name == name {
			return b.Script
		}
	}
	d.t.Fatalf("docs/deploy.md has no test block %q", name)
	return ""
}

// caSHA is the sha256 of the ca.pem agents trust.
func (d *deployment) caSHA() string {
	d.t.Helper()
	sid := strings.TrimSpace(d.must("ps", "-q", "signer"))
	dir := d.t.TempDir()
	if out, err := exec.Command("docker", "cp", sid+":/vol/ca-public/ca.pem", dir).CombinedOutput(); err != nil {
		d.t.Fatalf("docker cp ca.pem: %v %s", err, out)
	}
	data, _ := os.ReadFile(filepath.Join(dir, "ca.pem"))
	return fmt.Sprintf("%x", sha256.Sum256(data))
}

var (
	reviewVersionRE = regexp.MustCompile(`:review approve ([0-9a-f]{12})`)
	waitingRE       = regexp.MustCompile(`policy file ([0-9a-f]{12}) loosens the policy`)
)

// review runs the doc's terminal block in tmux (docker attach), redraws, and approves the
// waiting loosening with :review, then detaches.
func (d *deployment) review(tmux string) {
	t := d.t
	t.Helper()
	b := d.blocks[d.next]
	if b.Name != "terminal" {
		t.Fatalf("the test runs \"terminal\" next; docs/deploy.md's next test block is %q", b.Name)
	}
	d.next++
	session := fmt.Sprintf("lockhttp-e2e-attach-%d", os.Getpid())
	// tmux runs the command with its server's environment: give it the doc's.
	script := fmt.Sprintf("cd %s && exec env -i %s sh -e -c %s", shellQuote(d.home), strings.Join(quoteAll(append(d.env, "TERM=xterm-256color")), " "), shellQuote(b.Script))
	newTmuxSession(t, tmux, session, "200x120", script)
	defer exec.Command(tmux, "kill-session", "-t", session).Run()
	screen := func() string {
		out, _ := exec.Command(tmux, "capture-pane", "-p", "-t", session).Output() // the screen as it is now
		return string(out)
	}
	keys := func(k ...string) { exec.Command(tmux, append([]string{"send-keys", "-t", session}, k...)...).Run() }
	// The doc: Ctrl-L draws the screen, drawn before the terminal attached.
	testkit.WaitFor(t, 20*time.Second, "the console's screen after Ctrl-L", func() bool {
		keys("C-l")
		return strings.Contains(screen(), "WAIT FOR REVIEW")
	})
	command := func(cmd string) {
		keys(":")
		testkit.WaitFor(t, 5*time.Second, "the : prompt", func() bool { return strings.Contains(screen(), "help for the list") })
		keys("-l", cmd)
		keys("Enter")
	}
	defer func() {
		if t.Failed() {
			t.Logf("the console's terminal:\n%s", screen())
		}
	}()
	// The version waiting for review, on the status line; :review shows what it loosens.
	var version string
	if m := waitingRE.FindStringSubmatch(screen()); m != nil {
		version = m[1]
	}
	command("review")
	testkit.WaitFor(t, 10*time.Second, "the review on the screen", func() bool {
		s := screen()
		if m := reviewVersionRE.FindStringSubmatch(s); m != nil {
			version = m[1]
		}
		return version != "" && strings.Contains(s, "inject") && strings.Contains(s, "floor")
	})
	keys("Escape")
	command("review approve " + version)
	testkit.WaitFor(t, 10*time.Second, "the approval on the screen", func() bool { return strings.Contains(screen(), "Approved: the gate applies it") })
	keys("C-p", "C-q") // detach: the console goes on
	testkit.WaitFor(t, 10*time.Second, "docker attach to end", func() bool {
		out, err := exec.Command(tmux, "list-panes", "-t", session, "-F", "#{pane_dead}").Output()
		return err != nil || strings.TrimSpace(string(out)) != "0"
	})
	if out := d.must("ps", "console"); !strings.Contains(out, "Up") {
		t.Fatalf("the console after detaching:\n%s", out)
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = shellQuote(s)
	}
	return out
}

// pairAndApprove opens the doc's pairing link in a headless Chromium on this machine (through
// the published port), holds a request, and approves it on the phone page with two taps.
func (d *deployment) pairAndApprove(browser, pairOut string) {
	t := d.t
	t.Helper()
	var link string
	for _, f := range strings.Fields(pairOut) {
		if strings.HasPrefix(f, "http://127.0.0.1:3139/phone/#pair=") {
			link = f
		}
	}
	if link == "" {
		t.Fatalf("no pairing link through the published port in:\n%s", pairOut)
	}
	_, do := phoneBrowser(t, browser)
	do("pair", chromedp.Navigate(link), chromedp.WaitVisible(chromedp.ID("pair-form")),
		chromedp.Click(chromedp.ID("pair-button")), chromedp.WaitVisible(chromedp.ID("list-view")),
		chromedp.WaitVisible(chromedp.CSS("#conn.live")))
	done := make(chan string, 1)
	go func() { done <- d.agent("delete", "https://origin.test/thing") }()
	var id string
	testkit.WaitFor(t, 20*time.Second, "the ticket", func() bool {
		out, err := d.lox("tickets")
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); err == nil && len(f) > 4 && f[3] == "DELETE" {
				id = f[0]
			}
		}
		return id != ""
	})
	sel := chromedp.CSS(`#pending li[data-ticket-id="` + id + `"] button`)
	do("the ticket on the phone", chromedp.WaitVisible(sel))
	do("open and approve", chromedp.Click(sel), chromedp.WaitVisible(chromedp.ID("detail-view")),
		chromedp.Click(chromedp.ID("approve")), chromedp.WaitVisible(chromedp.ID("confirm")),
		chromedp.WaitEnabled(chromedp.ID("approve-confirm")), chromedp.Click(chromedp.ID("approve-confirm")))
	select {
	case out := <-done:
		// Approved within the hold, the request goes on. The shipped hold is 10 s (docs/ask.md,
		// "How long a request is held"): taps that take longer find it answered E_PENDING, and
		// the approval lets its identical retry through, once.
		if strings.Contains(out, "code=E_PENDING ticket="+id+" ") {
			t.Logf("the request was answered E_PENDING before the approval; its retry: %s", out)
			out = d.agent("delete", "https://origin.test/thing")
		}
		if out != "status=200 code= ticket= body=origin saw DELETE /thing (0 bytes)" {
			t.Fatalf("after approving on the phone: %s", out)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the approval on the phone did not release the request")
	}
}

// metricsOnHubOnly: the signer has no network at all; a container on the hub network (the test
// agent's image, playing an operator's Prometheus) scrapes the gate's and the console's metrics
// at the addresses docs/deploy.md gives, the gate's page carrying the signer's families, read
// over the signer's socket; from the agent network none of them answers, by name or by its hub
// address; promtool passes the gate's combined page.
func (d *deployment) metricsOnHubOnly(t *testing.T) {
	hubNet := composeProject + "_hub"
	sid := strings.TrimSpace(d.must("ps", "-q", "signer"))
	netw, err := exec.Command("docker", "inspect", "-f", `{{.HostConfig.NetworkMode}} {{range $n, $_ := .NetworkSettings.Networks}}{{$n}} {{end}}`, sid).Output()
	if got := strings.TrimSpace(string(netw)); err != nil || got != "none none" {
		t.Errorf("the signer's network mode and networks: %q %v, want none and none", got, err)
	}
	scrape := func(target string, prefixes ...string) string {
		b, _ := exec.Command("docker", append([]string{"run", "--rm", "--network", hubNet, "lockhttp-agent:local", "metrics", target}, prefixes...)...).CombinedOutput()
		return strings.TrimSpace(string(b))
	}
	for _, svc := range []string{"gate", "console"} {
		target := "http://" + svc + ".hub:9464/metrics"
		var out string
		testkit.WaitFor(t, 30*time.Second, "the "+svc+"'s metrics from the hub network", func() bool {
			out = scrape(target)
			return strings.HasPrefix(out, "status=200 ")
		})
		if !strings.Contains(out, `lockhttp_build_info{process="`+svc+`"`) {
			t.Errorf("%s from the hub network: %s", target, out)
		}
	}
	// The signer's families on the gate's page, as the signer counts them: the gate read them at
	// this scrape (up 1), and only them of the signer's page (one lockhttp_build_info, the gate's).
	var page string
	testkit.WaitFor(t, 30*time.Second, "the signer's families on the gate's page", func() bool {
		page = scrape("http://gate.hub:9464/metrics", "")
		return strings.Contains(page, "\nlockhttp_gate_signer_metrics_up 1\n")
	})
	for _, want := range []string{"\n# TYPE lockhttp_signer_requests_total counter\n", "\nlockhttp_signer_requests_total{outcome=\"issued\"} ",
		"\n# TYPE lockhttp_signer_sign_duration_seconds histogram\n"} {
		if !strings.Contains(page, want) {
			t.Errorf("the gate's page lacks %q:\n%.3000s", want, page)
		}
	}
	if n := strings.Count(page, "\nlockhttp_build_info{"); n != 1 || !strings.Contains(page, `lockhttp_build_info{process="gate"`) {
		t.Errorf("%d lockhttp_build_info lines on the gate's page, want the gate's alone", n)
	}
	// No signer on the hub network, by its old name either.
	if b, _ := exec.Command("docker", "run", "--rm", "--network", hubNet, "lockhttp-agent:local", "dns", "signer.hub").CombinedOutput(); !strings.HasPrefix(string(b), "failed:") {
		t.Errorf("signer.hub from the hub network: %s", b)
	}
	// From the agent network: the hub's names do not resolve, the gate's agent address does not
	// listen on the metrics port, and no hub address is reachable.
	probes := []string{"gate.hub:9464", "console.hub:9464", "signer.hub:9464", "gate:9464"}
	for _, svc := range []string{"gate", "console"} {
		id := strings.TrimSpace(d.must("ps", "-q", svc))
		ip, err := exec.Command("docker", "inspect", "-f", `{{(index .NetworkSettings.Networks "`+hubNet+`").IPAddress}}`, id).Output()
		if err != nil || strings.TrimSpace(string(ip)) == "" {
			t.Fatalf("the %s's address on %s: %v %s", svc, hubNet, err, ip)
		}
		probes = append(probes, strings.TrimSpace(string(ip))+":9464")
	}
	outs := make(chan [2]string, len(probes))
	for _, p := range probes { // at once: each waits for its timeout
		go func() { outs <- [2]string{p, d.agent("tcp", p)} }()
	}
	for range probes {
		if o := <-outs; !strings.HasPrefix(o[1], "failed:") {
			t.Errorf("the agent network reaches %s: %s", o[0], o[1])
		}
	}
	// The combined page as Prometheus reads it (the scrape's summary line aside).
	promtool := requireTool(t, "promtool")
	_, body, _ := strings.Cut(page, "\n")
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(body + "\n")
	if out, err := cmd.CombinedOutput(); err != nil || len(out) != 0 {
		t.Errorf("promtool check metrics on the gate's page: %v\n%s", err, out)
	}
}
