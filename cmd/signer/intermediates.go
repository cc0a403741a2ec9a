package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/lockhttp/lockhttp/internal/atomicfile"
	"github.com/lockhttp/lockhttp/internal/mtls"
	"github.com/lockhttp/lockhttp/internal/signer"
)

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// maxRootCAFile bounds the read of --root-ca.
const maxRootCAFile = 64 << 10

// caName names what signs, for the start's log line.
func caName(ca *signer.CA, node *signer.Node) string {
	if ca != nil {
		return ca.String()
	}
	return "intermediates of the root " + node.Root().Subject.String()
}

// newNode is a node signer's intermediate, got from the root at o.rootURL over mutual TLS.
func newNode(o serveOptions, e env, log *slog.Logger) (*signer.Node, error) {
	rootPEM, err := atomicfile.ReadFile(o.rootCA, maxRootCAFile)
	if err != nil {
		return nil, fmt.Errorf("--root-ca: %w", err)
	}
	src, err := o.tls.Load(log)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert: %w", err)
	}
	if o.tlsRoots.Empty() {
		o.tlsRoots = mtls.MustAllow("spiffe://lockhttp/signer/*")
	}
	n, err := signer.NewNode(signer.NodeConfig{Root: o.rootURL, TLS: src.ClientConfig(o.tlsRoots), RootPEM: rootPEM, Logger: log, Now: e.now})
	if err != nil {
		return nil, fmt.Errorf("--root-url: %w", err)
	}
	return n, nil
}

// runRoot serves a fleet's root signer: the root key signs the intermediates of the node
// signers o.tlsNodes lists, over mutual TLS on o.tlsListen, and nothing else.
func runRoot(ctx context.Context, o serveOptions, e env, fail func(int, string, ...any) int) int {
	policy := signer.RootPolicy{Lifetime: o.lifetime, PermittedDNS: o.permit, ExcludedDNS: o.exclude}
	switch {
	case o.caDir == "":
		return fail(2, "--root needs --ca: the root's directory made by `signer init --root --dir DIR`")
	case o.tlsListen == "":
		return fail(2, "--root needs --tls-listen: the address the node signers reach over mutual TLS")
	case o.tls.Check() != nil:
		return fail(2, "--root: %v", o.tls.Check())
	case o.tlsNodes.Empty():
		return fail(2, "--root needs --tls-node: the identities of the node signers it signs for (spiffe://lockhttp/signer/NAME, repeatable); it signs for nobody else")
	case o.socket != "" || len(o.allow) > 0 || o.rootURL != "" || o.exportCA != "":
		return fail(2, "--root signs intermediates only, over --tls-listen: drop --socket, --allow-uid, --root-url and --export-ca (the node signers serve the gates)")
	case policy.Check() != nil:
		return fail(2, "%v", policy.Check())
	}
	log, err := o.Logger(e.stderr)
	if err != nil {
		return fail(2, "--log-level %v", err)
	}
	if e.euid == 0 && !o.dev {
		return fail(1, "refusing to run as root: run the root signer as its own user, the only one that can read the root key; --dev allows root for local development")
	}
	if o.init {
		if err := signer.CheckFiles(o.caDir); errors.Is(err, signer.ErrNoCA) {
			ca, err := signer.InitRootCA(o.caDir, e.now(), rand.Reader)
			if err != nil {
				return fail(1, "%v", err)
			}
			log.Info("created the root CA", "dir", o.caDir, "ca", ca)
		}
	}
	ca, err := signer.LoadCA(o.caDir)
	if err != nil {
		return fail(1, "%v", err)
	}
	if err := signer.CheckRoot(ca, o.caDir); err != nil {
		return fail(1, "%v", err)
	}
	src, err := o.tls.Load(log)
	if err != nil {
		return fail(1, "--tls-cert: %v", err)
	}
	l, err := net.Listen("tcp", o.tlsListen)
	if err != nil {
		return fail(1, "--tls-listen: %v", err)
	}
	rs := signer.NewRootServer(signer.RootConfig{CA: ca, Policy: policy, Logger: log, Now: e.now})
	hs, ml := mtlsServer(ctx, l, src, o.tlsNodes, "signer-root", rs.Handler, log)
	go func() {
		<-ctx.Done()
		hs.Close()
	}()
	lifetime := policy.Lifetime
	log.Info("root signer serving node signers over mutual TLS", "listen", l.Addr().String(), "id", src.ID().String(), "nodes", o.tlsNodes.String(),
		"ca", ca, "intermediate_lifetime", lifetime.String(), "permit_dns", []string(o.permit), "exclude_dns", []string(o.exclude), "pid", os.Getpid())
	if err := hs.Serve(ml); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fail(1, "%v", err)
	}
	log.Info("root signer stopped")
	return 0
}
