package metrics

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
)

var familyRef = regexp.MustCompile(`lockhttp_[a-z_]+`)

// families is the names every() exposes, histograms with their _bucket, _count and _sum.
func families(t *testing.T) map[string]bool {
	t.Helper()
	mfs, err := every(t).Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		n := mf.Name
		names[n] = true
		for _, s := range []string{"_bucket", "_count", "_sum"} {
			names[n+s] = true
		}
	}
	return names
}

// TestDashboardNamesFamilies: every family the Grafana dashboard queries exists, so a renamed
// family cannot leave a panel empty.
func TestDashboardNamesFamilies(t *testing.T) {
	names := families(t)
	data, err := os.ReadFile("../../docs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	if len(d.Panels) == 0 {
		t.Fatal("no panels")
	}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			for _, ref := range familyRef.FindAllString(tg.Expr, -1) {
				if !names[ref] {
					t.Errorf("panel %q queries %s, which no process exports", p.Title, ref)
				}
			}
		}
	}
}

// TestObservabilityDocNamesFamilies: docs/observability.md names only families that exist, and
// every lockhttp family is in it.
func TestObservabilityDocNamesFamilies(t *testing.T) {
	names := families(t)
	data, err := os.ReadFile("../../docs/observability.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	for _, ref := range familyRef.FindAllString(doc, -1) {
		if strings.HasSuffix(ref, "_") && hasPrefix(names, ref) {
			continue // a prefix of families: lockhttp_signer_*
		}
		ref = strings.TrimSuffix(ref, "_")
		if !names[ref] && !names[ref+"_total"] {
			t.Errorf("docs/observability.md names %s, which no process exports", ref)
		}
	}
	for n := range names {
		if strings.HasSuffix(n, "_bucket") || strings.HasSuffix(n, "_count") || strings.HasSuffix(n, "_sum") || !strings.HasPrefix(n, "lockhttp_") {
			continue
		}
		if !strings.Contains(doc, n) && !strings.Contains(doc, strings.TrimSuffix(n, "_total")) {
			t.Errorf("docs/observability.md does not describe %s", n)
		}
	}
}

// hasPrefix reports whether a name in names starts with prefix.
func hasPrefix(names map[string]bool, prefix string) bool {
	for n := range names {
		if strings.HasPrefix(n, prefix) {
			return true
		}
	}
	return false
}
