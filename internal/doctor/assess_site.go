package doctor

import (
	"fmt"
	"slices"
	"strings"
)

// The checks of what an operator of the compose setup would otherwise find the hard way: the
// phone page published and answering, the policy file on disk being the one the console reads,
// the secrets the inject rules name, this machine's ports open to agents.

func assessPhone(r *Report, f *Facts) {
	p := f.Phone
	if p == nil {
		return
	}
	nets := make([]string, 0, len(p.Networks))
	for n, internal := range p.Networks {
		if internal {
			n += " (internal)"
		}
		nets = append(nets, n)
	}
	slices.Sort(nets)
	switch {
	case len(p.Published) == 0 && len(p.Wanted) > 0:
		r.add(Error, "phone", "%s asks for %s, but docker published no port: it does not publish the ports of a container on internal networks only (its networks: %s); pairing links and lox from this machine are dead; fix: put the console on a network that is not internal and that no agent joins (the phone network of compose/compose.yaml), then docker-compose up -d",
			p.Container, strings.Join(p.Wanted, ", "), orNone(strings.Join(nets, ", ")))
	case len(p.Published) == 0:
		r.add(Error, "phone", "%s publishes no port: no phone can pair and lox cannot reach the hub from this machine; fix: ports: in compose/compose.yaml (LOCKHTTP_HUB_BIND and LOCKHTTP_HUB_PORT in .env)", p.Container)
	case p.PageErr != "":
		r.add(Error, "phone", "the phone page %s does not answer from this machine (%s), although docker publishes %s; fix: see docker-compose logs console, and that nothing else holds the port",
			p.PageURL, p.PageErr, strings.Join(p.Published, ", "))
	default:
		r.add(OK, "phone", "the phone page answers at %s (published on %s)", p.PageURL, strings.Join(p.Published, ", "))
	}
	for _, b := range p.Published {
		if !strings.HasPrefix(b, "127.") && !strings.HasPrefix(b, "[::1]") {
			r.add(Warn, "phone", "the hub is published on %s: whoever reaches this machine there can try the hub and the phone page; fix: keep it on 127.0.0.1 and reach it through a TLS reverse proxy or a tunnel you control (docs/phone.md), or firewall it to your phone's network", b)
		}
	}
	switch {
	case p.URL == "" || p.URL == "auto":
	case p.URLErr != "" && p.URLLoopback:
		r.add(Error, "phone", "pairing links name %s, which does not answer from this machine (%s): every pairing link is dead; fix: set LOCKHTTP_PHONE_URL in .env to where the hub is published (%s), then docker-compose up -d",
			p.URL, p.URLErr, orNone(strings.Join(p.Published, ", ")))
	case p.URLErr != "":
		r.add(Warn, "phone", "pairing links name %s, which does not answer from this machine (%s); a phone must reach it: check it from the phone", p.URL, p.URLErr)
	default:
		r.add(OK, "phone", "pairing links name %s, which answers", p.URL)
	}
}

func assessPolicyFile(r *Report, f *Facts) {
	pf := f.PolicyFile
	if pf == nil {
		return
	}
	where := pf.Host
	if pf.Single {
		r.add(Error, "policy-file", "%s is mounted into the console as a single file: an editor, sed -i or git that writes a new file and renames it leaves the console on the old one; fix: mount its directory (LOCKHTTP_SITE/policy in compose/compose.yaml), then docker-compose up -d", where)
	}
	if pf.Err != "" {
		r.add(Warn, "policy-file", "the console's %s cannot be read on this machine (%s): whether the console sees the file you edit is not checked", pf.Path, pf.Err)
		return
	}
	c := f.Console
	if c == nil || c.Status == nil {
		return
	}
	st := c.Status
	switch {
	case pf.Version == st.Version:
		r.add(OK, "policy-file", "%s on this machine is the policy the console serves (version %s)", where, short(pf.Version))
	case st.File == "":
		r.add(Warn, "policy-file", "%s on this machine (version %s) is not the served policy (%s), and the console does not say which file it read (an older console); fix: upgrade the images", where, short(pf.Version), short(st.Version))
	case pf.Version != st.File:
		r.add(Error, "policy-file", "%s on this machine (version %s) is not the file the console reads (version %s): edits made here are not seen; fix: mount the policy's directory into the console, not the file (compose/compose.yaml), then docker-compose up -d console",
			where, short(pf.Version), short(st.File))
	case st.FileError != "":
		r.add(Warn, "policy-file", "%s on this machine (version %s) does not load; the console keeps serving %s (the console line says why)", where, short(pf.Version), short(st.Version))
	case st.Review == pf.Version:
		r.add(Warn, "policy-file", "%s on this machine (version %s) loosens the served policy (%s) and waits for review at the console's terminal; fix: docker attach the console, :review (docs/deploy.md)", where, short(pf.Version), short(st.Version))
	default:
		r.add(Warn, "policy-file", "%s on this machine (version %s) is not served: a loosening of it was rejected; the console serves %s; fix: undo the edit, or edit it again to ask anew", where, short(pf.Version), short(st.Version))
	}
}

