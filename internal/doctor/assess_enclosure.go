package doctor

import (
	"fmt"
	"strings"
	"time"
)

// enclosureFix is what to do about an enclosure that leaks.
const enclosureFix = "fix: stop the agent and start it again with sudo lox run -- COMMAND, which sets the enclosure up anew; if it leaks again, a rule of this machine's firewall interferes (docs/architecture.md, \"The agent's network enclosure\")"

// assessEnclosure: under a local stack, whether the agent lox run -- started is enclosed, line by
// line from what was tried inside its namespace. A stack with no such agent is a WARN: clients
// set up by hand can go around the gate.
func assessEnclosure(r *Report, f *Facts) {
	e := f.Enclosure
	if e == nil || f.Mode != "local" {
		return
	}
	if !e.Agent {
		r.add(Warn, "enclosure", "no agent runs in a network enclosure of lox's: a client set up by hand (HTTPS_PROXY=... in another terminal) goes around the gate with --noproxy, an IP literal or a resolver of its own, and runs as your uid; fix: start the agent with sudo lox run -- COMMAND (docs/architecture.md, \"The agent: lox run -- COMMAND\")")
		return
	}
	if e.Err != "" {
		r.add(Error, "enclosure", "the agent (pid %d) could not be examined: %s", e.PID, e.Err)
		return
	}
	if e.SameNamespace || e.Link == "" {
		r.add(Error, "enclosure", "the agent (pid %d) runs in this machine's network namespace (%s): nothing but its proxy variables sends it to the gate; fix: stop it and start it with sudo lox run -- COMMAND from this lockhttp, which encloses it", e.PID, e.Namespace)
		return
	}
	r.add(OK, "enclosure", "the agent (pid %d) runs in a network namespace of its own (%s): link %s, the gate at %s, the agent at %s", e.PID, e.Namespace, e.Link, e.Gate, e.Address)
	switch {
	case e.ResolvErr != "":
		r.add(Warn, "enclosure", "the agent's /etc/resolv.conf could not be read: %s", e.ResolvErr)
	case len(e.Resolvers) != 1 || e.Resolvers[0] != e.Gate:
		r.add(Error, "enclosure", "the agent's /etc/resolv.conf names %s, not the gate's %s alone: its lookups go elsewhere; %s", orNone(strings.Join(e.Resolvers, ", ")), e.Gate, enclosureFix)
	default:
		r.add(OK, "enclosure", "the agent's /etc/resolv.conf names the gate (%s) alone", e.Gate)
	}
	if len(e.Sockets) > 0 {
		r.add(Error, "enclosure", "the agent can reach this machine's resolver through %s: a unix socket is outside the network namespace, so names are looked up for it outside the gate; %s", strings.Join(e.Sockets, ", "), enclosureFix)
	}
	for _, p := range e.Probes {
		took := ms(p.Took)
		switch p.Kind {
		case "gate":
			if p.Outcome == "connected" {
				r.add(OK, "enclosure", "the agent reaches the gate's proxy at %s", p.Target)
			} else {
				r.add(Error, "enclosure", "the agent cannot reach the gate's proxy at %s (%s after %s): its requests all fail; fix: check that the gate runs with -transparent %s (lox run -- starts it so) and that this machine's firewall lets the link %s reach %s", p.Target, p.Outcome, took, e.Gate, e.Link, p.Target)
			}
		case "dns":
			switch {
			case p.Seen:
				r.add(Error, "enclosure", "a DNS query for %s to %s got out of the enclosure: names are a channel out; %s", enclosureDNSName, p.Target, enclosureFix)
			case p.AtGate:
				r.add(OK, "enclosure", "a DNS query to %s lands at the gate (answered with its address, %s)", p.Target, took)
			case p.Outcome == "answered":
				r.add(Error, "enclosure", "a DNS query for %s to %s was answered %s, not by the gate: names are a channel out; %s", enclosureDNSName, p.Target, orNone(strings.Join(p.Answer, ", ")), enclosureFix)
			case p.Outcome == "timed out":
				r.add(Warn, "enclosure", "a DNS query to %s timed out (%s): none got out, but the gate did not answer it; fix: check that the gate runs with -transparent %s, which answers the agent's DNS", p.Target, took, e.Gate)
			default:
				r.add(Warn, "enclosure", "a DNS query to %s failed (%s, %s): none got out, but the gate did not answer it, so clients that resolve names themselves fail instead of being decided; fix: check that the gate runs with -transparent %s", p.Target, p.Outcome, took, e.Gate)
			}
		default:
			what := map[string]string{"tcp": "a TCP connection to " + p.Target, "udp": "a UDP datagram to " + p.Target, "ipv6": "an IPv6 connection to " + p.Target}[p.Kind]
			switch {
			case p.Seen || p.Outcome == "connected" || p.Outcome == "answered":
				r.add(Error, "enclosure", "%s got out of the enclosure (%s): the agent goes around the gate; %s", what, p.Outcome, enclosureFix)
			case p.Outcome == "timed out":
				r.add(Warn, "enclosure", "%s was dropped, not refused (timed out after %s): none got out, but clients hang until their timeout; %s", what, took, enclosureFix)
			default:
				r.add(OK, "enclosure", "%s fails at once (%s, %s)", what, p.Outcome, took)
			}
		}
	}
}

// ms is a short duration in milliseconds, to a tenth.
func ms(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}
