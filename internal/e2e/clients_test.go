package e2e

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/testkit"
)

// clientsPolicy is the client matrix's policy: every origin is trusted (GET is free, and
// decrypted when it is HTTPS), git's fetch is free and a push asks; the package lockdeny (its
// wheel, its npm document and tarball) is denied. %[1]s is the origins' ports.
const clientsPolicy = `version = 1
trusted = ["plain.test", "origin.test", "git.test", "pypi.test", "npm.test"]

[[rule]]
name = "git-fetch"
hosts = ["git.test"]
methods = ["POST"]
paths = ["/**/git-upload-pack"]
verdict = "free"

[[rule]]
name = "git-push"
hosts = ["git.test"]
methods = ["POST"]
paths = ["/**/git-receive-pack"]
verdict = "ask"

[[rule]]
name = "no-lockdeny"
hosts = ["pypi.test", "npm.test"]
paths = ["/files/lockdeny-*", "/registry/lockdeny", "/lockdeny-*"]
verdict = "deny"

[floor]
allow_cidrs = ["127.0.0.1/32"]
allow_ports = [%[1]s]

[floor.hosts]
"plain.test" = "127.0.0.1"
"origin.test" = "127.0.0.1"
"git.test" = "127.0.0.1"
"pypi.test" = "127.0.0.1"
"npm.test" = "127.0.0.1"

[sources]
local = ["127.0.0.0/8"]

[settings]
hold = "30s"
`

// witness records what reached an origin and hands the request on.
type witness struct {
	next http.Handler
	mu   sync.Mutex
	seen []recorded // guarded by mu
}

func (w *witness) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	w.mu.Lock()
	w.seen = append(w.seen, recorded{Method: r.Method, Path: r.URL.RequestURI(), Host: r.Host, Header: r.Header.Clone()})
	w.mu.Unlock()
	w.next.ServeHTTP(rw, r)
}

// saw reports whether a request for method and path with Host host reached the origin.
func (w *witness) saw(method, host, path string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range w.seen {
		if r.Method == method && r.Host == host && r.Path == path {
			return true
		}
	}
	return false
}

func (w *witness) all() []recorded {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]recorded(nil), w.seen...)
}

// clientsEnv is the stack and the origins of the client matrix.
type clientsEnv struct {
	*running
	bundle string // the system roots followed by ca.pem, as lox run -- COMMAND writes it
	policy string // clientsPolicy with the origins' ports
	roots  string // the origins' CA (lox run --roots)

	plain, origin, pypi, npm *witness
	plainPort, originPort    int
	pypiPort, npmPort        int
	gitPort                  int
	repos                    string // the git server's bare repositories
}

func startClients(t *testing.T) *clientsEnv {
	t.Helper()
	e := startClientOrigins(t)
	e.running = startStackWith(t, e.policy, []string{"--roots", e.roots}, nil)
	ca, err := os.ReadFile(e.up.CACert)
	if err != nil {
		t.Fatal(err)
	}
	// docs/trust-ca.md: a variable that replaces a runtime's roots names a bundle of the system
	// roots and ca.pem, so that public roots keep working.
	var sys []byte
	for _, p := range []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"} {
		if sys, err = os.ReadFile(p); err == nil {
			break
		}
	}
	if len(sys) > 0 && sys[len(sys)-1] != '\n' {
		sys = append(sys, '\n')
	}
	e.bundle = filepath.Join(t.TempDir(), "ca-bundle.pem")
	if err := os.WriteFile(e.bundle, append(sys, ca...), 0o644); err != nil {
		t.Fatal(err)
	}
	return e
}

// startClientOrigins starts the matrix's origins and writes its policy, without a stack.
func startClientOrigins(t *testing.T) *clientsEnv {
	t.Helper()
	pki := newTestPKI(t)
	e := &clientsEnv{}
	say := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "origin saw %s %s", r.Method, r.URL.RequestURI())
	})
	e.plain = &witness{next: say}
	p := httptest.NewServer(e.plain)
	t.Cleanup(p.Close)
	e.plainPort = p.Listener.Addr().(*net.TCPAddr).Port
	e.origin = &witness{next: say}
	_, e.originPort = tlsOrigin(t, e.origin, pki.leaf(t, []string{"origin.test"}, time.Now().Add(24*time.Hour), false))
	e.pypi = &witness{next: pypiIndex(t)}
	_, e.pypiPort = tlsOrigin(t, e.pypi, pki.leaf(t, []string{"pypi.test"}, time.Now().Add(24*time.Hour), false))
	e.npm = &witness{next: npmRegistry(t)}
	_, e.npmPort = tlsOrigin(t, e.npm, pki.leaf(t, []string{"npm.test"}, time.Now().Add(24*time.Hour), false))
	e.repos = seedRepo(t)
	e.gitPort = gitServer(t, pki, e.repos)

	ports := []string{}
	for _, p := range []int{e.plainPort, e.originPort, e.pypiPort, e.npmPort, e.gitPort} {
		ports = append(ports, strconv.Itoa(p))
	}
	e.policy, e.roots = fmt.Sprintf(clientsPolicy, strings.Join(ports, ", ")), pki.rootPEM
	return e
}

