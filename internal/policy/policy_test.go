package policy

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBadFiles loads every file in testdata/bad; each names the errors it must give in
// "# want: " lines at its top.
func TestBadFiles(t *testing.T) {
	files, err := filepath.Glob("testdata/bad/*.toml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata: %v", err)
	}
	for _, f := range files {
		name := filepath.Base(f)
		t.Run(strings.TrimSuffix(name, ".toml"), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var wants []string
			sc := bufio.NewScanner(bytes.NewReader(data))
			for sc.Scan() {
				if w, ok := strings.CutPrefix(sc.Text(), "# want: "); ok {
					wants = append(wants, w)
				}
			}
			if len(wants) == 0 {
				t.Fatal("no # want: line")
			}
			_, err = Load(name, data)
			if err == nil {
				t.Fatalf("loaded without error; want %q", wants)
			}
			for _, w := range wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n%v\ndoes not contain\n%s", err, w)
				}
			}
		})
	}
}

func TestShippedDefaultLoads(t *testing.T) {
	data, err := os.ReadFile("../../policy/default.toml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := Load("default.toml", data)
	if err != nil {
		t.Fatal(err)
	}
	if !p.HasContainer("local") {
		t.Error("the default policy must name the container local")
	}
}

const testPolicy = `
version = 1
trusted = ["github.com", "*.githubusercontent.com", "registry.npmjs.org", "docs.example.com"]
deny = ["pastebin.com", "*.ngrok.io"]

[[rule]]
name = "gh-push"
hosts = ["github.com"]
methods = ["POST"]
paths = ["/*/*.git/git-receive-pack", "/*/*/git-receive-pack"]
verdict = "ask"

[[rule]]
name = "gh-fetch"
hosts = ["github.com"]
methods = ["POST"]
paths = ["/**/git-upload-pack"]
verdict = "free"

[[rule]]
name = "npm-publish"
hosts = ["registry.npmjs.org"]
methods = ["PUT"]
verdict = "ask"

[[rule]]
name = "api-free"
hosts = ["api.example.com"]
verdict = "free"

[[rule]]
name = "api-admin"
hosts = ["api.example.com"]
paths = ["/admin/**"]
verdict = "deny"

[[rule]]
name = "tunnel-ok"
hosts = ["tunnel.example.com"]
methods = ["CONNECT"]
verdict = "free"

[[rule]]
name = "everywhere-dns"
hosts = ["*"]
paths = ["/secret-dump"]
verdict = "deny"

[[rule]]
name = "cdn-reads"
hosts = ["*.cdn.example.com"]
methods = ["GET"]
verdict = "free"

[sources]
local = ["127.0.0.0/8"]
`

func mustLoad(t testing.TB, src string) *Policy {
	t.Helper()
	p, err := Load("test.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestEvaluate(t *testing.T) {
	p := mustLoad(t, testPolicy)
	cases := []struct {
		name    string
		req     Request
		verdict Verdict
		code    Code
		rule    string
		reason  string
	}{
		{"trusted read", Request{Host: "github.com", Method: "GET", Path: "/owner/repo"}, Free, "", RuleTrusted, "reads"},
		{"trusted head", Request{Host: "github.com", Method: "HEAD", Path: "/"}, Free, "", RuleTrusted, ""},
		{"trusted write asks", Request{Host: "github.com", Method: "DELETE", Path: "/x"}, Ask, "", RuleDefault, "trusted for reads"},
		{"push asks by rule", Request{Host: "github.com", Method: "POST", Path: "/o/r.git/git-receive-pack"}, Ask, "", "gh-push", `rule "gh-push" (ask)`},
		{"push without .git", Request{Host: "github.com", Method: "POST", Path: "/o/r/git-receive-pack"}, Ask, "", "gh-push", ""},
		{"push with case games", Request{Host: "github.com", Method: "POST", Path: "/o/r.git/GIT-RECEIVE-PACK"}, Ask, "", "gh-push", ""},
		{"push with encoded dash", Request{Host: "github.com", Method: "POST", Path: "/o/r.git/git%2Dreceive-pack"}, Ask, "", "gh-push", ""},
		{"push with dot segments", Request{Host: "github.com", Method: "POST", Path: "/o/x/../r.git/./git-receive-pack"}, Ask, "", "gh-push", ""},
		{"push with double slash", Request{Host: "github.com", Method: "POST", Path: "//o//r.git/git-receive-pack"}, Ask, "", "gh-push", ""},
		{"push with encoded slash", Request{Host: "github.com", Method: "POST", Path: "/o%2Fr.git/git-receive-pack"}, Ask, "", "gh-push", ""},
		{"fetch is free", Request{Host: "github.com", Method: "POST", Path: "/o/r.git/git-upload-pack"}, Free, "", "gh-fetch", ""},
		{"fetch case-folded is not freed", Request{Host: "github.com", Method: "POST", Path: "/o/r.git/GIT-UPLOAD-PACK"}, Ask, "", RuleDefault, ""},
		{"suffix trusted", Request{Host: "raw.githubusercontent.com", Method: "GET", Path: "/a"}, Free, "", RuleTrusted, ""},
		{"suffix does not match bare", Request{Host: "githubusercontent.com", Method: "GET", Path: "/a"}, Ask, "", RuleDefault, "not trusted"},
		{"deny list exact", Request{Host: "pastebin.com", Method: "GET", Path: "/"}, Deny, CodeRule, RuleDenyList, `"pastebin.com"`},
		{"deny list suffix", Request{Host: "abc.ngrok.io", Method: "GET", Path: "/"}, Deny, CodeRule, RuleDenyList, `"*.ngrok.io"`},
		{"deny list bare suffix not matched", Request{Host: "ngrok.io", Method: "GET", Path: "/"}, Ask, "", RuleDefault, ""},
		{"untrusted read asks", Request{Host: "example.org", Method: "GET", Path: "/"}, Ask, "", RuleDefault, "not trusted"},
		{"free rule", Request{Host: "api.example.com", Method: "POST", Path: "/v1/x"}, Free, "", "api-free", ""},
		{"deny beats free", Request{Host: "api.example.com", Method: "GET", Path: "/admin/users"}, Deny, CodeRule, "api-admin", ""},
		{"deny beats free, case", Request{Host: "api.example.com", Method: "GET", Path: "/ADMIN/users"}, Deny, CodeRule, "api-admin", ""},
		{"star host rule", Request{Host: "docs.example.com", Method: "GET", Path: "/secret-dump"}, Deny, CodeRule, "everywhere-dns", ""},
		{"unknown method asks", Request{Host: "github.com", Method: "PUSH", Path: "/"}, Ask, "", RuleDefault, ""},
		{"cdn reads", Request{Host: "img.cdn.example.com", Method: "GET", Path: "/a.png"}, Free, "", "cdn-reads", ""},
		{"cdn writes ask", Request{Host: "img.cdn.example.com", Method: "POST", Path: "/a.png"}, Ask, "", RuleDefault, ""},
		// CONNECT decided at the domain.
		{"connect trusted asks", Request{Host: "github.com", Method: "CONNECT", Connect: true}, Ask, "", "gh-push", "tunnel"},
		{"connect whole free", Request{Host: "tunnel.example.com", Method: "CONNECT", Connect: true}, Free, "", "tunnel-ok", ""},
		{"connect free rule with restricted deny asks", Request{Host: "api.example.com", Method: "CONNECT", Connect: true}, Ask, "", "api-admin", "unseen"},
		{"connect untrusted asks, a global restricted rule named", Request{Host: "example.org", Method: "CONNECT", Connect: true}, Ask, "", "everywhere-dns", "unseen"},
		{"connect denied", Request{Host: "pastebin.com", Method: "CONNECT", Connect: true}, Deny, CodeRule, RuleDenyList, ""},
		{"connect cdn get-only free rule asks", Request{Host: "x.cdn.example.com", Method: "CONNECT", Connect: true}, Ask, "", "everywhere-dns", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := p.Evaluate(c.req)
			if d.Verdict != c.verdict || d.Code != c.code || d.Rule != c.rule {
				t.Fatalf("got %v %q rule %q (%s); want %v %q rule %q", d.Verdict, d.Code, d.Rule, d.Reason, c.verdict, c.code, c.rule)
			}
			if !strings.Contains(d.Reason, c.reason) {
				t.Errorf("reason %q does not contain %q", d.Reason, c.reason)
			}
		})
	}
}

func TestGlob(t *testing.T) {
	cases := []struct {
		pattern, path string
		want          bool
	}{
		{"/a/b", "/a/b", true},
		{"/a/b", "/a/b/", false},
		{"/a/b", "/a/bc", false},
		{"/a/*", "/a/b", true},
		{"/a/*", "/a/b/c", false},
		{"/a/*", "/a", false},
		{"/a/**", "/a", true},
		{"/a/**", "/a/b/c", true},
		{"/a/**", "/ab", false},
		{"/**/x", "/x", true},
		{"/**/x", "/a/b/x", true},
		{"/**/x", "/a/b/x/y", false},
		{"/**", "/", true},
		{"/*.git/info/refs", "/r.git/info/refs", true},
		{"/*.git/info/refs", "/r.gitx/info/refs", false},
		{"/a*b*c", "/abc", true},
		{"/a*b*c", "/axxbyyc", true},
		{"/a*b*c", "/axxbyy", false},
		{"/a/**/b/**/c", "/a/x/b/y/z/c", true},
		{"/a/**/b/**/c", "/a/x/c", false},
		{"/", "/", true},
		{"/", "/a", false},
	}
	for _, c := range cases {
		t.Run(c.pattern+" "+c.path, func(t *testing.T) {
			g, err := compileGlob(c.pattern, false)
			if err != nil {
				t.Fatal(err)
			}
			if got := g.match(c.path); got != c.want {
				t.Errorf("match = %v, want %v", got, c.want)
			}
		})
	}
}

func TestCleanPath(t *testing.T) {
	cases := []struct{ in, clean, loose string }{
		{"", "/", "/"},
		{"/", "/", "/"},
		{"/a/b", "/a/b", "/a/b"},
		{"/a/./b", "/a/b", "/a/b"},
		{"/a/../b", "/b", "/b"},
		{"/../../b", "/b", "/b"},
		{"/a/%2e%2e/b", "/b", "/b"},
		{"/a/%2E/b", "/a/b", "/a/b"},
		{"/a//b", "/a/b", "/a/b"},
		{"/a/b/", "/a/b/", "/a/b/"},
		{"/a/%7euser", "/a/~user", "/a/~user"},
		{"/a%2fb", "/a%2Fb", "/a/b"},
		{"/A%5cB", "/A%5CB", "/a/b"},
		{"/a\\b", "/a\\b", "/a/b"},
		{"/%41BC", "/ABC", "/abc"},
		{"/a/..", "/", "/"},
		{"/.well-known/x", "/.well-known/x", "/.well-known/x"},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			cl := CleanPath(c.in)
			if cl != c.clean {
				t.Errorf("CleanPath(%q) = %q, want %q", c.in, cl, c.clean)
			}
			if l := loosePath(cl); l != c.loose {
				t.Errorf("loosePath(%q) = %q, want %q", cl, l, c.loose)
			}
		})
	}
}

