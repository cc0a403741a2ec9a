package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/console"
	"github.com/lockhttp/lockhttp/internal/policy"
)

// approvedTOML is what the console approved; editedTOML is the file on disk after an edit
// that loosens it (the uploads become free), waiting for review.
const (
	approvedTOML = `version = 1
deny = ["denied.example"]
[sources]
local = ["127.0.0.1"]

[[rule]]
name = "example-read"
hosts = ["example.org"]
methods = ["GET"]
verdict = "free"

[[rule]]
name = "example-upload"
hosts = ["example.org"]
methods = ["POST"]
paths = ["/upload/**"]
verdict = "ask"
`
	editedTOML = `version = 1
deny = ["denied.example"]
[sources]
local = ["127.0.0.1"]

[[rule]]
name = "example-read"
hosts = ["example.org"]
methods = ["GET"]
verdict = "free"

[[rule]]
name = "example-write"
hosts = ["example.org"]
methods = ["POST"]
paths = ["/upload/**"]
verdict = "free"
`
)

// githubToken has the shape of a GitHub token, so the secret checks find it.
var githubToken = "ghp_" + strings.Repeat("a1b2", 9)

type explained struct {
	Verdict, Code, Rule, Reason, Kind string
}

func explainRun(t *testing.T, stdin string, args ...string) (code int, out explained, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(append([]string{"explain"}, args...), strings.NewReader(stdin), &o, &e)
	if code == 0 {
		if err := json.Unmarshal(o.Bytes(), &out); err != nil {
			t.Fatalf("explain %q: stdout %q: %v\nstderr: %s", args, o.String(), err, e.String())
		}
	}
	return code, out, o.String(), e.String()
}

