package policy

import (
	"slices"
	"strings"
	"testing"
)

const budgetBase = `version = 1

[sources]
a = ["10.0.0.1"]
b = ["10.0.0.2"]
c = ["10.0.0.3"]

[[budget]]
name = "all"
requests_per_minute = 60

[[budget]]
name = "uploads"
containers = ["a", "b"]
hosts = ["*.example.com", "api.test"]
bytes_up_per_hour = "50MiB"
new_hosts_per_hour = 20
`

// TestBudgetApplies: a budget counts the containers and hosts it names, every one when it names
// none; BudgetsFor keeps file order.
func TestBudgetApplies(t *testing.T) {
	p := load(t, budgetBase)
	cases := []struct {
		container, host string
		want            []string
	}{
		{"a", "x.example.com", []string{"all", "uploads"}},
		{"a", "deep.x.example.com", []string{"all", "uploads"}},
		{"b", "api.test", []string{"all", "uploads"}},
		{"a", "example.com", []string{"all"}}, // *.example.com does not name the apex
		{"c", "x.example.com", []string{"all"}},
		{"a", "other.test", []string{"all"}},
	}
	for _, c := range cases {
		t.Run(c.container+"/"+c.host, func(t *testing.T) {
			var got []string
			for _, b := range p.BudgetsFor(c.container, c.host) {
				got = append(got, b.Name)
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("BudgetsFor(%q, %q) = %q, want %q", c.container, c.host, got, c.want)
			}
		})
	}
	bs := p.Budgets()
	if len(bs) != 2 || bs[1].BytesUpPerHour != 50<<20 || bs[1].NewHostsPerHour != 20 || bs[1].RequestsPerMinute != 0 || bs[0].RequestsPerMinute != 60 {
		t.Fatalf("compiled budgets %+v", bs)
	}
	if got := p.BudgetContainers(&bs[0]); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("budget \"all\" counts %q, want every container", got)
	}
	if got := bs[1].LimitWords(); got != `bytes_up_per_hour = "50MiB", new_hosts_per_hour = 20` {
		t.Errorf("LimitWords = %s", got)
	}
}

