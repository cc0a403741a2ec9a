package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/stack"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// clientsAgentUID is the agent's uid in these tests (--agent-uid): not the default, so that they
// and the enclosure tests never wait on each other's uid.
const clientsAgentUID = 10097

// clientsAgent is one lox run -- sh -c SCRIPT against the client matrix's origins, with a stack
// of its own (its state directory, CA and audit), started as a user would start it.
type clientsAgent struct {
	*agentLox
	e     *clientsEnv
	stack *running // its state directory and audit
	ask   *askEnv  // lox tickets, lox approve on it
	base  string   // the test's directory: the state, the policy, tmp/, the agent's
	dir   string   // the agent's working directory and HOME (--agent-dir), kept after it exits
	tmp   string   // searchable by the agent: files the test hands it
}

// newAgent makes the directories of a lox run -- for the matrix's origins (agentDirs), checks
// that the agent's uid is free and frees it after. Files for the agent go in a.tmp before
// start.
func (e *clientsEnv) newAgent(t *testing.T) *clientsAgent {
	t.Helper()
	requireRoot(t)
	if pids := processesOf(clientsAgentUID); len(pids) > 0 {
		t.Fatalf("uid %d already runs %v: the test needs it free", clientsAgentUID, pids)
	}
	t.Cleanup(func() {
		for _, pid := range processesOf(clientsAgentUID) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		testkit.WaitFor(t, 10*time.Second, "no process left as the agent's uid", func() bool { return len(processesOf(clientsAgentUID)) == 0 })
	})
	base, tmp := agentDirs(t)
	state := filepath.Join(base, "state")
	a := &clientsAgent{e: e, base: base, dir: filepath.Join(base, "agent"), tmp: tmp}
	a.stack = &running{t: t, state: state, up: stack.Up{AuditDir: filepath.Join(state, "audit")}}
	a.ask = &askEnv{running: a.stack}
	return a
}

// start starts lox run --headless -- sh -c script with policy, the matrix's roots and
// loxFlags, lox's environment a root shell's (PATH, HOME, LANG) plus loxEnv. The agent's PATH
// is the system's, where Debian's pip, python3, npm and git are.
func (a *clientsAgent) start(t *testing.T, policy, script string, loxFlags, loxEnv []string) {
	t.Helper()
	polPath := filepath.Join(a.base, "policy.toml")
	if err := os.WriteFile(polPath, []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"run", "--headless", "--state", a.stack.state, "--policy", polPath, "--listen", "127.0.0.1:0",
		"--hub-listen", "127.0.0.1:0", "--roots", a.e.roots, "--agent-uid", strconv.Itoa(clientsAgentUID),
		"--agent-dir", a.dir, "--agent-name", "matrix"}, loxFlags...)
	args = append(args, "--", "sh", "-c", script)
	l := &agentLox{stdout: &testkit.Buffer{}, stderr: &testkit.Buffer{}, done: make(chan struct{})}
	l.cmd = execLox(t, args...)
	l.cmd.Stdout, l.cmd.Stderr = l.stdout, l.stderr
	l.cmd.Env = append([]string{"PATH=" + agentPATH, "TMPDIR=" + a.tmp, "HOME=/root", "LANG=C.UTF-8"}, loxEnv...)
	if err := l.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { l.cmd.Wait(); close(l.done) }()
	t.Cleanup(func() {
		select {
		case <-l.done:
		default:
			l.cmd.Process.Kill()
			<-l.done
		}
	})
	a.agentLox = l
}

// runAgent is newAgent and start.
func (e *clientsEnv) runAgent(t *testing.T, policy, script string, loxFlags, loxEnv []string) *clientsAgent {
	t.Helper()
	a := e.newAgent(t)
	a.start(t, policy, script, loxFlags, loxEnv)
	return a
}

