package doctor

import (
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/floor"
)

// CAWarnBefore is how long before the CA expires the doctor starts warning.
const CAWarnBefore = 30 * 24 * time.Hour

// Assess turns facts into the report. It does no I/O.
func Assess(f *Facts) *Report {
	r := &Report{}
	if f.Stack != "" {
		r.add(Error, "stack", "%s", f.Stack)
	}
	assessVersion(r, f)
	assessRestarts(r, f)
	assessContainers(r, f)
	assessCA(r, f)
	assessSigner(r, f)
	assessIntermediates(r, f)
	assessConsole(r, f)
	assessPolicyFile(r, f)
	assessPolicy(r, f)
	assessSecrets(r, f)
	assessUnusedSecrets(r, f)
	assessHub(r, f)
	assessNotify(r, f)
	assessGate(r, f)
	assessFleet(r, f)
	assessBudgets(r, f)
	assessSelf(r, f)
	assessAudit(r, f)
	assessAgent(r, f)
	assessEnclosure(r, f)
	assessRootAgents(r, f)
	assessIsolation(r, f)
	assessHost(r, f)
	assessPhone(r, f)
	assessPhonesReach(r, f)
	assessMetrics(r, f)
	assessTraces(r, f)
	return r
}

// assessVersion says which build the doctor is and, for a local stack, which build runs it: a
// stack started before an upgrade keeps running the old binaries until it is restarted.
func assessVersion(r *Report, f *Facts) {
	if f.Version == "" {
		return
	}
	switch {
	case f.Mode != "local" || f.Stack != "":
		r.add(OK, "version", "lockhttp %s", f.Version)
	case f.StackVersion == "":
		r.add(OK, "version", "lockhttp %s; the stack's up.json names no build (a lox older than --version)", f.Version)
	case f.StackVersion != f.Version:
		r.add(Warn, "version", "the stack runs lox %s, this lockhttp is %s; fix: after an upgrade, stop lox run and start it again so that the stack runs the new binaries (docs/deploy.md, \"The local stack\")", f.StackVersion, f.Version)
	default:
		r.add(OK, "version", "lockhttp %s, the stack runs the same build", f.Version)
	}
}

