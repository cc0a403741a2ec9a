package layout

import (
	"crypto/rand"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/gatefiles"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/signer"
)

// The secrets file Prepare creates loads, with nothing in it: the gate starts with injection
// available and refuses only the hosts an [[inject]] names (E_INJECT), not every request.
func TestEmptySecretsLoads(t *testing.T) {
	p := filepath.Join(t.TempDir(), "secrets.toml")
	if err := os.WriteFile(p, []byte(EmptySecrets), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := gatefiles.Secrets(p)
	if err != nil || len(got) != 0 {
		t.Fatalf("Secrets(%q) = %v, %v; want no secret and no error", EmptySecrets, got, err)
	}
}

// Prepare gives a restored CA's files to the signer, and refuses half a CA before it changes
// anything.
func TestPrepareCA(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("Prepare chowns: it runs as root")
	}
	t.Run("a restored CA", func(t *testing.T) {
		root := t.TempDir()
		if _, err := signer.InitCA(filepath.Join(root, "ca"), time.Now(), rand.Reader); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Join(root, "ca", signer.CertFile), 0o600) // as a careless copy leaves it
		if _, err := Prepare(root); err != nil {
			t.Fatal(err)
		}
		for name, mode := range map[string]os.FileMode{signer.KeyFile: 0o600, signer.CertFile: 0o644} {
			fi, err := os.Stat(filepath.Join(root, "ca", name))
			if err != nil {
				t.Fatal(err)
			}
			st := fi.Sys().(*syscall.Stat_t)
			if st.Uid != SignerUID || st.Gid != Group || fi.Mode().Perm() != mode {
				t.Errorf("%s: %d:%d %04o, want %d:%d %04o", name, st.Uid, st.Gid, fi.Mode().Perm(), SignerUID, Group, mode)
			}
		}
	})
	for _, missing := range []string{signer.KeyFile, signer.CertFile} {
		t.Run("without "+missing, func(t *testing.T) {
			root := t.TempDir()
			ca := filepath.Join(root, "ca")
			if _, err := signer.InitCA(ca, time.Now(), rand.Reader); err != nil {
				t.Fatal(err)
			}
			os.Remove(filepath.Join(ca, missing))
			_, err := Prepare(root)
			if err == nil {
				t.Fatal("Prepare accepted half a CA")
			}
			for _, want := range []string{filepath.Join(ca, missing), "is not", "docker-compose run --rm --user 10004:10000 volumes ca init --replace --dir " + ca, "nothing was changed"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
			if entries, _ := os.ReadDir(root); len(entries) != 1 {
				t.Errorf("Prepare made %d entries in the root, want only ca", len(entries))
			}
			if fi, _ := os.Stat(ca); fi.Mode().Perm() != 0o700 || fi.Sys().(*syscall.Stat_t).Uid != 0 {
				t.Errorf("the ca directory was changed: %v", fi.Mode())
			}
		})
	}
}

func TestSeedPolicy(t *testing.T) {
	shipped := filepath.Join(t.TempDir(), "shipped.toml")
	os.WriteFile(shipped, []byte("version = 1\n"), 0o644)
	mk := func(t *testing.T, mode os.FileMode) string {
		d := filepath.Join(t.TempDir(), "policy")
		os.Mkdir(d, 0o755)
		os.Chmod(d, mode)
		return d
	}
	t.Run("the first start copies the shipped policy", func(t *testing.T) {
		d := mk(t, 0o755)
		done, err := SeedPolicy(d, shipped, netip.Prefix{})
		if err != nil || len(done) != 1 || !strings.Contains(done[0], "copied on the first start") {
			t.Fatalf("%v %v", done, err)
		}
		fi, _ := os.Stat(filepath.Join(d, PolicyFile))
		if data, _ := os.ReadFile(filepath.Join(d, PolicyFile)); string(data) != "version = 1\n" || fi.Mode().Perm() != 0o644 {
			t.Errorf("copied %q mode %04o", data, fi.Mode().Perm())
		}
	})
	t.Run("an existing policy is left as it is", func(t *testing.T) {
		d := mk(t, 0o755)
		os.WriteFile(filepath.Join(d, PolicyFile), []byte("# mine\nversion = 1\n"), 0o644)
		done, err := SeedPolicy(d, shipped, netip.Prefix{})
		data, _ := os.ReadFile(filepath.Join(d, PolicyFile))
		if err != nil || string(data) != "# mine\nversion = 1\n" || !strings.Contains(done[0], "left as it is") {
			t.Fatalf("%v %v %q", done, err, data)
		}
	})
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T) string
		want  string
	}{
		{"no directory", func(t *testing.T) string { return filepath.Join(t.TempDir(), "none") }, "mount the operator's policy directory there"},
		{"a single file mounted", func(t *testing.T) string { return shipped }, "keeps its old inode"},
		{"a directory the console cannot read", func(t *testing.T) string { return mk(t, 0o700) }, "the console (uid 10021) cannot read it; fix: chmod 755"},
		{"a policy the console cannot read", func(t *testing.T) string {
			d := mk(t, 0o755)
			os.WriteFile(filepath.Join(d, PolicyFile), []byte("version = 1\n"), 0o600)
			return d
		}, "fix: chmod 644 policy.toml"},
		{"a link", func(t *testing.T) string {
			d := mk(t, 0o755)
			os.Symlink(shipped, filepath.Join(d, PolicyFile))
			return d
		}, "is not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.setup(t)
			if _, err := SeedPolicy(d, shipped, netip.Prefix{}); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want %q", err, tc.want)
			}
		})
	}
}

