package doctor

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/console"
)

func linesOf(r *Report, check string) []Line {
	var out []Line
	for _, l := range r.Lines {
		if l.Check == check {
			out = append(out, l)
		}
	}
	return out
}

func TestGateAddrs(t *testing.T) {
	for _, c := range []struct {
		listen, encl string
		want         []string
	}{
		{"127.0.0.1:3130", "", []string{"127.0.0.1:3130", "localhost:3130", "127.0.0.1:3130", "[::1]:3130"}},
		{"0.0.0.0:3130", "198.18.0.1", []string{"0.0.0.0:3130", "localhost:3130", "127.0.0.1:3130", "[::1]:3130", "198.18.0.1:3130"}},
		{"192.0.2.7:3130", "", []string{"192.0.2.7:3130"}},
		{"", "", nil},
	} {
		if got := gateAddrs(c.listen, c.encl); !slices.Equal(got, c.want) {
			t.Errorf("gateAddrs(%q, %q) = %q, want %q", c.listen, c.encl, got, c.want)
		}
	}
}

func TestNamesGate(t *testing.T) {
	gates := gateAddrs("127.0.0.1:3130", "198.18.0.1")
	for env, want := range map[string]string{
		"HTTPS_PROXY=http://claude:@127.0.0.1:3130":                 "HTTPS_PROXY",
		"PATH=/bin\x00https_proxy=http://localhost:3130/\x00TERM=x": "https_proxy",
		"ALL_PROXY=127.0.0.1:3130":                                  "ALL_PROXY",
		"http_proxy=http://u:p@[::1]:3130":                          "http_proxy",
		"HTTP_PROXY=http://LOCALHOST:3130":                          "HTTP_PROXY",
		"HTTPS_PROXY=http://198.18.0.1:3130":                        "HTTPS_PROXY",
		"HTTPS_PROXY=http://127.0.0.1:3128":                         "",
		"HTTPS_PROXY=http://proxy.corp:3130":                        "",
		"NO_PROXY=127.0.0.1:3130":                                   "",
		"MY_HTTPS_PROXY=http://127.0.0.1:3130":                      "",
		"HTTPS_PROXY=%%%":                                           "",
		"":                                                          "",
	} {
		if got := namesGate([]byte(env), gates); got != want {
			t.Errorf("%q: %q, want %q", env, got, want)
		}
	}
}

// fakeProc writes a /proc of processes: pid → uid, environment (NUL-separated) and comm.
func fakeProc(t *testing.T, procs map[int][3]string) string {
	t.Helper()
	root := t.TempDir()
	for pid, p := range procs {
		d := filepath.Join(root, fmt.Sprint(pid))
		os.Mkdir(d, 0o755)
		os.WriteFile(filepath.Join(d, "status"), []byte(fmt.Sprintf("Name:\t%s\nPPid:\t1\nUid:\t%s\t%s\t%s\t%s\n", p[2], p[0], p[0], p[0], p[0])), 0o644)
		os.WriteFile(filepath.Join(d, "environ"), []byte(p[1]), 0o644)
		os.WriteFile(filepath.Join(d, "comm"), []byte(p[2]+"\n"), 0o644)
	}
	os.Mkdir(filepath.Join(root, "self"), 0o755)
	return root
}

