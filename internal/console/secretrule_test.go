package console

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
)

// anchoredSecret is a [[secret]] the gate's detector refuses (a pattern with ^), appended to
// reviewBase: its pattern is on line 15.
const anchoredSecret = `
[[secret]]
name = "acme"
pattern = '^acme_[0-9a-f]{32}'
hosts = ["api.acme.example"]
`

const anchoredErr = `policy.toml:15: secret "acme": pattern uses ^, $, \A or \z, but it is searched inside header values, URLs and bodies; remove them (use \b for a word boundary)`

// TestSecretTheGateRefusesIsNotApproved: an edit adding a [[secret]] the gate could not build
// its detector from is refused with its line and the fix, whether it would have been a
// tightening (applied at once) or a loosening (a review); the approved policy stays served,
// also after a restart.
func TestSecretTheGateRefusesIsNotApproved(t *testing.T) {
	tests := []struct {
		name string
		edit func(string) string
	}{
		{"a tightening", func(s string) string { return s + anchoredSecret }},
		{"with a loosening", func(s string) string {
			return strings.Replace(s, `verdict = "ask"`, `verdict = "free"`, 1) + anchoredSecret
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newReviewEnv(t)
			var out bytes.Buffer
			cfg := Config{PolicyPath: e.policy, StatePath: e.state, GateUIDs: []int{os.Geteuid()}, Audit: e.audit, Out: &out}
			c, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			approved := c.Current().Version
			e.write(t, tt.edit(reviewBase))
			changed, err := c.reload()
			if changed || err == nil || !strings.Contains(err.Error(), anchoredErr) {
				t.Fatalf("reload: changed %v, error %v; want %q", changed, err, anchoredErr)
			}
			if c.Current().Version != approved || c.Current().TOML != reviewBase {
				t.Fatal("the served policy changed")
			}
			if r := c.Pending(); r != nil {
				t.Fatalf("a review waits for %s: a human could approve what the gate cannot build", r.Version)
			}
			if !strings.Contains(out.String(), "policy file rejected, still serving") || !strings.Contains(out.String(), anchoredErr) {
				t.Errorf("console output %q", out.String())
			}
			if lines := strings.Join(c.StatusLines(), "\n"); !strings.Contains(lines, "the approved policy stays: ") || !strings.Contains(lines, anchoredErr) {
				t.Errorf("status lines %q", lines)
			}
			if s := getPolicy(t, serve(t, c)); s.Version != approved || s.TOML != reviewBase {
				t.Errorf("GET /policy serves %s", s.Version)
			}
			// A restart with the file as it is serves the approved policy still.
			c2, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if c2.Current().Version != approved || c2.Pending() != nil {
				t.Fatalf("after a restart: serving %s, pending %v", c2.Current().Version, c2.Pending())
			}
		})
	}
}

// TestSecretTheGateRefusesAtFirstStart: the first start with such a file is an error naming the
// line and the fix.
func TestSecretTheGateRefusesAtFirstStart(t *testing.T) {
	_, err := New(Config{PolicyPath: writePolicy(t, reviewBase+anchoredSecret)})
	if err == nil || !strings.Contains(err.Error(), anchoredErr) {
		t.Fatalf("err %v; want %q", err, anchoredErr)
	}
}

func getPolicy(t *testing.T, cl *http.Client) Served {
	t.Helper()
	resp, err := cl.Get("http://unix/policy")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s Served
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /policy: %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}