func TestSettingsDefaults(t *testing.T) {
	p := mustLoad(t, "version = 1\n")
	if p.Settings.Hold != DefaultHold || p.Settings.ConnectGrant != DefaultConnectGrant ||
		p.Settings.BufferLimit != DefaultBufferLimit || p.Settings.Heuristics != "shadow" {
		t.Errorf("defaults: %+v", p.Settings)
	}
	if fmt.Sprint(p.Floor.AllowPorts) != "[80 443]" {
		t.Errorf("allow_ports default: %v", p.Floor.AllowPorts)
	}
	p = mustLoad(t, "version = 1\n[settings]\nhold = \"5s\"\nbuffer_limit = 4096\n")
	if p.Settings.Hold.Seconds() != 5 || p.Settings.BufferLimit != 4096 {
		t.Errorf("settings: %+v", p.Settings)
	}
}

func TestSources(t *testing.T) {
	p := mustLoad(t, "version = 1\n[sources]\nagent = [\"172.30.0.0/24\"]\nother = [\"10.0.0.7\", \"fd00::/64\"]\n")
	for addr, want := range map[string]string{"172.30.0.9": "agent", "10.0.0.7": "other", "10.0.0.8": "", "fd00::1": "other", "::ffff:172.30.0.2": "agent"} {
		if got := p.Container(mustAddr(t, addr)); got != want {
			t.Errorf("Container(%s) = %q, want %q", addr, got, want)
		}
	}
}

