package doctor

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/console"
	"github.com/lockhttp/lockhttp/internal/gate"
	"github.com/lockhttp/lockhttp/internal/signer"
	"github.com/lockhttp/lockhttp/internal/tracing"
)

var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

var yes, no = true, false

// healthy are the facts of a sound compose setup.
func healthy() *Facts {
	return &Facts{
		Mode: "compose", Now: now, Version: "version v1.2.0, revision abc, go1.26.8",
		CA: &CAFacts{CertPath: "/vol/ca-public/ca.pem", Subject: "CN=lockhttp CA", NotAfter: now.Add(400 * 24 * time.Hour), SHA256: "aa11", IsCA: true,
			KeyPath: "/vol/ca/ca-key.pem", KeyStat: true, KeyMode: 0o600, KeyUID: 10004, SignerUID: 10004},
		Signer: &SignerFacts{Socket: "/run/lockhttp/signer.sock", Health: &signer.Health{CASHA256: "aa11"},
			OtherProbed: true, OtherUID: 65534, OtherRefused: true, OtherHow: "the signer closed the connection"},
		Console: &ConsoleFacts{Socket: "/run/lockhttp/console.sock", Status: &console.Status{Version: "sha256:v1", File: "sha256:v1"}, Policy: "policy.toml, version v1",
			Injects: []InjectRule{{Name: "anthropic", Hosts: []string{"api.anthropic.com"}, Secret: "anthropic"}}},
		PolicyFile: &PolicyFileFacts{Path: "/etc/lockhttp/policy/policy.toml", Host: "/srv/site/policy/policy.toml", Version: "sha256:v1"},
		Secrets:    &SecretsFacts{Path: "/vol/secrets/secrets.toml", Names: []string{"anthropic"}},
		Phone: &PhoneFacts{Container: "p_console_1", Wanted: []string{"127.0.0.1:3131"}, Published: []string{"127.0.0.1:3131"},
			Networks: map[string]bool{"p_hub": true, "p_phone": false}, PageURL: "http://127.0.0.1:3131/phone/", URL: "http://127.0.0.1:3131", URLLoopback: true},
		Hub:  &HubFacts{URL: "http://console:3131"},
		Gate: &GateFacts{Socket: "/run/lockhttp/gate.sock", Status: &gate.Status{Listen: "0.0.0.0:3130", PolicyVersion: "sha256:v1", Signer: "ok"}},
		Self: &SelfFacts{Proxy: "http://gate:3130", CAFile: "/ca/ca.pem", Plain: &gate.SelfAnswer{Gate: "lockhttp", Request: "r1"},
			Decrypted: &gate.SelfAnswer{Gate: "lockhttp", Decrypted: true, Request: "r2"}},
		Audit: &AuditFacts{Dir: "/vol/audit", ID: "r1", Found: true},
		Agent: &AgentFacts{Network: "p_agent", Internal: &yes, DefaultRoute4: true, Route4: true, Route6Err: "network is unreachable", DNSName: "example.com", DNSErr: "no such host",
			Direct:  []Direct{{Target: "172.30.20.2:3130", What: "the gate on p_egress", Err: "timed out"}},
			Host:    []Direct{{Target: "172.30.10.1:22", What: "port 22 of this machine, at br-1", Err: "timed out"}, {Target: "192.0.2.2:22", What: "port 22 of this machine, at eth0", Err: "timed out"}},
			Subnets: []string{"172.30.10.0/24"}, ICC: &no},
		Containers: []ContainerFacts{
			{Name: "p_signer_1", Service: "signer", Role: "signer", State: "running", User: "10004:10000", Networks: []string{"none"}},
			{Name: "p_console_1", Service: "console", Role: "console", State: "running", User: "10021:10000"},
			{Name: "p_gate_1", Service: "gate", Role: "gate", State: "running", User: "10003:10000", ReadOnly: true},
			{Name: "p_agent_1", Service: "agent", Role: "agent", State: "running", Networks: []string{"p_agent"}, Proxy: true,
				CAVars: []string{"SSL_CERT_FILE"}, CAMounted: true, AgentIP: "172.30.10.2", CapDrop: []string{"ALL"}, NoNewPrivileges: true},
		},
	}
}

