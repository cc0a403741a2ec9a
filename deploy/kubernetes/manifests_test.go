package kubernetes

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/lockhttp/lockhttp/internal/policy"
)

// kustomization is the part of kustomize's file these manifests use, read strictly: a key
// misspelled or not known here is an error.
type kustomization struct {
	APIVersion         string   `json:"apiVersion"`
	Kind               string   `json:"kind"`
	Namespace          string   `json:"namespace"`
	Resources          []string `json:"resources"`
	ConfigMapGenerator []struct {
		Name  string   `json:"name"`
		Files []string `json:"files"`
	} `json:"configMapGenerator"`
	Images []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
	} `json:"images"`
}

// object is one manifest, decoded into its k8s.io/api type.
type object struct {
	file string
	doc  int
	meta metav1.TypeMeta
	name string
	obj  any
}

func (o object) String() string {
	return fmt.Sprintf("%s (%s %s, document %d)", o.file, o.meta.Kind, o.name, o.doc)
}

// newObject is the typed value a kind decodes into; nil for a kind these manifests do not use.
func newObject(tm metav1.TypeMeta) any {
	switch tm.APIVersion + "/" + tm.Kind {
	case "v1/Namespace":
		return &corev1.Namespace{}
	case "v1/ServiceAccount":
		return &corev1.ServiceAccount{}
	case "v1/Service":
		return &corev1.Service{}
	case "v1/ConfigMap":
		return &corev1.ConfigMap{}
	case "v1/Secret":
		return &corev1.Secret{}
	case "v1/PersistentVolumeClaim":
		return &corev1.PersistentVolumeClaim{}
	case "apps/v1/Deployment":
		return &appsv1.Deployment{}
	case "apps/v1/DaemonSet":
		return &appsv1.DaemonSet{}
	case "apps/v1/StatefulSet":
		return &appsv1.StatefulSet{}
	case "batch/v1/Job":
		return &batchv1.Job{}
	case "networking.k8s.io/v1/NetworkPolicy":
		return &networkingv1.NetworkPolicy{}
	}
	return nil
}

// decode reads the YAML documents of one file strictly into their types: an unknown or
// misspelled field, a value of the wrong type or a kind not known here is an error naming the
// file and the document.
func decode(file string, data []byte) ([]object, error) {
	var out []object
	for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			return nil, fmt.Errorf("%s, document %d: %w", file, i+1, err)
		}
		obj := newObject(tm)
		if obj == nil {
			return nil, fmt.Errorf("%s, document %d: kind %s/%s is not one these manifests use; add it to newObject with the checks it needs", file, i+1, tm.APIVersion, tm.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			return nil, fmt.Errorf("%s, document %d (%s): %w", file, i+1, tm.Kind, err)
		}
		// encoding/json, under UnmarshalStrict, takes a key in any case (readOnlyRootFileSystem
		// for readOnlyRootFilesystem); the API server does not. Every key is checked as written.
		var tree any
		if err := yaml.Unmarshal([]byte(doc), &tree); err != nil {
			return nil, fmt.Errorf("%s, document %d: %w", file, i+1, err)
		}
		if err := checkKeys("", reflect.TypeOf(obj), tree); err != nil {
			return nil, fmt.Errorf("%s, document %d (%s): %w", file, i+1, tm.Kind, err)
		}
		name := ""
		if m, ok := obj.(metav1.Object); ok {
			name = m.GetName()
		}
		out = append(out, object{file: file, doc: i + 1, meta: tm, name: name, obj: obj})
	}
	return out, nil
}

