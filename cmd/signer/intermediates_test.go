package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/signer"
)

// TestRootAndNodeFlags: the root's and the nodes' flags are checked before anything starts, each
// refusal naming the fix; a single signer's CA cannot serve as a root.
func TestRootAndNodeFlags(t *testing.T) {
	single := initCA(t)
	rootDir := filepath.Join(t.TempDir(), "root")
	e, _, errs := testEnv(notRoot)
	if code := run(context.Background(), []string{"init", "--root", "--dir", rootDir}, e); code != 0 {
		t.Fatalf("init --root: exit %d: %s", code, errs)
	}
	ca, err := signer.LoadCA(rootDir)
	if err != nil || signer.CheckRoot(ca, rootDir) != nil || ca.Cert().MaxPathLen != 1 {
		t.Fatalf("init --root made a CA that cannot sign intermediates: %v", err)
	}
	tlsFlags := []string{"--tls-cert", "c.pem", "--tls-key", "k.pem", "--tls-ca", "ca.pem"}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"root without nodes", append([]string{"serve", "--root", "--ca", rootDir, "--tls-listen", "127.0.0.1:0"}, tlsFlags...), 2, "--root needs --tls-node"},
		{"root without a listener", []string{"serve", "--root", "--ca", rootDir, "--tls-node", "spiffe://lockhttp/signer/n1"}, 2, "--root needs --tls-listen"},
		{"root with a socket", append([]string{"serve", "--root", "--ca", rootDir, "--tls-listen", "127.0.0.1:0", "--tls-node", "spiffe://lockhttp/signer/n1", "--socket", "s"}, tlsFlags...), 2, "signs intermediates only"},
		{"root lifetime too short", append([]string{"serve", "--root", "--ca", rootDir, "--tls-listen", "127.0.0.1:0", "--tls-node", "spiffe://lockhttp/signer/n1", "--intermediate-lifetime", "5s"}, tlsFlags...), 2, "under 30s"},
		{"root with a wildcard constraint", append([]string{"serve", "--root", "--ca", rootDir, "--tls-listen", "127.0.0.1:0", "--tls-node", "spiffe://lockhttp/signer/n1", "--permit-dns", "*.example.com"}, tlsFlags...), 2, "without '*'"},
		{"root of a single signer's CA", append([]string{"serve", "--root", "--ca", single, "--tls-listen", "127.0.0.1:0", "--tls-node", "spiffe://lockhttp/signer/n1"}, tlsFlags...), 1, "signer init --root"},
		{"node with a CA", append([]string{"serve", "--root-url", "https://r:1", "--root-ca", "r.pem", "--ca", single, "--socket", "s", "--allow-uid", "1"}, tlsFlags...), 2, "holds no CA on disk"},
		{"node without the root's certificate", append([]string{"serve", "--root-url", "https://r:1", "--socket", "s", "--allow-uid", "1"}, tlsFlags...), 2, "needs --root-ca"},
		{"node without an identity", []string{"serve", "--root-url", "https://r:1", "--root-ca", "r.pem", "--socket", "s", "--allow-uid", "1"}, 2, "--tls-cert"},
		{"node with the root's flags", append([]string{"serve", "--root-url", "https://r:1", "--root-ca", "r.pem", "--socket", "s", "--allow-uid", "1", "--permit-dns", "example.com"}, tlsFlags...), 2, "are the root's"},
		{"single signer with a node's flag", []string{"serve", "--ca", single, "--socket", "s", "--allow-uid", "1", "--root-ca", "r.pem"}, 2, "--root-url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, _, errs := testEnv(notRoot)
			if code := run(context.Background(), tc.args, e); code != tc.code || !strings.Contains(errs.String(), tc.want) {
				t.Errorf("exit %d, want %d; stderr %q does not say %q", code, tc.code, errs, tc.want)
			}
		})
	}
}
