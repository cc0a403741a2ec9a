package doctor

import (
	"fmt"
	"slices"
	"strings"
)

// The compose checks of what a container holds of this machine, of how the lockhttp services
// have lived, and of whether agents are kept apart from each other.

// assessHolds: a container with the container engine, privileges, this machine's namespaces,
// added capabilities or devices is out of the box lockhttp builds around agents: through the
// docker socket an agent reads the signer's CA key, with the host's network it is not behind the
// gate, with NET_ADMIN it changes its address.
func assessHolds(r *Report, c ContainerFacts) {
	who := c.Service + " (" + c.Name + ")"
	if c.Role == "agent" {
		who = "agent " + c.Name
	}
	if len(c.Engine) > 0 {
		r.add(Error, "compose", "%s mounts %s: the container engine, through which it reads every container's files (the signer's CA key among them) and starts containers with any network; fix: remove that mount from its service (docs/deploy.md, \"What an agent must not have\")",
			who, strings.Join(c.Engine, ", "))
	}
	if c.Privileged {
		r.add(Error, "compose", "%s is privileged: it has every capability and this machine's devices, and leaves its container at will; fix: remove privileged: true from its service (docs/deploy.md, \"What an agent must not have\")", who)
	}
	if len(c.HostNS) > 0 {
		r.add(Error, "compose", "%s shares namespaces it must not: %s (with the host's network it is not behind the gate; with its processes, IPC or users it reaches other containers'); fix: remove network_mode, pid, ipc, uts and userns_mode from its service (docs/deploy.md, \"What an agent must not have\")",
			who, strings.Join(c.HostNS, ", "))
	}
	if len(c.CapAdd) > 0 {
		r.add(Error, "compose", "%s is given capabilities: %s (NET_ADMIN and NET_RAW change or forge its address, which is how the gate tells containers apart; SYS_ADMIN and SYS_PTRACE leave the container); fix: remove cap_add from its service, and keep cap_drop: [ALL] (docs/deploy.md, \"What an agent must not have\")",
			who, strings.Join(c.CapAdd, ", "))
	}
	if len(c.Devices) > 0 {
		r.add(Error, "compose", "%s is given this machine's devices: %s; fix: remove devices: from its service (docs/deploy.md, \"What an agent must not have\")", who, strings.Join(c.Devices, ", "))
	}
}

// downSince says since when and how a container that is not running stopped, and that docker
// does not restart a container stopped by hand, whatever its restart policy.
func downSince(c ContainerFacts) string {
	if c.FinishedAt.IsZero() || c.FinishedAt.Year() < 2000 {
		return ""
	}
	how := fmt.Sprintf("exit code %d", c.ExitCode)
	switch {
	case c.OOMKilled:
		how += ", killed for memory"
	case c.ExitCode > 128:
		how += fmt.Sprintf(", signal %d", c.ExitCode-128)
	}
	s := fmt.Sprintf(" since %s (%s)", stamp(c.FinishedAt), how)
	if c.State == "exited" {
		s += "; docker restarts no container stopped by hand (docker kill, docker stop), whatever its restart policy"
	}
	return s
}

// assessServiceLife: a running lockhttp service that docker restarted, or whose health check
// fails.
func assessServiceLife(r *Report, c ContainerFacts) {
	if c.Health == "unhealthy" {
		r.add(Error, "compose", "%s (%s) is running but its health check fails (%s): the gate fails closed meanwhile; fix: see docker-compose logs %s", c.Service, c.Name, orNone(c.HealthLog), c.Service)
	}
	if c.Restarts == 0 {
		return
	}
	// Docker forgets the exit's code when the container runs again: the log tells it.
	r.add(Warn, "restarts", "the %s restarted %s since its container was created at %s, the last time at %s after it exited at %s; fix: read why in docker-compose logs %s (an exit the log does not explain is a kill: the kernel's at mem_limit, or a signal from outside); while it is down the gate fails closed",
		c.Service, times(c.Restarts), stamp(c.Created), stamp(c.StartedAt), stamp(c.FinishedAt), c.Service)
}

// dropsNetRaw: the container cannot open raw sockets (cap_drop ALL or NET_RAW, not added back).
func dropsNetRaw(c ContainerFacts) bool {
	for _, d := range c.CapDrop {
		if d = strings.TrimPrefix(strings.ToUpper(d), "CAP_"); d == "ALL" || d == "NET_RAW" {
			return true
		}
	}
	return false
}