// checkKeys holds every key of v (a decoded YAML tree) to a field of t, spelled as the field's
// JSON name, case and all; path names where it is.
func checkKeys(path string, t reflect.Type, v any) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]()) {
		return nil // a type that reads itself (a quantity, an int or string, a time)
	}
	switch val := v.(type) {
	case map[string]any:
		switch t.Kind() {
		case reflect.Map:
			for k, e := range val {
				if err := checkKeys(path+"."+k, t.Elem(), e); err != nil {
					return err
				}
			}
		case reflect.Struct:
			for k, e := range val {
				f, ok := jsonField(t, k)
				if !ok {
					return fmt.Errorf("unknown field %q: no such field of %s, spelled so", strings.TrimPrefix(path+"."+k, "."), t.Name())
				}
				if err := checkKeys(path+"."+k, f.Type, e); err != nil {
					return err
				}
			}
		}
	case []any:
		if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			for i, e := range val {
				if err := checkKeys(fmt.Sprintf("%s[%d]", path, i), t.Elem(), e); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// jsonField is the field of struct t whose JSON name is exactly name, looking into the structs
// it inlines.
func jsonField(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == "-" {
			continue
		}
		if tag == "" && (f.Anonymous || strings.Contains(opts, "inline")) {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				if g, ok := jsonField(ft, name); ok {
					return g, true
				}
			}
			continue
		}
		if tag == "" {
			tag = f.Name
		}
		if tag == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// load reads the kustomization in dir and every resource it names, as kustomize would build
// them (the namespace set, the policy's ConfigMap generated from its file).
func load(t *testing.T, dir string) (kustomization, []object) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	var objs []object
	for _, r := range k.Resources {
		data, err := os.ReadFile(filepath.Join(dir, r))
		if err != nil {
			t.Fatalf("kustomization.yaml names %s: %v", r, err)
		}
		o, err := decode(r, data)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, o...)
	}
	for _, g := range k.ConfigMapGenerator {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: g.Name}, Data: map[string]string{}}
		for _, f := range g.Files {
			data, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil {
				t.Fatalf("configMapGenerator %s: %v", g.Name, err)
			}
			cm.Data[filepath.Base(f)] = string(data)
		}
		objs = append(objs, object{file: "kustomization.yaml", meta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, name: g.Name, obj: cm})
	}
	return k, objs
}

// workload is a pod template and what holds it.
type workload struct {
	object
	pod corev1.PodTemplateSpec
}

func workloads(objs []object) []workload {
	var out []workload
	for _, o := range objs {
		switch w := o.obj.(type) {
		case *appsv1.Deployment:
			out = append(out, workload{o, w.Spec.Template})
		case *appsv1.DaemonSet:
			out = append(out, workload{o, w.Spec.Template})
		case *appsv1.StatefulSet:
			out = append(out, workload{o, w.Spec.Template})
		case *batchv1.Job:
			out = append(out, workload{o, w.Spec.Template})
		}
	}
	return out
}

func policies(objs []object) []*networkingv1.NetworkPolicy {
	var out []*networkingv1.NetworkPolicy
	for _, o := range objs {
		if np, ok := o.obj.(*networkingv1.NetworkPolicy); ok {
			out = append(out, np)
		}
	}
	return out
}

// selects reports whether sel (a NetworkPolicy's pod selector, or a peer's) matches lbl.
func selects(t *testing.T, sel *metav1.LabelSelector, lbl map[string]string) bool {
	t.Helper()
	if sel == nil {
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatalf("selector %v: %v", sel, err)
	}
	return s.Matches(labels.Set(lbl))
}

// The labels of the components' pods.
var (
	gateLabels   = map[string]string{"app.kubernetes.io/name": "lockhttp", "app.kubernetes.io/component": "gate"}
	signerLabels = map[string]string{"app.kubernetes.io/name": "lockhttp", "app.kubernetes.io/component": "signer"}
	agentLabel   = "lockhttp-agent"
	// The ports of the gate an agent may reach: the proxy, DNS, the transparent listeners.
	agentPorts = []string{"TCP/3130", "UDP/53", "TCP/53", "TCP/80", "TCP/443"}
)