// The agent network's settings: a subnet and the gate's address in it, which docker can give.
func TestAgentNetwork(t *testing.T) {
	for _, tc := range []struct{ subnet, gate, want string }{
		{"10.213.10.0/24", "10.213.10.254", ""},
		{"10.9.0.0/16", "10.9.255.254", ""},
		{"10.9.0.5/24", "10.9.0.254", ""}, // not masked: docker masks it too
		{"10.9.0.0/24", "10.213.10.254", "is not an address of LOCKHTTP_AGENT_SUBNET 10.9.0.0/24: the gate takes it on the agent network; fix: set it with the subnet in .env, at its top (docker gives containers addresses from the bottom): 10.9.0.254"},
		{"10.9.0.0/24", "10.9.0.1", "its gateway's"},
		{"10.9.0.0/24", "10.9.0.255", "broadcast"},
		{"10.9.0.0/24", "10.9.0.0", "own"},
		{"fd00::/64", "fd00::fe", "give an IPv4 subnet"},
		{"10.9.0.0/30", "10.9.0.2", "give an IPv4 subnet of at least 8 addresses"},
		{"nonsense", "10.9.0.2", "LOCKHTTP_AGENT_SUBNET \"nonsense\""},
		{"10.9.0.0/24", "", "LOCKHTTP_GATE_IP \"\""},
	} {
		_, err := AgentNetwork(tc.subnet, tc.gate)
		if got := fmt.Sprint(err); tc.want == "" && err != nil || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("AgentNetwork(%q, %q) = %v, want %q", tc.subnet, tc.gate, err, tc.want)
		}
	}
}

// The first start copies the shipped compose policy with [sources] naming the subnet of the
// settings: the gate then knows the agents by it. A policy already there is left, with a line
// when it does not name the subnet.
func TestSeedPolicySubnet(t *testing.T) {
	shipped, _ := filepath.Abs("../../compose/policy.toml")
	subnet := netip.MustParsePrefix("10.9.0.0/24")
	d := filepath.Join(t.TempDir(), "policy")
	os.Mkdir(d, 0o755)
	done, err := SeedPolicy(d, shipped, subnet)
	if err != nil || !strings.Contains(done[0], "its [sources] naming the agent network 10.9.0.0/24") {
		t.Fatalf("%v %v", done, err)
	}
	data, _ := os.ReadFile(filepath.Join(d, PolicyFile))
	p, err := policy.Load("policy.toml", data)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Container(netip.MustParseAddr("10.9.0.7")); got != "agent" {
		t.Errorf("10.9.0.7 is container %q in the copied policy, want agent:\n%s", got, data)
	}
	if got := p.Container(netip.MustParseAddr("10.213.10.7")); got != "" {
		t.Errorf("the shipped subnet is still container %q", got)
	}
	done, err = SeedPolicy(d, shipped, netip.MustParsePrefix("10.8.0.0/24"))
	if err != nil || len(done) != 2 || !strings.Contains(done[1], "does not name the agent network 10.8.0.0/24") {
		t.Errorf("a policy naming another subnet: %v %v", done, err)
	}
	// A shipped policy without the default subnet cannot be given another.
	other := filepath.Join(t.TempDir(), "p.toml")
	os.WriteFile(other, []byte("version = 1\n[sources]\nagent = [\"10.1.0.0/24\"]\n"), 0o644)
	d2 := filepath.Join(t.TempDir(), "policy")
	os.Mkdir(d2, 0o755)
	if _, err := SeedPolicy(d2, other, subnet); err == nil || !strings.Contains(err.Error(), "does not name 10.213.10.0/24") {
		t.Errorf("err %v", err)
	}
}

// A restore copies the services' files in as root: Prepare gives them back.
func TestPrepareOwnsRestoredFiles(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("Prepare chowns: it runs as root")
	}
	root := t.TempDir()
	for _, f := range []string{"console/state.json", "console/audit/2026-01-01.jsonl", "hub/hub-key.pem", "audit/2026-01-01.jsonl"} {
		os.MkdirAll(filepath.Join(root, filepath.Dir(f)), 0o700)
		os.WriteFile(filepath.Join(root, f), []byte("x"), 0o600)
	}
	if _, err := Prepare(root); err != nil {
		t.Fatal(err)
	}
	for f, uid := range map[string]uint32{"console/state.json": ConsoleUID, "console/audit": ConsoleUID, "console/audit/2026-01-01.jsonl": ConsoleUID,
		"hub/hub-key.pem": ConsoleUID, "audit/2026-01-01.jsonl": GateUID} {
		fi, err := os.Stat(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != uid || st.Gid != Group || !fi.IsDir() && fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %d:%d %v, want %d:%d, mode kept", f, st.Uid, st.Gid, fi.Mode(), uid, Group)
		}
	}
	if fi, _ := os.Stat(filepath.Join(root, "hub", "gate.token")); fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Error("the gate's token is not root's")
	}
}