// assessIsolation: agents can neither reach each other nor take each other's address. The gate
// tells containers apart by their address on the agent network ([sources]), and rules and
// budgets may differ per container: an agent that sends with another's address takes its rules.
func assessIsolation(r *Report, f *Facts) {
	a := f.Agent
	if f.Mode != "compose" || a == nil || a.Err != "" {
		return
	}
	var agents []ContainerFacts
	for _, c := range f.Containers {
		if c.Role == "agent" && c.State == "running" && c.AgentIP != "" {
			agents = append(agents, c)
		}
	}
	level := Warn // one agent has no other to reach or pose as, yet
	if len(agents) > 1 {
		level = Error
	}
	var raw, noRaw []string
	for _, c := range agents {
		if dropsNetRaw(c) {
			noRaw = append(noRaw, c.Name)
		} else {
			raw = append(raw, c.Name)
		}
	}
	for _, n := range raw {
		r.add(level, "isolation", "agent %s keeps NET_RAW (docker gives it by default): a process that is root in it sends packets with another container's address, and the gate tells containers apart by address ([sources]); fix: cap_drop: [ALL] in its service (compose/agent.example.yaml)", n)
	}
	var reached, tried []string
	for _, p := range a.Peers {
		tried = append(tried, p.Target)
		if p.Reached {
			reached = append(reached, p.Target)
			r.add(Error, "isolation", "the agent network reaches %s at %s (%s): agents reach each other's ports; fix: inter-container traffic off on the agent network (com.docker.network.bridge.enable_icc: \"false\", compose/compose.yaml), then docker-compose down and docker-compose up -d",
				p.What, p.Target, orNone(p.Err))
		}
	}
	icc := a.ICC == nil || *a.ICC
	switch {
	case icc && len(reached) == 0:
		r.add(level, "isolation", "inter-container traffic is on for %s: agents on it reach each other's ports; fix: com.docker.network.bridge.enable_icc: \"false\" on the agent network (compose/compose.yaml), then docker-compose down and docker-compose up -d, and compose/firewall.sh for the gate (docs/deploy.md, \"Agents apart\")", a.Network)
	case !icc && len(reached) == 0:
		what := "no other agent to try yet"
		if len(tried) > 0 {
			what = fmt.Sprintf("%d tried from the agent network, none answered", len(tried))
		}
		r.add(OK, "isolation", "agents cannot reach each other: inter-container traffic is off on %s (%s)", a.Network, what)
	}
	if len(noRaw) > 0 && len(raw) == 0 {
		r.add(OK, "isolation", "no agent can send with another's address: %s drop NET_RAW", strings.Join(slices.Sorted(slices.Values(noRaw)), ", "))
	}
}

// iccOff: the agent network has inter-container traffic off.
func iccOff(f *Facts) bool { return f.Agent != nil && f.Agent.ICC != nil && !*f.Agent.ICC }

func timedOut(err string) bool {
	return strings.Contains(err, "timeout") || strings.Contains(err, "timed out") || strings.Contains(err, "deadline exceeded")
}

// sourcesOf names the agent network's subnets, as far as the doctor knows them.
func sourcesOf(f *Facts) string {
	if f.Agent != nil && len(f.Agent.Subnets) > 0 {
		return "the agent network's addresses (" + strings.Join(f.Agent.Subnets, ", ") + ")"
	}
	return "the agents' addresses"
}

// sourcesFix is the fix of E_SOURCE_UNKNOWN: the policy's [sources], never the proxy address.
func sourcesFix(f *Facts) string {
	subnet := "SUBNET"
	if f.Agent != nil && len(f.Agent.Subnets) > 0 {
		subnet = f.Agent.Subnets[0]
	}
	if f.Mode == "compose" {
		return fmt.Sprintf("name the agent network's subnet in [sources] of policy/policy.toml in the deployment directory (agent = [\"%s\"]: LOCKHTTP_AGENT_SUBNET of .env), which the console applies or holds for review (docs/deploy.md, \"Settings\")", subnet)
	}
	return "name the agents' addresses in the policy's [sources] (docs/policy.md)"
}
