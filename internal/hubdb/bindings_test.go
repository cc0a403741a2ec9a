package hubdb

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/console"
	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

const pol = "version = 1\ntrusted = [\"github.com\"]\n[sources]\nlocal = [\"127.0.0.1\"]\n"

func hashOf(i int) string { return fmt.Sprintf("%064x", i+1) }

// Two console replicas on one database serve the same bindings: one bound by an approval on one
// replica's hub is served by the other's console to its gates, at once (a notification) and
// with the unbinding too; concurrent bindings on both are all kept.
func TestBindingsShared(t *testing.T) {
	p := server(t)
	dsn := freshDB(t, p)
	dir := t.TempDir()
	polPath := filepath.Join(dir, "policy.toml")
	os.WriteFile(polPath, []byte(pol), 0o600)
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	var cs []*console.Console
	var hs []*hub.Hub
	var s *Store
	for i := range 2 {
		s = open(t, dsn)
		c, err := console.New(console.Config{PolicyPath: polPath, StatePath: filepath.Join(dir, fmt.Sprintf("state%d.json", i)), Bindings: s})
		if err != nil {
			t.Fatal(err)
		}
		h, err := hub.New(hub.Config{Store: s, Key: key, Bind: func(b hub.Bind, by, ticket string) error { return c.Bind(b.Container, b.Hash, by, ticket) }})
		if err != nil {
			t.Fatal(err)
		}
		cs, hs = append(cs, c), append(hs, h)
	}
	testkit.WaitFor(t, 10*time.Second, "both replicas listening", func() bool {
		n, err := s.Listening(context.Background())
		return err == nil && n == 2
	})
	// A ticket that binds, asked through replica 0 and approved on replica 1.
	a, err := hs[0].Ask(hub.AskRequest{Kind: hub.KindRequest, Container: "local", Method: "POST", URL: "https://api.anthropic.com/v1/messages",
		Rule: "claude", Fingerprint: "fp1:bind", Bind: &hub.Bind{Container: "local", Hash: hashOf(0)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hs[1].Decide(a.Ticket.ID, "fp1:bind", true, "cli:root", ""); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "replica 0's console serving the binding made on replica 1", func() bool {
		b := cs[0].Current().Bound["local"]
		return len(b) == 1 && b[0] == hashOf(0)
	})
	if cs[0].Current().Tag != cs[1].Current().Tag {
		t.Fatalf("the replicas serve tags %q and %q", cs[0].Current().Tag, cs[1].Current().Tag)
	}
	var wg sync.WaitGroup
	for i := 1; i <= 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := cs[i%2].Bind("local", hashOf(i), "cli:root", fmt.Sprintf("t%d", i)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	testkit.WaitFor(t, 5*time.Second, "both replicas serving the 21 bindings", func() bool {
		return len(cs[0].Current().Bound["local"]) == 21 && len(cs[1].Current().Bound["local"]) == 21 && cs[0].Current().Tag == cs[1].Current().Tag
	})
	if _, err := cs[1].Unbind("local", hashOf(0), "cli:root"); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "replica 0 no longer serving the unbound credential", func() bool {
		for _, h := range cs[0].Current().Bound["local"] {
			if h == hashOf(0) {
				return false
			}
		}
		return true
	})
	if bs := cs[0].Bindings(); len(bs) != 20 || bs[0].Hash == hashOf(0) {
		t.Fatalf("replica 0's bindings after the unbinding: %d", len(bs))
	}
}