func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestExplainDecides(t *testing.T) {
	dir := t.TempDir()
	pol := writeFile(t, dir, "policy.toml", approvedTOML)
	body := writeFile(t, dir, "body", "token="+githubToken)
	cases := []struct {
		name             string
		args             []string
		stdin            string
		verdict, rule    string
		kind             string // "" when the case does not care
		reasonContaining string
	}{
		{"GET https URL", []string{"--policy", pol, "GET", "https://example.org/"}, "", "FREE", "example-read", "tunnel", ""},
		{"flags after METHOD URL", []string{"GET", "https://example.org/", "--policy", pol}, "", "FREE", "example-read", "tunnel", ""},
		{"GET http URL", []string{"--policy", pol, "GET", "http://example.org/docs?q=1"}, "", "FREE", "example-read", "plain", ""},
		{"-H after the URL replaces Host", []string{"--policy", pol, "GET", "https://example.org/", "-H", "Host: other.example"}, "", "DENY", "floor:tunnel-binding", "tunnel", ""},
		{"-H before and after the URL", []string{"--policy", pol, "-H", "Accept: */*", "GET", "https://example.org/", "-H", "Authorization: Bearer " + githubToken}, "", "DENY", "secret:github", "", "header Authorization"},
		{"POST without a body", []string{"--policy", pol, "POST", "https://example.org/upload/a"}, "", "ASK", "example-upload", "tunnel", ""},
		{"-d with POST", []string{"--policy", pol, "POST", "https://example.org/upload/a", "-d", "token=" + githubToken}, "", "DENY", "secret:github", "", "body"},
		{"--data-file", []string{"POST", "https://example.org/upload/a", "--data-file", body, "--policy", pol}, "", "DENY", "secret:github", "", "body"},
		{"--data-file from stdin", []string{"--policy", pol, "POST", "https://example.org/upload/a", "--data-file", "-"}, "token=" + githubToken, "DENY", "secret:github", "", "body"},
		{"deny list", []string{"--policy", pol, "GET", "https://denied.example/"}, "", "DENY", "deny", "", ""},
		{"CONNECT", []string{"--policy", pol, "CONNECT", "example.org:443"}, "", "FREE", "decrypt", "connect-decrypted", ""},
		{"CONNECT without decryption", []string{"--policy", pol, "CONNECT", "example.org:443", "--no-decrypt"}, "", "ASK", "", "connect-domain", ""},
		{"after --", []string{"--policy", pol, "--", "GET", "https://example.org/"}, "", "FREE", "example-read", "tunnel", ""},
		{"request file on stdin", []string{"--policy", pol, "-"}, "GET http://example.org/ HTTP/1.1\nHost: example.org\n\n", "FREE", "example-read", "plain", ""},
		{"request file", []string{"--policy", pol, writeFile(t, dir, "req", "POST https://example.org/upload/x HTTP/1.1\r\nHost: example.org\r\nContent-Length: 2\r\n\r\nhi")}, "", "ASK", "example-upload", "tunnel", ""},
		{"request file: CONNECT needs no Host", []string{"--policy", pol, "-"}, "CONNECT example.org:443 HTTP/1.1\n\n", "FREE", "decrypt", "connect-decrypted", ""},
		{"request file: HTTP/1.0 URL needs no Host", []string{"--policy", pol, "-"}, "GET http://example.org/ HTTP/1.0\n\n", "FREE", "example-read", "plain", ""},
		{"request file: origin-form with a Host is the gate's refusal", []string{"--policy", pol, "-"}, "GET /x HTTP/1.1\nHost: example.org\n\n", "DENY", "floor:origin-form", "", ""},
		{"request file: not a request", []string{"--policy", pol, "-"}, "hello\n", "DENY", "framing:bad-request", "", ""},
		{"--cleartext: plain HTTP after a CONNECT is an http:// request of its host and port", []string{"--policy", pol, "--cleartext", "-"},
			"CONNECT example.org:80 HTTP/1.1\n\nGET /docs HTTP/1.1\nHost: example.org\n\n", "FREE", "example-read", "tunnel", ""},
		{"the same request after a CONNECT, read as inside TLS: its Host means 443", []string{"--policy", pol, "-"},
			"CONNECT example.org:80 HTTP/1.1\n\nGET /docs HTTP/1.1\nHost: example.org\n\n", "DENY", "floor:tunnel-binding", "tunnel", ""},
		{"--transparent: origin-form decided by its Host", []string{"--policy", pol, "--transparent", "-"},
			"GET /docs HTTP/1.1\nHost: example.org\n\n", "FREE", "example-read", "transparent-plain", ""},
		{"--transparent: a request line naming another host than Host", []string{"--policy", pol, "--transparent", "-"},
			"GET http://other.example/docs HTTP/1.1\nHost: example.org\n\n", "DENY", "framing:host-mismatch", "", ""},
		{"--transparent: a TLS connection by its server name", []string{"--policy", pol, "--transparent", "CONNECT", "example.org:443"}, "", "FREE", "decrypt", "transparent-connect-decrypted", ""},
		{"--transparent: a request inside it", []string{"--policy", pol, "--transparent", "POST", "https://example.org/upload/a"}, "", "ASK", "example-upload", "transparent-tunnel", ""},
		{"--cleartext: an https:// target in a cleartext tunnel", []string{"--policy", pol, "--cleartext", "-"},
			"CONNECT example.org:80 HTTP/1.1\n\nGET https://example.org:80/docs HTTP/1.1\nHost: example.org:80\n\n", "DENY", "floor:tunnel-binding", "tunnel", "only http belongs in it"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, d, stdout, stderr := explainRun(t, c.stdin, c.args...)
			if code != 0 {
				t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
			}
			if d.Verdict != c.verdict || c.rule != "" && d.Rule != c.rule || c.kind != "" && d.Kind != c.kind || !strings.Contains(d.Reason, c.reasonContaining) {
				t.Fatalf("got %s %s %q (kind %s); want %s %s (kind %q) with a reason containing %q", d.Verdict, d.Rule, d.Reason, d.Kind, c.verdict, c.rule, c.kind, c.reasonContaining)
			}
			if want := "lockhttp explain: policy " + shortVersion(policy.Hash([]byte(approvedTOML))) + ", the file " + pol + "\n"; stderr != want {
				t.Fatalf("stderr %q; want %q", stderr, want)
			}
		})
	}
}