// waitUp waits until the stack is up (its up.json names the agent): lox tickets works from then.
func (a *clientsAgent) waitUp(t *testing.T) {
	t.Helper()
	testkit.WaitFor(t, 60*time.Second, "the agent's stack up", func() bool {
		select {
		case <-a.done:
			t.Fatalf("lox exited before its stack was up:\n%s", a.stderr)
		default:
		}
		data, err := os.ReadFile(filepath.Join(a.stack.state, stack.UpFile))
		return err == nil && bytes.Contains(data, []byte(`"agent"`))
	})
}

// finish waits for lox to exit and returns the command's status, logging what it printed.
func (a *clientsAgent) finish(t *testing.T) int {
	t.Helper()
	code := a.wait(t, 240*time.Second)
	t.Logf("lox exited %d\nstdout:\n%s\nstderr:\n%s", code, a.stdout, a.stderr)
	return code
}

// agentPolicy is the matrix's policy for a stack with an agent: the same, its [sources] with
// the enclosure's subnet too.
func (e *clientsEnv) agentPolicy() string {
	return strings.Replace(e.policy, `local = ["127.0.0.0/8"]`, `local = ["127.0.0.0/8", "198.18.0.0/24"]`, 1)
}

// auditedIn waits for r's audit record of method url under event and returns it.
func auditedIn(t *testing.T, r *running, event, method, url string) map[string]any {
	t.Helper()
	var rec map[string]any
	testkit.WaitFor(t, 5*time.Second, "the audit record of "+event+" "+method+" "+url, func() bool {
		for _, m := range r.auditRecords() {
			if m["event"] == event && m["method"] == method && m["url"] == url {
				rec = m
				return true
			}
		}
		return false
	})
	return rec
}

// machineFile makes sure path holds a line with key, as a machine's npmrc or pip.conf does: a
// missing file is created with content and removed after; a file without key gets content
// appended and is put back after. A file that has it is left alone.
func machineFile(t *testing.T, path, key, content string) {
	t.Helper()
	old, err := os.ReadFile(path)
	switch {
	case err == nil && bytes.Contains(old, []byte(key)):
		return
	case err == nil:
		fi, _ := os.Stat(path)
		t.Cleanup(func() { os.WriteFile(path, old, fi.Mode().Perm()) })
		if err := os.WriteFile(path, append(append(old, '\n'), content...), fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	case os.IsNotExist(err):
		made := []string{}
		for d := filepath.Dir(path); ; d = filepath.Dir(d) {
			if _, err := os.Stat(d); err == nil {
				break
			}
			made = append([]string{d}, made...)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			os.Remove(path)
			for i := len(made) - 1; i >= 0; i-- {
				os.Remove(made[i])
			}
		})
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatal(err)
	}
}

// debianClientFiles makes this machine's npm and pip carry a CA setting of their own that names
// the system roots alone, as Debian's npm ships it (cafile in its npmrc) and as machines set
// pip's (cert in pip.conf): npm's global npmrc (npm config get globalconfig; /etc/npmrc for
// Debian's npm) and /etc/pip.conf, each created or completed for the test and put back after.
// It checks that npm and pip, run as root with nothing else set, then read them.
func debianClientFiles(t *testing.T) {
	t.Helper()
	npm, roots := requireTool(t, "npm"), systemRoots(t)
	py := python(t, "pip")
	clean := []string{"PATH=" + agentPATH, "HOME=" + t.TempDir(), "LANG=C.UTF-8"}
	global := strings.TrimSpace(run(t, clean, "", npm, "config", "get", "globalconfig"))
	machineFile(t, global, "cafile", "cafile="+roots+"\n")
	if got := strings.TrimSpace(run(t, clean, "", npm, "config", "get", "cafile")); got != roots {
		t.Fatalf("npm reads cafile = %q from %s, want %s", got, global, roots)
	}
	pipConf := "/etc/pip.conf"
	machineFile(t, pipConf, "cert", "[global]\ncert = "+roots+"\n")
	if got := run(t, clean, "", py, "-m", "pip", "config", "list"); !strings.Contains(got, "global.cert='"+roots+"'") {
		t.Fatalf("pip config list does not show %s's cert = %s:\n%s", pipConf, roots, got)
	}
	t.Logf("npm's %s has cafile=%s; %s has cert = %s", global, roots, pipConf, roots)
}

