package doctor

import (
	"time"

	"github.com/lockhttp/lockhttp/internal/console"
	"github.com/lockhttp/lockhttp/internal/gate"
	"github.com/lockhttp/lockhttp/internal/restarts"
	"github.com/lockhttp/lockhttp/internal/signer"
)

// Facts are what gathering found. Errors are strings: facts cross process and container
// boundaries as JSON. A nil part was not gathered (not visible from where the doctor ran).
type Facts struct {
	Mode  string    `json:"mode"` // "local" (lox run), "compose" or "fleet" (a console over mutual TLS)
	Now   time.Time `json:"now"`
	Stack string    `json:"stack,omitempty"` // why the stack could not be found, if it could not
	// Version is the doctor's own build (buildinfo.Info.String); StackVersion the build of the
	// lox that started the local stack, from its up.json ("" in compose, or an older up.json).
	Version      string `json:"version,omitempty"`
	StackVersion string `json:"stack_version,omitempty"`

	// Supervision is what lox run's supervisor wrote in up.json (local only).
	Supervision *SupervisionFacts `json:"supervision,omitempty"`

	CA      *CAFacts      `json:"ca,omitempty"`
	Signer  *SignerFacts  `json:"signer,omitempty"`
	Console *ConsoleFacts `json:"console,omitempty"`
	Hub     *HubFacts     `json:"hub,omitempty"`
	Gate    *GateFacts    `json:"gate,omitempty"`
	// Self is a request for the gate's own name through the proxy (from the agent network, in
	// compose).
	Self  *SelfFacts  `json:"self,omitempty"`
	Audit *AuditFacts `json:"audit,omitempty"`
	// Agent is the agent network's boundary, probed from inside it (compose only).
	Agent *AgentFacts `json:"agent,omitempty"`
	// Containers are the compose project's containers (compose only).
	Containers []ContainerFacts `json:"containers,omitempty"`
	// Metrics are the processes' metrics listeners, scraped once (local only: from up.json).
	Metrics []MetricsFacts `json:"metrics,omitempty"`
	// Phone is the hub's published port and the phone URL, tried from this machine (compose
	// only).
	Phone *PhoneFacts `json:"phone,omitempty"`
	// PolicyFile is the console's policy file as it is on this machine's disk (compose only).
	PolicyFile *PolicyFileFacts `json:"policy_file,omitempty"`
	// Secrets is the gate's secrets file as the gate's uid reads it.
	Secrets *SecretsFacts `json:"secrets,omitempty"`
	// Enclosure is the agent's network enclosure under lox run --, probed from inside it
	// (local only).
	Enclosure *EnclosureFacts `json:"enclosure,omitempty"`
	// RootAgents is whether an agent runs as root (local only).
	RootAgents *RootAgentFacts `json:"root_agents,omitempty"`
}

// EnclosureFacts: the network enclosure of the agent lox run -- started, as seen from inside
// its network namespace.
type EnclosureFacts struct {
	// Agent is false when up.json names no agent lox started (a plain lox run, whose clients
	// are set up by hand).
	Agent bool `json:"agent"`
	PID   int  `json:"pid,omitempty"`
	// Err: the probe could not run (not root, the process gone).
	Err string `json:"err,omitempty"`
	// Link, Gate and Address are up.json's enclosure: the host's side of the link, the gate's
	// address on it and the agent's. Proxy is the gate's proxy there (GATE:PORT).
	Link    string `json:"link,omitempty"`
	Gate    string `json:"gate,omitempty"`
	Address string `json:"address,omitempty"`
	Proxy   string `json:"proxy,omitempty"`
	// Namespace is the agent's network namespace (net:[N]); SameNamespace that it is the
	// doctor's own (no enclosure).
	Namespace     string `json:"namespace,omitempty"`
	SameNamespace bool   `json:"same_namespace,omitempty"`
	// Resolvers are the nameservers of /etc/resolv.conf as the agent sees it; ResolvErr why
	// it could not be read. Sockets are the host resolvers' sockets the agent can see.
	Resolvers []string `json:"resolvers,omitempty"`
	ResolvErr string   `json:"resolv_err,omitempty"`
	Sockets   []string `json:"sockets,omitempty"`
	// Probes are what was tried from inside the namespace, in order.
	Probes []EnclosureProbe `json:"probes,omitempty"`
}