// TestGatherRootAgents: root's processes whose proxy names the gate are found, whatever else
// runs; the stack's own pids are left out; the agent's uid is read.
func TestGatherRootAgents(t *testing.T) {
	gate := "HTTPS_PROXY=http://agent:@127.0.0.1:3130\x00"
	proc := fakeProc(t, map[int][3]string{
		100: {"0", "PATH=/bin\x00" + gate, "claude"},
		101: {"0", "HTTPS_PROXY=http://127.0.0.1:3128\x00", "curl"},
		102: {"1000", gate, "npm"},
		103: {"0", gate, "gate"},
		104: {"10099", gate, "sh"},
		105: {"0", "https_proxy=http://localhost:3130\x00", "\x1b[31mevil"},
	})
	f := GatherRootAgents(proc, gateAddrs("127.0.0.1:3130", ""), []int{103}, 104)
	if f.AgentPID != 104 || f.AgentUID != 10099 {
		t.Errorf("the agent: pid %d uid %d", f.AgentPID, f.AgentUID)
	}
	if os.Geteuid() != 0 {
		if f.Scanned || len(f.Root) > 0 {
			t.Errorf("not root, yet scanned: %+v", f)
		}
		return
	}
	want := []ProxyProcess{{100, "claude", "HTTPS_PROXY"}, {105, "\x1b[31mevil", "https_proxy"}}
	if !f.Scanned || f.Looked != 3 || !slices.Equal(f.Root, want) {
		t.Errorf("%+v, want %+v after looking at 3", f, want)
	}
}

func localAgentFacts(ra *RootAgentFacts) *Facts {
	return &Facts{Mode: "local", Now: now, RootAgents: ra}
}

func TestAssessRootAgents(t *testing.T) {
	for _, c := range []struct {
		name  string
		facts *RootAgentFacts
		want  []string // "LEVEL text part"
	}{
		{"none as root, an enclosed agent", &RootAgentFacts{Scanned: true, Looked: 40, AgentPID: 77, AgentUID: 10099},
			[]string{"OK no process running as root has the gate's proxy in its environment (40 of root's processes looked at); the agent lox run -- started (pid 77) runs as uid 10099"}},
		{"not root: the agent's uid alone", &RootAgentFacts{AgentPID: 77, AgentUID: 10099},
			[]string{"OK the agent lox run -- started (pid 77) runs as uid 10099"}},
		{"not root, no agent", &RootAgentFacts{AgentUID: -1}, nil},
		{"the agent as root", &RootAgentFacts{Scanned: true, AgentPID: 77, AgentUID: 0},
			[]string{"WARN the agent lox run -- started (pid 77) runs as root: as root it can read the state directory (the hub's token: it could approve its own tickets; the CA key); fix: stop it and start it again with sudo lox run --agent-uid N -- COMMAND"}},
		{"an agent started by hand as root", &RootAgentFacts{Scanned: true, Looked: 3, AgentUID: -1, Root: []ProxyProcess{{100, "claude", "HTTPS_PROXY"}, {105, "\x1b[31mevil", "https_proxy"}}},
			[]string{"WARN process 100 (claude) runs as root with HTTPS_PROXY naming the gate's proxy, as an agent started by hand does: as root it can read the state directory",
				"WARN process 105 (\\x1b[31mevil) runs as root with https_proxy"}},
		{"many", &RootAgentFacts{Scanned: true, AgentUID: -1, Root: []ProxyProcess{{1, "a", "HTTPS_PROXY"}, {2, "a", "HTTPS_PROXY"}, {3, "a", "HTTPS_PROXY"}, {4, "a", "HTTPS_PROXY"}, {5, "a", "HTTPS_PROXY"}, {6, "a", "HTTPS_PROXY"}, {7, "a", "HTTPS_PROXY"}}},
			[]string{"WARN process 1 ", "WARN process 2 ", "WARN process 3 ", "WARN process 4 ", "WARN process 5 ", "WARN 2 more processes run as root"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			lines := linesOf(Assess(localAgentFacts(c.facts)), "agent-uid")
			if len(lines) != len(c.want) {
				t.Fatalf("%d lines, want %d: %+v", len(lines), len(c.want), lines)
			}
			for i, l := range lines {
				if got := l.Level.String() + " " + l.Text; !strings.HasPrefix(got, c.want[i]) {
					t.Errorf("line %d: %q, want %q…", i, got, c.want[i])
				}
				if strings.ContainsRune(l.Text, 0x1b) {
					t.Errorf("line %d carries an escape: %q", i, l.Text)
				}
			}
		})
	}
	// Compose has no such facts; a compose report says nothing of them.
	f := healthy()
	f.RootAgents = &RootAgentFacts{Scanned: true, Root: []ProxyProcess{{1, "a", "HTTPS_PROXY"}}}
	if lines := linesOf(Assess(f), "agent-uid"); len(lines) != 0 {
		t.Errorf("compose: %+v", lines)
	}
}

