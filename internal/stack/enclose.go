package stack

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/lockhttp/lockhttp/internal/consoleclient"
	"github.com/lockhttp/lockhttp/internal/enclosure"
	"github.com/lockhttp/lockhttp/internal/policy"
)

// UpEnclosure is up.json's "enclosure": the agent's network enclosure under lox run --
// (enclosure.Enclosure).
type UpEnclosure struct {
	// Link is the host's side of the veth pair; Table the host's nftables table for it.
	Link  string `json:"link"`
	Table string `json:"table"`
	// Gate is the gate's address on the link, where the agent reaches it (-transparent); Agent
	// the agent's address, which [sources] maps to Container.
	Gate      string `json:"gate"`
	Agent     string `json:"agent"`
	Container string `json:"container"`
	// Proxy is the agent's proxy URL (its name, an empty password, the gate's address and
	// port); Ports the TCP ports a connection to any address goes to the gate on (DNS aside).
	Proxy string   `json:"proxy,omitempty"`
	Ports []uint16 `json:"ports,omitempty"`
}

// enclose makes the agent's network enclosure once the console serves the approved policy and
// before the gate starts (the gate listens on the enclosure's address): it takes the policy's
// ports, and refuses when the policy maps no container to the agent's address, since the gate
// would then refuse every request of the agent.
func (r *agentRun) enclose(ctx context.Context, cfg enclosure.Config, consoleSocket string, up *Up) error {
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	served, err := consoleclient.New(consoleSocket).Fetch(fctx, "")
	if err != nil {
		return fmt.Errorf("the approved policy, for the agent's enclosure: %w", err)
	}
	p, err := policy.Load("the approved policy", []byte(served.TOML))
	if err != nil {
		return fmt.Errorf("the approved policy, for the agent's enclosure: %w", err)
	}
	e, err := enclosure.Create(cfg)
	if err != nil {
		return err
	}
	r.enc = e
	container := p.Container(e.Agent)
	if container == "" {
		subnet := cfg.Subnet
		if !subnet.IsValid() {
			subnet = enclosure.DefaultSubnet
		}
		return fmt.Errorf("the approved policy maps no container to the agent's address %s (its [sources]): the gate would refuse every request of the agent (E_SOURCE_UNKNOWN); fix: add the enclosure subnet to a container in the policy file, local = [\"127.0.0.0/8\", \"::1/128\", \"%s\"] as the shipped policy has it, and approve the change at the console's terminal (lox run without --headless; docs/policy.md, \"Changing the policy\")",
			e.Agent, subnet)
	}
	r.ports = redirectedPorts(p.Floor.AllowPorts)
	up.Enclosure = &UpEnclosure{Link: e.Link, Table: e.Table(), Gate: e.Gate.String(), Agent: e.Agent.String(), Container: container, Ports: r.ports}
	return nil
}

// redirectedPorts are 80, 443 and the policy's other allow_ports, sorted, without DNS's 53
// (redirected on its own).
func redirectedPorts(allow []int) []uint16 {
	out := []uint16{80, 443}
	for _, p := range allow {
		if p > 0 && p < 1<<16 && p != 53 {
			out = append(out, uint16(p))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// seal sets the enclosure's rules once the gate's proxy listens (listen is its address: the
// agent reaches the proxy on the gate's address at the same port), and returns the agent's
// proxy URL.
func (r *agentRun) seal(listen string, up *Up) (string, error) {
	_, portText, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("the gate's listen address %q: %w", listen, err)
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil || port == 0 {
		return "", fmt.Errorf("the gate's listen address %q has no port", listen)
	}
	// A redirected port that is the proxy's would send a connection to any address on it to
	// the proxy: it is left out.
	redirected := slices.DeleteFunc(slices.Clone(r.ports), func(p uint16) bool { return p == uint16(port) })
	if err := r.enc.SetRules(enclosure.Ports{Proxy: uint16(port), Redirected: redirected}); err != nil {
		return "", err
	}
	proxy := ProxyURL(r.a.Name, netip.AddrPortFrom(r.enc.Gate, uint16(port)))
	up.Enclosure.Proxy, up.Enclosure.Ports = proxy, redirected
	return proxy, nil
}