// clientGitUnderLox clones, fetches and pushes (the push asks; lox approve) with git run by lox
// run --, unmodified, with a system gitconfig whose http.sslCAInfo names the system roots alone
// (GIT_CONFIG_SYSTEM, passed with --agent-env) and the proxy URL exactly as lox sets it.
func clientGitUnderLox(t *testing.T, e *clientsEnv) {
	requireTool(t, "git")
	roots := systemRoots(t)
	repo := fmt.Sprintf("https://git.test:%d/repo.git", e.gitPort)
	a := e.agentWithGitconfig(t, roots, `set -e
export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@example.com GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@example.com
echo "sslCAInfo=$(git config --system --get http.sslCAInfo)"
echo "proxy=$HTTPS_PROXY"
git clone `+repo+` clone
cd clone
git fetch origin
git commit -q --allow-empty -m "from the agent"
echo "pushing $(git rev-parse HEAD)"
git push origin main
echo pushed`)
	a.waitUp(t)
	tk := a.ask.waitTicket(t, repo+"/git-receive-pack")
	if out, err := a.ask.lox(t, "approve", tk.ID); err != nil {
		t.Fatalf("lox approve: %v\n%s", err, out)
	}
	code := a.finish(t)
	out := a.stdout.String()
	if !strings.Contains(out, "sslCAInfo="+roots+"\n") || !strings.Contains(out, "proxy=http://matrix:@198.18.") {
		t.Errorf("the agent's git did not have the system gitconfig's http.sslCAInfo, or the proxy URL is not lox's:\n%s", out)
	}
	if code != 0 || !strings.Contains(out, "pushed") {
		t.Fatalf("git under lox run -- exited %d", code)
	}
	_, pushed, _ := strings.Cut(out, "pushing ")
	pushed, _, _ = strings.Cut(pushed, "\n")
	got, err := gitCmd(t, e.repos, "--git-dir", filepath.Join(e.repos, "repo.git"), "rev-parse", "main")
	if err != nil || strings.TrimSpace(string(got)) != pushed {
		t.Errorf("the origin's main is %q (%v), want the agent's %s", got, err, pushed)
	}
	for _, c := range []struct{ path, verdict, rule string }{
		{"/info/refs?service=git-upload-pack", "FREE", "trusted"},
		{"/git-upload-pack", "FREE", "git-fetch"},
		{"/git-receive-pack", "ASK", "git-push"},
	} {
		method := "POST"
		if strings.HasPrefix(c.path, "/info/") {
			method = "GET"
		}
		rec := auditedIn(t, a.stack, "tunnel-request", method, repo+c.path)
		if rec["verdict"] != c.verdict || rec["rule"] != c.rule || rec["status"] != float64(200) || rec["container"] != "local" {
			t.Errorf("audit record of %s: %v", c.path, rec)
		}
	}
}

// agentWithGitconfig runs script under lox run -- with a system gitconfig (GIT_CONFIG_SYSTEM,
// passed with --agent-env) whose http.sslCAInfo is roots.
func (e *clientsEnv) agentWithGitconfig(t *testing.T, roots, script string) *clientsAgent {
	t.Helper()
	a := e.newAgent(t)
	cfg := filepath.Join(a.tmp, "gitconfig")
	os.WriteFile(cfg, []byte("[http]\n\tsslCAInfo = "+roots+"\n"), 0o644)
	a.start(t, e.agentPolicy(), script, []string{"--agent-env", "GIT_CONFIG_SYSTEM"}, []string{"GIT_CONFIG_SYSTEM=" + cfg})
	return a
}

