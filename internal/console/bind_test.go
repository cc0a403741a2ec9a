package console

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const hashA = "0f393ff081f8c2d1e7b4a1c9d3e5f7a9b1c3d5e7f9a1b3c5d7e9f1a3b5c7d9e1"
const hashB = "1111111111111111111111111111111111111111111111111111111111111111"

// A binding is written to the state file and audited before it is served; it survives a
// restart, changes the served tag (the gate's ETag), and a binding that cannot be written is an
// error that leaves nothing served.
func TestBindServesPersistsAndAudits(t *testing.T) {
	a := &memAudit{}
	dir := t.TempDir()
	state := filepath.Join(dir, "state", "console-state.json")
	os.Mkdir(filepath.Dir(state), 0o700)
	pol := writePolicy(t, good)
	c, err := New(Config{PolicyPath: pol, StatePath: state, Audit: a})
	if err != nil {
		t.Fatal(err)
	}
	before := c.Current()
	if before.Tag != before.Version || before.Bound != nil {
		t.Fatalf("before any binding: tag %q bound %v", before.Tag, before.Bound)
	}
	for _, bad := range []struct{ container, hash, by string }{
		{"nobody", hashA, "cli:root"},                 // not in [sources]
		{"local", strings.ToUpper(hashA), "cli:root"}, // not lower-case hex
		{"local", hashA[:40], "cli:root"},
		{"local", hashA, " "},
	} {
		if err := c.Bind(bad.container, bad.hash, bad.by, "t1"); err == nil {
			t.Fatalf("Bind(%q, %q, %q) accepted", bad.container, bad.hash, bad.by)
		}
	}
	if err := c.Bind("local", hashA, "cli:root", "t1"); err != nil {
		t.Fatal(err)
	}
	after := c.Current()
	if got := after.Bound["local"]; len(got) != 1 || got[0] != hashA || after.Tag == before.Tag || after.Version != before.Version {
		t.Fatalf("after binding: %+v", after)
	}
	if err := c.Bind("local", hashA, "cli:root", "t2"); err != nil || len(c.Bindings()) != 1 || c.Current().Tag != after.Tag {
		t.Fatalf("binding again: %v, %d bindings", err, len(c.Bindings()))
	}
	var rec bool
	for _, r := range a.recs {
		if r.Rule == "credential-bound" && r.Approver == "cli:root" && r.Ticket == "t1" && r.Container == "local" && strings.Contains(r.Detail, hashA) {
			rec = true
		}
	}
	if !rec {
		t.Fatalf("no audit record of the binding: %+v", a.recs)
	}
	// A restart serves the binding from the state file.
	c2, err := New(Config{PolicyPath: pol, StatePath: state})
	if err != nil {
		t.Fatal(err)
	}
	if s := c2.Current(); s.Tag != after.Tag || len(s.Bound["local"]) != 1 {
		t.Fatalf("after a restart: %+v", s)
	}
	// The state file cannot be written: the binding is refused and nothing new is served.
	os.RemoveAll(filepath.Dir(state))
	if err := c2.Bind("local", hashB, "cli:root", "t3"); err == nil || !strings.Contains(err.Error(), "state file") {
		t.Fatalf("Bind with no state directory: %v", err)
	}
	if s := c2.Current(); len(s.Bound["local"]) != 1 || len(c2.Bindings()) != 1 {
		t.Fatalf("a failed binding is served: %+v", s)
	}
}

// A state file whose bindings were edited into something else is refused at start.
func TestStateWithBadBindingRefused(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "console-state.json")
	pol := writePolicy(t, good)
	c, err := New(Config{PolicyPath: pol, StatePath: state})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Bind("local", hashA, "cli:root", "t1"); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(state)
	os.WriteFile(state, []byte(strings.Replace(string(data), hashA, "sk-ant-api03-notahash", 1)), 0o600)
	if _, err := New(Config{PolicyPath: pol, StatePath: state}); err == nil || !strings.Contains(err.Error(), "bound[0]") {
		t.Fatalf("a bad binding in the state: %v", err)
	}
}