// transparentFacts makes f a deployment whose gate serves a transparent address: the probe's
// resolver is the gate's DNS, and a client that ignores the proxy is answered by the gate.
func transparentFacts(f *Facts) {
	f.Agent.GateIP, f.Agent.DNSAddrs, f.Agent.DNSErr = "172.30.10.254", []string{"172.30.10.254"}, ""
	f.Agent.Transparent = &gate.SelfAnswer{Gate: "lockhttp", Request: "r3"}
	f.Containers[3].DNS = []string{"172.30.10.254"}
}

// TestTransparentHealthy: a deployment with the gate's transparent address says so, all OK.
func TestTransparentHealthy(t *testing.T) {
	f := healthy()
	transparentFacts(f)
	f.Agent.UDP = []Direct{{Target: "172.30.10.1:4242"}, {Target: "192.0.2.2:4242"}}
	f.Agent.TCP6 = Direct{Target: "[2001:db8::1]:443", Err: "network is unreachable"}
	r := Assess(f)
	var b bytes.Buffer
	r.Write(&b)
	if r.Worst() != OK {
		t.Fatalf("worst %s:\n%s", r.Worst(), b.String())
	}
	for _, want := range []string{
		"outside names are answered by the gate with its own address (example.com → 172.30.10.254)",
		"a client that ignores the proxy is decided by the gate: http://lockhttp.internal/ by name, through the agents' DNS, answered by the gate itself (request r3)",
		"UDP from the agent network reaches nothing: 2 datagrams sent to this machine's addresses, none arrived",
		"direct IPv6 egress fails: no route out (network is unreachable; a connection to [2001:db8::1]:443: network is unreachable)",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no line with %q:\n%s", want, b.String())
		}
	}
}

func TestHealthyIsAllOK(t *testing.T) {
	r := Assess(healthy())
	var b bytes.Buffer
	r.Write(&b)
	if r.Worst() != OK || r.Count(OK) < 15 {
		t.Fatalf("worst %s:\n%s", r.Worst(), b.String())
	}
	for _, want := range []string{"no trace exporter", "direct egress fails: docker drops what an internal network sends out (tried 172.30.20.2:3130", "direct IPv6 egress fails", "outside DNS fails", "a decrypted request through the gate succeeded",
		"a caller with uid 65534 is refused", "owned by uid 10004 (the signer's)", "being written",
		"the phone page answers at http://127.0.0.1:3131/phone/ (published on 127.0.0.1:3131)",
		"pairing links name http://127.0.0.1:3131, which answers",
		"/srv/site/policy/policy.toml on this machine is the policy the console serves (version v1)",
		`inject "anthropic": its secret "anthropic" loads from /vol/secrets/secrets.toml`,
		"agents reach none of this machine's listening ports (2 TCP tried",
		"agents cannot reach each other: inter-container traffic is off on p_agent", "no agent can send with another's address: p_agent_1 drop NET_RAW"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in\n%s", want, b.String())
		}
	}
}

