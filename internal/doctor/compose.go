package doctor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/lockhttp/lockhttp/internal/display"
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
	State struct {
		Status string `json:"Status"`
	} `json:"State"`
	HostConfig struct {
		ReadonlyRootfs bool `json:"ReadonlyRootfs"`
	} `json:"HostConfig"`
	NetworkSettings struct {
		Networks map[string]struct {
			IPAddress string `json:"IPAddress"`
		} `json:"Networks"`
	} `json:"NetworkSettings"`
	Mounts []struct {
		Type        string `json:"Type"`
		Name        string `json:"Name"`
		Destination string `json:"Destination"`
	} `json:"Mounts"`
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
	for _, role := range []string{"signer", "console", "gate"} {
		if d := byService[role]; d != nil {
			f.Containers = append(f.Containers, containerFacts(d, role))
		}
	}
	gate := byService["gate"]
	for i := range agents {
		if gate != nil && agents[i].ID == gate.ID {
			continue
		}
		f.Containers = append(f.Containers, containerFacts(&agents[i], "agent"))
	}
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
	if v := byService["signer"].mount("/vol/ca-public"); v != "" {
		probe = append(probe, "-v", v+":/ca:ro")
	}
	probe = append(probe, tools, "doctor", "probe-agent", "--proxy", "http://gate:"+port, "--ca", "/ca/ca.pem", "--dns", c.DNSName)
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
	for _, ipam := range netInfo.IPAM.Config {
		if gw := gateway(ipam.Subnet, ipam.Gateway); gw != "" {
			probe = append(probe, "--host", net.JoinHostPort(gw, "9")+"=this machine, the agent network's gateway")
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
	inside = append(inside, tools, "doctor", "inside-compose")
	if f.Self != nil && f.Self.Plain != nil {
		inside = append(inside, "--audit-id", f.Self.Plain.Request)
	}
	var in Facts
	if out, err := c.docker(ctx, inside...); err != nil {
		f.Stack = "the doctor could not look inside the project: " + err.Error()
	} else if err := json.Unmarshal(out, &in); err != nil {
		f.Stack = fmt.Sprintf("the doctor inside the project answered: %v: %s", err, display.Line(string(out), 300))
	} else {
		f.CA, f.Signer, f.Console, f.Hub, f.Gate, f.Audit = in.CA, in.Signer, in.Console, in.Hub, in.Gate, in.Audit
		if in.Stack != "" {
			f.Stack = in.Stack
		}
	}
	return f
}

// probeResult is what doctor probe-agent prints.
type probeResult struct {
	Agent *AgentFacts `json:"agent"`
	Self  *SelfFacts  `json:"self"`
}

func containerFacts(d *dockerContainer, role string) ContainerFacts {
	cf := ContainerFacts{Name: strings.TrimPrefix(d.Name, "/"), Service: d.Config.Labels["com.docker.compose.service"], Role: role,
		State: d.State.Status, User: d.Config.User, ReadOnly: d.HostConfig.ReadonlyRootfs}
	if cf.Service == "" {
		cf.Service = cf.Name
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

// gateway is a docker network's gateway: the one configured, else the subnet's first address
// (docker's choice when a subnet is given without one).
func gateway(subnet, gw string) string {
	if gw != "" {
		return gw
	}
	p, err := netip.ParsePrefix(subnet)
	if err != nil {
		return ""
	}
	return p.Masked().Addr().Next().String()
}
