package hub_test

import (
	"path/filepath"
	"testing"

	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/hub/storetest"
)

// The embedded store passes the stores' conformance suite, in memory and on its state file.
func TestFileStoreConformance(t *testing.T) {
	for _, name := range []string{"memory", "file"} {
		t.Run(name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) hub.Store {
				path := ""
				if name == "file" {
					path = filepath.Join(t.TempDir(), "hub.json")
				}
				s, err := hub.NewFileStore(path, nil)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				return s
			}, nil)
		})
	}
}