// TestEachBreakage changes one fact of a healthy setup and expects exactly the line that says so.
func TestEachBreakage(t *testing.T) {
	agent := func(f *Facts) *ContainerFacts { return &f.Containers[3] }
	twoAgents := func(f *Facts) {
		b := *agent(f)
		b.Name, b.AgentIP = "p_agent-b_1", "172.30.10.3"
		f.Containers = append(f.Containers, b)
	}
	cases := []struct {
		name   string
		break_ func(f *Facts)
		level  Level
		check  string
		want   string
	}{
		{"an agent with the docker socket", func(f *Facts) { agent(f).Engine = []string{"/var/run/docker.sock"} }, Error, "compose",
			"agent p_agent_1 mounts /var/run/docker.sock: the container engine, through which it reads every container's files (the signer's CA key among them)"},
		{"an agent with docker's data", func(f *Facts) { agent(f).Engine = []string{"/var/lib"} }, Error, "compose", "agent p_agent_1 mounts /var/lib: the container engine"},
		{"a privileged agent", func(f *Facts) { agent(f).Privileged = true }, Error, "compose", "agent p_agent_1 is privileged"},
		{"an agent with NET_ADMIN", func(f *Facts) { agent(f).CapAdd = []string{"NET_ADMIN"} }, Error, "compose",
			"agent p_agent_1 is given capabilities: NET_ADMIN (NET_ADMIN and NET_RAW change or forge its address"},
		{"an agent with SYS_PTRACE", func(f *Facts) { agent(f).CapAdd = []string{"SYS_PTRACE"} }, Error, "compose", "is given capabilities: SYS_PTRACE"},
		{"an agent sharing the host's processes", func(f *Facts) { agent(f).HostNS = []string{"pid (host)", "ipc (host)"} }, Error, "compose",
			"agent p_agent_1 shares namespaces it must not: pid (host), ipc (host)"},
		{"an agent with the host's network", func(f *Facts) {
			a := agent(f)
			a.HostNS, a.AgentIP, a.Networks = []string{"network (host)"}, "", []string{"host"}
		}, Error, "compose", "agent p_agent_1 is not on the agent network (host, network (host)): the gate does not stand between it and the internet"},
		{"an agent with the gate's network", func(f *Facts) { agent(f).HostNS = []string{"network (container:abc)"} }, Error, "compose", "network (container:abc)"},
		{"an agent with a device", func(f *Facts) { agent(f).Devices = []string{"/dev/kvm"} }, Error, "compose", "is given this machine's devices: /dev/kvm"},
		{"the gate with a capability", func(f *Facts) { f.Containers[2].CapAdd = []string{"NET_ADMIN"} }, Error, "compose", "gate (p_gate_1) is given capabilities: NET_ADMIN"},
		{"one agent keeps NET_RAW", func(f *Facts) { agent(f).CapDrop = nil }, Warn, "isolation",
			"agent p_agent_1 keeps NET_RAW (docker gives it by default): a process that is root in it sends packets with another container's address"},
		{"two agents, one keeps NET_RAW", func(f *Facts) { twoAgents(f); f.Containers[4].CapDrop = []string{"NET_ADMIN"} }, Error, "isolation",
			"agent p_agent-b_1 keeps NET_RAW"},
		{"two agents reach each other", func(f *Facts) {
			twoAgents(f)
			f.Agent.ICC = &yes
			f.Agent.Peers = []Direct{{Target: "172.30.10.2:9", What: "agent p_agent_1", Reached: true, Err: "refused by a host that was reached"},
				{Target: "172.30.10.3:9", What: "agent p_agent-b_1", Reached: true, Err: "connected"}}
		}, Error, "isolation", "the agent network reaches agent p_agent_1 at 172.30.10.2:9 (refused by a host that was reached): agents reach each other's ports; fix: inter-container traffic off"},
		{"one agent, inter-container traffic on", func(f *Facts) { f.Agent.ICC = &yes }, Warn, "isolation",
			"inter-container traffic is on for p_agent: agents on it reach each other's ports; fix: com.docker.network.bridge.enable_icc: \"false\""},
		{"the signer killed by hand", func(f *Facts) {
			c := &f.Containers[0]
			c.State, c.ExitCode, c.FinishedAt = "exited", 137, now.Add(-time.Hour)
		}, Error, "compose", "signer (p_signer_1) is exited since 2026-11-30 11:00:00 UTC (exit code 137, signal 9); docker restarts no container stopped by hand (docker kill, docker stop), whatever its restart policy; fix: docker-compose up -d signer"},
		{"the gate crashed and was restarted", func(f *Facts) {
			c := &f.Containers[2]
			c.Restarts = 3
			c.Created, c.FinishedAt, c.StartedAt = now.Add(-48*time.Hour), now.Add(-time.Minute), now.Add(-time.Minute+time.Second)
		}, Warn, "restarts", "the gate restarted 3 times since its container was created at 2026-11-28 12:00:00 UTC, the last time at 2026-11-30 11:59:01 UTC after it exited at 2026-11-30 11:59:00 UTC; fix: read why in docker-compose logs gate"},
		{"the console unhealthy", func(f *Facts) {
			f.Containers[1].Health, f.Containers[1].HealthLog = "unhealthy", "exit 1: no approved policy"
		}, Error, "compose",
			"console (p_console_1) is running but its health check fails (exit 1: no approved policy)"},
		{"a UDP service on every address", func(f *Facts) {
			f.Agent.UDP = []Direct{{Target: "172.30.10.1:4242", Reached: true}, {Target: "192.0.2.2:4242"}}
			f.Agent.UDPListen = []string{"0.0.0.0:53", "127.0.0.1:5353"}
		}, Warn, "agent-net", "agents reach UDP port 53 of this machine at 172.30.10.1: a service here listens for datagrams there"},
		{"the sources do not name the agent network", func(f *Facts) {
			f.Self.Plain, f.Self.PlainCode = nil, "E_SOURCE_UNKNOWN"
			f.Self.PlainErr = "answered 403 (E_SOURCE_UNKNOWN: [sources] names no container for this connection's address)"
		}, Error, "gate", `refused with E_SOURCE_UNKNOWN: the policy's [sources] names no container for the agent network's addresses (172.30.10.0/24), so the gate refuses every request from there; fix: name the agent network's subnet in [sources] of policy/policy.toml in the deployment directory (agent = ["172.30.10.0/24"]: LOCKHTTP_AGENT_SUBNET of .env)`},
		{"the gate out of the agents' reach", func(f *Facts) {
			f.Self.Plain, f.Self.PlainErr = nil, "Get \"http://lockhttp.internal/\": dial tcp 172.30.10.254:3130: i/o timeout"
		}, Error, "gate", "this machine's firewall does not let agents reach the gate; fix: run compose/firewall.sh"},
		{"expired CA", func(f *Facts) { f.CA.NotAfter = now.Add(-time.Hour) }, Error, "ca", "expired on 2026-11-30"},
		{"CA expiring in 29 days", func(f *Facts) { f.CA.NotAfter = now.Add(29*24*time.Hour + time.Hour) }, Warn, "ca", "in 29 days"},
		{"CA file missing", func(f *Facts) { f.CA.CertErr = "no such file or directory" }, Error, "ca", "never make a new CA"},
		{"not a CA", func(f *Facts) { f.CA.IsCA = false }, Error, "ca", "is not a CA certificate"},
		{"key readable by the group", func(f *Facts) { f.CA.KeyMode = 0o640 }, Error, "ca-key", "mode 0640"},
		{"key readable by all", func(f *Facts) { f.CA.KeyMode = 0o644 }, Error, "ca-key", "chmod 600 /vol/ca/ca-key.pem"},
		{"key owned by the gate", func(f *Facts) { f.CA.KeyUID = 10003 }, Error, "ca-key", "owned by uid 10003, the signer runs as uid 10004; fix: chown 10004"},
		{"key missing", func(f *Facts) { f.CA.KeyErr = "no such file" }, Error, "ca-key", "restore it from a backup"},
		{"signer stopped", func(f *Facts) {
			f.Gate.Status.Signer = "signer unavailable: context deadline exceeded"
			f.Signer.Err = "context deadline exceeded"
		}, Error, "signer", "E_NO_SIGNER"},
		{"decryption off", func(f *Facts) { f.Gate.Status.Signer = "off" }, Warn, "signer", "a granted CONNECT opens reads and writes alike, unseen"},
		{"signer CA is not the agents' CA", func(f *Facts) { f.Signer.Health.CASHA256 = "bb22" }, Error, "signer", "export the signer's ca.pem again"},
		{"signer serves another uid", func(f *Facts) { f.Signer.OtherRefused, f.Signer.OtherHow = false, "GET /health answered 200" }, Error, "signer", "--allow-uid"},
		{"other uid not probed", func(f *Facts) { f.Signer.OtherProbed, f.Signer.NotProbed = false, "run the doctor as root" }, Warn, "signer", "was not probed: run the doctor as root"},
		{"decryption off: no decrypted request is expected", func(f *Facts) {
			f.Gate.Status.Signer = "off"
			f.Self.Decrypted, f.Self.DecryptedErr = nil, "answered 403"
		}, Warn, "signer", "unseen"},
		{"trace export failing", func(f *Facts) {
			f.Gate.Status.Traces = &tracing.Status{Endpoint: "http://otel:4318/v1/traces", Exported: 10, Failed: 3,
				LastOK: now.Add(-time.Minute), LastFail: now.Add(-5 * time.Second), LastError: "connection refused"}
		}, Warn, "traces", "the last export failed 5s ago: connection refused"},
		{"trace spans dropped", func(f *Facts) {
			f.Gate.Status.Traces = &tracing.Status{Endpoint: "http://otel:4318/v1/traces", Exported: 10, Dropped: 2, LastOK: now}
		}, Warn, "traces", "2 dropped (the exporter fell behind"},
		{"console down", func(f *Facts) { f.Console.Status, f.Console.Err = nil, "connect: no such file or directory" }, Error, "console", "start the console"},
		{"console serves nothing", func(f *Facts) { f.Console.Status.Version = "" }, Error, "console", "serves no approved policy"},
		{"invalid policy file", func(f *Facts) {
			f.Console.Status.FileError = `policy.toml:5: rule "x": verdict "maybe" is unknown`
		}, Warn, "console", `policy.toml:5: rule "x": verdict "maybe" is unknown`},
		{"review pending", func(f *Facts) { f.Console.Status.Review, f.Console.Status.Differs = "sha256:v2", true }, Warn, "console", ":review"},
		{"review rejected", func(f *Facts) { f.Console.Status.Differs = true }, Warn, "console", "rejected"},
		{"floor cidr", func(f *Facts) { f.Console.AllowCIDRs = []string{"10.0.0.0/8"} }, Warn, "policy", "allow_cidrs opens 10.0.0.0/8"},
		{"floor port", func(f *Facts) { f.Console.AllowPorts = []int{8443} }, Warn, "policy", "allow_ports opens port 8443"},
		{"floor host", func(f *Facts) { f.Console.FloorHosts = map[string]string{"git.corp": "10.1.2.3"} }, Warn, "policy", "maps git.corp to 10.1.2.3"},
		{"hub down", func(f *Facts) { f.Hub.Err = "connection refused" }, Error, "hub", "E_NO_CONSOLE"},
		{"tickets pending", func(f *Facts) {
			f.Hub.Pending = []Pending{{ID: "t2", Kind: "request", Created: now.Add(-time.Minute)}, {ID: "t1", Kind: "connect", Created: now.Add(-3 * time.Minute)}}
		}, Warn, "hub", "2 ticket(s) pending, the oldest (t1, a connect) for 3m0s"},
		{"gate down", func(f *Facts) { f.Gate.Status, f.Gate.Err = nil, "connection refused" }, Error, "gate", "start the gate"},
		{"gate on an old policy", func(f *Facts) { f.Gate.Status.PolicyVersion, f.Gate.Waited = "sha256:v0", 6*time.Second }, Error, "gate", "decides with policy v0 while the console serves v1"},
		{"gate without policy", func(f *Facts) { f.Gate.Status.PolicyVersion = "" }, Error, "gate", "has no policy"},
		{"gate's audit broken", func(f *Facts) { f.Gate.Status.AuditError = "disk full" }, Error, "audit", "disk full"},
		{"audit record missing", func(f *Facts) { f.Audit.Found = false }, Error, "audit", "has no record of it"},
		{"audit at 85% of its budget", func(f *Facts) {
			f.Gate.Status.Audit = &audit.Usage{Dir: "/vol/audit", Bytes: 85 << 20, Budget: 100 << 20, Free: 50 << 30, Total: 100 << 30}
		}, Warn, "audit", "holds 85.0 MiB, 85% of its 100.0 MiB budget: at the budget the gate refuses all traffic (E_NO_AUDIT); fix: move old day files"},
		{"audit at its budget", func(f *Facts) {
			f.Gate.Status.AuditError = "audit: /vol/audit holds 104857600 bytes, its budget is 104857600"
			f.Gate.Status.Audit = &audit.Usage{Dir: "/vol/audit", Bytes: 100 << 20, Budget: 100 << 20, Free: 50 << 30, Total: 100 << 30, Full: true}
		}, Error, "audit", "refuses all traffic with E_NO_AUDIT; fix: move old day files out of it to an archive (after lockhttp verify-log), or raise the gate's -audit-budget"},
		{"audit disk full", func(f *Facts) {
			f.Gate.Status.AuditError = "audit: write /vol/audit/2026-11-30.jsonl: no space left on device"
			f.Gate.Status.Audit = &audit.Usage{Dir: "/vol/audit", Bytes: 1 << 20, Budget: 10 << 30, Free: 0, Total: 1 << 30, Full: true}
		}, Error, "audit", "the disk holding the audit (/vol/audit) is full, 0 bytes free: the gate refuses all traffic with E_NO_AUDIT until it can write; fix: free space"},
		{"audit key unreadable", func(f *Facts) {
			f.Gate.Status.AuditError = "audit: cannot sign: audit: read /vol/audit/audit.key: permission denied; fix: make /vol/audit/audit.key readable by the gate"
		}, Error, "audit", "the gate cannot sign its audit, so it refuses all traffic with E_NO_AUDIT until it can: audit: read /vol/audit/audit.key: permission denied; fix: make"},
		{"audit database copy down", func(f *Facts) {
			f.Gate.Status.AuditSink = &audit.SinkStatus{State: "down", Error: "auditdb: connect: refused", Behind: 42}
		}, Warn, "audit", "the audit's database copy is down (auditdb: connect: refused), 42 records behind: nothing is lost"},
		{"answers whose record could not be written", func(f *Facts) { f.Gate.Status.UnrecordedAnswers = 7 }, Warn, "audit",
			"since its start the gate could not write the record of 7 requests: it cut each forwarded answer before its last byte"},
		{"a spoiled head slot at the gate's start", func(f *Facts) {
			f.Gate.Status.Audit = &audit.Usage{Dir: "/vol/audit", Bytes: 1 << 20, Free: 50 << 30, Total: 100 << 30,
				HeadWarning: audit.SpoiledText("/vol/audit/head.json", []int{2}, 41)}
		}, Warn, "audit", "head.json: slot 2 holds no whole signed head: only a crash of the machine while the gate wrote it leaves that"},
		{"audit disk nearly full", func(f *Facts) {
			f.Gate.Status.Audit = &audit.Usage{Dir: "/vol/audit", Bytes: 1 << 20, Budget: 10 << 30, Free: 1 << 30, Total: 20 << 30}
		}, Warn, "audit", "has 1.0 GiB free of 20.0 GiB, less than the audit may still grow"},
		{"CA untrusted", func(f *Facts) {
			f.Self.Decrypted, f.Self.DecryptedErr, f.Self.Untrusted = nil, "x509: certificate signed by unknown authority", true
		}, Error, "ca", "refused the gate's certificate"},
		{"proxy unreachable", func(f *Facts) { f.Self.Plain, f.Self.PlainErr = nil, "connection refused" }, Error, "gate", "check the proxy address"},
		{"not internal", func(f *Facts) { f.Agent.Internal = &no }, Error, "agent-net", "docker does not isolate p_agent (internal: false)"},
		{"direct reached", func(f *Facts) { f.Agent.Direct[0].Reached, f.Agent.Direct[0].Err = true, "connected" }, Error, "agent-net", "got through"},
		{"this machine's port reached", func(f *Facts) {
			f.Agent.Host[0].Reached, f.Agent.Host[0].Err = true, "connected"
			f.Agent.Host[1].Reached, f.Agent.Host[1].Err = true, "connected"
		}, Warn, "agent-net", "agents reach port 22 of this machine at 172.30.10.1, 192.0.2.2: a service here that listens on every address is open to them; fix: drop what the agent network sends to this machine: run compose/firewall.sh as root in the deployment directory, which adds iptables -I INPUT -s 172.30.10.0/24 -j DROP"},
		{"hub port not published (internal networks only)", func(f *Facts) {
			f.Phone.Published, f.Phone.PageURL, f.Phone.Networks = nil, "", map[string]bool{"p_hub": true}
			f.Phone.URLErr = "connection refused"
		}, Error, "phone", "docker published no port: it does not publish the ports of a container on internal networks only (its networks: p_hub (internal))"},
		{"phone page does not answer", func(f *Facts) { f.Phone.PageErr = "connection reset by peer" }, Error, "phone", "the phone page http://127.0.0.1:3131/phone/ does not answer from this machine (connection reset by peer)"},
		{"pairing links name a dead port", func(f *Facts) {
			f.Phone.URL, f.Phone.URLErr = "http://127.0.0.1:3199", "connection refused"
		}, Error, "phone", "pairing links name http://127.0.0.1:3199, which does not answer from this machine (connection refused): every pairing link is dead; fix: set LOCKHTTP_PHONE_URL in .env to where the hub is published (127.0.0.1:3131)"},
		{"pairing links name a LAN address", func(f *Facts) {
			f.Phone.URL, f.Phone.URLErr, f.Phone.URLLoopback = "https://hub.lan", "no such host", false
		}, Warn, "phone", "check it from the phone"},
		{"hub published on every address", func(f *Facts) { f.Phone.Published = []string{"0.0.0.0:3131"} }, Warn, "phone", "the hub is published on 0.0.0.0:3131"},
		{"policy file mounted alone", func(f *Facts) { f.PolicyFile.Single = true }, Error, "policy-file", "mounted into the console as a single file"},
		{"policy file replaced, the console on the old inode", func(f *Facts) { f.PolicyFile.Version = "sha256:v2" }, Error, "policy-file", "(version v2) is not the file the console reads (version v1): edits made here are not seen"},
		{"policy file waits for review", func(f *Facts) {
			f.PolicyFile.Version, f.Console.Status.File, f.Console.Status.Review, f.Console.Status.Differs = "sha256:v2", "sha256:v2", "sha256:v2", true
		}, Warn, "policy-file", "(version v2) loosens the served policy (v1) and waits for review"},
		{"policy file invalid", func(f *Facts) {
			f.PolicyFile.Version, f.Console.Status.File, f.Console.Status.FileError = "sha256:v2", "sha256:v2", "policy.toml:3: unknown key"
		}, Warn, "policy-file", "does not load; the console keeps serving v1"},
		{"policy file unreadable here", func(f *Facts) { f.PolicyFile.Err = "permission denied" }, Warn, "policy-file", "cannot be read on this machine (permission denied)"},
		{"inject secret missing", func(f *Facts) { f.Secrets.Names = []string{"github"} }, Error, "secrets",
			`inject "anthropic": its secret "anthropic" is not in /vol/secrets/secrets.toml: requests to api.anthropic.com are refused with E_INJECT; fix: docker-compose run --rm -T --user 10003:10003 volumes secrets add anthropic --secrets /vol/secrets/secrets.toml < FILE`},
		{"optional inject secret missing", func(f *Facts) { f.Secrets.Names, f.Console.Injects[0].Optional = []string{"github"}, true }, OK, "secrets",
			`inject "anthropic": its secret "anthropic" is not in /vol/secrets/secrets.toml, and the rule is optional: requests to api.anthropic.com go out with the agent's own credential`},
		{"inject over plain http", func(f *Facts) { f.Console.Injects[0].HTTP = true }, Warn, "secrets",
			`inject "anthropic" adds its secret to plain http:// requests to api.anthropic.com too (http = true): it crosses the network in clear text`},
		{"secrets file broken", func(f *Facts) {
			f.Secrets.Names, f.Secrets.Err = nil, "secrets file: /vol/secrets/secrets.toml has mode 0644"
		}, Error, "secrets", "the gate refuses every request"},
		{"ipv6 route", func(f *Facts) { f.Agent.Route6 = true }, Warn, "agent-net", "ip6tables"},
		{"outside DNS", func(f *Facts) { f.Agent.DNSAddrs, f.Agent.DNSErr = []string{"93.184.215.14"}, "" }, Error, "agent-net", "DNS is a channel out"},
		{"probe did not run", func(f *Facts) { f.Agent = &AgentFacts{Err: "no such image"} }, Error, "agent-net", "no such image"},
		{"an IPv6 connection out", func(f *Facts) {
			f.Agent.TCP6 = Direct{Target: "[2001:db8::1]:443", What: "an outside IPv6 address", Reached: true, Err: "connected"}
		}, Error, "agent-net", "an IPv6 connection to [2001:db8::1]:443 (an outside IPv6 address) got through"},
		{"UDP reaches this machine", func(f *Facts) {
			f.Agent.UDP = []Direct{{Target: "172.30.10.1:4242", What: "this machine, at br-1", Reached: true}, {Target: "192.0.2.2:4242"}}
		}, Warn, "agent-net", "UDP from the agent network reaches this machine (172.30.10.1:4242): a service here that listens for UDP on every address (a resolver, for one) is open to agents; fix: drop what the agent network sends to this machine: run compose/firewall.sh as root in the deployment directory, which adds iptables -I INPUT -s 172.30.10.0/24 -j DROP"},
		{"the gate's DNS not reached", func(f *Facts) { transparentFacts(f); f.Agent.DNSAddrs, f.Agent.DNSErr = nil, "server misbehaving" }, Error, "agent-net",
			`the agents' resolver did not reach the gate's DNS at 172.30.10.254 (example.com: server misbehaving): docker's resolver (127.0.0.11) does not forward to a server on an internal network in this docker version`},
		{"outside names resolved elsewhere, with a transparent gate", func(f *Facts) { transparentFacts(f); f.Agent.DNSAddrs = []string{"93.184.215.14"} }, Error, "agent-net", "other addresses than the gate's 172.30.10.254"},
		{"the transparent listener does not answer", func(f *Facts) {
			transparentFacts(f)
			f.Agent.Transparent, f.Agent.TransparentErr = nil, "connection refused"
		}, Error, "agent-net",
			"a client that ignores the proxy does not reach the gate's transparent listener at 172.30.10.254 (http://lockhttp.internal/: connection refused)"},
		{"an agent without dns:", func(f *Facts) { transparentFacts(f); f.Containers[3].DNS = nil }, Warn, "compose",
			"agent p_agent_1 does not name the gate as its DNS server (dns: none): its clients that ignore the proxy fail instead of being decided; fix: dns: [172.30.10.254] in its service"},
		{"gate stopped", func(f *Facts) { f.Containers[2].State = "exited" }, Error, "compose", "docker-compose up -d gate"},
		{"gate as root", func(f *Facts) { f.Containers[2].User = "" }, Error, "compose", "gate runs as root"},
		{"agent with a second network", func(f *Facts) { f.Containers[3].Networks = []string{"bridge", "p_agent"} }, Error, "compose", "also on bridge"},
		{"signer on a network", func(f *Facts) { f.Containers[0].Networks = []string{"p_hub"} }, Error, "compose", "network_mode: none for the signer"},
		{"agent without proxy", func(f *Facts) { f.Containers[3].Proxy = false }, Warn, "compose", "no HTTP_PROXY"},
		{"agent without CA", func(f *Facts) { f.Containers[3].CAVars = nil }, Warn, "compose", "does not point its clients at the lockhttp CA"},
		{"no signer container", func(f *Facts) { f.Containers = f.Containers[1:] }, Error, "compose", "no signer container"},
		{"no stack", func(f *Facts) { f.Stack = "no stack is running" }, Error, "stack", "no stack is running"},
		{"a local stack of another build", func(f *Facts) {
			f.Mode, f.Containers, f.Agent, f.StackVersion = "local", nil, nil, "version v1.1.0, revision 123, go1.26.8"
		}, Warn, "version", "the stack runs lox version v1.1.0, revision 123, go1.26.8, this lockhttp is version v1.2.0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := healthy()
			tc.break_(f)
			r := Assess(f)
			var b bytes.Buffer
			r.Write(&b)
			found := false
			for _, l := range r.Find(tc.check) {
				if l.Level == tc.level && strings.Contains(l.Text, tc.want) {
					found = true
				}
			}
			if !found {
				t.Fatalf("no %s %s line with %q:\n%s", tc.level, tc.check, tc.want, b.String())
			}
			if tc.level == Error && r.Worst() != Error || tc.level == Warn && r.Worst() != Warn {
				t.Fatalf("worst is %s, want %s:\n%s", r.Worst(), tc.level, b.String())
			}
		})
	}
}

