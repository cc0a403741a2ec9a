package layout

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/gatefiles"
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
		done, err := SeedPolicy(d, shipped)
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
		done, err := SeedPolicy(d, shipped)
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
			if _, err := SeedPolicy(d, shipped); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want %q", err, tc.want)
			}
		})
	}
}