// seedRepo makes a bare repository repo.git with one commit and pushes enabled.
func seedRepo(t *testing.T) string {
	t.Helper()
	requireTool(t, "git")
	repos, seed := t.TempDir(), t.TempDir()
	for _, args := range [][]string{
		{"init", "--bare", "-b", "main", filepath.Join(repos, "repo.git")},
		{"-C", filepath.Join(repos, "repo.git"), "config", "http.receivepack", "true"},
		{"init", "-b", "main", "."},
		{"commit", "--allow-empty", "-m", "first"},
		{"push", filepath.Join(repos, "repo.git"), "main"},
	} {
		if out, err := gitCmd(t, seed, args...); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return repos
}

// clientEnv is the environment every client starts from, and nothing of this machine's: the
// proxy variables docs/trust-ca.md names (upper case), PATH and a HOME of its own, then the row's
// own settings.
func (e *clientsEnv) clientEnv(t *testing.T, extra ...string) []string {
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "LANG=C.UTF-8",
		"HTTP_PROXY=" + e.up.Gate, "HTTPS_PROXY=" + e.up.Gate, "NO_PROXY=", "no_proxy="}
	return append(env, extra...)
}

// run runs a client with env in dir and returns its combined output; a client that fails or
// takes more than 30 seconds fails the test.
func run(t *testing.T, env []string, dir string, name string, args ...string) string {
	t.Helper()
	out, err := runErr(t, env, dir, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

func runErr(t *testing.T, env []string, dir string, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env, cmd.Dir = env, dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// plainURL and tlsURL are the origins' URLs for a row's request.
func (e *clientsEnv) plainURL(path string) string {
	return fmt.Sprintf("http://plain.test:%d%s", e.plainPort, path)
}

func (e *clientsEnv) tlsURL(path string) string {
	return fmt.Sprintf("https://origin.test:%d%s", e.originPort, path)
}

// audited waits for the gate's audit record of method url under event and returns it.
func (e *clientsEnv) audited(t *testing.T, event, method, url string) map[string]any {
	t.Helper()
	var rec map[string]any
	testkit.WaitFor(t, 5*time.Second, "the audit record of "+event+" "+method+" "+url, func() bool {
		for _, m := range e.auditRecords() {
			if m["event"] == event && m["method"] == method && m["url"] == url {
				rec = m
				return true
			}
		}
		return false
	})
	return rec
}

// throughGate checks that a GET of target went through the gate: the client printed what the
// origin answered, the origin saw the request, and the audit has it as FREE with a 200.
func (e *clientsEnv) throughGate(t *testing.T, out string, target string) {
	t.Helper()
	e.throughGateAs(t, out, target, "")
}

// throughCONNECT is throughGate for an http:// URL the client sent through a CONNECT (the gate
// reads it inside the tunnel): its record is a tunnel-request.
func (e *clientsEnv) throughCONNECT(t *testing.T, out string, target string) {
	t.Helper()
	e.throughGateAs(t, out, target, "tunnel-request")
}

func (e *clientsEnv) throughGateAs(t *testing.T, out, target, event string) {
	t.Helper()
	u, err := neturl.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	w := e.origin
	if u.Scheme == "http" {
		w = e.plain
	}
	if event == "" {
		event = "tunnel-request"
		if u.Scheme == "http" {
			event = "request"
		}
	}
	if !strings.Contains(out, "origin saw GET "+u.RequestURI()) {
		t.Errorf("the client did not print the origin's answer to %s:\n%s", target, out)
	}
	if !w.saw("GET", u.Host, u.RequestURI()) {
		t.Errorf("the origin did not see GET %s; it saw %v", target, w.all())
	}
	rec := e.audited(t, event, "GET", target)
	if rec["verdict"] != "FREE" || rec["rule"] != "trusted" || rec["status"] != float64(200) {
		t.Errorf("audit record of %s: %v", target, rec)
	}
}

// neverAudited checks that the gate has no record of url: the client went round it.
func (e *clientsEnv) neverAudited(t *testing.T, url string) {
	t.Helper()
	for _, m := range e.auditRecords() {
		if m["url"] == url {
			t.Errorf("the gate has a record of %s: %v", url, m)
		}
	}
}

// python returns a python3 that imports modules: Debian's /usr/bin/python3 first (where
// python3-requests, python3-httpx and python3-pip install), then the first on PATH. It skips
// when there is none, except under CI=true.
func python(t *testing.T, modules ...string) string {
	t.Helper()
	imports := strings.Join(append([]string{"sys"}, modules...), ", ")
	var tried []string
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		bin, err := exec.LookPath(p)
		if err != nil {
			continue
		}
		if exec.Command(bin, "-c", "import "+imports).Run() == nil {
			return bin
		}
		tried = append(tried, bin)
	}
	msg := fmt.Sprintf("no python3 imports %s (tried %v)", imports, tried)
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s; .ci/run must install it", msg)
	}
	t.Skip(msg)
	return ""
}

// TestClientMatrix drives the clients agents use through the real stack, over plain HTTP and
// decrypted HTTPS, each with the CA trusted the way docs/trust-ca.md says and the one setting
// the docs give it, if any ("Client pitfalls"). Every row checks that the origin saw the
// request and that the gate's audit has it with its verdict.
func TestClientMatrix(t *testing.T) {
	e := startClients(t)
	rows := []struct {
		name string
		run  func(t *testing.T, e *clientsEnv)
	}{
		{"curl", clientCurl},
		{"git clone and push", clientGit},
		{"python urllib", clientPython("urllib", nil, `
import sys, urllib.request
for u in sys.argv[1:]:
    with urllib.request.urlopen(u, timeout=10) as r:
        print(r.read().decode())
`)},
		{"python requests", clientPython("requests", []string{"requests"}, `
import sys, requests
for u in sys.argv[1:]:
    r = requests.get(u, timeout=10)
    r.raise_for_status()
    print(r.text)
`)},
		{"python httpx", clientPython("httpx", []string{"httpx"}, `
import sys, httpx
for u in sys.argv[1:]:
    r = httpx.get(u, timeout=10)
    r.raise_for_status()
    print(r.text)
`)},
		{"pip install", clientPip},
		{"pip install refused", clientPipRefused},
		{"npm install", clientNpm},
		{"npm install refused", clientNpmRefused},
		{"node https", clientNodeHTTPS},
		{"node fetch", clientNodeFetch},
		{"go net/http", clientGo},
		// Run by lox run -- as a user runs them: the proxy URL as lox sets it, the machine's
		// npmrc and pip.conf with a CA setting of their own.
		{"git under lox run --", clientGitUnderLox},
		{"npm under lox run --", clientNpmUnderLox},
		{"pip under lox run --", clientPipUnderLox},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) { row.run(t, e) })
	}
}

