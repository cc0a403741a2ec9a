package doctor

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/lockhttp/lockhttp/internal/display"
	"github.com/lockhttp/lockhttp/internal/phone"
	"github.com/lockhttp/lockhttp/internal/policy"
)

// Compose says how to examine a compose project from the machine that runs its daemon.
type Compose struct {
	Project string
	// Docker is the docker command ("docker").
	Docker string
	// ToolsImage is the image with the lockhttp binary; "": the image of the project's volumes
	// service (lockhttp-tools).
	ToolsImage string
	// Direct are extra host:port targets the agent network must not reach.
	Direct []string
	// DNSName is the outside name the agent network must not resolve.
	DNSName string
}

// dockerContainer is the part of docker inspect the doctor reads.
type dockerContainer struct {
	ID     string `json:"Id"`
	Name   string `json:"Name"`
	Config struct {
		User   string            `json:"User"`
		Env    []string          `json:"Env"`
		Image  string            `json:"Image"`
		Cmd    []string          `json:"Cmd"`
		Labels map[string]string `json:"Labels"`
	} `json:"Config"`
	Created      time.Time `json:"Created"`
	RestartCount int       `json:"RestartCount"`
	State        struct {
		Status     string    `json:"Status"`
		ExitCode   int       `json:"ExitCode"`
		OOMKilled  bool      `json:"OOMKilled"`
		StartedAt  time.Time `json:"StartedAt"`
		FinishedAt time.Time `json:"FinishedAt"`
		Health     *struct {
			Status string `json:"Status"`
			Log    []struct {
				ExitCode int    `json:"ExitCode"`
				Output   string `json:"Output"`
			} `json:"Log"`
		} `json:"Health"`
	} `json:"State"`
	HostConfig struct {
		ReadonlyRootfs bool                     `json:"ReadonlyRootfs"`
		DNS            []string                 `json:"Dns"`
		PortBindings   map[string][]portBinding `json:"PortBindings"`
		Privileged     bool                     `json:"Privileged"`
		NetworkMode    string                   `json:"NetworkMode"`
		PidMode        string                   `json:"PidMode"`
		IpcMode        string                   `json:"IpcMode"`
		UTSMode        string                   `json:"UTSMode"`
		UsernsMode     string                   `json:"UsernsMode"`
		CapAdd         []string                 `json:"CapAdd"`
		CapDrop        []string                 `json:"CapDrop"`
		SecurityOpt    []string                 `json:"SecurityOpt"`
		Devices        []struct {
			PathOnHost string `json:"PathOnHost"`
		} `json:"Devices"`
		RestartPolicy struct {
			Name string `json:"Name"`
		} `json:"RestartPolicy"`
	} `json:"HostConfig"`
	NetworkSettings struct {
		Networks map[string]struct {
			IPAddress string `json:"IPAddress"`
		} `json:"Networks"`
		Ports map[string][]portBinding `json:"Ports"`
	} `json:"NetworkSettings"`
	Mounts []struct {
		Type        string `json:"Type"`
		Name        string `json:"Name"`
		Source      string `json:"Source"`
		Destination string `json:"Destination"`
	} `json:"Mounts"`
}

// portBinding is a published port as docker inspect shows it.
type portBinding struct {
	HostIP   string `json:"HostIp"`
	HostPort string `json:"HostPort"`
}

func (c *Compose) docker(ctx context.Context, args ...string) ([]byte, error) {
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, c.Docker, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("%s %s: %v: %s", c.Docker, strings.Join(args[:min(len(args), 2)], " "), err, display.Line(strings.TrimSpace(errb.String()), 600))
	}
	return out.Bytes(), nil
}

func (c *Compose) inspect(ctx context.Context, ids []string) ([]dockerContainer, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	out, err := c.docker(ctx, append([]string{"inspect"}, ids...)...)
	if err != nil {
		return nil, err
	}
	var cs []dockerContainer
	if err := json.Unmarshal(out, &cs); err != nil {
		return nil, fmt.Errorf("docker inspect: %w", err)
	}
	return cs, nil
}

func (d *dockerContainer) mount(dest string) string {
	for _, m := range d.Mounts {
		if m.Destination == dest && m.Type == "volume" {
			return m.Name
		}
	}
	return ""
}

