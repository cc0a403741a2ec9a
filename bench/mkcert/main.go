// Command mkcert writes a throwaway root and an origin certificate for origin.test and
// *.bench.test into DIR (root.pem, cert.pem, key.pem), for the benchmark scripts beside it.
//
//	go -C bench run ./mkcert DIR  (DIR whole: it runs from bench/, a module of its own)
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"time"
)

func main() {
	dir := os.Args[1]
	rk, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	rt := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bench root"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(48 * time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	rd, _ := x509.CreateCertificate(rand.Reader, rt, rt, &rk.PublicKey, rk)
	root, _ := x509.ParseCertificate(rd)
	lk, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	lt := &x509.Certificate{SerialNumber: big.NewInt(2), DNSNames: []string{"origin.test", "*.bench.test"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(48 * time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	ld, _ := x509.CreateCertificate(rand.Reader, lt, root, &lk.PublicKey, rk)
	kd, _ := x509.MarshalPKCS8PrivateKey(lk)
	os.WriteFile(dir+"/root.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: rd}), 0o644)
	os.WriteFile(dir+"/cert.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ld}), 0o644)
	os.WriteFile(dir+"/key.pem", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd}), 0o600)
}
