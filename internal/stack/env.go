package stack

import (
	"fmt"
	"io"
	"net/netip"
	"os"
	"regexp"
	"strings"

	"github.com/lockhttp/lockhttp/internal/atomicfile"
	"github.com/lockhttp/lockhttp/internal/display"
)

// Var is one environment variable lox sets for an agent.
type Var struct {
	Name, Value string
}

// The variables lox sets for an agent (AgentVars), by what they get.
var (
	// proxyVars carry the gate's URL (curl reads only the lower-case http_proxy).
	proxyVars = []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"}
	// npmProxyVars carry it too: npm takes an npmrc's proxy or https-proxy over HTTPS_PROXY,
	// and its environment over every npmrc.
	npmProxyVars = []string{"npm_config_proxy", "npm_config_https_proxy"}
	// noProxyVars are set empty: nothing bypasses the gate.
	noProxyVars = []string{"NO_PROXY", "no_proxy"}
	// caAddVars name a file whose CAs are added to the runtime's own roots: they get ca.pem.
	caAddVars = []string{"NODE_EXTRA_CA_CERTS", "DENO_CERT"}
	// caBundleVars name a file that replaces the roots: they get the bundle, the system roots
	// and ca.pem (a spliced host shows its own certificate). Each also beats what a file of
	// the machine's says: GIT_SSL_CAINFO a gitconfig's http.sslCAInfo, PIP_CERT a pip.conf's
	// cert, npm_config_cafile an npmrc's cafile or ca (which would replace Node's roots,
	// NODE_EXTRA_CA_CERTS included); and pip's requests takes REQUESTS_CA_BUNDLE, then
	// CURL_CA_BUNDLE, over PIP_CERT, so all three name the same file.
	caBundleVars = []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO",
		"PIP_CERT", "npm_config_cafile", "AWS_CA_BUNDLE", "CARGO_HTTP_CAINFO", "HTTPLIB2_CA_CERTS", "NIX_SSL_CERT_FILE"}
	// keptVars are taken from lox's environment when set: what a terminal program needs and
	// never a credential. LC_* too.
	keptVars = []string{"PATH", "TERM", "COLORTERM", "LANG", "TZ"}
	// npmOverrides are the npm settings (npm_config_KEY in any case, '_' or '-') that would
	// override the proxy or the CA lox sets for npm.
	npmOverrides = []string{"ca", "cafile", "proxy", "https-proxy", "noproxy"}
	// lockhttpSecrets say what a lockhttp variable that carries a credential holds.
	lockhttpSecrets = map[string]string{
		"LOCKHTTP_UPSTREAM_PROXY_AUTH": "the upstream proxy's credential, which only the gate holds (the agent reaches the upstream proxy through the gate)",
		"LOCKHTTP_AUDIT_DSN":           "the audit database's address and password, which only the gate and the console hold",
	}
)

// AgentVars are the variables that send an agent's clients to the gate at proxyURL and make them
// trust the lockhttp CA, whatever the machine's npmrc, pip.conf, gitconfig or environment say:
// the proxy variables, none bypassing them, caPEM (ca.pem) for the variables that add to a
// runtime's own roots and bundle (the system roots, then ca.pem) for those that replace them.
// lox run -- sets them for the agent it starts and lox env prints them: this is the one list.
func AgentVars(proxyURL, caPEM, bundle string) []Var {
	var vars []Var
	for _, n := range proxyVars {
		vars = append(vars, Var{n, proxyURL})
	}
	for _, n := range npmProxyVars {
		vars = append(vars, Var{n, proxyURL})
	}
	for _, n := range noProxyVars {
		vars = append(vars, Var{n, ""})
	}
	for _, n := range caAddVars {
		vars = append(vars, Var{n, caPEM})
	}
	for _, n := range caBundleVars {
		vars = append(vars, Var{n, bundle})
	}
	return vars
}