func TestVersionIsHash(t *testing.T) {
	src := []byte("version = 1\n")
	p := mustLoad(t, string(src))
	if p.Version != Hash(src) || !strings.HasPrefix(p.Version, "sha256:") {
		t.Errorf("version %q", p.Version)
	}
}

func TestEvaluateConnect(t *testing.T) {
	p := mustLoad(t, `
version = 1
trusted = ["reads.example.com"]
[[rule]]
name = "tunnel-free"
hosts = ["t.example.com", "both.example.com"]
methods = ["CONNECT"]
verdict = "free"
[[rule]]
name = "all-ask"
hosts = ["both.example.com", "whole.example.com"]
verdict = "ask"
[[rule]]
name = "all-free"
hosts = ["free.example.com", "mixed.example.com"]
verdict = "free"
[[rule]]
name = "mixed-push"
hosts = ["mixed.example.com", "t.example.com"]
methods = ["POST"]
verdict = "deny"
[[rule]]
name = "gone"
hosts = ["gone.example.com"]
verdict = "deny"
[sources]
local = ["127.0.0.1"]
`)
	cases := []struct {
		host    string
		verdict Verdict
		rule    string
	}{
		{"t.example.com", Free, "tunnel-free"}, // explicit CONNECT free wins over a restricted deny
		{"both.example.com", Ask, "all-ask"},   // the most restrictive of whole and CONNECT rules
		{"whole.example.com", Ask, "all-ask"},
		{"free.example.com", Free, "all-free"},   // every request to it is free: so is the tunnel
		{"mixed.example.com", Ask, "mixed-push"}, // the tunnel could carry the denied POST
		{"gone.example.com", Deny, "gone"},
		{"reads.example.com", Ask, RuleDefault}, // trusted means reads only; a tunnel carries writes
		{"other.example.com", Ask, RuleDefault},
	}
	for _, c := range cases {
		t.Run(c.host, func(t *testing.T) {
			d := p.Evaluate(Request{Host: c.host, Method: "CONNECT", Connect: true})
			if d.Verdict != c.verdict || d.Rule != c.rule {
				t.Fatalf("got %v rule %q (%s); want %v rule %q", d.Verdict, d.Rule, d.Reason, c.verdict, c.rule)
			}
		})
	}
}

