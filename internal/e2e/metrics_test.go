package e2e

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/stack"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// metricsPolicy is the policy of the metrics tests; %d is the origin's port.
const metricsPolicy = `version = 1
trusted = ["origin.test"]

[[rule]]
name = "no-admin"
hosts = ["origin.test"]
paths = ["/admin/**"]
verdict = "deny"

[[rule]]
name = "ask-writes"
hosts = ["origin.test"]
methods = ["POST"]
verdict = "ask"

[floor]
allow_cidrs = ["127.0.0.1/32"]
allow_ports = [%d]

[floor.hosts]
"origin.test" = "127.0.0.1"

[sources]
local = ["127.0.0.0/8"]

[settings]
hold = "30s"
`

// TestMetricsPromtool: every process of the stack serves its metrics at the URL up.json names,
// and promtool finds nothing wrong with any family.
func TestMetricsPromtool(t *testing.T) {
	promtool := requireTool(t, "promtool")
	e := startAsk(t, "30s")
	if len(e.up.Metrics) != 3 {
		t.Fatalf("up.json metrics %v, want the gate, the console and the signer", e.up.Metrics)
	}
	// Some traffic first, so that the labelled families have series to check.
	(&coreEnv{running: e.running}).client().Get(fmt.Sprintf("http://origin.test:%d/x", e.port))
	for _, name := range []string{"gate", "console", "signer"} {
		u := e.up.Metrics[name]
		resp, err := http.Get(u)
		if err != nil {
			t.Fatalf("%s metrics %s: %v", name, u, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Contains(body, []byte("lockhttp_build_info{process=\""+name+"\"")) || !bytes.Contains(body, []byte("go_goroutines")) {
			t.Fatalf("%s metrics %s: %s\n%.2000s", name, u, resp.Status, body)
		}
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = bytes.NewReader(body)
		if out, err := cmd.CombinedOutput(); err != nil || len(out) != 0 {
			t.Errorf("promtool check metrics on the %s's families: %v\n%s", name, err, out)
		}
	}
	// The doctor reports each listener.
	out, _ := runDoctor(t, "--state", e.state)
	for _, name := range []string{"gate", "console", "signer"} {
		if !hasLine(out, "OK", "metrics", "the "+name+" serves") || !strings.Contains(out, e.up.Metrics[name]) {
			t.Errorf("the doctor does not report the %s's metrics listener:\n%s", name, out)
		}
	}
}

// TestMetricsSignerThroughGate: a gate started with -metrics-signer serves the signer's
// lockhttp_signer_* families on its own page, read over the signer's socket (as in the compose
// setup, where the signer has no network), the same counts as the signer's own listener, and none
// of the signer's other families; promtool passes the combined page. A gate whose signer cannot
// be read serves its own families with lockhttp_gate_signer_metrics_up 0.
func TestMetricsSignerThroughGate(t *testing.T) {
	promtool := requireTool(t, "promtool")
	e := startAsk(t, "30s")
	addr := freeAddr(t)
	g := startBareGate(t, e.running, "", "-metrics-listen", addr, "-metrics-signer")
	// A decrypted request through that gate: a certificate issued, so the signer has counted one.
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(mustURL(t, "http://"+g.addr)),
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := c.Get("https://lockhttp.internal/")
	if err != nil {
		t.Fatalf("a decrypted request through the gate: %v", err)
	}
	resp.Body.Close()

	page := func(u string) string {
		t.Helper()
		resp, err := http.Get(u)
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %s\n%.2000s", u, resp.Status, b)
		}
		return string(b)
	}
	lines := func(p, prefix string) []string {
		var out []string
		for _, l := range strings.Split(p, "\n") {
			if strings.HasPrefix(l, prefix) {
				out = append(out, l)
			}
		}
		return out
	}
	own := page(e.up.Metrics["signer"])
	gate := page("http://" + addr + "/metrics")
	issued := `lockhttp_signer_requests_total{outcome="issued"} `
	if l := lines(gate, issued); len(l) != 1 || l[0] == issued+"0" {
		t.Errorf("the gate's page: %q, want the signer's count of the certificate it issued\n%.3000s", l, gate)
	}
	for _, fam := range []string{"lockhttp_signer_requests_total", "lockhttp_signer_sign_duration_seconds_count"} {
		if g, s := lines(gate, fam), lines(own, fam); len(g) == 0 || strings.Join(g, "\n") != strings.Join(s, "\n") {
			t.Errorf("%s on the gate's page:\n%s\non the signer's own:\n%s", fam, strings.Join(g, "\n"), strings.Join(s, "\n"))
		}
	}
	if l := lines(gate, "lockhttp_build_info{"); len(l) != 1 || !strings.Contains(l[0], `process="gate"`) {
		t.Errorf("lockhttp_build_info on the gate's page: %q, want the gate's alone", l)
	}
	if l := lines(gate, "go_goroutines "); len(l) != 1 {
		t.Errorf("go_goroutines on the gate's page: %q, want the gate's one", l)
	}
	if l := lines(gate, "lockhttp_gate_signer_metrics_up "); len(l) != 1 || l[0] != "lockhttp_gate_signer_metrics_up 1" {
		t.Errorf("lockhttp_gate_signer_metrics_up: %q, want 1", l)
	}
	promcheck := func(name, p string) {
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = strings.NewReader(p)
		if out, err := cmd.CombinedOutput(); err != nil || len(out) != 0 {
			t.Errorf("promtool check metrics on %s: %v\n%s", name, err, out)
		}
	}
	promcheck("the gate's page with the signer's families", gate)

	// A signer that cannot be read: the gate's own page all the same.
	addr2 := freeAddr(t)
	startBareGate(t, e.running, "", "-metrics-listen", addr2, "-metrics-signer", "-signer", filepath.Join(t.TempDir(), "none.sock"))
	down := page("http://" + addr2 + "/metrics")
	if len(lines(down, "lockhttp_signer_")) != 0 || len(lines(down, "lockhttp_gate_connections_open ")) == 0 ||
		!strings.Contains(down, "\nlockhttp_gate_signer_metrics_up 0\n") || !strings.Contains(down, "\nlockhttp_gate_signer_metrics_failures_total 1\n") {
		t.Errorf("the page of a gate whose signer cannot be read:\n%.3000s", down)
	}
	promcheck("the gate's page without its signer", down)
}

// TestMetricsScrapedByPrometheus: a real Prometheus scrapes the stack; known traffic shows in its
// answers as counted: one DENY of code E_RULE once, three FREE reads, one ticket approved on
// the CLI and the time to that decision.
func TestMetricsScrapedByPrometheus(t *testing.T) {
	prom := requireTool(t, "prometheus")
	rec := &originRecorder{}
	o := httptest.NewServer(rec)
	t.Cleanup(o.Close)
	port := o.Listener.Addr().(*net.TCPAddr).Port
	r := startStack(t, fmt.Sprintf(metricsPolicy, port))
	e := &askEnv{running: r, origin: rec, port: port}
	api := startPrometheus(t, prom, r.up.Metrics)

	for _, job := range []string{"gate", "console", "signer"} {
		waitQuery(t, api, `up{job="`+job+`"}`, 1)
	}
	c := (&coreEnv{running: r}).client()
	get := func(path string) int {
		resp, err := c.Get(fmt.Sprintf("http://origin.test:%d%s", port, path))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := get("/admin/users"); s != 403 {
		t.Fatalf("GET /admin/users: %d, want the rule's 403", s)
	}
	for i := 0; i < 3; i++ {
		if s := get("/items"); s != 200 {
			t.Fatalf("GET /items: %d", s)
		}
	}
	waitQuery(t, api, `lockhttp_gate_requests_total{container="local",kind="request",verdict="DENY",code="E_RULE"}`, 1)
	waitQuery(t, api, `lockhttp_gate_requests_total{container="local",kind="request",verdict="FREE",code="none"}`, 3)
	waitQuery(t, api, `sum(lockhttp_gate_requests_total)`, 4)
	waitQuery(t, api, `lockhttp_gate_decision_duration_seconds_count{kind="request"}`, 4)
	waitQuery(t, api, `lockhttp_gate_upstream_duration_seconds_count`, 3)
	waitQuery(t, api, `lockhttp_audit_records_total{job="gate"} >= bool 4`, 1)

	// An ASK: pending while held, then approved on the CLI.
	res := e.send("POST", "/items", "payload")
	tk := e.waitTicket(t, fmt.Sprintf("http://origin.test:%d/items", port))
	waitQuery(t, api, `lockhttp_hub_tickets_pending{container="local"}`, 1)
	if out, err := e.lox(t, "approve", tk.ID); err != nil {
		t.Fatalf("lox approve: %v\n%s", err, out)
	}
	if got := <-res; got.status != 200 {
		t.Fatalf("the approved request: %+v", got)
	}
	waitQuery(t, api, `lockhttp_hub_tickets_pending{container="local"}`, 0)
	waitQuery(t, api, `lockhttp_hub_tickets_closed_total{container="local",outcome="approved"}`, 1)
	waitQuery(t, api, `lockhttp_hub_decision_seconds_count{facade="cli",outcome="approved"}`, 1)
	waitQuery(t, api, `lockhttp_gate_requests_total{container="local",verdict="ASK",code="none"}`, 1)
	// The DENY is still counted once: no request is counted twice.
	waitQuery(t, api, `lockhttp_gate_requests_total{code="E_RULE"}`, 1)
}

// startPrometheus runs Prometheus on loopback scraping each target (job name → metrics URL)
// every second, and returns its HTTP API's base URL.
func startPrometheus(t *testing.T, bin string, targets map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	var cfg strings.Builder
	cfg.WriteString("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n")
	for job, u := range targets {
		pu, err := url.Parse(u)
		if err != nil || pu.Host == "" {
			t.Fatalf("metrics URL of %s: %q", job, u)
		}
		fmt.Fprintf(&cfg, "  - job_name: %s\n    metrics_path: %s\n    static_configs:\n      - targets: [%q]\n", job, pu.Path, pu.Host)
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	out := &testkit.Buffer{}
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	api := "http://" + addr
	testkit.WaitFor(t, 30*time.Second, "Prometheus ready", func() bool {
		select {
		case <-done:
			t.Fatalf("prometheus exited:\n%s", out)
		default:
		}
		resp, err := http.Get(api + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return api
}

// freeAddr is a loopback address with a port nobody listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// query asks Prometheus for an instant vector and returns its one sample's value; ok is false
// when the answer has no sample or more than one.
func query(t *testing.T, api, q string) (float64, bool) {
	t.Helper()
	resp, err := http.Get(api + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	var ans struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&ans); err != nil {
		t.Fatalf("query %s: %v", q, err)
	}
	if ans.Status != "success" {
		t.Fatalf("query %s: %s", q, ans.Error)
	}
	if len(ans.Data.Result) != 1 {
		return 0, false
	}
	s, _ := ans.Data.Result[0].Value[1].(string)
	v, err := strconv.ParseFloat(s, 64)
	return v, err == nil
}

// waitQuery waits until Prometheus answers q with exactly want.
func waitQuery(t *testing.T, api, q string, want float64) {
	t.Helper()
	var got float64
	var ok bool
	testkit.WaitFor(t, 15*time.Second, fmt.Sprintf("Prometheus: %s == %v", q, want), func() bool {
		got, ok = query(t, api, q)
		return ok && got == want
	})
}

// consolePolicyMetrics scrapes the console's page at u and returns the version its policy_info
// names with 1, its applied timestamp and the page; ok is false when the page did not answer or
// lacks either family.
func consolePolicyMetrics(u string) (version string, applied float64, page []byte, ok bool) {
	resp, err := http.Get(u)
	if err != nil {
		return "", 0, nil, false
	}
	defer resp.Body.Close()
	page, _ = io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	hasApplied := false
	for _, line := range strings.Split(string(page), "\n") {
		if rest, found := strings.CutPrefix(line, `lockhttp_console_policy_info{version="`); found {
			if v, val, found := strings.Cut(rest, `"} `); found && val == "1" {
				version = v
			}
		}
		if rest, found := strings.CutPrefix(line, "lockhttp_console_policy_applied_timestamp_seconds "); found {
			applied, err = strconv.ParseFloat(rest, 64)
			hasApplied = err == nil
		}
	}
	return version, applied, page, resp.StatusCode == 200 && version != "" && hasApplied
}

// TestMetricsConsolePolicyAfterRestart: a console that lox restarts (it was killed) serves
// lockhttp_console_policy_info with the approved version, and the time that policy was applied,
// from its first answered scrape on, not only after the next approval; promtool passes the page.
func TestMetricsConsolePolicyAfterRestart(t *testing.T) {
	promtool := requireTool(t, "promtool")
	r := startStackWith(t, minimalPolicy, []string{"--restart-delay", "50ms"}, nil)
	e := &superviseEnv{running: r}
	version, applied, _, ok := consolePolicyMetrics(r.up.Metrics["console"])
	if !ok || applied <= 0 {
		t.Fatalf("the console's policy metrics before the restart: version %q, applied %v", version, applied)
	}
	old := e.kill(t, "console")
	e.restarted(t, "console", old)
	var up stack.Up
	data, err := os.ReadFile(filepath.Join(r.state, stack.UpFile))
	if err != nil || json.Unmarshal(data, &up) != nil {
		t.Fatalf("up.json: %v", err)
	}
	// The first page the restarted console answers.
	var page []byte
	var got string
	var at float64
	testkit.WaitFor(t, 10*time.Second, "the restarted console's metrics page", func() bool {
		resp, err := http.Get(up.Metrics["console"])
		if err != nil {
			return false
		}
		resp.Body.Close()
		got, at, page, _ = consolePolicyMetrics(up.Metrics["console"])
		return true
	})
	if got != version || at != applied {
		t.Fatalf("the restarted console's first page: policy_info version %q, applied %v; want %q and %v (when it was approved)\n%s",
			got, at, version, applied, page)
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(page)
	if out, err := cmd.CombinedOutput(); err != nil || len(out) != 0 {
		t.Errorf("promtool check metrics on the restarted console's page: %v\n%s", err, out)
	}
}
