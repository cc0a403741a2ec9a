package policy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Budget is a [[budget]] compiled: how much each container it counts may send in a window,
// each container on its own. A zero limit is no limit; at least one is set.
type Budget struct {
	Name string
	// Containers are the containers counted; nil: every container.
	Containers []string
	// Hosts are the host patterns as written; nil: every host.
	Hosts []string
	hosts hostSet
	// RequestsPerMinute bounds the requests in any minute; BytesUpPerHour the bytes sent (URL
	// path and query, headers, body) in any hour; NewHostsPerHour the hosts sent to in any hour.
	RequestsPerMinute int64
	BytesUpPerHour    int64
	NewHostsPerHour   int64
}

// Limits on budgets: beyond them a value is more likely a mistake than a choice, and they bound
// what the gate remembers (a host per new host, at most NewHostsPerHour of them).
const (
	maxBudgets           = 64
	maxRequestsPerMinute = 1_000_000
	maxNewHostsPerHour   = 10_000
)

// Applies reports whether a request of container to host counts against b (host normalised, as
// the floor leaves it).
func (b *Budget) Applies(container, host string) bool {
	if b.Containers != nil && !slices.Contains(b.Containers, container) {
		return false
	}
	return b.Hosts == nil || b.hosts.lookup(host) != ""
}

// Budgets are the policy's [[budget]] sections, in file order.
func (p *Policy) Budgets() []Budget { return p.budgets }

// BudgetsFor returns the budgets a request of container to host counts against, in file order;
// nil when none does.
func (p *Policy) BudgetsFor(container, host string) []*Budget {
	var out []*Budget
	for i := range p.budgets {
		if p.budgets[i].Applies(container, host) {
			out = append(out, &p.budgets[i])
		}
	}
	return out
}

// BudgetContainers are the containers b counts: its own list, or every container of the policy.
func (p *Policy) BudgetContainers(b *Budget) []string {
	if b.Containers != nil {
		return b.Containers
	}
	return p.Containers()
}

// LimitWords says b's limits as the policy writes them: `requests_per_minute = 60,
// bytes_up_per_hour = "50MiB"`.
func (b *Budget) LimitWords() string {
	var parts []string
	if b.RequestsPerMinute > 0 {
		parts = append(parts, fmt.Sprintf("requests_per_minute = %d", b.RequestsPerMinute))
	}
	if b.BytesUpPerHour > 0 {
		parts = append(parts, fmt.Sprintf("bytes_up_per_hour = %q", FormatSize(b.BytesUpPerHour)))
	}
	if b.NewHostsPerHour > 0 {
		parts = append(parts, fmt.Sprintf("new_hosts_per_hour = %d", b.NewHostsPerHour))
	}
	return strings.Join(parts, ", ")
}

// budgetSections is how [[budget]] sections are counted and named.
var budgetSections = sectionKind{
	key: "budget", noun: "budget", max: maxBudgets,
	tooMany: "more than %d budgets; merge some (a budget's hosts and containers are lists)",
	name:    secretName,
	badName: "the name uses letters, digits, '.', '_' and '-' only, at most 64: it is sent in X-LockHTTP-Rule",
}

// budgets compiles the [[budget]] sections; the containers they name must be [sources]
// containers (compiled first).
func (c *compiler) budgets(p *Policy, fbs []FileBudget) {
	seen := make(map[string]int)
	for i, fb := range fbs {
		path, label := c.sectionName(&budgetSections, seen, i, fb.Name)
		at := func(k string) []string { return append(append([]string{}, path...), k) }
		b := Budget{Name: fb.Name}
		count := func(key string, v *int64, max int64, what string) int64 {
			if v == nil {
				return 0
			}
			if *v < 1 || *v > max {
				c.errorf(at(key), label, "%s = %d is out of range; use 1 to %d (leave %s out for no limit on %s)", key, *v, max, key, what)
				return 0
			}
			return *v
		}
		b.RequestsPerMinute = count("requests_per_minute", fb.RequestsPerMinute, maxRequestsPerMinute, "requests")
		b.NewHostsPerHour = count("new_hosts_per_hour", fb.NewHostsPerHour, maxNewHostsPerHour, "new hosts")
		if fb.BytesUpPerHour.Set {
			if fb.BytesUpPerHour.Bytes < 1 {
				c.errorf(at("bytes_up_per_hour"), label, "bytes_up_per_hour = %d bytes is out of range; use a size from 1B to 1TiB, such as \"50MiB\" (leave it out for no limit on bytes)", fb.BytesUpPerHour.Bytes)
			} else {
				b.BytesUpPerHour = fb.BytesUpPerHour.Bytes
			}
		}
		if fb.RequestsPerMinute == nil && fb.NewHostsPerHour == nil && !fb.BytesUpPerHour.Set {
			c.errorf(path, label, "no limit; give at least one of requests_per_minute, bytes_up_per_hour or new_hosts_per_hour")
		}
		if fb.Containers != nil {
			b.Containers = []string{}
			if len(fb.Containers) == 0 {
				c.errorf(at("containers"), label, "containers is empty, so the budget counts nothing; name containers of [sources], or leave containers out for every container")
			}
		}
		for _, name := range fb.Containers {
			switch {
			case !p.names[name]:
				c.errorf(at("containers"), label, "containers: %q is not a container of [sources]; name one of %s, or leave containers out for every container", name, containerWords(p))
			case slices.Contains(b.Containers, name):
				c.errorf(at("containers"), label, "containers: %q is listed twice; remove one", name)
			default:
				b.Containers = append(b.Containers, name)
			}
		}
		if fb.Hosts != nil && len(fb.Hosts) == 0 {
			c.errorf(at("hosts"), label, "hosts is empty, so the budget counts nothing; name host patterns, or leave hosts out for every host")
		}
		hosts := spellings{}
		for _, h := range fb.Hosts {
			hp, err := parseHostPattern(h)
			if err != nil {
				c.errorf(at("hosts"), label, "hosts: %v", err)
				continue
			}
			if msg, dup := hosts.dup(hp.key(), h, hp.names()); dup {
				c.errorf(at("hosts"), label, "hosts: %s", msg)
				continue
			}
			b.Hosts = append(b.Hosts, h)
			b.hosts.add(hp)
		}
		p.budgets = append(p.budgets, b)
	}
}