// clientCurl: curl takes HTTPS_PROXY in either case but http_proxy only in lower case (it
// ignores HTTP_PROXY, against httpoxy); the CA through CURL_CA_BUNDLE.
func clientCurl(t *testing.T, e *clientsEnv) {
	curl := requireTool(t, "curl")
	t.Logf("%s", firstLine(run(t, nil, "", curl, "--version")))
	ca := "CURL_CA_BUNDLE=" + e.bundle
	plain, tls := e.plainURL("/matrix/curl"), e.tlsURL("/matrix/curl")
	out := run(t, e.clientEnv(t, ca, "http_proxy="+e.up.Gate), "", curl, "-sS", "--fail", "--max-time", "10", plain, "-w", "\n", tls)
	e.throughGate(t, out, plain)
	e.throughGate(t, out, tls)

	// --proxytunnel: curl sends http:// through a CONNECT, and the gate reads it inside.
	tunneled := e.plainURL("/matrix/curl-proxytunnel")
	out = run(t, e.clientEnv(t, ca, "http_proxy="+e.up.Gate), "", curl, "-sS", "--fail", "--max-time", "10", "--proxytunnel", tunneled)
	e.throughCONNECT(t, out, tunneled)

	// Without the lower-case variable curl goes straight to the origin (--resolve points it at
	// the loopback origin, so that nothing asks a DNS server for plain.test).
	bypass := e.plainURL("/matrix/curl-upper-case")
	before := len(e.plain.all())
	out = run(t, e.clientEnv(t, ca), "", curl, "-sS", "--fail", "--max-time", "10",
		"--resolve", fmt.Sprintf("plain.test:%d:127.0.0.1", e.plainPort), bypass)
	if !strings.Contains(out, "origin saw GET /matrix/curl-upper-case") || len(e.plain.all()) != before+1 {
		t.Fatalf("curl with HTTP_PROXY only did not reach the origin directly:\n%s", out)
	}
	e.neverAudited(t, bypass)
}

