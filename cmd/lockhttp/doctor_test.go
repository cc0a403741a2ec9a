package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestComposeProject: --compose takes the project's name, or the deployment directory whose
// .env names it, as docker-compose reads it there.
func TestComposeProject(t *testing.T) {
	site := t.TempDir()
	os.WriteFile(filepath.Join(site, ".env"), []byte("# settings\nCOMPOSE_FILE=/x/compose.yaml\nCOMPOSE_PROJECT_NAME=edge\n"), 0o644)
	bare := t.TempDir()
	os.WriteFile(filepath.Join(bare, ".env"), []byte("LOCKHTTP_TAG=v2\n"), 0o644)
	for _, tc := range []struct{ arg, want, err string }{
		{"lockhttp", "lockhttp", ""},
		{site, "edge", ""},
		{site + "/", "edge", ""},
		{bare, "", "has no COMPOSE_PROJECT_NAME; fix: add COMPOSE_PROJECT_NAME=NAME"},
		{filepath.Join(site, "none"), "", "no such file or directory; fix: name a deployment directory"},
	} {
		got, err := composeProject(tc.arg)
		if got != tc.want || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("composeProject(%q) = %q, %v; want %q, %q", tc.arg, got, err, tc.want, tc.err)
		}
	}
	t.Chdir(site)
	if got, err := composeProject("."); got != "edge" || err != nil {
		t.Errorf(`composeProject(".") = %q, %v`, got, err)
	}
}