// EnclosureProbe is one attempt from inside the agent's network namespace.
type EnclosureProbe struct {
	// Kind is "gate" (the gate's proxy, which must answer), "tcp" (another port of a host
	// address), "udp", "ipv6" or "dns" (a query to a resolver that is not the gate's).
	Kind   string `json:"kind"`
	Target string `json:"target"`
	// Outcome is "connected", "answered", "refused", "not permitted", "unreachable",
	// "timed out" or another error's text; Took how long it took.
	Outcome string        `json:"outcome"`
	Took    time.Duration `json:"took"`
	// Seen: the doctor's listener outside the namespace received it (it got out). Answer is
	// a DNS answer's addresses; AtGate that they are the gate's own (the query was redirected
	// to the gate).
	Seen   bool     `json:"seen,omitempty"`
	Answer []string `json:"answer,omitempty"`
	AtGate bool     `json:"at_gate,omitempty"`
}

// PhoneFacts: where the hub and the phone page are published, and whether they answer there.
type PhoneFacts struct {
	Container string `json:"container"`
	// Wanted are the port bindings the compose file asks for (host ip:port), Published those
	// docker made: none when the console is on internal networks only.
	Wanted    []string `json:"wanted,omitempty"`
	Published []string `json:"published,omitempty"`
	// Networks are the console's networks and whether each is internal.
	Networks map[string]bool `json:"networks,omitempty"`
	// Page is GET /phone/ on the first published binding, from this machine ("" URL: not tried).
	PageURL string `json:"page_url,omitempty"`
	PageErr string `json:"page_err,omitempty"`
	// URL is the console's -phone-url (what pairing links name); URLErr why GET URL/phone/
	// failed from this machine; URLLoopback that its host is this machine's loopback.
	URL         string `json:"url,omitempty"`
	URLErr      string `json:"url_err,omitempty"`
	URLLoopback bool   `json:"url_loopback,omitempty"`
}

// PolicyFileFacts: the policy file the console reads, as this machine's disk has it.
type PolicyFileFacts struct {
	// Path is the console's -policy; Host the same file on this machine ("": not mounted from
	// it).
	Path string `json:"path"`
	Host string `json:"host,omitempty"`
	// Single: the file itself is bind-mounted, not its directory (an editor's rename is not
	// seen in the container).
	Single  bool   `json:"single,omitempty"`
	Version string `json:"version,omitempty"` // policy.Hash of the file on disk
	Err     string `json:"err,omitempty"`
}

// SecretsFacts: the gate's secrets file, as the gate's uid reads it. Names only, never a value.
type SecretsFacts struct {
	Path  string   `json:"path"`
	Err   string   `json:"err,omitempty"`
	Names []string `json:"names,omitempty"`
}

// InjectRule is one [[inject]] rule of the served policy: its name, hosts, secret's name,
// whether plain http:// requests get it and whether it is optional.
type InjectRule struct {
	Name     string   `json:"name"`
	Hosts    []string `json:"hosts"`
	Secret   string   `json:"secret"`
	HTTP     bool     `json:"http,omitempty"`     // plain http:// requests get the secret too
	Optional bool     `json:"optional,omitempty"` // without the secret, requests pass with the agent's own credential
}

// SupervisionFacts: the local stack's processes as lox run's supervisor keeps them.
type SupervisionFacts struct {
	Started time.Time `json:"started"` // when the stack came up
	Logs    string    `json:"logs"`    // the processes' logs
	// Restarts are the processes lox restarted ("signer", "console", "gate"); one that never
	// exited is not in it.
	Restarts map[string]restarts.Tally `json:"restarts,omitempty"`
}

// CAFacts: the certificate agents trust and the key the signer holds.
type CAFacts struct {
	CertPath string    `json:"cert_path"`
	CertErr  string    `json:"cert_err,omitempty"`
	Subject  string    `json:"subject,omitempty"`
	NotAfter time.Time `json:"not_after"`
	SHA256   string    `json:"sha256,omitempty"`
	IsCA     bool      `json:"is_ca"`

	KeyPath string `json:"key_path"`
	// KeyStat is false when the key's directory cannot be looked into from here.
	KeyStat bool   `json:"key_stat"`
	KeyErr  string `json:"key_err,omitempty"`
	KeyMode uint32 `json:"key_mode"`
	KeyUID  int    `json:"key_uid"`
	// SignerUID is the uid the signer runs as; -1 when unknown.
	SignerUID int `json:"signer_uid"`
}

// SignerFacts: the signer as the doctor (with the gate's rights) and another uid see it.
type SignerFacts struct {
	Socket string         `json:"socket"`
	Err    string         `json:"err,omitempty"`
	Health *signer.Health `json:"health,omitempty"`
	// OtherUID is the uid of the refusal probe; OtherProbed false: not probed, NotProbed says why.
	OtherUID     int    `json:"other_uid"`
	OtherProbed  bool   `json:"other_probed"`
	OtherRefused bool   `json:"other_refused"`
	OtherHow     string `json:"other_how,omitempty"` // how it was refused, or what it got
	NotProbed    string `json:"not_probed,omitempty"`
	NotProbedOK  bool   `json:"not_probed_ok,omitempty"` // the reason is itself a proof (a 0700 directory)
}

