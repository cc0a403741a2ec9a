package stack

import (
	"slices"
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/tracing"
)

// TestCheckOTLPEndpoint: lox accepts and refuses the collector URLs the gate does, so that a
// URL lox lets through never stops the gate.
func TestCheckOTLPEndpoint(t *testing.T) {
	for _, c := range []struct{ name, in, err string }{
		{"a collector", "http://127.0.0.1:4318", ""},
		{"https with a path", "https://otel.example/otlp/v1/traces", ""},
		{"no scheme", "127.0.0.1:4318", "write the collector's OTLP/HTTP URL"},
		{"grpc", "grpc://c:4317", "write the collector's OTLP/HTTP URL"},
		{"no host", "http:///v1/traces", "write the collector's OTLP/HTTP URL"},
		{"user info", "http://u:p@c:4318", "OTEL_EXPORTER_OTLP_HEADERS"},
		{"a query", "http://c:4318/?k=v", "a query or fragment"},
		{"a fragment", "http://c:4318/#f", "a query or fragment"},
		{"not a URL", "http://[::1", "write the collector's OTLP/HTTP URL"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := CheckOTLPEndpoint(c.in)
			_, gateErr := tracing.ParseEndpoint(c.in)
			if (err == nil) != (gateErr == nil) {
				t.Fatalf("lox: %v; the gate: %v", err, gateErr)
			}
			if c.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.err) || !strings.HasPrefix(err.Error(), "--otlp-endpoint ") {
				t.Fatalf("error %v, want one starting --otlp-endpoint with %q", err, c.err)
			}
		})
	}
	if CheckOTLPEndpoint("") != nil {
		t.Error("no endpoint (no traces) refused")
	}
}

// TestGateArgsOTLP: the gate gets -otlp-endpoint only when lox run was given one.
func TestGateArgsOTLP(t *testing.T) {
	up := &Up{ConsoleSocket: "/s/c", AuditDir: "/s/a", GateSocket: "/s/g", SignerSocket: "/s/s", Hub: "http://127.0.0.1:1"}
	args, err := gateArgs(Options{OTLPEndpoint: "http://127.0.0.1:4318"}, "127.0.0.1:0", up, "/s/tok", "/s/k")
	if i := slices.Index(args, "-otlp-endpoint"); err != nil || i < 0 || i+1 >= len(args) || args[i+1] != "http://127.0.0.1:4318" {
		t.Errorf("gate args %q, %v; want -otlp-endpoint http://127.0.0.1:4318", args, err)
	}
	if args, _ := gateArgs(Options{}, "127.0.0.1:0", up, "/s/tok", "/s/k"); slices.Contains(args, "-otlp-endpoint") {
		t.Errorf("-otlp-endpoint without an endpoint: %q", args)
	}
}
