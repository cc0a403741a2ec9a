package main

import (
	"crypto/x509"
	"os"
	"strings"

	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// systemRoots returns the system's roots for verifying origins. Where the system has none (a
// FROM scratch image), or GODEBUG=x509usefallbackroots=1 asks for them, it parses the embedded
// bundle and makes it Go's fallback for every verifier of the process (the trace exporter's, the
// database copy's) as the fallback package's initialiser would; fromBundle says so. Parsed only
// then: the bundle costs 0.65 MB of allocations a gate with system roots has no use for.
func systemRoots() (roots *x509.CertPool, fromBundle bool) {
	roots, err := x509.SystemCertPool()
	if err == nil && roots != nil && !roots.Equal(x509.NewCertPool()) && !forceFallback(os.Getenv("GODEBUG")) {
		return roots, false
	}
	b := bundlePool()
	x509.SetFallbackRoots(b)
	if roots, err = x509.SystemCertPool(); err != nil || roots == nil {
		roots = b.Clone()
	}
	return roots, true
}

// forceFallback reads GODEBUG's x509usefallbackroots, the last setting winning as Go reads it.
func forceFallback(godebug string) bool {
	on := false
	for _, kv := range strings.Split(godebug, ",") {
		if k, v, ok := strings.Cut(strings.TrimSpace(kv), "="); ok && k == "x509usefallbackroots" {
			on = v == "1"
		}
	}
	return on
}

// bundlePool is the embedded bundle as a pool, each root with its constraint.
func bundlePool() *x509.CertPool {
	p := x509.NewCertPool()
	for c := range bundle.Roots() {
		cert, err := x509.ParseCertificate(c.Certificate)
		if err != nil {
			continue // a root Go cannot parse verifies nothing; the rest still do
		}
		if c.Constraint == nil {
			p.AddCert(cert)
		} else {
			p.AddCertWithConstraint(cert, c.Constraint)
		}
	}
	return p
}
