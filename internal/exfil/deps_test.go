package exfil

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps keeps the package pure: of this module's packages it imports only percent (how a %XX
// escape is read, itself pure) and, directly, nothing that does I/O or starts work of its own (no
// os, io, net, log, os/exec).
func TestDeps(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list the imports")
	}
	out, err := exec.Command(goTool, "list", "-f", "{{join .Imports \" \"}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	allowed := map[string]bool{
		"fmt": true, "hash/maphash": true, "math": true, "net/http": true, "strings": true,
		"sync": true, "time": true, "golang.org/x/net/publicsuffix": true,
		"github.com/lockhttp/lockhttp/internal/percent": true,
	}
	imports := strings.Fields(string(out))
	if len(imports) == 0 {
		t.Fatalf("go list named no imports")
	}
	for _, p := range imports {
		if !allowed[p] {
			t.Errorf("exfil imports %s", p)
		}
	}
}
