package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// TestFleetAuditDatabase: two gates of a fleet copy their audits to one PostgreSQL database,
// each row under its gate's identity, each chain its own: lockhttp verify-log --dsn-file checks
// every gate's chain, each with its gate's key; a line edited in one gate's rows is found in
// that gate's chain and the other stays clean; a key trusted for one gate does not vouch for
// the other's rows.
func TestFleetAuditDatabase(t *testing.T) {
	pg := startPostgres(t)
	rec := &originRecorder{}
	o := httptest.NewServer(rec)
	t.Cleanup(o.Close)
	port := o.Listener.Addr().(*net.TCPAddr).Port
	r := startTLSFleet(t, fmt.Sprintf(askPolicy, port, "30s"))
	dsnFile := filepath.Join(t.TempDir(), "audit.dsn")
	if err := os.WriteFile(dsnFile, []byte(pg.DSN+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var gates []*fleetGate
	for _, n := range []string{"a", "b"} {
		r.issue("gate", n)
		gates = append(gates, r.gate(n, "-audit-dsn-file", dsnFile))
	}
	// A second replica of gate a, as a Deployment's pods share one certificate and one audit
	// key: a chain of its own.
	gates = append(gates, r.gateAs("a", "gate-a-2", "-audit-dsn-file", dsnFile, "-audit-key", filepath.Join(gates[0].dir, "audit", audit.KeyFileName)))
	for j, g := range gates {
		testkit.WaitFor(t, 20*time.Second, "gate "+g.name+"'s policy", func() bool { return g.mustStatus().PolicyVersion != "" })
		for i := range 5 {
			if code, lcode, _, err := g.do("GET", fmt.Sprintf("http://origin.test:%d/%s%d-%d", port, g.name, j, i), 10*time.Second); err != nil || code != 200 {
				t.Fatalf("gate %s: %d %s %v", g.name, code, lcode, err)
			}
		}
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	testkit.WaitFor(t, 20*time.Second, "both gates' records and heads in the database", func() bool {
		for _, g := range gates {
			st := g.mustStatus()
			if st.AuditSink == nil || st.AuditSink.Behind != 0 || st.AuditSink.Rows < 5 {
				return false
			}
		}
		var heads int
		conn.QueryRow(ctx, `SELECT count(*) FROM lockhttp_audit_head WHERE gate LIKE 'spiffe://lockhttp/gate/%'`).Scan(&heads)
		return heads == 3
	})
	var ids []string
	rows, _ := conn.Query(ctx, `SELECT DISTINCT gate || '@' || instance FROM lockhttp_audit ORDER BY 1`)
	for rows.Next() {
		var g string
		rows.Scan(&g)
		ids = append(ids, g)
	}
	rows.Close()
	if strings.Join(ids, " ") != "spiffe://lockhttp/gate/a@gate-a spiffe://lockhttp/gate/a@gate-a-2 spiffe://lockhttp/gate/b@gate-b" {
		t.Fatalf("the database's chains: %q", ids)
	}

	pub := func(g *fleetGate) string { return filepath.Join(g.dir, "audit", audit.KeyFileName+audit.PubSuffix) }
	verify := func(args ...string) (int, string) {
		cmd := exec.Command(filepath.Join(binDir, "lockhttp"), append([]string{"verify-log", "--dsn-file", dsnFile}, args...)...)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, string(out)
	}
	keys := []string{"--pub", "spiffe://lockhttp/gate/a=" + pub(gates[0]), "--pub", "spiffe://lockhttp/gate/b=" + pub(gates[1])}
	code, out := verify(keys...)
	// Each chain: 5 requests that went out, each its intent and its record.
	if code != 0 || !strings.Contains(out, "spiffe://lockhttp/gate/a@gate-a: CLEAN: 10 records") || !strings.Contains(out, "spiffe://lockhttp/gate/a@gate-a-2: CLEAN: 10 records") ||
		!strings.Contains(out, "spiffe://lockhttp/gate/b@gate-b: CLEAN: 10 records") || !strings.Contains(out, "CLEAN: 3 chains in the database copy") {
		t.Fatalf("verify-log --dsn-file of two clean chains: exit %d\n%s", code, out)
	}
	if strings.Contains(out, pg.DSN) {
		t.Errorf("verify-log printed the DSN")
	}

	// One gate's key does not vouch for the other's rows.
	code, out = verify("--pub", "spiffe://lockhttp/gate/a="+pub(gates[0]), "--pub", "spiffe://lockhttp/gate/b="+pub(gates[0]))
	if code == 0 || !strings.Contains(out, "spiffe://lockhttp/gate/a@gate-a: CLEAN: ") || strings.Contains(out, "spiffe://lockhttp/gate/b@gate-b: CLEAN") {
		t.Errorf("gate b's rows checked with gate a's key: exit %d\n%s", code, out)
	}
	// A gate with no key given is a usage error naming it.
	if code, out := verify("--pub", "spiffe://lockhttp/gate/a="+pub(gates[0])); code != 2 || !strings.Contains(out, "no key for spiffe://lockhttp/gate/b") {
		t.Errorf("no key for gate b: exit %d\n%s", code, out)
	}

	// Gate b's record of its request /b1-1 (not its intent), edited in the database.
	tag, err := conn.Exec(ctx, `UPDATE lockhttp_audit SET line = replace(line, '/b1-', '/B1-') WHERE gate = 'spiffe://lockhttp/gate/b' AND line LIKE '%/b1-1%' AND event <> 'intent'`)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("editing a line: %v (%d rows)", err, tag.RowsAffected())
	}
	code, out = verify(keys...)
	if code != 1 || !strings.Contains(out, "spiffe://lockhttp/gate/a@gate-a: CLEAN: ") || !strings.Contains(out, "spiffe://lockhttp/gate/b@gate-b: TAMPERED: ") || !strings.Contains(out, "TAMPERED: 3 chains") {
		t.Fatalf("verify-log after the edit: exit %d\n%s", code, out)
	}
	if !strings.Contains(out, "spiffe://lockhttp/gate/b@gate-b: TAMPERED 2026") && !strings.Contains(out, "spiffe://lockhttp/gate/b@gate-b: TAMPERED ") {
		t.Errorf("no finding names gate b:\n%s", out)
	}
	// --gate checks one chain.
	if code, out := verify(append(keys, "--gate", "spiffe://lockhttp/gate/a")...); code != 0 || strings.Contains(out, "gate/b") || !strings.Contains(out, "CLEAN: 2 chains") {
		t.Errorf("--gate a: exit %d\n%s", code, out)
	}
	if code, out := verify(append(keys, "--gate", "spiffe://lockhttp/gate/b@gate-b")...); code != 1 || !strings.Contains(out, "TAMPERED: 1 chains") {
		t.Errorf("--gate b@gate-b: exit %d\n%s", code, out)
	}
	t.Logf("verify-log:\n%s", out)
}

// TestAuditDatabaseMigrates: a database a gate of an earlier version copied to (one gate, no
// identity) is brought to the fleet's tables by the first gate or lockhttp audit migrate that
// opens it, once, however many run at once; its rows become the gate without an identity's.
func TestAuditDatabaseMigrates(t *testing.T) {
	pg := startPostgres(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// The tables as the earlier version made them, with a row and a head.
	if _, err := conn.Exec(ctx, `CREATE TABLE lockhttp_audit (file text NOT NULL, line_no integer NOT NULL, seq bigint UNIQUE,
		line text NOT NULL, signed boolean NOT NULL, time timestamptz, event text, id text, container text, verdict text,
		code text, rule text, status integer, record json, PRIMARY KEY (file, line_no));
		CREATE TABLE lockhttp_audit_head (one boolean PRIMARY KEY DEFAULT true CHECK (one), head json NOT NULL);
		INSERT INTO lockhttp_audit (file, line_no, seq, line, signed) VALUES ('2026-01-01.jsonl', 1, 1, '{"seq":1}', false);
		INSERT INTO lockhttp_audit_head (head) VALUES ('{"seq":1}')`); err != nil {
		t.Fatal(err)
	}
	dsnFile := filepath.Join(t.TempDir(), "dsn")
	os.WriteFile(dsnFile, []byte(pg.DSN), 0o600)
	var wg sync.WaitGroup
	errs := make([]string, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := exec.Command(filepath.Join(binDir, "lockhttp"), "audit", "migrate", "--dsn-file", dsnFile).CombinedOutput()
			if err != nil {
				errs[i] = fmt.Sprintf("%v: %s", err, out)
			}
		}()
	}
	wg.Wait()
	for i, e := range errs {
		if e != "" {
			t.Errorf("migrate %d: %s", i, e)
		}
	}
	var version int
	var gate string
	if err := conn.QueryRow(ctx, `SELECT version FROM lockhttp_audit_schema`).Scan(&version); err != nil || version != 3 {
		t.Errorf("schema version %d, %v; want 3", version, err)
	}
	if err := conn.QueryRow(ctx, `SELECT gate || instance FROM lockhttp_audit WHERE seq = 1`).Scan(&gate); err != nil || gate != "" {
		t.Errorf("the earlier row's gate %q, %v; want the gate without an identity", gate, err)
	}
	if err := conn.QueryRow(ctx, `SELECT gate || instance FROM lockhttp_audit_head`).Scan(&gate); err != nil || gate != "" {
		t.Errorf("the earlier head's gate %q, %v", gate, err)
	}
	// Two gates may now hold the same file, line and record number.
	if _, err := conn.Exec(ctx, `INSERT INTO lockhttp_audit (gate, file, line_no, seq, line, signed) VALUES ('spiffe://lockhttp/gate/a', '2026-01-01.jsonl', 1, 1, '{"seq":1}', false)`); err != nil {
		t.Errorf("a second gate's first line: %v", err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO lockhttp_audit (gate, file, line_no, seq, line, signed) VALUES ('spiffe://lockhttp/gate/a', '2026-01-01.jsonl', 2, 1, '{"seq":1}', false)`); err == nil {
		t.Error("one gate's record number twice was taken")
	}
}
