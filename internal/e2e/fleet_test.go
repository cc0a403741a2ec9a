package e2e

import (
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
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockhttp/lockhttp/internal/gate"
	"github.com/lockhttp/lockhttp/internal/hubapi"
	"github.com/lockhttp/lockhttp/internal/hubclient"
	"github.com/lockhttp/lockhttp/internal/testkit"
	"github.com/lockhttp/lockhttp/internal/unixsock"
)

const fleetPolicy = `version = 1
trusted = ["origin.test"]

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
hold = "60s"
`

// fleet is three gates and two console/hub replicas on one PostgreSQL database, each its own
// process, as a fleet runs them (here on one machine, the gates reaching the hubs over HTTP with
// the gate's token).
type fleet struct {
	t      *testing.T
	dir    string
	pg     *pgServer
	dsn    string
	origin *originRecorder
	port   int
	hubs   []*fleetProc // replicas 0 and 1
	gates  []*fleetProc // gates A, B, C: A on replica 0, B and C on replica 1
	cli    string       // lox's token file
}

type fleetProc struct {
	name string
	args []string
	addr string // the hub's or the gate's listen address
	sock string // the console's or the gate's admin socket
	log  string
	cmd  *exec.Cmd
	done chan struct{}
}

func (p *fleetProc) start(t *testing.T) {
	t.Helper()
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(filepath.Join(binDir, p.name), p.args...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.done = make(chan struct{})
	go func() { p.cmd.Wait(); f.Close(); close(p.done) }()
}

func (p *fleetProc) stop(sig syscall.Signal) {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *fleetProc) logText() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

func startFleet(t *testing.T) *fleet {
	t.Helper()
	pg := startPostgres(t)
	f := &fleet{t: t, dir: t.TempDir(), pg: pg, dsn: pg.DSN, origin: &originRecorder{}}
	o := httptest.NewServer(f.origin)
	t.Cleanup(o.Close)
	f.port = o.Listener.Addr().(*net.TCPAddr).Port
	pol := filepath.Join(f.dir, "policy.toml")
	must(t, os.WriteFile(pol, []byte(fmt.Sprintf(fleetPolicy, f.port)), 0o600))
	dsnFile := filepath.Join(f.dir, "hub.dsn")
	must(t, os.WriteFile(dsnFile, []byte(pg.DSN+"\n"), 0o600))
	f.cli = filepath.Join(f.dir, "cli.token")
	key, gateTok := filepath.Join(f.dir, "hub-key.pem"), filepath.Join(f.dir, "gate.token")
	for i := range 2 {
		d := filepath.Join(f.dir, fmt.Sprintf("console%d", i))
		must(t, os.MkdirAll(d, 0o700))
		p := &fleetProc{name: "console", addr: freeAddr(t), sock: filepath.Join(d, "console.sock"), log: filepath.Join(d, "console.log")}
		p.args = []string{"-policy", pol, "-state", filepath.Join(d, "state.json"), "-socket", p.sock, "-audit", filepath.Join(d, "audit"),
			"-watch", "500ms", "-hub-listen", p.addr, "-hub-store", "postgres", "-hub-dsn-file", dsnFile,
			"-hub-key", key, "-hub-gate-token", gateTok, "-hub-cli-token", f.cli}
		f.hubs = append(f.hubs, p)
		// One after the other: the first makes the key and the tokens the second reads.
		p.start(t)
		t.Cleanup(func() { p.stop(syscall.SIGTERM) })
		f.waitHub(t, i)
	}
	for i, name := range []string{"A", "B", "C"} {
		d := filepath.Join(f.dir, "gate"+name)
		must(t, os.MkdirAll(d, 0o700))
		h := f.hubs[min(i, 1)]
		p := &fleetProc{name: "gate", addr: freeAddr(t), sock: filepath.Join(d, "admin.sock"), log: filepath.Join(d, "gate.log")}
		p.args = []string{"-listen", p.addr, "-console", h.sock, "-audit", filepath.Join(d, "audit"), "-admin", p.sock,
			"-hub", "http://" + h.addr, "-hub-token", gateTok, "-hub-key", key + ".pub"}
		if os.Geteuid() == 0 {
			p.args = append(p.args, "-allow-root")
		}
		f.gates = append(f.gates, p)
		p.start(t)
		t.Cleanup(func() { p.stop(syscall.SIGTERM) })
	}
	for i := range f.gates {
		f.waitGate(t, i)
	}
	f.waitConnected(t, time.Time{})
	return f
}

// waitConnected waits until the three gates' event streams are up since since: each gate reports
// what it holds when its stream connects and every 5 s after, which the hub records as the
// gate's row in hub_gates.
func (f *fleet) waitConnected(t *testing.T, since time.Time) {
	t.Helper()
	testkit.WaitFor(t, 30*time.Second, "the three gates connected to their hubs", func() bool {
		return f.count("SELECT count(*) FROM hub_gates WHERE seen > $1", since) >= 3
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (f *fleet) waitHub(t *testing.T, i int) {
	t.Helper()
	p := f.hubs[i]
	testkit.WaitFor(t, 30*time.Second, "hub replica "+strconv.Itoa(i)+" serving", func() bool {
		select {
		case <-p.done:
			t.Fatalf("console %d exited:\n%s", i, p.logText())
		default:
		}
		resp, err := http.Get("http://" + p.addr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}

func (f *fleet) waitGate(t *testing.T, i int) {
	t.Helper()
	p := f.gates[i]
	testkit.WaitFor(t, 30*time.Second, "gate "+strconv.Itoa(i)+" deciding with the policy", func() bool {
		select {
		case <-p.done:
			t.Fatalf("gate %d exited:\n%s", i, p.logText())
		default:
		}
		resp, err := unixsock.Client(p.sock, 2*time.Second).Get("http://unix/status")
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return strings.Contains(string(b), `"policy_version":"`) && !strings.Contains(string(b), `"policy_version":""`)
	})
}

// count runs a query of one number on the hub's database.
func (f *fleet) count(q string, args ...any) int {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, f.dsn)
	if err != nil {
		return -1
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(ctx, q, args...).Scan(&n); err != nil {
		return -1
	}
	return n
}

func (f *fleet) exec(q string) {
	f.t.Helper()
	conn, err := pgx.Connect(context.Background(), f.dsn)
	if err != nil {
		f.t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), q); err != nil {
		f.t.Fatal(err)
	}
}

type fleetResult struct {
	status int
	code   string
	ticket string
	err    error
	at     time.Time
}

// send posts body to path through gate g; timeout bounds the client's wait.
func (f *fleet) send(g int, path, body string, timeout time.Duration) <-chan fleetResult {
	ch := make(chan fleetResult, 1)
	go func() {
		pu, _ := url.Parse("http://" + f.gates[g].addr)
		c := &http.Client{Timeout: timeout, Transport: &http.Transport{Proxy: http.ProxyURL(pu), DisableKeepAlives: true}}
		resp, err := c.Post(fmt.Sprintf("http://origin.test:%d%s", f.port, path), "text/plain", strings.NewReader(body))
		if err != nil {
			ch <- fleetResult{err: err, at: time.Now()}
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		ch <- fleetResult{status: resp.StatusCode, code: resp.Header.Get(gate.HeaderCode), ticket: resp.Header.Get(gate.HeaderTicket), at: time.Now()}
	}()
	return ch
}

func (f *fleet) facade(i int) *hubclient.Facade {
	f.t.Helper()
	tok, err := hubclient.ReadToken(f.cli)
	if err != nil {
		f.t.Fatal(err)
	}
	return hubclient.NewFacade("http://"+f.hubs[i].addr, tok)
}

// waitTicket waits until replica i lists a pending ticket for path held held times.
func (f *fleet) waitTicket(t *testing.T, i int, path string, held int) hubapi.Ticket {
	t.Helper()
	want := fmt.Sprintf("http://origin.test:%d%s", f.port, path)
	var got hubapi.Ticket
	testkit.WaitFor(t, 20*time.Second, fmt.Sprintf("replica %d to show %s held %d times", i, path, held), func() bool {
		ts, err := f.facade(i).Pending(context.Background())
		if err != nil {
			return false
		}
		for _, tk := range ts {
			if tk.URL == want && tk.Holders == held {
				got = tk
				return true
			}
		}
		return false
	})
	return got
}

func (f *fleet) hits(path string) int {
	n := 0
	for _, r := range f.origin.all() {
		if r.Path == path {
			n++
		}
	}
	return n
}

func answer(t *testing.T, ch <-chan fleetResult, within time.Duration) fleetResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(within):
		t.Fatalf("no answer within %s", within)
	}
	return fleetResult{}
}

// approveRelease: a ticket raised by gate A (replica 0) and joined by gate C (replica 1) is
// approved on replica 1 with lox; both held requests are released, once each.
func (f *fleet) approveRelease(t *testing.T, path string) {
	a := f.send(0, path, "x", 90*time.Second)
	tk := f.waitTicket(t, 0, path, 1)
	c := f.send(2, path, "x", 90*time.Second)
	f.waitTicket(t, 1, path, 2)
	out, err := execLox(t, "approve", tk.ID, "--hub", "http://"+f.hubs[1].addr, "--hub-token", f.cli).CombinedOutput()
	if err != nil {
		t.Fatalf("lox approve on replica 1: %v\n%s", err, out)
	}
	for name, ch := range map[string]<-chan fleetResult{"A": a, "C": c} {
		if r := answer(t, ch, 30*time.Second); r.status != 200 || r.err != nil {
			t.Fatalf("the request held on gate %s: %+v", name, r)
		}
	}
	if n := f.hits(path); n != 2 {
		t.Fatalf("%d requests reached the origin, want the two held", n)
	}
	if n := f.count("SELECT count(*) FROM hub_decisions WHERE ticket = $1", tk.ID); n != 1 {
		t.Fatalf("%d decisions of %s", n, tk.ID)
	}
}

// TestFleetOnPostgres: three gates and two console/hub replicas on one PostgreSQL database.
// A ticket raised by gate A and approved on replica B releases the identical request held on
// gates A and C; concurrent retries through the three gates spend a single-use authorisation
// once; a listener's connection terminated, a replica killed during an approval and a restart of
// PostgreSQL each lose and duplicate no decision.
func TestFleetOnPostgres(t *testing.T) {
	f := startFleet(t)

	t.Run("an approval on one replica releases the held requests of every gate", func(t *testing.T) {
		f.approveRelease(t, "/release")
	})

	t.Run("concurrent retries through three gates spend a single use once", func(t *testing.T) {
		const rounds, n = 10, 30
		for round := range rounds {
			path := fmt.Sprintf("/once%d", round)
			// A request whose client gives up: its ticket waits with nothing held.
			r := answer(t, f.send(round%3, path, "x", 1500*time.Millisecond), 30*time.Second)
			if r.err == nil {
				t.Fatalf("the first request was answered: %+v", r)
			}
			tk := f.waitTicket(t, round%2, path, 0)
			if _, err := f.facade((round+1)%2).Decide(context.Background(), tk.ID, tk.Fingerprint, true, "fleet-test", ""); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			var mu sync.Mutex
			released := 0
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := <-f.send(i%3, path, "x", 3*time.Second)
					if r.status == 200 {
						mu.Lock()
						released++
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			if released != 1 || f.hits(path) != 1 {
				t.Fatalf("round %d: %d of %d retries released, %d reached the origin; want 1", round, released, n, f.hits(path))
			}
			// The retries that found it spent wait on a new ticket: answer it, so that the
			// container stays under its pending bound.
			ts, _ := f.facade(0).Pending(context.Background())
			for _, tk := range ts {
				f.facade(0).Decide(context.Background(), tk.ID, tk.Fingerprint, false, "fleet-test", "done")
			}
		}
	})

	t.Run("a listening connection terminated loses no decision", func(t *testing.T) {
		path := "/terminated"
		a := f.send(0, path, "x", 90*time.Second)
		tk := f.waitTicket(t, 0, path, 1)
		c := f.send(2, path, "x", 90*time.Second)
		f.waitTicket(t, 1, path, 2)
		if n := f.count("SELECT count(pg_terminate_backend(pid))::int FROM pg_stat_activity WHERE query = 'LISTEN lockhttp_hub'"); n != 2 {
			t.Fatalf("%d listening connections terminated, want the two replicas'", n)
		}
		if _, err := f.facade(1).Decide(context.Background(), tk.ID, tk.Fingerprint, true, "fleet-test", ""); err != nil {
			t.Fatal(err)
		}
		for name, ch := range map[string]<-chan fleetResult{"A": a, "C": c} {
			if r := answer(t, ch, 30*time.Second); r.status != 200 {
				t.Fatalf("gate %s after the listeners were cut: %+v", name, r)
			}
		}
		if f.hits(path) != 2 || f.count("SELECT count(*) FROM hub_decisions WHERE ticket = $1", tk.ID) != 1 {
			t.Fatalf("%d reached the origin, %d decisions", f.hits(path), f.count("SELECT count(*) FROM hub_decisions WHERE ticket = $1", tk.ID))
		}
	})

	t.Run("a replica killed during an approval loses and duplicates no decision", func(t *testing.T) {
		for round := range 3 {
			path := fmt.Sprintf("/killed%d", round)
			a := f.send(0, path, "x", 120*time.Second)
			tk := f.waitTicket(t, 0, path, 1)
			c := f.send(2, path, "x", 120*time.Second)
			f.waitTicket(t, 1, path, 2)
			// The approval goes to replica 1, which is killed while it answers (at once, or a
			// few milliseconds in).
			done := make(chan error, 1)
			go func() {
				_, err := f.facade(1).Decide(context.Background(), tk.ID, tk.Fingerprint, true, "fleet-test", "")
				done <- err
			}()
			time.Sleep(time.Duration(round*3) * time.Millisecond)
			f.hubs[1].stop(syscall.SIGKILL)
			err := <-done
			decided := f.count("SELECT count(*) FROM hub_decisions WHERE ticket = $1", tk.ID)
			t.Logf("round %d: the approval answered %v; %d decision kept", round, err, decided)
			if decided == 0 {
				// Not kept: the person approves again, on the replica that is up.
				if _, err := f.facade(0).Decide(context.Background(), tk.ID, tk.Fingerprint, true, "fleet-test", ""); err != nil {
					t.Fatal(err)
				}
			}
			restarted := time.Now()
			f.hubs[1].start(t)
			f.waitHub(t, 1)
			for name, ch := range map[string]<-chan fleetResult{"A": a, "C": c} {
				if r := answer(t, ch, 60*time.Second); r.status != 200 {
					t.Fatalf("round %d: gate %s: %+v", round, name, r)
				}
			}
			if f.hits(path) != 2 || f.count("SELECT count(*) FROM hub_decisions WHERE ticket = $1", tk.ID) != 1 {
				t.Fatalf("round %d: %d reached the origin, %d decisions", round, f.hits(path), f.count("SELECT count(*) FROM hub_decisions WHERE ticket = $1", tk.ID))
			}
			f.waitConnected(t, restarted)
		}
	})

	t.Run("a restart of PostgreSQL loses and duplicates no decision", func(t *testing.T) {
		path := "/pgrestart"
		a := f.send(0, path, "x", 120*time.Second)
		tk := f.waitTicket(t, 0, path, 1)
		c := f.send(2, path, "x", 120*time.Second)
		f.waitTicket(t, 1, path, 2)
		f.pg.stop()
		if _, err := f.facade(1).Decide(context.Background(), tk.ID, tk.Fingerprint, true, "fleet-test", ""); err == nil {
			t.Fatal("an approval with the database down succeeded")
		}
		f.pg.start()
		var err error
		testkit.WaitFor(t, 30*time.Second, "the approval taken once the database is back", func() bool {
			_, err = f.facade(1).Decide(context.Background(), tk.ID, tk.Fingerprint, true, "fleet-test", "")
			return err == nil
		})
		for name, ch := range map[string]<-chan fleetResult{"A": a, "C": c} {
			if r := answer(t, ch, 60*time.Second); r.status != 200 {
				t.Fatalf("gate %s after the restart: %+v", name, r)
			}
		}
		if f.hits(path) != 2 || f.count("SELECT count(*) FROM hub_decisions WHERE ticket = $1", tk.ID) != 1 {
			t.Fatalf("%d reached the origin, %d decisions", f.hits(path), f.count("SELECT count(*) FROM hub_decisions WHERE ticket = $1", tk.ID))
		}
		// And the fleet still works as before.
		f.waitConnected(t, time.Now())
		f.approveRelease(t, "/after-restart")
	})
}

// TestFleetReleaseLatency measures, with LOCKHTTP_FLEET_ROUNDS=N, the time from an approval on
// replica 1 to the release of the identical request held on gate A (replica 0) and gate C
// (replica 1), and prints its p50 and p99 (bench/RESULTS.md). It asserts only that each request
// is released.
func TestFleetReleaseLatency(t *testing.T) {
	rounds, _ := strconv.Atoi(os.Getenv("LOCKHTTP_FLEET_ROUNDS"))
	if rounds <= 0 {
		t.Skip("set LOCKHTTP_FLEET_ROUNDS to measure")
	}
	f := startFleet(t)
	lat := map[string][]time.Duration{}
	for round := range rounds {
		path := fmt.Sprintf("/lat%d", round)
		a := f.send(0, path, "x", 90*time.Second)
		tk := f.waitTicket(t, 0, path, 1)
		c := f.send(2, path, "x", 90*time.Second)
		f.waitTicket(t, 1, path, 2)
		start := time.Now()
		if _, err := f.facade(1).Decide(context.Background(), tk.ID, tk.Fingerprint, true, "bench", ""); err != nil {
			t.Fatal(err)
		}
		for name, ch := range map[string]<-chan fleetResult{"gate A (replica 0, told by NOTIFY)": a, "gate C (replica 1, which decided)": c} {
			r := answer(t, ch, 30*time.Second)
			if r.status != 200 {
				t.Fatalf("round %d: %+v", round, r)
			}
			lat[name] = append(lat[name], r.at.Sub(start))
			lat["both"] = append(lat["both"], r.at.Sub(start))
		}
	}
	for name, l := range lat {
		sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
		p := func(q float64) time.Duration {
			return l[min(len(l)-1, int(q*float64(len(l))))].Round(100 * time.Microsecond)
		}
		t.Logf("approval to release, %s: %d requests, p50 %s, p99 %s, max %s", name, len(l), p(0.50), p(0.99), p(1))
	}
}

// TestFleetDocBlock runs docs/fleet.md's console command as a reader would copy it, with its
// files in a directory of the test's own and its database the test's: the console starts on
// PostgreSQL, creates the schema and serves. Every sh block of docs/fleet.md is a test block.
func TestFleetDocBlock(t *testing.T) {
	root, _ := filepath.Abs("../..")
	doc := filepath.Join(root, "docs", "fleet.md")
	blocks, err := readDocBlocks(doc)
	if err != nil {
		t.Fatal(err)
	}
	if unmarked, err := unmarkedBlocks(doc); err != nil || len(unmarked) > 0 {
		t.Fatalf("docs/fleet.md: the sh blocks of lines %v are run by no test %v", unmarked, err)
	}
	var script string
	for _, b := range blocks {
		if b.Name == "fleet-console" {
			script = b.Script
		}
	}
	if script == "" {
		t.Fatalf("docs/fleet.md has no test block fleet-console: %+v", blocks)
	}
	pg := startPostgres(t)
	dir := t.TempDir()
	for _, d := range []string{"etc", "var", "run"} {
		must(t, os.MkdirAll(filepath.Join(dir, d), 0o700))
	}
	must(t, os.WriteFile(filepath.Join(dir, "etc", "policy.toml"), []byte("version = 1\ntrusted = [\"github.com\"]\n"), 0o600))
	addr := freeAddr(t)
	for old, repl := range map[string]string{
		"postgres://lockhttp@db.internal:5432/lockhttp_hub?sslmode=verify-full": pg.DSN,
		"/etc/lockhttp":     filepath.Join(dir, "etc"),
		"/var/lib/lockhttp": filepath.Join(dir, "var"),
		"/run/lockhttp":     filepath.Join(dir, "run"),
		"0.0.0.0:3131":      addr,
		"\nconsole ":        "\n" + filepath.Join(binDir, "console") + " ",
	} {
		if !strings.Contains(script, old) {
			t.Fatalf("docs/fleet.md's fleet-console block no longer has %q:\n%s", old, script)
		}
		script = strings.ReplaceAll(script, old, repl)
	}
	cmd := exec.Command("sh", "-ec", script)
	out := &testkit.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	must(t, cmd.Start())
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	defer func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		<-done
	}()
	testkit.WaitFor(t, 30*time.Second, "the console of docs/fleet.md serving its hub", func() bool {
		select {
		case <-done:
			t.Fatalf("the block exited:\n%s", out)
		default:
		}
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	if fi, err := os.Stat(filepath.Join(dir, "etc", "hub.dsn")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the DSN file: %v %v", fi, err)
	}
	f := &fleet{t: t, dsn: pg.DSN}
	if n := f.count("SELECT version FROM lockhttp_hub_schema"); n < 1 {
		t.Fatalf("the schema's version in the database: %d\n%s", n, out)
	}
}