// TestExplainBuildsTheRequest checks the raw request METHOD URL makes, with the real parser.
func TestExplainBuildsTheRequest(t *testing.T) {
	cases := []struct {
		name  string
		args  []string
		stdin string
		want  string
	}{
		{"GET", []string{"GET", "https://example.org/a?b=c"}, "", "GET https://example.org/a?b=c HTTP/1.1\r\nHost: example.org\r\n\r\n"},
		{"empty path", []string{"GET", "http://example.org:8080"}, "", "GET http://example.org:8080/ HTTP/1.1\r\nHost: example.org:8080\r\n\r\n"},
		{"empty path with a query", []string{"GET", "http://example.org?x=1"}, "", "GET http://example.org/?x=1 HTTP/1.1\r\nHost: example.org\r\n\r\n"},
		{"fragment dropped, escapes kept", []string{"GET", "HTTPS://example.org/A/%2e%2e/b#frag"}, "", "GET https://example.org/A/%2e%2e/b HTTP/1.1\r\nHost: example.org\r\n\r\n"},
		{"userinfo is not in Host", []string{"GET", "http://u:p@example.org/"}, "", "GET http://u:p@example.org/ HTTP/1.1\r\nHost: example.org\r\n\r\n"},
		{"headers in order, around the positionals", []string{"-H", "B: 1", "GET", "https://example.org/", "-H", "A:2", "-H", "C:  3 "}, "",
			"GET https://example.org/ HTTP/1.1\r\nHost: example.org\r\nB: 1\r\nA: 2\r\nC: 3\r\n\r\n"},
		{"-H Host replaces the URL's", []string{"GET", "https://example.org/", "-H", "host: example.org:443"}, "", "GET https://example.org/ HTTP/1.1\r\nhost: example.org:443\r\n\r\n"},
		{"-d", []string{"POST", "https://example.org/up", "-d", "hello", "-H", "Content-Type: text/plain"}, "",
			"POST https://example.org/up HTTP/1.1\r\nHost: example.org\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello"},
		{"empty -d", []string{"-d", "", "POST", "https://example.org/up"}, "", "POST https://example.org/up HTTP/1.1\r\nHost: example.org\r\nContent-Length: 0\r\n\r\n"},
		{"-d whose value is --", []string{"-d", "--", "POST", "https://example.org/up"}, "", "POST https://example.org/up HTTP/1.1\r\nHost: example.org\r\nContent-Length: 2\r\n\r\n--"},
		{"-H Content-Length is kept alone", []string{"POST", "https://example.org/up", "-H", "Content-Length: 3", "-d", "abc"}, "",
			"POST https://example.org/up HTTP/1.1\r\nHost: example.org\r\nContent-Length: 3\r\n\r\nabc"},
		{"--data-file -", []string{"PUT", "https://example.org/up", "--data-file", "-"}, "a\nb\n", "PUT https://example.org/up HTTP/1.1\r\nHost: example.org\r\nContent-Length: 4\r\n\r\na\nb\n"},
		{"CONNECT", []string{"CONNECT", "example.org:443", "-H", "Proxy-Authorization: Basic eDp5"}, "", "CONNECT example.org:443 HTTP/1.1\r\nHost: example.org:443\r\nProxy-Authorization: Basic eDp5\r\n\r\n"},
		{"CONNECT IPv6", []string{"CONNECT", "[2001:db8::1]:443"}, "", "CONNECT [2001:db8::1]:443 HTTP/1.1\r\nHost: [2001:db8::1]:443\r\n\r\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var a explainArgs
			pos, err := parseInterleaved(a.flagSet(&bytes.Buffer{}), c.args)
			if err != nil || len(pos) != 2 {
				t.Fatalf("parse: %v, positional %q", err, pos)
			}
			a.positional = pos
			raw, err := a.buildRequest(strings.NewReader(c.stdin))
			if err != nil {
				t.Fatal(err)
			}
			if string(raw) != c.want {
				t.Fatalf("request\n%q\nwant\n%q", raw, c.want)
			}
		})
	}
}

