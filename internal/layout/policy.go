package layout

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/lockhttp/lockhttp/internal/atomicfile"
)

// PolicyFile is the policy's name in the operator's policy directory.
const PolicyFile = "policy.toml"

// maxPolicy bounds the shipped policy SeedPolicy copies.
const maxPolicy = 1 << 20

// ShippedSubnet is the agent network's subnet the shipped policy's [sources] names
// (compose/policy.toml), LOCKHTTP_AGENT_SUBNET's default.
const ShippedSubnet = "10.213.10.0/24"

// AgentNetwork checks the agent network's settings, LOCKHTTP_AGENT_SUBNET and LOCKHTTP_GATE_IP:
// an IPv4 subnet, and an address in it for the gate that docker can give (not the subnet's first
// address, its gateway's, nor its own or its broadcast address).
func AgentNetwork(subnet, gateIP string) (netip.Prefix, error) {
	pfx, err := netip.ParsePrefix(subnet)
	if err != nil || !pfx.Addr().Is4() || pfx.Bits() > 29 {
		return netip.Prefix{}, fmt.Errorf("LOCKHTTP_AGENT_SUBNET %q: give an IPv4 subnet of at least 8 addresses, such as %s; fix: that line of .env in the deployment directory", subnet, ShippedSubnet)
	}
	pfx = pfx.Masked()
	gate, err := netip.ParseAddr(gateIP)
	if err != nil || !pfx.Contains(gate) {
		return netip.Prefix{}, fmt.Errorf("LOCKHTTP_GATE_IP %q is not an address of LOCKHTTP_AGENT_SUBNET %s: the gate takes it on the agent network; fix: set it with the subnet in .env, at its top (docker gives containers addresses from the bottom): %s", gateIP, pfx, topAddr(pfx))
	}
	last := topAddr(pfx).Next()
	if gate == pfx.Addr() || gate == pfx.Addr().Next() || gate == last {
		return netip.Prefix{}, fmt.Errorf("LOCKHTTP_GATE_IP %s is the subnet's own, its gateway's or its broadcast address; fix: in .env, %s", gate, topAddr(pfx))
	}
	return pfx, nil
}

// topAddr is the last address of pfx a container can have (the one below the broadcast).
func topAddr(pfx netip.Prefix) netip.Addr {
	a := pfx.Addr().As4()
	host := uint32(1)<<(32-pfx.Bits()) - 1
	v := (uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])) | host
	v--
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// withSubnet is the shipped policy with its [sources] naming subnet instead of ShippedSubnet.
func withSubnet(data []byte, subnet netip.Prefix) ([]byte, error) {
	if !subnet.IsValid() || subnet.String() == ShippedSubnet {
		return data, nil
	}
	lines := strings.SplitAfter(string(data), "\n")
	in, found := false, false
	for i, l := range lines {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "[") {
			in = t == "[sources]"
			continue
		}
		if in && strings.Contains(l, `"`+ShippedSubnet+`"`) {
			lines[i], found = strings.ReplaceAll(l, `"`+ShippedSubnet+`"`, `"`+subnet.String()+`"`), true
		}
	}
	if !found {
		return nil, fmt.Errorf("the shipped policy's [sources] does not name %s, so it cannot be given the agent network's subnet %s; fix: put a policy of yours in the policy directory (policy.toml) before the first start", ShippedSubnet, subnet)
	}
	return []byte(strings.Join(lines, "")), nil
}

// SeedPolicy checks the operator's policy directory (a host directory the console mounts
// read-only, so that an editor's write-and-rename is seen) and, on the first start, when it holds
// no policy.toml, copies the shipped policy into it, owned like the directory so that its owner
// edits it, its [sources] naming the agent network's subnet (when valid; the shipped policy names
// ShippedSubnet). It never changes a policy that is there: the console judges every edit; when
// that policy does not name subnet, a line says so. A directory or file the console (uid
// ConsoleUID, group Group) cannot read is an error naming the fix.
func SeedPolicy(dir, shipped string, subnet netip.Prefix) ([]string, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("the policy directory %s: %w; fix: mount the operator's policy directory there (LOCKHTTP_SITE/policy, docs/deploy.md)", dir, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("the policy directory %s is not a directory: a single policy file mounted there keeps its old inode when an editor replaces it; fix: mount the directory that holds policy.toml (LOCKHTTP_SITE/policy, docs/deploy.md)", dir)
	}
	if !consoleCan(fi, 0o5) {
		return nil, fmt.Errorf("the policy directory %s has mode %04o and owner %s: the console (uid %d) cannot read it; fix: chmod 755 on that directory on the host", dir, fi.Mode().Perm(), owner(fi), ConsoleUID)
	}
	p := filepath.Join(dir, PolicyFile)
	pf, err := os.Lstat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		data, err := atomicfile.ReadFile(shipped, maxPolicy)
		if err != nil {
			return nil, fmt.Errorf("the shipped policy: %w", err)
		}
		if data, err = withSubnet(data, subnet); err != nil {
			return nil, err
		}
		if err := atomicfile.WriteFile(p, data, 0o644); err != nil {
			return nil, fmt.Errorf("copying the shipped policy to %s: %w", p, err)
		}
		st, _ := fi.Sys().(*syscall.Stat_t)
		if st != nil {
			if err := os.Chown(p, int(st.Uid), int(st.Gid)); err != nil {
				return nil, fmt.Errorf("%s: chown %d:%d: %w (run this as root)", p, st.Uid, st.Gid, err)
			}
		}
		what := "the shipped policy"
		if subnet.IsValid() {
			what += ", its [sources] naming the agent network " + subnet.String()
		}
		return []string{fmt.Sprintf("%s: %s, copied on the first start (owned like %s: edit it there)", p, what, dir)}, nil
	case err != nil:
		return nil, err
	case !pf.Mode().IsRegular():
		return nil, fmt.Errorf("%s is not a regular file (%s); fix: make it the policy file itself, not a link or a directory", p, pf.Mode().Type())
	case !consoleCan(pf, 0o4):
		return nil, fmt.Errorf("%s has mode %04o and owner %s: the console (uid %d) cannot read it; fix: chmod 644 %s on the host", p, pf.Mode().Perm(), owner(pf), ConsoleUID, PolicyFile)
	}
	out := []string{fmt.Sprintf("%s: the operator's policy, left as it is", p)}
	if subnet.IsValid() {
		if data, err := atomicfile.ReadFile(p, maxPolicy); err == nil && !strings.Contains(string(data), `"`+subnet.String()+`"`) {
			out = append(out, fmt.Sprintf("%s does not name the agent network %s (LOCKHTTP_AGENT_SUBNET): unless [sources] names its addresses otherwise, the gate refuses the agents with E_SOURCE_UNKNOWN; fix: name it in [sources] (lockhttp doctor --compose . checks it)", p, subnet))
		}
	}
	return out, nil
}

// consoleCan reports whether the console's uid and group have the permission bits want (read 4,
// execute 1) on fi.
func consoleCan(fi fs.FileInfo, want fs.FileMode) bool {
	m := fi.Mode().Perm()
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case ok && st.Uid == ConsoleUID:
		return (m>>6)&want == want
	case ok && st.Gid == Group:
		return (m>>3)&want == want
	}
	return m&want == want
}

func owner(fi fs.FileInfo) string {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fmt.Sprintf("%d:%d", st.Uid, st.Gid)
	}
	return "unknown"
}
