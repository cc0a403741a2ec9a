package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/testkit"
)

// budgetPolicy gives two containers, a on 127.0.0.1 and b on 127.0.0.2, three requests a minute
// each; %d is the origin's port.
const budgetPolicy = `version = 1
trusted = ["origin.test"]

[[budget]]
name = "rpm"
requests_per_minute = 3

[floor]
allow_cidrs = ["127.0.0.1/32"]
allow_ports = [%d]

[floor.hosts]
"origin.test" = "127.0.0.1"

[sources]
a = ["127.0.0.1"]
b = ["127.0.0.2"]
`

// budgetClient is a client of the gate whose connections come from the address from: the
// container [sources] names for it.
func budgetClient(t *testing.T, gate, from string) *http.Client {
	t.Helper()
	u, err := url.Parse(gate)
	if err != nil {
		t.Fatal(err)
	}
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(u), DialContext: d.DialContext}}
}

// TestBudgetPerContainer runs the real lox stack: container a, over its requests_per_minute, is
// refused 429 E_BUDGET with Retry-After and nothing reaches the origin, while container b's
// requests still pass; the refusal is in the audit, and lockhttp doctor shows both containers'
// use of the budget.
func TestBudgetPerContainer(t *testing.T) {
	rec := &originRecorder{}
	o := httptest.NewServer(rec)
	t.Cleanup(o.Close)
	port := o.Listener.Addr().(*net.TCPAddr).Port
	r := startStack(t, fmt.Sprintf(budgetPolicy, port))
	target := fmt.Sprintf("http://origin.test:%d/", port)
	get := func(c *http.Client, path string) *http.Response {
		t.Helper()
		resp, err := c.Get(target + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	a, b := budgetClient(t, r.up.Gate, "127.0.0.1"), budgetClient(t, r.up.Gate, "127.0.0.2")

	for i := 0; i < 3; i++ {
		if resp := get(a, "a"); resp.StatusCode != 200 {
			t.Fatalf("container a, request %d: %d %s", i+1, resp.StatusCode, resp.Header.Get("X-LockHTTP-Code"))
		}
	}
	resp := get(a, "a-over")
	retry, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("X-LockHTTP-Code") != "E_BUDGET" || resp.Header.Get("X-LockHTTP-Rule") != "budget:rpm" ||
		err != nil || retry < 1 || retry > 61 {
		t.Fatalf("container a over its budget: %d %s %s Retry-After %q", resp.StatusCode, resp.Header.Get("X-LockHTTP-Code"),
			resp.Header.Get("X-LockHTTP-Rule"), resp.Header.Get("Retry-After"))
	}
	refused := resp.Header.Get("X-LockHTTP-Request")
	// The other container has a count of its own.
	for i := 0; i < 3; i++ {
		if resp := get(b, "b"); resp.StatusCode != 200 {
			t.Fatalf("container b, request %d, beside a over its budget: %d %s", i+1, resp.StatusCode, resp.Header.Get("X-LockHTTP-Code"))
		}
	}
	for _, got := range rec.all() {
		if got.Path == "/a-over" {
			t.Fatal("the refused request reached the origin")
		}
	}
	if n := rec.count(); n != 6 {
		t.Fatalf("the origin saw %d requests, want 6", n)
	}

	rec4 := r.recordFor(refused)
	if rec4["code"] != "E_BUDGET" || rec4["rule"] != "budget:rpm" || rec4["container"] != "a" || rec4["status"] != float64(429) ||
		!strings.Contains(fmt.Sprint(rec4["reason"]), `container "a" has sent 3 requests in the last minute under budget "rpm"`) {
		t.Fatalf("the refusal's audit record: %v", rec4)
	}
	// Every request that went out has its record, under its container (written once its
	// answer is complete, so a moment later).
	testkit.WaitFor(t, 5*time.Second, "three FREE records for each container", func() bool {
		containers := map[string]int{}
		for _, m := range r.auditRecords() {
			if m["verdict"] == "FREE" && strings.HasPrefix(fmt.Sprint(m["url"]), target) {
				containers[fmt.Sprint(m["container"])]++
			}
		}
		return containers["a"] == 3 && containers["b"] == 3
	})

	out, _ := runDoctor(t, "--state", r.state)
	if !hasLine(out, "WARN", "budget", `"rpm" refused 1 request(s) of container a in the last hour (E_BUDGET); it has used 3 of 3 requests a minute`) ||
		!hasLine(out, "OK", "budget", `"rpm" for container b: 3 of 3 requests a minute`) {
		t.Fatalf("the doctor's budget lines:\n%s", out)
	}
}