func TestEvaluateIntercept(t *testing.T) {
	p := mustLoad(t, testPolicy+`
[[rule]]
name = "gone"
hosts = ["gone.example.com"]
verdict = "deny"
[[rule]]
name = "no-tunnel"
hosts = ["notunnel.example.com"]
methods = ["CONNECT"]
verdict = "deny"
`)
	cases := []struct {
		host    string
		verdict Verdict
		rule    string
	}{
		{"github.com", Free, RuleDecrypt},      // restricted rules are decided inside
		{"api.example.com", Free, RuleDecrypt}, // a path-restricted deny is decided inside
		{"pastebin.com", Deny, RuleDenyList},
		{"gone.example.com", Deny, "gone"},          // a whole-host deny refuses the tunnel
		{"notunnel.example.com", Deny, "no-tunnel"}, // so does a deny naming CONNECT
		{"unknown.example.org", Free, RuleDecrypt},
	}
	for _, c := range cases {
		t.Run(c.host, func(t *testing.T) {
			d := p.EvaluateIntercept(c.host, "")
			if d.Verdict != c.verdict || d.Rule != c.rule {
				t.Fatalf("got %v %q (%s); want %v %q", d.Verdict, d.Rule, d.Reason, c.verdict, c.rule)
			}
		})
	}
}
