package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/console"
	"github.com/lockhttp/lockhttp/internal/testkit"
	"github.com/lockhttp/lockhttp/internal/unixsock"
)

// scopePolicy names two containers by their source addresses, coder on 127.0.0.2 and reviewer
// on 127.0.0.3: pushes are free for coder alone, /admin is refused to reviewer alone, and
// docs.test is trusted for reviewer's reads alone. %d is the origin's port.
const scopePolicy = `version = 1

[[rule]]
name = "coder-push"
hosts = ["origin.test"]
methods = ["POST"]
paths = ["/push/**"]
containers = ["coder"]
verdict = "free"

[[rule]]
name = "reviewer-no-admin"
hosts = ["origin.test"]
paths = ["/admin/**"]
containers = ["reviewer"]
verdict = "deny"

[floor]
allow_cidrs = ["127.0.0.1/32"]
allow_ports = [%[1]d]

[floor.hosts]
"origin.test" = "127.0.0.1"
"docs.test" = "127.0.0.1"

[sources]
coder = ["127.0.0.2"]
reviewer = ["127.0.0.3"]

[container.reviewer]
trusted = ["docs.test"]

[settings]
hold = "1s"
`

// curlFrom sends a request through the gate with curl, its connection bound to the source
// address from, and returns the answer's status and the gate's headers.
func curlFrom(t *testing.T, gate, from string, args ...string) curlAnswer {
	t.Helper()
	curl := requireTool(t, "curl")
	headers := filepath.Join(t.TempDir(), "headers")
	cmd := exec.Command(curl, append([]string{"-sS", "--max-time", "20", "--interface", from, "--proxy", gate,
		"-D", headers, "-o", os.DevNull, "-w", "%{http_code}"}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("curl from %s %q: %v %s", from, args, err, out)
	}
	var a curlAnswer
	fmt.Sscan(string(out), &a.status)
	data, err := os.ReadFile(headers)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufioReader(string(data)), nil)
	if err != nil {
		t.Fatalf("curl's headers %q: %v", data, err)
	}
	resp.Body.Close()
	a.code, a.rule, a.id = resp.Header.Get("X-LockHTTP-Code"), resp.Header.Get("X-LockHTTP-Rule"), resp.Header.Get("X-LockHTTP-Request")
	return a
}

