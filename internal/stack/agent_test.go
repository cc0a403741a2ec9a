package stack

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestAgentEnv(t *testing.T) {
	environ := []string{"PATH=/usr/bin:/bin", "TERM=xterm", "LC_ALL=C.UTF-8", "HOME=/root",
		"AWS_SECRET_ACCESS_KEY=operator-secret", "ANTHROPIC_API_KEY=sk-pass-me", "HTTPS_PROXY=http://elsewhere:1",
		"NO_PROXY=*", "SSL_CERT_FILE=/operator/roots.pem", "SUDO_USER=alice",
		// What the operator's environment may carry that would beat lox's settings, or hand the
		// agent the stack's credentials: none of it reaches the agent, passed or not.
		"REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt", "NPM_CONFIG_CAFILE=/etc/ssl/certs/ca-certificates.crt",
		"npm_config_ca=PEM", "LOCKHTTP_UPSTREAM_PROXY_AUTH=u:p", "LOCKHTTP_AUDIT_DSN=postgres://u:p@db/audit"}
	pass := []string{"ANTHROPIC_API_KEY", "HTTPS_PROXY", "REQUESTS_CA_BUNDLE", "NPM_CONFIG_CAFILE", "npm_config_ca", "LOCKHTTP_UPSTREAM_PROXY_AUTH", "LOCKHTTP_AUDIT_DSN"}
	env := agentEnv(environ, pass, nil, AgentVars("http://claude:@127.0.0.1:3130", "/r/ca.pem", "/r/ca-bundle.pem"), "/r/work")
	got := map[string][]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = append(got[k], v)
	}
	want := map[string]string{
		"PATH": "/usr/bin:/bin", "TERM": "xterm", "LC_ALL": "C.UTF-8", "ANTHROPIC_API_KEY": "sk-pass-me", "HOME": "/r/work",
		"NO_PROXY": "", "no_proxy": "",
	}
	for _, n := range slices.Concat(proxyVars, npmProxyVars) {
		want[n] = "http://claude:@127.0.0.1:3130"
	}
	for _, n := range caAddVars {
		want[n] = "/r/ca.pem"
	}
	for _, n := range caBundleVars {
		want[n] = "/r/ca-bundle.pem"
	}
	for k, v := range want {
		if vs := got[k]; len(vs) != 1 || vs[0] != v {
			t.Errorf("%s = %q, want exactly %q", k, vs, v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s reached the agent: only kept, passed and lox's own variables may", k)
		}
	}
	// docs/trust-ca.md: each runtime's variable, and what beats a file of the machine's (an
	// npmrc's cafile, a pip.conf's cert, a gitconfig's http.sslCAInfo, an npmrc's proxy).
	for n, file := range map[string]string{"NODE_EXTRA_CA_CERTS": "/r/ca.pem", "REQUESTS_CA_BUNDLE": "/r/ca-bundle.pem",
		"GIT_SSL_CAINFO": "/r/ca-bundle.pem", "PIP_CERT": "/r/ca-bundle.pem", "CURL_CA_BUNDLE": "/r/ca-bundle.pem",
		"SSL_CERT_FILE": "/r/ca-bundle.pem", "npm_config_cafile": "/r/ca-bundle.pem", "npm_config_https_proxy": "http://claude:@127.0.0.1:3130"} {
		if vs := got[n]; len(vs) != 1 || vs[0] != file {
			t.Errorf("%s = %q, want %s", n, vs, file)
		}
	}
}

func TestProxyURL(t *testing.T) {
	// The colon: git asks for a password for a user without one.
	if got, want := ProxyURL("a", netip.MustParseAddrPort("198.18.0.1:3130")), "http://a:@198.18.0.1:3130"; got != want {
		t.Errorf("%s, want %s", got, want)
	}
	if got, want := ProxyURL("a", netip.MustParseAddrPort("[::1]:3130")), "http://a:@[::1]:3130"; got != want {
		t.Errorf("%s, want %s", got, want)
	}
}

func TestRedirectedPorts(t *testing.T) {
	if got := redirectedPorts([]int{443, 8443, 53, 80, 22, 8443}); !slices.Equal(got, []uint16{22, 80, 443, 8443}) {
		t.Errorf("%v", got)
	}
	if got := redirectedPorts(nil); !slices.Equal(got, []uint16{80, 443}) {
		t.Errorf("%v", got)
	}
}

func TestCheckAgentUID(t *testing.T) {
	operators := []int{0, 1000, 1001}
	for uid, want := range map[int]string{
		DefaultAgentUID: "",
		20000:           "",
		0:               "is root",
		1000:            "is the operator's",
		1001:            "is the operator's",
		10003:           "a lockhttp service's",
		10004:           "a lockhttp service's",
		10021:           "a lockhttp service's",
		10000:           "lockhttp group",
		65534:           "nobody",
		-1:              "not a uid",
		1 << 32:         "not a uid",
	} {
		err := CheckAgentUID(uid, operators)
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("uid %d: %v, want %q", uid, err, want)
		}
	}
	if DefaultAgentUID == 10003 || DefaultAgentUID == 10004 || DefaultAgentUID == 10021 {
		t.Error("the default agent uid is a compose service's")
	}
}