func TestAssessUnusedSecrets(t *testing.T) {
	served := &ConsoleFacts{Status: &console.Status{Version: "sha256:v1"}, Injects: []InjectRule{{Name: "claude", Secret: "anthropic"}}}
	for _, c := range []struct {
		name    string
		secrets *SecretsFacts
		console *ConsoleFacts
		want    []string
	}{
		{"every secret used", &SecretsFacts{Path: "/s/secrets.toml", Names: []string{"anthropic"}}, served, nil},
		{"a misspelt rule's secret", &SecretsFacts{Path: "/s/secrets.toml", Names: []string{"anthropic", "githbu"}}, served,
			[]string{`the secret "githbu" in /s/secrets.toml is named by no [[inject]] rule of the served policy (its [[inject]] rules name "anthropic"): the gate holds a credential it never adds; fix: name it in the rule meant to add it (secret = "githbu"; a misspelt name leaves that rule without one), or remove it from the file`}},
		{"no inject rule at all", &SecretsFacts{Path: "/s/secrets.toml", Names: []string{"anthropic"}}, &ConsoleFacts{Status: &console.Status{}},
			[]string{`the secret "anthropic" in /s/secrets.toml is named by no [[inject]] rule of the served policy (the served policy has no [[inject]] rule)`}},
		{"a name that is not text", &SecretsFacts{Path: "/s/secrets.toml", Names: []string{"a\x1b]0;x\x07"}}, served,
			[]string{`the secret "a\\x1b]0;x\\x07" in`}},
		{"the served policy unknown", &SecretsFacts{Path: "/s/secrets.toml", Names: []string{"x"}}, &ConsoleFacts{Err: "connection refused"}, nil},
		{"the file does not load", &SecretsFacts{Path: "/s/secrets.toml", Err: "mode 0644"}, served, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &Facts{Mode: "local", Now: now, Secrets: c.secrets, Console: c.console}
			var got []Line
			for _, l := range linesOf(Assess(f), "secrets") {
				if strings.Contains(l.Text, "named by no [[inject]] rule") {
					got = append(got, l)
				}
			}
			if len(got) != len(c.want) {
				t.Fatalf("%d lines, want %d: %+v", len(got), len(c.want), got)
			}
			for i, l := range got {
				if l.Level != Warn || !strings.HasPrefix(l.Text, c.want[i]) {
					t.Errorf("%s %q, want WARN %q…", l.Level, l.Text, c.want[i])
				}
			}
		})
	}
}

// TestLineage: the doctor's own process and those that started it, up to init, are left out of
// the scan (a sudo or shell it runs from has its caller's environment).
func TestLineage(t *testing.T) {
	root := t.TempDir()
	for pid, ppid := range map[int]int{40: 30, 30: 20, 20: 1, 50: 1} {
		d := filepath.Join(root, fmt.Sprint(pid))
		os.Mkdir(d, 0o755)
		os.WriteFile(filepath.Join(d, "status"), []byte(fmt.Sprintf("Name:\tx\nPPid:\t%d\nUid:\t0\t0\t0\t0\n", ppid)), 0o644)
	}
	if got := lineage(root, 40); !slices.Equal(got, []int{40, 30, 20}) {
		t.Errorf("lineage(40) = %v, want [40 30 20]", got)
	}
	if got := lineage(root, 99); !slices.Equal(got, []int{99}) {
		t.Errorf("lineage of a gone process = %v", got)
	}
}