// TestRulesScopedToContainers runs the real lox stack with two containers told apart by their
// source addresses (curl bound to 127.0.0.2 and to 127.0.0.3): a rule scoped to coder frees its
// push and asks about reviewer's; a deny rule scoped to reviewer refuses its request however it
// names itself (agent name, forwarding headers) and leaves coder's to the default; the trusted
// list of [container.reviewer] frees reviewer's reads alone. The audit records name the
// container and the rule; lockhttp explain --container agrees with the gate. Widening the free
// rule's containers waits for review (the gate keeps asking); widening the deny rule's applies.
func TestRulesScopedToContainers(t *testing.T) {
	rec := &originRecorder{}
	o := httptest.NewServer(rec)
	t.Cleanup(o.Close)
	port := o.Listener.Addr().(*net.TCPAddr).Port
	policyText := fmt.Sprintf(scopePolicy, port)
	r := startStack(t, policyText)
	origin := fmt.Sprintf("http://origin.test:%d", port)
	push := origin + "/push/repo.git"
	const coder, reviewer = "127.0.0.2", "127.0.0.3"
	reached := func(path string) int {
		n := 0
		for _, got := range rec.all() {
			if got.Path == path {
				n++
			}
		}
		return n
	}

	// The free rule scoped to coder: coder's push goes out.
	if a := curlFrom(t, r.up.Gate, coder, "-X", "POST", "-d", "from coder", push); a.status != 200 || a.code != "" {
		t.Fatalf("coder's push: %+v", a)
	}
	if reached("/push/repo.git") != 1 {
		t.Fatalf("coder's push did not reach the origin once: %d", reached("/push/repo.git"))
	}
	// Reviewer's asks (E_PENDING once the 1s hold is over), even with coder's agent name.
	a := curlFrom(t, r.up.Gate, reviewer, "-X", "POST", "-d", "from reviewer", "--proxy-user", "coder:x", push)
	if a.status != 403 || a.code != "E_PENDING" || a.rule != "default" {
		t.Fatalf("reviewer's push: %+v", a)
	}
	askID := a.id
	// The deny rule scoped to reviewer: refused, whatever the request says of its container.
	a = curlFrom(t, r.up.Gate, reviewer, "--proxy-user", "coder:x", "-H", "X-Forwarded-For: "+coder, "-H", "Forwarded: for="+coder, origin+"/admin/users")
	if a.status != 403 || a.code != "E_RULE" || a.rule != "reviewer-no-admin" {
		t.Fatalf("reviewer's /admin: %+v", a)
	}
	denyID := a.id
	// Coder's /admin is not refused by it: the default asks.
	if a := curlFrom(t, r.up.Gate, coder, origin+"/admin/users"); a.status != 403 || a.code != "E_PENDING" || a.rule != "default" {
		t.Fatalf("coder's /admin: %+v", a)
	}
	if reached("/admin/users") != 0 || reached("/push/repo.git") != 1 {
		t.Fatal("an asked or refused request reached the origin")
	}
	// [container.reviewer] trusts docs.test for reviewer's reads alone.
	docs := fmt.Sprintf("http://docs.test:%d/guide", port)
	if a := curlFrom(t, r.up.Gate, reviewer, docs); a.status != 200 || a.code != "" {
		t.Fatalf("reviewer's read of docs.test: %+v", a)
	}
	if a := curlFrom(t, r.up.Gate, coder, docs); a.status != 403 || a.code != "E_PENDING" {
		t.Fatalf("coder's read of docs.test: %+v", a)
	}

	// The audit: each record names the container its address named, and the rule.
	if m := r.recordFor(askID); m["container"] != "reviewer" || m["rule"] != "default" || m["verdict"] != "ASK" || m["agent"] != "coder" {
		t.Errorf("reviewer's push, audited: %v", m)
	}
	if m := r.recordFor(denyID); m["container"] != "reviewer" || m["rule"] != "reviewer-no-admin" || m["code"] != "E_RULE" ||
		!strings.Contains(fmt.Sprint(m["reason"]), "for container reviewer") {
		t.Errorf("reviewer's /admin, audited: %v", m)
	}
	testkit.WaitFor(t, 5*time.Second, "the record of coder's push", func() bool {
		for _, m := range r.auditRecords() {
			if m["url"] == push && m["container"] == "coder" && m["rule"] == "coder-push" && m["verdict"] == "FREE" {
				return true
			}
		}
		return false
	})

	// lockhttp explain --container decides as the gate did, by the same rule.
	explain := func(container string, args ...string) map[string]any {
		t.Helper()
		cmd := exec.Command(filepath.Join(binDir, "lockhttp"), append([]string{"explain", "--state", r.state, "--container", container}, args...)...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("explain %q: %v %s", args, err, out)
		}
		var m map[string]any
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatalf("explain %q: %q: %v", args, out, err)
		}
		return m
	}
	for _, c := range []struct{ container, method, url, verdict, rule string }{
		{"coder", "POST", push, "FREE", "coder-push"},
		{"reviewer", "POST", push, "ASK", "default"},
		{"reviewer", "GET", origin + "/admin/users", "DENY", "reviewer-no-admin"},
		{"coder", "GET", origin + "/admin/users", "ASK", "default"},
	} {
		if m := explain(c.container, c.method, c.url); m["verdict"] != c.verdict || m["rule"] != c.rule || m["container"] != c.container {
			t.Errorf("explain --container %s %s %s: %v; want %s by %q", c.container, c.method, c.url, m, c.verdict, c.rule)
		}
	}

	// Widening the free rule's containers is a loosening: it waits for review, and the gate
	// keeps asking about reviewer's push.
	loose := strings.Replace(policyText, `containers = ["coder"]`, `containers = ["coder", "reviewer"]`, 1)
	if err := os.WriteFile(r.policy, []byte(loose), 0o600); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the console to hold the edit for review", func() bool {
		var st console.Status
		resp, err := unixsock.Client(r.up.ConsoleSocket, 2*time.Second).Get("http://unix/status")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return json.NewDecoder(resp.Body).Decode(&st) == nil && st.Review != ""
	})
	if a := curlFrom(t, r.up.Gate, reviewer, "-X", "POST", "-d", "again", push); a.code != "E_PENDING" {
		t.Fatalf("reviewer's push while the widening waits for review: %+v", a)
	}
	// Widening the deny rule's containers (to every container) is a tightening: it applies, and
	// coder's /admin is refused by it.
	tight := strings.Replace(policyText, "containers = [\"reviewer\"]\n", "", 1)
	if err := os.WriteFile(r.policy, []byte(tight), 0o600); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 15*time.Second, "the tightening to reach the gate", func() bool {
		a := curlFrom(t, r.up.Gate, coder, origin+"/admin/users")
		return a.code == "E_RULE" && a.rule == "reviewer-no-admin"
	})
	if reached("/admin/users") != 0 {
		t.Fatal("a refused request reached the origin")
	}
}
