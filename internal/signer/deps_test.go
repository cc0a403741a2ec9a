package signer

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps keeps the signer apart from the gate: of this module it may import only the packages
// below, so that nothing of the gate's (policy, judge, gate, ...) runs next to the CA key.
func TestDeps(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list the dependencies")
	}
	out, err := exec.Command(goTool, "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	allowed := map[string]bool{
		"github.com/lockhttp/lockhttp/internal/signer":     true,
		"github.com/lockhttp/lockhttp/internal/floor":      true,
		"github.com/lockhttp/lockhttp/internal/unixsock":   true,
		"github.com/lockhttp/lockhttp/internal/atomicfile": true,
		// What crosses its socket: the signing request and answer, health.
		"github.com/lockhttp/lockhttp/internal/signerapi": true,
		// How floor reads a hex digit; it imports nothing.
		"github.com/lockhttp/lockhttp/internal/percent": true,
		// Leaves shared by every server of the project, with nothing of the gate's in them: how a
		// reason cuts a host, and how an answer is written.
		"github.com/lockhttp/lockhttp/internal/display":  true,
		"github.com/lockhttp/lockhttp/internal/httpjson": true,
		// The names of the Prometheus metrics, every process's: it imports nothing of this
		// module.
		"github.com/lockhttp/lockhttp/internal/metrics": true,
	}
	seen := 0
	for _, p := range strings.Fields(string(out)) {
		if !strings.HasPrefix(p, "github.com/lockhttp/lockhttp/") {
			continue
		}
		seen++
		if !allowed[p] {
			t.Errorf("the signer imports %s", p)
		}
	}
	if seen != len(allowed) {
		t.Errorf("go list named %d of this module's packages, want %d:\n%s", seen, len(allowed), out)
	}
}