// TestManifests: every manifest decodes strictly into its k8s.io/api type, and the deployment
// holds what it promises.
func TestManifests(t *testing.T) {
	k, objs := load(t, ".")
	if k.Namespace != "lockhttp" {
		t.Errorf("the kustomization's namespace is %q", k.Namespace)
	}
	files, _ := filepath.Glob("*.yaml")
	for _, f := range files {
		if f != "kustomization.yaml" && !slices.Contains(k.Resources, f) {
			t.Errorf("%s is not among the kustomization's resources", f)
		}
	}
	ws := workloads(objs)
	nps := policies(objs)
	if len(ws) == 0 || len(nps) == 0 {
		t.Fatalf("%d workloads, %d network policies", len(ws), len(nps))
	}
	sas := map[string]bool{}
	for _, o := range objs {
		if _, ok := o.obj.(*corev1.ServiceAccount); ok {
			sas[o.name] = true
		}
	}

	t.Run("no root, no capability, read-only root", func(t *testing.T) {
		for _, w := range ws {
			checkPod(t, w)
		}
	})
	t.Run("a ServiceAccount each", func(t *testing.T) {
		used := map[string]string{}
		for _, w := range ws {
			sa := w.pod.Spec.ServiceAccountName
			switch {
			case sa == "" || sa == "default":
				t.Errorf("%s runs as the namespace's default ServiceAccount", w)
			case !sas[sa]:
				t.Errorf("%s names ServiceAccount %s, which no manifest makes", w, sa)
			case used[sa] != "":
				t.Errorf("%s and %s share ServiceAccount %s", used[sa], w.name, sa)
			}
			used[sa] = w.name
			if a := w.pod.Spec.AutomountServiceAccountToken; a == nil || *a {
				t.Errorf("%s mounts a service account token: none of lockhttp's processes speaks to the API server", w)
			}
		}
	})
	t.Run("images of our own", func(t *testing.T) {
		for _, w := range ws {
			for _, c := range append(w.pod.Spec.InitContainers, w.pod.Spec.Containers...) {
				checkImage(t, w, c.Image)
			}
		}
	})
	t.Run("agents reach the gate alone", func(t *testing.T) {
		agents := 0
		for _, w := range ws {
			if w.pod.Labels[agentLabel] != "true" {
				continue
			}
			agents++
			covered := false
			for _, np := range nps {
				if !selects(t, &np.Spec.PodSelector, w.pod.Labels) {
					continue
				}
				if slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
					covered = true
				}
				checkAgentEgress(t, np)
			}
			if !covered {
				t.Errorf("%s: no NetworkPolicy with egress selects the agent's pods (labels %v)", w, w.pod.Labels)
			}
		}
		if agents == 0 {
			t.Error("no agent workload: the example agent shows how one is labelled")
		}
	})
	t.Run("the signer has no egress", func(t *testing.T) {
		n := 0
		for _, np := range nps {
			if !selects(t, &np.Spec.PodSelector, signerLabels) {
				continue
			}
			n++
			if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) || len(np.Spec.Egress) != 0 {
				t.Errorf("NetworkPolicy %s lets the signer out: policy types %v, %d egress rules", np.Name, np.Spec.PolicyTypes, len(np.Spec.Egress))
			}
		}
		if n == 0 {
			t.Error("no NetworkPolicy selects the signer's pods: it would have the cluster's egress")
		}
		for _, w := range ws {
			if selects(t, &metav1.LabelSelector{MatchLabels: signerLabels}, w.pod.Labels) && w.meta.Kind != "Deployment" {
				t.Errorf("%s: the signer runs in a Deployment of its own", w)
			}
		}
	})
	t.Run("shape", func(t *testing.T) {
		checkShape(t, objs)
	})
	t.Run("the policy loads", func(t *testing.T) {
		data, err := os.ReadFile("policy.toml")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := policy.Load("policy.toml", data); err != nil {
			t.Error(err)
		}
	})
}

// checkPod holds a pod template to: not root, no privilege escalation, no capability, a
// read-only root, a seccomp profile, nothing of the host's.
func checkPod(t *testing.T, w workload) {
	t.Helper()
	ps := w.pod.Spec.SecurityContext
	if ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ps.RunAsUser == nil || *ps.RunAsUser == 0 {
		t.Errorf("%s: the pod does not say runAsNonRoot: true and a runAsUser other than 0", w)
	}
	if ps != nil && (ps.SeccompProfile == nil || ps.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault) {
		t.Errorf("%s: no RuntimeDefault seccomp profile", w)
	}
	if ps != nil {
		for _, s := range ps.Sysctls {
			if s.Name != "net.ipv4.ip_unprivileged_port_start" {
				t.Errorf("%s: sysctl %s is not one the deployment needs", w, s.Name)
			}
		}
	}
	if w.pod.Spec.HostNetwork || w.pod.Spec.HostPID || w.pod.Spec.HostIPC {
		t.Errorf("%s shares the node's network, pids or IPC", w)
	}
	for _, v := range w.pod.Spec.Volumes {
		if v.HostPath != nil {
			t.Errorf("%s: volume %s is a path of the node", w, v.Name)
		}
	}
	for _, c := range append(w.pod.Spec.InitContainers, w.pod.Spec.Containers...) {
		sc := c.SecurityContext
		switch {
		case sc == nil:
			t.Errorf("%s: container %s has no securityContext", w, c.Name)
			continue
		case sc.RunAsUser != nil && *sc.RunAsUser == 0, sc.RunAsNonRoot != nil && !*sc.RunAsNonRoot:
			t.Errorf("%s: container %s runs as root", w, c.Name)
		case sc.Privileged != nil && *sc.Privileged:
			t.Errorf("%s: container %s is privileged", w, c.Name)
		case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
			t.Errorf("%s: container %s may escalate its privileges", w, c.Name)
		case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
			t.Errorf("%s: container %s writes its root file system", w, c.Name)
		case sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0:
			t.Errorf("%s: container %s does not drop every capability", w, c.Name)
		}
		if c.Resources.Limits.Memory().IsZero() {
			t.Errorf("%s: container %s has no memory limit", w, c.Name)
		}
	}
}

