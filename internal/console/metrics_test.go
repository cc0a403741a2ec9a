package console

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/metrics"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// policyMetrics reads the console's policy families from reg: the versions of
// lockhttp_console_policy_info set to 1, and the applied timestamp (-1 when absent).
func policyMetrics(t *testing.T, reg *metrics.Registry) (versions []string, applied float64) {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	applied = -1
	for _, f := range fams {
		switch f.Name {
		case "lockhttp_console_policy_info":
			for _, s := range f.Series {
				if s.Value == 1 {
					versions = append(versions, s.Label("version"))
				}
			}
		case "lockhttp_console_policy_applied_timestamp_seconds":
			applied = f.Series[0].Value
		}
	}
	return versions, applied
}

// A console that starts again on its state names the policy it serves in its metrics from the
// start, with the time that policy was approved: the dashboard's policy panel and the drift
// alert need no approval to see it again.
func TestPolicyMetricsAfterARestart(t *testing.T) {
	clk := testkit.NewClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	state := filepath.Join(t.TempDir(), "console.json")
	pol := writePolicy(t, good)
	first := metrics.NewRegistry("console", "test")
	c, err := New(Config{PolicyPath: pol, StatePath: state, Now: clk.Now, Metrics: metrics.NewConsole(first)})
	if err != nil {
		t.Fatal(err)
	}
	version := c.Current().Version
	approvedAt := clk.Now()
	if v, at := policyMetrics(t, first); len(v) != 1 || v[0] != version || at != float64(approvedAt.Unix()) {
		t.Fatalf("the first start: versions %v, applied %v", v, at)
	}

	clk.Advance(time.Hour) // the console stops, and starts again an hour later
	again := metrics.NewRegistry("console", "test")
	if _, err := New(Config{PolicyPath: pol, StatePath: state, Now: clk.Now, Metrics: metrics.NewConsole(again)}); err != nil {
		t.Fatal(err)
	}
	if v, at := policyMetrics(t, again); len(v) != 1 || v[0] != version || at != float64(approvedAt.Unix()) {
		t.Fatalf("after the restart: versions %v, applied %v; want [%s] and %d (when it was approved)", v, at, version, approvedAt.Unix())
	}
}