// ConsoleFacts: what the console serves.
type ConsoleFacts struct {
	Socket string          `json:"socket"`
	Err    string          `json:"err,omitempty"`
	Status *console.Status `json:"status,omitempty"`
	// PolicyErr: fetching or compiling the served policy failed.
	PolicyErr string `json:"policy_err,omitempty"`
	Policy    string `json:"policy,omitempty"` // the served policy's name and version, for the line
	// The served policy's floor exceptions.
	AllowCIDRs []string          `json:"allow_cidrs,omitempty"`
	AllowPorts []int             `json:"allow_ports,omitempty"` // beyond 80 and 443
	FloorHosts map[string]string `json:"floor_hosts,omitempty"`
	Heuristics string            `json:"heuristics,omitempty"`
	// Injects are the served policy's [[inject]] rules.
	Injects []InjectRule `json:"injects,omitempty"`
}

// HubFacts: the hub as a facade sees it.
type HubFacts struct {
	URL     string    `json:"url"`
	Err     string    `json:"err,omitempty"`
	Pending []Pending `json:"pending,omitempty"`
	// Phones is how many phones are paired; PhoneURL the URL pairing links name (the console's
	// -phone-url as it serves it), "" when the console serves no phone page.
	Phones   int    `json:"phones,omitempty"`
	PhoneURL string `json:"phone_url,omitempty"`
}

// Pending is one ticket waiting for a human.
type Pending struct {
	ID      string    `json:"id"`
	Kind    string    `json:"kind"`
	Created time.Time `json:"created"`
}

// GateFacts: the gate's admin status.
type GateFacts struct {
	Socket string       `json:"socket"`
	Err    string       `json:"err,omitempty"`
	Status *gate.Status `json:"status,omitempty"`
	// Waited is how long the doctor waited for the gate to take the console's policy.
	Waited time.Duration `json:"waited"`
}

// SelfFacts: requests for the gate's own name through the proxy.
type SelfFacts struct {
	Proxy  string `json:"proxy"`
	CAFile string `json:"ca_file,omitempty"` // the CA the client trusted; "": no decrypted request
	// Plain is http://lockhttp.internal/; Decrypted is https://lockhttp.internal/.
	PlainErr     string           `json:"plain_err,omitempty"`
	PlainCode    string           `json:"plain_code,omitempty"` // the gate's refusal code (E_SOURCE_UNKNOWN), if it refused
	Plain        *gate.SelfAnswer `json:"plain,omitempty"`
	DecryptedErr string           `json:"decrypted_err,omitempty"`
	Decrypted    *gate.SelfAnswer `json:"decrypted,omitempty"`
	// Untrusted: the decrypted request failed on the gate's certificate.
	Untrusted bool `json:"untrusted,omitempty"`
}

// AuditFacts: whether the gate's audit holds the self request's record.
type AuditFacts struct {
	Dir   string `json:"dir"`
	ID    string `json:"id"`
	Err   string `json:"err,omitempty"`
	Found bool   `json:"found"`
	// Files is how many audit files the directory holds; Latest the newest one's time.
	Files  int       `json:"files"`
	Latest time.Time `json:"latest"`
}