// ourImages are the images compose/build.sh builds, FROM scratch; the manifests name them
// without a registry (kustomize's images: names the operator's).
var ourImages = map[string]string{
	"lockhttp-gate": "gate", "lockhttp-console": "console", "lockhttp-signer": "signer", "lockhttp-tools": "tools",
}

func checkImage(t *testing.T, w workload, image string) {
	t.Helper()
	name, _, _ := strings.Cut(image, ":")
	dir, ok := ourImages[name]
	if !ok || strings.Contains(image, "@") {
		t.Errorf("%s: image %q is not one compose/build.sh builds (%v): nothing is pulled from a registry lockhttp does not build", w, image, ourImages)
		return
	}
	data, err := os.ReadFile(filepath.Join("..", "..", "compose", "images", dir, "Dockerfile"))
	if err != nil {
		t.Errorf("%s: %v", w, err)
		return
	}
	if !strings.HasPrefix(strings.TrimSpace(stripComments(string(data))), "FROM scratch\n") {
		t.Errorf("%s: compose/images/%s/Dockerfile is not FROM scratch", w, dir)
	}
}

// checkAgentEgress holds a policy selecting agents to egress to the gate's pods alone, on its
// ports alone.
func checkAgentEgress(t *testing.T, np *networkingv1.NetworkPolicy) {
	t.Helper()
	for i, rule := range np.Spec.Egress {
		if len(rule.To) == 0 {
			t.Errorf("NetworkPolicy %s, egress rule %d: no peer, so every destination", np.Name, i)
		}
		for _, peer := range rule.To {
			if peer.IPBlock != nil || peer.PodSelector == nil || !selects(t, peer.PodSelector, gateLabels) ||
				(peer.NamespaceSelector != nil && !selects(t, peer.NamespaceSelector, map[string]string{"kubernetes.io/metadata.name": "lockhttp"})) {
				t.Errorf("NetworkPolicy %s, egress rule %d lets agents reach %+v, not the gate's pods alone", np.Name, i, peer)
			}
			if peer.PodSelector != nil && len(peer.PodSelector.MatchLabels) == 0 && len(peer.PodSelector.MatchExpressions) == 0 {
				t.Errorf("NetworkPolicy %s, egress rule %d: an empty pod selector is every pod", np.Name, i)
			}
		}
		if len(rule.Ports) == 0 {
			t.Errorf("NetworkPolicy %s, egress rule %d: every port of the gate", np.Name, i)
		}
		for _, p := range rule.Ports {
			proto := corev1.ProtocolTCP
			if p.Protocol != nil {
				proto = *p.Protocol
			}
			if p.Port == nil || p.EndPort != nil || !slices.Contains(agentPorts, fmt.Sprintf("%s/%s", proto, p.Port.String())) {
				t.Errorf("NetworkPolicy %s, egress rule %d: port %v is not one of the gate's for agents %v", np.Name, i, p, agentPorts)
			}
		}
	}
}

// checkShape holds the deployment to its shape: the gate behind a Service, console and hub in
// replicas on PostgreSQL, the signer alone with its volume.
func checkShape(t *testing.T, objs []object) {
	t.Helper()
	byName := map[string]object{}
	for _, o := range objs {
		byName[o.meta.Kind+"/"+o.name] = o
	}
	console, ok := byName["Deployment/lockhttp-console"].obj.(*appsv1.Deployment)
	if !ok {
		t.Fatal("no Deployment lockhttp-console")
	}
	if console.Spec.Replicas == nil || *console.Spec.Replicas < 2 {
		t.Errorf("the console and hub run %v replicas, want 2 or more", console.Spec.Replicas)
	}
	args := strings.Join(console.Spec.Template.Spec.Containers[0].Args, " ")
	for _, want := range []string{"-hub-store postgres", "-hub-dsn-file /etc/lockhttp/db/hub-dsn", "-tls-listen", "-hub-tls-listen"} {
		if !strings.Contains(args, want) {
			t.Errorf("the console's arguments lack %q: %s", want, args)
		}
	}
	for _, kind := range []string{"Deployment", "DaemonSet"} {
		if g, ok := byName[kind+"/lockhttp-gate"]; ok {
			svc, ok := byName["Service/lockhttp-gate"].obj.(*corev1.Service)
			if !ok || !selects(t, &metav1.LabelSelector{MatchLabels: svc.Spec.Selector}, gateLabels) {
				t.Errorf("%s is behind no Service", g)
			}
			return
		}
	}
	t.Error("the gate runs in neither a Deployment nor a DaemonSet named lockhttp-gate")
}

