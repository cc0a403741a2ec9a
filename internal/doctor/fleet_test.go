package doctor

import (
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/console"
	"github.com/lockhttp/lockhttp/internal/consoleapi"
)

// TestAssessFleet: a line per gate identity the console saw: OK when it holds the served
// policy or fetches it within its poll, WARN when it has not fetched for long (stopped, cut off,
// refused), ERROR when it holds another policy long after the console began serving this one.
func TestAssessFleet(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	served := "sha256:aaaaaaaaaaaaaaaa"
	old := "sha256:bbbbbbbbbbbbbbbb"
	cases := []struct {
		name     string
		loaded   time.Duration // how long ago the console began serving
		gate     consoleapi.GateSeen
		level    Level
		contains string
	}{
		{"holds it", time.Hour, consoleapi.GateSeen{Version: served, At: now.Add(-time.Second), Since: now.Add(-time.Hour)}, OK, "gate/a decides with the console's policy aaaaaaaaaaaa"},
		{"about to fetch", 3 * time.Second, consoleapi.GateSeen{Version: old, At: now.Add(-time.Second)}, OK, "has not fetched the console's new policy aaaaaaaaaaaa yet"},
		{"left behind", time.Minute, consoleapi.GateSeen{Version: old, At: now.Add(-time.Second)}, Error, "gate/a decides with policy bbbbbbbbbbbb while the console serves aaaaaaaaaaaa"},
		{"silent", time.Hour, consoleapi.GateSeen{Version: served, At: now.Add(-5 * time.Minute)}, Warn, "gate/a has not fetched the policy for 5m0s"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := c.gate
			g.ID, g.Remote = "spiffe://lockhttp/gate/a", "10.0.0.7:41234"
			f := &Facts{Mode: "fleet", Now: now, Console: &ConsoleFacts{Status: &console.Status{Version: served, LoadedAt: now.Add(-c.loaded), Gates: []consoleapi.GateSeen{g}}}}
			lines := Assess(f).Find("fleet")
			if len(lines) != 1 || lines[0].Level != c.level || !strings.Contains(lines[0].Text, c.contains) {
				t.Errorf("%+v; want one %v line saying %q", lines, c.level, c.contains)
			}
		})
	}
	f := &Facts{Mode: "fleet", Now: now, Console: &ConsoleFacts{Status: &console.Status{Version: served, TLS: "10.0.0.2:8443"}}}
	if lines := Assess(f).Find("fleet"); len(lines) != 1 || lines[0].Level != Warn || !strings.Contains(lines[0].Text, "no gate has fetched") {
		t.Errorf("no gate: %+v", lines)
	}
	f.Mode = "local" // a local stack whose console serves no gate over mutual TLS: nothing to say
	if lines := Assess(f).Find("fleet"); len(lines) != 0 {
		t.Errorf("a local stack: %+v", lines)
	}
}