// flagValue returns the value after flag in a command line, or "".
func flagValue(cmd []string, flag string) string {
	for i, a := range cmd {
		if (a == flag || a == "-"+flag) && i+1 < len(cmd) {
			return cmd[i+1]
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

// GatherCompose examines the project: its containers (docker inspect), the agent network's
// boundary (a probe container on it) and the services' facts (the doctor in a container that
// mounts the project's volumes, dropping to the gate's uid for the sockets).
func GatherCompose(ctx context.Context, c Compose) *Facts {
	f := &Facts{Mode: "compose", Now: time.Now()}
	if c.Docker == "" {
		c.Docker = "docker"
	}
	if c.DNSName == "" {
		c.DNSName = "example.com"
	}
	out, err := c.docker(ctx, "ps", "-aq", "--filter", "label=com.docker.compose.project="+c.Project)
	if err != nil {
		f.Stack = err.Error() + "; fix: is the docker daemon running, and may this user use it?"
		return f
	}
	cs, err := c.inspect(ctx, strings.Fields(string(out)))
	if err != nil {
		f.Stack = err.Error()
		return f
	}
	if len(cs) == 0 {
		f.Stack = fmt.Sprintf("no containers in the compose project %q; fix: docker-compose -p %s up -d, or name the project the setup runs under", c.Project, c.Project)
		return f
	}
	byService := map[string]*dockerContainer{}
	for i := range cs {
		byService[cs[i].Config.Labels["com.docker.compose.service"]] = &cs[i]
	}
	agentNet, hubNet := c.Project+"_agent", c.Project+"_hub"
	tools := c.ToolsImage
	if v := byService["volumes"]; tools == "" && v != nil {
		tools = v.Config.Image
	}
	// Agents: every container on the agent network but the gate, whatever project it is in.
	var agentIDs []string
	var netInfo struct {
		Internal   bool
		EnableIPv6 bool
		IPAM       struct {
			Config []struct{ Subnet, Gateway string }
		}
		Options    map[string]string
		Containers map[string]struct{}
	}
	if out, err := c.docker(ctx, "network", "inspect", "-f", "{{json .}}", agentNet); err == nil && json.Unmarshal(out, &netInfo) == nil {
		for id := range netInfo.Containers {
			agentIDs = append(agentIDs, id)
		}
	} else {
		f.Stack = fmt.Sprintf("the project has no network %s: %v; fix: docker-compose -p %s up -d", agentNet, err, c.Project)
		return f
	}
	agents, _ := c.inspect(ctx, agentIDs)
	// And the project's own containers that are agents but not on the agent network (one with
	// the host's network, say): those given the gate as their proxy or the lockhttp CA.
	onNet := map[string]bool{}
	for _, a := range agents {
		onNet[a.ID] = true
	}
	for i := range cs {
		if !onNet[cs[i].ID] && !lockhttpService[cs[i].Config.Labels["com.docker.compose.service"]] && looksLikeAgent(&cs[i]) {
			agents = append(agents, cs[i])
		}
	}
	dataRoot := ""
	if out, err := c.docker(ctx, "info", "-f", "{{.DockerRootDir}}"); err == nil {
		dataRoot = strings.TrimSpace(string(out))
	}
	for _, role := range []string{"signer", "console", "gate"} {
		if d := byService[role]; d != nil {
			f.Containers = append(f.Containers, containerFacts(d, role, agentNet, dataRoot))
		}
	}
	gate := byService["gate"]
	var peers []string
	for i := range agents {
		if gate != nil && agents[i].ID == gate.ID || agents[i].Config.Labels["lockhttp.doctor"] != "" {
			continue
		}
		cf := containerFacts(&agents[i], "agent", agentNet, dataRoot)
		f.Containers = append(f.Containers, cf)
		if cf.AgentIP != "" && cf.State == "running" {
			// Any port: a host that answers (even to refuse) is reached.
			peers = append(peers, net.JoinHostPort(cf.AgentIP, "9")+"=agent "+cf.Name)
		}
	}
	slices.Sort(peers)
	if gate == nil || byService["signer"] == nil || tools == "" {
		if tools == "" {
			f.Stack = "cannot tell the tools image (the project has no volumes service); fix: pass --tools-image lockhttp-tools:TAG"
		}
		return f
	}
	_, port, _ := net.SplitHostPort(flagValue(gate.Config.Cmd, "-listen"))
	if port == "" {
		port = "3130"
	}
	// The agent network's boundary, from a container on it.
	probe := []string{"run", "--rm", "--network", agentNet, "--label", "lockhttp.doctor=probe"}
	gateIP := flagValue(gate.Config.Cmd, "-transparent")
	if gateIP != "" {
		// As an agent's service sets it (dns: [GATE_IP]): docker's resolver forwards outside
		// names to the gate's DNS.
		probe = append(probe, "--dns", gateIP)
	}
	if v := byService["signer"].mount("/vol/ca-public"); v != "" {
		probe = append(probe, "-v", v+":/ca:ro")
	}
	probe = append(probe, tools, "doctor", "probe-agent", "--proxy", "http://gate:"+port, "--ca", "/ca/ca.pem", "--dns", c.DNSName)
	if gateIP != "" {
		probe = append(probe, "--transparent")
	}
	for _, p := range peers {
		probe = append(probe, "--peer", p)
	}
	var targets []string
	for name, n := range gate.NetworkSettings.Networks {
		if name != agentNet && name != hubNet && n.IPAddress != "" {
			targets = append(targets, net.JoinHostPort(n.IPAddress, port)+"=the gate on "+name)
		}
	}
	slices.Sort(targets)
	for _, t := range c.Direct {
		targets = append(targets, t+"=given with --direct")
	}
	for _, t := range targets {
		probe = append(probe, "--direct", t)
	}
	// This machine's listening ports, at each of its addresses (every docker network's gateway
	// among them): an agent reaches them through its network's gateway unless the host's
	// firewall drops what the agent network sends it.
	var hostErr string
	socks, err := listening("/proc/net")
	addrs, aerr := hostAddrs()
	if err = errors.Join(err, aerr); err != nil {
		hostErr = err.Error()
	}
	hostT, left := hostTargets(tcpSocks(socks), addrs, maxHostTargets)
	if left > 0 {
		hostErr = fmt.Sprintf("%d more host ports not tried (the doctor tries %d)", left, maxHostTargets)
	}
	for _, t := range hostT {
		probe = append(probe, "--host", t.Target+"="+t.What)
	}
	// A datagram to each of this machine's addresses, at a port the doctor listens on.
	udp, err := net.ListenPacket("udp4", "0.0.0.0:0")
	var udpErr, nonce string
	if err != nil {
		udpErr = err.Error()
	} else {
		defer udp.Close()
		nonce = newNonce()
		port := udp.LocalAddr().(*net.UDPAddr).Port
		probe = append(probe, "--nonce", nonce)
		for _, a := range addrs {
			probe = append(probe, "--udp", netip.AddrPortFrom(a.Addr, uint16(port)).String()+"=this machine, at "+a.If)
		}
	}
	var pr probeResult
	if out, err := c.docker(ctx, probe...); err != nil {
		f.Agent = &AgentFacts{Err: err.Error()}
	} else if err := json.Unmarshal(out, &pr); err != nil {
		f.Agent = &AgentFacts{Err: fmt.Sprintf("the probe's answer: %v: %s", err, display.Line(string(out), 300))}
	} else {
		f.Agent, f.Self = pr.Agent, pr.Self
	}
	internal := netInfo.Internal
	f.Agent.Network, f.Agent.Internal, f.Agent.IPv6 = agentNet, &internal, netInfo.EnableIPv6
	f.Agent.GateIP, f.Agent.UDPErr = gateIP, udpErr
	if udp != nil && len(f.Agent.UDP) > 0 {
		receivedUDP(udp, nonce, f.Agent.UDP)
	}
	f.Agent.HostErr = hostErr
	if udp != nil {
		f.Agent.UDPListen = udpListeners(socks, addrs, udp.LocalAddr().(*net.UDPAddr).Port)
	}
	if v, ok := netInfo.Options["com.docker.network.bridge.enable_icc"]; ok {
		icc := v != "false"
		f.Agent.ICC = &icc
	} else {
		icc := true // docker's default
		f.Agent.ICC = &icc
	}
	for _, ipam := range netInfo.IPAM.Config {
		f.Agent.Subnets = append(f.Agent.Subnets, ipam.Subnet)
	}
	if con := byService["console"]; con != nil {
		f.Phone = c.gatherPhone(ctx, con)
		// Read before the console is asked, so that the console has had the time to see it.
		f.PolicyFile = policyFileFacts(con)
	}
	// The services, from a container with their volumes.
	inside := []string{"run", "--rm", "--network", hubNet, "--user", "0:0", "--label", "lockhttp.doctor=inside"}
	for _, m := range []struct {
		from *dockerContainer
		src  string
		dst  string
	}{
		{byService["signer"], "/vol/ca", "/vol/ca:ro"},
		{byService["signer"], "/vol/ca-public", "/vol/ca-public:ro"},
		{gate, "/run/lockhttp", "/run/lockhttp"},
		{gate, "/vol/audit", "/vol/audit:ro"},
		{byService["console"], "/vol/console", "/vol/console:ro"},
	} {
		if m.from == nil {
			continue
		}
		if v := m.from.mount(m.src); v != "" {
			inside = append(inside, "-v", v+":"+m.dst)
		}
	}
	// The gate's secrets file, in the volume it is in, at the same path.
	secretsFile := flagValue(gate.Config.Cmd, "-secrets")
	if secretsFile != "" {
		if v := gate.mount(path.Dir(secretsFile)); v != "" {
			inside = append(inside, "-v", v+":"+path.Dir(secretsFile)+":ro")
		} else {
			secretsFile = ""
		}
	}
	inside = append(inside, tools, "doctor", "inside-compose")
	if secretsFile != "" {
		inside = append(inside, "--secrets", secretsFile)
	}
	if f.Self != nil && f.Self.Plain != nil {
		inside = append(inside, "--audit-id", f.Self.Plain.Request)
	}
	var in Facts
	if out, err := c.docker(ctx, inside...); err != nil {
		f.Stack = "the doctor could not look inside the project: " + err.Error()
	} else if err := json.Unmarshal(out, &in); err != nil {
		f.Stack = fmt.Sprintf("the doctor inside the project answered: %v: %s", err, display.Line(string(out), 300))
	} else {
		f.CA, f.Signer, f.Console, f.Hub, f.Gate, f.Audit, f.Secrets = in.CA, in.Signer, in.Console, in.Hub, in.Gate, in.Audit, in.Secrets
		if in.Stack != "" {
			f.Stack = in.Stack
		}
	}
	return f
}

// receivedUDP marks the datagrams of the probe that reached pc.
func receivedUDP(pc net.PacketConn, nonce string, sent []Direct) {
	buf := make([]byte, 512)
	for {
		pc.SetReadDeadline(time.Now().Add(time.Second))
		n, _, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		rest, ok := strings.CutPrefix(string(buf[:n]), udpProbe+nonce+" ")
		if !ok {
			continue
		}
		for i := range sent {
			if sent[i].Target == rest {
				sent[i].Reached = true
			}
		}
	}
}

func newNonce() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// probeResult is what doctor probe-agent prints.
type probeResult struct {
	Agent *AgentFacts `json:"agent"`
	Self  *SelfFacts  `json:"self"`
}

// lockhttpService are the compose file's own services.
var lockhttpService = map[string]bool{"volumes": true, "signer": true, "console": true, "gate": true}

// looksLikeAgent: a container given the gate as its proxy, or the lockhttp CA volume.
func looksLikeAgent(d *dockerContainer) bool {
	for _, e := range d.Config.Env {
		k, v, _ := strings.Cut(e, "=")
		if k = strings.ToUpper(k); (k == "HTTP_PROXY" || k == "HTTPS_PROXY") && (strings.Contains(v, "@gate:") || strings.Contains(v, "//gate:")) {
			return true
		}
	}
	for _, m := range d.Mounts {
		if m.Type == "volume" && strings.HasSuffix(m.Name, "_ca-public") {
			return true
		}
	}
	return false
}

// enginePaths are where this machine's container engines listen and keep their containers'
// files: a container that mounts one (or a directory above one) controls every container.
var enginePaths = []string{
	"/var/run/docker.sock", "/run/docker.sock", "/var/run/docker", "/run/docker",
	"/run/containerd/containerd.sock", "/var/run/containerd/containerd.sock",
	"/run/podman/podman.sock", "/var/run/podman/podman.sock", "/run/crio/crio.sock",
	"/run/buildkit/buildkitd.sock", "/var/lib/docker", "/var/lib/containerd", "/var/lib/containers",
}

// engineMount reports whether a bind mount of source gives the container engine: one of
// enginePaths or dataRoot (docker's data directory), a directory above or below one (a volume's
// files are under the data directory), or a socket named
// like an engine's (a rootless docker's or podman's under /run/user).
func engineMount(source, dataRoot string) bool {
	src := path.Clean("/" + source)
	paths := enginePaths
	if dataRoot != "" {
		paths = append(slices.Clip(paths), path.Clean(dataRoot))
	}
	for _, p := range paths {
		if src == p || src == "/" || strings.HasPrefix(p, src+"/") || strings.HasPrefix(src, p+"/") {
			return true
		}
	}
	switch base := path.Base(src); {
	case strings.HasSuffix(base, "docker.sock"), strings.HasSuffix(base, "podman.sock"),
		strings.HasSuffix(base, "containerd.sock"), base == "crio.sock", base == "buildkitd.sock":
		return true
	}
	// A user's runtime directory holds a rootless engine's socket.
	return src == "/run/user" || strings.HasPrefix(src, "/run/user/") && strings.Count(src, "/") <= 3
}

func containerFacts(d *dockerContainer, role, agentNet, dataRoot string) ContainerFacts {
	cf := ContainerFacts{Name: strings.TrimPrefix(d.Name, "/"), Service: d.Config.Labels["com.docker.compose.service"], Role: role,
		State: d.State.Status, User: d.Config.User, ReadOnly: d.HostConfig.ReadonlyRootfs, DNS: d.HostConfig.DNS,
		Privileged: d.HostConfig.Privileged, CapAdd: d.HostConfig.CapAdd, CapDrop: d.HostConfig.CapDrop,
		Created: d.Created, StartedAt: d.State.StartedAt, FinishedAt: d.State.FinishedAt, ExitCode: d.State.ExitCode,
		OOMKilled: d.State.OOMKilled, Restarts: d.RestartCount, Restart: d.HostConfig.RestartPolicy.Name}
	if cf.Service == "" {
		cf.Service = cf.Name
	}
	if n, ok := d.NetworkSettings.Networks[agentNet]; ok {
		cf.AgentIP = n.IPAddress
	}
	if h := d.State.Health; h != nil {
		cf.Health = h.Status
		if len(h.Log) > 0 {
			last := h.Log[len(h.Log)-1]
			cf.HealthLog = fmt.Sprintf("exit %d: %s", last.ExitCode, display.Line(strings.TrimSpace(last.Output), 200))
		}
	}
	for _, ns := range []struct{ name, mode string }{{"network", d.HostConfig.NetworkMode}, {"pid", d.HostConfig.PidMode},
		{"ipc", d.HostConfig.IpcMode}, {"uts", d.HostConfig.UTSMode}, {"userns", d.HostConfig.UsernsMode}} {
		if ns.mode == "host" || strings.HasPrefix(ns.mode, "container:") {
			cf.HostNS = append(cf.HostNS, ns.name+" ("+ns.mode+")")
		}
	}
	for _, dev := range d.HostConfig.Devices {
		cf.Devices = append(cf.Devices, dev.PathOnHost)
	}
	for _, o := range d.HostConfig.SecurityOpt {
		if o == "no-new-privileges" || o == "no-new-privileges:true" || o == "no-new-privileges=true" {
			cf.NoNewPrivileges = true
		}
	}
	for _, m := range d.Mounts {
		if m.Type == "bind" && engineMount(m.Source, dataRoot) {
			cf.Engine = append(cf.Engine, m.Source)
		}
	}
	for n := range d.NetworkSettings.Networks {
		cf.Networks = append(cf.Networks, n)
	}
	slices.Sort(cf.Networks)
	caPaths := map[string]bool{}
	for _, e := range d.Config.Env {
		k, v, _ := strings.Cut(e, "=")
		switch strings.ToUpper(k) {
		case "HTTP_PROXY", "HTTPS_PROXY":
			if v != "" {
				cf.Proxy = true
			}
		case "SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "DENO_CERT", "PIP_CERT", "CARGO_HTTP_CAINFO":
			cf.CAVars = append(cf.CAVars, k)
			caPaths[v] = true
		}
	}
	slices.Sort(cf.CAVars)
	for _, m := range d.Mounts {
		if m.Type == "volume" && strings.HasSuffix(m.Name, "_ca-public") {
			for p := range caPaths {
				if strings.HasPrefix(p, strings.TrimSuffix(m.Destination, "/")+"/") {
					cf.CAMounted = true
				}
			}
		}
	}
	return cf
}

// gatherPhone reads where docker published the console's hub port and tries the phone page
// there and at the console's -phone-url, from this machine.
func (c *Compose) gatherPhone(ctx context.Context, d *dockerContainer) *PhoneFacts {
	p := &PhoneFacts{Container: strings.TrimPrefix(d.Name, "/"), URL: flagValue(d.Config.Cmd, "-phone-url"), Networks: map[string]bool{}}
	_, port, _ := net.SplitHostPort(flagValue(d.Config.Cmd, "-hub-listen"))
	if port == "" {
		port = "3131"
	}
	key := port + "/tcp"
	for _, b := range d.HostConfig.PortBindings[key] {
		p.Wanted = append(p.Wanted, net.JoinHostPort(orAll(b.HostIP), b.HostPort))
	}
	var first *portBinding
	for _, b := range d.NetworkSettings.Ports[key] {
		if first == nil {
			first = &b
		}
		p.Published = append(p.Published, net.JoinHostPort(orAll(b.HostIP), b.HostPort))
	}
	for name := range d.NetworkSettings.Networks {
		out, err := c.docker(ctx, "network", "inspect", "-f", "{{.Internal}}", name)
		p.Networks[name] = err == nil && strings.TrimSpace(string(out)) == "true"
	}
	if first != nil {
		host := first.HostIP
		switch host {
		case "", "0.0.0.0":
			host = "127.0.0.1"
		case "::":
			host = "::1"
		}
		p.PageURL = "http://" + net.JoinHostPort(host, first.HostPort) + "/phone/"
		p.PageErr = phonePage(ctx, p.PageURL)
	}
	if p.URL != "" && p.URL != "auto" {
		p.URLLoopback = phone.LoopbackOnly(p.URL)
		p.URLErr = phonePage(ctx, strings.TrimSuffix(p.URL, "/")+"/phone/")
	}
	return p
}

func orAll(ip string) string {
	if ip == "" {
		return "0.0.0.0"
	}
	return ip
}

// phonePage GETs the phone page at u, never through a proxy; "" when it answers 200 with HTML.
func phonePage(ctx context.Context, u string) string {
	cl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil}}
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		return err.Error()
	}
	resp, err := cl.Do(req)
	if err != nil {
		return unwrapURL(err).Error()
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		return fmt.Sprintf("answered %d (%s), not the phone page", resp.StatusCode, orNone(resp.Header.Get("Content-Type")))
	}
	return ""
}