// Unbind takes a binding away by its container and hash prefix, on record; an ambiguous, short
// or unknown prefix changes nothing.
func TestUnbind(t *testing.T) {
	a := &memAudit{}
	state := filepath.Join(t.TempDir(), "state.json")
	c, err := New(Config{PolicyPath: writePolicy(t, good), StatePath: state, Audit: a})
	if err != nil {
		t.Fatal(err)
	}
	twin := hashA[:20] + strings.Repeat("2", 44)
	for _, h := range []string{hashA, hashB, twin} {
		if err := c.Bind("local", h, "cli:root", "t1"); err != nil {
			t.Fatal(err)
		}
	}
	tag := c.Current().Tag
	for _, bad := range []string{hashA[:11], hashA[:20], "zz" + hashA[2:14], hashA[:12] + "x"} {
		if _, err := c.Unbind("local", bad, "cli:root"); err == nil {
			t.Fatalf("Unbind(%q) accepted", bad)
		}
	}
	if _, err := c.Unbind("other", hashB[:12], "cli:root"); err == nil {
		t.Fatal("unbound another container's credential")
	}
	if c.Current().Tag != tag || len(c.Bindings()) != 3 {
		t.Fatal("a refused unbinding changed what is served")
	}
	gone, err := c.Unbind("local", "sha256:"+strings.ToUpper(hashA[:24]), "cli:alice")
	if err != nil || gone.Hash != hashA {
		t.Fatalf("Unbind: %+v %v", gone, err)
	}
	s := c.Current()
	if s.Tag == tag || len(s.Bound["local"]) != 2 {
		t.Fatalf("after the unbinding: %+v", s)
	}
	for _, h := range s.Bound["local"] {
		if h == hashA {
			t.Fatal("the unbound credential is still served")
		}
	}
	var rec bool
	for _, r := range a.recs {
		rec = rec || r.Rule == "credential-unbound" && r.Approver == "cli:alice" && strings.Contains(r.Detail, hashA)
	}
	if !rec {
		t.Fatal("no audit record of the unbinding")
	}
	c2, err := New(Config{PolicyPath: writePolicy(t, good), StatePath: state})
	if err != nil || len(c2.Bindings()) != 2 {
		t.Fatalf("after a restart: %v, %d bindings", err, len(c2.Bindings()))
	}
}

// A login the gate saw issued is bound without a ticket, on record with the gate as approver and
// the request's id; each container keeps at most maxIssued of them, its oldest issued one going
// first, and a human's bindings are never dropped for them.
func TestBindIssued(t *testing.T) {
	a := &memAudit{}
	state := filepath.Join(t.TempDir(), "state.json")
	c, err := New(Config{PolicyPath: writePolicy(t, good), StatePath: state, Audit: a})
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct{ container, hash, host, request string }{
		{"nobody", hashA, "platform.claude.com", "r1"},
		{"local", hashA[:40], "platform.claude.com", "r1"},
		{"local", hashA, "", "r1"},
		{"local", hashA, "platform.claude.com", ""},
	} {
		if err := c.BindIssued(bad.container, bad.hash, bad.host, bad.request); err == nil {
			t.Fatalf("BindIssued(%+v) accepted", bad)
		}
	}
	if err := c.Bind("local", hashB, "cli:root", "t1"); err != nil {
		t.Fatal(err)
	}
	hash := func(i int) string { return fmt.Sprintf("%064x", i+100) }
	for i := 0; i < maxIssued+3; i++ {
		if err := c.BindIssued("local", hash(i), "platform.claude.com", fmt.Sprintf("r%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	served := c.Current().Bound["local"]
	if len(served) != maxIssued+1 || !slices.Contains(served, hashB) {
		t.Fatalf("served %d hashes (the human's among them: %v); want %d", len(served), slices.Contains(served, hashB), maxIssued+1)
	}
	for i := 0; i < maxIssued+3; i++ {
		if want := i >= 3; slices.Contains(served, hash(i)) != want {
			t.Fatalf("issued login %d served: %v, want %v", i, !want, want)
		}
	}
	if err := c.BindIssued("local", hash(maxIssued+2), "platform.claude.com", "r99"); err != nil || len(c.Bindings()) != maxIssued+1 {
		t.Fatalf("binding an issued login again: %v, %d bindings", err, len(c.Bindings()))
	}
	var bound, dropped bool
	for _, r := range a.recs {
		if r.Rule == "credential-bound" && r.Approver == IssuedBy && r.ID == "r0" && r.Container == "local" && strings.Contains(r.Detail, hash(0)) && strings.Contains(r.Detail, "platform.claude.com") {
			bound = true
		}
		dropped = dropped || r.ID == "r8" && strings.Contains(r.Detail, "oldest issued login sha256:"+hash(0)+" is unbound")
	}
	if !bound || !dropped {
		t.Fatalf("audit records of the issued logins (bound %v, dropped %v): %+v", bound, dropped, a.recs)
	}
	c2, err := New(Config{PolicyPath: writePolicy(t, good), StatePath: state})
	if err != nil {
		t.Fatal(err)
	}
	bs := c2.Bindings()
	if len(bs) != maxIssued+1 || bs[len(bs)-1].Issued != "platform.claude.com" || bs[len(bs)-1].By != IssuedBy || bs[len(bs)-1].Request != fmt.Sprintf("r%d", maxIssued+2) {
		t.Fatalf("after a restart: %+v", bs)
	}
}