func short(h string) string {
	h = strings.TrimPrefix(h, "sha256:")
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

func days(d time.Duration) int { return int(d.Hours() / 24) }

func assessCA(r *Report, f *Facts) {
	ca := f.CA
	if ca == nil {
		return
	}
	switch {
	case ca.CertErr != "":
		r.add(Error, "ca", "%s: %s; fix: the signer writes ca.pem when it starts (signer serve --init --export-ca DIR); never make a new CA to fix a missing file, restore this one", ca.CertPath, ca.CertErr)
	case !ca.IsCA:
		r.add(Error, "ca", "%s is not a CA certificate; fix: point agents at the ca.pem the signer exports", ca.CertPath)
	case !f.Now.Before(ca.NotAfter):
		r.add(Error, "ca", "%s (sha256 %s) expired on %s: every client refuses the gate's certificates; fix: make a new CA on purpose and have every agent trust it (docs/deploy.md, \"Replacing the CA\")",
			ca.CertPath, short(ca.SHA256), ca.NotAfter.UTC().Format(time.DateOnly))
	case ca.NotAfter.Sub(f.Now) < CAWarnBefore:
		r.add(Warn, "ca", "%s (sha256 %s) expires on %s, in %d days; fix: plan its replacement now (docs/deploy.md, \"Replacing the CA\")",
			ca.CertPath, short(ca.SHA256), ca.NotAfter.UTC().Format(time.DateOnly), days(ca.NotAfter.Sub(f.Now)))
	default:
		r.add(OK, "ca", "%s: %s, sha256 %s, valid until %s (%d days)", ca.CertPath, ca.Subject, short(ca.SHA256),
			ca.NotAfter.UTC().Format(time.DateOnly), days(ca.NotAfter.Sub(f.Now)))
	}
	if !ca.KeyStat {
		return
	}
	mode := fs.FileMode(ca.KeyMode)
	switch {
	case ca.KeyErr != "":
		r.add(Error, "ca-key", "%s: %s; fix: the signer cannot sign without its key: restore it from a backup (never make a new CA to fix this without re-trusting it everywhere)", ca.KeyPath, ca.KeyErr)
	case mode.Perm()&0o077 != 0:
		r.add(Error, "ca-key", "%s has mode %04o: users other than the signer's can read the CA key; fix: chmod 600 %s", ca.KeyPath, mode.Perm(), ca.KeyPath)
	case ca.SignerUID >= 0 && ca.KeyUID != ca.SignerUID:
		r.add(Error, "ca-key", "%s is owned by uid %d, the signer runs as uid %d; fix: chown %d %s", ca.KeyPath, ca.KeyUID, ca.SignerUID, ca.SignerUID, ca.KeyPath)
	default:
		owner := fmt.Sprintf("uid %d", ca.KeyUID)
		if ca.SignerUID >= 0 {
			owner += " (the signer's)"
		}
		r.add(OK, "ca-key", "%s: mode %04o, owned by %s", ca.KeyPath, mode.Perm(), owner)
	}
}

func assessSigner(r *Report, f *Facts) {
	s := f.Signer
	if s == nil {
		return
	}
	decryptOff := f.Gate != nil && f.Gate.Status != nil && f.Gate.Status.Signer == "off"
	switch {
	case decryptOff:
		r.add(Warn, "signer", "the gate runs without a signer: it decides a CONNECT by its host alone, and a granted CONNECT opens reads and writes alike, unseen; fix: run the signer and start the gate with -signer")
	case f.Gate != nil && f.Gate.Status != nil && f.Gate.Status.Signer != "ok":
		r.add(Error, "signer", "the gate cannot get certificates: %s; every decrypted host is refused with E_NO_SIGNER; fix: start the signer (lox run starts it; docker-compose up -d signer) and check its log", f.Gate.Status.Signer)
	case s.Err != "":
		r.add(Error, "signer", "%s: %s; fix: start the signer (lox run starts it; docker-compose up -d signer) and check its log", s.Socket, s.Err)
	default:
		via := "the gate reaches it"
		if f.Gate == nil || f.Gate.Status == nil {
			via = "answers the gate's uid"
		}
		r.add(OK, "signer", "%s: %s", s.Socket, via)
	}
	if s.Health != nil && f.CA != nil && f.CA.SHA256 != "" && s.Health.CASHA256 != "" && s.Health.CASHA256 != f.CA.SHA256 {
		r.add(Error, "signer", "the signer signs with the CA sha256 %s, but %s is sha256 %s: clients trusting that file refuse every decrypted connection; fix: export the signer's ca.pem again (signer serve --export-ca) and have agents trust it",
			short(s.Health.CASHA256), f.CA.CertPath, short(f.CA.SHA256))
	}
	switch {
	case s.OtherProbed && s.OtherRefused:
		r.add(OK, "signer", "a caller with uid %d is refused (%s)", s.OtherUID, s.OtherHow)
	case s.OtherProbed:
		r.add(Error, "signer", "a caller with uid %d got an answer (%s): any process with that uid can have certificates signed; fix: give the signer --allow-uid with the gate's uid only", s.OtherUID, s.OtherHow)
	case s.NotProbedOK:
		r.add(OK, "signer", "other uids cannot reach it: %s", s.NotProbed)
	case s.NotProbed != "":
		r.add(Warn, "signer", "whether another uid is refused was not probed: %s", s.NotProbed)
	}
}

func assessConsole(r *Report, f *Facts) {
	c := f.Console
	if c == nil {
		return
	}
	switch {
	case c.Err != "":
		r.add(Error, "console", "%s: %s; the gate keeps its last policy and refuses every ASK; fix: start the console (lox run; docker-compose up -d console) and check its log", c.Socket, c.Err)
		return
	case c.Status == nil || c.Status.Version == "":
		r.add(Error, "console", "serves no approved policy: the gate refuses everything; fix: correct the policy file (see the console's log) and approve it")
	case c.PolicyErr != "":
		r.add(Error, "console", "serves a policy the gate cannot load: %s; fix: correct the policy file and approve it", c.PolicyErr)
	default:
		by := ""
		if c.Status.ApprovedBy != "" {
			by = fmt.Sprintf(", approved by %s on %s", c.Status.ApprovedBy, c.Status.ApprovedAt.UTC().Format(time.DateTime))
		}
		r.add(OK, "console", "serves %s%s", c.Policy, by)
	}
	if c.Status == nil {
		return
	}
	switch {
	case c.Status.FileError != "":
		r.add(Warn, "console", "the policy file does not load: %s; the gate keeps the approved policy; fix: correct the file", c.Status.FileError)
	case c.Status.Review != "":
		r.add(Warn, "console", "the policy file loosens the approved policy and waits for a human (version %s); fix: review it in the console's terminal (:review), or undo the change", short(c.Status.Review))
	case c.Status.Differs:
		r.add(Warn, "console", "the policy file differs from the approved policy (a loosening was rejected); fix: undo the change in the file, or edit it again to ask anew")
	}
}

func assessPolicy(r *Report, f *Facts) {
	c := f.Console
	if c == nil || c.Status == nil || c.PolicyErr != "" {
		return
	}
	for _, p := range c.AllowCIDRs {
		r.add(Warn, "policy", "floor exception: allow_cidrs opens %s to agents (the floor refuses private and local addresses for them); keep it only for a host you mean to reach", p)
	}
	for _, p := range c.AllowPorts {
		r.add(Warn, "policy", "floor exception: allow_ports opens port %d (the floor allows 80 and 443); keep it only if agents need it", p)
	}
	hosts := make([]string, 0, len(c.FloorHosts))
	for h := range c.FloorHosts {
		hosts = append(hosts, h)
	}
	slices.Sort(hosts)
	for _, h := range hosts {
		r.add(Warn, "policy", "floor exception: floor.hosts maps %s to %s, past DNS and past the name checks; keep it only for a host you mean to reach", h, c.FloorHosts[h])
	}
}

func assessHub(r *Report, f *Facts) {
	h := f.Hub
	if h == nil {
		return
	}
	if h.Err != "" {
		r.add(Error, "hub", "%s: %s; every ASK is refused with E_NO_CONSOLE; fix: start the console (it hosts the hub) and check the token file", h.URL, h.Err)
		return
	}
	if len(h.Pending) == 0 {
		r.add(OK, "hub", "%s: reachable, no ticket pending", h.URL)
		return
	}
	oldest := h.Pending[0]
	for _, p := range h.Pending {
		if p.Created.Before(oldest.Created) {
			oldest = p
		}
	}
	r.add(Warn, "hub", "%d ticket(s) pending, the oldest (%s, a %s) for %s; fix: answer them in the console's terminal, with lox approve/deny, or on the phone",
		len(h.Pending), oldest.ID, oldest.Kind, f.Now.Sub(oldest.Created).Round(time.Second))
}

func assessGate(r *Report, f *Facts) {
	g := f.Gate
	if g == nil {
		return
	}
	if g.Err != "" {
		r.add(Error, "gate", "%s: %s; fix: start the gate (lox run; docker-compose up -d gate) and check its log", g.Socket, g.Err)
		return
	}
	st := g.Status
	r.add(OK, "gate", "listening on %s, %d requests since %s", st.Listen, st.Requests, st.Started.UTC().Format(time.DateTime))
	consoleVersion := ""
	if f.Console != nil && f.Console.Status != nil {
		consoleVersion = f.Console.Status.Version
	}
	switch {
	case st.PolicyVersion == "":
		r.add(Error, "gate", "has no policy: it refuses every request with E_NO_CONSOLE; fix: start the console, or see the gate's log for why it cannot fetch the policy")
	case consoleVersion != "" && st.PolicyVersion != consoleVersion:
		r.add(Error, "gate", "decides with policy %s while the console serves %s (waited %s); fix: see the gate's log (console_error: %s)",
			short(st.PolicyVersion), short(consoleVersion), g.Waited.Round(time.Second), orNone(st.ConsoleError))
	case consoleVersion != "":
		r.add(OK, "gate", "decides with the console's policy %s", short(st.PolicyVersion))
	}
	if st.ConsoleError != "" && (consoleVersion == "" || st.PolicyVersion == consoleVersion) {
		r.add(Warn, "gate", "its last policy fetch failed: %s; it keeps deciding with the policy it has", st.ConsoleError)
	}
	switch u := st.Audit; {
	case st.AuditError != "" && u != nil && u.Full && u.Budget > 0 && u.Bytes+64<<10 >= u.Budget:
		r.add(Error, "audit", "the audit directory %s holds %s, its budget is %s: the gate writes no more and refuses all traffic with E_NO_AUDIT; "+
			"fix: move old day files out of it to an archive (after lockhttp verify-log), or raise the gate's -audit-budget", u.Dir, size(u.Bytes), size(u.Budget))
	case st.AuditError != "" && u != nil && u.Full:
		r.add(Error, "audit", "the disk holding the audit (%s) is full, %s free: the gate refuses all traffic with E_NO_AUDIT until it can write; "+
			"fix: free space on that disk (move old day files to an archive, after lockhttp verify-log); the gate passes traffic again at its next write", u.Dir, size(u.Free))
	case strings.HasPrefix(st.AuditError, "audit: cannot sign:"):
		r.add(Error, "audit", "the gate cannot sign its audit, so it refuses all traffic with E_NO_AUDIT until it can: %s", strings.TrimPrefix(st.AuditError, "audit: cannot sign: "))
	case st.AuditError != "":
		r.add(Error, "audit", "the gate cannot write its audit (%s): it refuses all traffic until it can; fix: free space or fix the audit directory's owner and mode", st.AuditError)
	case u != nil:
		assessAuditUsage(r, u)
	}
	if n := st.UnrecordedAnswers; n > 0 {
		r.add(Warn, "audit", "since its start the gate could not write the record of %d requests: it cut each forwarded answer before its last byte (its request may have reached the origin) and sent each answer of its own as E_NO_AUDIT without a request id; "+
			"fix: see the gate's log (audit write failed) for the requests, and keep the audit's disk from filling (-audit-budget below its free space)", n)
	}
	if u := st.Audit; u != nil && u.HeadWarning != "" {
		r.add(Warn, "audit", "%s; fix: run lockhttp verify-log on %s and compare it with your last checkpoint (lockhttp audit checkpoint)", u.HeadWarning, u.Dir)
	}
	if ss := st.AuditSink; ss != nil && ss.State != "ok" {
		r.add(Warn, "audit", "the audit's database copy is %s (%s), %d records behind: nothing is lost, the files stay the record and the copy catches up from them when the database is back; fix: check the database and the gate's LOCKHTTP_AUDIT_DSN", ss.State, ss.Error, ss.Behind)
	}
}

// budgetWarn is the share of the audit budget at which the doctor warns.
const budgetWarn = 0.8

// assessAuditUsage warns before the audit's budget or its disk is reached.
func assessAuditUsage(r *Report, u *audit.Usage) {
	room := int64(-1) // what may still be written, -1: unknown
	if u.Budget > 0 {
		room = u.Budget - u.Bytes
	}
	switch {
	case u.Budget > 0 && float64(u.Bytes) >= budgetWarn*float64(u.Budget):
		r.add(Warn, "audit", "the audit directory %s holds %s, %.0f%% of its %s budget: at the budget the gate refuses all traffic (E_NO_AUDIT); "+
			"fix: move old day files out of it to an archive (after lockhttp verify-log), or raise the gate's -audit-budget", u.Dir, size(u.Bytes), 100*float64(u.Bytes)/float64(u.Budget), size(u.Budget))
	case u.Total > 0 && (room < 0 || u.Free < room) && float64(u.Free) < (1-budgetWarn)*float64(u.Total):
		r.add(Warn, "audit", "the disk holding the audit (%s) has %s free of %s, less than the audit may still grow: when it is full the gate refuses all traffic (E_NO_AUDIT); "+
			"fix: free space on it, or lower the gate's -audit-budget below what is free", u.Dir, size(u.Free), size(u.Total))
	case u.Budget > 0:
		r.add(OK, "audit", "the audit takes %s of its %s budget (%.0f%%); %s free on its disk", size(u.Bytes), size(u.Budget), 100*float64(u.Bytes)/float64(u.Budget), size(u.Free))
	}
}

// size writes n bytes in binary units.
func size(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func assessSelf(r *Report, f *Facts) {
	s := f.Self
	if s == nil {
		return
	}
	switch {
	case s.PlainCode == "E_SOURCE_UNKNOWN":
		r.add(Error, "gate", "a request for http://lockhttp.internal/ through %s was refused with E_SOURCE_UNKNOWN: the policy's [sources] names no container for %s, so the gate refuses every request from there; fix: %s",
			s.Proxy, sourcesOf(f), sourcesFix(f))
	case s.PlainErr != "" && iccOff(f) && timedOut(s.PlainErr):
		r.add(Error, "gate", "a request for http://lockhttp.internal/ through %s failed: %s: inter-container traffic is off on the agent network and this machine's firewall does not let agents reach the gate; fix: run compose/firewall.sh (as root) in the deployment directory, after each boot too (docs/deploy.md, \"Host firewall\")", s.Proxy, s.PlainErr)
	case s.PlainErr != "":
		r.add(Error, "gate", "a request for http://lockhttp.internal/ through %s failed: %s; fix: check the proxy address agents are given", s.Proxy, s.PlainErr)
	case s.Plain != nil:
		r.add(OK, "gate", "answers through %s: source %q, policy %s", s.Proxy, s.Plain.Container, short(s.Plain.PolicyVersion))
	}
	if s.CAFile == "" || f.Gate != nil && f.Gate.Status != nil && f.Gate.Status.Signer == "off" {
		return // without a signer nothing is decrypted: the signer's line says so
	}
	switch {
	case s.Untrusted:
		r.add(Error, "ca", "a client trusting %s refused the gate's certificate: %s; fix: have agents trust the ca.pem the signer exports (the signer and the file disagree)", s.CAFile, s.DecryptedErr)
	case s.DecryptedErr != "":
		r.add(Error, "gate", "a decrypted request (https://lockhttp.internal/) failed: %s; fix: see the gate's and the signer's logs", s.DecryptedErr)
	case s.Decrypted != nil:
		r.add(OK, "ca", "a decrypted request through the gate succeeded: a client trusting %s accepts the gate's certificates", s.CAFile)
	}
}

func assessAudit(r *Report, f *Facts) {
	a := f.Audit
	if a == nil {
		return
	}
	switch {
	case a.Err != "":
		r.add(Error, "audit", "%s: %s; fix: the gate writes its audit there: check the directory and the gate's log", a.Dir, a.Err)
	case !a.Found:
		r.add(Error, "audit", "the gate answered request %s but %s has no record of it (%d files, newest %s); fix: check that the gate's -audit is this directory and that it can write it",
			a.ID, a.Dir, a.Files, a.Latest.UTC().Format(time.DateTime))
	default:
		r.add(OK, "audit", "being written: request %s is recorded in %s", a.ID, a.Dir)
	}
}

func assessAgent(r *Report, f *Facts) {
	a := f.Agent
	if a == nil {
		return
	}
	if a.Err != "" {
		r.add(Error, "agent-net", "the probe on the agent network did not run: %s; fix: build the tools image (compose/build.sh) and check the project name", a.Err)
		return
	}
	bypass := "agents can go around the gate; fix: declare the agent network internal: true and attach agents to it alone (compose/compose.yaml)"
	if a.Internal != nil && !*a.Internal {
		r.add(Error, "agent-net", "docker does not isolate %s (internal: false): its containers reach the internet without the gate; fix: internal: true on the agent network (compose/compose.yaml)", a.Network)
	}
	if a.RoutesErr != "" {
		r.add(Warn, "agent-net", "the routing table could not be read: %s", a.RoutesErr)
	}
	reached := false
	var tried []string
	for _, d := range a.Direct {
		tried = append(tried, d.Target+" ("+d.What+")")
		if d.Reached {
			reached = true
			r.add(Error, "agent-net", "a direct connection to %s (%s) got through (%s): %s", d.Target, d.What, orNone(d.Err), bypass)
		}
	}
	if !reached && (a.Internal == nil || *a.Internal) {
		route := "no default route"
		if a.DefaultRoute4 {
			route = "docker drops what an internal network sends out"
		}
		r.add(OK, "agent-net", "direct egress fails: %s (tried %s)", route, orNone(strings.Join(tried, ", ")))
	}
	switch {
	case a.TCP6.Reached:
		r.add(Error, "agent-net", "an IPv6 connection to %s (%s) got through (%s): %s", a.TCP6.Target, a.TCP6.What, orNone(a.TCP6.Err), bypass)
	case a.DefaultRoute6 || a.Route6:
		r.add(Warn, "agent-net", "the agent network has IPv6 routes: docker isolates an internal network's IPv6 only when the daemon runs with ip6tables; fix: enable_ipv6: false on the agent network, or check that the daemon has ip6tables on")
	default:
		tcp := ""
		if a.TCP6.Target != "" {
			tcp = fmt.Sprintf("; a connection to %s: %s", a.TCP6.Target, orNone(a.TCP6.Err))
		}
		r.add(OK, "agent-net", "direct IPv6 egress fails: no route out (%s%s)", orNone(a.Route6Err), tcp)
	}
	assessUDP(r, a)
	assessDNS(r, a)
}

// assessUDP: the datagrams the probe sent to this machine's addresses, at the doctor's port.
func assessUDP(r *Report, a *AgentFacts) {
	if a.UDPErr != "" {
		r.add(Warn, "agent-net", "the UDP check did not run: the doctor could not listen: %s", a.UDPErr)
		return
	}
	var reached []string
	for _, u := range a.UDP {
		if u.Reached {
			reached = append(reached, u.Target)
		}
	}
	switch {
	case len(reached) > 0:
		r.add(Warn, "agent-net", "UDP from the agent network reaches this machine (%s): a service here that listens for UDP on every address (a resolver, for one) is open to agents; fix: %s",
			strings.Join(reached, ", "), hostFirewallFix(a))
	case len(a.UDP) > 0:
		r.add(OK, "agent-net", "UDP from the agent network reaches nothing: %d datagrams sent to this machine's addresses, none arrived", len(a.UDP))
	}
}

// assessDNS: an outside name looked up from the agent network. With the gate's transparent
// address, the gate answers it with that address (nothing is resolved for agents); without, it
// must fail.
func assessDNS(r *Report, a *AgentFacts) {
	if a.DNSName == "" {
		return
	}
	if a.GateIP == "" {
		if len(a.DNSAddrs) > 0 {
			r.add(Error, "agent-net", "the agents' resolver answers outside names (%s → %s): DNS is a channel out; fix: keep the agent network internal: true (its resolver then answers only the project's names)",
				a.DNSName, strings.Join(a.DNSAddrs, ", "))
		} else {
			r.add(OK, "agent-net", "outside DNS fails (%s: %s)", a.DNSName, orNone(a.DNSErr))
		}
		return
	}
	switch {
	case len(a.DNSAddrs) == 1 && a.DNSAddrs[0] == a.GateIP:
		r.add(OK, "agent-net", "outside names are answered by the gate with its own address (%s → %s): nothing is resolved for agents, and a client that ignores the proxy reaches the gate", a.DNSName, a.GateIP)
	case len(a.DNSAddrs) > 0:
		r.add(Error, "agent-net", "the agents' resolver answers outside names with other addresses than the gate's %s (%s → %s): DNS is a channel out; fix: dns: [%s] on every agent, and the agent network internal: true",
			a.GateIP, a.DNSName, strings.Join(a.DNSAddrs, ", "), a.GateIP)
	default:
		r.add(Error, "agent-net", "the agents' resolver did not reach the gate's DNS at %s (%s: %s): docker's resolver (127.0.0.11) does not forward to a server on an internal network in this docker version, so clients that ignore the proxy cannot resolve a name; fix: a docker that forwards (25.0 to 26.1.2 do not: upgrade), or mount a resolv.conf holding only \"nameserver %s\" over /etc/resolv.conf in each agent's service (docs/deploy.md, \"Clients that ignore the proxy\")",
			a.GateIP, a.DNSName, orNone(a.DNSErr), a.GateIP)
	}
	switch {
	case a.Transparent != nil:
		r.add(OK, "agent-net", "a client that ignores the proxy is decided by the gate: http://%s/ by name, through the agents' DNS, answered by the gate itself (request %s)", floor.SelfName, a.Transparent.Request)
	case len(a.DNSAddrs) == 1 && a.DNSAddrs[0] == a.GateIP:
		r.add(Error, "agent-net", "a client that ignores the proxy does not reach the gate's transparent listener at %s (http://%s/: %s); fix: check the gate's log (docker-compose logs gate) for its -transparent listeners",
			a.GateIP, floor.SelfName, orNone(a.TransparentErr))
	}
}

// gateIP is the gate's transparent address, when the probe found one.
func gateIP(f *Facts) string {
	if f.Agent == nil {
		return ""
	}
	return f.Agent.GateIP
}

func assessContainers(r *Report, f *Facts) {
	if f.Mode != "compose" {
		return
	}
	seen := map[string]bool{}
	for _, c := range f.Containers {
		seen[c.Role] = true
		assessHolds(r, c)
		switch c.Role {
		case "gate", "signer", "console":
			if c.State != "running" {
				r.add(Error, "compose", "%s (%s) is %s%s; fix: docker-compose up -d %s, and see docker-compose logs %s", c.Service, c.Name, c.State, downSince(c), c.Service, c.Service)
				continue
			}
			assessServiceLife(r, c)
			if c.User == "" || c.User == "0" || strings.HasPrefix(c.User, "0:") || strings.HasPrefix(c.User, "root") {
				r.add(Error, "compose", "%s runs as root; fix: give it its own uid (user: in compose/compose.yaml)", c.Service)
			}
			if c.Role == "gate" && !c.ReadOnly {
				r.add(Warn, "compose", "the gate's root filesystem is writable; fix: read_only: true")
			}
			if c.Role == "signer" {
				var nets []string
				for _, n := range c.Networks {
					if n != "none" {
						nets = append(nets, n)
					}
				}
				if len(nets) > 0 {
					r.add(Error, "compose", "the signer, which holds the CA key, is on %s: if it were taken over it could send the key out; fix: network_mode: none for the signer (compose/compose.yaml; the gate serves its metrics)", strings.Join(nets, ", "))
				}
			}
		case "agent":
			if c.State != "running" {
				continue
			}
			if c.AgentIP == "" {
				r.add(Error, "compose", "agent %s is not on the agent network (%s): the gate does not stand between it and the internet; fix: networks: [agent] and nothing else in its service (compose/agent.example.yaml)",
					c.Name, orNone(strings.Join(append(slices.Clip(c.Networks), c.HostNS...), ", ")))
				continue
			}
			var other []string
			for _, n := range c.Networks {
				if !strings.HasSuffix(n, "_agent") {
					other = append(other, n)
				}
			}
			if len(other) > 0 {
				r.add(Error, "compose", "agent %s is also on %s: a route around the gate; fix: attach it to the agent network only", c.Name, strings.Join(other, ", "))
			}
			if !c.Proxy {
				r.add(Warn, "compose", "agent %s has no HTTP_PROXY/HTTPS_PROXY: its clients cannot reach anything; fix: set them to http://gate:3130", c.Name)
			}
			if gip := gateIP(f); gip != "" && !slices.Contains(c.DNS, gip) {
				r.add(Warn, "compose", "agent %s does not name the gate as its DNS server (dns: %s): its clients that ignore the proxy fail instead of being decided; fix: dns: [%s] in its service (compose/agent.example.yaml)",
					c.Name, orNone(strings.Join(c.DNS, " ")), gip)
			}
			if len(c.CAVars) == 0 || !c.CAMounted {
				r.add(Warn, "compose", "agent %s does not point its clients at the lockhttp CA (mounted: %t, variables: %s); fix: mount ca-public read-only and set SSL_CERT_FILE, NODE_EXTRA_CA_CERTS, REQUESTS_CA_BUNDLE (docs/deploy.md)",
					c.Name, c.CAMounted, orNone(strings.Join(c.CAVars, " ")))
			} else {
				r.add(OK, "compose", "agent %s: agent network only, proxy set, trusts the CA through %s", c.Name, strings.Join(c.CAVars, " "))
			}
		}
	}
	for _, role := range []string{"signer", "console", "gate"} {
		if !seen[role] {
			r.add(Error, "compose", "no %s container in the project; fix: docker-compose up -d", role)
		}
	}
	if seen["gate"] && seen["signer"] && seen["console"] && !seen["agent"] {
		r.add(Warn, "compose", "no agent container on the agent network yet; fix: attach your agent service to the agent network (compose/agent.example.yaml)")
	}
}
