package policy

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Rules and host lists scoped to containers. Agents of one container share a source address, so
// the container is the unit a scope names: a rule's containers = [...], and the trusted and deny
// lists of a [container.NAME] section. Both are compiled into the indexes at load, by container
// id, so that a request meets only what applies to its own container: a scoped rule sits in its
// host's bucket under each container it names, a section's lists are host sets of their own.
// The container is the one [sources] names for the connection's address (judge.Source), never
// anything the request says.

// containerLists are the host lists of one [container.NAME] section, compiled.
type containerLists struct {
	name    string
	trusted hostSet
	deny    hostSet
	// reasonTrusted is the reason of a read its trusted list frees.
	reasonTrusted string
}

// unknownScope is the id that stands for a container [sources] does not name. A request with such
// a container never reaches evaluation (the judge refuses it first); should one, it meets every
// scoped ask and deny rule and every section's deny list, and no scoped free rule or section's
// trusted list: evaluation fails closed.
func (p *Policy) unknownScope() int32 { return int32(len(p.cids)) }

// scopeOf is the id of the container named name, or unknownScope.
func (p *Policy) scopeOf(name string) int32 {
	if id, ok := p.cids[name]; ok {
		return id
	}
	return p.unknownScope()
}

// containersWords says a list of containers in words: `container a` or `containers a, b`.
func containersWords(names []string) string {
	if len(names) == 1 {
		return "container " + names[0]
	}
	return "containers " + strings.Join(names, ", ")
}

// ruleScope checks a rule's containers (at path, label for errors) against [sources] and returns
// their ids; nil for a rule without the key (every container).
func (c *compiler) ruleScope(p *Policy, names []string, path []string, label string) []int32 {
	if names == nil {
		return nil
	}
	p.scoped = true
	scope := []int32{}
	if len(names) == 0 {
		c.errorf(path, label, "containers is empty, so the rule decides for no container; name containers of [sources], or leave containers out for every container")
	}
	seen := make(map[int32]bool, len(names))
	for _, name := range names {
		id, ok := p.cids[name]
		switch {
		case !ok:
			c.errorf(path, label, "containers: %q is not a container of [sources]; name one of %s, or leave containers out for every container", name, containerWords(p))
		case seen[id]:
			c.errorf(path, label, "containers: %q is listed twice; remove one", name)
		default:
			seen[id] = true
			scope = append(scope, id)
		}
	}
	return scope
}

// containerSections compiles the [container.NAME] sections: each NAME must be a container of
// [sources]; its lists are read as the top-level lists are. A section's deny list is also the
// deny list of unknownScope.
func (c *compiler) containerSections(p *Policy, sections map[string]FileContainer) {
	if len(sections) == 0 {
		return
	}
	p.scoped = true
	p.lists = make([]containerLists, len(p.cids)+1)
	for name, id := range p.cids {
		p.lists[id].name = name
		p.lists[id].reasonTrusted = "no rule matches; reads (GET, HEAD, OPTIONS) of a host [container." + name + "] trusts are free"
	}
	unknown := &p.lists[p.unknownScope()]
	// The sections are taken in file order, never in the order of the map, so that the errors
	// come in the same order on every load.
	names := make([]string, 0, len(sections))
	for name := range sections {
		names = append(names, name)
	}
	line := func(name string) int { return c.d.loc.line("container", name) }
	sort.Slice(names, func(i, j int) bool {
		if li, lj := line(names[i]), line(names[j]); li != lj {
			return li < lj
		}
		return names[i] < names[j]
	})
	for _, name := range names {
		s := sections[name]
		key := "container." + name
		id, ok := p.cids[name]
		if !ok {
			c.errorf([]string{"container", name}, key, "%q is not a container of [sources]; name one of %s (a section holds what differs for one container)", name, containerWords(p))
			continue
		}
		l := &p.lists[id]
		c.hostListAt(&l.trusted, []string{"container", name, "trusted"}, key+".trusted", s.Trusted)
		c.hostListAt(&l.deny, []string{"container", name, "deny"}, key+".deny", s.Deny)
		for _, h := range s.Deny {
			if hp, err := parseHostPattern(h); err == nil {
				unknown.deny.add(hp)
			}
		}
	}
}

// listDeny reports the [container.NAME] deny list of the container id that names host, as a
// decision; ok is false when none does.
func (p *Policy) listDeny(id int32, host string) (d Decision, ok bool) {
	if p.lists == nil {
		return Decision{}, false
	}
	l := &p.lists[id]
	pat := l.deny.lookup(host)
	if pat == "" {
		return Decision{}, false
	}
	reason := "the deny list of [container." + l.name + "] names " + quote(pat)
	if l.name == "" {
		reason = "a [container.NAME] deny list names " + quote(pat) + ", and the request comes from no container of [sources]"
	}
	return Decision{Verdict: Deny, Code: CodeRule, Rule: RuleDenyList, Reason: reason}, true
}

// listTrusted reports whether the [container.NAME] trusted list of the container id names host.
func (p *Policy) listTrusted(id int32, host string) bool {
	return p.lists != nil && p.lists[id].trusted.lookup(host) != ""
}

// containerLists compares the [container.NAME] sections: each section's lists are read with the
// top-level lists beside them (a host moved from a section to the top level is still trusted or
// denied for that container), and only the sections' patterns are named; a change of the
// top-level lists is named by hostList.
func (c *Comparison) containerLists(old, new *File) {
	names := sortedKeys(old.Containers)
	for _, n := range sortedKeys(new.Containers) {
		if _, ok := old.Containers[n]; !ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	with := func(top, own []string) []string { return append(slices.Clip(top), own...) }
	for _, name := range names {
		o, n := old.Containers[name], new.Containers[name]
		oTrusted, nTrusted := with(old.Trusted, o.Trusted), with(new.Trusted, n.Trusted)
		oDeny, nDeny := with(old.Deny, o.Deny), with(new.Deny, n.Deny)
		key := "container." + name
		for _, p := range n.Trusted {
			if !covers(oTrusted, p) {
				c.loose("%s.trusted: + %q", key, p)
			}
		}
		for _, p := range o.Trusted {
			if !covers(nTrusted, p) {
				c.tight("%s.trusted: - %q", key, p)
			}
		}
		for _, p := range n.Deny {
			if !covers(oDeny, p) {
				c.tight("%s.deny: + %q", key, p)
			}
		}
		for _, p := range o.Deny {
			if !covers(nDeny, p) {
				c.loose("%s.deny: - %q", key, p)
			}
		}
	}
}

// containersDiff says how a rule's containers grew and shrank (nil: every container), in words.
func containersDiff(o, n []string) (widened, narrowed []string) {
	switch {
	case o == nil && n != nil:
		narrowed = append(narrowed, fmt.Sprintf("containers: every container → %s", strings.Join(n, ", ")))
	case o != nil && n == nil:
		widened = append(widened, fmt.Sprintf("containers: %s → every container", strings.Join(o, ", ")))
	case o != nil:
		for _, name := range n {
			if !slices.Contains(o, name) {
				widened = append(widened, fmt.Sprintf("containers: + %s", name))
			}
		}
		for _, name := range o {
			if !slices.Contains(n, name) {
				narrowed = append(narrowed, fmt.Sprintf("containers: - %s", name))
			}
		}
	}
	return widened, narrowed
}