// clientGit clones through the gate and pushes; the push asks and is approved with lox approve.
func clientGit(t *testing.T, e *clientsEnv) {
	requireTool(t, "git")
	t.Logf("%s", firstLine(run(t, nil, "", "git", "--version")))
	env := e.clientEnv(t, "GIT_SSL_CAINFO="+e.bundle, "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	work := t.TempDir()
	repo := fmt.Sprintf("https://git.test:%d/repo.git", e.gitPort)
	run(t, env, work, "git", "clone", repo, "clone")
	clone := filepath.Join(work, "clone")
	origin := func() string {
		out, err := gitCmd(t, e.repos, "--git-dir", filepath.Join(e.repos, "repo.git"), "rev-parse", "main")
		if err != nil {
			t.Fatalf("rev-parse: %v\n%s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := strings.TrimSpace(run(t, env, clone, "git", "rev-parse", "HEAD")); got != origin() {
		t.Fatalf("the clone is at %s, the origin at %s", got, origin())
	}
	rec := e.audited(t, "tunnel-request", "POST", repo+"/git-upload-pack")
	if rec["verdict"] != "FREE" || rec["rule"] != "git-fetch" || rec["status"] != float64(200) {
		t.Errorf("audit record of the clone: %v", rec)
	}

	run(t, env, clone, "git", "commit", "--allow-empty", "-m", "second")
	want := strings.TrimSpace(run(t, env, clone, "git", "rev-parse", "HEAD"))
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := runErr(t, env, clone, "git", "push", "origin", "main")
		done <- result{out, err}
	}()
	ask := &askEnv{running: e.running}
	tk := ask.waitTicket(t, repo+"/git-receive-pack")
	if out, err := ask.lox(t, "approve", tk.ID); err != nil {
		t.Fatalf("lox approve: %v\n%s", err, out)
	}
	res := <-done
	if res.err != nil {
		t.Fatalf("git push: %v\n%s", res.err, res.out)
	}
	if got := origin(); got != want {
		t.Fatalf("after the push the origin is at %s, want %s", got, want)
	}
	rec = e.audited(t, "tunnel-request", "POST", repo+"/git-receive-pack")
	if rec["verdict"] != "ASK" || rec["rule"] != "git-push" || rec["status"] != float64(200) || !strings.HasPrefix(fmt.Sprint(rec["approver"]), "cli:") {
		t.Errorf("audit record of the push: %v", rec)
	}
}

// clientPython runs script (which GETs each URL it is given and prints the body) with Python's
// CA variable: REQUESTS_CA_BUNDLE for requests (it ignores SSL_CERT_FILE), SSL_CERT_FILE for
// the others.
func clientPython(slug string, modules []string, script string) func(*testing.T, *clientsEnv) {
	return func(t *testing.T, e *clientsEnv) {
		py := python(t, modules...)
		ca := "SSL_CERT_FILE=" + e.bundle
		if slug == "requests" {
			ca = "REQUESTS_CA_BUNDLE=" + e.bundle
		}
		ver := run(t, nil, "", py, "-c", "import sys; print(sys.version.split()[0])")
		for _, m := range modules {
			ver += " " + m + " " + run(t, nil, "", py, "-c", "import "+m+"; print("+m+".__version__)")
		}
		t.Logf("python %s", strings.ReplaceAll(ver, "\n", ""))
		plain, tls := e.plainURL("/matrix/"+slug), e.tlsURL("/matrix/"+slug)
		out := run(t, e.clientEnv(t, ca), "", py, "-c", script, plain, tls)
		e.throughGate(t, out, plain)
		e.throughGate(t, out, tls)
	}
}

// pip returns a python3 with pip and the environment pip runs in: PIP_CERT, and
// PIP_CONFIG_FILE=/dev/null so that this machine's pip.conf (and its cert) stays out of the test.
func (e *clientsEnv) pip(t *testing.T) (string, []string) {
	py := python(t, "pip")
	t.Logf("%s", firstLine(run(t, nil, "", py, "-m", "pip", "--version")))
	return py, e.clientEnv(t, "PIP_CERT="+e.bundle, "PIP_CONFIG_FILE="+os.DevNull, "PIP_DISABLE_PIP_VERSION_CHECK=1", "PIP_NO_INPUT=1")
}

// pipInstall is the pip install of project from the local index into target.
func (e *clientsEnv) pipInstall(target, project string) []string {
	index := fmt.Sprintf("https://pypi.test:%d/simple/", e.pypiPort)
	return []string{"-m", "pip", "install", "--index-url", index, "--no-deps", "--no-cache-dir", "--target", target, project}
}

// clientPip installs a wheel from the local index with PIP_CERT.
func clientPip(t *testing.T, e *clientsEnv) {
	py, env := e.pip(t)
	target := t.TempDir()
	run(t, env, "", py, e.pipInstall(target, "lockdemo")...)
	if out := run(t, append(env, "PYTHONPATH="+target), "", py, "-c", "import lockdemo; print(lockdemo.VALUE)"); !strings.Contains(out, "lockdemo 0.1.0") {
		t.Fatalf("the installed package says %q", out)
	}
	host := fmt.Sprintf("pypi.test:%d", e.pypiPort)
	for _, path := range []string{"/simple/lockdemo/", "/files/" + wheelName} {
		if !e.pypi.saw("GET", host, path) {
			t.Errorf("the index did not see GET %s; it saw %v", path, e.pypi.all())
		}
		rec := e.audited(t, "tunnel-request", "GET", "https://"+host+path)
		if rec["verdict"] != "FREE" || rec["status"] != float64(200) {
			t.Errorf("audit record of %s: %v", path, rec)
		}
	}
}

// npmInstall returns a function that runs npm install of spec in a new project directory,
// with NODE_EXTRA_CA_CERTS, the registry stand-in and extra settings, and returns the directory,
// npm's combined output and its error. The user and global npmrc are empty files: this
// machine's (a cafile in the global npmrc) stays out of the test.
func (e *clientsEnv) npmInstall(t *testing.T) func(t *testing.T, spec string, extra ...string) (string, string, error) {
	npm := requireTool(t, "npm")
	requireTool(t, "node")
	userrc, globalrc := filepath.Join(t.TempDir(), "npmrc"), filepath.Join(t.TempDir(), "npmrc")
	os.WriteFile(userrc, nil, 0o644)
	os.WriteFile(globalrc, nil, 0o644)
	base := []string{"NODE_EXTRA_CA_CERTS=" + e.up.CACert, "npm_config_registry=" + e.npmURL("/registry/"),
		"npm_config_userconfig=" + userrc, "npm_config_globalconfig=" + globalrc,
		"npm_config_audit=false", "npm_config_fund=false", "npm_config_update_notifier=false", "npm_config_fetch_retries=0"}
	t.Logf("npm %s, node %s", firstLine(run(t, nil, "", npm, "--version")), firstLine(run(t, nil, "", "node", "--version")))
	return func(t *testing.T, spec string, extra ...string) (string, string, error) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"name":"matrix","version":"1.0.0","private":true}`), 0o644)
		env := e.clientEnv(t, append(append(base, "npm_config_cache="+t.TempDir()), extra...)...)
		out, err := runErr(t, env, dir, npm, "install", "--no-save", spec)
		return dir, out, err
	}
}

func (e *clientsEnv) npmURL(path string) string {
	return fmt.Sprintf("https://npm.test:%d%s", e.npmPort, path)
}

// clientNpm installs a tarball URL; the registry is a stand-in on the same origin, so that npm
// contacts nothing else.
func clientNpm(t *testing.T, e *clientsEnv) {
	install := e.npmInstall(t)
	host := hostOf(e.npmURL("/"))
	tarball := e.npmURL("/lockdemo-1.0.0.tgz")
	dir, out, err := install(t, tarball)
	if err != nil {
		t.Fatalf("npm install: %v\n%s", err, out)
	}
	if pj, err := os.ReadFile(filepath.Join(dir, "node_modules", "lockdemo", "package.json")); err != nil || !bytes.Contains(pj, []byte(`"version":"1.0.0"`)) {
		t.Fatalf("node_modules/lockdemo/package.json: %v %s\n%s", err, pj, out)
	}
	if !e.npm.saw("GET", host, "/lockdemo-1.0.0.tgz") {
		t.Errorf("the registry did not see the tarball's GET; it saw %v", e.npm.all())
	}
	rec := e.audited(t, "tunnel-request", "GET", tarball)
	if rec["verdict"] != "FREE" || rec["status"] != float64(200) {
		t.Errorf("audit record of the tarball: %v", rec)
	}

	// An npmrc with a cafile (this machine's /etc/npmrc names the system bundle) replaces Node's
	// roots, NODE_EXTRA_CA_CERTS included: npm then needs its cafile pointed at the bundle.
	withCafile := filepath.Join(t.TempDir(), "npmrc")
	os.WriteFile(withCafile, []byte("cafile="+systemRoots(t)+"\n"), 0o644)
	if _, out, err := install(t, tarball, "npm_config_globalconfig="+withCafile); err == nil || !strings.Contains(out, "SELF_SIGNED_CERT_IN_CHAIN") {
		t.Errorf("npm install with a cafile of the system roots only: %v, want SELF_SIGNED_CERT_IN_CHAIN\n%s", err, out)
	}
	if _, out, err := install(t, tarball, "npm_config_globalconfig="+withCafile, "npm_config_cafile="+e.bundle); err != nil {
		t.Errorf("npm install with npm_config_cafile: %v\n%s", err, out)
	}
}

// refusedCode and refusedAdvice are what a refused install must show in the tool's own output:
// the code of the matrix policy's deny rule and a phrase of that code's advice.
const (
	refusedCode   = "E_RULE"
	refusedAdvice = "ask the user to change the rule"
)

// shownRefusal checks that a client's output names the refusal's code and its advice, and that
// the gate refused url inside its tunnel with the rule no-lockdeny while the origin w never saw
// it.
func (e *clientsEnv) shownRefusal(t *testing.T, out string, w *witness, url string) {
	t.Helper()
	if !strings.Contains(out, refusedCode) || !strings.Contains(out, refusedAdvice) {
		t.Errorf("the client's output does not show the refusal (%s, %q):\n%s", refusedCode, refusedAdvice, out)
	}
	u, _ := neturl.Parse(url)
	if w.saw("GET", u.Host, u.RequestURI()) {
		t.Errorf("the origin saw the refused GET %s", url)
	}
	rec := e.audited(t, "tunnel-request", "GET", url)
	if rec["verdict"] != "DENY" || rec["rule"] != "no-lockdeny" || rec["code"] != refusedCode || rec["status"] != float64(403) {
		t.Errorf("audit record of %s: %v", url, rec)
	}
}

// clientPipRefused installs lockdeny, whose wheel the policy denies: pip shows the gate's reason
// phrase in its "HTTP error 403" line.
func clientPipRefused(t *testing.T, e *clientsEnv) {
	py, env := e.pip(t)
	target := t.TempDir()
	out, err := runErr(t, env, "", py, e.pipInstall(target, "lockdeny")...)
	t.Logf("pip install lockdeny:\n%s", out)
	if err == nil {
		t.Fatalf("pip install of a denied wheel succeeded:\n%s", out)
	}
	e.shownRefusal(t, out, e.pypi, fmt.Sprintf("https://pypi.test:%d/files/%s", e.pypiPort, deniedWheel))
}

// clientNpmRefused installs lockdeny from the registry, whose document the policy denies (npm
// asks for JSON: the JSON body's error shows too), and from a tarball URL, which the policy
// denies too (npm asks for anything: the reason phrase shows).
func clientNpmRefused(t *testing.T, e *clientsEnv) {
	install := e.npmInstall(t)
	for _, c := range []struct {
		spec, url string
		json      bool // npm asks for JSON and prints the body's "error"
	}{
		{"lockdeny", e.npmURL("/registry/lockdeny"), true},
		{e.npmURL("/lockdeny-1.0.0.tgz"), e.npmURL("/lockdeny-1.0.0.tgz"), false},
	} {
		_, out, err := install(t, c.spec)
		t.Logf("npm install %s:\n%s", c.spec, out)
		if err == nil {
			t.Errorf("npm install %s succeeded:\n%s", c.spec, out)
			continue
		}
		e.shownRefusal(t, out, e.npm, c.url)
		// The JSON body's error holds the reason too, which the status line never does.
		if why := `rule "no-lockdeny" (deny)`; c.json && !strings.Contains(out, "lockhttp refused this request ("+refusedCode+", rule no-lockdeny): "+why) {
			t.Errorf("npm install %s does not show the JSON refusal's error (with %s):\n%s", c.spec, why, out)
		}
	}
}

// nodeTunnel GETs each URL with Node's http and https modules, which ignore the proxy variables
// (before Node 22.21 and 24.5): https through an agent that opens a CONNECT to the gate, http
// in absolute form to the gate. Both name the target in Host: http.request would send the
// proxy's address, which the gate refuses for an absolute-form request (framing:host-mismatch).
const nodeTunnel = `
const http = require('http'), https = require('https'), tls = require('tls');
const proxy = new URL(process.env.HTTPS_PROXY);
class TunnelAgent extends https.Agent {
  createConnection(opts, done) {
    const target = opts.host + ':' + opts.port;
    http.request({host: proxy.hostname, port: proxy.port, method: 'CONNECT', path: target, headers: {host: target}})
      .on('connect', (res, socket) => {
        if (res.statusCode !== 200) return done(new Error('CONNECT ' + target + ': ' + res.statusCode));
        done(null, tls.connect({socket, servername: opts.servername || opts.host}));
      })
      .on('error', done)
      .end();
  }
}
function body(res, resolve, reject) {
  let b = '';
  res.setEncoding('utf8');
  res.on('data', d => b += d).on('end', () => res.statusCode === 200 ? resolve(b) : reject(new Error(res.statusCode + ' ' + b)));
}
function get(u) {
  return new Promise((resolve, reject) => {
    const url = new URL(u);
    const req = url.protocol === 'https:'
      ? https.get(u, {agent: new TunnelAgent()}, res => body(res, resolve, reject))
      // Plain HTTP: the absolute URL to the proxy, and the origin's Host.
      : http.get({host: proxy.hostname, port: proxy.port, path: u, headers: {host: url.host}}, res => body(res, resolve, reject));
    req.on('error', reject);
  });
}
(async () => { for (const u of process.argv.slice(1)) console.log(await get(u)); })().catch(e => { console.error(e); process.exit(1); });
`

func clientNodeHTTPS(t *testing.T, e *clientsEnv) {
	node := requireTool(t, "node")
	t.Logf("node %s", firstLine(run(t, nil, "", node, "--version")))
	plain, tls := e.plainURL("/matrix/node-https"), e.tlsURL("/matrix/node-https")
	out := run(t, e.clientEnv(t, "NODE_EXTRA_CA_CERTS="+e.up.CACert), "", node, "-e", nodeTunnel, plain, tls)
	e.throughGate(t, out, plain)
	e.throughGate(t, out, tls)
}

const nodeFetch = `
(async () => {
  for (const u of process.argv.slice(1)) {
    const r = await fetch(u);
    if (r.status !== 200) throw new Error(u + ': ' + r.status);
    console.log(await r.text());
  }
})().catch(e => { console.error(e); process.exit(1); });
`

// clientNodeFetch: Node's fetch takes the proxy variables only with NODE_USE_ENV_PROXY=1, from
// Node 22.21 and 24; an older Node ignores them, NODE_USE_ENV_PROXY included, and its fetch goes
// through the gate with undici's ProxyAgent as the global dispatcher, for https:// only.
func clientNodeFetch(t *testing.T, e *clientsEnv) {
	node := requireTool(t, "node")
	ver := firstLine(run(t, nil, "", node, "--version"))
	env := e.clientEnv(t, "NODE_EXTRA_CA_CERTS="+e.up.CACert, "NODE_USE_ENV_PROXY=1")
	if nodeEnvProxy(t, ver) {
		t.Logf("node %s: fetch with NODE_USE_ENV_PROXY=1", ver)
		// undici's proxy agent sends http:// through a CONNECT: the gate reads the plain
		// HTTP inside.
		plain, tls := e.plainURL("/matrix/node-fetch"), e.tlsURL("/matrix/node-fetch")
		out := run(t, env, "", node, "-e", nodeFetch, tls, plain)
		e.throughGate(t, out, tls)
		e.throughCONNECT(t, out, plain)
		return
	}
	// Too old: fetch goes straight to the origin whatever the variables say. The URL names the
	// origin by its address, so that nothing asks a DNS server; through the gate it would be a
	// 403 (floor:ip-literal) and the script would fail.
	t.Logf("node %s: fetch ignores the proxy variables and NODE_USE_ENV_PROXY (22.21 or 24 needed)", ver)
	direct := fmt.Sprintf("http://127.0.0.1:%d/matrix/node-fetch-direct", e.plainPort)
	out := run(t, env, "", node, "-e", nodeFetch, direct)
	if !strings.Contains(out, "origin saw GET /matrix/node-fetch-direct") || !e.plain.saw("GET", fmt.Sprintf("127.0.0.1:%d", e.plainPort), "/matrix/node-fetch-direct") {
		t.Fatalf("node %s fetch did not reach the origin directly:\n%s", ver, out)
	}
	e.neverAudited(t, direct)

	// What works there: undici's ProxyAgent as fetch's global dispatcher (Debian's node-undici,
	// which a Node not built by Debian finds through NODE_PATH). It sends http:// through a
	// CONNECT too, and the gate reads the plain HTTP inside.
	env = append(env, "NODE_PATH=/usr/share/nodejs")
	if _, err := runErr(t, env, "", node, "-e", "require('undici')"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("node cannot load undici (%v); .ci/run must install node-undici", err)
		}
		t.Skipf("node cannot load undici: %v", err)
	}
	plain, tls := e.plainURL("/matrix/node-fetch-undici"), e.tlsURL("/matrix/node-fetch-undici")
	out = run(t, env, "", node, "-e", nodeFetchUndici, tls, plain)
	e.throughGate(t, out, tls)
	e.throughCONNECT(t, out, plain)
}

// nodeFetchUndici fetches each URL with undici's ProxyAgent as the global dispatcher and prints
// the body of a 200, else the status and the gate's rule.
const nodeFetchUndici = `
const { ProxyAgent, setGlobalDispatcher } = require('undici');
setGlobalDispatcher(new ProxyAgent(process.env.HTTPS_PROXY));
(async () => {
  for (const u of process.argv.slice(1)) {
    const r = await fetch(u);
    const body = await r.text();
    console.log(r.status === 200 ? body : u + ': ' + r.status + ' ' + r.headers.get('x-lockhttp-rule'));
  }
})().catch(e => { console.error(e); process.exit(1); });
`

// nodeEnvProxy reports whether Node version ver (v22.21.0) reads the proxy variables for fetch
// under NODE_USE_ENV_PROXY=1: Node 22.21 and later 22s, and 24 on.
func nodeEnvProxy(t *testing.T, ver string) bool {
	t.Helper()
	var major, minor int
	if _, err := fmt.Sscanf(ver, "v%d.%d", &major, &minor); err != nil {
		t.Fatalf("node --version: %q: %v", ver, err)
	}
	return major >= 24 || major == 22 && minor >= 21
}

const goClient = `package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
)

func main() {
	for _, u := range os.Args[1:] {
		resp, err := http.Get(u)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			fmt.Fprintln(os.Stderr, u, resp.Status, string(b))
			os.Exit(1)
		}
		fmt.Println(string(b))
	}
}
`

// clientGo builds a program that uses net/http's default client (ProxyFromEnvironment) and
// runs it with SSL_CERT_FILE.
func clientGo(t *testing.T, e *clientsEnv) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module matrixclient\n\ngo 1.22\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "main.go"), []byte(goClient), 0o644)
	build := exec.Command("go", "build", "-o", "client", ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOTOOLCHAIN=local", "GOPROXY=off", "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	t.Logf("%s", firstLine(run(t, os.Environ(), "", "go", "version")))
	plain, tls := e.plainURL("/matrix/go"), e.tlsURL("/matrix/go")
	out := run(t, e.clientEnv(t, "SSL_CERT_FILE="+e.bundle), "", filepath.Join(dir, "client"), plain, tls)
	e.throughGate(t, out, plain)
	e.throughGate(t, out, tls)
}

// hostOf is the host:port of URL s.
func hostOf(s string) string {
	u, _ := neturl.Parse(s)
	return u.Host
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

func systemRoots(t *testing.T) string {
	for _, p := range []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Skip("no system root bundle")
	return ""
}

// wheelName is the one package of the local index: a pure-Python wheel built in memory.
// deniedWheel is the wheel of lockdeny, which the index lists and the policy denies.
const (
	wheelName   = "lockdemo-0.1.0-py3-none-any.whl"
	deniedWheel = "lockdeny-0.1.0-py3-none-any.whl"
)

// pypiIndex serves a PEP 503 "simple" index with one project, lockdemo, and its wheel.
func pypiIndex(t *testing.T) http.Handler {
	t.Helper()
	whl := buildWheel(t)
	sum := sha256.Sum256(whl)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /simple/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<!DOCTYPE html><html><body><a href="/simple/lockdemo/">lockdemo</a></body></html>`)
	})
	mux.HandleFunc("GET /simple/lockdemo/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<!DOCTYPE html><html><body><a href="/files/%s#sha256=%s">%s</a></body></html>`, wheelName, hex.EncodeToString(sum[:]), wheelName)
	})
	// lockdeny's page is free; its wheel, which the policy denies, is never served.
	mux.HandleFunc("GET /simple/lockdeny/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<!DOCTYPE html><html><body><a href="/files/%s">%s</a></body></html>`, deniedWheel, deniedWheel)
	})
	mux.HandleFunc("GET /files/"+wheelName, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(whl)
	})
	return mux
}

