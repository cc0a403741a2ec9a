package e2e

import (
	"bytes"
	"context"
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
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/testkit"
	"github.com/lockhttp/lockhttp/internal/unixsock"
)

// pgServer is a PostgreSQL server of the test's own: Debian's binaries, a data directory in a
// temporary directory, run as an unprivileged user, listening on a unix socket only.
type pgServer struct {
	t    *testing.T
	bin  string
	base string
	cred *syscall.Credential
	DSN  string
}

// startPostgres starts one; it skips when PostgreSQL is not installed, except under CI=true,
// where .ci/run installs it.
func startPostgres(t *testing.T) *pgServer {
	t.Helper()
	m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(m) == 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb); .ci/run must install postgresql")
		}
		t.Skip("PostgreSQL is not installed")
	}
	base, err := os.MkdirTemp("", "lockhttp-pg-")
	if err != nil {
		t.Fatal(err)
	}
	p := &pgServer{t: t, bin: filepath.Dir(m[len(m)-1]), base: base}
	t.Cleanup(func() { os.RemoveAll(base) })
	if os.Geteuid() == 0 {
		// PostgreSQL refuses to run as root: run it as nobody.
		if err := os.Chown(base, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		p.cred = &syscall.Credential{Uid: 65534, Gid: 65534}
	}
	p.run("initdb", "-D", filepath.Join(base, "data"), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync")
	p.start()
	t.Cleanup(p.stop)
	p.DSN = fmt.Sprintf("host=%s port=54329 user=postgres dbname=postgres sslmode=disable", base)
	return p
}

func (p *pgServer) run(name string, args ...string) {
	p.t.Helper()
	cmd := exec.Command(filepath.Join(p.bin, name), args...)
	cmd.Dir = p.base
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + p.base, "LC_ALL=C"}
	if p.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(p.base, "log"))
		p.t.Fatalf("%s %s: %v\n%s\n%s", name, strings.Join(args, " "), err, out, log)
	}
}

func (p *pgServer) start() {
	p.run("pg_ctl", "-D", filepath.Join(p.base, "data"), "-l", filepath.Join(p.base, "log"), "-w", "-t", "60",
		"-o", fmt.Sprintf("-c listen_addresses='' -k %s -p 54329 -c fsync=off", p.base), "start")
}

func (p *pgServer) stop() {
	if _, err := os.Stat(filepath.Join(p.base, "data", "postmaster.pid")); err != nil {
		return
	}
	p.run("pg_ctl", "-D", filepath.Join(p.base, "data"), "-m", "fast", "-w", "stop")
}

