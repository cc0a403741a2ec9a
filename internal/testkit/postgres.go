package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Postgres is a PostgreSQL server of a test's own: Debian's binaries, a data directory in a
// temporary directory (initdb), run as nobody when the test runs as root, listening on a unix
// socket in that directory only.
type Postgres struct {
	t    testing.TB
	bin  string
	base string
	cred *syscall.Credential
	// DSN reaches the server's postgres database as its superuser.
	DSN string
}

// StartPostgres starts one, stopped when the test ends. It skips when PostgreSQL is not
// installed, except under CI=true, where .ci/run installs it: there it fails.
func StartPostgres(t testing.TB) *Postgres {
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
	p := &Postgres{t: t, bin: filepath.Dir(m[len(m)-1]), base: base}
	t.Cleanup(func() { os.RemoveAll(base) })
	if os.Geteuid() == 0 {
		// PostgreSQL refuses to run as root: run it as nobody.
		if err := os.Chown(base, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		p.cred = &syscall.Credential{Uid: 65534, Gid: 65534}
	}
	p.run("initdb", "-D", filepath.Join(base, "data"), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync")
	p.Start()
	t.Cleanup(p.Stop)
	p.DSN = fmt.Sprintf("host=%s port=54329 user=postgres dbname=postgres sslmode=disable", base)
	return p
}

func (p *Postgres) run(name string, args ...string) {
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

// Start starts the server (again, after Stop).
func (p *Postgres) Start() {
	p.t.Helper()
	p.run("pg_ctl", "-D", filepath.Join(p.base, "data"), "-l", filepath.Join(p.base, "log"), "-w", "-t", "60",
		"-o", fmt.Sprintf("-c listen_addresses='' -k %s -p 54329 -c fsync=off -c max_connections=200", p.base), "start")
}

// Stop stops the server (fast: open connections are cut), if it runs.
func (p *Postgres) Stop() {
	if _, err := os.Stat(filepath.Join(p.base, "data", "postmaster.pid")); err != nil {
		return
	}
	p.run("pg_ctl", "-D", filepath.Join(p.base, "data"), "-m", "fast", "-w", "stop")
}
