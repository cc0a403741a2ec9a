package console

import (
	"crypto/rand"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/consoleapi"
	"github.com/lockhttp/lockhttp/internal/mtls"
)

// testFleet is a CA and the files of the identities it issued.
type testFleet struct {
	t   *testing.T
	dir string
	ca  *mtls.CA
}

func newTestFleet(t *testing.T) *testFleet {
	ca, err := mtls.NewCA("test", time.Now(), time.Hour, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	f := &testFleet{t: t, dir: t.TempDir(), ca: ca}
	os.WriteFile(filepath.Join(f.dir, "ca.pem"), mtls.CertPEM(ca.Cert), 0o644)
	return f
}

func (f *testFleet) issue(kind, name string) *mtls.Source {
	f.t.Helper()
	id, _ := mtls.NewID(kind, name)
	is, err := f.ca.Issue(id, mtls.UsageOf(kind), nil, time.Now(), time.Hour, rand.Reader)
	if err != nil {
		f.t.Fatal(err)
	}
	key, _ := mtls.KeyPEM(is.Key)
	files := mtls.Files{Cert: filepath.Join(f.dir, kind+"-"+name+".pem"), Key: filepath.Join(f.dir, kind+"-"+name+"-key.pem"), CA: filepath.Join(f.dir, "ca.pem")}
	os.WriteFile(files.Cert, mtls.CertPEM(is.Cert), 0o644)
	os.WriteFile(files.Key, key, 0o600)
	src, err := mtls.Load(mtls.Options{Files: files})
	if err != nil {
		f.t.Fatal(err)
	}
	return src
}

// TestFleetHandler: over mutual TLS the console serves the policy to gate identities only and
// its status to gates and facades; it keeps each gate's last fetch (the version it holds, since
// when), and refuses any other identity with 403 and an audit record naming it.
func TestFleetHandler(t *testing.T) {
	a := &memAudit{}
	clock := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	now := func() time.Time { return clock }
	path := writePolicy(t, good)
	c, err := New(Config{PolicyPath: path, Audit: a, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	f := newTestFleet(t)
	gates, facades := mtls.MustAllow("spiffe://lockhttp/gate/*"), mtls.MustAllow("spiffe://lockhttp/facade/*")
	srv := mtls.NewServer(mtls.ServerOptions{Source: f.issue("console", "main"), Allow: mtls.Union(gates, facades)})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: c.FleetHandler(gates, facades), ConnContext: mtls.ConnContext}
	go hs.Serve(srv.Listener(l))
	t.Cleanup(func() { hs.Close() })
	client := func(src *mtls.Source) *http.Client {
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: src.ClientConfig(mtls.MustAllow("spiffe://lockhttp/console/*"))}}
	}
	get := func(cl *http.Client, path, etag string) (int, string, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", "https://"+l.Addr().String()+path, nil)
		if etag != "" {
			req.Header.Set("If-None-Match", etag)
		}
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header.Get("ETag")
	}
	status := func(cl *http.Client) consoleapi.Status {
		t.Helper()
		code, body, _ := get(cl, "/status", "")
		var st consoleapi.Status
		if code != 200 || json.Unmarshal([]byte(body), &st) != nil {
			t.Fatalf("GET /status: %d %s", code, body)
		}
		return st
	}

	gateA, gateB, alice := client(f.issue("gate", "a")), client(f.issue("gate", "b")), client(f.issue("facade", "alice"))
	code, body, etag := get(gateA, "/policy", "")
	var served Served
	if code != 200 || json.Unmarshal([]byte(body), &served) != nil || served.TOML != good {
		t.Fatalf("a gate's GET /policy: %d %s", code, body)
	}
	clock = clock.Add(time.Second)
	if code, _, _ := get(gateA, "/policy", etag); code != http.StatusNotModified {
		t.Fatalf("a gate's GET /policy with its tag: %d, want 304", code)
	}
	clock = clock.Add(time.Second)
	get(gateB, "/policy", "")

	// The facade reads the status, which names each gate's version; it may not read the policy.
	st := status(alice)
	if len(st.Gates) != 2 || st.Gates[0].ID != "spiffe://lockhttp/gate/a" || st.Gates[1].ID != "spiffe://lockhttp/gate/b" {
		t.Fatalf("gates %+v", st.Gates)
	}
	ga := st.Gates[0]
	if ga.Version != served.Version || ga.Fetches != 2 || !ga.At.Equal(clock.Add(-time.Second)) || !ga.Since.Equal(clock.Add(-2*time.Second)) || ga.Remote == "" {
		t.Errorf("gate a %+v: want version %s, 2 fetches, since its first, at its second", ga, served.Version)
	}
	if code, body, _ := get(alice, "/policy", ""); code != http.StatusForbidden || !strings.Contains(body, "this identity may not GET /policy") {
		t.Errorf("a facade's GET /policy: %d %s", code, body)
	}
	var refused []string
	for _, r := range a.recs {
		if r.Event == "peer-refused" {
			refused = append(refused, r.Detail)
		}
	}
	if len(refused) != 1 || !strings.Contains(refused[0], "spiffe://lockhttp/facade/alice") || !strings.Contains(refused[0], "GET /policy") {
		t.Errorf("audit records of refusals: %q", refused)
	}

	// A new policy: a gate that fetches it holds it since then.
	os.WriteFile(path, []byte(strings.Replace(good, "version = 1\n", "version = 1\ndeny = [\"evil.example\"]\n", 1)), 0o600)
	c.reload()
	clock = clock.Add(time.Second)
	get(gateA, "/policy", etag)
	st = status(gateB)
	if st.Gates[0].Version != st.Version || !st.Gates[0].Since.Equal(clock) || st.Gates[1].Version == st.Version {
		t.Errorf("after a new policy: %+v (serving %s)", st.Gates, st.Version)
	}
}

// TestGateInstances: the replicas of one identity are told apart by the name each gives
// (consoleapi.HeaderGate); a malformed name is none, and a gate silent for gateForget is
// forgotten.
func TestGateInstances(t *testing.T) {
	clock := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	c, err := New(Config{PolicyPath: writePolicy(t, good), Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	id, _ := mtls.NewID("gate", "k8s")
	for _, name := range []string{"gate-7d9f-abc", "gate-7d9f-def", "a b", strings.Repeat("x", 65), "gate-7d9f-abc"} {
		r, _ := http.NewRequest("GET", "/policy", nil)
		r.Header.Set(consoleapi.HeaderGate, name)
		c.sawGate(id, instanceOf(r), "10.0.0.1:1", c.Current())
	}
	c.mu.Lock()
	seen := c.gatesSeenLocked()
	c.mu.Unlock()
	var names []string
	for _, g := range seen {
		names = append(names, g.Instance)
	}
	if strings.Join(names, ",") != ",gate-7d9f-abc,gate-7d9f-def" { // seen at once: by name
		t.Errorf("instances %q", names)
	}
	clock = clock.Add(gateForget + time.Second)
	c.mu.Lock()
	seen = c.gatesSeenLocked()
	c.mu.Unlock()
	if len(seen) != 0 {
		t.Errorf("gates silent for %v still listed: %+v", gateForget, seen)
	}
}