func TestVersionLine(t *testing.T) {
	cases := []struct {
		name  string
		set   func(f *Facts)
		level Level
		want  string
	}{
		{"compose", func(f *Facts) {}, OK, "lockhttp version v1.2.0, revision abc, go1.26.8"},
		{"a local stack of this build", func(f *Facts) { f.Mode, f.StackVersion = "local", f.Version }, OK, "the stack runs the same build"},
		{"a local stack without a version", func(f *Facts) { f.Mode = "local" }, OK, "names no build"},
		{"a local stack of another build", func(f *Facts) { f.Mode, f.StackVersion = "local", "version v1.1.0" }, Warn, "stop lox run and start it again"},
		{"no local stack", func(f *Facts) { f.Mode, f.Stack, f.StackVersion = "local", "no stack", "" }, OK, "lockhttp version v1.2.0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := healthy()
			tc.set(f)
			lines := Assess(f).Find("version")
			if len(lines) != 1 || lines[0].Level != tc.level || !strings.Contains(lines[0].Text, tc.want) {
				t.Fatalf("version lines %+v, want one %s line with %q", lines, tc.level, tc.want)
			}
		})
	}
}

func TestReportLinesStayOnOneLine(t *testing.T) {
	f := healthy()
	f.Console.Status.FileError = "policy.toml:3: bad\nvalue\ton two lines"
	var b bytes.Buffer
	Assess(f).Write(&b)
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if l == "" || strings.Contains(l, " OK, ") {
			continue
		}
		if !strings.HasPrefix(l, "OK ") && !strings.HasPrefix(l, "WARN ") && !strings.HasPrefix(l, "ERROR ") {
			t.Fatalf("line %q does not start with a level:\n%s", l, b.String())
		}
	}
}