func TestCheckAgentName(t *testing.T) {
	for _, ok := range []string{"claude", "sh", "agent-1", "a.b_c"} {
		if err := CheckAgentName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a b", "a@b", "a:b", "-x", "a/b", strings.Repeat("a", 65), "\x1b[31m"} {
		if err := CheckAgentName(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestCapsHeld(t *testing.T) {
	root := []byte("Name:\tlox\nCapInh:\t0000000000000000\nCapPrm:\t000001ffffffffff\nCapEff:\t000001ffffffffff\n")
	user := []byte("Name:\tlox\nCapEff:\t0000000000000000\n")
	setuidOnly := []byte("CapEff:\t00000000000000c0\n") // SETUID, SETGID: no CHOWN, no KILL
	if capsHeld(root)&neededCaps != neededCaps {
		t.Error("root lacks the capabilities")
	}
	if capsHeld(user)&neededCaps == neededCaps || capsHeld(setuidOnly)&neededCaps == neededCaps || capsHeld(nil) != 0 {
		t.Error("capabilities found where there are none")
	}
}

// openDirs makes t.TempDir() and its parent searchable by others, so that only the modes the
// test sets decide.
func openDirs(t *testing.T) string {
	t.Helper()
	base := t.TempDir()
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	return base
}

func TestCheckStateDir(t *testing.T) {
	const agent = 4242
	base := openDirs(t)
	shut := filepath.Join(base, "shut")
	os.Mkdir(shut, 0o700)
	if err := checkStateDir(shut, agent, agent); err != nil {
		t.Errorf("a 0700 state directory refused: %v", err)
	}
	open := filepath.Join(base, "open")
	os.Mkdir(open, 0o700)
	os.Chmod(open, 0o711)
	if err := checkStateDir(open, agent, agent); err == nil || !strings.Contains(err.Error(), "is mode 0711") || !strings.Contains(err.Error(), "chmod 700 "+open) {
		t.Errorf("a 0711 state directory: %v", err)
	}
	writable := filepath.Join(base, "writable")
	os.Mkdir(writable, 0o777)
	os.Chmod(writable, 0o777)
	inner := filepath.Join(writable, "state")
	os.Mkdir(inner, 0o700)
	if err := checkStateDir(inner, agent, agent); err == nil || !strings.Contains(err.Error(), writable+" can be changed by the agent") {
		t.Errorf("a state directory in a world-writable directory: %v", err)
	}
	os.Chmod(writable, os.ModeSticky|0o777) // like /tmp: the sticky bit keeps others' entries in place
	if err := checkStateDir(inner, agent, agent); err != nil {
		t.Errorf("a state directory in a sticky directory: %v", err)
	}
	if os.Geteuid() == 0 {
		owned := filepath.Join(base, "agents")
		os.Mkdir(owned, 0o755)
		os.Chown(owned, agent, agent)
		st := filepath.Join(owned, "state")
		os.Mkdir(st, 0o700)
		if err := checkStateDir(st, agent, agent); err == nil || !strings.Contains(err.Error(), owned+" can be changed by the agent (uid 4242)") {
			t.Errorf("a state directory in the agent's: %v", err)
		}
	}
}

func TestUnsearchable(t *testing.T) {
	const agent = 4242 // owns nothing here: others' bits decide
	base := openDirs(t)
	shut := filepath.Join(base, "shut")
	os.MkdirAll(filepath.Join(shut, "inner"), 0o700)
	if got := unsearchable(filepath.Join(shut, "inner"), agent, agent); got != shut {
		t.Errorf("under a 0700 directory: %q, want %q", got, shut)
	}
	open := filepath.Join(base, "open")
	os.MkdirAll(filepath.Join(open, "inner"), 0o711)
	os.Chmod(open, 0o711)
	os.Chmod(filepath.Join(open, "inner"), 0o711)
	if got := unsearchable(filepath.Join(open, "inner"), agent, agent); got != "" {
		t.Errorf("under 0711 directories: %q, want none", got)
	}
}

func TestRelated(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"/s", "/s", true}, {"/s/agent", "/s", true}, {"/s", "/s/agent", true},
		{"/s2", "/s", false}, {"/a/..s", "/a", true}, {"/work", "/state", false},
	} {
		if got := related(tc.a, tc.b); got != tc.want {
			t.Errorf("related(%q, %q) = %v", tc.a, tc.b, got)
		}
	}
}

func TestCheckPassName(t *testing.T) {
	for _, n := range slices.Concat(proxyVars, npmProxyVars, noProxyVars, caAddVars, caBundleVars, []string{"HOME"}) {
		if CheckPassName(n) == nil {
			t.Errorf("%s may be passed, but lox sets it", n)
		}
	}
	for name, want := range map[string]string{
		"ANTHROPIC_API_KEY":            "",
		"GIT_CONFIG_SYSTEM":            "",
		"npm_config_loglevel":          "",
		"PIP_INDEX_URL":                "",
		"NPM_CONFIG_CAFILE":            "lox sets npm_config_cafile",
		"Http_Proxy":                   "lox sets HTTP_PROXY",
		"npm_config_ca":                "override the proxy or the CA",
		"NPM_CONFIG_HTTPS-PROXY":       "not a variable name",
		"npm_config_https_proxy":       "lox sets npm_config_https_proxy",
		"npm_config_noproxy":           "override the proxy or the CA",
		"LOCKHTTP_UPSTREAM_PROXY_AUTH": "the upstream proxy's credential",
		"LOCKHTTP_AUDIT_DSN":           "the audit database's address and password",
		"lockhttp_audit_dsn":           "the audit database's address and password",
		"LOCKHTTP_HUB_TOKEN":           "lockhttp's own setting",
		"A=B":                          "not a variable name",
	} {
		err := CheckPassName(name)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", name, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %v, want %q", name, err, want)
		case want != "" && strings.HasPrefix(strings.ToUpper(name), "LOCKHTTP_") && !strings.Contains(err.Error(), "leave out --agent-env "+name):
			t.Errorf("%s: %v, want the fix", name, err)
		}
	}
}
