package layout

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/lockhttp/lockhttp/internal/gatefiles"
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
