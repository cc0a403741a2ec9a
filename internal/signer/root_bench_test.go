package signer

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/mtls"
	"github.com/lockhttp/lockhttp/internal/signerapi"
)

// BenchmarkRootIntermediate is one intermediate from a root signer over real mutual TLS on
// loopback, as a node asks for it (a kept connection): the cost of the root's listener per
// renewal.
func BenchmarkRootIntermediate(b *testing.B) {
	dir := b.TempDir()
	fleet, _ := mtls.NewCA("bench fleet", time.Now(), time.Hour, rand.Reader)
	wf := func(path string, data []byte, mode os.FileMode) {
		if err := os.WriteFile(path, data, mode); err != nil {
			b.Fatal(err)
		}
	}
	load := func(kind, name string) *mtls.Source {
		id, _ := mtls.NewID(kind, name)
		is, _ := fleet.Issue(id, mtls.UsageOf(kind), nil, time.Now(), time.Hour, rand.Reader)
		kp, _ := mtls.KeyPEM(is.Key)
		base := filepath.Join(dir, name)
		wf(base+".pem", mtls.CertPEM(is.Cert), 0o644)
		wf(base+"-key.pem", kp, 0o600)
		wf(filepath.Join(dir, "ca.pem"), mtls.CertPEM(fleet.Cert), 0o644)
		src, err := mtls.Load(mtls.Options{Files: mtls.Files{Cert: base + ".pem", Key: base + "-key.pem", CA: filepath.Join(dir, "ca.pem")}})
		if err != nil {
			b.Fatal(err)
		}
		return src
	}
	rootSrc, nodeSrc := load("signer", "root"), load("signer", "n1")
	root, err := InitRootCA(filepath.Join(dir, "root"), time.Now(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	nodes := mtls.MustAllow("spiffe://lockhttp/signer/n1")
	rs := NewRootServer(RootConfig{CA: root, Rate: 1e9, Burst: 1 << 30})
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	ms := mtls.NewServer(mtls.ServerOptions{Source: rootSrc, Allow: nodes, Name: "root"})
	hs := &http.Server{Handler: rs.Handler(func(r *http.Request) (string, bool) {
		id, ok := mtls.PeerOf(r)
		return id.String(), ok && nodes.Admits(id)
	}), ConnContext: mtls.ConnContext}
	go hs.Serve(ms.Listener(l))
	defer hs.Close()
	n, err := NewNode(NodeConfig{Root: "https://" + l.Addr().String(), TLS: nodeSrc.ClientConfig(mtls.MustAllow("spiffe://lockhttp/signer/root")), RootPEM: root.certPEM})
	if err != nil {
		b.Fatal(err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalPKIXPublicKey(key.Public())
	req := signerapi.IntermediateRequest{PublicKey: base64.StdEncoding.EncodeToString(der)}
	for b.Loop() {
		if _, err := n.fetch(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}