// TestCompareBudgets: a budget removed, raised or counting less is a loosening that waits for
// review; one added, lowered or counting more is a tightening that applies at once.
func TestCompareBudgets(t *testing.T) {
	base := load(t, budgetBase)
	cases := []struct {
		name  string
		edit  func(string) string
		loose string // a loosening that must be listed ("" for a pure tightening)
		tight string // a tightening that must be listed ("" for none)
	}{
		{"no change", func(s string) string { return s + "# a comment\n" }, "", ""},
		{"requests raised", func(s string) string { return strings.Replace(s, "= 60", "= 600", 1) },
			`budget "all": requests_per_minute: 60 → 600`, ""},
		{"requests lowered", func(s string) string { return strings.Replace(s, "= 60", "= 6", 1) },
			"", `budget "all": requests_per_minute: 60 → 6`},
		{"bytes raised", func(s string) string { return strings.Replace(s, `"50MiB"`, `"1GiB"`, 1) },
			`budget "uploads": bytes_up_per_hour: 50MiB → 1GiB`, ""},
		{"bytes lowered", func(s string) string { return strings.Replace(s, `"50MiB"`, `"5MiB"`, 1) },
			"", `budget "uploads": bytes_up_per_hour: 50MiB → 5MiB`},
		{"new hosts raised", func(s string) string { return strings.Replace(s, "= 20", "= 21", 1) },
			`budget "uploads": new_hosts_per_hour: 20 → 21`, ""},
		{"a limit removed", func(s string) string { return strings.Replace(s, "new_hosts_per_hour = 20\n", "", 1) },
			`budget "uploads": new_hosts_per_hour: 20 → no limit`, ""},
		{"a limit added", func(s string) string { return s + "requests_per_minute = 100\n" },
			"", `budget "uploads": requests_per_minute: no limit → 100`},
		{"a budget removed", func(s string) string {
			return strings.Replace(s, "[[budget]]\nname = \"all\"\nrequests_per_minute = 60\n", "", 1)
		},
			`budget "all": - requests_per_minute = 60 (removed)`, ""},
		{"a budget added", func(s string) string {
			return s + "\n[[budget]]\nname = \"more\"\ncontainers = [\"c\"]\nnew_hosts_per_hour = 5\n"
		},
			"", `budget "more": + new_hosts_per_hour = 5`},
		{"a budget renamed", func(s string) string { return strings.Replace(s, `name = "all"`, `name = "every"`, 1) },
			`budget "all": - requests_per_minute = 60 (removed)`, `budget "every": + requests_per_minute = 60`},
		{"a container dropped", func(s string) string { return strings.Replace(s, `["a", "b"]`, `["a"]`, 1) },
			`budget "uploads": containers: - b`, ""},
		{"a container added", func(s string) string { return strings.Replace(s, `["a", "b"]`, `["a", "b", "c"]`, 1) },
			"", `budget "uploads": containers: + c`},
		{"every container → some", func(s string) string {
			return strings.Replace(s, "name = \"all\"\n", "name = \"all\"\ncontainers = [\"a\", \"b\", \"c\"]\n", 1)
		}, `budget "all": containers: every container → a, b, c`, ""},
		{"some containers → every one", func(s string) string { return strings.Replace(s, "containers = [\"a\", \"b\"]\n", "", 1) },
			"", `budget "uploads": containers: a, b → every container`},
		{"a host dropped", func(s string) string { return strings.Replace(s, `, "api.test"]`, `]`, 1) },
			`budget "uploads": hosts: - "api.test"`, ""},
		{"hosts widened to a covering pattern", func(s string) string {
			return strings.Replace(s, `"*.example.com", "api.test"`, `"*.example.com", "*.test"`, 1)
		},
			"", `budget "uploads": hosts: + "*.test"`},
		{"every host → some", func(s string) string {
			return strings.Replace(s, "name = \"all\"\n", "name = \"all\"\nhosts = [\"api.test\"]\n", 1)
		},
			`budget "all": hosts: every host → api.test`, ""},
		{"some hosts → every one", func(s string) string {
			return strings.Replace(s, `hosts = ["*.example.com", "api.test"]`, `hosts = ["*"]`, 1)
		},
			"", `budget "uploads": hosts: *.example.com, api.test → every host`},
		{"\"*\" is every host", func(s string) string {
			return strings.Replace(s, "name = \"all\"\n", "name = \"all\"\nhosts = [\"*\"]\n", 1)
		},
			"", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := load(t, c.edit(budgetBase))
			cmp := Compare(base, n)
			loose, tight := strings.Join(cmp.Loosenings, "\n"), strings.Join(cmp.Tightenings, "\n")
			if c.loose == "" && !cmp.Tightening() {
				t.Fatalf("counted as a loosening:\n%s", loose)
			}
			if c.loose != "" && !strings.Contains(loose, c.loose) {
				t.Fatalf("loosenings do not list %q:\n%s", c.loose, loose)
			}
			if c.tight != "" && !strings.Contains(tight, c.tight) {
				t.Fatalf("tightenings do not list %q:\n%s", c.tight, tight)
			}
			if c.loose == "" && c.tight == "" && !cmp.Same() {
				t.Fatalf("counted as a change: loosenings %q, tightenings %q", cmp.Loosenings, cmp.Tightenings)
			}
			// The reverse of a pure tightening is a loosening, and of a pure loosening a
			// tightening.
			rev := Compare(n, base)
			if c.tight != "" && c.loose == "" && rev.Tightening() {
				t.Errorf("the reverse of a tightening is not a loosening: %q", rev.Tightenings)
			}
			if c.loose != "" && c.tight == "" && !rev.Tightening() {
				t.Errorf("the reverse of a loosening is a loosening too: %q", rev.Loosenings)
			}
		})
	}
}
