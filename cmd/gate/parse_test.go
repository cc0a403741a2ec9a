package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestParseOTLPEndpoint: -otlp-endpoint is checked with the other flags, before the gate opens
// anything; empty (the default) exports no traces.
func TestParseOTLPEndpoint(t *testing.T) {
	base := []string{"-console", "/s/console.sock", "-audit", "/s/audit"}
	for _, c := range []struct{ name, endpoint, err string }{
		{"none", "", ""},
		{"a collector", "http://127.0.0.1:4318", ""},
		{"no scheme", "127.0.0.1:4318", `-otlp-endpoint "127.0.0.1:4318": write the collector's OTLP/HTTP URL`},
		{"user info", "https://u:p@otel.example", "OTEL_EXPORTER_OTLP_HEADERS"},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := base
			if c.endpoint != "" {
				args = append(append([]string{}, base...), "-otlp-endpoint", c.endpoint)
			}
			o, err := parse(args, io.Discard)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one with %q", err, c.err)
				}
				return
			}
			if err != nil || o.otlpEndpoint != c.endpoint {
				t.Fatalf("otlpEndpoint %q, %v; want %q", o.otlpEndpoint, err, c.endpoint)
			}
		})
	}
}

// TestParseMetricsSigner: -metrics-signer reads the signer's families from -signer's socket and
// serves them on -metrics-listen: without either it is a usage error, before the gate opens
// anything.
func TestParseMetricsSigner(t *testing.T) {
	base := []string{"-console", "/s/console.sock", "-audit", "/s/audit", "-metrics-signer"}
	for _, c := range []struct {
		name string
		args []string
		err  string
	}{
		{"both", []string{"-signer", "/s/signer.sock", "-metrics-listen", "127.0.0.1:9464"}, ""},
		{"no signer", []string{"-metrics-listen", "127.0.0.1:9464"}, "-metrics-signer needs -signer"},
		{"no listener", []string{"-signer", "/s/signer.sock"}, "and -metrics-listen"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o, err := parse(append(append([]string{}, base...), c.args...), io.Discard)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one with %q", err, c.err)
				}
				return
			}
			if err != nil || !o.metricsSigner {
				t.Fatalf("metricsSigner %v, %v", o != nil && o.metricsSigner, err)
			}
		})
	}
}

// TestParseUpstream: an upstream URL with user info is refused before the gate opens anything,
// with the fix and without the password; the credential comes from a file or the environment.
func TestParseUpstream(t *testing.T) {
	base := []string{"-console", "/s/console.sock", "-audit", "/s/audit"}
	for _, c := range []struct {
		name string
		args []string
		err  string
	}{
		{"none", nil, ""},
		{"the compose setup's empty settings", []string{"-upstream", "", "-upstream-credentials-file", ""}, ""},
		{"a proxy", []string{"-upstream", "http://squid.example:3128"}, ""},
		{"a proxy and its credential file", []string{"-upstream", "http://squid.example:3128", "-upstream-credentials-file", "/s/upstream.cred"}, ""},
		{"user and password", []string{"-upstream", "http://alice:planted-pw-31@squid.example:3128"}, "--upstream-credentials-file FILE holding user:password"},
		{"user only", []string{"-upstream", "http://alice@squid.example:3128"}, "LOCKHTTP_UPSTREAM_PROXY_AUTH=user:password"},
		{"a password the URL parser rejects", []string{"-upstream", "http://alice:planted-pw%zz@squid.example:3128"}, "has a user:password part"},
		{"https", []string{"-upstream", "https://squid.example:3128"}, "write it as http://host:port"},
		{"a credential file without a proxy", []string{"-upstream-credentials-file", "/s/upstream.cred"}, "-upstream-credentials-file needs -upstream"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := parse(append(append([]string{}, base...), c.args...), io.Discard)
			if c.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.err) || strings.Contains(err.Error(), "planted-pw") {
				t.Fatalf("error %v, want one with %q and no password", err, c.err)
			}
		})
	}
}