// ProxyURL is the gate's proxy URL for an agent named name that reaches the proxy at addr:
// http://NAME:@HOST:PORT. The name is the agent of the audit's records; the empty password after
// the colon keeps git from asking for one (it asks for a user's password otherwise, and fails
// without a terminal).
func ProxyURL(name string, addr netip.AddrPort) string {
	return "http://" + name + ":@" + addr.String()
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// CheckPassName refuses a variable name --agent-env cannot pass: not a name, one lox sets (in
// any case: npm reads its variables so), an npm setting that would override the proxy or CA lox
// sets, or lockhttp's own (LOCKHTTP_*), some of which carry the stack's credentials.
func CheckPassName(name string) error {
	if !envNameRE.MatchString(name) {
		return fmt.Errorf("--agent-env %q is not a variable name (give the name only; the value comes from lox's environment)", display.Line(name, 80))
	}
	if strings.HasPrefix(strings.ToUpper(name), "LOCKHTTP_") {
		what := "lockhttp's own setting, for the stack's processes"
		if s, ok := lockhttpSecrets[strings.ToUpper(name)]; ok {
			what = s
		}
		return fmt.Errorf("--agent-env %s: it carries %s; lockhttp's variables (LOCKHTTP_*) never go to the agent: leave out --agent-env %s", name, what, name)
	}
	for _, v := range AgentVars("", "", "") {
		if strings.EqualFold(v.Name, name) {
			return fmt.Errorf("--agent-env %s: lox sets %s for the agent itself", name, v.Name)
		}
	}
	if strings.EqualFold(name, "HOME") {
		return fmt.Errorf("--agent-env %s: lox sets HOME for the agent itself (its working directory; --agent-dir)", name)
	}
	if len(name) > len("npm_config_") && strings.EqualFold(name[:len("npm_config_")], "npm_config_") {
		key := strings.ToLower(strings.ReplaceAll(name[len("npm_config_"):], "_", "-"))
		for _, k := range npmOverrides {
			if key == k {
				return fmt.Errorf("--agent-env %s: it would override the proxy or the CA lox sets for npm (npm_config_https_proxy, npm_config_cafile)", name)
			}
		}
	}
	return nil
}

// agentEnv is the agent's environment: the kept and passed variables of environ, then set
// (NAME=VALUE), then vars (AgentVars) and HOME, which no passed variable overrides.
func agentEnv(environ, pass, set []string, vars []Var, home string) []string {
	var env []string
	for _, kv := range environ {
		name, _, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		keep := strings.HasPrefix(name, "LC_")
		for _, n := range append(keptVars[:len(keptVars):len(keptVars)], pass...) {
			keep = keep || n == name
		}
		for _, s := range set {
			keep = keep && !strings.HasPrefix(s, name+"=")
		}
		if keep && CheckPassName(name) == nil {
			env = append(env, kv)
		}
	}
	env = append(env, set...)
	for _, v := range vars {
		env = append(env, v.Name+"="+v.Value)
	}
	return append(env, "HOME="+home)
}

// BundleFile is the name of the CA bundle lox writes in the state directory at each start (the
// system roots, then ca.pem), for agents started by hand (lox env); up.json names it.
const BundleFile = "ca-bundle.pem"

// caBundle is the bundle of the lockhttp CA ca for a variable that replaces a runtime's roots:
// the system roots, then ca, so that a spliced host, which shows its own certificate, still
// verifies. from names the system roots' file, "" when there is none.
func caBundle(ca []byte) (bundle []byte, from string) {
	sys, from := systemRoots()
	if len(sys) > 0 && sys[len(sys)-1] != '\n' {
		sys = append(sys, '\n')
	}
	return append(sys, ca...), from
}

// writeBundle writes the bundle of the CA certificate caCert to path (0644), atomically, and
// says so on w when there are no system roots to put in it.
func writeBundle(path, caCert string, w io.Writer) error {
	ca, err := atomicfile.ReadFile(caCert, 1<<20)
	if err != nil {
		return fmt.Errorf("the CA certificate: %w", err)
	}
	bundle, from := caBundle(ca)
	if from == "" {
		fmt.Fprintf(w, "lox: no system roots found: %s holds the lockhttp CA alone (a spliced host will not verify)\n", path)
	}
	return atomicfile.WriteFile(path, bundle, 0o644)
}

// systemRoots reads the system's CA bundle: the file SSL_CERT_FILE names for lox, else the first
// of the files Go's crypto/x509 reads on Linux. from is "" when there is none.
func systemRoots() (pem []byte, from string) {
	candidates := []string{
		"/etc/ssl/certs/ca-certificates.crt",                // Debian, Ubuntu, Gentoo, Arch
		"/etc/pki/tls/certs/ca-bundle.crt",                  // Fedora, RHEL 6
		"/etc/ssl/ca-bundle.pem",                            // openSUSE
		"/etc/pki/tls/cacert.pem",                           // OpenELEC
		"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", // CentOS, RHEL 7
		"/etc/ssl/cert.pem",                                 // Alpine
	}
	if f := os.Getenv("SSL_CERT_FILE"); f != "" {
		candidates = append([]string{f}, candidates...)
	}
	for _, c := range candidates {
		if data, err := atomicfile.ReadFile(c, 16<<20); err == nil && len(data) > 0 {
			return data, c
		}
	}
	return nil, ""
}