// TestAuditDatabaseCopy: with LOCKHTTP_AUDIT_DSN the gate copies every audit line to a real
// PostgreSQL; the database is stopped in the middle of the traffic (the gate keeps serving, its
// status says the copy is down) and started again, and then every line of the files is in the
// database exactly once, and the copy verifies with the audit key like the files.
func TestAuditDatabaseCopy(t *testing.T) {
	pg := startPostgres(t)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(origin.Close)
	port := origin.Listener.Addr().(*net.TCPAddr).Port
	e := startStackWith(t, fmt.Sprintf(floodPolicy, port), nil, []string{"LOCKHTTP_AUDIT_DSN=" + pg.DSN})
	proxy, _ := url.Parse(e.up.Gate)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}}
	send := func(n int) {
		for i := range n {
			target := fmt.Sprintf("http://origin.test:%d/r%d", port, i)
			if i%5 == 0 {
				target = fmt.Sprintf("http://blocked.test:%d/r%d", port, i)
			}
			resp, err := c.Get(target)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	testkit.WaitFor(t, 10*time.Second, "the gate to have its policy", func() bool {
		resp, err := c.Get(fmt.Sprintf("http://origin.test:%d/warm", port))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	send(20)
	waitCopied(t, e, pg.DSN)

	gateMetrics := e.up.Metrics["gate"]
	testkit.WaitFor(t, 10*time.Second, "the metrics to show no lag", func() bool {
		return scraped(t, gateMetrics, "lockhttp_audit_db_lag_records") == 0 && scraped(t, gateMetrics, "lockhttp_audit_db_rows_total") > 0
	})

	pg.stop()
	send(20) // the gate serves on: the files are the record
	testkit.WaitFor(t, 10*time.Second, "the status to say the copy is down", func() bool {
		st := gateStatusRaw(t, e)
		return strings.Contains(st, `"audit_sink":{"state":"down"`)
	})
	// The lag grows while the database is down: records behind, for longer and longer.
	testkit.WaitFor(t, 10*time.Second, "the lag in the metrics", func() bool {
		return scraped(t, gateMetrics, "lockhttp_audit_db_lag_records") >= 20 && scraped(t, gateMetrics, "lockhttp_audit_db_lag_seconds") > 0
	})
	before := scraped(t, gateMetrics, "lockhttp_audit_db_lag_seconds")
	testkit.WaitFor(t, 10*time.Second, "the lag to grow", func() bool {
		return scraped(t, gateMetrics, "lockhttp_audit_db_lag_seconds") > before+1
	})
	if scraped(t, gateMetrics, "lockhttp_audit_db_failures_total") < 1 {
		t.Error("no failed copy counted while the database is down")
	}
	t.Run("promtool", func(t *testing.T) { promtoolCheck(t, gateMetrics) })
	pg.start()
	send(10)
	waitCopied(t, e, pg.DSN)
	testkit.WaitFor(t, 10*time.Second, "the lag back to 0", func() bool {
		return scraped(t, gateMetrics, "lockhttp_audit_db_lag_records") == 0 && scraped(t, gateMetrics, "lockhttp_audit_db_lag_seconds") == 0
	})

	// The copy verifies like the files, with the same key.
	var out, errb bytes.Buffer
	cmd := exec.Command(filepath.Join(binDir, "lockhttp"), "verify-log", "--dsn", pg.DSN, "--pub", filepath.Join(e.up.AuditDir, audit.KeyFileName+audit.PubSuffix))
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("verify-log --dsn: %v\n%s%s", err, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "CLEAN") {
		t.Errorf("verify-log --dsn:\n%s", out.String())
	}
	out.Reset()
	cmd = exec.Command(filepath.Join(binDir, "lockhttp"), "verify-log", e.up.AuditDir)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("verify-log of the files: %v\n%s", err, out.String())
	}
}

// gateStatusRaw is the gate's GET /status, as text.
func gateStatusRaw(t *testing.T, e *running) string {
	t.Helper()
	resp, err := unixsock.Client(e.up.GateSocket, 2*time.Second).Get("http://unix/status")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// waitCopied waits until every line of the audit files is in the database, then checks that
// each is there once.
func waitCopied(t *testing.T, e *running, dsn string) {
	t.Helper()
	ctx := context.Background()
	var want map[string]string // file:line_no → line
	var got int
	testkit.WaitFor(t, 20*time.Second, "every audit line in the database", func() bool {
		want = map[string]string{}
		files, _ := filepath.Glob(filepath.Join(e.up.AuditDir, "*.jsonl"))
		for _, f := range files {
			data, _ := os.ReadFile(f)
			for i, l := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
				if l != "" {
					want[fmt.Sprintf("%s:%d", filepath.Base(f), i+1)] = l
				}
			}
		}
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return false
		}
		defer conn.Close(ctx)
		if conn.QueryRow(ctx, `SELECT count(*) FROM lockhttp_audit`).Scan(&got) != nil {
			return false
		}
		return got >= len(want)
	})
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT file, line_no, line FROM lockhttp_audit`)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for rows.Next() {
		var file, line string
		var n int
		if err := rows.Scan(&file, &n, &line); err != nil {
			t.Fatal(err)
		}
		k := fmt.Sprintf("%s:%d", file, n)
		seen[k]++
		if w, ok := want[k]; ok && w != line {
			t.Errorf("%s differs in the database", k)
		}
	}
	for k := range want {
		if seen[k] != 1 {
			t.Errorf("%s is in the database %d times, want once", k, seen[k])
		}
	}
	if len(seen) > len(want) {
		t.Errorf("the database has %d lines, the files %d", len(seen), len(want))
	}
}

// scraped is the value of series (a family without labels, or one series written with its
// labels) on the metrics page at url; -1 when the page or the series is missing.
func scraped(t *testing.T, url, series string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("%s: %q: %v", url, line, err)
			}
			return f
		}
	}
	return -1
}

// promtoolCheck checks every family on the metrics page at url with promtool check metrics.
func promtoolCheck(t *testing.T, url string) {
	t.Helper()
	promtool := requireTool(t, "promtool")
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil || len(out) != 0 {
		t.Errorf("promtool check metrics on %s: %v\n%s", url, err, out)
	}
}