// AgentFacts: the agent network's boundary, probed from a container on it.
type AgentFacts struct {
	Err string `json:"err,omitempty"` // the probe could not run
	// Network is the agent network's name; Internal and IPv6 what docker says of it (nil:
	// not asked).
	Network  string `json:"network,omitempty"`
	Internal *bool  `json:"internal,omitempty"`
	IPv6     bool   `json:"ipv6,omitempty"`
	// DefaultRoute4/6: the routing table has a default route. Docker gives internal networks
	// one too and drops what they send out in the host's firewall: a route alone is no way out.
	DefaultRoute4 bool   `json:"default_route4"`
	DefaultRoute6 bool   `json:"default_route6"`
	RoutesErr     string `json:"routes_err,omitempty"`
	// Route4/Route6: the kernel found a route to an outside address (a UDP "connect", which
	// sends nothing); RouteErr says why not. Facts for the report, like the default routes.
	Route4    bool   `json:"route4"`
	Route4Err string `json:"route4_err,omitempty"`
	Route6    bool   `json:"route6"`
	Route6Err string `json:"route6_err,omitempty"`
	// Direct are TCP connections to addresses outside the agent network; Host to this machine
	// (the network's gateway), whose services listening on every address agents then reach.
	Direct []Direct `json:"direct,omitempty"`
	Host   []Direct `json:"host,omitempty"`
	// Subnets are the agent network's subnets (for the host firewall rule's fix); HostErr why
	// this machine's listening ports could not be listed.
	Subnets []string `json:"subnets,omitempty"`
	HostErr string   `json:"host_err,omitempty"`
	// TCP6 is a TCP connection to an outside IPv6 address.
	TCP6 Direct `json:"tcp6"`
	// UDP are datagrams sent to this machine's addresses, at a port the doctor listened on;
	// Reached: the doctor received it. UDPErr: why it could not listen.
	UDP    []Direct `json:"udp,omitempty"`
	UDPErr string   `json:"udp_err,omitempty"`
	// GateIP is the gate's transparent address (its -transparent), "" without one. With one
	// the probe's resolver is the gate's DNS (dns: GATE_IP), which answers GateIP for every
	// name, and Transparent is http://lockhttp.internal/ asked ignoring the proxy (the
	// gate's own answer, or TransparentErr).
	GateIP         string           `json:"gate_ip,omitempty"`
	Transparent    *gate.SelfAnswer `json:"transparent,omitempty"`
	TransparentErr string           `json:"transparent_err,omitempty"`
	// ICC is the agent network's inter-container traffic (its bridge's enable_icc option):
	// false, the shipped setting, keeps agents from reaching each other; nil: not said.
	ICC *bool `json:"icc,omitempty"`
	// Peers are TCP connections from the probe to each agent's address on the agent network
	// (reached: an agent reaches another).
	Peers []Direct `json:"peers,omitempty"`
	// UDPListen are this machine's UDP sockets an agent could send to (on every address, or on
	// one of its addresses that is not loopback), as ADDR:PORT.
	UDPListen []string `json:"udp_listen,omitempty"`
	// DNS is a lookup of an outside name through the agent's resolver.
	DNSName  string   `json:"dns_name"`
	DNSAddrs []string `json:"dns_addrs,omitempty"`
	DNSErr   string   `json:"dns_err,omitempty"`
}

// Direct is one direct connection attempt.
type Direct struct {
	Target  string `json:"target"`
	What    string `json:"what"`
	Reached bool   `json:"reached"` // connected, or refused by a host that was reached
	Err     string `json:"err,omitempty"`
}

// ContainerFacts: one container of a compose project, from docker inspect.
type ContainerFacts struct {
	Name     string   `json:"name"`
	Service  string   `json:"service"`
	Role     string   `json:"role"` // gate, signer, console, agent
	State    string   `json:"state"`
	User     string   `json:"user"`
	ReadOnly bool     `json:"read_only"`
	Networks []string `json:"networks"`
	// For agents: the proxy variables and the CA variables they set, and whether the public CA
	// volume is mounted.
	Proxy     bool     `json:"proxy"`
	DNS       []string `json:"dns,omitempty"` // its resolvers (compose's dns:)
	CAVars    []string `json:"ca_vars,omitempty"`
	CAMounted bool     `json:"ca_mounted"`
	// AgentIP is its address on the agent network ("": not on it).
	AgentIP string `json:"agent_ip,omitempty"`

	// What it holds of this machine (docker inspect's HostConfig and mounts): Engine are its bind
	// mounts that give the container engine (the docker, containerd or podman socket, or the
	// engine's data directory, or a directory above one), through which it reads any container's
	// files, the signer's CA key among them.
	Engine     []string `json:"engine,omitempty"`
	Privileged bool     `json:"privileged,omitempty"`
	// HostNS are the namespaces it shares with this machine or another container: "network",
	// "pid", "ipc", "uts", "userns", each with what it shares ("network (host)",
	// "pid (container:abc)").
	HostNS  []string `json:"host_ns,omitempty"`
	CapAdd  []string `json:"cap_add,omitempty"`
	CapDrop []string `json:"cap_drop,omitempty"`
	Devices []string `json:"devices,omitempty"` // host devices given to it (PathOnHost)
	// NoNewPrivileges: security_opt no-new-privileges.
	NoNewPrivileges bool `json:"no_new_privileges,omitempty"`

	// Its life as docker tells it: created, the last start and exit, the exit's code and
	// whether the kernel killed it for memory, how often docker restarted it (its restart
	// policy; docker counts from the container's creation), and its health check.
	Created    time.Time `json:"created"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	ExitCode   int       `json:"exit_code,omitempty"`
	OOMKilled  bool      `json:"oom_killed,omitempty"`
	Restarts   int       `json:"restarts,omitempty"`
	Restart    string    `json:"restart,omitempty"` // its restart policy (unless-stopped)
	Health     string    `json:"health,omitempty"`  // healthy, unhealthy, starting; "": no check
	HealthLog  string    `json:"health_log,omitempty"`
}
