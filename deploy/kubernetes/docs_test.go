package kubernetes

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// docPath is the document whose command blocks set the manifests up.
const docPath = "../../docs/deploy-kubernetes.md"

// docBlocks reads the blocks of path marked "<!-- test: NAME -->" before a ```sh fence.
func docBlocks(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	name, open := "", false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case name != "" && !open && line == "```sh":
			open = true
		case open && line == "```":
			name, open = "", false
		case open:
			out[name] += sc.Text() + "\n"
		case name != "":
			t.Fatalf("%s:%d: a test marker not followed by a ```sh block", path, n)
		case strings.HasPrefix(line, "<!-- test: "):
			name = strings.Fields(strings.TrimPrefix(line, "<!-- test: "))[0]
			if _, dup := out[name]; dup {
				t.Fatalf("%s:%d: block %q named twice", path, n, name)
			}
		}
	}
	return out
}

// made is what the document's kubectl commands create: a Secret or ConfigMap by name, its keys.
type made map[string]map[string]bool

// TestDocSetsUpTheManifests runs the document's setup with the real lockhttp and a kubectl that
// records what it is asked: every file a command hands kubectl exists once the block has run, and
// every Secret and ConfigMap a pod mounts is created, with every key a container reads from it.
func TestDocSetsUpTheManifests(t *testing.T) {
	if testing.Short() {
		t.Skip("builds lockhttp")
	}
	blocks := docBlocks(t, docPath)
	bin := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", bin+"/", "github.com/lockhttp/lockhttp/cmd/lockhttp").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	log := filepath.Join(t.TempDir(), "kubectl.log")
	fake := "#!/bin/sh\n" +
		"printf '%s\\037' \"$@\" >> \"$KUBECTL_LOG\"; echo >> \"$KUBECTL_LOG\"\n" +
		"case \" $* \" in *' exec '*) printf -- '-----BEGIN CERTIFICATE-----\\nMA==\\n-----END CERTIFICATE-----\\n';; esac\n"
	if err := os.WriteFile(filepath.Join(bin, "kubectl"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	for _, name := range []string{"setup", "agent-ca"} {
		script, ok := blocks[name]
		if !ok {
			t.Fatalf("%s has no test block %q", docPath, name)
		}
		cmd := exec.Command("sh", "-e", "-c", script)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "KUBECTL_LOG="+log)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("block %s: %v\n%s", name, err, out)
		}
	}
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	created := made{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		args := strings.Split(strings.TrimSuffix(line, "\x1f"), "\x1f")
		i := slices.Index(args, "create")
		if i < 0 || i+2 >= len(args) {
			continue
		}
		kind, name := args[i+1], args[i+2]
		if kind == "secret" {
			name = args[i+3]
		}
		if kind != "secret" && kind != "configmap" {
			continue
		}
		keys := map[string]bool{}
		for _, a := range args {
			spec, ok := strings.CutPrefix(a, "--from-file=")
			if !ok {
				continue
			}
			key, file, found := strings.Cut(spec, "=")
			if !found {
				file, key = spec, filepath.Base(spec)
			}
			if _, err := os.Stat(filepath.Join(work, file)); err != nil {
				t.Errorf("kubectl create %s %s reads %s, which the document's commands did not make: %v", kind, name, file, err)
			}
			keys[key] = true
		}
		created[kind+"/"+name] = keys
	}
	_, objs := load(t, ".")
	used := map[string]bool{}
	for _, w := range workloads(objs) {
		for _, v := range w.pod.Spec.Volumes {
			var ref string
			var items []corev1.KeyToPath
			switch {
			case v.Secret != nil:
				ref, items = "secret/"+v.Secret.SecretName, v.Secret.Items
			case v.ConfigMap != nil:
				if v.ConfigMap.Name == "lockhttp-policy" { // the kustomization's generated one
					continue
				}
				ref, items = "configmap/"+v.ConfigMap.Name, v.ConfigMap.Items
			default:
				continue
			}
			used[ref] = true
			keys, ok := created[ref]
			if !ok {
				t.Errorf("%s mounts %s, which the document does not create", w, ref)
				continue
			}
			needed := map[string]string{} // the path in the volume → the key
			for _, it := range items {
				needed[it.Path] = it.Key
			}
			for _, c := range w.pod.Spec.Containers {
				for _, m := range c.VolumeMounts {
					if m.Name != v.Name {
						continue
					}
					for _, a := range append(append([]string{}, c.Args...), c.Command...) {
						if rel, ok := strings.CutPrefix(a, m.MountPath+"/"); ok {
							key := rel
							if k, ok := needed[rel]; ok {
								key = k
							} else if len(items) > 0 {
								t.Errorf("%s reads %s, which the items of %s do not put there", w, a, ref)
							}
							if !keys[key] {
								t.Errorf("%s reads %s: %s has no key %q (the document makes %v)", w, a, ref, key, keys)
							}
						}
					}
				}
			}
			for _, k := range needed {
				if !keys[k] {
					t.Errorf("%s: %s has no key %q", w, ref, k)
				}
			}
		}
	}
	for ref := range created {
		if !used[ref] {
			t.Errorf("the document creates %s, which no manifest mounts", ref)
		}
	}
	if len(created) == 0 {
		t.Fatal("the document's blocks created nothing")
	}
}