// buildWheel makes lockdemo 0.1.0 as a wheel: the module, METADATA, WHEEL and a RECORD with
// each file's hash.
func buildWheel(t *testing.T) []byte {
	t.Helper()
	files := []struct{ name, body string }{
		{"lockdemo/__init__.py", "VALUE = \"lockdemo 0.1.0\"\n"},
		{"lockdemo-0.1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: lockdemo\nVersion: 0.1.0\nSummary: the client matrix's package\n"},
		{"lockdemo-0.1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: lockhttp-e2e\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	var record strings.Builder
	for _, f := range files {
		w, err := zw.Create(f.name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(f.body))
		sum := sha256.Sum256([]byte(f.body))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.name, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.body))
	}
	record.WriteString("lockdemo-0.1.0.dist-info/RECORD,,\n")
	w, err := zw.Create("lockdemo-0.1.0.dist-info/RECORD")
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte(record.String()))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// npmRegistry serves the tarball lockdemo-1.0.0.tgz and, under /registry/ (the registry
// stand-in), lockdemo's document naming it; anything else is a 404.
func npmRegistry(t *testing.T) http.Handler {
	t.Helper()
	tgz := buildTarball(t)
	sha512sum, sha1sum := sha512.Sum512(tgz), sha1.Sum(tgz)
	integrity := "sha512-" + base64.StdEncoding.EncodeToString(sha512sum[:])
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == "GET" && r.URL.Path == "/lockdemo-1.0.0.tgz":
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Write(tgz)
		case r.Method == "GET" && r.URL.Path == "/registry/lockdemo":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"name":"lockdemo","dist-tags":{"latest":"1.0.0"},"versions":{"1.0.0":{"name":"lockdemo","version":"1.0.0","main":"index.js",`+
				`"dist":{"tarball":"https://%s/lockdemo-1.0.0.tgz","integrity":"%s","shasum":"%s"}}}}`, r.Host, integrity, hex.EncodeToString(sha1sum[:]))
		default:
			http.NotFound(w, r)
		}
	})
}

// buildTarball makes the npm package lockdemo 1.0.0: package/package.json and package/index.js.
func buildTarball(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, f := range []struct{ name, body string }{
		{"package/package.json", `{"name":"lockdemo","version":"1.0.0","main":"index.js"}`},
		{"package/index.js", "module.exports = 'lockdemo 1.0.0';\n"},
	} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.body)), ModTime: time.Unix(1700000000, 0), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(f.body))
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