// TestMisspelledFieldFails: a manifest with a field misspelled anywhere (the pod's, a
// container's, a NetworkPolicy's) fails the decoding above, naming the field, where kubectl
// apply without validation would drop it silently.
func TestMisspelledFieldFails(t *testing.T) {
	cases := []struct{ file, field, typo string }{
		{"gate.yaml", "readOnlyRootFilesystem: true", "readOnlyRootFileSystem: true"},
		{"gate.yaml", "allowPrivilegeEscalation: false", "allowPriviledgeEscalation: false"},
		{"signer.yaml", "  policyTypes: [Ingress, Egress]", "  policyType: [Ingress, Egress]"},
		{"console.yaml", "  replicas: 2", "  replica: 2"},
		{"agents.yaml", "runAsNonRoot: true", "runAsNonroot: true"},
	}
	for _, c := range cases {
		t.Run(c.file+" "+c.typo, func(t *testing.T) {
			data, err := os.ReadFile(c.file)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := decode(c.file, data); err != nil {
				t.Fatalf("the file as it is: %v", err)
			}
			bad := bytes.Replace(data, []byte(c.field), []byte(c.typo), 1)
			if bytes.Equal(bad, data) {
				t.Fatalf("%s has no %q", c.file, c.field)
			}
			_, err = decode(c.file, bad)
			typo := strings.TrimSpace(strings.Split(c.typo, ":")[0])
			if err == nil || !strings.Contains(err.Error(), `unknown field`) || !strings.Contains(err.Error(), typo) {
				t.Errorf("decoding with %q: %v; want an error naming the unknown field", c.typo, err)
			}
		})
	}
	// The same with a file of its own: testdata/misspelled.yaml.
	data, err := os.ReadFile(filepath.Join("testdata", "misspelled.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decode("testdata/misspelled.yaml", data); err == nil || !strings.Contains(err.Error(), `unknown field "runAsNonRot"`) {
		t.Errorf("testdata/misspelled.yaml: %v", err)
	}
}

// TestFlagsExist: every flag a container passes is one its binary defines (the binaries' -h),
// so that a manifest never names a flag that was renamed or never was.
func TestFlagsExist(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries")
	}
	bin := t.TempDir()
	out, err := exec.Command("go", "build", "-o", bin+"/", "github.com/lockhttp/lockhttp/cmd/gate", "github.com/lockhttp/lockhttp/cmd/console",
		"github.com/lockhttp/lockhttp/cmd/signer", "github.com/lockhttp/lockhttp/cmd/lockhttp").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	_, objs := load(t, ".")
	help := map[string]string{}
	usage := func(name string, args ...string) string {
		k := name + " " + strings.Join(args, " ")
		if _, ok := help[k]; !ok {
			out, _ := exec.Command(filepath.Join(bin, name), append(args, "-h")...).CombinedOutput()
			help[k] = string(out)
		}
		return help[k]
	}
	for _, w := range workloads(objs) {
		for _, c := range w.pod.Spec.Containers {
			name := strings.TrimPrefix(strings.Split(c.Image, ":")[0], "lockhttp-")
			args := c.Args
			if len(c.Command) > 0 {
				name = strings.TrimPrefix(c.Command[0], "/")
			}
			if name == "tools" {
				name = "lockhttp"
			}
			var sub []string // a subcommand, whose flags its own -h lists
			for len(args) > 0 && !strings.HasPrefix(args[0], "-") {
				sub, args = append(sub, args[0]), args[1:]
			}
			h := usage(name, sub...)
			for _, a := range args {
				if !strings.HasPrefix(a, "-") {
					continue
				}
				flag := strings.TrimLeft(strings.SplitN(a, "=", 2)[0], "-")
				if !regexp.MustCompile(`(?m)^\s+--?` + regexp.QuoteMeta(flag) + `\b`).MatchString(h) {
					t.Errorf("%s: %s has no flag -%s", w, strings.Join(append([]string{name}, sub...), " "), flag)
				}
			}
		}
	}
}