func TestExplainUsageErrors(t *testing.T) {
	dir := t.TempDir()
	pol := writeFile(t, dir, "policy.toml", approvedTOML)
	emptyState := filepath.Join(dir, "state")
	if err := os.Mkdir(emptyState, 0o700); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		args   []string
		stdin  string
		stderr string
	}{
		{"no arguments", []string{"--policy", pol}, "", "give METHOD URL or a request file (0 arguments given)"},
		{"three arguments", []string{"--policy", pol, "GET", "https://example.org/", "extra"}, "", "(3 arguments given)"},
		{"request file without Host", []string{"--policy", pol, "-"}, "GET http://example.org/x HTTP/1.1\n\n", `no Host header, which HTTP/1.1 requires (the gate answers 400 without one); add the line "Host: example.org" after the request line`},
		{"request file without Host, CRLF", []string{"--policy", pol, "-"}, "POST https://example.org:8443/x HTTP/1.1\r\nContent-Length: 0\r\n\r\n", `add the line "Host: example.org:8443"`},
		{"request file naming no host", []string{"--policy", pol, "-"}, "GET /x HTTP/1.0\n\n", `the request names no host: its target "/x" is not a URL and it has no Host header; write the URL in the request line and add a Host line`},
		{"empty request file", []string{"--policy", pol, "-"}, "\n", "the request is empty"},
		{"a URL as the request file", []string{"--policy", pol, "https://example.org/"}, "", "give the method too: lockhttp explain GET https://example.org/"},
		{"-H with a request file", []string{"--policy", pol, "-", "-H", "A: b"}, "GET http://example.org/ HTTP/1.1\nHost: example.org\n\n", "-H, -d and --data-file go with METHOD URL"},
		{"a path for a URL", []string{"--policy", pol, "GET", "/x"}, "", `"/x" is not an absolute http(s) URL; write an absolute http:// or https:// URL, like https://example.org/path`},
		{"no scheme", []string{"--policy", pol, "GET", "example.org/x"}, "", "is not an absolute http(s) URL"},
		{"ftp", []string{"--policy", pol, "GET", "ftp://example.org/x"}, "", "is not an absolute http(s) URL"},
		{"a space in the URL", []string{"--policy", pol, "GET", "https://example.org/a b"}, "", "escape it (%20, %XX)"},
		{"URL first", []string{"--policy", pol, "https://example.org/", "GET"}, "", `"https://example.org/" is not an HTTP method; write METHOD URL`},
		{"lower-case method", []string{"--policy", pol, "get", "https://example.org/"}, "", `methods are upper case; write GET`},
		{"CONNECT to a URL", []string{"--policy", pol, "CONNECT", "https://example.org/"}, "", `the CONNECT target "https://example.org/" is not host:port; write it like CONNECT example.org:443`},
		{"CONNECT without a port", []string{"--policy", pol, "CONNECT", "example.org"}, "", "is not host:port"},
		{"CONNECT with a signed port", []string{"--policy", pol, "CONNECT", "example.org:+443"}, "", "is not host:port"},
		{"CONNECT with a body", []string{"--policy", pol, "CONNECT", "example.org:443", "-d", "x"}, "", "a CONNECT has no body"},
		{"--cleartext without a CONNECT", []string{"--policy", pol, "--cleartext", "GET", "http://example.org/"}, "", "--cleartext reads a CONNECT head and the plain request sent after it"},
		{"header without a colon", []string{"--policy", pol, "GET", "https://example.org/", "-H", "Accept"}, "", `the header "Accept" has no ':'; write it as -H 'Name: value'`},
		{"header with a bad name", []string{"--policy", pol, "GET", "https://example.org/", "-H", "X Y: z"}, "", `"X Y" is not a header name`},
		{"header with a line break", []string{"--policy", pol, "GET", "https://example.org/", "-H", "A: b\r\nC: d"}, "", "has a line break"},
		{"-d and --data-file", []string{"--policy", pol, "POST", "https://example.org/", "-d", "x", "--data-file", pol}, "", "with -d or with --data-file, not both"},
		{"--policy and --state", []string{"--policy", pol, "--state", dir, "GET", "https://example.org/"}, "", "give --policy FILE or --state DIR, not both"},
		{"--state without a console state", []string{"--state", emptyState, "GET", "https://example.org/"}, "", "no approved policy in " + emptyState + ": it has no console-state.json"},
		{"--state that does not exist", []string{"--state", filepath.Join(dir, "nothing"), "GET", "https://example.org/"}, "", "give lox run's state directory"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, stdout, stderr := explainRun(t, c.stdin, c.args...)
			if code != 2 || stdout != "" || !strings.Contains(stderr, c.stderr) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 2, no stdout, stderr containing %q", code, stdout, stderr, c.stderr)
			}
		})
	}
}