// clientNpmUnderLox installs lockdemo from the registry with npm run by lox run --, unmodified,
// with the machine's npmrc carrying cafile (debianClientFiles) and the agent's own ~/.npmrc and
// project .npmrc doing the same, ~/.npmrc naming a proxy of its own too: npm_config_cafile and
// npm_config_https_proxy, which lox sets, must beat them all.
func clientNpmUnderLox(t *testing.T, e *clientsEnv) {
	requireTool(t, "node")
	debianClientFiles(t)
	roots := systemRoots(t)
	registry := e.npmURL("/registry/")
	a := e.runAgent(t, e.agentPolicy(), `set -e
printf 'cafile=`+roots+`\nproxy=http://proxy.example:3128/\nhttps-proxy=http://proxy.example:3128/\n' > ~/.npmrc
mkdir project && cd project
printf 'cafile=`+roots+`\n' > .npmrc
echo '{"name":"agent-project","version":"1.0.0","private":true}' > package.json
echo "cafile=$(npm config get cafile) globalconfig=$(npm config get globalconfig)"
npm install --no-audit --no-fund --no-update-notifier --registry `+registry+` lockdemo
node -e 'console.log("required " + require("lockdemo"))'`, nil, nil)
	code := a.finish(t)
	out := a.stdout.String() + a.stderr.String()
	if code != 0 || !strings.Contains(out, "required lockdemo 1.0.0") {
		t.Fatalf("npm install under lox run -- exited %d:\n%s", code, out)
	}
	host := hostOf(e.npmURL("/"))
	for _, path := range []string{"/registry/lockdemo", "/lockdemo-1.0.0.tgz"} {
		if !e.npm.saw("GET", host, path) {
			t.Errorf("the registry did not see GET %s; it saw %v", path, e.npm.all())
		}
		rec := auditedIn(t, a.stack, "tunnel-request", "GET", e.npmURL(path))
		if rec["verdict"] != "FREE" || rec["status"] != float64(200) || rec["container"] != "local" {
			t.Errorf("audit record of %s: %v", path, rec)
		}
	}
}

// clientPipUnderLox installs lockdemo from the index with pip run by lox run --, unmodified, with
// /etc/pip.conf's cert and the agent's own pip.conf naming the system roots alone, and
// REQUESTS_CA_BUNDLE set to them in the operator's environment (requests takes it over pip's own
// cert): lox's variables must win.
func clientPipUnderLox(t *testing.T, e *clientsEnv) {
	debianClientFiles(t)
	roots := systemRoots(t)
	index := fmt.Sprintf("https://pypi.test:%d/simple/", e.pypiPort)
	a := e.runAgent(t, e.agentPolicy(), `set -e
mkdir -p ~/.config/pip && printf '[global]\ncert = `+roots+`\n' > ~/.config/pip/pip.conf
echo "REQUESTS_CA_BUNDLE=$REQUESTS_CA_BUNDLE PIP_CERT=$PIP_CERT"
pip install --index-url `+index+` --no-deps --target ./site lockdemo
PYTHONPATH=./site python3 -c 'import lockdemo; print("imported " + lockdemo.VALUE)'`,
		nil, []string{"REQUESTS_CA_BUNDLE=" + roots, "PIP_CERT=" + roots, "CURL_CA_BUNDLE=" + roots})
	code := a.finish(t)
	out := a.stdout.String() + a.stderr.String()
	if code != 0 || !strings.Contains(out, "imported lockdemo 0.1.0") {
		t.Fatalf("pip install under lox run -- exited %d:\n%s", code, out)
	}
	if strings.Contains(out, "REQUESTS_CA_BUNDLE="+roots+" ") {
		t.Errorf("the operator's REQUESTS_CA_BUNDLE reached the agent:\n%s", out)
	}
	host := fmt.Sprintf("pypi.test:%d", e.pypiPort)
	for _, path := range []string{"/simple/lockdemo/", "/files/" + wheelName} {
		rec := auditedIn(t, a.stack, "tunnel-request", "GET", "https://"+host+path)
		if rec["verdict"] != "FREE" || rec["status"] != float64(200) || rec["container"] != "local" {
			t.Errorf("audit record of %s: %v", path, rec)
		}
	}
}

