package console

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/unixsock"
)

type memAudit struct {
	mu   sync.Mutex
	recs []audit.Record
}

func (m *memAudit) Write(_ context.Context, r *audit.Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recs = append(m.recs, *r)
	return nil
}

func (m *memAudit) events() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, r := range m.recs {
		out = append(out, r.Event)
	}
	return out
}

// serve runs the console's handler on a unix socket and returns a client for it.
func serve(t *testing.T, c *Console) *http.Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "console.sock")
	l, err := unixsock.Listen(sock, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: c.Handler(), ConnContext: unixsock.ConnContext}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return unixsock.Client(sock, 2*time.Second)
}

func writePolicy(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "policy.toml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const good = "version = 1\ntrusted = [\"github.com\"]\n[sources]\nlocal = [\"127.0.0.1\"]\n"

func TestServesPolicyToTheGateUID(t *testing.T) {
	a := &memAudit{}
	c, err := New(Config{PolicyPath: writePolicy(t, good), GateUIDs: []int{os.Geteuid()}, Audit: a})
	if err != nil {
		t.Fatal(err)
	}
	cl := serve(t, c)
	resp, err := cl.Get("http://unix/policy")
	if err != nil {
		t.Fatal(err)
	}
	var s Served
	json.NewDecoder(resp.Body).Decode(&s)
	resp.Body.Close()
	if resp.StatusCode != 200 || s.TOML != good || !strings.HasPrefix(s.Version, "sha256:") {
		t.Fatalf("got %d %+v", resp.StatusCode, s)
	}
	// The same version again: 304.
	req, _ := http.NewRequest("GET", "http://unix/policy", nil)
	req.Header.Set("If-None-Match", `"`+s.Version+`"`)
	resp, err = cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotModified {
		t.Errorf("same version: %d, want 304", resp.StatusCode)
	}
}

func TestRefusesOtherUIDsAndAudits(t *testing.T) {
	a := &memAudit{}
	c, err := New(Config{PolicyPath: writePolicy(t, good), GateUIDs: []int{os.Geteuid() + 4242}, Audit: a})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := serve(t, c).Get("http://unix/policy")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 403 || strings.Contains(string(body), "trusted") {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	found := false
	for _, e := range a.events() {
		found = found || e == "peer-refused"
	}
	if !found {
		t.Errorf("no peer-refused audit record: %v", a.events())
	}
}

func TestInvalidEditKeepsServedPolicy(t *testing.T) {
	path := writePolicy(t, good)
	c, err := New(Config{PolicyPath: path, GateUIDs: []int{os.Geteuid()}})
	if err != nil {
		t.Fatal(err)
	}
	v := c.Current().Version
	bad := good + "[settings]\nhold = \"forever\"\n"
	os.WriteFile(path, []byte(bad), 0o600)
	if _, err := c.reload(); err == nil || !strings.Contains(err.Error(), `policy.toml:6: settings.hold: "forever" is not a duration`) {
		t.Fatalf("reload error %v", err)
	}
	if c.Current().Version != v {
		t.Fatal("an invalid edit changed the served policy")
	}
	// A valid edit is served.
	os.WriteFile(path, []byte("deny = [\"pastebin.com\"]\n"+good), 0o600)
	changed, err := c.reload()
	if err != nil || !changed || c.Current().Version == v {
		t.Fatalf("valid edit: changed %v err %v", changed, err)
	}
}

func TestInvalidFileAtStartIsAnError(t *testing.T) {
	_, err := New(Config{PolicyPath: writePolicy(t, "version = 1\ntrusted = 3\n")})
	if err == nil || !strings.Contains(err.Error(), "policy.toml:2: trusted: wrong type") {
		t.Fatalf("err %v", err)
	}
}

// insecureChannel is a human channel on loopback, allowed for tests by insecure_loopback.
const insecureChannel = "\n[[notify]]\nname = \"test\"\nurl = \"http://127.0.0.1:9/hook\"\nkind = \"webhook\"\nhuman = true\ninsecure_loopback = true\n"

// TestAgentUIDRefusesInsecureLoopback: with an agent on the machine, a policy with a loopback
// human channel is refused at its line with the fix, at the first start and in an edit; a
// policy approved with one before keeps it out of use (it neither notifies nor decides), and
// an edit that drops it applies. Without an agent the channel is used.
func TestAgentUIDRefusesInsecureLoopback(t *testing.T) {
	path := writePolicy(t, good+insecureChannel)
	_, err := New(Config{PolicyPath: path, AgentUIDs: []int{10099}})
	if err == nil || !strings.Contains(err.Error(), `policy.toml:11: notify "test": insecure_loopback = true: an agent runs on this machine`) ||
		!strings.Contains(err.Error(), "remove insecure_loopback") {
		t.Fatalf("first start with an agent: %v", err)
	}

	state := filepath.Join(t.TempDir(), "console-state.json")
	c, err := New(Config{PolicyPath: path, StatePath: state})
	if err != nil {
		t.Fatal(err)
	}
	if ch := c.NotifyChannels(); len(ch) != 1 || ch[0].Name != "test" {
		t.Fatalf("without an agent: channels %+v", ch)
	}

	// The same approved policy, now with an agent: the channel is out of use.
	c, err = New(Config{PolicyPath: path, StatePath: state, AgentUIDs: []int{10099}})
	if err != nil {
		t.Fatal(err)
	}
	if ch := c.NotifyChannels(); len(ch) != 0 {
		t.Fatalf("with an agent, the approved policy's loopback channel is used: %+v", ch)
	}
	// An edit adding another is refused; one dropping them applies at once.
	os.WriteFile(path, []byte(good+insecureChannel+strings.ReplaceAll(insecureChannel, `"test"`, `"test2"`)), 0o600)
	if _, err := c.reload(); err == nil || !strings.Contains(err.Error(), `notify "test2": insecure_loopback = true`) {
		t.Fatalf("an edit with another loopback channel: %v", err)
	}
	os.WriteFile(path, []byte(good), 0o600)
	if changed, err := c.reload(); err != nil || !changed {
		t.Fatalf("the edit dropping the channel: changed %v, %v", changed, err)
	}
}