// maxPolicyFile bounds the policy file the doctor reads.
const maxPolicyFile = 4 << 20

// policyFileFacts finds the console's policy file on this machine (the bind mount it is in) and
// hashes it as the console does.
func policyFileFacts(d *dockerContainer) *PolicyFileFacts {
	pf := &PolicyFileFacts{Path: flagValue(d.Config.Cmd, "-policy")}
	if pf.Path == "" {
		return nil
	}
	for _, m := range d.Mounts {
		if m.Type != "bind" {
			continue
		}
		switch {
		case m.Destination == pf.Path:
			pf.Host, pf.Single = m.Source, true
		case strings.HasPrefix(pf.Path, strings.TrimSuffix(m.Destination, "/")+"/"):
			pf.Host = path.Join(m.Source, strings.TrimPrefix(pf.Path, strings.TrimSuffix(m.Destination, "/")+"/"))
		}
	}
	if pf.Host == "" {
		pf.Err = "it is not mounted from this machine"
		return pf
	}
	fh, err := os.Open(pf.Host)
	if err != nil {
		pf.Err = err.Error()
		return pf
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, maxPolicyFile+1))
	switch {
	case err != nil:
		pf.Err = err.Error()
	case len(data) > maxPolicyFile:
		pf.Err = fmt.Sprintf("larger than %d bytes", maxPolicyFile)
	default:
		pf.Version = policy.Hash(data)
	}
	return pf
}
