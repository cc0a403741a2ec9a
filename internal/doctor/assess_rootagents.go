package doctor

import (
	"slices"
	"strconv"
	"strings"

	"github.com/lockhttp/lockhttp/internal/display"
)

// rootAgentsShown bounds the processes named one a line; the rest are counted.
const rootAgentsShown = 5

// assessRootAgents: under a local stack, an agent running as root is a WARN, whether lox run --
// started it (lox refuses uid 0: this holds it to that) or it was started by hand with the
// gate's proxy in its environment. Root reads the state directory (the hub's token, the CA key)
// and so approves its own tickets, and nothing encloses such an agent.
func assessRootAgents(r *Report, f *Facts) {
	a := f.RootAgents
	if a == nil || f.Mode != "local" {
		return
	}
	const why = "as root it can read the state directory (the hub's token: it could approve its own tickets; the CA key)"
	if a.AgentPID > 0 && a.AgentUID == 0 {
		r.add(Warn, "agent-uid", "the agent lox run -- started (pid %d) runs as root: %s; fix: stop it and start it again with sudo lox run --agent-uid N -- COMMAND, N a uid of the agent's own (the default is 10099)", a.AgentPID, why)
	}
	for i, p := range a.Root {
		if i == rootAgentsShown {
			r.add(Warn, "agent-uid", "%d more processes run as root with the gate's proxy in their environment", len(a.Root)-rootAgentsShown)
			break
		}
		r.add(Warn, "agent-uid", "process %d (%s) runs as root with %s naming the gate's proxy, as an agent started by hand does: %s, and nothing encloses it (it can go round the gate); fix: stop it and start it with sudo lox run -- COMMAND, which runs it as a uid of its own in a network enclosure (or, by hand, as your own user: lox env)",
			p.PID, display.Line(p.Name, 32), p.Var, why)
	}
	if len(a.Root) > 0 || a.AgentPID > 0 && a.AgentUID == 0 {
		return
	}
	var said []string
	if a.Scanned {
		said = append(said, "no process running as root has the gate's proxy in its environment ("+strconv.Itoa(a.Looked)+" of root's processes looked at)")
	}
	if a.AgentPID > 0 && a.AgentUID > 0 {
		said = append(said, "the agent lox run -- started (pid "+strconv.Itoa(a.AgentPID)+") runs as uid "+strconv.Itoa(a.AgentUID))
	}
	if len(said) > 0 {
		r.add(OK, "agent-uid", "%s", strings.Join(said, "; "))
	}
}

// assessUnusedSecrets: a secret in the gate's secrets file that no [[inject]] rule of the
// served policy names is a WARN: the gate holds a credential it never adds, often because a
// rule's secret is misspelt (and that rule then has none).
func assessUnusedSecrets(r *Report, f *Facts) {
	s, c := f.Secrets, f.Console
	if s == nil || s.Err != "" || c == nil || c.Err != "" || c.PolicyErr != "" || c.Status == nil {
		return
	}
	var named []string
	for _, in := range c.Injects {
		named = append(named, in.Secret)
	}
	for _, name := range s.Names {
		if slices.Contains(named, name) {
			continue
		}
		rules := "the served policy has no [[inject]] rule"
		if len(named) > 0 {
			rules = "its [[inject]] rules name " + strings.Join(quoteAll(named), ", ")
		}
		r.add(Warn, "secrets", "the secret %s in %s is named by no [[inject]] rule of the served policy (%s): the gate holds a credential it never adds; fix: name it in the rule meant to add it (secret = %s; a misspelt name leaves that rule without one), or remove it from the file",
			strconv.Quote(display.Line(name, 64)), s.Path, rules, strconv.Quote(display.Line(name, 64)))
	}
}

func quoteAll(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = strconv.Quote(display.Line(n, 64))
	}
	return out
}