// containerWords names the policy's containers for the fix of an error.
func containerWords(p *Policy) string {
	names := p.Containers()
	if len(names) == 0 {
		return "the containers of [sources] (it names none yet)"
	}
	return strings.Join(names, ", ")
}

// budgets compares the [[budget]] sections by name: a budget is a bound each container's
// traffic keeps, so one removed, raised or counting fewer containers or hosts loosens, and one
// added, lowered or counting more tightens. A renamed budget is one removed and one added.
func (c *Comparison) budgets(old, new []Budget) {
	om := make(map[string]*Budget, len(old))
	for i := range old {
		om[old[i].Name] = &old[i]
	}
	nm := make(map[string]bool, len(new))
	for i := range new {
		n := &new[i]
		nm[n.Name] = true
		o, ok := om[n.Name]
		if !ok {
			c.tight("budget %q: + %s", n.Name, n.LimitWords())
			continue
		}
		c.budgetLimit(n.Name, "requests_per_minute", o.RequestsPerMinute, n.RequestsPerMinute, strconvI)
		c.budgetLimit(n.Name, "bytes_up_per_hour", o.BytesUpPerHour, n.BytesUpPerHour, FormatSize)
		c.budgetLimit(n.Name, "new_hosts_per_hour", o.NewHostsPerHour, n.NewHostsPerHour, strconvI)
		c.budgetReach(n.Name, o, n)
	}
	for i := range old {
		if !nm[old[i].Name] {
			c.loose("budget %q: - %s (removed)", old[i].Name, old[i].LimitWords())
		}
	}
}

// budgetLimit compares one limit of a budget; 0 is no limit.
func (c *Comparison) budgetLimit(name, key string, o, n int64, words func(int64) string) {
	w := func(v int64) string {
		if v == 0 {
			return "no limit"
		}
		return words(v)
	}
	switch {
	case o == n:
	case n == 0 || o != 0 && n > o:
		c.loose("budget %q: %s: %s → %s", name, key, w(o), w(n))
	default:
		c.tight("budget %q: %s: %s → %s", name, key, w(o), w(n))
	}
}

// budgetReach compares what a budget counts: its containers and its hosts (nil: all).
func (c *Comparison) budgetReach(name string, o, n *Budget) {
	switch {
	case o.Containers == nil && n.Containers != nil:
		c.loose("budget %q: containers: every container → %s", name, strings.Join(n.Containers, ", "))
	case o.Containers != nil && n.Containers == nil:
		c.tight("budget %q: containers: %s → every container", name, strings.Join(o.Containers, ", "))
	default:
		for _, x := range o.Containers {
			if !slices.Contains(n.Containers, x) {
				c.loose("budget %q: containers: - %s", name, x)
			}
		}
		for _, x := range n.Containers {
			if !slices.Contains(o.Containers, x) {
				c.tight("budget %q: containers: + %s", name, x)
			}
		}
	}
	oAll, nAll := o.Hosts == nil || o.hosts.all != "", n.Hosts == nil || n.hosts.all != ""
	switch {
	case oAll && !nAll:
		c.loose("budget %q: hosts: every host → %s", name, strings.Join(n.Hosts, ", "))
	case !oAll && nAll:
		c.tight("budget %q: hosts: %s → every host", name, strings.Join(o.Hosts, ", "))
	case !oAll:
		for _, h := range o.Hosts {
			if !covers(n.Hosts, h) {
				c.loose("budget %q: hosts: - %q", name, h)
			}
		}
		for _, h := range n.Hosts {
			if !covers(o.Hosts, h) {
				c.tight("budget %q: hosts: + %q", name, h)
			}
		}
	}
}

func strconvI(v int64) string { return strconv.FormatInt(v, 10) }
