package console

import (
	"strings"
	"testing"
)

// TestTwoSpellingsOfOneKeyDoNotLoad edits the approved policy to add a second spelling of a key.
// Before, a policy with both was read in the order of a map, apart in the console's comparison
// and in the gate's compile: the console could apply the edit as deciding as before while the
// gate sent the trusted host to the agent's address, or freed the rule. The edit must not load:
// the gate keeps the approved policy, and the console says where and what to do.
func TestTwoSpellingsOfOneKeyDoNotLoad(t *testing.T) {
	const base = `version = 1
trusted = ["app.test"]

[[rule]]
name = "app-push"
hosts = ["app.test"]
methods = ["POST"]
verdict = "ask"

[floor]
allow_cidrs = ["10.0.0.0/8"]

[floor.hosts]
"app.test" = "10.0.0.1"

[sources]
local = ["127.0.0.1"]
`
	cases := []struct {
		name, old, new, want string
	}{
		{"floor host in upper case", `"app.test" = "10.0.0.1"`, `"app.test" = "10.0.0.1"` + "\n" + `"APP.TEST" = "10.66.0.1"`,
			`policy.toml:15: floor.hosts: "app.test" and "APP.TEST" name the same host; keep one`},
		{"rule key in upper case", `verdict = "ask"`, `verdict = "ask"` + "\n" + `Verdict = "free"`,
			`policy.toml:9: rule.Verdict: unknown key; write "verdict"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newReviewEnv(t)
			e.write(t, base)
			c := e.start(t)
			before := c.Current().Version
			e.write(t, strings.Replace(base, tc.old, tc.new, 1))
			changed, err := c.reload()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("reload: changed %v, error %v; want an error containing %q", changed, err, tc.want)
			}
			if changed || c.Current().Version != before || c.Pending() != nil {
				t.Fatal("the edit was served or waits for review")
			}
			if st := strings.Join(c.StatusLines(), "\n"); !strings.Contains(st, tc.want) {
				t.Errorf("status does not show the error:\n%s", st)
			}
		})
	}
}