// TestUpstreamCredential: the file wins over the environment; a file that is not user:password
// is refused naming the file, never its content.
func TestUpstreamCredential(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Setenv("LOCKHTTP_UPSTREAM_PROXY_AUTH", "env-user:env-pw")
	a, from, err := upstreamCredential(write("good", "alice:planted-pw-1\n"))
	if err != nil || from != "file" || a.User() != "alice" {
		t.Fatalf("from a file: %v %q %v", a, from, err)
	}
	if a, from, err = upstreamCredential(""); err != nil || from != "environment" || a.User() != "env-user" {
		t.Fatalf("from the environment: %v %q %v", a, from, err)
	}
	for _, c := range []struct{ name, content, err string }{
		{"no colon", "planted-pw-2\n", "is not user:password"},
		{"two lines", "alice:planted-pw-3\nbob:x\n", "control character"},
		{"empty", "", "is empty"},
	} {
		p := write(c.name, c.content)
		if _, _, err := upstreamCredential(p); err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), c.err) ||
			strings.Contains(err.Error(), "planted-pw") {
			t.Errorf("%s: error %v, want one naming %s with %q and no password", c.name, err, p, c.err)
		}
	}
	t.Setenv("LOCKHTTP_UPSTREAM_PROXY_AUTH", "")
	if a, from, err := upstreamCredential(""); err != nil || from != "none" || a != nil {
		t.Fatalf("none: %v %q %v", a, from, err)
	}
}

// TestParseMutualTLS: an https:// -console or -hub needs the gate's identity (-tls-cert,
// -tls-key, -tls-ca) and no token; the identity's flags without either are a usage error.
func TestParseMutualTLS(t *testing.T) {
	ident := []string{"-tls-cert", "/f/gate.pem", "-tls-key", "/f/gate-key.pem", "-tls-ca", "/f/ca.pem"}
	for _, c := range []struct {
		name string
		args []string
		err  string
	}{
		{"unix console, token hub", []string{"-console", "/s/console.sock", "-hub", "http://h:3131", "-hub-token", "/s/t", "-hub-key", "/s/k.pub"}, ""},
		{"TLS console and hub", append([]string{"-console", "https://console:8443", "-hub", "https://console:8444", "-hub-key", "/s/k.pub"}, ident...), ""},
		{"TLS console, no identity", []string{"-console", "https://console:8443"}, "mutual TLS needs -tls-cert, -tls-key and -tls-ca"},
		{"TLS hub, no CA", []string{"-console", "/s/console.sock", "-hub", "https://console:8444", "-hub-key", "/s/k.pub", "-tls-key", "/f/k", "-tls-cert", "/f/c"}, "mutual TLS needs"},
		{"TLS hub with a token", append([]string{"-console", "/s/console.sock", "-hub", "https://console:8444", "-hub-key", "/s/k.pub", "-hub-token", "/s/t"}, ident...), "-hub-token is for an http:// -hub"},
		{"token hub without token", []string{"-console", "/s/console.sock", "-hub", "http://h:3131", "-hub-key", "/s/k.pub"}, "-hub needs -hub-token"},
		{"TLS hub without the hub's key", append([]string{"-console", "/s/console.sock", "-hub", "https://h:1"}, ident...), "-hub needs -hub-key"},
		{"identity without TLS", append([]string{"-console", "/s/console.sock"}, ident...), "are for an https:// -console, -hub or -signer"},
		{"TLS signer, no identity", []string{"-console", "/s/console.sock", "-signer", "https://signer:8445"}, "an https:// -console, -hub or -signer: mutual TLS needs"},
		{"bad console identity", append([]string{"-console", "https://c:1", "-tls-console", "console/*"}, ident...), "identity pattern"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o, err := parse(append([]string{"-audit", "/s/audit"}, c.args...), io.Discard)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one with %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.tlsConsoles.String() != defaultTLSConsoles {
				t.Errorf("consoles admitted %q, want %s", o.tlsConsoles.String(), defaultTLSConsoles)
			}
		})
	}
}