func assessSecrets(r *Report, f *Facts) {
	s := f.Secrets
	if s == nil {
		return
	}
	add := "lockhttp secrets add %s --secrets " + s.Path + " < FILE"
	if f.Mode == "compose" {
		add = "docker-compose run --rm -T --user 10003:10003 volumes secrets add %s --secrets " + s.Path + " < FILE (docs/deploy.md, \"Claude key\")"
	}
	if s.Err != "" {
		r.add(Error, "secrets", "the gate's secrets file does not load (%s): the gate refuses every request; fix: correct the file (version = 1, [secrets], the gate's uid, mode 0600), or write it anew with %s", s.Err, fmt.Sprintf(add, "NAME"))
		return
	}
	var rules []InjectRule
	if f.Console != nil {
		rules = f.Console.Injects
	}
	for _, in := range rules {
		if in.HTTP {
			r.add(Warn, "secrets", "inject %q adds its secret to plain http:// requests to %s too (http = true): it crosses the network in clear text; fix: remove http = true unless that network is yours", in.Name, strings.Join(in.Hosts, ", "))
		}
		if slices.Contains(s.Names, in.Secret) {
			r.add(OK, "secrets", "inject %q: its secret %q loads from %s", in.Name, in.Secret, s.Path)
			continue
		}
		if in.Optional {
			r.add(OK, "secrets", "inject %q: its secret %q is not in %s, and the rule is optional: requests to %s go out with the agent's own credential (a Claude credential asks once to be bound); to inject the key instead: %s",
				in.Name, in.Secret, s.Path, strings.Join(in.Hosts, ", "), fmt.Sprintf(add, in.Secret))
			continue
		}
		r.add(Error, "secrets", "inject %q: its secret %q is not in %s: requests to %s are refused with E_INJECT; fix: %s",
			in.Name, in.Secret, s.Path, strings.Join(in.Hosts, ", "), fmt.Sprintf(add, in.Secret))
	}
	if len(rules) == 0 {
		r.add(OK, "secrets", "%s loads (%d secrets; no inject rule in the served policy)", s.Path, len(s.Names))
	}
}

// assessHost is the agents' reach into this machine: each port it listens on, tried at each of
// its addresses from the agent network.
func assessHost(r *Report, f *Facts) {
	a := f.Agent
	if a == nil || a.Err != "" {
		return
	}
	if a.HostErr != "" {
		r.add(Warn, "agent-net", "this machine's ports were not all tried: %s", a.HostErr)
	}
	byPort := map[string][]string{}
	var ports []string
	for _, h := range a.Host {
		if !h.Reached || h.Err != "connected" {
			continue // refused or dropped: nothing answers the agent there
		}
		addr, port := splitTarget(h.Target)
		if byPort[port] == nil {
			ports = append(ports, port)
		}
		byPort[port] = append(byPort[port], addr)
	}
	// UDP: a service's socket is reached at each address where the doctor's own datagram from
	// the agent network arrived (UDP has no answer to tell a listener apart from a drop).
	var udpAt []string
	for _, u := range a.UDP {
		if u.Reached {
			addr, _ := splitTarget(u.Target)
			udpAt = append(udpAt, addr)
		}
	}
	udpByPort := map[string][]string{}
	var udpPorts []string
	for _, l := range a.UDPListen {
		addr, port := splitTarget(l)
		for _, at := range udpAt {
			if (addr == "0.0.0.0" || addr == "[::]" || addr == at) && !slices.Contains(udpByPort[port], at) {
				if udpByPort[port] == nil {
					udpPorts = append(udpPorts, port)
				}
				udpByPort[port] = append(udpByPort[port], at)
			}
		}
	}
	if len(ports) == 0 && len(udpPorts) == 0 {
		udp := "no datagram from the agent network arrives"
		if len(udpAt) > 0 {
			udp = "none where datagrams from the agent network arrive"
		}
		if len(a.Host) > 0 || len(a.UDPListen) > 0 {
			r.add(OK, "agent-net", "agents reach none of this machine's listening ports (%d TCP tried at its addresses, every docker network's gateway among them; %d UDP listening, %s)", len(a.Host), len(a.UDPListen), udp)
		}
		return
	}
	fix := hostFirewallFix(a)
	for _, p := range ports {
		r.add(Warn, "agent-net", "agents reach port %s of this machine at %s: a service here that listens on every address is open to them; fix: %s", p, strings.Join(byPort[p], ", "), fix)
	}
	for _, p := range udpPorts {
		r.add(Warn, "agent-net", "agents reach UDP port %s of this machine at %s: a service here listens for datagrams there, and the agent network's reach this machine; fix: %s", p, strings.Join(udpByPort[p], ", "), fix)
	}
}

// hostFirewallFix is the fix of what agents reach on this machine: the firewall rule for the
// agent network's subnets.
func hostFirewallFix(a *AgentFacts) string {
	var rules []string
	for _, s := range a.Subnets {
		cmd := "iptables"
		if strings.Contains(s, ":") {
			cmd = "ip6tables"
		}
		rules = append(rules, cmd+" -I INPUT -s "+s+" -j DROP")
	}
	return "drop what the agent network sends to this machine: run compose/firewall.sh as root in the deployment directory, which adds " + orNone(strings.Join(rules, "; ")) + " (docs/deploy.md, \"Host firewall\"), or bind those services to 127.0.0.1"
}

func splitTarget(t string) (string, string) {
	i := strings.LastIndex(t, ":")
	if i < 0 {
		return t, ""
	}
	return t[:i], t[i+1:]
}