// pendingPolicy is the matrix's policy for an agent with lockdemo's wheel asking, and the hold
// left to its default (no [settings] hold).
func (e *clientsEnv) pendingPolicy(t *testing.T) string {
	t.Helper()
	p := e.agentPolicy()
	if !strings.Contains(p, "\n[settings]\nhold = \"30s\"\n") {
		t.Fatal("the matrix's policy has no [settings] hold to take out")
	}
	p = strings.Replace(p, "\n[settings]\nhold = \"30s\"\n", "\n", 1)
	return strings.Replace(p, "[floor]\n", `[[rule]]
name = "ask-wheels"
hosts = ["pypi.test"]
paths = ["/files/lockdemo-*"]
verdict = "ask"

[floor]
`, 1)
}

// TestPipSeesItsTicket: pip, whose own timeout is 15 s, run by lox run -- with its defaults,
// gets E_PENDING for a download held for a human before it gives up (the gate's default hold
// ends first), and says so; the ticket is in lox tickets, and once approved pip's retry of the
// same download passes (the approval's one identical retry), with nothing else asked.
func TestPipSeesItsTicket(t *testing.T) {
	requireTool(t, "pip")
	e := startClientOrigins(t)
	index := fmt.Sprintf("https://pypi.test:%d/simple/", e.pypiPort)
	wheel := fmt.Sprintf("https://pypi.test:%d/files/%s", e.pypiPort, wheelName)
	install := "pip install --index-url " + index + " --no-deps --no-cache-dir --target ./site lockdemo"
	a := e.runAgent(t, e.pendingPolicy(t), install+` >first.out 2>&1; echo "first exit $?"; cat first.out
echo WAITING
while [ ! -e "$HOME/approved" ]; do sleep 0.1; done
`+install+`; echo "second exit $?"
PYTHONPATH=./site python3 -c 'import lockdemo; print("imported " + lockdemo.VALUE)'`, nil, nil)
	testkit.WaitFor(t, 200*time.Second, "pip's first run to end", func() bool {
		select {
		case <-a.done:
			return true
		default:
		}
		return strings.Contains(a.stdout.String(), "WAITING")
	})
	first := a.stdout.String()
	t.Logf("pip's first run:\n%s", first)
	if !strings.Contains(first, "WAITING") {
		t.Fatalf("lox exited before pip's first run ended:\n%s", a.stderr)
	}
	// pip saw the gate's answer, not its own timeout: it names E_PENDING and never retried.
	if !strings.Contains(first, "lockhttp E_PENDING") || !strings.Contains(first, "first exit 1") ||
		strings.Contains(first, "Retrying") || strings.Contains(first, "timed out") {
		t.Fatalf("pip did not show E_PENDING before its own timeout:\n%s", first)
	}
	rec := auditedIn(t, a.stack, "tunnel-request", "GET", wheel)
	ticket, _ := rec["ticket"].(string)
	if rec["code"] != "E_PENDING" || rec["status"] != float64(403) || rec["rule"] != "ask-wheels" || ticket == "" {
		t.Fatalf("the held download's record: %v", rec)
	}
	a.waitUp(t)
	tk := a.ask.waitTicket(t, wheel)
	if tk.ID != ticket {
		t.Fatalf("lox tickets shows %s for the download, pip got %s", tk.ID, ticket)
	}
	if out, err := a.ask.lox(t, "approve", tk.ID); err != nil {
		t.Fatalf("lox approve: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(a.dir, "approved"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code := a.finish(t)
	out := a.stdout.String()
	if code != 0 || !strings.Contains(out, "second exit 0") || !strings.Contains(out, "imported lockdemo 0.1.0") {
		t.Fatalf("pip's retry after the approval (lox exited %d):\n%s", code, out)
	}
	// The download's records: the held one and the retry the approval let through, nothing
	// else asked.
	var got []string
	for _, m := range a.stack.auditRecords() {
		if m["url"] == wheel {
			got = append(got, fmt.Sprintf("%v %v %v approver=%v", m["code"], m["status"], m["ticket"], m["approver"]))
		}
	}
	want := []string{"E_PENDING 403 " + ticket + " approver=<nil>", " 200 " + ticket + " approver=cli:root"}
	if len(got) != 2 || got[0] != want[0] || !strings.HasPrefix(got[1], " 200 "+ticket+" approver=cli:") {
		t.Errorf("the download's records: %q, want %q", got, want)
	}
}
