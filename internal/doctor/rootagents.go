package doctor

import (
	"bytes"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// RootAgentFacts: whether an agent of the local stack runs as root. What the doctor can observe:
// the uid of the agent lox run -- started (up.json's pid; lox refuses uid 0, so this is a check
// that it held), and the processes running as root whose environment names the gate's proxy,
// which is what an agent started by hand (lox env, HTTPS_PROXY=...) carries. An agent that
// names no proxy is not seen; it is not decided by the gate either, unless enclosed.
type RootAgentFacts struct {
	// Scanned: the doctor could read root's processes' environments (it runs as root). Looked is
	// how many it read.
	Scanned bool `json:"scanned"`
	Looked  int  `json:"looked"`
	// AgentPID is the agent lox run -- started (0: none); AgentUID its real uid (-1: not read).
	AgentPID int `json:"agent_pid,omitempty"`
	AgentUID int `json:"agent_uid"`
	// Root are the processes running as root with a proxy variable that names the gate.
	Root []ProxyProcess `json:"root,omitempty"`
}

// ProxyProcess is a process whose environment names the gate's proxy.
type ProxyProcess struct {
	PID  int    `json:"pid"`
	Name string `json:"name"` // /proc/PID/comm, as the process set it
	Var  string `json:"var"`  // the variable that names the gate; never its value
}

// proxyEnvVars are the variables a client takes its proxy from.
var proxyEnvVars = []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"}

// GatherRootAgents looks through procRoot (/proc) for processes running as root whose
// environment's proxy variables name one of gates (host:port), leaving out the pids in skip
// (the stack's own and the doctor's), and reads the uid of agentPID (0: no agent). Reading
// root's environments needs root: without it Scanned is false.
func GatherRootAgents(procRoot string, gates []string, skip []int, agentPID int) *RootAgentFacts {
	f := &RootAgentFacts{AgentPID: agentPID, AgentUID: -1, Scanned: os.Geteuid() == 0}
	if agentPID > 0 {
		if uid, err := procUIDAt(procRoot, agentPID); err == nil {
			f.AgentUID = uid
		}
	}
	if !f.Scanned {
		return f
	}
	entries, _ := os.ReadDir(procRoot)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || slices.Contains(skip, pid) {
			continue
		}
		if uid, err := procUIDAt(procRoot, pid); err != nil || uid != 0 {
			continue
		}
		env, err := readLimited(filepath.Join(procRoot, e.Name(), "environ"), 1<<20)
		if err != nil {
			continue
		}
		f.Looked++
		if v := namesGate(env, gates); v != "" {
			comm, _ := readLimited(filepath.Join(procRoot, e.Name(), "comm"), 64)
			f.Root = append(f.Root, ProxyProcess{PID: pid, Name: strings.TrimSpace(string(comm)), Var: v})
		}
	}
	slices.SortFunc(f.Root, func(a, b ProxyProcess) int { return a.PID - b.PID })
	return f
}

// namesGate returns the first proxy variable of environ (NUL-separated NAME=VALUE) whose URL's
// host and port are one of gates, "" when none is.
func namesGate(environ []byte, gates []string) string {
	for _, kv := range bytes.Split(environ, []byte{0}) {
		name, value, ok := strings.Cut(string(kv), "=")
		if !ok || !slices.Contains(proxyEnvVars, name) {
			continue
		}
		if !strings.Contains(value, "://") {
			value = "http://" + value
		}
		u, err := url.Parse(value)
		if err != nil || u.Port() == "" {
			continue
		}
		if slices.Contains(gates, net.JoinHostPort(strings.ToLower(u.Hostname()), u.Port())) {
			return name
		}
	}
	return ""
}

// gateAddrs are the host:port forms a client may name the gate's proxy by: its listen address,
// with localhost and both loopbacks for a gate on the loopback or on every address, and the
// agent's enclosure's proxy address.
func gateAddrs(listen, enclosureGate string) []string {
	var out []string
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return nil
	}
	out = append(out, net.JoinHostPort(host, port))
	if ip := net.ParseIP(host); ip != nil && (ip.IsLoopback() || ip.IsUnspecified()) {
		for _, h := range []string{"localhost", "127.0.0.1", "::1"} {
			out = append(out, net.JoinHostPort(h, port))
		}
	}
	if enclosureGate != "" {
		out = append(out, net.JoinHostPort(enclosureGate, port))
	}
	return out
}

// lineage is pid and the processes that started it, up to init: the doctor's own, and the sudo
// and shell it was run from, whose environments are its caller's.
func lineage(procRoot string, pid int) []int {
	var out []int
	for pid > 1 && len(out) < 64 {
		out = append(out, pid)
		data, err := readLimited(filepath.Join(procRoot, strconv.Itoa(pid), "status"), 64<<10)
		if err != nil {
			break
		}
		pid = 0
		for _, line := range strings.Split(string(data), "\n") {
			if rest, ok := strings.CutPrefix(line, "PPid:"); ok {
				pid, _ = strconv.Atoi(strings.TrimSpace(rest))
			}
		}
	}
	return out
}

// procUIDAt is the real uid of pid under procRoot.
func procUIDAt(procRoot string, pid int) (int, error) {
	data, err := readLimited(filepath.Join(procRoot, strconv.Itoa(pid), "status"), 64<<10)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			if fs := strings.Fields(rest); len(fs) > 0 {
				return strconv.Atoi(fs[0])
			}
		}
	}
	return 0, os.ErrNotExist
}

// readLimited reads at most limit bytes of path.
func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit))
}
