package main

import (
	"crypto/ed25519"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/gate"
	"github.com/lockhttp/lockhttp/internal/hubapi"
	"github.com/lockhttp/lockhttp/internal/hubclient"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// The hub hears of a new policy as soon as the gate applies it, not at the next periodic report:
// the terminal's header names the policy the gate decides with.
func TestStateReportedWhenThePolicyIsApplied(t *testing.T) {
	var mu sync.Mutex
	var versions []string
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/gate/state" {
			http.NotFound(w, r)
			return
		}
		var s hubapi.GateState
		json.NewDecoder(r.Body).Decode(&s)
		mu.Lock()
		versions = append(versions, s.PolicyVersion)
		mu.Unlock()
		w.WriteHeader(204)
	}))
	defer fake.Close()
	reported := func(v string) bool {
		mu.Lock()
		defer mu.Unlock()
		return len(versions) > 0 && versions[len(versions)-1] == v
	}
	pub, _, _ := ed25519.GenerateKey(nil)
	hc := hubclient.New(fake.URL, "gate-token", pub, nil)
	aw, err := audit.Open(audit.Options{Dir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer aw.Close()
	cfg := gate.Config{Audit: aw}
	g := gate.New(cfg)
	applied := make(chan struct{}, 1)
	// The periodic report never comes within the test: only the signal can tell the hub.
	go reportState(t.Context(), g, hc, cfg, "127.0.0.1:3130", time.Hour, applied)
	testkit.WaitFor(t, 5*time.Second, "the first report, with no policy", func() bool { return reported("") })

	p, err := policy.Load("p.toml", []byte("version = 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	g.SetPolicy(p)
	kick(applied)
	testkit.WaitFor(t, 5*time.Second, "the report of the applied policy", func() bool { return reported(p.Version) })
}