func TestExplainWithoutAPolicy(t *testing.T) {
	t.Chdir(t.TempDir()) // no .lockfamily here
	code, _, stdout, stderr := explainRun(t, "", "GET", "https://example.org/")
	if code != 2 || stdout != "" || !strings.Contains(stderr, "give --policy FILE or --state DIR (lox run's state directory)") || !strings.Contains(stderr, "usage:") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// newConsoleState builds lox run's state directory as the console leaves it: the console
// approves the policy file on its first start, then the file is edited into a loosening, which
// the console (started again) holds for review while it serves the approved policy.
func newConsoleState(t *testing.T, dir string) (policyPath string) {
	t.Helper()
	policyPath = writeFile(t, dir, "policy.toml", approvedTOML)
	cfg := console.Config{PolicyPath: policyPath, StatePath: filepath.Join(dir, consoleStateFile)}
	if _, err := console.New(cfg); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "policy.toml", editedTOML)
	c, err := console.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if c.Pending() == nil || c.Current().Version != policy.Hash([]byte(approvedTOML)) {
		t.Fatalf("the console does not hold the edit for review: pending %v, serving %s", c.Pending(), c.Current().Version)
	}
	return policyPath
}

func TestExplainStateUsesTheApprovedPolicy(t *testing.T) {
	root := t.TempDir()
	state := filepath.Join(root, defaultStateDir)
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	policyPath := newConsoleState(t, state)
	approved := shortVersion(policy.Hash([]byte(approvedTOML)))
	request := []string{"POST", "https://example.org/upload/a", "-d", "hi"}
	cases := []struct {
		name      string
		dir       string // the working directory; "" the test's
		args      []string
		verdict   string
		rule      string
		stderrHas string
	}{
		{"--state DIR", "", append([]string{"--state", state}, request...), "ASK", "example-upload",
			"policy " + approved + ", the approved policy of the console at " + state + " (the file " + policyPath + " differs from it; the gate does not decide with the file)"},
		{"--state after METHOD URL", "", append(request, "--state", state), "ASK", "example-upload", "the approved policy of the console at " + state},
		{"--state the console's state file", "", append([]string{"--state", filepath.Join(state, consoleStateFile)}, request...), "ASK", "example-upload", "the approved policy of the console at " + filepath.Join(state, consoleStateFile)},
		{"the default state directory", root, request, "ASK", "example-upload", "policy " + approved + ", the approved policy of the console at " + defaultStateDir + " "},
		{"--policy the edited file", "", append([]string{"--policy", policyPath}, request...), "FREE", "example-write",
			"policy " + shortVersion(policy.Hash([]byte(editedTOML))) + ", the file " + policyPath},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.dir != "" {
				t.Chdir(c.dir)
			}
			code, d, stdout, stderr := explainRun(t, "", c.args...)
			if code != 0 || d.Verdict != c.verdict || d.Rule != c.rule {
				t.Fatalf("exit %d, %s %s; want %s %s\nstdout %q\nstderr %q", code, d.Verdict, d.Rule, c.verdict, c.rule, stdout, stderr)
			}
			if !strings.Contains(stderr, c.stderrHas) || strings.Count(stderr, "\n") != 1 {
				t.Fatalf("stderr %q; want one line containing %q", stderr, c.stderrHas)
			}
		})
	}
}

// TestExplainStateRefusesAHandEditedState checks that a state file whose approved text does not
// match its version is refused, as the console refuses it.
func TestExplainStateRefusesAHandEditedState(t *testing.T) {
	state := t.TempDir()
	newConsoleState(t, state)
	p := filepath.Join(state, consoleStateFile)
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	data = bytes.Replace(data, []byte(`\"ask\"`), []byte(`\"free\"`), 1)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, _, stderr := explainRun(t, "", "--state", state, "GET", "https://example.org/")
	if code != 2 || !strings.Contains(stderr, "does not match its version") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}
