package main

import (
	"io"
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
